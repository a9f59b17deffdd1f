"""AV-GRPO math (arXiv 2609.29816; code zhiyuxu03/AV-GRPO): ``specs/addon_methods.md`` §7, as pure functions.

This module holds the credit (5: ``modality_advantages``, ``zscore``), the DeSync reward (7) and the method's
constants. The rest of the math lives where its kind does: the capped noise and the SDE step with a given g (1-2)
in ``flowrl.sde`` (``capped_noise``, ``sde_step_with_g``), the weights and the loss (3-4) in ``flowrl.losses``
(``policy_weight``, ``reward_weight``, ``kl_factor``, ``av_grpo_loss``), the phase schedule and the learning rate
(6, 8) in ``flowrl.methods.av_grpo`` (``PhaseSchedule``, ``av_grpo_learning_rate``). Nothing here touches a
model, a trainer or a file.
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
   max_std = 0.5. At σ = 1 the code clamps 1 − t at 1e-5 (``flowrl.sde.ONE_MINUS_T_MIN``): g = a·sqrt(1e5), so the first
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
   (``flowrl.losses.T_CLAMP``; at t = 1, λ_pol = sqrt(999/|Δ|)); its 1e-10 and 1e-8 guards on denominators are left out.
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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from flowrl.checks import check_phase, fail

NOISE_LEVEL = {"video": 0.02, "audio": 0.8}  # a per trained modality [code: Corrections]
A_VIDEO, A_AUDIO = NOISE_LEVEL["video"], NOISE_LEVEL["audio"]
CLIP_RANGE = 0.2  # PPO clip ε [code]
BETA = {"video": 0.01, "audio": 0.002}  # KL weight per trained modality [code]
BETA_VIDEO, BETA_AUDIO = BETA["video"], BETA["audio"]
Z_EPS = 1e-8  # added to both z-scores' std [code]
VQ_FLOOR, CLAP_FLOOR = 0.0, 0.4  # fallback thresholds: VQ mean <= 0, CLAP mean < 0.4 [code]
STEPS_PER_PHASE, PROMPTS_PER_CYCLE = 4, 32  # on 8 GPUs: 8 prompts a step, one per GPU [code]
LR, LR_WARMUP_STEPS, TOTAL_STEPS = 1e-6, 1, 1440  # [code]
FIRST_LR = 1e-5  # the first AV-GRPO step's rate: the yaml's, before the loop sets 1e-6 [code: Corrections]
NEGATIVE_PROMPT = "worst quality, inconsistent motion, blurry, jittery, distorted"  # the CFG negative [code]

Number = float | int
# --------------------------------------------------------------------------------------------------------
# 5. Rewards to advantages
# --------------------------------------------------------------------------------------------------------


def zscore(x: torch.Tensor, unbiased: bool, eps: float = Z_EPS) -> torch.Tensor:
    """(x − mean) / (std + eps) over the LAST dim (the group), statistics in fp64, result fp32.

    std: population (``unbiased=False``, the per-metric stage) or sample (``unbiased=True``, the final
    stage). A row whose values are all equal gets exactly 0; NaN propagates. x: (G,) or (M, G), G >= 2.
    """
    if x.ndim not in (1, 2) or x.shape[-1] < 2:
        fail(f"x must be (G,) or (M, G) with G >= 2, got shape {tuple(x.shape)}")
    if not (isinstance(eps, (int, float)) and eps > 0):
        fail(f"eps must be > 0, got {eps!r}")
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
        fail("metrics is empty: pass the phase's reward metrics, e.g. {'vq': ..., 'clip': ..., 'desync': ...}")
    names = list(metrics)
    values = [torch.as_tensor(metrics[k], dtype=torch.float64) for k in names]  # lists: exact python floats
    shape = values[0].shape
    if len(shape) not in (1, 2) or shape[-1] < 2 or any(m.shape != shape for m in values):
        fail(
            f"metrics must all be (G,) or (M, G) of one shape with G >= 2, got "
            f"{ {k: tuple(m.shape) for k, m in zip(names, values)} }"
        )
    stack = torch.stack(values)  # (K, [M,] G)
    if torch.isinf(stack).any():
        fail(f"metrics hold inf: {[k for k, m in zip(names, values) if torch.isinf(m).any()]}")
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
    check_phase(phase)
    names, stack = _stack_metrics(metrics)
    z = zscore(stack.flatten(0, -2), unbiased=False, eps=eps).reshape(stack.shape)  # (K, [M,] G)
    score = z.mean(dim=0)
    key, floor, rule = (vq_key, vq_floor, "vq_only") if phase == "video" else (clap_key, clap_floor, "clap_only")
    fallback = torch.zeros(score.shape[:-1], dtype=torch.bool, device=score.device)
    if key is None:
        rule = None
    else:
        if key not in metrics:
            fail(f"metrics has no {key!r}, the {phase} phase's fallback metric (set vq_key/clap_key, or None)")
        group_mean = stack[names.index(key)].mean(dim=-1)
        fallback = group_mean <= floor if phase == "video" else group_mean < floor
        score = torch.where(fallback[..., None], z[names.index(key)], score)
    return ModalityAdvantages(zscore(score, unbiased=True, eps=eps), score, fallback, rule)


def desync_reward(offsets: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """−mean_w |offset_w| over the LAST dim (Synchformer's predicted audio-video offsets, seconds, one per
    window): 0 for perfect sync, the maximum. offsets: (W,) or (..., W) -> () or (...) fp32."""
    off = torch.as_tensor(offsets, dtype=torch.float32)
    if off.ndim == 0 or off.shape[-1] == 0:
        fail(f"offsets must be (..., W) with W >= 1 windows, got shape {tuple(off.shape)}")
    if not torch.isfinite(off).all():
        fail("offsets hold NaN or inf")
    return 0.0 - off.abs().mean(dim=-1)  # 0.0 - 0 is +0.0, not -0.0
