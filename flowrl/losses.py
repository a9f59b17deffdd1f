"""Policy losses for one trained transition. Pure tensor functions; shapes are (B,) per sample."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PolicyLossOutput:
    loss: torch.Tensor  # scalar
    ratio: torch.Tensor  # (B,) detached
    clip_frac: torch.Tensor  # scalar, detached
    approx_kl: torch.Tensor  # scalar, detached


def ppo_clip_loss(
    log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor, clip_range: float
) -> PolicyLossOutput:
    """PPO clipped surrogate as in Flow-GRPO (arXiv 2505.05470, Eq. 6):

    rho = exp(logp - logp_old);  L = mean_B max(-A rho, -A clip(rho, 1 - eps, 1 + eps)).
    Also returns the clip fraction and approx_kl = mean(0.5 (logp - logp_old)^2).
    """
    return ppo_clip_from_log_ratio(log_prob - old_log_prob, advantages, clip_range)


def ppo_clip_from_log_ratio(log_ratio: torch.Tensor, advantages: torch.Tensor, clip_range: float) -> PolicyLossOutput:
    """``ppo_clip_loss`` given the log-ratio itself (a corrected one, e.g. GRPO-Guard's)."""
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    loss = torch.maximum(unclipped, clipped).mean()
    with torch.no_grad():
        clip_frac = ((ratio - 1.0).abs() > clip_range).float().mean()
        approx_kl = 0.5 * (log_ratio**2).mean()
    return PolicyLossOutput(loss, ratio.detach(), clip_frac, approx_kl)


def ratio_norm_log_ratio(
    log_prob: torch.Tensor, old_log_prob: torch.Tensor, mean: torch.Tensor, old_mean: torch.Tensor, std: torch.Tensor
) -> torch.Tensor:
    """GRPO-Guard's RatioNorm log-ratio (arXiv 2510.22319; ``specs/flow_grpo_core.md`` §1.8), (B,):

    (log π_θ - log π_old + b)·s with b = mean_d (μ_θ - μ_old)² / (2 s²), per sample (the official script
    averages b over the whole micro-batch, a defect). With x' = μ_old + s ε it is mean_d[(μ_θ - μ_old)·ε]:
    no step-dependent bias (ratio mean below 1 at low-noise steps) and no step-dependent scale.
    mean, old_mean: (B, ...); log_prob, old_log_prob, std: (B,).
    """
    dims = tuple(range(1, mean.ndim))
    bias = (mean - old_mean).pow(2).mean(dim=dims) / (2 * std**2)
    return (log_prob - old_log_prob + bias) * std


def ratio_norm_clip_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    mean: torch.Tensor,
    old_mean: torch.Tensor,
    std: torch.Tensor,
    advantages: torch.Tensor,
    clip_range: float,
    dt: float,
) -> PolicyLossOutput:
    """The clipped surrogate of the RatioNorm ratio, divided by the step's |Δt| (GRPO-Guard's official script
    and Pref-GRPO's ``--rationorm`` both divide; Flow-Factory does not)."""
    log_ratio = ratio_norm_log_ratio(log_prob, old_log_prob, mean, old_mean, std)
    out = ppo_clip_from_log_ratio(log_ratio, advantages, clip_range)
    return PolicyLossOutput(out.loss / abs(dt), out.ratio, out.clip_frac, out.approx_kl)


def gaussian_kl(mean: torch.Tensor, ref_mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Exact KL( N(mean, s^2 I) || N(ref_mean, s^2 I) ) per element, averaged over non-batch dims:

    KL = mean_d (mean - ref_mean)^2 / (2 s^2), with ``std`` the per-element std (B,) of the step.

    Convention: flowrl's beta multiplies this exact KL. Flow-GRPO's code (since 2025-07) divides by
    g^2 instead of s^2 = g^2 |dt|, so its beta equals ours divided by |dt|: code beta 0.04 at 10 steps
    (|dt| about 0.1) is our 0.004.
    """
    if isinstance(mean, dict):  # joint latents: the trained modalities' elements together (``sde.joint_step``)
        counts = {m: mean[m][0].numel() for m in mean}
        total = sum(counts.values())
        return sum(gaussian_kl(mean[m], ref_mean[m], std[m]) * (counts[m] / total) for m in mean)
    s = std.reshape(-1, *([1] * (mean.ndim - 1)))
    per_element = (mean - ref_mean) ** 2 / (2 * s**2)
    return per_element.mean(dim=tuple(range(1, mean.ndim)))
