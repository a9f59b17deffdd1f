"""The preference methods' math by hand: Diffusion-DPO's pairs and loss (flow_grpo scripts/train_sd3_dpo.py and
stat_tracking.py; Flow-Factory trainers/dpo.py), DGPO's group weights, surrogate and clip (Luo-Yihong/DGPO
scripts/train_sd3_dgpo.py, ``compute_group_dgpo_loss_allreduce``), and the flow-matching error of SFT."""

import math

import pytest
import torch

from flowrl.methods.dpo import NoisingOptions, draw_noisings
from flowrl.preference import (
    best_worst,
    dgpo_group_weights,
    dgpo_loss,
    dpo_loss,
    dsm_clip_mask,
    pair_rows,
    velocity_error,
)


def test_best_and_worst_of_each_group_first_on_ties_and_no_pair_when_flat():
    # group 0: 0.9 twice, the first (row 1) is the best; row 3 the worst. group 1 flat: no pair. group 2: 3 over 1.
    rewards = torch.tensor([0.2, 0.9, 0.9, 0.1, 0.5, 0.5, 3.0, 1.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2])
    assert best_worst(rewards, groups).tolist() == [0, 1, 0, -1, 0, 0, 1, -1]


def test_the_dpo_loss_by_hand():
    # Delta_w = 0.30 - 0.32 = -0.02, Delta_l = 0.50 - 0.45 = 0.05; inside = -(100/2)(-0.07) = 3.5;
    # -log sigmoid(3.5) = log(1 + e^-3.5) = 0.0297495
    loss = dpo_loss(torch.tensor([0.30]), torch.tensor([0.32]), torch.tensor([0.50]), torch.tensor([0.45]), 100.0)
    assert loss.item() == pytest.approx(math.log1p(math.exp(-3.5)), rel=1e-6)
    assert loss.item() == pytest.approx(0.0297495, abs=1e-6)
    # at theta = ref every Delta is 0: log 2, whatever beta
    zero = dpo_loss(*(torch.tensor([0.4]),) * 4, 2000.0)
    assert zero.item() == pytest.approx(math.log(2), rel=1e-7)


def test_the_dpo_gradient_lowers_the_chosen_error_and_raises_the_rejected():
    err_w = torch.tensor([0.4], requires_grad=True)
    err_l = torch.tensor([0.4], requires_grad=True)
    dpo_loss(err_w, torch.tensor([0.4]), err_l, torch.tensor([0.4]), 2000.0).sum().backward()
    # d/d err_w of -log sigmoid(-(b/2)(err_w - err_l)) at 0 = (b/2) sigmoid(0) = 500
    assert err_w.grad.item() == pytest.approx(500.0) and err_l.grad.item() == pytest.approx(-500.0)


def test_pairs_are_found_by_group_and_padding_rows_make_none():
    adv = torch.tensor([-1.0, 1.0, 1.0, -1.0, 1.0])
    groups = torch.tensor([5, 5, 7, 7, 9])  # group 9 holds one row: no pair
    chosen, rejected = pair_rows(adv, groups)
    assert chosen.tolist() == [1, 2] and rejected.tolist() == [0, 3]


def test_dgpo_group_weights_by_hand():
    # group 0: A = (1, -1), err = (0.3, 0.5), ref = (0.4, 0.4), beta 10, G 2:
    #   S = 1*10*(-0.1)/2 + (-1)*10*(0.1)/2 = -1 -> sigmoid(-1) = 0.268941
    # group 1: equal errors -> S = 0 -> 0.5
    err = torch.tensor([0.3, 0.5, 0.4, 0.4])
    ref = torch.tensor([0.4, 0.4, 0.4, 0.4])
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    w = dgpo_group_weights(err, ref, adv, torch.tensor([0, 0, 1, 1]), 10.0, 2)
    assert w.tolist() == pytest.approx([0.268941, 0.268941, 0.5, 0.5], abs=1e-6)


def test_dgpo_surrogate_gradient_is_the_group_preference_gradient():
    """The gradient of mean w A err is (G / beta) / B that of sum_g -log sigmoid(R(G+) - R(G-)), R(G+) - R(G-) =
    -sum_i A_i beta (err_i - ref_i) / G. Row 0 by hand: sigmoid(-1) * 1 * 10 / 2 = 1.344706, times 2/(10*4) =
    0.0672353 = w_0 A_0 / B = 0.268941 / 4."""
    err = torch.tensor([0.3, 0.5, 0.4, 0.4], requires_grad=True)
    ref = torch.tensor([0.4, 0.4, 0.4, 0.4])
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    groups = torch.tensor([0, 0, 1, 1])
    w = dgpo_group_weights(err, ref, adv, groups, 10.0, 2)
    (surrogate,) = torch.autograd.grad(dgpo_loss(err, w, adv), err)
    margin = torch.stack([-(adv[g * 2 : g * 2 + 2] * 10.0 * (err[g * 2 : g * 2 + 2] - 0.4)).sum() / 2 for g in (0, 1)])
    (true,) = torch.autograd.grad(-torch.nn.functional.logsigmoid(margin).sum(), err)
    torch.testing.assert_close(surrogate, true * 2 / (10.0 * 4))
    assert surrogate[0].item() == pytest.approx(0.0672353, abs=1e-6)


def test_dgpo_clip_by_hand():
    # ratio = exp(old - err): row 0 e^0.002 = 1.002 > 1.001 with A > 0: clipped; row 1 e^-0.001 = 0.9990005, not
    # below 0.999 with A < 0: kept; row 2 e^-0.003 = 0.997 < 0.999 with A < 0: clipped; row 3 A > 0, ratio < 1: kept
    err = torch.tensor([0.300, 0.300, 0.300, 0.300])
    old = torch.tensor([0.302, 0.299, 0.297, 0.290])
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0])
    assert dsm_clip_mask(err, old, adv, 1e-3).tolist() == [True, False, True, False]


def test_velocity_error_is_the_mean_squared_flow_matching_residual():
    x0, eps = torch.zeros(2, 1, 2, 2), torch.ones(2, 1, 2, 2)
    assert velocity_error(torch.zeros(2, 1, 2, 2), eps, x0).tolist() == [1.0, 1.0]  # u = eps - x0 = 1
    v = torch.tensor([1.0, 1.0, 1.0, 3.0]).view(1, 1, 2, 2)
    assert velocity_error(v, eps[:1], x0[:1]).tolist() == [1.0]  # (0 + 0 + 0 + 4) / 4


def test_noising_times_are_shifted():
    # uniform draws u mapped by s u / (1 + (s - 1) u), s = 3: the mean of 3u/(1+2u) over [0, 1] is 3/2 - 3 ln(3)/4
    o = NoisingOptions(num_noisings=200000, time_law="uniform", time_shift=3.0)
    t, noise = draw_noisings(o, (1,), torch.Generator().manual_seed(0), "cpu")
    assert float(t.mean()) == pytest.approx(1.5 - 0.75 * math.log(3), abs=2e-3)
    assert noise.shape == (200000, 1)


def test_the_dpo_defaults_name_their_peer():
    """DPOOptions mixes two peers' defaults: beta 2000 and one noising are Flow-Factory's (DPOTrainingArguments),
    time_shift 3 is flow_grpo's (SD3's shift-3 scheduler indexed by the draw) where Flow-Factory's time_shift is 1.0,
    no shift. Shift 1 leaves the logit-normal draw as it is; shift 3 maps the same draws by 3t / (1 + 2t): the
    median draw t = sigmoid(0) = 1/2 goes to 1.5 / 2 = 0.75."""
    from flowrl.methods.dpo import DPOOptions

    o = DPOOptions()
    assert (o.beta, o.num_noisings, o.time_law, o.logit_mean, o.logit_std, o.time_shift) == (
        2000.0,
        1,
        "logit_normal",
        0.0,
        1.0,
        3.0,
    )
    flat, _ = draw_noisings(
        NoisingOptions(num_noisings=6, time_shift=1.0), (1,), torch.Generator().manual_seed(3), "cpu"
    )
    shifted, _ = draw_noisings(NoisingOptions(num_noisings=6), (1,), torch.Generator().manual_seed(3), "cpu")
    assert torch.allclose(shifted, 3 * flat / (1 + 2 * flat), atol=1e-6)
    assert 3 * 0.5 / (1 + 2 * 0.5) == 0.75
