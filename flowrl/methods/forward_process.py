"""The pieces that forward-process methods share (RAM, DiffusionNFT): no SDE, no log-probs.

Such a method samples clean endpoints x0 with a deterministic ODE solver, has them rewarded once, and
trains on fresh noisings of them: x_t = (1 - t) x0 + t eps, t drawn from p(t) ∝ t^alpha, K draws per
endpoint. Its loss needs v_theta(x_t) with grad and, without grad, the velocities of other weights at
the same x_t (the reference, the lagged policy θ_old). Those weights do not change within an
iteration, so they are evaluated once, at exploration, and kept with the endpoints: each training
forward is then the policy's alone.

``Endpoints`` is the training unit (the interface of ``flowrl.rollout.Trajectory`` the trainer uses):
its "transitions" are the K noisings of each row.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field, replace

import torch

from flowrl.config import ConfigError
from flowrl.methods.base import Context, Experience, Method, PromptBatch
from flowrl.plan import ode_plan
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

        return replace(self, x0=pick(self.x0), t=pick(self.t), noise=pick(self.noise), prompt_ids=pick(self.prompt_ids),
                       velocities={k: pick(v) for k, v in self.velocities.items()})


def sample_times(alpha: float, shape: tuple[int, ...], generator: torch.Generator | None = None,
                 device: torch.device | str = "cpu") -> torch.Tensor:
    """t ~ p(t) ∝ t^alpha on [0, 1] by the inverse CDF, t = u^(1 / (alpha + 1)) (alpha = 0: uniform;
    alpha = 1, RAM's: mean 2/3, median 1/sqrt 2, P(t < 1/2) = 1/4)."""
    u = torch.rand(shape, generator=generator, device=device, dtype=torch.float64)
    return u.pow(1.0 / (alpha + 1.0)).float()


def ramp_decay(rate: float, cap: float):
    """The lagged policy's decay at its k-th update: d_k = min(rate k, cap) (RAM: 0.01 and 0.9, so
    d_1 = 0.01, d_50 = 0.5, d_k = 0.9 from k = 90)."""
    def decay_at(k: int) -> float:
        return min(rate * k, cap)

    return decay_at


@dataclass
class ForwardProcessOptions:
    """Options every forward-process method has (a method's own options extend these)."""

    num_noisings: int = 8  # K: noisings of each endpoint, each a loss item
    time_alpha: float = 1.0  # t ~ p(t) ∝ t^alpha (0: uniform)
    endpoint_policy: str = "old"  # which weights sample the endpoints: old (the lagged θ_old) | current
    old_decay_rate: float = 0.01  # θ_old <- d θ_old + (1 - d) θ after each iteration, d = min(rate k, max)
    old_decay_max: float = 0.9  # the largest decay of θ_old

    def __post_init__(self):
        if self.num_noisings < 1:
            raise ConfigError(f"method.options.num_noisings: must be >= 1, got {self.num_noisings}")
        if self.time_alpha <= -1:
            raise ConfigError(f"method.options.time_alpha: must be > -1 (p(t) ∝ t^alpha), got {self.time_alpha}")
        if self.endpoint_policy not in ("old", "current"):
            raise ConfigError(f"method.options.endpoint_policy: {self.endpoint_policy!r}; allowed: old, current")
        if self.old_decay_rate < 0:
            raise ConfigError(f"method.options.old_decay_rate: must be >= 0, got {self.old_decay_rate}")
        if not 0 <= self.old_decay_max < 1:
            raise ConfigError(f"method.options.old_decay_max: must be in [0, 1), got {self.old_decay_max}")


class ForwardProcess(Method):
    """Exploration shared by forward-process methods: ODE endpoints, rewarded once, K noisings each,
    with the no-grad velocities the loss needs (``target_weights``) evaluated once per noising."""

    Options = ForwardProcessOptions
    drops_flat_rows = False  # a row of a flat group still trains (towards the reference, for RAM)
    checks_onpolicy = False  # no per-step log-probs

    def __init__(self, cfg):
        super().__init__(cfg)
        if cfg.sample.same_noise_in_group:
            raise ConfigError(
                f"method {self.name} samples its endpoints with a deterministic ODE, so sample.same_noise_in_group="
                f"true would make every member of a group the same image: set it to false"
            )

    def averages(self):
        o = self.options
        return {"old": ramp_decay(o.old_decay_rate, o.old_decay_max)}

    def target_weights(self) -> tuple[str, ...]:
        """The weights whose velocities at x_t the loss needs: "ref", "old", "current"."""
        raise NotImplementedError

    def _weights(self, ctx: Context, name: str):
        if name == "ref":
            return ctx.reference_weights()
        if name == "old":
            return ctx.average_weights("old")
        return nullcontext(None)

    def explore(self, ctx: Context, batch: PromptBatch) -> Experience:
        o = self.options
        # the ODE sampler of sample.* (steps, guidance), under θ_old swapped in or the current weights
        with self._weights(ctx, o.endpoint_policy):
            x0 = ctx.rollout(ode_plan(ctx.sigmas()), batch.noise, batch.cond, batch.group_ids, None).final
        b, k = len(x0), o.num_noisings
        gen = ctx.generator("noising", batch.position)
        t = sample_times(o.time_alpha, (b, k), gen, ctx.device)
        noise = torch.randn((b, k, *x0.shape[1:]), generator=gen, device=ctx.device, dtype=torch.float32)
        unit = Endpoints(x0.float(), t, noise, batch.group_ids)
        scale = ctx.conditional_scale
        for name in self.target_weights():
            with torch.no_grad(), self._weights(ctx, name) as model:
                unit.velocities[name] = torch.stack(
                    [ctx.velocity(unit.x_t(j), unit.t[:, j], batch.cond, guidance_scale=scale, model=model)
                     for j in range(k)], dim=1)
        return Experience(unit, {"final": x0})
