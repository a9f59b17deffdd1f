"""G²RPO credit math (specs/addon_methods.md §3): tails, branch plans, z-scores, cost. Values by hand."""

import math

import pytest
import torch

from flowrl.advantages import group_zscore
from flowrl.credit.granular import (
    branch_plan,
    extra_cost,
    granular_advantages,
    granular_zscores,
    ode_tail,
    tail_indices,
)
from flowrl.sde import step


def flux_sigmas(num_steps: int = 16, shift: float = 3.0) -> torch.Tensor:
    """The repos' schedule: shift * u / (1 + (shift - 1) u) over linspace(1, 0, T + 1), fp32."""
    u = torch.linspace(1, 0, num_steps + 1)
    return shift * u / (1 + (shift - 1) * u)


def code_tail(num_steps: int, k: int, lam: int) -> list[int]:
    """bcmi/Granular-GRPO's tail, re-expressed on indices: sched = sigmas[:k+2] ++ sigmas[k+2::lam], Euler over
    ``range(k + 1, len(sched) - 1)``, image = x0-prediction of the last evaluated state."""
    sched = list(range(k + 2)) + list(range(k + 2, num_steps + 1, lam))
    return [sched[i] for i in range(k + 1, len(sched) - 1)]


def test_tail_indices_match_spec_oracle():
    # §3 oracle, T = 16, k = 3 (tail from state 4): L = [4, 5, 7, 9, 11, 13, 15] (17 > 16 stops it); the
    # code evaluates L[:-1] -> 6 NFEs, image = x0-pred at sigma_13. lam = 1: 4..15, 12 NFEs.
    assert tail_indices(16, 4, 2) == [4, 5, 7, 9, 11, 13]
    assert tail_indices(16, 4, 1) == list(range(4, 16))
    # lam = 3: L = [4, 5, 8, 11, 14] -> [4, 5, 8, 11]; lam = 2 from 5: L = [5, 6, 8, ..., 16] -> [5, 6, ..., 14]
    assert tail_indices(16, 4, 3) == [4, 5, 8, 11]
    assert tail_indices(16, 5, 2) == [5, 6, 8, 10, 12, 14]
    assert tail_indices(16, 15, 2) == [15] and tail_indices(16, 16, 1) == []
    for k in range(15):
        for lam in (1, 2, 3, 4):
            assert tail_indices(16, k + 1, lam) == code_tail(16, k, lam), (k, lam)
            assert len(tail_indices(16, k + 1, lam)) == math.ceil((15 - k) / lam)  # the spec's NFE count
    with pytest.raises(ValueError):
        tail_indices(16, 4, 0)
    with pytest.raises(ValueError):
        tail_indices(16, 17, 1)


def test_ode_tail_plan_sigmas_and_flag():
    sigmas = flux_sigmas()
    tail = ode_tail(sigmas, 4, 2)
    assert tail.indices == (4, 5, 7, 9, 11, 13) and tail.nfes == 6 and tail.x0_jump
    assert torch.equal(tail.plan.sigma, sigmas[[4, 5, 7, 9, 11, 13]])
    assert torch.equal(tail.plan.sigma_next, torch.cat([sigmas[[5, 7, 9, 11, 13]], torch.zeros(1)]))
    assert tail.plan.kinds == ("ode",) * 6 and not tail.plan.train.any()
    assert tail.plan.sigma_at_one == float(sigmas[1])
    fine = ode_tail(sigmas, 4, 1)  # 4 -> 5 -> ... -> 15 -> 16: the schedule's own steps, no jump
    assert fine.nfes == 12 and not fine.x0_jump
    assert torch.equal(fine.plan.sigma_next, sigmas[5:])
    empty = ode_tail(sigmas, 16, 2)
    assert empty.nfes == 0 and len(empty.plan) == 0 and not empty.x0_jump


def _velocity(x: torch.Tensor, sigma: float) -> torch.Tensor:
    return torch.sin(3 * x) * sigma + 0.5 * x - 0.2  # a deterministic toy field


def test_tail_walk_equals_code_x0_prediction_bitwise():
    # Walking the plan with flowrl's ODE step == the code's loop (Euler over L, keep x - sigma v of the last
    # evaluated state): the final transition sigma -> 0 computes x + (0 - sigma) v, bitwise x - sigma v.
    sigmas = flux_sigmas()
    x_start = torch.randn(2, 4, 3, 3, generator=torch.Generator().manual_seed(0))
    for start, lam in [(4, 2), (4, 1), (1, 3), (15, 2)]:
        tail = ode_tail(sigmas, start, lam)
        x = x_start
        for i in range(len(tail.plan)):
            s, s_next = float(tail.plan.sigma[i]), float(tail.plan.sigma_next[i])
            x = step("ode", _velocity(x, s), x, s, s_next).x_next
        ref = x_start
        for a, b in zip(tail.indices[:-1], tail.indices[1:]):
            s = float(sigmas[a])
            ref = ref + (float(sigmas[b]) - s) * _velocity(ref, s)
        s_last = float(sigmas[tail.indices[-1]])
        assert torch.equal(x, ref - s_last * _velocity(ref, s_last)), (start, lam)


def test_branch_plan_keeps_the_full_schedule_sigma_one():
    sigmas = flux_sigmas()
    plan = branch_plan(sigmas, 3)
    assert len(plan) == 1 and plan.kinds == ("flow_sde",) and plan.trained_indices == [0]
    assert float(plan.sigma[0]) == float(sigmas[3]) and float(plan.sigma_next[0]) == float(sigmas[4])
    assert float(plan.noise_levels[0]) == pytest.approx(0.7)
    jump = branch_plan(sigmas, 0, 3)  # a merged jump from sigma = 1: the clamp must still use sigma_1
    assert jump.sigma_at_one == float(sigmas[1]) != float(sigmas[3])
    for bad in [(3, 3), (-1, 2), (15, 17)]:
        with pytest.raises(ValueError):
            branch_plan(sigmas, *bad)


def test_granular_advantages_by_hand():
    # Two groups interleaved in global order (ids 0, 1, 0, 1, 0, 1), Lambda = {1, 2}, one reward model.
    # Group 0, lam = 1: [1, 2, 3]: mean 2, unbiased std 1 -> z = [-1, 0, 1] / (1 + 1e-8).
    # Group 0, lam = 2: [2, 2, 5]: mean 3, deviations [-1, -1, 2], var (1 + 1 + 4) / 2 = 3 -> z = [-1, -1, 2] / sqrt 3.
    # A = sum: [-1 - 0.57735, -0.57735, 1 + 1.15470] = [-1.57735, -0.57735, 2.15470].
    # Group 1: every value 0.7 -> exactly 0.
    rewards = torch.tensor([[1.0, 2.0], [0.7, 0.7], [2.0, 2.0], [0.7, 0.7], [3.0, 5.0], [0.7, 0.7]]).unsqueeze(-1)
    groups = torch.tensor([0, 1, 0, 1, 0, 1])
    adv = granular_advantages(rewards, groups)
    assert adv.shape == (6,)
    assert adv[[0, 2, 4]].tolist() == pytest.approx([-1.57735, -0.57735, 2.15470], abs=1e-5)
    assert adv[[1, 3, 5]].tolist() == [0.0, 0.0, 0.0]
    # population std (option): lam = 1 std sqrt(2/3) -> z = [-1.22474, 0, 1.22474];
    # lam = 2 std sqrt(2) -> z = [-0.70711, -0.70711, 1.41421]; sums [-1.93185, -0.70711, 2.63896]
    pop = granular_advantages(rewards, groups, unbiased=False)
    assert pop[[0, 2, 4]].tolist() == pytest.approx([-1.93185, -0.70711, 2.63896], abs=1e-5)


def test_flat_groups_are_exactly_zero():
    # Twelve float32 0.7s: r - mean is 1.19e-7 and std 1.25e-7, so a plain z-score would give about +-0.9.
    rewards = torch.full((12, 2, 1), 0.7)
    groups = torch.zeros(12, dtype=torch.long)
    assert torch.equal(granular_advantages(rewards, groups), torch.zeros(12))
    assert torch.equal(granular_advantages(rewards, groups, eps=0.0), torch.zeros(12))  # the paper's no-eps form
    # a flat granularity next to a varying one: only the flat column contributes 0
    rewards[:, 1, 0] = torch.arange(12.0)
    z = granular_zscores(rewards, groups)
    assert torch.equal(z[:, 0], torch.zeros(12, 1)) and z[:, 1].abs().sum() > 0
    one = group_zscore(torch.tensor([[3.0], [4.0]]), torch.tensor([0, 1]))  # one-member groups
    assert torch.equal(one, torch.zeros(2, 1))


def test_zscores_sum_to_zero_and_equal_granularities_double():
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randn(24, 8, 2, 2, generator=gen)  # (N, K steps, Lambda, HPS + CLIP)
    groups = torch.randperm(24, generator=gen) % 2  # two prompts, members scattered
    z = granular_zscores(rewards, groups)
    for g in (0, 1):
        assert z[groups == g].sum(dim=0).abs().max() < 1e-5  # per (k, lam, component)
    assert torch.allclose(granular_advantages(rewards, groups), z.sum(dim=(-2, -1)))
    # R_{k,1} == R_{k,2} exactly -> A_k = 2 * z-score (§3 oracle), bitwise
    same = rewards[..., :1, :1].expand(24, 8, 2, 1)
    assert torch.equal(granular_advantages(same, groups), 2 * granular_zscores(same, groups)[..., 0, 0])


def test_group_layouts_agree():
    # rows = members with a K axis, grouped by prompt == rows = (member, k) branches grouped by (prompt, k)
    gen = torch.Generator().manual_seed(1)
    rewards = torch.randn(6, 4, 2, 1, generator=gen)
    prompts = torch.tensor([0, 1, 0, 1, 0, 1])
    wide = granular_advantages(rewards, prompts)  # (6, 4)
    flat_ids = (prompts[:, None] * 4 + torch.arange(4)).flatten()  # (24,) group id = (prompt, k)
    long = granular_advantages(rewards.reshape(24, 2, 1), flat_ids)
    assert torch.equal(long.reshape(6, 4), wide)
    with pytest.raises(ValueError):
        granular_advantages(torch.randn(6), prompts)
    with pytest.raises(ValueError):
        granular_advantages(rewards, prompts[:5])


def test_extra_cost_matches_spec():
    # §3: T = 16, M = {0..7}, Lambda = {1, 2}, G = 12. Per member: 8 SDE + sum_k (15 - k) = 92
    # + sum_k ceil((15 - k) / 2) = 8 + 7 + 7 + 6 + 6 + 5 + 5 + 4 = 48 -> 148; group 16 + 12 * 148 = 1792 vs 12 * 16.
    cost = extra_cost(16, (1, 2), cfg_passes=1, group_size=12)
    assert (cost.anchor_nfes, cost.nfes_per_member, cost.nfes) == (16, 148, 1792)
    assert (cost.baseline_nfes, cost.reward_calls, cost.baseline_reward_calls) == (192, 192, 12)
    assert cost.reward_calls_per_member == 16 and cost.train_passes == 8
    cfg = extra_cost(16, (1, 2), cfg_passes=2)  # CFG doubles every forward, not the reward calls
    assert (cfg.nfes, cfg.baseline_nfes, cfg.reward_calls) == (3584, 384, 192)
    # Lambda = {1, 2, 3}: + sum_k ceil((15 - k) / 3) = 5 + 5 + 5 + 4 + 4 + 4 + 3 + 3 = 33 -> 181; 288 rewards
    three = extra_cost(16, (1, 2, 3))
    assert (three.nfes_per_member, three.reward_calls) == (181, 288)
    assert extra_cost(16, (1,), trained_steps=[3]).nfes_per_member == 1 + 12
