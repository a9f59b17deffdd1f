"""DenseGRPO credit (arXiv 2601.20218; ``specs/addon_methods.md`` §1): the reward gain of every step.

Conventions (the flowrl ones; the paper counts the other way):

* **Steps.** Transitions ``j = 0..T-1`` run from noise to data, as in ``flowrl.plan``: transition ``j``
  takes state ``j`` (sigma_j) to state ``j + 1``; state 0 is the initial noise, state T the final latent.
  The paper's step ``t = T..1`` maps ``x_t -> x_{t-1}``, so paper state ``x_t`` is our state ``T - t`` and
  paper step ``t`` is our transition ``j = T - t``.
* **Reward table.** ``completion_rewards`` is (N, T+1): column ``j`` is the reward of the deterministic
  ODE completion of state ``j`` (paper ``R_{T-j}``). Column 0 is the pure-ODE sample from the same
  initial noise (paper ``R_T``); column T is the terminal reward of the rollout itself, never re-run
  (paper ``R_0``). ``completion_table`` builds it from the three parts without touching any value.
* **Rows** are samples in GLOBAL order (all processes); ``group_ids`` (N,) names each sample's prompt
  group, and members of a group need not be contiguous.
* **Output.** Advantages are (N, T): column ``j`` is the advantage of transition ``j``.
* **Normalisation** (``group_zscore``): per column, ``(x - mean_group) / (std + eps)`` with the
  POPULATION std (``unbiased=False``, as Flow-GRPO's stat tracker) of the group, or of the whole column
  when ``global_std``; ``eps = 1e-4`` is added to the std (Flow-GRPO's guard, §1 "guard the std -> 0
  case with eps"). A group whose values in a column are all equal gets EXACTLY 0 there (set, not computed).
* **Noise** ``psi`` is (T,): ``psi[j]`` is the diffusion coefficient g of transition ``j`` (§1 step 6:
  "the SDE uses sigma_t = psi(t) directly"). A plan with kind ``"dance_sde"`` and ``noise_levels = psi``
  takes exactly that step (Flow-GRPO's drift, std ``g sqrt(|dt|)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flowrl.advantages import group_zscore
from flowrl.sde import flow_sde_g


def completion_table(pure_ode: torch.Tensor, intermediate: torch.Tensor, terminal: torch.Tensor) -> torch.Tensor:
    """(N, T+1) reward table from its parts: pure_ode (N,) = state 0, intermediate (N, T-1) = ODE
    completions of states 1..T-1, terminal (N,) = the rollout's own reward (state T, bitwise as given)."""
    if intermediate.ndim != 2 or intermediate.shape[0] != pure_ode.shape[0] or terminal.shape != pure_ode.shape:
        raise ValueError(
            f"expected pure_ode (N,), intermediate (N, T-1), terminal (N,); got {tuple(pure_ode.shape)}, "
            f"{tuple(intermediate.shape)}, {tuple(terminal.shape)}"
        )
    return torch.cat([pure_ode[:, None], intermediate, terminal[:, None]], dim=1)


def _check_table(completion_rewards: torch.Tensor) -> None:
    if completion_rewards.ndim != 2 or completion_rewards.shape[1] < 2:
        raise ValueError(f"completion_rewards must be (N, T+1) with T >= 1, got {tuple(completion_rewards.shape)}")
    if not torch.isfinite(completion_rewards).all():
        raise ValueError("completion_rewards holds NaN or inf: a reward call failed upstream")


def step_gains(completion_rewards: torch.Tensor) -> torch.Tensor:
    """Dense reward of §1 step 3, ΔR_t = R_{t-1} - R_t, in transition order.

    completion_rewards: (N, T+1). Returns (N, T) with column j = R[:, j+1] - R[:, j], the gain of
    transition j. Telescoping: the row sums are R[:, T] - R[:, 0] (terminal minus pure-ODE reward).
    """
    _check_table(completion_rewards)
    r = completion_rewards.float()
    return r[:, 1:] - r[:, :-1]  # (N, T)


def dense_advantages(
    completion_rewards: torch.Tensor,
    group_ids: torch.Tensor,
    eps: float = 1e-4,
    baseline: bool = False,
    global_std: bool = False,
) -> torch.Tensor:
    """DenseGRPO advantages (§1 step 4): per transition, the group z-score of its gain.

    completion_rewards: (N, T+1); group_ids: (N,). Returns (N, T), column j for transition j.
    ``baseline``: the "Dense Reward (Baseline)" ablation (§1 step 7): normalise R_{t-1}, the reward of
    the completion of the state AFTER the step (column j+1), instead of the gain.
    """
    _check_table(completion_rewards)
    per_step = completion_rewards.float()[:, 1:] if baseline else step_gains(completion_rewards)  # (N, T)
    return group_zscore(per_step, group_ids, eps=eps, global_std=global_std)


# ---------------------------------------------------------------------------------- exploration calibration
def initial_psi(sigmas: torch.Tensor, a: float = 0.7, sigma_at_one: float | None = None) -> torch.Tensor:
    """ψ₀ [inferred, §1 step 6]: Flow-GRPO's g_j = a sqrt(σ_j / (1 - σ_j)) at each transition's start.

    sigmas: (T+1,) schedule from 1 down to 0. Returns (T,). Where σ_j = 1 the denominator uses
    ``sigma_at_one`` (default ``sigmas[1]``, the value ``flowrl.plan`` gives ``flow_sde``).
    """
    sigmas = sigmas.float().cpu()
    if sigma_at_one is None:
        sigma_at_one = float(sigmas[1])
    return flow_sde_g(sigmas[:-1], a, sigma_at_one)


def calibration_signs(gains: torch.Tensor, eps1: int = 2) -> torch.Tensor:
    """Direction of Algorithm 1's update per transition: +1 where |n+ - n-| < eps1 (balanced: explore
    more), else -1. gains: (N, T) over all sampled trajectories; a gain of exactly 0 counts in neither.
    Returns (T,) fp32."""
    n_pos = (gains > 0).sum(dim=0)  # (T,)
    n_neg = (gains < 0).sum(dim=0)
    balanced = (n_pos - n_neg).abs() < eps1
    return torch.where(balanced, 1.0, -1.0)


def calibrate_psi(
    psi: torch.Tensor, gains: torch.Tensor, eps1: int = 2, eps2: float = 0.01, floor: float = 1e-3
) -> torch.Tensor:
    """One iteration of Algorithm 1 (§1 step 6): ψ_j ± eps2 by ``calibration_signs``, clamped to >= floor.

    psi: (T,); gains: (N, T) (``step_gains`` of trajectories sampled with ``psi``). Returns (T,) fp32.
    ``floor`` > 0 [inferred: "clamp ψ > 0"]: a zero noise would make the step an untrainable ODE step.
    """
    if floor <= 0:
        raise ValueError(f"floor must be > 0 (a zero-noise step has no log-prob), got {floor}")
    if gains.ndim != 2 or gains.shape[1] != psi.shape[0]:
        raise ValueError(f"gains must be (N, {psi.shape[0]}) for psi of shape {tuple(psi.shape)}")
    signs = calibration_signs(gains, eps1).to(psi.device)
    return (psi.float() + eps2 * signs).clamp_min(floor)


def calibration_done(signs_history: torch.Tensor, min_flips: int = 3, max_iters: int = 50) -> bool:
    """Stop rule [inferred, §1 step 6]: every transition's update direction has flipped at least
    ``min_flips`` times, or ``max_iters`` iterations have run. signs_history: (K, T), row k the
    ``calibration_signs`` of iteration k."""
    if signs_history.shape[0] >= max_iters:
        return True
    if signs_history.shape[0] < 2:
        return False
    flips = (signs_history[1:] != signs_history[:-1]).sum(dim=0)  # (T,)
    return bool((flips >= min_flips).all())


# ---------------------------------------------------------------------------------- cost
@dataclass(frozen=True)
class ExtraCost:
    """Extra work per trajectory over plain Flow-GRPO (all no-grad)."""

    nfe: int  # transformer forward passes (CFG passes included)
    reward_calls: int


def extra_cost(num_steps: int, cfg_passes: int = 1, ode_steps: int | None = None) -> ExtraCost:
    """§1 "Extra cost": T reward calls (paper R_1..R_T) and Σ_{t=1..T} min(n, t) NFEs for the ODE
    completions, n = t by default (T(T+1)/2 = 55 at T = 10), times ``cfg_passes`` (2 with CFG).
    ``ode_steps`` = n for the paper's coarse-completion ablation (n = 1, 2)."""
    per_state = [t if ode_steps is None else min(ode_steps, t) for t in range(1, num_steps + 1)]
    return ExtraCost(nfe=sum(per_state) * cfg_passes, reward_calls=num_steps)
