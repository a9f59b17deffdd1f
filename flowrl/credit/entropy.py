"""E-GRPO credit math (arXiv 2601.00423; code shengjun-zhang/VisualGRPO "grpo_merge"): specs/addon_methods.md §4.

Pure functions of schedules, plans and reward tables; the method seam samples and scores.

Conventions (as in ``flowrl.credit.granular``)
----------------------------------------------
* ``sigmas`` is the full schedule, (T+1,) from σ_0 = 1 to σ_T = 0; transition j goes from state j to j+1.
* A **merged step** ``MergedStep(start=n, end=n+l)`` replaces transitions n..n+l-1 by ONE SDE transition
  σ_n -> σ_{n+l}. This is exactly ``flowrl.sde``'s existing step called with sigma = σ_n and
  sigma_next = σ_{n+l} (checked against the code's ``_flow_grpo_step(..., merge_step=l)``): dt = σ_{n+l} - σ_n,
  the noise scale g evaluated at σ_n, std = g(σ_n)·sqrt(σ_n - σ_{n+l}), drift mean of §0 with that dt.
  ``sigma_at_one`` stays the FULL schedule's σ_1 (the code's ``sigmas[1]``), also when n = 0 and l > 1:
  build plans with ``merged_plan`` / ``granular.branch_plan``, never ``plan.ode_plan``/``make_plan`` on the
  merged sigma list (which would take σ_l as σ_1).
* After the merged step the ODE tail starts at state n+l: ``granular.ode_tail(sigmas, n + l, λ)``, i.e. the
  §4.5 restart at σ_{n+l+1} with stride λ. (The released sampler starts its tail loop at index n+1 of the
  spliced schedule, which for l > 1 re-runs steps n+1..n+l-1 on a latent already at σ_{n+l}; the default
  merge list is all 1, which hides it. We follow the spec, whose cost note says the tail is l-1 NFEs shorter.)
* Reward tables are in GLOBAL sample order with ``group_ids`` (N,); flat groups get exactly 0.

Entropy (§4, [paper])
---------------------
An SDE step is Gaussian with per-element std s over d latent elements, so its differential entropy is
h = (d/2)·log(2πe·s²). ``quantity`` selects what is returned and thresholded:

* ``"h_tilde"`` (default): h̃ = 2h/d = log(2πe·s²), independent of d; the spec's [inferred] reading of τ = 2.2;
* ``"per_element"``: h/d = ½·log(2πe·s²);
* ``"total"``: h itself, which needs ``dim`` = d (e.g. C·H·W).

flow_sde: s = a·sqrt(σ_n/(1-σ̃_n))·sqrt(σ_n - σ_{n+l}) (σ̃ the σ = 1 clamp), so h̃ grows strictly with l.
cps: s = σ_{n+l}·sin(aπ/2): merging SHRINKS the std, so the adaptive rule is defined for flow_sde only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from flowrl.credit.granular import BranchCost, branch_cost, branch_plan, granular_advantages
from flowrl.plan import StepPlan
from flowrl.sde import StepOutput, flow_sde_g, step

EntropyQuantity = Literal["h_tilde", "per_element", "total"]
_LOG_2PI_E = math.log(2 * math.pi * math.e)


@dataclass(frozen=True)
class MergedStep:
    """One SDE transition from state ``start`` (σ_n) to state ``end`` (σ_{n+l}); ``length`` = l."""

    start: int
    end: int

    def __post_init__(self):
        if not 0 <= self.start < self.end:
            raise ValueError(f"merged step {self.start} -> {self.end} needs 0 <= start < end")

    @property
    def length(self) -> int:
        return self.end - self.start


def transition_std(
    sigma: float, sigma_next: float, noise_level: float, kind: str = "flow_sde", sigma_at_one: float | None = None
) -> float:
    """Per-element std of one SDE transition σ -> σ' (§0), computed as ``flowrl.sde`` computes it (fp64)."""
    sigma, sigma_next, a = float(sigma), float(sigma_next), float(noise_level)
    if kind == "flow_sde":
        return flow_sde_g(sigma, a, sigma_at_one) * math.sqrt(-(sigma_next - sigma))
    if kind == "cps":
        return sigma_next * math.sin(a * math.pi / 2)
    raise ValueError(f"transition_std supports 'flow_sde' and 'cps', got {kind!r}")


def gaussian_entropy(std: float, quantity: EntropyQuantity = "h_tilde", dim: int | None = None) -> float:
    """Entropy of N(μ, std² I_d) as ``quantity`` (module docstring); -inf for std = 0."""
    h_tilde = _LOG_2PI_E + 2 * math.log(std) if std > 0 else -math.inf
    if quantity == "h_tilde":
        return h_tilde
    if quantity == "per_element":
        return 0.5 * h_tilde
    if quantity == "total":
        if dim is None or dim < 1:
            raise ValueError("quantity='total' needs dim, the number of latent elements per sample")
        return 0.5 * dim * h_tilde
    raise ValueError(f"unknown entropy quantity {quantity!r}; choose h_tilde, per_element or total")


def merged_entropy(
    sigmas: torch.Tensor,
    start: int,
    length: int,
    noise_level: float,
    kind: str = "flow_sde",
    quantity: EntropyQuantity = "h_tilde",
    dim: int | None = None,
) -> float:
    """h̃(n, l) of §4.2 (or another ``quantity``): the entropy of the one transition σ_n -> σ_{n+l}."""
    if not (0 <= start and length >= 1 and start + length <= len(sigmas) - 1):
        raise ValueError(f"merge {start} -> {start + length} leaves the schedule of {len(sigmas) - 1} steps")
    s, s_next = float(sigmas[start]), float(sigmas[start + length])
    return gaussian_entropy(transition_std(s, s_next, noise_level, kind, float(sigmas[1])), quantity, dim)


def step_entropies(
    sigmas: torch.Tensor,
    noise_level: float,
    kind: str = "flow_sde",
    quantity: EntropyQuantity = "h_tilde",
    dim: int | None = None,
) -> torch.Tensor:
    """(T,) fp64: entropy of every unmerged transition j (σ_j -> σ_{j+1}); closed form, once per schedule."""
    num_steps = len(sigmas) - 1
    values = [merged_entropy(sigmas, j, 1, noise_level, kind, quantity, dim) for j in range(num_steps)]
    return torch.tensor(values, dtype=torch.float64)


def merge_length(
    sigmas: torch.Tensor,
    start: int,
    noise_level: float = 0.7,
    tau: float = 2.2,
    *,
    kind: str = "flow_sde",
    quantity: EntropyQuantity = "h_tilde",
    dim: int | None = None,
    max_length: int | None = None,
) -> int:
    """Smallest l >= 1 with h̃(n, l) >= τ (§4.2, [inferred]); ``max_length`` (default T - n) if none reaches τ."""
    if kind != "flow_sde":
        raise ValueError(f"adaptive merging needs 'flow_sde' (a merged {kind!r} step does not gain entropy)")
    cap = len(sigmas) - 1 - start if max_length is None else min(max_length, len(sigmas) - 1 - start)
    for length in range(1, cap + 1):
        if merged_entropy(sigmas, start, length, noise_level, kind, quantity, dim) >= tau:
            return length
    return cap


def merged_steps(
    sigmas: torch.Tensor,
    starts: Sequence[int],
    noise_level: float = 0.7,
    *,
    tau: float = 2.2,
    lengths: int | Sequence[int] | None = None,
    quantity: EntropyQuantity = "h_tilde",
    dim: int | None = None,
    max_length: int | None = None,
) -> list[MergedStep]:
    """One merged step per active start n (§4.2, the spec's table; the code's eta_step_list): l = merge_length(n),
    or fixed ``lengths`` (one int for all, or one per start: the code's eta_step_merge_list)."""
    if lengths is None:
        ls = [
            merge_length(sigmas, n, noise_level, tau, quantity=quantity, dim=dim, max_length=max_length) for n in starts
        ]
    else:
        ls = [lengths] * len(starts) if isinstance(lengths, int) else list(lengths)
    if len(ls) != len(starts):
        raise ValueError(f"{len(ls)} merge lengths for {len(starts)} starts")
    steps = [MergedStep(n, n + length) for n, length in zip(starts, ls)]
    if any(s.end > len(sigmas) - 1 for s in steps):
        raise ValueError(f"a merged step ends past the schedule's last state {len(sigmas) - 1}: {steps}")
    return steps


def tiled_merged_steps(
    sigmas: torch.Tensor,
    stop: int,
    noise_level: float = 0.7,
    *,
    first: int = 0,
    tau: float = 2.2,
    length: int | None = None,
    quantity: EntropyQuantity = "h_tilde",
    dim: int | None = None,
) -> list[MergedStep]:
    """Consecutive, non-overlapping merged steps tiling the active steps first..stop-1 ([inferred] alternative).

    From n = ``first``: l = merge_length(n) (or ``length``), next n = n + l, while n < ``stop``; the last step
    may end past ``stop``. Boundaries are [s.start for s] + [steps[-1].end]. T = 16, τ = 2.2, stop = 8:
    (0, 2), (2, 4), (4, 8). Usable as the segments of ``merged_plan``.
    """
    if not 0 <= first < stop <= len(sigmas) - 1 or (length is not None and length < 1):
        raise ValueError(f"tiling needs 0 <= first < stop <= {len(sigmas) - 1} and length >= 1")
    steps, n = [], first
    while n < stop:
        l_n = length if length is not None else merge_length(sigmas, n, noise_level, tau, quantity=quantity, dim=dim)
        steps.append(MergedStep(n, min(n + l_n, len(sigmas) - 1)))
        n = steps[-1].end
    return steps


def merged_plan(
    sigmas: torch.Tensor, merged: Sequence[MergedStep], noise_level: float = 0.7, kind: str = "flow_sde"
) -> StepPlan:
    """Whole-schedule plan: each merged step is one trained ``kind`` transition σ_n -> σ_{n+l}; every other
    schedule step is an ODE transition. ``sigma_at_one`` is the full schedule's σ_1 (module docstring)."""
    sigmas = sigmas.float().cpu()
    num_steps = len(sigmas) - 1
    by_start = {s.start: s for s in merged}
    edges, j = [], 0  # (from, to, is_merged)
    while j < num_steps:
        s = by_start.pop(j, None)
        edges.append((j, s.end, True) if s else (j, j + 1, False))
        j = edges[-1][1]
    if by_start or j != num_steps:
        raise ValueError(f"merged steps must be disjoint and inside the {num_steps}-step schedule: {list(merged)}")
    sde = [m for _, _, m in edges]
    return StepPlan(
        sigma=sigmas[[a for a, _, _ in edges]],
        sigma_next=sigmas[[b for _, b, _ in edges]],
        kinds=tuple(kind if m else "ode" for m in sde),
        noise_levels=torch.tensor([noise_level if m else 0.0 for m in sde], dtype=torch.float32),
        train=torch.tensor(sde, dtype=torch.bool),
        sigma_at_one=float(sigmas[1]),
    )


def merged_transition(
    v: torch.Tensor,
    x: torch.Tensor,
    sigmas: torch.Tensor,
    merged: MergedStep,
    noise_level: float = 0.7,
    kind: str = "flow_sde",
    **step_kwargs,
) -> StepOutput:
    """The merged SDE transition from x at σ_n (§4.4): ``flowrl.sde.step`` with sigma = σ_n, sigma_next = σ_{n+l}
    and the full schedule's σ_1, read from ``branch_plan`` exactly as ``rollout.transition`` reads a plan.
    ``step_kwargs``: x_next, noise, generator, reduction."""
    plan = branch_plan(sigmas, merged.start, merged.end, noise_level, kind)
    s, s_next, a = float(plan.sigma[0]), float(plan.sigma_next[0]), float(plan.noise_levels[0])
    return step(kind, v, x, s, s_next, a, sigma_at_one=plan.sigma_at_one, **step_kwargs)


def merged_step_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    step_ids: torch.Tensor | None = None,
    *,
    unbiased: bool = True,
    eps: float = 1e-8,
) -> torch.Tensor:
    """Multi-step group-normalized advantage, §4.6: z-scores within the samples that share one merged step.

    rewards: (N, *S, L, C) as in ``granular_advantages`` (z-scores summed over granularities L and reward
    components C, the code's rule); group_ids: (N,) prompt groups; step_ids: (N,) the merged step of each
    row (e.g. its start n), or None when ``group_ids`` already identify (prompt, merged step). Rows are
    normalized within each (group_id, step_id) pair. Returns (N, *S). Defaults are the code's (unbiased std,
    + 1e-8); the paper's formula has no eps (``eps=0``).
    """
    if step_ids is not None:
        pairs = torch.stack([group_ids.long().cpu(), step_ids.long().cpu()], dim=1)  # (N, 2)
        group_ids = torch.unique(pairs, dim=0, return_inverse=True)[1].to(group_ids.device)
    return granular_advantages(rewards, group_ids, unbiased=unbiased, eps=eps)


def extra_cost(
    num_steps: int,
    merged: Sequence[MergedStep],
    granularities: Sequence[int] = (1, 2),
    cfg_passes: int = 1,
    group_size: int = 12,
) -> BranchCost:
    """E-GRPO's cost, §4: per member and merged step, 1 SDE NFE plus one tail per λ from state n+l.

    Reward calls G·|active|·|Λ|; the λ = 1 tail is l-1 NFEs shorter than G²RPO's. Entropy costs nothing.
    """
    return branch_cost(num_steps, [(s.start, s.end) for s in merged], granularities, group_size, cfg_passes)
