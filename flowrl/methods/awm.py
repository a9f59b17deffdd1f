"""AWM, Advantage Weighted Matching (arXiv 2509.25050; the authors' code: scxue/advantage_weighted_matching
``scripts/train_sd3_awm.py`` and ``config/dgx_awm.py``; also X-GenGroup/Flow-Factory ``trainers/awm.py`` and
Duanyll/flow-control ``training/awm.py``).

A forward-process method on RAM's and DiffusionNFT's pieces (``forward_process``): each endpoint x0 of the rollout
is rewarded once and re-noised K times, x_t = (1 - t) x0 + t eps, and the pretraining flow-matching loss
l = mean (v_theta(x_t, t) - (eps - x0))^2 becomes a surrogate log-likelihood log p = -w(l, t) (``surrogate_log_prob``:
uniform l, t l, t^2 l, Huber t (sqrt(l + e) - sqrt e'), generalised Huber (t / p)((l + e)^p - e^p)). The policy
gradient is Flow-GRPO's clipped ratio exp(log p_theta - log p_old) times the advantage, the advantage scaled by
advantage_max / adv_clip_max as the authors do; plus kl_beta ||v_theta - v_ref||^2 and ema_kl_beta
||v_theta - v_ema||^2, v_ema the velocity of a slow average of the policy (the authors' "KL-EMA"; here the
forward-process θ_old, decay min(0.001 s, 0.3) after s optimizer steps).

The old log-prob, v_ref and v_ema do not change within an iteration, so they are evaluated once per noising at
exploration (log p_old from the velocity of the weights that are current then: the policy that sampled); each
training forward is then the policy's alone. The times are the authors' ``discrete_wo_init``: K strata of the
sampling grid's indices 1 .. int(N time_fraction), one index drawn in each (``strata_times``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from flowrl.configkit import ConfigError
from flowrl.losses import ppo_clip_loss
from flowrl.methods.base import Context, PromptBatch, TransitionLoss
from flowrl.methods.forward_process import Endpoints, ForwardProcess, ForwardProcessOptions
from flowrl.methods.options import AdvantageClipOptions, GroupZScoreOptions, check_knobs
from flowrl.pipelines.base import Conditioning
from flowrl.plan import make_plan

WEIGHTINGS = ("uniform", "t", "t2", "huber", "ghuber")
_EPS = 1e-10  # the authors' epsilon inside the Huber losses


def surrogate_log_prob(loss: torch.Tensor, t: torch.Tensor, weighting: str, power: float = 0.25) -> torch.Tensor:
    """AWM's log p = -w(l, t) per row, in float64 as the authors compute it (``compute_log_prob_awm``): l (B,) the
    mean squared velocity error, t (B,) the noising time. uniform: l; t: t l; t2: t^2 l; huber: t (sqrt(l + 1e-10)
    - 1e-5); ghuber: (t / p)((l + 1e-10)^p - (1e-10)^p)."""
    loss, t = loss.double(), t.double().to(loss.device)
    if weighting == "uniform":
        w = loss
    elif weighting == "t":
        w = t * loss
    elif weighting == "t2":
        w = t**2 * loss
    elif weighting == "huber":
        w = t * (torch.sqrt(loss + _EPS) - _EPS**0.5)
    elif weighting == "ghuber":
        w = (t / power) * ((loss + _EPS) ** power - _EPS**power)
    else:
        raise ValueError(f"unknown AWM weighting {weighting!r}; choose one of {', '.join(WEIGHTINGS)}")
    return -w


def matching_loss(v: torch.Tensor, x0: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """l = mean over elements of (v - (eps - x0))^2 per row, (B,), in float64."""
    err = v.double() - (noise.double() - x0.double())
    return err.pow(2).mean(dim=tuple(range(1, err.ndim)))


def strata_times(
    grid: torch.Tensor,
    shape: tuple[int, int],
    fraction: float,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """(B, K) times of the sampling grid (N sigmas from 1, the last step's end left out), the authors'
    ``time_type=discrete_wo_init``: the index range [1, int(N fraction)] cut into K strata at
    floor(linspace(1, int(N fraction), K + 1)), one index drawn uniformly in each stratum [lo, hi), per row.
    Index 0 (sigma 1, pure noise) is never drawn. SD3.5-M's 14 steps at 0.9: strata [1,2) [2,4) [4,6) [6,8)
    [8,10) [10,12)."""
    b, k = shape
    top = int(len(grid) * fraction)
    bounds = torch.linspace(1, top, k + 1, dtype=torch.float64).long()
    lo, hi = bounds[:-1], bounds[1:]
    if bool((hi <= lo).any()):
        raise ValueError(f"{k} strata of the grid indices [1, {top}] leave one empty (at most {top - 1})")
    u = torch.rand((b, k), generator=generator, device=device, dtype=torch.float64)
    index = lo.to(device) + (u * (hi - lo).to(device)).long()
    return grid.float().to(device)[index]


@dataclass
class AWMOptions(ForwardProcessOptions, GroupZScoreOptions, AdvantageClipOptions):
    """The official SD3.5-M config's values (``config/dgx_awm.py`` ``geneval_sd3_no_cfg_1node``) by default."""

    TIME_LAWS = ("power", "grid", "strata")

    # K; None (strata): the authors' train_timesteps 6, fewer where the grid holds fewer strata
    num_noisings: int | None = None
    time_law: str = "strata"  # the authors' discrete_wo_init (power | grid as RAM and DiffusionNFT)
    time_fraction: float = 0.9  # strata: the grid indices 1 .. int(N time_fraction) (the authors' timestep_fraction)
    weighting: str = "ghuber"  # uniform | t | t2 | huber | ghuber
    ghuber_power: float = 0.25  # p of the generalised Huber weighting
    clip_range: float = 1.0  # PPO clip of the ratio (the authors' 1: on-policy, one optimizer step an iteration)
    advantage_max: float = 1.0  # A <- clip(A, ±adv_clip_max) advantage_max / adv_clip_max
    # weight of ||v_theta - v_ref||^2 (0: no reference forward); the GenEval config's 0.001 since the authors'
    # be51372 (0.003 before; their OCR config keeps 0.003, PickScore 1e-4)
    kl_beta: float = 0.001
    ema_kl_beta: float = 1.0  # weight of ||v_theta - v_ema||^2, v_ema the slow average θ_old (0: none)
    # the endpoints' sampler: noise level of Flow-GRPO's flow_sde over sample.num_steps (the authors sample with a
    # stochastic SA-Solver at noise 0.4); 0: the deterministic endpoint_solver
    endpoint_noise_level: float = 0.4
    endpoint_policy: str = "current"  # the authors' on-policy sampling (off_policy false)
    # the KL-EMA: d = min(0.001 s, 0.3) after s optimizer steps (kl_ema_decay 0.3, linear)
    old_decay_rate: float = 0.001
    old_decay_max: float = 0.3
    old_decay_unit: str = "optimizer_step"

    def __post_init__(self):
        super().__post_init__()
        check_knobs(self)
        if self.weighting not in WEIGHTINGS:
            raise ConfigError(f"method.options.weighting: {self.weighting!r}; allowed: {', '.join(WEIGHTINGS)}")
        for name in ("ghuber_power", "clip_range", "advantage_max"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"method.options.{name}: must be > 0, got {getattr(self, name)}")
        for name in ("kl_beta", "ema_kl_beta", "endpoint_noise_level"):
            if getattr(self, name) < 0:
                raise ConfigError(f"method.options.{name}: must be >= 0, got {getattr(self, name)}")
        if not 0 < self.time_fraction <= 1:
            raise ConfigError(f"method.options.time_fraction: must be in (0, 1], got {self.time_fraction}")


class AWM(ForwardProcess):
    name = "awm"
    Options = AWMOptions
    default_credit = "group_zscore"
    keeps_flat_rows = True  # its regression pulls every row, a 0 advantage too

    def __init__(self, cfg):
        super().__init__(cfg)
        o, n = self.options, cfg.sample.num_steps
        top = int(n * o.time_fraction)
        if o.time_law == "strata" and top < 2:
            raise ConfigError(
                f"method.options.time_fraction: the grid indices [1, {top}] of sample.num_steps={n} hold no time "
                f"stratum; raise time_fraction or sample.num_steps"
            )
        if o.time_law == "strata" and self.num_noisings > top - 1:
            raise ConfigError(
                f"method.options.num_noisings: {self.num_noisings} strata of the grid indices [1, {top}] "
                f"(sample.num_steps={n}, time_fraction={o.time_fraction}) leave one empty: at most {top - 1}"
            )

    @property
    def num_noisings(self) -> int:
        """K: ``num_noisings``; None with strata: 6 (the authors'), at most the strata the grid holds."""
        o = self.options
        if o.num_noisings is None and o.time_law == "strata":
            return max(1, min(6, int(self.cfg.sample.num_steps * o.time_fraction) - 1))
        return super().num_noisings

    def deterministic_endpoints(self) -> bool:
        return self.options.endpoint_noise_level == 0

    def target_weights(self) -> tuple[str, ...]:
        o = self.options
        return ("current",) + (("ref",) if o.kl_beta > 0 else ()) + (("old",) if o.ema_kl_beta > 0 else ())

    def endpoints(self, ctx: Context, batch: PromptBatch) -> torch.Tensor:
        """The endpoints by Flow-GRPO's flow_sde at ``endpoint_noise_level`` (no step trains), from the stream
        ("sde", batch position); at 0, the ODE ``endpoint_solver``."""
        o = self.options
        if self.deterministic_endpoints():
            return super().endpoints(ctx, batch)
        plan = make_plan(ctx.sigmas(), "flow_sde", o.endpoint_noise_level, timestep_fraction=1.0)
        plan = replace(plan, train=torch.zeros_like(plan.train))
        gen = ctx.generator("sde", batch.position)
        with self._weights(ctx, o.endpoint_policy):
            return ctx.rollout(plan, batch.noise, batch.cond, batch.group_ids, gen, keep_all_states=False).final

    def noising_times(self, sigmas: torch.Tensor, shape: tuple[int, int], gen: torch.Generator, device) -> torch.Tensor:
        if self.options.time_law == "strata":
            return strata_times(sigmas[:-1], shape, self.options.time_fraction, gen, device)
        return super().noising_times(sigmas, shape, gen, device)

    def transition_loss(
        self, ctx: Context, traj: Endpoints, j: int, cond: Conditioning, advantages: torch.Tensor
    ) -> TransitionLoss:
        """The loss part ``awm``: the clipped ratio of the surrogate log-probs times the scaled advantage, plus the
        velocity KLs to the reference and to the slow average."""
        o = self.options
        x_t, t, noise = traj.x_t(j), traj.t[:, j], traj.noise[:, j]
        v = ctx.velocity(x_t, t, cond, guidance_scale=ctx.conditional_scale)
        log_p = surrogate_log_prob(matching_loss(v, traj.x0, noise), t, o.weighting, o.ghuber_power)
        with torch.no_grad():
            old = matching_loss(traj.velocities["current"][:, j], traj.x0, noise)
            log_p_old = surrogate_log_prob(old, t, o.weighting, o.ghuber_power)
        adv = advantages.double().clamp(-o.adv_clip_max, o.adv_clip_max) * (o.advantage_max / o.adv_clip_max)
        pg = ppo_clip_loss(log_p, log_p_old, adv.to(log_p.device), o.clip_range)
        policy = pg.loss.float()
        loss, kl = policy, None
        if o.kl_beta > 0:
            kl = (v - traj.velocities["ref"][:, j]).pow(2).mean()
            loss = loss + o.kl_beta * kl
            kl = kl.detach()
        if o.ema_kl_beta > 0:
            loss = loss + o.ema_kl_beta * (v - traj.velocities["old"][:, j]).pow(2).mean()
        ratio = pg.ratio.float()
        return TransitionLoss(loss, policy.detach(), kl, pg.clip_frac.float(), pg.approx_kl.float(), ratio.mean())
