"""Policy losses for one trained transition. Pure tensor functions; shapes are (B,) per sample.

Also AV-GRPO's weighted loss (arXiv 2609.29816 §7 step 6; code zhiyuxu03/AV-GRPO): its weights λ_pol, λ_rw, λ_KL
and ``av_grpo_loss``, the one implementation the method calls and the tests pin."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from flowrl.checks import ScalarOrTensor, check_phase, fail, finite_f32


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


def dppo_mask_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    mean: torch.Tensor,
    old_mean: torch.Tensor,
    std: torch.Tensor,
    advantages: torch.Tensor,
    threshold: float,
) -> PolicyLossOutput:
    """Flow-DPPO's divergence-masked surrogate (arXiv 2606.11025, Eq. 14 and 18; UniRL ``flowdppo.py``):

    KL = mean_d (mu_old - mu_theta)^2 / (2 s^2) per sample (the exact KL of the two equal-variance Gaussians
    divided by the latent size, as UniRL reduces it); rho = exp(logp - logp_old);
    drop = (KL >= threshold) and ((rho > 1 and A > 0) or (rho < 1 and A < 0)); L = -mean_B(A rho 1[not drop]).
    No clip: a row whose move is small, or corrective, always keeps its gradient. ``clip_frac`` is the dropped
    fraction. mean, old_mean: (B, ...); log_prob, old_log_prob, std, advantages: (B,).
    """
    log_ratio = log_prob - old_log_prob
    ratio = torch.exp(log_ratio)
    with torch.no_grad():
        kl = gaussian_kl(old_mean, mean, std)
        pushing = ((ratio > 1) & (advantages > 0)) | ((ratio < 1) & (advantages < 0))
        drop = (kl >= threshold) & pushing
    # where(), not a product: an overflowing ratio times a 0 mask would be nan
    loss = torch.where(drop, torch.zeros((), device=ratio.device), -advantages * ratio).mean()
    with torch.no_grad():
        approx_kl = 0.5 * (log_ratio**2).mean()
    return PolicyLossOutput(loss, ratio.detach(), drop.float().mean(), approx_kl)


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


# --------------------------------------------------------------------------------------------------------
# AV-GRPO's weights and loss
# --------------------------------------------------------------------------------------------------------
T_CLAMP = (1e-5, 0.999)  # the AV-GRPO code's clamp of t inside λ_pol, λ_rw and λ_KL


def _t_dt(t, dt_abs, t_clamp) -> tuple[torch.Tensor, torch.Tensor]:
    t, dt = finite_f32("t", t), finite_f32("dt_abs", dt_abs)
    if not ((t > 0).all() and (t <= 1).all()):
        fail(f"t must be in (0, 1], got {t.tolist()}")
    if not (dt > 0).all():
        fail(f"dt_abs must be > 0, got {dt.tolist()}")
    if t_clamp is not None:
        lo, hi = t_clamp
        if not 0 < lo < hi < 1:
            fail(f"t_clamp must be (lo, hi) with 0 < lo < hi < 1, got {t_clamp!r}")
        t = t.clamp(lo, hi)
    elif (t == 1).any():
        fail("t == 1 with t_clamp=None: the weights divide by 1 - t")
    return t, dt


def policy_weight(t: ScalarOrTensor, dt_abs: ScalarOrTensor, *, t_clamp=T_CLAMP) -> torch.Tensor:
    """λ_pol = sqrt(t / (|Δ|(1−t))) [code], fp32, shaped like t·dt_abs; t clamped to ``t_clamp``."""
    t, dt = _t_dt(t, dt_abs, t_clamp)
    return torch.sqrt(t / (dt * (1 - t)))


def reward_weight(t: ScalarOrTensor, dt_abs: ScalarOrTensor, phase: str, *, t_clamp=T_CLAMP) -> torch.Tensor:
    """λ_rw = t / (|Δ|(1−t)) in the video phase, 1 in the audio phase [code]; t clamped to ``t_clamp``."""
    check_phase(phase)
    t, dt = _t_dt(t, dt_abs, t_clamp)
    return t / (dt * (1 - t)) if phase == "video" else torch.ones_like(t * dt)


def kl_factor(t: ScalarOrTensor, dt_abs: ScalarOrTensor, g: ScalarOrTensor, *, t_clamp=T_CLAMP) -> torch.Tensor:
    """λ_KL = (|Δ|/2)·(g(1−t)/(2t) + 1/g)² [code]: λ_KL·(v_θ − v_ref)² is the per-element KL between the
    two policies' step Gaussians N(μ, g²|Δ|) at the same (x, t), when the step used this g."""
    t, dt = _t_dt(t, dt_abs, t_clamp)
    g = finite_f32("g", g)
    if not (g > 0).all():
        fail(f"g must be > 0, got {g.tolist()}")
    return (dt / 2) * (g * (1 - t) / (2 * t) + 1 / g) ** 2


class AVGRPOLoss(NamedTuple):
    loss: torch.Tensor  # scalar, with grad in logp_new and mean
    policy: PolicyLossOutput  # the unweighted clipped surrogate and its figures
    kl: torch.Tensor  # the mean Gaussian KL to the reference, unweighted (0 without one), detached
    figures: dict[str, float]  # detached diagnostics, flat names


def _per_sample(name: str, value: ScalarOrTensor, batch: int, device: torch.device) -> torch.Tensor:
    t = finite_f32(name, value) if not isinstance(value, torch.Tensor) else value.float()
    if t.numel() not in (1, batch):
        fail(f"{name} must be a float or ({batch},), got shape {tuple(t.shape)}")
    return t.reshape(-1).expand(batch).to(device)


def _check_av_grpo_args(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    adv: torch.Tensor,
    t: ScalarOrTensor,
    dt_abs: ScalarOrTensor,
    mean: torch.Tensor,
    ref_mean: torch.Tensor | None,
    phase: str,
    clip: float,
    beta_video: float,
    beta_audio: float,
) -> None:
    """``av_grpo_loss``'s arguments, each refused in one line when out of range or of the wrong shape."""
    check_phase(phase)
    if not (isinstance(clip, (int, float)) and 0 < clip < math.inf):
        fail(f"clip must be a finite number > 0, got {clip!r}")
    for name, value in (("beta_video", beta_video), ("beta_audio", beta_audio)):
        if not (isinstance(value, (int, float)) and 0 <= value < math.inf):
            fail(f"{name} must be a finite number >= 0, got {value!r}")
    if logp_new.ndim != 1 or logp_old.shape != logp_new.shape or adv.shape != logp_new.shape:
        fail(
            f"logp_new, logp_old, adv must all be (B,), got {tuple(logp_new.shape)}, "
            f"{tuple(logp_old.shape)}, {tuple(adv.shape)}"
        )
    b = logp_new.shape[0]
    if isinstance(mean, torch.Tensor) and (  # joint latents are dicts by modality (``gaussian_kl`` takes them)
        mean.ndim < 2 or mean.shape[0] != b or (ref_mean is not None and ref_mean.shape != mean.shape)
    ):
        shapes = f"{tuple(mean.shape)} and {tuple(ref_mean.shape) if ref_mean is not None else None}"
        fail(f"mean and ref_mean must both be ({b}, ...), got {shapes}")
    for name, value in (("t", t), ("dt_abs", dt_abs)):
        if torch.as_tensor(value).numel() not in (1, b):
            fail(f"{name} must be a float or ({b},), got shape {tuple(torch.as_tensor(value).shape)}")
    beta = beta_video if phase == "video" else beta_audio
    if beta > 0 and ref_mean is None:
        fail(f"beta_{phase}={beta} weighs a KL to the reference, but no ref_mean was given")


def av_grpo_loss(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    adv: torch.Tensor,
    t: ScalarOrTensor,
    dt_abs: ScalarOrTensor,
    mean: torch.Tensor,
    ref_mean: torch.Tensor | None,
    std: torch.Tensor,
    phase: str,
    clip: float,
    beta_video: float,
    beta_audio: float,
    *,
    t_clamp=T_CLAMP,
) -> AVGRPOLoss:
    """AV-GRPO's loss of one trained transition (§7 step 6): λ_pol·max(−Aρ, −A·clip(ρ, 1−ε, 1+ε)) averaged over
    the batch, plus β·λ_rw times the exact Gaussian KL of the step means, KL(N(mean, s²) ‖ N(ref_mean, s²))
    (dimension mean, ``gaussian_kl``), β = beta_video or beta_audio by ``phase``. With both means from the step's
    own g the KL is λ_KL·MSE(v, v_ref) (``kl_factor``); the authors' code evaluates λ_KL at the uncapped g.

    logp_new, logp_old, adv: (B,); mean, ref_mean: (B, ...) the trained modality's step means (ref_mean None:
    no reference, β must then be 0), or dicts of them by modality (joint latents); std: (B,) the step's std;
    t, dt_abs: one float for the transition (the trainer's unit), or (B,) per sample.
    """
    _check_av_grpo_args(logp_new, logp_old, adv, t, dt_abs, mean, ref_mean, phase, clip, beta_video, beta_audio)
    beta = beta_video if phase == "video" else beta_audio
    lam_pol, lam_rw = policy_weight(t, dt_abs, t_clamp=t_clamp), reward_weight(t, dt_abs, phase, t_clamp=t_clamp)
    pg = ppo_clip_loss(logp_new, logp_old, adv, clip)
    kl, kl_term = torch.zeros(()), torch.zeros(())
    if lam_pol.ndim == 0:  # one (t, |Δ|) for the whole batch (the trainer's unit): scalar weights
        policy = float(lam_pol) * pg.loss
        if beta > 0:
            kl = gaussian_kl(mean, ref_mean, std).mean()
            kl_term = beta * float(lam_rw) * kl
    else:  # per-sample (t, |Δ|): weighted per sample, then averaged
        adv_f, ratio = adv.float(), torch.exp(logp_new.float() - logp_old.float())
        surrogate = torch.maximum(-adv_f * ratio, -adv_f * ratio.clamp(1 - clip, 1 + clip))  # (B,)
        policy = (lam_pol.to(surrogate.device) * surrogate).mean()
        if beta > 0:
            per_sample = gaussian_kl(mean, ref_mean, std)  # (B,)
            kl = per_sample.mean()
            kl_term = beta * (lam_rw.to(per_sample.device) * per_sample).mean()
    loss = policy + kl_term if beta > 0 else policy
    figures = {
        "loss/policy": float(policy.detach()),
        "loss/kl": float(kl_term.detach()),
        "kl/gaussian": float(kl.detach()),
        "policy/ratio": float(pg.ratio.mean()),
        "policy/clip_frac": float(pg.clip_frac),
        "policy/approx_kl": float(pg.approx_kl),
        "weights/lambda_pol": float(lam_pol.mean()),
        "weights/lambda_rw": float(lam_rw.mean()),
    }
    return AVGRPOLoss(loss, pg, kl.detach(), figures)
