"""DiffusionNFT (arXiv 2509.16117; the authors' code: NVlabs/DiffusionNFT scripts/train_nft_sd3.py and
config/nft.py @ 24af555; spec: addon_methods.md, its Corrections section, and flow_grpo_core.md).

Forward-process RL on RAM's pieces (``forward_process``): clean endpoints under θ_old by the deterministic
multistep DPM-Solver++ of order 2 ("dpm2", on ``sample.num_steps`` steps; CFG-free when ``sample.guidance_scale``
is 1, as the authors' configs have it), rewarded once, then each trained at K = int(0.99 N) distinct sigmas of its
own sampling grid (9 of 10; a fresh noise each). The reward becomes an optimality weight r = clip(A / (2 A_max) +
1/2, 0, 1) (A the group advantage of ``method.options``' ``global_std`` / ``std_eps``, A_max = ``adv_clip_max``). With v_old the lagged policy's
velocity, the implicit positive and negative policies are v+ = beta v_theta + (1 - beta) v_old and v- = (1 + beta)
v_old - beta v_theta, and each predicts x0 as x_t - t v. The loss

    L = A_max [ r ||x0(v+) - x0||^2 / w+ + (1 - r) ||x0(v-) - x0||^2 / w- ] / beta + kl_beta ||v_theta - v_ref||^2

has per-sample adaptive weights w = mean |x0(v) - x0| (detached, at least 1e-5); the factor A_max (5) is the
authors' (``policy_loss = (ori_policy_loss * adv_clip_max).mean()``). At θ = θ_old with r = 1/2 the two terms'
gradients cancel: a sample of average reward pulls nowhere. θ_old <- d θ_old + (1 - d) θ after each iteration,
d a function of the optimizer steps so far (the authors' ``return_decay(global_step, decay_type)``): GenEval,
PickScore and HPS min(0.001 s, 0.5); OCR 0 up to s = 75, then min(0.0075 (s - 75), 0.999).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flowrl.configkit import ConfigError
from flowrl.methods.base import Context, TransitionLoss
from flowrl.methods.forward_process import Endpoints, ForwardProcess, ForwardProcessOptions
from flowrl.methods.options import AdvantageClipOptions, GroupZScoreOptions, check_knobs
from flowrl.pipelines.base import Conditioning


def optimality_weight(advantages: torch.Tensor, adv_max: float) -> torch.Tensor:
    """r = clip(A / (2 A_max) + 1/2, 0, 1)."""
    return (advantages.float() / (2 * adv_max) + 0.5).clamp(0.0, 1.0)


def nft_loss(
    v: torch.Tensor,
    v_old: torch.Tensor,
    x_t: torch.Tensor,
    t: torch.Tensor,
    x0: torch.Tensor,
    r: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """The negative-aware loss per row before the A_max factor (the authors' ``ori_policy_loss``), (B,):
    v, v_old, x_t, x0 (B, C, H, W); t, r (B,)."""
    dims = tuple(range(1, x0.ndim))
    t = t.view(-1, *[1] * (x0.ndim - 1))
    v_pos = beta * v + (1 - beta) * v_old
    v_neg = (1 + beta) * v_old - beta * v
    out = []
    for v_branch in (v_pos, v_neg):
        err = (x_t - t * v_branch) - x0
        weight = err.detach().abs().mean(dim=dims).clamp(min=1e-5)
        out.append(err.pow(2).mean(dim=dims) / weight)
    return (r * out[0] + (1 - r) * out[1]) / beta


@dataclass
class DiffusionNFTOptions(ForwardProcessOptions, GroupZScoreOptions, AdvantageClipOptions):
    """Flow-GRPO's group z-score (``group_zscore``: global_std, std_eps) and advantage clip, which is also A_max;
    ``beta`` is DiffusionNFT's own (the implicit policies' strength), not Flow-GRPO's KL weight: ``train.beta`` never
    set it."""

    beta: float = 1.0  # strength of the implicit positive / negative policies (the authors' OCR config: 0.1)
    kl_beta: float = 1e-4  # weight of ||v_theta - v_ref||^2 (0: no reference forward)
    num_noisings: int | None = None  # K; None: int(0.99 N) grid points, 9 of 10 (the authors' timestep_fraction)
    time_law: str = "grid"  # the authors': K distinct sigmas of the sampling grid (power: t ~ p(t) ∝ t^alpha)
    time_alpha: float = 0.0  # time_law=power only: t uniform on [0, 1]
    endpoint_solver: str = "dpm2"  # the authors' deterministic sampler (euler: plain Euler)
    old_decay_rate: float = 0.001  # θ_old follows θ closely: d = min(0.001 s, 0.5)
    old_decay_max: float = 0.5
    old_decay_unit: str = "optimizer_step"  # the authors count optimizer steps (global_step)

    def __post_init__(self):
        super().__post_init__()
        check_knobs(self)
        if self.beta <= 0:
            raise ConfigError(f"method.options.beta: must be > 0, got {self.beta}")
        if self.kl_beta < 0:
            raise ConfigError(f"method.options.kl_beta: must be >= 0, got {self.kl_beta}")


class DiffusionNFT(ForwardProcess):
    name = "diffusion_nft"
    Options = DiffusionNFTOptions
    default_credit = "group_zscore"
    keeps_flat_rows = True  # its regression pulls every row, a 0 advantage too

    def target_weights(self) -> tuple[str, ...]:
        return ("old", "ref") if self.options.kl_beta > 0 else ("old",)

    def transition_loss(
        self, ctx: Context, traj: Endpoints, j: int, cond: Conditioning, advantages: torch.Tensor
    ) -> TransitionLoss:
        """The loss part ``nft``: A_max times ``nft_loss`` plus kl_beta ||v_theta - v_ref||^2."""
        o = self.options
        x_t, t = traj.x_t(j), traj.t[:, j]
        v = ctx.velocity(x_t, t, cond, guidance_scale=ctx.conditional_scale)
        adv_max = self.options.adv_clip_max
        r = optimality_weight(advantages, adv_max)
        # the authors scale the policy term by adv_clip_max (train_nft_sd3.py: ori_policy_loss * adv_clip_max)
        policy = adv_max * nft_loss(v, traj.velocities["old"][:, j], x_t, t, traj.x0, r, o.beta).mean()
        loss, kl = policy, None
        if o.kl_beta > 0:
            kl = (v - traj.velocities["ref"][:, j]).pow(2).mean()
            loss = policy + o.kl_beta * kl
            kl = kl.detach()
        return TransitionLoss(loss, policy.detach(), kl=kl)
