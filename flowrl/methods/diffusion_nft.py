"""DiffusionNFT (arXiv 2509.16117; spec: flow_grpo_core.md, its DiffusionNFT paragraph).

Forward-process RL on RAM's pieces (``forward_process``): ODE endpoints under θ_old, rewarded once,
re-noised K times. The reward becomes an optimality weight r = clip(A / (2 A_max) + 1/2, 0, 1) (A the
group advantage of ``train.*``, A_max = ``train.adv_clip_max``). With v_old the lagged policy's
velocity, the implicit positive and negative policies are v+ = beta v_theta + (1 - beta) v_old and
v- = (1 + beta) v_old - beta v_theta, and each predicts x0 as x_t - t v. The loss

    L = [ r ||x0(v+) - x0||^2 / w+ + (1 - r) ||x0(v-) - x0||^2 / w- ] / beta + kl_beta ||v_theta - v_ref||^2

has per-sample adaptive weights w = mean |x0(v) - x0| (detached, at least 1e-5). At θ = θ_old with
r = 1/2 the two terms' gradients cancel: a sample of average reward pulls nowhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flowrl.advantages import clip_advantages, group_advantages
from flowrl.config import ConfigError
from flowrl.methods.base import Context, TransitionLoss
from flowrl.methods.forward_process import Endpoints, ForwardProcess, ForwardProcessOptions
from flowrl.pipelines.base import Conditioning


def optimality_weight(advantages: torch.Tensor, adv_max: float) -> torch.Tensor:
    """r = clip(A / (2 A_max) + 1/2, 0, 1)."""
    return (advantages.float() / (2 * adv_max) + 0.5).clamp(0.0, 1.0)


def nft_loss(v: torch.Tensor, v_old: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor, x0: torch.Tensor,
             r: torch.Tensor, beta: float) -> torch.Tensor:
    """The negative-aware loss per row, (B,): v, v_old, x_t, x0 (B, C, H, W); t, r (B,)."""
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
class DiffusionNFTOptions(ForwardProcessOptions):
    beta: float = 1.0  # strength of the implicit positive / negative policies
    kl_beta: float = 1e-4  # weight of ||v_theta - v_ref||^2 (0: no reference forward)
    time_alpha: float = 0.0  # t uniform on [0, 1]
    old_decay_rate: float = 0.001  # θ_old follows θ closely: d = min(0.001 k, 0.5)
    old_decay_max: float = 0.5

    def __post_init__(self):
        super().__post_init__()
        if self.beta <= 0:
            raise ConfigError(f"method.options.beta: must be > 0, got {self.beta}")
        if self.kl_beta < 0:
            raise ConfigError(f"method.options.kl_beta: must be >= 0, got {self.kl_beta}")


class DiffusionNFT(ForwardProcess):
    name = "diffusion_nft"
    Options = DiffusionNFTOptions

    @property
    def needs_reference(self) -> bool:
        return self.options.kl_beta > 0

    def target_weights(self) -> tuple[str, ...]:
        return ("old", "ref") if self.options.kl_beta > 0 else ("old",)

    def credit(self, rewards: dict[str, torch.Tensor], group_ids: torch.Tensor) -> torch.Tensor:
        t = self.cfg.train
        adv = group_advantages(rewards["final"], group_ids, global_std=t.global_std, eps=t.std_eps)
        return clip_advantages(adv, t.adv_clip_max)

    def transition_loss(self, ctx: Context, traj: Endpoints, j: int, cond: Conditioning,
                        advantages: torch.Tensor) -> TransitionLoss:
        o = self.options
        x_t, t = traj.x_t(j), traj.t[:, j]
        v = ctx.velocity(x_t, t, cond, guidance_scale=ctx.conditional_scale)
        r = optimality_weight(advantages, self.cfg.train.adv_clip_max)
        policy = nft_loss(v, traj.velocities["old"][:, j], x_t, t, traj.x0, r, o.beta).mean()
        loss, kl = policy, None
        if o.kl_beta > 0:
            kl = (v - traj.velocities["ref"][:, j]).pow(2).mean()
            loss = policy + o.kl_beta * kl
            kl = kl.detach()
        return TransitionLoss(loss, policy.detach(), kl=kl)
