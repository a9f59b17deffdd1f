"""DGPO, Direct Group Preference Optimization (Luo, Hu, Tang, ICLR 2026, arXiv 2510.08425; the authors' code:
Luo-Yihong/DGPO ``scripts/train_sd3_dgpo.py`` and ``config/dgpo*.py``; Flow-Factory ``trainers/dgpo.py``). Math:
``flowrl.preference``.

Each group of ODE endpoints (``endpoint_solver``, the authors' DPM-Solver; ``sample.*`` steps and CFG) is rewarded
once and split by the sign of its z-scored advantage A into G+ and G-. DGPO maximises log sigmoid(R(G+) - R(G-)),
a group's reward the |A|-weighted sum of its members' implicit rewards beta_dpo (err_ref - err_theta), so the
partition function cancels. Its gradient is each member's error weighted by A and by sigmoid(S_g), S_g = sum_i
A_i beta_dpo (err_i - err_ref,i) / G over the member's group (``dgpo_group_weights``): L = mean w A err. All
members of a group train in one unit (``Needs.whole_groups``), so S_g is whole on any process.

The noisings: K times (``num_noisings``, the authors' 4) drawn without replacement from the first
``trunc_steps`` + 1 sigmas of the sampling grid, the same for every sample of the iteration, and one noise per
prompt group and time, shared by its members (``use_shared_noise``). The reference velocity (at CFG ``kl_cfg``)
and, for the PPO-style clip or ``use_ema_ref``, the old policy's are evaluated once at exploration
(``forward_process``). A row whose implicit ratio exp(err_old - err) has moved past 1 + clip (A > 0) or below
1 - clip (A <= 0) has its error detached. KL: kl_beta mean (v_theta - v_ref)^2. The old policy θ_old <- d θ_old +
(1 - d) θ after optimizer step s (from 1), d = min(0.001 (s - 1), 0.3) (the authors' ``ema_ref``).

The README's three modes: (1) rollout CFG 4.5, training without: beta_dpo 100, KL 1e-3, clip 1e-3; (2a) CFG-free,
frozen reference with CFG 4.5 (``kl_cfg``): beta_dpo 10-100, clip 1e-5; (2b) CFG-free with the old policy as the
reference (``use_ema_ref``): beta_dpo 2000-5000, clip 1e-5.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from flowrl.configkit import ConfigError
from flowrl.methods.base import Context, Experience, PromptBatch, TransitionLoss
from flowrl.methods.forward_process import Endpoints, ForwardProcess, ForwardProcessOptions, grid_times
from flowrl.methods.options import AdvantageClipOptions, GroupZScoreOptions, check_knobs
from flowrl.pipelines.base import Conditioning
from flowrl.plan import ode_plan
from flowrl.preference import dgpo_group_weights, dgpo_loss, dsm_clip_mask, velocity_error


@dataclass
class DGPOOptions(ForwardProcessOptions, GroupZScoreOptions, AdvantageClipOptions):
    """Mode 1 of the authors' README by default."""

    beta_dpo: float = 100.0  # the implicit rewards' scale (mode 2b: 2000-5000)
    clip_range: float = 1e-3  # the PPO-style clip of the implicit ratio (modes 2: 1e-5); 0: no clip
    kl_beta: float = 1e-3  # weight of mean (v_theta - v_ref)^2 (0: none)
    kl_cfg: float = 1.0  # the reference's CFG scale (> 1: two branches; mode 2a: 4.5)
    use_ema_ref: bool = False  # the old policy θ_old anchors the implicit rewards instead of the reference (2b)
    trunc_steps: int = 4  # the times come from the first trunc_steps + 1 sigmas of the sampling grid
    num_noisings: int | None = 4  # K times per iteration, shared by every sample
    time_law: str = "grid"  # (fixed: points of the grid's head, see trunc_steps)
    endpoint_solver: str = "dpm2"  # the authors' DPM-Solver (use_dpm)
    endpoint_policy: str = "current"  # the authors sample under θ until switch_ema_ref steps, then under θ_old
    # d = min(0.001 (s - 1), 0.3) at optimizer step s (from 1): the authors' decay reads global_step before its
    # increment (scripts/train_sd3_dgpo.py:1176), so the first update copies θ (d = 0)
    old_decay_rate: float = 0.001
    old_decay_max: float = 0.3
    old_decay_flat: int = 1
    old_decay_unit: str = "optimizer_step"

    def __post_init__(self):
        super().__post_init__()
        check_knobs(self)
        if self.beta_dpo <= 0:
            raise ConfigError(f"method.options.beta_dpo: must be > 0, got {self.beta_dpo}")
        if self.clip_range < 0:
            raise ConfigError(f"method.options.clip_range: must be >= 0 (0: no clip), got {self.clip_range}")
        if self.kl_beta < 0:
            raise ConfigError(f"method.options.kl_beta: must be >= 0, got {self.kl_beta}")
        if self.kl_cfg < 1:
            raise ConfigError(f"method.options.kl_cfg: must be >= 1 (1: no CFG), got {self.kl_cfg}")
        if self.time_law != "grid":
            raise ConfigError(
                f"method.options.time_law: DGPO draws from the grid's head (trunc_steps), got {self.time_law!r}"
            )
        if self.num_noisings is None or not 1 <= self.num_noisings <= self.trunc_steps + 1:
            raise ConfigError(
                f"method.options.num_noisings: {self.num_noisings} distinct times from the first trunc_steps + 1 = "
                f"{self.trunc_steps + 1} sigmas; give 1..{self.trunc_steps + 1}"
            )


class DGPO(ForwardProcess):
    name = "dgpo"
    Options = DGPOOptions
    default_credit = "group_zscore"

    def __init__(self, cfg):
        super().__init__(cfg)
        if self.options.trunc_steps >= cfg.sample.num_steps:
            raise ConfigError(
                f"method.options.trunc_steps: {self.options.trunc_steps} must be below sample.num_steps="
                f"{cfg.sample.num_steps} (the grid's head the times come from)"
            )

    def needs(self):
        return replace(super().needs(), whole_groups=True)  # a group's sum needs all its members

    def uses_old(self) -> bool:
        o = self.options
        return o.clip_range > 0 or o.use_ema_ref or o.endpoint_policy == "old"

    def averages(self) -> dict[str, Any]:
        return super().averages() if self.uses_old() else {}

    def target_weights(self) -> tuple[str, ...]:
        o = self.options
        ref = ("ref",) if o.kl_beta > 0 or not o.use_ema_ref else ()
        return ref + (("old",) if o.clip_range > 0 or o.use_ema_ref else ())

    def explore(self, ctx: Context, batch: PromptBatch) -> Experience:
        o = self.options
        sigmas = ctx.sigmas()
        with self._weights(ctx, o.endpoint_policy):
            x0 = ctx.rollout(ode_plan(sigmas, o.endpoint_solver), batch.noise, batch.cond, batch.group_ids, None).final
        x0 = x0.float()
        b, k, shape = len(x0), self.num_noisings, tuple(x0.shape[1:])
        # the iteration's K times, the same stream on every process and in every batch
        t = grid_times(sigmas[: o.trunc_steps + 1], (1, k), ctx.generator("dgpo_times", 0), ctx.device).expand(b, k)
        noises = {
            int(g): torch.randn((k, *shape), generator=ctx.generator("dgpo_noise", int(g)), device=ctx.device)
            for g in batch.group_ids.unique()
        }
        noise = torch.stack([noises[int(g)] for g in batch.group_ids])
        unit = Endpoints(x0, t.contiguous(), noise, batch.group_ids)
        for name in self.target_weights():
            scale = o.kl_cfg if name == "ref" and o.kl_cfg > 1 else ctx.conditional_scale
            self.target_velocities(ctx, unit, batch.cond, name, scale)
        return Experience(unit, {"final": x0})

    def transition_loss(
        self, ctx: Context, traj: Endpoints, j: int, cond: Conditioning, advantages: torch.Tensor
    ) -> TransitionLoss:
        """The loss part ``dgpo``: ``dgpo_loss`` with the clip, plus kl_beta times the velocity KL."""
        o = self.options
        x_t, t, noise = traj.x_t(j), traj.t[:, j], traj.noise[:, j]
        adv = advantages.float()
        v = ctx.velocity(x_t, t, cond, guidance_scale=ctx.conditional_scale)
        err = velocity_error(v, noise, traj.x0)
        clip_frac = None
        if o.clip_range > 0:
            old_err = velocity_error(traj.velocities["old"][:, j], noise, traj.x0)
            clipped = dsm_clip_mask(err, old_err, adv, o.clip_range)
            err = torch.where(clipped, err.detach(), err)
            clip_frac = clipped.float().mean().detach()
        anchor = velocity_error(traj.velocities["old" if o.use_ema_ref else "ref"][:, j], noise, traj.x0)
        weights = dgpo_group_weights(err, anchor, adv, traj.prompt_ids, o.beta_dpo, self.cfg.sample.group_size)
        policy = dgpo_loss(err, weights, adv)
        loss, kl = policy, None
        if o.kl_beta > 0:
            kl = (v - traj.velocities["ref"][:, j]).pow(2).flatten(1).mean(dim=1).mean()
            loss = policy + o.kl_beta * kl
            kl = kl.detach()
        return TransitionLoss(loss, policy.detach(), kl=kl, clip_frac=clip_frac)
