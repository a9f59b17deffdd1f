"""AV-GRPO math (arXiv 2609.29816; code zhiyuxu03/AV-GRPO): ``specs/addon_methods.md`` §7, as pure functions.

The method plug-in and the LTX-2 adapter call these; nothing here touches a model, a trainer or a file.
Provenance: **[code]** is the spec's reading of the authors' ltx-trainer (``trainer.py``,
``validation_sampler.py``), re-checked there for the details noted below and corrected by the spec's section
"Corrections, measured against the authors' own code" (2026-12-02); **[inferred]** is our choice where the
sources are silent. Formulas are restated, no code was copied.

Conventions
-----------
* flowrl's sampler convention (§0, ``flowrl.sde``): σ runs from 1 (noise) to 0, a step goes σ = t → σ',
  Δ = σ' − t < 0 and |Δ| = t − σ'. The velocity is v ≈ ε − x0.
* fp32 tensors, batch first: per-sample values are (B,) and latents (B, ...). Log-probs, MSEs and KLs are
  **dimension means** (averaged over every non-batch element), as Flow-GRPO and the AV-GRPO code do.
* ``phase`` is the TRAINED modality, ``"video"`` or ``"audio"`` (the code names the frozen one instead:
  its ``freeze_modality="audio"`` is our ``phase="video"``).
* Every bad argument raises a one-line ``ValueError`` that names it.

Formulas
--------
1. Noise cap (§7 step 3) [code]: g = a·sqrt(t/(1−t)) (``flowrl.sde.flow_sde_g``), step std
   s = g·sqrt(|Δ|); if s > max_std, g is scaled down so s = max_std, and the drift is recomputed with that g.
   **a_video = 0.02, a_audio = 0.8** (the sampler uses 0.8 when the video is frozen, 0.02 otherwise),
   max_std = 0.5. At σ = 1 the code clamps 1 − t at 1e-5 (``ONE_MINUS_T_MIN``): g = a·sqrt(1e5), so the first
   step is capped to std 0.5 whenever |Δ_0| > (max_std / (a·sqrt(1e5)))² (6.3e-3 for the video, 3.9e-6 for
   the audio), in both phases; it does not substitute σ_1 as Flow-GRPO does (``sigma_at_one``, kept as an
   argument for comparison).
2. SDE step with a given g (§0, §7 step 3): μ = x + Δ·[v + g²/(2t)·(x + (1−t)v)], s = g·sqrt(|Δ|),
   Gaussian log-prob averaged over dimensions. ``flowrl.sde.dance_sde`` is exactly this step with
   g = its noise level (``flow_sde`` computes g itself), so ``sde_step_with_g`` is that step, checked.
3. KL factor (§7 step 6) [code]: two policies at the same (x, t, g) give means that differ by
   μ_ref − μ_θ = |Δ|·(1 + g²(1−t)/(2t))·(v_θ − v_ref) with the same variance s² = g²|Δ|, so per element
   KL = (μ_θ − μ_ref)²/(2s²) = λ_KL·(v_θ − v_ref)² with λ_KL = (|Δ|/2)·(g(1−t)/(2t) + 1/g)².
   Dimension mean: λ_KL·MSE(v_θ, v_ref) = (1/n)·KL(N(μ_θ, s²I) ‖ N(μ_ref, s²I)) (``flowrl.losses.gaussian_kl``).
   The code evaluates λ_KL with the UNCAPPED g = a·sqrt(t/(1−t)) while its step used the capped one; the
   identity holds only with the g of the step. ``av_grpo_loss`` takes g as an argument: pass the capped
   (effective) g for the exact KL, or ``a·sqrt(t/(1−t))`` to reproduce the code.
4. Loss (§7 step 6) [code]: ρ = exp(logp_new − logp_old); per sample
   λ_pol·max(−Aρ, −A·clip(ρ, 1−ε, 1+ε)) + β·λ_rw·λ_KL·MSE(v_θ, v_ref), averaged over the batch, with
   λ_pol = sqrt(t/(|Δ|(1−t))), λ_rw = t/(|Δ|(1−t)) (video phase) or 1 (audio phase), ε = 0.2,
   β_video = 0.01, β_audio = 0.002. The code clamps t to [1e-5, 0.999] in λ_pol, λ_rw and λ_KL
   (``T_CLAMP``; at t = 1, λ_pol = sqrt(999/|Δ|)); its 1e-10 and 1e-8 guards on denominators are left out.
5. Advantages (§7 step 4) [code]: every metric is z-scored over the group (population std + 1e-8), the
   z-scores are averaged with equal weights; fallbacks: video phase with group-mean VQ ≤ 0 → VQ's z-score
   only; audio phase with group-mean CLAP < 0.4 → CLAP's only; then the score is z-scored again (unbiased
   std + 1e-8). A NaN metric value makes its group's advantages NaN, as in the code (the trainer's NaN guard
   then drops the step and switches the phase). Overexposure is computed but skipped by the code: do not
   pass it. Statistics are taken in fp64 (the code's numpy stage); a row
   whose values are all equal gets exactly 0 [inferred: the code would return round-off / 1e-8].
6. Phase schedule (§7 step 1) [code]: video for ``steps_per_phase`` AV-GRPO steps, then audio for as many
   on the SAME prompts, then the next cycle; step k of a phase uses prompts
   cycle·P + k·P/steps_per_phase ... (+ P/steps_per_phase), P = 32, one per GPU, wrapping around the list.
   Every switch clears the optimizer state. NaN guard: switch at once, in-phase counter to 0, cycle unchanged,
   the step is not counted.
7. DeSync reward (§7 step 4) [code]: −mean over windows of |predicted audio-video offset|; 0 is the best.
8. Learning rate [code]: the first AV-GRPO step at the optimizer's initial rate (the yaml's 1e-5), then 1e-6
   with one "warm-up" step from 1e-6 to 1e-6 and a cosine to 0 over the run (``av_grpo_lr_factor``); every
   optimizer step of one AV-GRPO step (one per sample and transition) runs at that step's rate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import NamedTuple

import torch

from flowrl.lr import lr_factor
from flowrl.sde import StepOutput, dance_sde, flow_sde_g

PHASES = ("video", "audio")
NOISE_LEVEL = {"video": 0.02, "audio": 0.8}  # a per trained modality [code: Corrections]
A_VIDEO, A_AUDIO = NOISE_LEVEL["video"], NOISE_LEVEL["audio"]
MAX_STD = 0.5  # cap on the per-step std g·sqrt(|Δ|) [code]
ONE_MINUS_T_MIN = 1e-5  # the code's clamp of 1 − t in g = a·sqrt(t/(1−t)): g = a·sqrt(1e5) at t = 1
CLIP_RANGE = 0.2  # PPO clip ε [code]
BETA = {"video": 0.01, "audio": 0.002}  # KL weight per trained modality [code]
BETA_VIDEO, BETA_AUDIO = BETA["video"], BETA["audio"]
T_CLAMP = (1e-5, 0.999)  # the code's clamp of t inside λ_pol, λ_rw and λ_KL
Z_EPS = 1e-8  # added to both z-scores' std [code]
VQ_FLOOR, CLAP_FLOOR = 0.0, 0.4  # fallback thresholds: VQ mean <= 0, CLAP mean < 0.4 [code]
STEPS_PER_PHASE, PROMPTS_PER_CYCLE = 4, 32  # on 8 GPUs: 8 prompts a step, one per GPU [code]
LR, LR_WARMUP_STEPS, TOTAL_STEPS = 1e-6, 1, 1440  # [code]
FIRST_LR = 1e-5  # the first AV-GRPO step's rate: the yaml's, before the loop sets 1e-6 [code: Corrections]
NEGATIVE_PROMPT = "worst quality, inconsistent motion, blurry, jittery, distorted"  # the CFG negative [code]

Number = float | int
ScalarOrTensor = float | torch.Tensor


def _fail(message: str) -> None:
    raise ValueError(message)


def _check_phase(phase: str) -> None:
    if phase not in PHASES:
        _fail(f"phase must be 'video' or 'audio' (the trained modality), got {phase!r}")


def _as_f32(name: str, value: ScalarOrTensor) -> torch.Tensor:
    t = torch.as_tensor(value, dtype=torch.float32)
    if not torch.isfinite(t).all():
        _fail(f"{name} must be finite, got {value!r}")
    return t


def _scalar(value):
    """A 0-d tensor becomes a python float (as ``flowrl.sde`` treats it); anything else is left alone."""
    return float(value) if isinstance(value, torch.Tensor) and value.ndim == 0 else value


# --------------------------------------------------------------------------------------------------------
# 1-2. Capped noise and the SDE step with a given g
# --------------------------------------------------------------------------------------------------------


class CappedNoise(NamedTuple):
    """g: the diffusion coefficient to step with; std = g·sqrt(|Δ|) (<= max_std); capped: the cap fired.
    Python floats and a bool for scalar inputs, fp32 tensors (``capped`` bool) for tensor ones."""

    g: ScalarOrTensor
    std: ScalarOrTensor
    capped: bool | torch.Tensor


def _check_step(sigma, sigma_next, a, max_std, sigma_at_one) -> None:
    s, s_next, a_t = _as_f32("sigma", sigma), _as_f32("sigma_next", sigma_next), _as_f32("a", a)
    if not ((s > 0).all() and (s <= 1).all()):
        _fail(f"sigma must be in (0, 1], got {sigma!r}")
    if not ((s_next >= 0).all() and (s_next < s).all()):
        _fail(f"sigma_next must be in [0, sigma), got {sigma_next!r}")
    if not (a_t > 0).all():
        _fail(f"a (noise level) must be > 0, got {a!r}")
    if not (isinstance(max_std, (int, float)) and 0 < max_std < math.inf):
        _fail(f"max_std must be a finite number > 0, got {max_std!r}")
    if sigma_at_one is not None and not 0 < sigma_at_one < 1:
        _fail(f"sigma_at_one must be in (0, 1) or None, got {sigma_at_one!r}")


def _cap_float(g: float, dt_abs: float, max_std: float) -> tuple[float, bool]:
    root = math.sqrt(dt_abs)
    if not g * root > max_std:
        return g, False
    g = max_std / root
    if g * root > max_std:  # one ulp down makes the step's own std g·sqrt(|Δ|) <= max_std
        g = math.nextafter(g, 0.0)
    return g, True


def capped_noise(
    sigma: ScalarOrTensor,
    sigma_next: ScalarOrTensor,
    a: ScalarOrTensor,
    max_std: float = MAX_STD,
    sigma_at_one: float | None = None,
) -> CappedNoise:
    """§7 step 3: g = a·sqrt(t/(1−t)) (``flow_sde_g``), scaled down so that g·sqrt(|Δ|) <= max_std.

    ``sigma_at_one=None`` (the authors' code): 1 − t is clamped at ``ONE_MINUS_T_MIN`` (1e-5), so at t = 1
    g = a·sqrt(1e5) and the cap decides the first step's std (0.5 unless |Δ_0| is tiny). Given, Flow-GRPO's
    first-step substitute 1 − σ_1 (``flow_sde_g``). Uncapped and below t = 1, g is bitwise
    ``flow_sde_g(sigma, a)`` (float path for floats, fp32 for tensors, as ``flow_sde`` computes it). Capped,
    g = max_std/sqrt(|Δ|) (one ulp lower if the product would round above max_std), so the std the step
    computes is max_std to the last bit or one ulp below. The cap is strict: s == max_std is not capped.
    sigma, sigma_next: floats or (B,) tensors; a: the trained modality's noise level (``NOISE_LEVEL``).
    """
    sigma, sigma_next, a = _scalar(sigma), _scalar(sigma_next), _scalar(a)
    _check_step(sigma, sigma_next, a, max_std, sigma_at_one)
    if all(isinstance(v, (int, float)) for v in (sigma, sigma_next, a)):
        sigma, sigma_next, a = float(sigma), float(sigma_next), float(a)
        dt_abs = -(sigma_next - sigma)  # bitwise the |dt| flowrl.sde uses
        g = (
            a * math.sqrt(sigma / max(1 - sigma, ONE_MINUS_T_MIN))
            if sigma_at_one is None
            else flow_sde_g(sigma, a, sigma_at_one)
        )
        g, capped = _cap_float(g, dt_abs, float(max_std))
        return CappedNoise(g, g * math.sqrt(dt_abs), capped)
    s = torch.as_tensor(sigma, dtype=torch.float32)
    root = torch.sqrt(-(torch.as_tensor(sigma_next, dtype=torch.float32) - s))
    if sigma_at_one is None:  # the code's clamp of 1 - t; bitwise flow_sde_g wherever 1 - t >= 1e-5
        g = torch.as_tensor(a, dtype=torch.float32) * torch.sqrt(s / (1 - s).clamp_min(ONE_MINUS_T_MIN))
    else:
        g = flow_sde_g(s, a, sigma_at_one)
    capped = g * root > max_std
    g_cap = max_std / root
    g_cap = torch.where(g_cap * root > max_std, torch.nextafter(g_cap, torch.zeros_like(g_cap)), g_cap)
    g = torch.where(capped, g_cap, g)
    return CappedNoise(g, g * root, capped)


def sde_step_with_g(
    v: torch.Tensor,
    x: torch.Tensor,
    sigma: ScalarOrTensor,
    sigma_next: ScalarOrTensor,
    g: ScalarOrTensor,
    x_next: torch.Tensor | None = None,
    noise: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> StepOutput:
    """Flow-GRPO SDE step with an explicit diffusion coefficient g (float or (B,)), e.g. a capped one:
    μ = x + Δ·[v + g²/(2t)·(x + (1−t)v)], std = g·sqrt(|Δ|), log-prob = dimension-mean Gaussian log-density.

    ``flow_sde`` derives g from the noise level and cannot take one; ``dance_sde`` takes g as its noise
    level and is exactly this step (same drift ``_sde_mean``, same ``gaussian_log_prob``), so this calls it.
    With g = flow_sde_g(t, a) the result is bitwise ``flow_sde(v, x, t, t', a)``.
    """
    g = _scalar(g)
    g_t = _as_f32("g", g)
    if not (g_t > 0).all():
        _fail(f"g must be > 0 (a zero-noise step has no density), got {g!r}")
    _check_step(_scalar(sigma), _scalar(sigma_next), 1.0, MAX_STD, None)
    return dance_sde(v, x, sigma, sigma_next, g, x_next=x_next, noise=noise, generator=generator, reduction="mean")


# --------------------------------------------------------------------------------------------------------
# 3-4. Weights and the loss
# --------------------------------------------------------------------------------------------------------


def _t_dt(t, dt_abs, t_clamp) -> tuple[torch.Tensor, torch.Tensor]:
    t, dt = _as_f32("t", t), _as_f32("dt_abs", dt_abs)
    if not ((t > 0).all() and (t <= 1).all()):
        _fail(f"t must be in (0, 1], got {t.tolist()}")
    if not (dt > 0).all():
        _fail(f"dt_abs must be > 0, got {dt.tolist()}")
    if t_clamp is not None:
        lo, hi = t_clamp
        if not 0 < lo < hi < 1:
            _fail(f"t_clamp must be (lo, hi) with 0 < lo < hi < 1, got {t_clamp!r}")
        t = t.clamp(lo, hi)
    elif (t == 1).any():
        _fail("t == 1 with t_clamp=None: the weights divide by 1 - t")
    return t, dt


def policy_weight(t: ScalarOrTensor, dt_abs: ScalarOrTensor, *, t_clamp=T_CLAMP) -> torch.Tensor:
    """λ_pol = sqrt(t / (|Δ|(1−t))) [code], fp32, shaped like t·dt_abs; t clamped to ``t_clamp``."""
    t, dt = _t_dt(t, dt_abs, t_clamp)
    return torch.sqrt(t / (dt * (1 - t)))


def reward_weight(t: ScalarOrTensor, dt_abs: ScalarOrTensor, phase: str, *, t_clamp=T_CLAMP) -> torch.Tensor:
    """λ_rw = t / (|Δ|(1−t)) in the video phase, 1 in the audio phase [code]; t clamped to ``t_clamp``."""
    _check_phase(phase)
    t, dt = _t_dt(t, dt_abs, t_clamp)
    return t / (dt * (1 - t)) if phase == "video" else torch.ones_like(t * dt)


def kl_factor(t: ScalarOrTensor, dt_abs: ScalarOrTensor, g: ScalarOrTensor, *, t_clamp=T_CLAMP) -> torch.Tensor:
    """λ_KL = (|Δ|/2)·(g(1−t)/(2t) + 1/g)² [code]: λ_KL·(v_θ − v_ref)² is the per-element KL between the
    two policies' step Gaussians N(μ, g²|Δ|) at the same (x, t), when the step used this g."""
    t, dt = _t_dt(t, dt_abs, t_clamp)
    g = _as_f32("g", g)
    if not (g > 0).all():
        _fail(f"g must be > 0, got {g.tolist()}")
    return (dt / 2) * (g * (1 - t) / (2 * t) + 1 / g) ** 2


class AVGRPOLoss(NamedTuple):
    loss: torch.Tensor  # scalar, differentiable in logp_new and v
    figures: dict[str, float]  # detached diagnostics, flat names


def _per_sample(name: str, value: ScalarOrTensor, batch: int, device: torch.device) -> torch.Tensor:
    t = _as_f32(name, value) if not isinstance(value, torch.Tensor) else value.float()
    if t.numel() not in (1, batch):
        _fail(f"{name} must be a float or ({batch},), got shape {tuple(t.shape)}")
    return t.reshape(-1).expand(batch).to(device)


def av_grpo_loss(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    adv: torch.Tensor,
    t: ScalarOrTensor,
    dt_abs: ScalarOrTensor,
    v: torch.Tensor,
    v_ref: torch.Tensor,
    g: ScalarOrTensor,
    phase: str,
    clip: float = CLIP_RANGE,
    beta_video: float = BETA_VIDEO,
    beta_audio: float = BETA_AUDIO,
    *,
    t_clamp=T_CLAMP,
) -> AVGRPOLoss:
    """§7 step 6 for one trained transition: mean_b λ_pol·max(−Aρ, −A·clip(ρ, 1−ε, 1+ε))
    + β·mean_b λ_rw·λ_KL(g)·MSE_b(v, v_ref), β = beta_video or beta_audio by ``phase``.

    logp_new, logp_old, adv: (B,); v, v_ref: (B, ...) (the trained modality's velocities; v_ref is detached);
    t, dt_abs, g: float or (B,). See the module docstring (3.) for which g to pass.
    """
    _check_phase(phase)
    if not (isinstance(clip, (int, float)) and 0 < clip < 1):
        _fail(f"clip must be in (0, 1), got {clip!r}")
    for name, beta in (("beta_video", beta_video), ("beta_audio", beta_audio)):
        if not (isinstance(beta, (int, float)) and 0 <= beta < math.inf):
            _fail(f"{name} must be a finite number >= 0, got {beta!r}")
    if logp_new.ndim != 1 or logp_old.shape != logp_new.shape or adv.shape != logp_new.shape:
        _fail(
            f"logp_new, logp_old, adv must all be (B,), got {tuple(logp_new.shape)}, "
            f"{tuple(logp_old.shape)}, {tuple(adv.shape)}"
        )
    b = logp_new.shape[0]
    if v.shape != v_ref.shape or v.ndim < 2 or v.shape[0] != b:
        _fail(f"v and v_ref must both be ({b}, ...), got {tuple(v.shape)} and {tuple(v_ref.shape)}")
    t, dt, g = (_per_sample(n, x, b, logp_new.device) for n, x in (("t", t), ("dt_abs", dt_abs), ("g", g)))
    lam_pol, lam_rw, lam_kl = (
        policy_weight(t, dt, t_clamp=t_clamp),
        reward_weight(t, dt, phase, t_clamp=t_clamp),
        kl_factor(t, dt, g, t_clamp=t_clamp),
    )
    adv = adv.float()
    log_ratio = logp_new.float() - logp_old.float()
    ratio = torch.exp(log_ratio)
    surrogate = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip))  # (B,)
    policy = (lam_pol * surrogate).mean()
    mse = (v.float() - v_ref.detach().float()).square().flatten(1).mean(dim=1)  # (B,)
    beta = beta_video if phase == "video" else beta_audio
    kl = (lam_rw * lam_kl * mse).mean()
    loss = policy + beta * kl
    with torch.no_grad():
        figures = {
            "loss/policy": float(policy),
            "loss/kl": float(beta * kl),
            "kl/weighted": float(kl),
            "kl/mse_v": float(mse.mean()),
            "policy/ratio": float(ratio.mean()),
            "policy/clip_frac": float(((ratio - 1).abs() > clip).float().mean()),
            "policy/approx_kl": float(0.5 * (log_ratio**2).mean()),
            "weights/lambda_pol": float(lam_pol.mean()),
            "weights/lambda_rw": float(lam_rw.mean()),
            "weights/lambda_kl": float(lam_kl.mean()),
        }
    return AVGRPOLoss(loss, figures)


# --------------------------------------------------------------------------------------------------------
# 5. Rewards to advantages
# --------------------------------------------------------------------------------------------------------


def zscore(x: torch.Tensor, unbiased: bool, eps: float = Z_EPS) -> torch.Tensor:
    """(x − mean) / (std + eps) over the LAST dim (the group), statistics in fp64, result fp32.

    std: population (``unbiased=False``, the per-metric stage) or sample (``unbiased=True``, the final
    stage). A row whose values are all equal gets exactly 0; NaN propagates. x: (G,) or (M, G), G >= 2.
    """
    if x.ndim not in (1, 2) or x.shape[-1] < 2:
        _fail(f"x must be (G,) or (M, G) with G >= 2, got shape {tuple(x.shape)}")
    if not (isinstance(eps, (int, float)) and eps > 0):
        _fail(f"eps must be > 0, got {eps!r}")
    x64 = x.double()
    centred = x64 - x64.mean(dim=-1, keepdim=True)
    z = centred / (x64.std(dim=-1, correction=1 if unbiased else 0, keepdim=True) + eps)
    flat = x64.amax(dim=-1, keepdim=True) == x64.amin(dim=-1, keepdim=True)
    return torch.where(flat, 0.0, z).float()


@dataclass
class ModalityAdvantages:
    advantages: torch.Tensor  # (G,) or (M, G) fp32: zero mean, unit sample std per group
    score: torch.Tensor  # the averaged (or fallback) per-metric z-score, before the final z-score
    fallback: torch.Tensor  # bool, () or (M,): the group used the phase's fallback metric alone
    rule: str | None  # "vq_only" (video phase), "clap_only" (audio phase), None if the phase has no fallback key


def _stack_metrics(metrics: Mapping[str, torch.Tensor]) -> tuple[list[str], torch.Tensor]:
    if not metrics:
        _fail("metrics is empty: pass the phase's reward metrics, e.g. {'vq': ..., 'clip': ..., 'desync': ...}")
    names = list(metrics)
    values = [torch.as_tensor(metrics[k], dtype=torch.float64) for k in names]  # lists: exact python floats
    shape = values[0].shape
    if len(shape) not in (1, 2) or shape[-1] < 2 or any(m.shape != shape for m in values):
        _fail(
            f"metrics must all be (G,) or (M, G) of one shape with G >= 2, got "
            f"{ {k: tuple(m.shape) for k, m in zip(names, values)} }"
        )
    stack = torch.stack(values)  # (K, [M,] G)
    if torch.isinf(stack).any():
        _fail(f"metrics hold inf: {[k for k, m in zip(names, values) if torch.isinf(m).any()]}")
    return names, stack


def modality_advantages(
    metrics: Mapping[str, torch.Tensor],
    phase: str,
    vq_key: str | None = "vq",
    clap_key: str | None = "clap",
    vq_floor: float = VQ_FLOOR,
    clap_floor: float = CLAP_FLOOR,
    *,
    eps: float = Z_EPS,
) -> ModalityAdvantages:
    """§7 step 4: metrics {name: (G,) or (M, G)} of ONE phase (rewards, higher is better: pass −DeSync,
    see ``desync_reward``) -> advantages per group.

    Each metric is z-scored over the group (population std + eps) and the z-scores averaged. Fallback: in the
    video phase a group whose mean ``vq_key`` <= ``vq_floor`` uses that metric's z-score alone; in the audio
    phase a group whose mean ``clap_key`` < ``clap_floor`` uses CLAP's alone (the fallback key of the other
    phase is ignored; None disables the phase's fallback). The score is z-scored again (sample std + eps).
    A NaN metric value (a scorer that failed on a sample) makes that group's advantages NaN, as the code's
    numpy statistics do [code]; other groups are untouched. The caller's NaN guard drops the step (the
    method switches the phase). Group means for the thresholds are fp64 (the code's numpy): pass fp64 tensors or
    python lists where the last bit matters: fp32 rounding moves a mean across the threshold (fp32 0.15 and
    0.65 average to 0.39999999 < 0.4, fp64 to 0.4; a constant fp32 0.4 is 0.4000000060 and passes). Even
    fp64 decimals can land below (0.35 and 0.45 -> 0.39999999999999997), exactly as in the code.
    """
    _check_phase(phase)
    names, stack = _stack_metrics(metrics)
    z = zscore(stack.flatten(0, -2), unbiased=False, eps=eps).reshape(stack.shape)  # (K, [M,] G)
    score = z.mean(dim=0)
    key, floor, rule = (vq_key, vq_floor, "vq_only") if phase == "video" else (clap_key, clap_floor, "clap_only")
    fallback = torch.zeros(score.shape[:-1], dtype=torch.bool, device=score.device)
    if key is None:
        rule = None
    else:
        if key not in metrics:
            _fail(f"metrics has no {key!r}, the {phase} phase's fallback metric (set vq_key/clap_key, or None)")
        group_mean = stack[names.index(key)].mean(dim=-1)
        fallback = group_mean <= floor if phase == "video" else group_mean < floor
        score = torch.where(fallback[..., None], z[names.index(key)], score)
    return ModalityAdvantages(zscore(score, unbiased=True, eps=eps), score, fallback, rule)


def desync_reward(offsets: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """−mean_w |offset_w| over the LAST dim (Synchformer's predicted audio-video offsets, seconds, one per
    window): 0 for perfect sync, the maximum. offsets: (W,) or (..., W) -> () or (...) fp32."""
    off = torch.as_tensor(offsets, dtype=torch.float32)
    if off.ndim == 0 or off.shape[-1] == 0:
        _fail(f"offsets must be (..., W) with W >= 1 windows, got shape {tuple(off.shape)}")
    if not torch.isfinite(off).all():
        _fail("offsets hold NaN or inf")
    return 0.0 - off.abs().mean(dim=-1)  # 0.0 - 0 is +0.0, not -0.0


# --------------------------------------------------------------------------------------------------------
# 6. Phase schedule, 8. learning rate
# --------------------------------------------------------------------------------------------------------


@dataclass
class PhaseState:
    cycle: int = 0  # which block of prompts_per_cycle prompts of the shuffled list
    phase: str = "video"  # the trained modality
    step_in_phase: int = 0  # AV-GRPO steps done in this phase, 0..steps_per_phase-1
    optimizer_steps: int = 0  # AV-GRPO steps taken (a NaN-dropped one is not): the LR schedule's counter
    nan_switches: int = 0


class PhaseSchedule:
    """§7 step 1 as a state machine. One cycle: ``start`` for ``steps_per_phase`` AV-GRPO steps, the other
    modality for as many on the same prompts; the cycle index advances only when the second phase ends.

    ``after_step()`` after every AV-GRPO step and ``on_nan()`` instead of a dropped step both return
    whether the optimizer state must be cleared (at every switch). Rollouts are regenerated before every
    step either way. ``state_dict()`` / ``load_state_dict()`` for checkpoints (plain JSON-able dict).
    """

    def __init__(
        self, steps_per_phase: int = STEPS_PER_PHASE, prompts_per_cycle: int = PROMPTS_PER_CYCLE, start: str = "video"
    ):
        if not (isinstance(steps_per_phase, int) and steps_per_phase >= 1):
            _fail(f"steps_per_phase must be an int >= 1, got {steps_per_phase!r}")
        if not (
            isinstance(prompts_per_cycle, int) and prompts_per_cycle >= 1 and prompts_per_cycle % steps_per_phase == 0
        ):
            _fail(
                f"prompts_per_cycle must be a positive multiple of steps_per_phase={steps_per_phase}, "
                f"got {prompts_per_cycle!r}"
            )
        if start not in PHASES:
            _fail(f"start must be 'video' or 'audio', got {start!r}")
        self.steps_per_phase, self.prompts_per_cycle, self.start = steps_per_phase, prompts_per_cycle, start
        self.state = PhaseState(phase=start)

    @property
    def prompts_per_step(self) -> int:
        return self.prompts_per_cycle // self.steps_per_phase

    def _switch(self) -> None:
        s = self.state
        if s.phase != self.start:  # the cycle's second phase is over
            s.cycle += 1
        s.phase = "audio" if s.phase == "video" else "video"
        s.step_in_phase = 0

    def after_step(self) -> bool:
        """Count one AV-GRPO step; True when the phase just ended (switch; clear the optimizer state)."""
        s = self.state
        s.optimizer_steps += 1
        s.step_in_phase += 1
        if s.step_in_phase < self.steps_per_phase:
            return False
        self._switch()
        return True

    def on_nan(self) -> bool:
        """A step dropped for missing/NaN advantages [code]: switch to the other modality at once, in-phase
        counter to 0, cycle index unchanged (also when leaving the second phase), not counted. Always True."""
        s = self.state
        s.phase = "audio" if s.phase == "video" else "video"
        s.step_in_phase = 0
        s.nan_switches += 1
        return True

    def prompts_of(self, cycle: int, num_prompts: int | None = None) -> list[int]:
        """Indices into the shuffled prompt list used by ``cycle`` (both phases), wrapping modulo num_prompts."""
        if not (isinstance(cycle, int) and cycle >= 0):
            _fail(f"cycle must be an int >= 0, got {cycle!r}")
        if num_prompts is not None and not (isinstance(num_prompts, int) and num_prompts >= 1):
            _fail(f"num_prompts must be an int >= 1 or None, got {num_prompts!r}")
        idx = range(cycle * self.prompts_per_cycle, (cycle + 1) * self.prompts_per_cycle)
        return [i % num_prompts for i in idx] if num_prompts else list(idx)

    def step_prompts(self, num_prompts: int | None = None) -> list[int]:
        """The current step's prompts (one per GPU): block ``step_in_phase`` of the cycle's prompts."""
        k, n = self.state.step_in_phase, self.prompts_per_step
        return self.prompts_of(self.state.cycle, num_prompts)[k * n : (k + 1) * n]

    def state_dict(self) -> dict:
        return {
            "steps_per_phase": self.steps_per_phase,
            "prompts_per_cycle": self.prompts_per_cycle,
            "start": self.start,
            **asdict(self.state),
        }

    def load_state_dict(self, state: Mapping) -> None:
        for key in ("steps_per_phase", "prompts_per_cycle", "start"):
            if state.get(key) != getattr(self, key):
                _fail(f"state {key}={state.get(key)!r} does not match this schedule's {getattr(self, key)!r}")
        fields = {k: state.get(k) for k in PhaseState.__dataclass_fields__}
        if fields["phase"] not in PHASES:
            _fail(f"state phase must be 'video' or 'audio', got {fields['phase']!r}")
        for k in ("cycle", "step_in_phase", "optimizer_steps", "nan_switches"):
            if not (isinstance(fields[k], int) and fields[k] >= 0):
                _fail(f"state {k} must be an int >= 0, got {fields[k]!r}")
        if fields["step_in_phase"] >= self.steps_per_phase:
            _fail(
                f"state step_in_phase must be < steps_per_phase={self.steps_per_phase}, got {fields['step_in_phase']}"
            )
        self.state = PhaseState(**fields)


def av_grpo_lr_factor(step: int, total: int = TOTAL_STEPS, first: float = 10.0) -> float:  # 1e-5 / 1e-6
    """Multiplier of ``LR`` (1e-6) for AV-GRPO step ``step`` (0-based, dropped NaN steps not counted).

    [code] sets the rate AFTER each step, from the count n of steps done: n <= 1 ("warm-up" from 1e-6 to
    1e-6) -> 1, else 0.5·(1 + cos(π(n−1)/(total−1))), reaching 0 at n = total (never used). So step k >= 1
    runs at 0.5·(1 + cos(π(k−1)/(total−1))) = ``flowrl.lr.lr_factor(k, total, "cosine", warmup=1)``, and
    step 0 at the optimizer's initial rate: ``first`` = that rate / 1e-6 (the shipped yaml's 1e-5: 10, the
    default). flowrl's lr_factor warms up from 0: its step 0 would be 0. Every optimizer step of one AV-GRPO
    step (one per sample and transition) runs at the same rate.
    """
    if not (isinstance(total, int) and total >= 2):
        _fail(f"total must be an int >= 2, got {total!r}")
    if not (isinstance(step, int) and 0 <= step):
        _fail(f"step must be an int >= 0, got {step!r}")
    if not (isinstance(first, (int, float)) and first >= 0):
        _fail(f"first must be a number >= 0, got {first!r}")
    return float(first) if step == 0 else lr_factor(step, total, "cosine", warmup=LR_WARMUP_STEPS)


def av_grpo_learning_rate(
    step: int,
    total: int,
    base_lr: float,
    first_lr: float,
    schedule: str = "cosine",
    warmup: int = LR_WARMUP_STEPS,
    min_ratio: float = 0.0,
) -> float:
    """The learning rate of AV-GRPO step ``step`` (0-based; dropped NaN steps not counted) of ``total``:
    ``first_lr`` at step 0 (the optimizer's initial rate [code]), then ``base_lr · lr_factor(step, total,
    schedule, warmup, min_ratio)`` (``flowrl.lr``). With the code's 1e-6, 1e-5, cosine and one warm-up step
    this is ``LR · av_grpo_lr_factor(step, total)``; it is never 0 at step 0."""
    if not (isinstance(step, int) and step >= 0):
        _fail(f"step must be an int >= 0, got {step!r}")
    if not (isinstance(total, int) and total >= 1):
        _fail(f"total must be an int >= 1, got {total!r}")
    for name, rate in (("base_lr", base_lr), ("first_lr", first_lr)):
        if not (isinstance(rate, (int, float)) and 0 < rate < math.inf):
            _fail(f"{name} must be a finite number > 0, got {rate!r}")
    return float(first_lr) if step == 0 else base_lr * lr_factor(step, total, schedule, warmup, min_ratio)
