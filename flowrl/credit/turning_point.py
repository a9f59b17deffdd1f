"""TP-GRPO credit (arXiv 2602.06422, YunzeTong/TurningPoint-GRPO; ``specs/addon_methods.md`` §2).

Incremental step rewards, with turning points credited the aggregated long-term reward.

Conventions (shared with ``flowrl.credit.dense``):

* **Steps.** The SDE window is transitions ``k = 0..W-1`` of the plan (``flowrl.plan``: transition
  ``k`` takes state ``k`` to state ``k + 1``, from noise to data); §2 uses the same k. The window starts
  at transition 0 in the released runs; ``window_to_transitions`` places it in a plan of T transitions.
* **Reward table.** ``rewards`` is (N, W+1), columns R_0..R_W of §2 step 2. Column 0 is the pure-ODE
  sample from the same initial noise. Column m (1..W-1) is the ODE completion of state m, i.e. the state
  right after the m-th SDE step. Column W is the rollout's own final reward. Steps after the window are
  ODE steps, so column W is also "the completion of state W": this is ``dense``'s table cut at state W
  (``dense.completion_table`` builds it).
  Noise: the paper means column 0 to share the rollout's initial latent. The released runs used an
  independent ODE sample of the prompt instead. That choice belongs to the rollout (the seam), not to
  this module, and the math here is the same either way.
* **Rows** are samples in GLOBAL order, ``group_ids`` (N,) their prompt groups (not necessarily
  contiguous). Balancing, which the authors run per process on each sampled batch before any gather
  (``scripts/my_train_sd3_fast_with_op3.py``, "balanced bonus"), takes ``pools`` (N,): the id of each
  sample's balancing pool. Pass each sample's rollout batch to match the code (``TPGRPO`` does); ``None``
  pools all N samples together.
* **Ties.** Every turning point of a sample carries the sample's Δ, so equal |Δ| is the rule, not the
  exception. The authors pick with ``torch.topk``, whose order among equal values is unspecified (it
  differs between CPU and CUDA kernels), so their choice cannot be reproduced; flowrl keeps, among equal
  |Δ|, the earlier sample in global order, then the earlier step: deterministic, and the same for any
  number of processes, since global order does not depend on it.
* **Output.** Advantages are (N, W), column k for window transition k. Normalisation is per column by
  ``dense.group_zscore``: the population std of the group (``global_std=False``, the released config),
  plus ``eps = 1e-4``. A group whose values in a column are all equal gets exactly 0 there.
  Clipping to ±5 and dropping all-zero rows are the caller's job: ``flowrl.advantages.clip_advantages``
  does the first, and the trainer already drops rows that are 0 at every step (``active_samples``
  reports them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flowrl.advantages import group_zscore
from flowrl.credit.dense import ExtraCost, step_gains


def increments(rewards: torch.Tensor) -> torch.Tensor:
    """§2 step 3: d_k = R_{k+1} - R_k. rewards: (N, W+1) -> (N, W); rows sum to Δ = R_W - R_0."""
    return step_gains(rewards)


def global_trend(rewards: torch.Tensor) -> torch.Tensor:
    """§2 step 3: Δ = R_W - R_0, taken directly (not as Σ d_k, whose rounding could flip a 0). (N,)"""
    r = rewards.float()
    return r[:, -1] - r[:, 0]


def turning_points(rewards: torch.Tensor, first_step: bool = True, consistency: bool = True) -> torch.Tensor:
    """Turning-point indicator τ (§2 step 4). rewards: (N, W+1). Returns (N, W) bool.

    With s_k = sign(d_k) sign(Δ) and c_k = [sign(d_k) sign(R_W - R_{k+1}) > 0] (the rest of the
    trajectory keeps step k's direction):
      k >= 1: τ_k = [s_{k-1} < 0] [s_k > 0] c_k;
      k = 0:  τ_0 = c_0 (first-step rule), or 0 when ``first_step`` is off.
    c_{W-1} is always 0 (R_W - R_W = 0), so the last window step is never a turning point.
    ``consistency=False`` is the code's unconstrained variant: c_k is dropped for k >= 1, and the
    first-step rule becomes [s_0 > 0].
    """
    r = rewards.float()
    sign_d = torch.sign(increments(r))  # (N, W)
    s = sign_d * torch.sign(global_trend(r))[:, None]  # (N, W) trend agreement
    keeps = sign_d * torch.sign(r[:, -1:] - r[:, 1:]) > 0  # (N, W) c_k
    tp = torch.zeros_like(keeps)
    tp[:, 1:] = (s[:, :-1] < 0) & (s[:, 1:] > 0)
    if consistency:
        tp[:, 1:] &= keeps[:, 1:]
    if first_step:
        tp[:, 0] = keeps[:, 0] if consistency else s[:, 0] > 0
    return tp


def _top_by_magnitude(flat_idx: torch.Tensor, magnitude: torch.Tensor, keep: int) -> torch.Tensor:
    """The ``keep`` entries of flat_idx (ascending, row-major) with the largest magnitude; ties go to the
    lower flat index (earlier sample, then earlier step): a stable sort, so the choice is deterministic."""
    order = torch.sort(magnitude, descending=True, stable=True).indices
    return flat_idx[order[:keep]]


def balance_turning_points(mask: torch.Tensor, delta: torch.Tensor, pools: torch.Tensor | None = None) -> torch.Tensor:
    """§2 step 5 (paper App. D, code "balanced bonus"): within each pool, over all samples and steps,
    split the turning points by sign(Δ). If both signs occur, keep min(n+, n-) of each, those with the
    largest |Δ|, and return the rest to normal steps.
    If only one sign occurs, keep them all. Among equal |Δ| the earlier sample (rows in global order),
    then the earlier step, is kept (module docstring, "Ties").

    mask: (N, W) bool; delta: (N,) Δ per sample; pools: (N,) pool ids or None (one pool).
    Returns (N, W) bool.
    """
    n, w = mask.shape
    pools = torch.zeros(n, dtype=torch.long) if pools is None else pools
    if pools.shape != (n,):
        raise ValueError(f"pools has shape {tuple(pools.shape)}, expected ({n},)")
    delta_flat = delta.float()[:, None].expand(n, w).reshape(-1)  # (N*W,)
    out = mask.clone().reshape(-1)
    for p in torch.unique(pools):
        in_pool = (mask & (pools == p).to(mask.device)[:, None]).reshape(-1)
        idx = in_pool.nonzero().flatten()  # flat (sample, step) indices, row-major
        pos, neg = idx[delta_flat[idx] > 0], idx[delta_flat[idx] < 0]
        if len(pos) == 0 or len(neg) == 0:
            continue
        keep = min(len(pos), len(neg))
        out[idx] = False
        out[_top_by_magnitude(pos, delta_flat[pos].abs(), keep)] = True
        out[_top_by_magnitude(neg, delta_flat[neg].abs(), keep)] = True
    return out.reshape(n, w)


def step_rewards(
    rewards: torch.Tensor, mask: torch.Tensor, eta: float = 1.0, drop_incremental: bool = True
) -> torch.Tensor:
    """§2 step 6: r_k = η (R_W - R_k) at turning points (the sum of all increments from k to the end),
    d_k elsewhere. ``drop_incremental=False`` keeps d_k too, r_k = d_k + η (R_W - R_k) (the code's
    ``drop_original_reward_when_having_bonus`` off). rewards: (N, W+1); mask: (N, W). Returns (N, W)."""
    r = rewards.float()
    d = increments(r)  # (N, W)
    to_go = r[:, -1:] - r[:, :-1]  # (N, W) R_W - R_k
    at_tp = eta * to_go if drop_incremental else d + eta * to_go
    return torch.where(mask, at_tp, d)


@dataclass
class TurningPointCredit:
    """Everything one TP-GRPO advantage pass computes; all (N, W) but ``delta`` (N,)."""

    advantages: torch.Tensor
    step_rewards: torch.Tensor
    turning_points: torch.Tensor  # bool, after balancing: the steps that got R_W - R_k
    detected: torch.Tensor  # bool, before balancing
    delta: torch.Tensor

    @property
    def active(self) -> torch.Tensor:
        return active_samples(self.advantages)

    def metrics(self) -> dict[str, float]:
        tp = self.turning_points
        return {
            "tp/detected_frac": float(self.detected.float().mean()),
            "tp/kept_frac": float(tp.float().mean()),
            "tp/kept_positive": float((tp & (self.delta > 0)[:, None]).sum()),
            "tp/kept_negative": float((tp & (self.delta < 0)[:, None]).sum()),
            "tp/active_frac": float(self.active.float().mean()),
        }


def turning_point_credit(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    eta: float = 1.0,
    first_step: bool = True,
    consistency: bool = True,
    balance: bool = True,
    pools: torch.Tensor | None = None,
    drop_incremental: bool = True,
    eps: float = 1e-4,
    global_std: bool = False,
) -> TurningPointCredit:
    """TP-GRPO credit, §2 steps 3-7, with the released launch script's settings as defaults.

    rewards: (N, W+1) R_0..R_W; group_ids: (N,). Returns advantages (N, W), where column k is the
    per-step group z-score (§2 step 7) of the step rewards.
    """
    if rewards.ndim != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be (N, W+1) with W >= 1, got {tuple(rewards.shape)}")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards holds NaN or inf: a reward call failed upstream")
    delta = global_trend(rewards)
    detected = turning_points(rewards, first_step, consistency)
    kept = balance_turning_points(detected, delta, pools) if balance else detected
    r = step_rewards(rewards, kept, eta, drop_incremental)
    adv = group_zscore(r, group_ids, eps=eps, global_std=global_std)
    return TurningPointCredit(adv, r, kept, detected, delta)


def active_samples(advantages: torch.Tensor) -> torch.Tensor:
    """§2 step 7: samples with a nonzero advantage at some step (the others are dropped). (N,) bool"""
    return (advantages != 0).any(dim=1)


def window_to_transitions(advantages: torch.Tensor, num_transitions: int, start: int = 0) -> torch.Tensor:
    """(N, W) window advantages -> (N, T) plan columns, 0 outside transitions start..start+W-1."""
    n, w = advantages.shape
    if not 0 <= start <= num_transitions - w:
        raise ValueError(f"a window of {w} steps at {start} does not fit in {num_transitions} transitions")
    out = advantages.new_zeros(n, num_transitions)
    out[:, start : start + w] = advantages
    return out


def extra_cost(num_steps: int, window: int, cfg_passes: int = 1) -> ExtraCost:
    """§2 "Extra cost" over Flow-GRPO per sample: W more reward calls (pure ODE + W-1 intermediates; the
    main one is Flow-GRPO's own) and T + Σ_{m=1..W-1} (T - m) more NFEs (the pure-ODE rollout plus the
    completions of states 1..W-1), times ``cfg_passes``. SD3 (T=10, W=9): 54 extra NFEs, 64 in all."""
    if not 1 <= window <= num_steps:
        raise ValueError(f"window must be in 1..{num_steps}, got {window}")
    nfe = num_steps + sum(num_steps - m for m in range(1, window))
    return ExtraCost(nfe=nfe * cfg_passes, reward_calls=window)
