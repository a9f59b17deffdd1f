"""The pieces that forward-process methods share (RAM, DiffusionNFT): no SDE, no log-probs.

Such a method samples clean endpoints x0 with a deterministic ODE solver (``endpoint_solver``: Euler, or the
multistep second-order DPM-Solver++ "dpm2"), has them rewarded once, and trains on fresh noisings of them:
x_t = (1 - t) x0 + t eps, K per endpoint, t drawn from p(t) ∝ t^alpha (``time_law=power``) or K distinct points
of the sampling grid (``time_law=grid``, DiffusionNFT's). Its loss needs v_theta(x_t) with grad and, without
grad, the velocities of other weights at the same x_t (the reference, the lagged policy θ_old). Those weights
do not change within an iteration, so they are evaluated once, at exploration, and kept with the endpoints:
each training forward is then the policy's alone.

``Endpoints`` is the training unit (the interface of ``flowrl.rollout.Trajectory`` the trainer uses):
its "transitions" are the K noisings of each row.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import torch

from flowrl.configkit import ConfigError
from flowrl.media import MediaKind
from flowrl.methods.base import Context, Experience, MethodBase, PromptBatch
from flowrl.methods.seam import Needs
from flowrl.pipelines.base import Conditioning
from flowrl.plan import ODE_SOLVERS, ode_plan
from flowrl.rollout import states_moved


@dataclass
class Endpoints:
    """B clean endpoints and K noisings of each.

    x0:          (B, C, H, W) the endpoints (fp32)
    t:           (B, K) the noising times in [0, 1]
    noise:       (B, K, C, H, W) the noise eps of each noising
    prompt_ids:  (B,) each row's prompt group
    velocities:  name -> (B, K, C, H, W) no-grad velocities at x_t under named weights ("ref", "old")
    """

    x0: torch.Tensor
    t: torch.Tensor
    noise: torch.Tensor
    prompt_ids: torch.Tensor
    velocities: dict[str, torch.Tensor] = field(default_factory=dict)
    row_mask: None = None  # every row trains every noising

    def __len__(self) -> int:
        return self.x0.shape[0]

    @property
    def trained_indices(self) -> tuple[int, ...]:
        return tuple(range(self.t.shape[1]))

    @property
    def final(self) -> torch.Tensor:
        return self.x0

    def x_t(self, k: int) -> torch.Tensor:
        """The k-th noising of every row, (B, C, H, W): (1 - t) x0 + t eps."""
        t = self.t[:, k].view(-1, *[1] * (self.x0.ndim - 1))
        return (1 - t) * self.x0 + t * self.noise[:, k]

    def trained_only(self) -> Endpoints:
        return self

    def states_to(self, device: torch.device) -> Endpoints:
        """The endpoints, noise and stored velocities on ``device`` (``train.offload_states``)."""
        return states_moved(self, ("x0", "noise", "velocities"), device)

    def select(self, rows: torch.Tensor) -> Endpoints:
        if rows.dtype == torch.bool:
            rows = rows.nonzero().flatten()

        def pick(t: torch.Tensor) -> torch.Tensor:
            return t.index_select(0, rows.to(t.device))

        return replace(
            self,
            x0=pick(self.x0),
            t=pick(self.t),
            noise=pick(self.noise),
            prompt_ids=pick(self.prompt_ids),
            velocities={k: pick(v) for k, v in self.velocities.items()},
        )


def sample_times(
    alpha: float, shape: tuple[int, ...], generator: torch.Generator | None = None, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """t ~ p(t) ∝ t^alpha on [0, 1] by the inverse CDF, t = u^(1 / (alpha + 1)) (alpha = 0: uniform;
    alpha = 1, RAM's: mean 2/3, median 1/sqrt 2, P(t < 1/2) = 1/4)."""
    u = torch.rand(shape, generator=generator, device=device, dtype=torch.float64)
    return u.pow(1.0 / (alpha + 1.0)).float()


def grid_times(
    grid: torch.Tensor,
    shape: tuple[int, int],
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """(B, K) times: for each of the B rows, K distinct points of ``grid`` (N,) drawn without replacement, in a
    uniformly random order (a random permutation of the grid per row, its first K). DiffusionNFT
    (NVlabs/DiffusionNFT scripts/train_nft_sd3.py @ 24af555: ``perms_time``, then ``range(num_train_timesteps)``)
    trains every sample at 9 of the 10 sigmas of its sampling schedule this way."""
    b, k = shape
    if not 1 <= k <= len(grid):
        raise ValueError(f"{k} distinct times asked of a grid of {len(grid)}")
    order = torch.rand((b, len(grid)), generator=generator, device=device, dtype=torch.float64).argsort(dim=1)
    return grid.float().to(device)[order[:, :k]]


def ramp_decay(rate: float, cap: float, flat: int = 0):
    """The lagged policy's decay at count s: d = 0 while s < flat, then min(rate (s - flat), cap) (RAM: 0.01 and
    0.9, so d_1 = 0.01, d_50 = 0.5, d = 0.9 from 90; DiffusionNFT's OCR config: flat 75, 0.0075 and 0.999, so
    d = 0 up to 75, d_76 = 0.0075, d_100 = 0.1875, 0.999 from 209)."""

    def decay_at(k: int) -> float:
        if k < flat:
            return 0.0
        return min(rate * (k - flat), cap)

    return decay_at


@dataclass
class ForwardProcessOptions:
    """Options every forward-process method has (a method's own options extend these)."""

    # K: noisings of each endpoint, each a loss item; None (time_law=grid only): int(0.99 N) of the N grid
    # points, DiffusionNFT's int(num_steps * timestep_fraction)
    num_noisings: int | None = 8
    # the noising times: power (t ~ p(t) ∝ t^alpha on [0, 1]) | grid (K distinct sigmas of the sampling schedule,
    # sigma_0 .. sigma_{N-1}, drawn per endpoint without replacement)
    time_law: str = "power"
    time_alpha: float = 1.0  # time_law=power: t ~ p(t) ∝ t^alpha (0: uniform)
    endpoint_solver: str = "euler"  # the endpoints' ODE solver over sample.num_steps: euler | dpm2
    endpoint_policy: str = "old"  # which weights sample the endpoints: old (the lagged θ_old) | current
    # θ_old <- d θ_old + (1 - d) θ after each iteration, d = 0 while s < flat, then min(rate (s - flat), max),
    # s the count of old_decay_unit so far
    old_decay_rate: float = 0.01
    old_decay_max: float = 0.9  # the largest decay of θ_old
    old_decay_flat: int = 0  # d = 0 (θ_old = θ) while the count is below this
    # what s counts: update (θ_old's updates, one an iteration) | optimizer_step (after update k:
    # k x train.optimizer_steps_per_iteration)
    old_decay_unit: str = "update"

    TIME_LAWS: ClassVar[tuple[str, ...]] = ("power", "grid")  # a method's own options may add one

    def __post_init__(self):
        if self.num_noisings is not None and self.num_noisings < 1:
            raise ConfigError(f"method.options.num_noisings: must be >= 1, got {self.num_noisings}")
        if self.time_law not in self.TIME_LAWS:
            raise ConfigError(f"method.options.time_law: {self.time_law!r}; allowed: {', '.join(self.TIME_LAWS)}")
        if self.num_noisings is None and self.time_law == "power":
            raise ConfigError("method.options.num_noisings: null (int(0.99 N) grid points) needs time_law=grid")
        if self.time_alpha <= -1:
            raise ConfigError(f"method.options.time_alpha: must be > -1 (p(t) ∝ t^alpha), got {self.time_alpha}")
        if self.endpoint_solver not in ODE_SOLVERS:
            raise ConfigError(
                f"method.options.endpoint_solver: {self.endpoint_solver!r}; allowed: {', '.join(ODE_SOLVERS)}"
            )
        if self.endpoint_policy not in ("old", "current"):
            raise ConfigError(f"method.options.endpoint_policy: {self.endpoint_policy!r}; allowed: old, current")
        if self.old_decay_rate < 0:
            raise ConfigError(f"method.options.old_decay_rate: must be >= 0, got {self.old_decay_rate}")
        if not 0 <= self.old_decay_max < 1:
            raise ConfigError(f"method.options.old_decay_max: must be in [0, 1), got {self.old_decay_max}")
        if self.old_decay_flat < 0:
            raise ConfigError(f"method.options.old_decay_flat: must be >= 0, got {self.old_decay_flat}")
        if self.old_decay_unit not in ("update", "optimizer_step"):
            raise ConfigError(
                f"method.options.old_decay_unit: {self.old_decay_unit!r}; allowed: update, optimizer_step"
            )


class ForwardProcess(MethodBase):
    """Exploration shared by forward-process methods: ODE endpoints, rewarded once, K noisings each,
    with the no-grad velocities the loss needs (``target_weights``) evaluated once per noising."""

    # one latent tensor per sample: joint audio-video latents (a mapping of modalities) are not taken yet
    media = (MediaKind.IMAGE, MediaKind.VIDEO, MediaKind.AUDIO)

    Options = ForwardProcessOptions
    # a forward-process loss (``keeps_flat_rows``) still trains a row of a flat group (towards the reference,
    # for RAM); it records no per-step log-probs, so the on-policy check does not apply

    def __init__(self, cfg):
        super().__init__(cfg)
        if cfg.sample.same_noise_in_group and self.deterministic_endpoints():
            raise ConfigError(
                f"method {self.name} samples its endpoints with a deterministic ODE, so sample.same_noise_in_group="
                f"true would make every member of a group the same image: set it to false"
            )
        o, n = self.options, cfg.sample.num_steps
        if o.time_law == "grid" and o.num_noisings is not None and o.num_noisings > n:
            raise ConfigError(
                f"method.options.num_noisings: {o.num_noisings} distinct grid times, but the sampling "
                f"grid has sample.num_steps={n}"
            )

    @property
    def num_noisings(self) -> int:
        """K: ``num_noisings``, or int(0.99 N) of the N = ``sample.num_steps`` grid points (at least 1)."""
        k = self.options.num_noisings
        return k if k is not None else max(1, int(self.cfg.sample.num_steps * 0.99))

    def records(self) -> frozenset[str]:
        return frozenset({"endpoints"})

    def needs(self) -> Needs:
        return Needs(
            media=self.media,
            reference=self.uses_reference(),
            averages=self.averages(),
            onpolicy_check="it records no per-step log-probs to recompute",
            metrics=self.parts.credit.metrics,
        )

    def uses_reference(self) -> bool:
        """The loss reads the reference weights (full fine-tuning then keeps a frozen copy)."""
        return "ref" in self.target_weights()

    def averages(self) -> dict[str, Any]:
        """The lagged policy θ_old: a function of the update count k (from 1) to its decay d_k."""
        o = self.options
        ramp = ramp_decay(o.old_decay_rate, o.old_decay_max, o.old_decay_flat)
        if o.old_decay_unit == "update":
            return {"old": ramp}
        # the optimizer steps after update k: k times the steps of one iteration's schedule (the default's
        # train.optimizer_steps_per_iteration, RAM's 1), as long as an iteration holds at least that many rollout
        # batches (the released configs hold 16 or more per GPU); a forward-process method skips no step, every
        # row trains
        per_update = len(self.schedule(self.cfg.train.optimizer_steps_per_iteration))
        return {"old": lambda k: ramp(k * per_update)}

    def target_weights(self) -> tuple[str, ...]:
        """The weights whose velocities at x_t the loss needs: "ref", "old", "current"."""
        raise NotImplementedError

    def _weights(self, ctx: Context, name: str):
        if name == "ref":
            return ctx.reference_weights()
        if name == "old":
            return ctx.average_weights("old")
        return nullcontext(None)

    def deterministic_endpoints(self) -> bool:
        """Whether the endpoints are a deterministic function of the initial noise (an ODE sampler)."""
        return True

    def endpoints(self, ctx: Context, batch: PromptBatch) -> torch.Tensor:
        """The batch's clean endpoints x0 (B, C, H, W): the ODE sampler of sample.* (steps, guidance), under θ_old
        swapped in or the current weights (``endpoint_policy``)."""
        o = self.options
        with self._weights(ctx, o.endpoint_policy):
            plan = ode_plan(ctx.sigmas(), o.endpoint_solver)
            return ctx.rollout(plan, batch.noise, batch.cond, batch.group_ids, None).final

    def noising_times(self, sigmas: torch.Tensor, shape: tuple[int, int], gen: torch.Generator, device) -> torch.Tensor:
        """(B, K) noising times by ``time_law`` (``sigmas``: the sampling schedule, N + 1 values)."""
        o = self.options
        if o.time_law == "grid":
            return grid_times(sigmas[:-1], shape, gen, device)
        return sample_times(o.time_alpha, shape, gen, device)

    def explore(self, ctx: Context, batch: PromptBatch) -> Experience:
        x0 = self.endpoints(ctx, batch)
        b, k = len(x0), self.num_noisings
        gen = ctx.generator("noising", batch.position)
        t = self.noising_times(ctx.sigmas(), (b, k), gen, ctx.device)
        noise = torch.randn((b, k, *x0.shape[1:]), generator=gen, device=ctx.device, dtype=torch.float32)
        unit = Endpoints(x0.float(), t, noise, batch.group_ids)
        for name in self.target_weights():
            self.target_velocities(ctx, unit, batch.cond, name, ctx.conditional_scale)
        return Experience(unit, {"final": x0})

    def target_velocities(self, ctx: Context, unit: Endpoints, cond: Conditioning, name: str, scale: float) -> None:
        """``unit.velocities[name]``: the velocity of the ``name`` weights at each of the unit's K noisings, with
        guidance ``scale`` and no gradient, (B, K, ...)."""
        with torch.no_grad(), self._weights(ctx, name) as model:
            unit.velocities[name] = torch.stack(
                [
                    ctx.velocity(unit.x_t(j), unit.t[:, j], cond, guidance_scale=scale, model=model)
                    for j in range(self.num_noisings)
                ],
                dim=1,
            )
