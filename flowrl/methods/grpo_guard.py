"""GRPO-Guard's RatioNorm (arXiv 2510.22319; ``specs/flow_grpo_core.md`` §1.8): Flow-GRPO with a corrected ratio.

The rollout also keeps each transition's mean μ_old (``keep_means``). With s_j the step's per-element std
and b = mean_d (μ_θ - μ_old)² / (2 s_j²), the log-ratio becomes (log π_θ - log π_old + b)·s_j, which is
mean_d[(μ_θ - μ_old)·ε] with ε the rollout's noise: the step-dependent bias (ratio mean below 1 at
low-noise steps) and scale are gone. The clipped surrogate of transition j is divided by |Δ_j|. Only
``policy_loss`` differs from Flow-GRPO: exploration, credit and the KL term are its own.
"""

from __future__ import annotations

import torch

from flowrl.config import ConfigError
from flowrl.losses import PolicyLossOutput, ppo_clip_from_log_ratio
from flowrl.methods.flow_grpo import FlowGRPO
from flowrl.rollout import Trajectory
from flowrl.sde import StepOutput

GAUSSIAN_KINDS = ("flow_sde", "dance_sde")


def ratio_norm_log_ratio(log_prob: torch.Tensor, old_log_prob: torch.Tensor, mean: torch.Tensor,
                         old_mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """RatioNorm's corrected log-ratio (B,): (log π_θ - log π_old + mean_d (μ_θ - μ_old)² / (2 s²))·s."""
    dims = tuple(range(1, mean.ndim))
    bias = (mean - old_mean).pow(2).mean(dim=dims) / (2 * std**2)
    return (log_prob - old_log_prob + bias) * std


class GRPOGuard(FlowGRPO):
    name = "grpo_guard"
    keep_means = True

    def __init__(self, cfg):
        super().__init__(cfg)
        if cfg.sample.sde_type not in GAUSSIAN_KINDS:
            raise ConfigError(f"sample.sde_type: grpo_guard needs a Gaussian step with an exact log-prob "
                              f"({', '.join(GAUSSIAN_KINDS)}), got {cfg.sample.sde_type!r}")

    def policy_loss(self, traj: Trajectory, j: int, new: StepOutput, advantages: torch.Tensor) -> PolicyLossOutput:
        old_mean = traj.means[:, j].to(new.mean.device)
        log_ratio = ratio_norm_log_ratio(new.log_prob, traj.log_probs[:, j], new.mean, old_mean, new.std)
        out = ppo_clip_from_log_ratio(log_ratio, advantages, self.cfg.train.clip_range)
        dt = float(traj.plan.sigma[j] - traj.plan.sigma_next[j])
        return PolicyLossOutput(out.loss / dt, out.ratio, out.clip_frac, out.approx_kl)
