"""G²RPO credit math (Granular-GRPO, arXiv 2510.01982; code bcmi/Granular-GRPO): specs/addon_methods.md §3.

Pure functions of schedules, plans and reward tables; the method seam samples the anchor, the branches and
the ODE tails and calls rewards.

Conventions
-----------
* ``sigmas`` is the full schedule, (T+1,) from σ_0 = 1 down to σ_T = 0. State j sits at σ_j; transition
  j goes from state j to state j+1 (``flowrl.plan``).
* **Branch** (§3.2, Singular Stochastic Sampling). For a trained step k, every member of a group starts
  from the group's shared anchor state a_k (state k of one ODE trajectory from the group's shared noise)
  and takes ONE SDE transition σ_k → σ_{k+1} (``branch_plan(sigmas, k)``), landing at state k+1.
  E-GRPO's merged branch is the same plan with end = n + l.
* **ODE tail** of granularity λ from state index m (m = k+1 here, m = n+l for E-GRPO), §3.3 [code]:
  the code walks the index list L = [m, m+1, m+1+λ, m+1+2λ, …] (entries ≤ T) with Euler steps and keeps
  the x0-prediction x − σ·v of the LAST EVALUATED state; its final Euler step (to L[-1]) is discarded.
  So the velocity is evaluated at E = L[:-1] (``tail_indices``; ⌈(T−m)/λ⌉ NFEs) and the image is
  x − σ_{E[-1]}·v(x, σ_{E[-1]}). ``ode_tail`` writes this as a plan of plain ODE transitions
  σ_{E[0]} → σ_{E[1]} → … → σ_{E[-1]} → 0: an Euler step to σ = 0 computes x + (0 − σ)·v, which is
  bitwise the x0-prediction. Example T = 16, m = 4, λ = 2: E = [4, 5, 7, 9, 11, 13], image = x0-pred at
  σ_13 (the code's step 13 → 15 is never used). For λ = 1, E = [m, …, T−1] and the last transition is the
  schedule's own last step. m = T gives an empty tail (the input is the image; [inferred], the code has
  no such case).
* Reward tables are in GLOBAL sample order with ``group_ids`` (N,) long: members of a group need not be
  contiguous. ``rewards`` is (N, *S, L, C): sample, any per-sample axes S (e.g. K trained steps when a
  row holds all of a member's branches; none when each (prompt, step) is its own group), granularity,
  reward component. A group whose values are all equal gets advantages of exactly 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from flowrl.advantages import group_zscore
from flowrl.plan import StepPlan


def tail_indices(num_steps: int, start: int, granularity: int) -> list[int]:
    """Schedule indices where an ODE tail from state ``start`` evaluates the velocity (one NFE each), §3.3.

    E = L[:-1] with L = [start, start+1, start+1+λ, …] (entries ≤ T = ``num_steps``); empty when start = T.
    T = 16, start = 4: λ = 2 -> [4, 5, 7, 9, 11, 13]; λ = 1 -> [4, …, 15].
    """
    if granularity < 1:
        raise ValueError(f"granularity must be >= 1, got {granularity}")
    if not 0 <= start <= num_steps:
        raise ValueError(f"tail start {start} is outside the schedule's states 0..{num_steps}")
    if start == num_steps:
        return []
    chain = [start] + list(range(start + 1, num_steps + 1, granularity))
    return chain[:-1]


@dataclass(frozen=True)
class OdeTail:
    """ODE completion of one branch state, ending in the x0-prediction (module docstring).

    indices: schedule indices of the velocity evaluations, in order (len = NFEs)
    plan:    len(indices) ODE transitions σ_{indices[i]} -> σ_{indices[i+1]}, the last one σ_{indices[-1]} -> 0;
             walk it from the state at σ_{indices[0]} and the final state is the clean image
    x0_jump: True when that last transition skips schedule points (indices[-1] < T-1): it is the
             x0-prediction of a coarse stride, not the schedule's own last step. False for λ = 1 and for
             an empty tail.
    """

    indices: tuple[int, ...]
    plan: StepPlan
    x0_jump: bool

    @property
    def nfes(self) -> int:
        return len(self.indices)


def ode_tail(sigmas: torch.Tensor, start: int, granularity: int) -> OdeTail:
    """The granularity-λ tail from state ``start`` over ``sigmas`` (T+1,), §3.3; ``sigma_at_one`` = full σ_1."""
    sigmas = sigmas.float().cpu()
    num_steps = len(sigmas) - 1
    idx = tail_indices(num_steps, start, granularity)
    visited = torch.cat([sigmas[idx], sigmas.new_zeros(1)])  # (n+1,): the evaluated sigmas, then 0
    n = len(idx)
    plan = StepPlan(
        sigma=visited[:-1].clone(),
        sigma_next=visited[1:].clone(),
        kinds=("ode",) * n,
        noise_levels=torch.zeros(n),
        train=torch.zeros(n, dtype=torch.bool),
        sigma_at_one=float(sigmas[1]),
    )
    return OdeTail(tuple(idx), plan, x0_jump=bool(idx) and idx[-1] < num_steps - 1)


def branch_plan(
    sigmas: torch.Tensor, start: int, end: int | None = None, noise_level: float = 0.7, kind: str = "flow_sde"
) -> StepPlan:
    """One trained ``kind`` transition σ_start -> σ_end (default end = start + 1), §3.2 / §4.4.

    ``sigma_at_one`` is the FULL schedule's σ_1, so a jump leaving σ = 1 uses Flow-GRPO's clamp
    g = a·sqrt(1/(1-σ_1)) whatever ``end`` is (a plan built from the sub-list [σ_0, σ_end] would get σ_end).
    """
    sigmas = sigmas.float().cpu()
    end = start + 1 if end is None else end
    if not 0 <= start < end <= len(sigmas) - 1:
        raise ValueError(f"branch {start} -> {end} must satisfy 0 <= start < end <= {len(sigmas) - 1}")
    return StepPlan(
        sigma=sigmas[start : start + 1].clone(),
        sigma_next=sigmas[end : end + 1].clone(),
        kinds=(kind,),
        noise_levels=torch.tensor([noise_level], dtype=torch.float32),
        train=torch.ones(1, dtype=torch.bool),
        sigma_at_one=float(sigmas[1]),
    )


def granular_zscores(
    rewards: torch.Tensor, group_ids: torch.Tensor, *, unbiased: bool = True, eps: float = 1e-8
) -> torch.Tensor:
    """A_{k,λ,c}^i of §3.4: the per-(step, granularity, component) z-scores. (N, *S, L, C) -> same shape.

    Defaults are the code's (bcmi/Granular-GRPO and VisualGRPO: ``std(dim=0) + 1e-8``, the unbiased std);
    ``eps = 0`` is the paper's plain (R - mean) / std, with flat groups still exactly 0.
    """
    if rewards.ndim < 3:
        raise ValueError(f"rewards must be (N, ..., granularities, components), got shape {tuple(rewards.shape)}")
    return group_zscore(rewards, group_ids, unbiased=unbiased, eps=eps)


def granular_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, *, unbiased: bool = True, eps: float = 1e-8
) -> torch.Tensor:
    """Multi-Granularity Advantage Integration, §3.5: A^i = Σ_λ Σ_c z-score. (N, *S, L, C) -> (N, *S).

    A SUM over granularities and reward components (e.g. HPS + CLIP), not a mean; clip to ±5 afterwards
    (``flowrl.advantages.clip_advantages``), as the code clamps the summed advantage.
    """
    return granular_zscores(rewards, group_ids, unbiased=unbiased, eps=eps).sum(dim=(-2, -1))


@dataclass(frozen=True)
class BranchCost:
    """Sampling cost of one group (prompt) under anchor-branch credit (§3 / §4 "Extra cost").

    NFEs are transformer forwards, all no-grad, already multiplied by ``cfg_passes``; reward calls are
    scored images. ``train_passes`` single-step forward/backward passes per group (batch 1, shared state).
    """

    anchor_nfes: int
    nfes_per_member: int
    reward_calls_per_member: int
    group_size: int
    train_passes: int
    baseline_nfes: int  # DanceGRPO / Flow-GRPO: G full SDE trajectories of T steps
    baseline_reward_calls: int

    @property
    def nfes(self) -> int:
        return self.anchor_nfes + self.group_size * self.nfes_per_member

    @property
    def reward_calls(self) -> int:
        return self.group_size * self.reward_calls_per_member


def branch_cost(
    num_steps: int,
    branches: Sequence[tuple[int, int]],
    granularities: Sequence[int],
    group_size: int,
    cfg_passes: int = 1,
) -> BranchCost:
    """Cost of branches (start, end): per member, each branch is 1 SDE NFE plus one ODE tail per λ from ``end``.

    Counts one SDE forward per member, as the spec and both repos do; since members share a_k, a seam that
    forwards a_k once per group saves (G - 1)·|branches|·cfg_passes NFEs.
    """
    tails = sum(len(tail_indices(num_steps, end, lam)) for _, end in branches for lam in granularities)
    return BranchCost(
        anchor_nfes=num_steps * cfg_passes,
        nfes_per_member=(len(branches) + tails) * cfg_passes,
        reward_calls_per_member=len(branches) * len(granularities),
        group_size=group_size,
        train_passes=len(branches),
        baseline_nfes=group_size * num_steps * cfg_passes,
        baseline_reward_calls=group_size,
    )


def extra_cost(
    num_steps: int,
    granularities: Sequence[int] = (1, 2),
    cfg_passes: int = 1,
    trained_steps: Sequence[int] | None = None,
    group_size: int = 12,
) -> BranchCost:
    """G²RPO's cost, §3: branches k -> k+1 for k in ``trained_steps`` (default the first half, range(T // 2)).

    T = 16, M = {0..7}, Λ = {1, 2}, G = 12: per member Σ_k [1 + (15-k) + ⌈(15-k)/2⌉] = 8 + 92 + 48 = 148,
    per group 16 + 12·148 = 1792 NFEs vs 192, and 12·8·2 = 192 reward calls vs 12.
    """
    steps = range(num_steps // 2) if trained_steps is None else trained_steps
    return branch_cost(num_steps, [(k, k + 1) for k in steps], granularities, group_size, cfg_passes)
