"""DenseGRPO credit math (specs/addon_methods.md §1), against values worked out by hand."""

import math

import pytest
import torch

from flowrl.advantages import group_zscore
from flowrl.credit.dense import (
    calibrate_psi,
    calibration_done,
    calibration_signs,
    completion_table,
    dense_advantages,
    extra_cost,
    initial_psi,
    step_gains,
)
from flowrl.sde import dance_sde, flow_sde

Z = 1 / (1 + 1e-4)  # a deviation of one population std, with eps = 1e-4 added to the std


def test_step_gains_by_hand_in_transition_order():
    # T = 3. Paper notation: R_3 = 0.25 (pure ODE), R_2 = 0.5, R_1 = 0.375, R_0 = 1.0 (terminal).
    # Paper gains: ΔR_3 = R_2 - R_3 = 0.25, ΔR_2 = R_1 - R_2 = -0.125, ΔR_1 = R_0 - R_1 = 0.625.
    # flowrl order: transition j = T - t, so the gains read [ΔR_3, ΔR_2, ΔR_1].
    table = torch.tensor([[0.25, 0.5, 0.375, 1.0]])
    assert step_gains(table).tolist() == [[0.25, -0.125, 0.625]]
    # sum = 0.75 = terminal 1.0 - pure ODE 0.25
    assert step_gains(table).sum().item() == 0.75


def test_telescoping_gains_sum_to_terminal_minus_pure_ode():
    torch.manual_seed(0)
    table = torch.rand(6, 11)  # N = 6, T = 10
    gains = step_gains(table)
    assert gains.shape == (6, 10)
    assert torch.allclose(gains.sum(dim=1), table[:, 10] - table[:, 0], atol=1e-6)


def test_column_T_is_the_terminal_reward_itself():
    # The table's last column is the rollout's own reward, bitwise (no ODE re-run), and nothing alters it.
    pure, inter, terminal = torch.tensor([0.1, 0.2]), torch.tensor([[0.3, 0.4], [0.5, 0.6]]), torch.tensor([0.7, 0.9])
    table = completion_table(pure, inter, terminal)
    assert table.shape == (2, 4)
    assert torch.equal(table[:, 3], terminal) and torch.equal(table[:, 0], pure)
    before = table.clone()
    gains = step_gains(table)
    dense_advantages(table, torch.tensor([0, 0]))
    assert torch.equal(table, before)
    assert torch.equal(gains[:, -1], terminal - inter[:, -1])  # last gain: terminal minus completion of state T-1
    with pytest.raises(ValueError, match="intermediate"):
        completion_table(pure, inter[0], terminal)


def test_dense_advantages_by_hand_with_interleaved_groups():
    # Groups are named by id, not position: samples 0 and 2 form group 0; samples 1 and 3 form group 1.
    table = torch.tensor(
        [
            [0.0, 1.0, 3.0],  # g0: gains [1, 2]
            [0.25, 0.5, 1.0],  # g1: gains [0.25, 0.5]
            [0.0, 3.0, 3.0],  # g0: gains [3, 0]
            [0.5, 0.75, 1.25],  # g1: gains [0.25, 0.5], the same as sample 1
        ]
    )
    groups = torch.tensor([0, 1, 0, 1])
    adv = dense_advantages(table, groups)
    # g0, transition 0: gains 1, 3, mean 2, population std 1 -> -1/(1 + 1e-4), +1/(1 + 1e-4)
    # g0, transition 1: gains 2, 0, mean 1, std 1 -> +Z, -Z
    # g1: equal gains in both columns -> exactly 0
    assert adv[[0, 2]].flatten().tolist() == pytest.approx([-Z, Z, Z, -Z])
    assert adv[[1, 3]].tolist() == [[0.0, 0.0], [0.0, 0.0]]
    # Baseline ablation normalises the reward after the step (columns 1..T), not the gain:
    # g0, transition 0: R 1, 3 -> -Z, +Z; transition 1: R 3, 3 -> exactly 0.
    base = dense_advantages(table, groups, baseline=True)
    assert base[[0, 2]].flatten().tolist() == pytest.approx([-Z, 0.0, Z, 0.0])
    assert base[2, 1].item() == 0.0
    # global_std: transition 0 has gains [1, .25, 3, .25], mean 1.125, population std sqrt(1.265625) = 1.125
    glob = dense_advantages(table, groups, global_std=True)
    assert glob[0, 0].item() == pytest.approx(-1 / (1.125 + 1e-4))
    assert glob[1, 0].item() == 0.0


def test_equal_values_in_a_group_get_exactly_zero():
    # Seven equal gains of 0.3: in float32 their mean is not exactly 0.3, so a plain (x - mean)/(std + eps)
    # would give about 3e-8 / 1e-4 = 3e-4, not 0.
    v = torch.full((7,), 0.3)
    assert (v - v.mean()).abs().max() > 0
    out = group_zscore(torch.stack([v, torch.arange(7.0)], dim=1), torch.zeros(7, dtype=torch.long), eps=0.0)
    assert torch.equal(out[:, 0], torch.zeros(7))
    # a singleton group and eps = 0 give 0, not 0/0
    assert group_zscore(torch.tensor([5.0]), torch.tensor([3]), eps=0.0).tolist() == [0.0]


def test_constant_velocity_toy_with_shared_noise_gives_zero_advantage():
    # §1 oracle: a deterministic toy model (constant velocity) and a linear reward. The members of a
    # group share their initial noise and SDE noise, so they share every completion reward: each gain
    # is equal across the group and its advantage is exactly 0; the gains still telescope.
    sigmas = torch.tensor([1.0, 0.75, 0.5, 0.25, 0.0])
    velocity, weight = torch.full((1, 2, 2), 0.5), torch.tensor([[[1.0, -2.0], [0.5, 3.0]]])

    def complete(x, j):  # ODE from state j to data with the constant velocity: x - sigma_j * v
        for i in range(j, 4):
            x = x + (sigmas[i + 1] - sigmas[i]) * velocity
        return float((weight * x).sum())

    rows, groups = [], []
    for g in range(2):
        gen = torch.Generator().manual_seed(g)
        x0, noises = torch.randn(1, 2, 2, generator=gen), torch.randn(4, 1, 2, 2, generator=gen)
        for _ in range(3):  # three members, identical inputs
            x, states = x0, [x0]
            for i in range(4):
                x = flow_sde(
                    velocity, x, float(sigmas[i]), float(sigmas[i + 1]), 0.7, sigma_at_one=0.75, noise=noises[i]
                ).x_next
                states.append(x)
            rows.append([complete(s, j) for j, s in enumerate(states[:-1])] + [float((weight * x).sum())])
            groups.append(g)
    table, groups = torch.tensor(rows), torch.tensor(groups)
    gains = step_gains(table)
    assert gains.abs().max() > 0.01  # the SDE steps do move the reward
    assert torch.allclose(gains.sum(dim=1), table[:, -1] - table[:, 0], atol=1e-5)
    assert torch.equal(dense_advantages(table, groups), torch.zeros(6, 4))


def test_calibration_rule_oracles():
    # §1: eps1 = 2, eps2 = 0.01. Transition 0: (n+, n-) = (12, 11), |diff| = 1 < 2 -> psi 0.50 -> 0.51.
    # Transition 1: (20, 4), |diff| = 16 >= 2 -> psi 0.50 -> 0.49. The zero gain of column 0 counts in neither.
    col0 = torch.tensor([1.0] * 12 + [-1.0] * 11 + [0.0])
    col1 = torch.tensor([0.5] * 20 + [-0.5] * 4)
    gains = torch.stack([col0, col1], dim=1)  # (24, 2)
    assert calibration_signs(gains).tolist() == [1.0, -1.0]
    psi = calibrate_psi(torch.tensor([0.50, 0.50]), gains, eps1=2, eps2=0.01)
    assert psi.tolist() == pytest.approx([0.51, 0.49])
    # (12, 10): |diff| = 2 is not < 2 -> decrease
    assert calibration_signs(torch.tensor([1.0] * 12 + [-1.0] * 10)[:, None]).tolist() == [-1.0]


def test_calibration_clamps_psi_above_zero():
    gains = torch.tensor([[1.0], [1.0], [1.0]])  # all positive: decrease
    assert calibrate_psi(torch.tensor([0.005]), gains, floor=1e-3).tolist() == pytest.approx([1e-3])
    with pytest.raises(ValueError, match="floor"):
        calibrate_psi(torch.tensor([0.5]), gains, floor=0.0)
    with pytest.raises(ValueError, match="gains"):
        calibrate_psi(torch.tensor([0.5, 0.5]), gains)


def test_calibration_stop_rule():
    # column 0 flips + - + - (3 flips); column 1 flips once
    history = torch.tensor([[1.0, 1.0], [-1.0, 1.0], [1.0, -1.0], [-1.0, -1.0]])
    assert not calibration_done(history)
    assert calibration_done(history[:, :1])  # column 0 alone has flipped 3 times
    assert calibration_done(history, max_iters=4)
    assert not calibration_done(history[:1])


def test_initial_psi_is_flow_grpo_noise_and_dance_sde_takes_it_as_g():
    # sigmas 1, .75, .5, .25, 0 and a = 0.7:
    # j=0: sigma = 1 uses 1 - sigma_1 = .25 -> 0.7 sqrt(1/.25) = 1.4;  j=1: 0.7 sqrt(.75/.25) = 1.212436
    # j=2: 0.7 sqrt(1) = 0.7;  j=3: 0.7 sqrt(.25/.75) = 0.404145
    sigmas = torch.tensor([1.0, 0.75, 0.5, 0.25, 0.0])
    psi = initial_psi(sigmas, a=0.7)
    assert psi.tolist() == pytest.approx([1.4, 0.7 * math.sqrt(3), 0.7, 0.7 / math.sqrt(3)], rel=1e-6)
    # psi is the diffusion coefficient g: dance_sde with noise level psi_j is flow_sde with a = 0.7
    torch.manual_seed(0)
    v, x, z = torch.randn(2, 4, 3, 3), torch.randn(2, 4, 3, 3), torch.randn(2, 4, 3, 3)
    for j in range(4):
        s, s_next = float(sigmas[j]), float(sigmas[j + 1])
        a = flow_sde(v, x, s, s_next, 0.7, sigma_at_one=0.75, noise=z)
        b = dance_sde(v, x, s, s_next, float(psi[j]), noise=z)
        assert torch.allclose(a.x_next, b.x_next, atol=1e-5) and torch.allclose(a.log_prob, b.log_prob, atol=1e-4)


def test_extra_cost_matches_spec():
    # §1: T = 10 -> 55 extra NFEs (sum 1..10), 110 with CFG, and T = 10 extra reward calls
    assert extra_cost(10).nfe == 55 and extra_cost(10).reward_calls == 10
    assert extra_cost(10, cfg_passes=2).nfe == 110
    # coarse completions: n = 1 -> one NFE per state (10); n = 2 -> 1 + 2 * 9 = 19
    assert extra_cost(10, ode_steps=1).nfe == 10 and extra_cost(10, ode_steps=2).nfe == 19


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="group_ids"):
        dense_advantages(torch.zeros(3, 4), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(N, T\+1\)"):
        step_gains(torch.zeros(3, 1))
    with pytest.raises(ValueError, match="NaN"):
        step_gains(torch.tensor([[0.0, float("nan")]]))
