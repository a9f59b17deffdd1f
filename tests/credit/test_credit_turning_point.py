"""TP-GRPO credit math (specs/addon_methods.md §2), against values worked out by hand."""

import pytest
import torch

from flowrl.credit.turning_point import (
    active_samples,
    balance_turning_points,
    extra_cost,
    global_trend,
    increments,
    step_rewards,
    turning_point_credit,
    turning_points,
    window_to_transitions,
)

# §2 oracle, W = 5: R_0 (pure ODE) .. R_5 (the rollout's own reward)
SPEC_R = torch.tensor([[0.50, 0.60, 0.55, 0.45, 0.65, 0.70]])


def test_spec_example_increments_trend_and_turning_points():
    # d = [+.10, -.05, -.10, +.20, +.05], Δ = .70 - .50 = +.20, s = sign(d) sign(Δ) = [+, -, -, +, +]
    d = increments(SPEC_R)
    assert d.flatten().tolist() == pytest.approx([0.10, -0.05, -0.10, 0.20, 0.05], abs=1e-6)
    assert global_trend(SPEC_R).item() == pytest.approx(0.20, abs=1e-6)
    s = torch.sign(d) * torch.sign(global_trend(SPEC_R))[:, None]
    assert s.flatten().tolist() == [1, -1, -1, 1, 1]
    # k = 0: first-step rule, sign(d_0) sign(R_5 - R_1) = sign(+.10) sign(+.10) > 0 -> turning point
    # k = 3: s_2 < 0, s_3 > 0, and sign(d_3) sign(R_5 - R_4) = sign(+.20) sign(+.05) > 0 -> turning point
    # k = 4: s_3 > 0 (no flip), and R_5 - R_5 = 0 -> not one; k = 1, 2: s_1 > 0 / s_2 < 0 -> not
    assert turning_points(SPEC_R).flatten().tolist() == [True, False, False, True, False]


def test_spec_example_step_rewards():
    # turning points take R_W - R_k: r_0 = .70 - .50 = .20, r_3 = .70 - .45 = .25; the others keep d_k
    credit = turning_point_credit(SPEC_R, torch.tensor([0]))
    assert credit.step_rewards.flatten().tolist() == pytest.approx([0.20, -0.05, -0.10, 0.25, 0.05], abs=1e-6)
    assert torch.equal(credit.turning_points, credit.detected)  # one sign only: balancing keeps all
    # a single-sample group: every advantage is exactly 0, so the sample is inactive
    assert torch.equal(credit.advantages, torch.zeros(1, 5)) and not credit.active.item()


def test_flip_at_the_last_window_step_is_not_a_turning_point():
    # W = 4: R = [.50, .60, .55, .45, .65], d = [+.10, -.05, -.10, +.20], Δ = +.15, s = [+, -, -, +].
    # k = 3 flips - -> + but is the last step: sign(d_3) sign(R_4 - R_4) = 0, so τ_3 = 0.
    # k = 0: sign(+.10) sign(R_4 - R_1 = +.05) > 0 -> τ_0 = 1.
    r = torch.tensor([[0.50, 0.60, 0.55, 0.45, 0.65]])
    assert turning_points(r).flatten().tolist() == [True, False, False, False]
    # the code's unconstrained variant drops the consistency term: k = 3 is marked, k = 0 by s_0 > 0
    assert turning_points(r, consistency=False).flatten().tolist() == [True, False, False, True]
    # first-step rule off: k = 0 is never a turning point
    assert turning_points(r, first_step=False).flatten().tolist() == [False, False, False, False]


def test_telescoping_and_the_turning_point_invariant_on_random_tables():
    torch.manual_seed(0)
    r = torch.rand(500, 10)  # W = 9
    assert torch.allclose(increments(r).sum(dim=1), global_trend(r), atol=1e-6)
    tp = turning_points(r)
    assert tp.any() and not tp[:, -1].any()  # the last window step is never one
    # at every turning point, sign(R_W - R_k) = sign(Δ)
    to_go_sign = torch.sign(r[:, -1:] - r[:, :-1])  # (N, W)
    trend_sign = torch.sign(global_trend(r))[:, None].expand_as(tp)
    assert torch.equal(to_go_sign[tp], trend_sign[tp])


def _balancing_batch():
    # W = 2, so only k = 0 can be a turning point (first-step rule: sign(d_0) sign(R_2 - R_1) > 0).
    # a: d = [.1, .2], Δ = +.3;  b: d = [.2, .3], Δ = +.5;  c: d = [.05, .05], Δ = +.1;  e: d = [-.1, -.1], Δ = -.2
    return torch.tensor([[0.5, 0.6, 0.8], [0.2, 0.4, 0.7], [0.5, 0.55, 0.6], [0.5, 0.4, 0.3]])


def test_balancing_three_positive_one_negative_keeps_one_of_each():
    r = _balancing_batch()
    detected = turning_points(r)
    assert detected[:, 0].tolist() == [True, True, True, True] and not detected[:, 1].any()
    # 3 positive (Δ = .3, .5, .1), 1 negative: keep min(3, 1) = 1 of each, the positive with the largest |Δ| (b)
    kept = balance_turning_points(detected, global_trend(r))
    assert kept[:, 0].tolist() == [False, True, False, True]
    # pools [0, 0, 1, 1]: pool 0 holds only positives (keep both), pool 1 one of each (keep both)
    pooled = balance_turning_points(detected, global_trend(r), pools=torch.tensor([0, 0, 1, 1]))
    assert torch.equal(pooled, detected)


def test_balancing_ties_go_to_the_earlier_sample():
    # two positive turning points with equal |Δ| = .2 and one negative: the earlier sample (row 0) is kept
    mask = torch.tensor([[True, False], [False, True], [True, False]])
    delta = torch.tensor([0.2, 0.2, -0.1])
    assert balance_turning_points(mask, delta).tolist() == [[True, False], [False, False], [True, False]]


def test_ties_in_delta_keep_the_earlier_step_then_the_earlier_sample():
    # All of a sample's turning points share its Δ, so ties are the rule. The authors' torch.topk leaves the
    # order among ties unspecified (YunzeTong/TurningPoint-GRPO scripts/my_train_sd3_fast_with_op3.py, 994d26a);
    # flowrl keeps the earlier sample in global order, then the earlier step.
    # row 0 = SPEC_R: turning points at k = 0 and k = 3, both Δ = +.2 (a tie within one sample);
    # row 1: R = .5 .4 .3 .2 .1 0, d = -.1 each, Δ = -.5: only k = 0 (sign(-.1) sign(0 - .4) > 0), no flip after.
    # 2 positive, 1 negative: keep 1 of each; among the tied positives the earlier step, k = 0.
    r = torch.cat([SPEC_R, torch.tensor([[0.5, 0.4, 0.3, 0.2, 0.1, 0.0]])])
    detected = turning_points(r)
    assert detected.tolist() == [[True, False, False, True, False], [True, False, False, False, False]]
    kept = balance_turning_points(detected, global_trend(r))
    assert kept.tolist() == [[True, False, False, False, False], [True, False, False, False, False]]
    # a second SPEC_R row before it (global order): the tie of |Δ| = .2 across rows goes to row 0, step 0
    r3 = torch.cat([SPEC_R, SPEC_R, torch.tensor([[0.5, 0.4, 0.3, 0.2, 0.1, 0.0]])])
    kept3 = balance_turning_points(turning_points(r3), global_trend(r3))
    assert kept3.nonzero().tolist() == [[0, 0], [2, 0]]


def test_balanced_credit_by_hand():
    # After balancing (above), b and e take R_2 - R_0 at k = 0; a and c keep d_0:
    #   step rewards: a [.1, .2], b [.5, .3], c [.05, .05], e [-.2, -.1]
    # groups [0, 0, 1, 1], population std, eps 1e-4:
    #   k=0, g0: .1, .5 -> mean .3, std .2 -> a -.2/.2001, b +.2/.2001
    #   k=0, g1: .05, -.2 -> mean -.075, std .125 -> c +.125/.1251, e -.125/.1251
    #   k=1, g0: .2, .3 -> mean .25, std .05 -> a -.05/.0501, b +.05/.0501
    #   k=1, g1: .05, -.1 -> mean -.025, std .075 -> c +.075/.0751, e -.075/.0751
    credit = turning_point_credit(_balancing_batch(), torch.tensor([0, 0, 1, 1]))
    assert credit.step_rewards.flatten().tolist() == pytest.approx(
        [0.1, 0.2, 0.5, 0.3, 0.05, 0.05, -0.2, -0.1], abs=1e-6
    )
    expected = [
        -0.2 / 0.2001,
        -0.05 / 0.0501,
        0.2 / 0.2001,
        0.05 / 0.0501,
        0.125 / 0.1251,
        0.075 / 0.0751,
        -0.125 / 0.1251,
        -0.075 / 0.0751,
    ]
    assert credit.advantages.flatten().tolist() == pytest.approx(expected, abs=1e-4)
    m = credit.metrics()
    assert m["tp/kept_positive"] == 1 and m["tp/kept_negative"] == 1 and m["tp/detected_frac"] == 0.5
    # balancing off: all four keep R_2 - R_0 at k = 0 -> a .3, b .5, c .1, e -.2
    unbalanced = turning_point_credit(_balancing_batch(), torch.tensor([0, 0, 1, 1]), balance=False)
    assert unbalanced.step_rewards[:, 0].tolist() == pytest.approx([0.3, 0.5, 0.1, -0.2], abs=1e-6)


def test_step_reward_options():
    mask = turning_points(SPEC_R)
    # keeping the increment at turning points, η = 0.5: r_0 = .10 + .5 * .20 = .20, r_3 = .20 + .5 * .25 = .325
    r = step_rewards(SPEC_R, mask, eta=0.5, drop_incremental=False)
    assert r.flatten().tolist() == pytest.approx([0.20, -0.05, -0.10, 0.325, 0.05], abs=1e-6)
    # η = 2, increment dropped: r_0 = .40, r_3 = .50
    r = step_rewards(SPEC_R, mask, eta=2.0)
    assert r.flatten().tolist() == pytest.approx([0.40, -0.05, -0.10, 0.50, 0.05], abs=1e-6)


def test_equal_groups_get_exactly_zero_and_are_inactive():
    # group 1 holds three identical rows: every column is flat, so its advantages are exactly 0
    row = [0.3, 0.7, 0.1, 0.9]
    r = torch.tensor([row, row, [0.2, 0.4, 0.5, 0.6], row, [0.6, 0.1, 0.3, 0.2]])
    groups = torch.tensor([1, 1, 0, 1, 0])
    credit = turning_point_credit(r, groups)
    assert torch.equal(credit.advantages[groups == 1], torch.zeros(3, 3))
    assert active_samples(credit.advantages).tolist() == [False, False, True, False, True]


def test_window_to_transitions():
    adv = torch.arange(18.0).reshape(2, 9)
    out = window_to_transitions(adv, 10)
    assert out.shape == (2, 10) and torch.equal(out[:, :9], adv) and out[:, 9].tolist() == [0.0, 0.0]
    assert window_to_transitions(adv[:, :3], 10, start=2)[0].tolist() == [0, 0, 0, 1, 2, 0, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="does not fit"):
        window_to_transitions(adv, 10, start=2)


def test_extra_cost_matches_spec():
    # SD3 (T = 10, W = 9): pure ODE 10 + completions sum_{m=1..8} (10 - m) = 44 -> 54 extra NFEs, 64 with the
    # main rollout's 10; 108 with CFG. Reward calls: W + 1 = 10 in all, 9 more than Flow-GRPO's 1.
    cost = extra_cost(10, 9)
    assert cost.nfe == 54 and cost.nfe + 10 == 64 and cost.reward_calls == 9
    assert extra_cost(10, 9, cfg_passes=2).nfe == 108
    # FLUX (T = 6, W = 6): 6 + (5 + 4 + 3 + 2 + 1) = 21
    assert extra_cost(6, 6).nfe == 21
    with pytest.raises(ValueError, match="window"):
        extra_cost(10, 11)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="W >= 1"):
        turning_point_credit(torch.zeros(2, 1), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="NaN"):
        turning_point_credit(torch.tensor([[0.0, float("nan")]]), torch.zeros(1, dtype=torch.long))
    with pytest.raises(ValueError, match="pools"):
        balance_turning_points(torch.zeros(2, 3, dtype=torch.bool), torch.zeros(2), pools=torch.zeros(3))
