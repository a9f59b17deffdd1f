import math

import pytest
import torch

from flowrl.advantages import clip_advantages, group_advantages, zero_std_ratio
from flowrl.losses import gaussian_kl, ppo_clip_loss


def test_group_advantages_by_hand():
    # group 0: rewards 1, 3 (mean 2); group 1: rewards 5, 5 (mean 5)
    rewards = torch.tensor([1.0, 3.0, 5.0, 5.0])
    groups = torch.tensor([0, 0, 1, 1])
    # per-group std: group 0 std 1 -> A = -1, +1 (eps 1e-4); group 1 std 0 -> A = 0
    adv = group_advantages(rewards, groups, global_std=False, eps=1e-4)
    assert adv.tolist() == pytest.approx([-1 / 1.0001, 1 / 1.0001, 0.0, 0.0])
    # global std of [1, 3, 5, 5] = sqrt(2.75) = 1.6583
    adv = group_advantages(rewards, groups, global_std=True, eps=1e-4)
    assert adv.tolist() == pytest.approx([-1 / (math.sqrt(2.75) + 1e-4), 1 / (math.sqrt(2.75) + 1e-4), 0, 0])
    assert zero_std_ratio(rewards, groups) == 0.5
    assert clip_advantages(torch.tensor([-7.0, 2.0, 9.0]), 5).tolist() == [-5, 2, 5]


def test_advantages_are_invariant_to_reward_scale_and_shift():
    r = torch.randn(12)
    g = torch.arange(3).repeat_interleave(4)
    a = group_advantages(r, g, eps=0)
    b = group_advantages(3 * r + 7, g, eps=0)
    assert torch.allclose(a, b, atol=1e-5)
    for k in range(3):
        assert a[g == k].sum().abs() < 1e-5


def test_ppo_clip_by_hand():
    # ratios e^0.1 = 1.10517 and e^-0.1 = 0.90484; clip range 0.05
    logp = torch.tensor([0.1, -0.1, 0.0])
    old = torch.zeros(3)
    adv = torch.tensor([1.0, 1.0, -2.0])
    out = ppo_clip_loss(logp, old, adv, 0.05)
    # sample 0: max(-1.10517, -1.05) = -1.05; sample 1: max(-0.90484, -0.95) = -0.90484; sample 2: 2 * 1
    assert out.loss.item() == pytest.approx((-1.05 - 0.904837 + 2.0) / 3, abs=1e-5)
    assert out.clip_frac.item() == pytest.approx(2 / 3)
    assert out.approx_kl.item() == pytest.approx(0.5 * (0.01 + 0.01 + 0) / 3)
    # gradient flows only through the unclipped sample 1: d/dlogp1 of -A rho / 3 = -0.904837 / 3
    logp = logp.clone().requires_grad_(True)
    ppo_clip_loss(logp, old, adv, 0.05).loss.backward()
    assert logp.grad.tolist() == pytest.approx([0.0, -0.904837 / 3, 2 / 3], abs=1e-5)


def test_gaussian_kl_matches_torch_distributions():
    torch.manual_seed(0)
    mean, ref = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    std = torch.tensor([0.3, 0.7])
    kl = gaussian_kl(mean, ref, std)
    for b in range(2):
        p = torch.distributions.Normal(mean[b], std[b])
        q = torch.distributions.Normal(ref[b], std[b])
        assert kl[b].item() == pytest.approx(torch.distributions.kl_divergence(p, q).mean().item(), rel=1e-5)


def test_gdpo_z_scores_the_weighted_sum_of_group_z_scores_again_over_the_batch(tmp_path):
    """Pref-GRPO's --apply_gdpo (CodeGoat24/Pref-GRPO, fastvideo/rewards/dispatcher.py
    compute_weighted_advantages, commit 3e787f6): each reward z-scored within its group (sample std, eps 1e-8),
    the weighted sum, then (A - mean) / (std + 1e-8) over the whole gathered batch (sample std), and the
    clamp to ±adv_clip_max only after it (fastvideo/train_flux.py)."""
    from flowrl.advantages import batch_zscore
    from flowrl.methods import build_method
    from flowrl.resolve import resolve_config

    cfg = resolve_config(
        "tiny-cpu",
        [
            f"output_dir={tmp_path}",
            "method.name=pref_grpo",
            "method.credit_norm=gdpo",
            "reward={jpeg_compressibility: 0.4, aesthetic: 0.6}",
        ],
    )
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    # reward 1: group 0 [1, 2, 3] -> z [-1, 0, 1] (mean 2, std 1); group 1 [5, 3, 4] -> [1, -1, 0]
    # reward 2: group 0 [7, 8, 6] -> [0, 1, -1]; group 1 [2, 2, 2] flat -> 0
    r1, r2 = torch.tensor([1.0, 2.0, 3.0, 5.0, 3.0, 4.0]), torch.tensor([7.0, 8.0, 6.0, 2.0, 2.0, 2.0])
    from flowrl.methods.seam import RewardTable

    method = build_method(cfg)
    columns = {"final": 0.4 * r1 + 0.6 * r2, "final/jpeg_compressibility": r1, "final/aesthetic": r2}
    total = method.win_rate_credit(RewardTable(columns, groups)).values  # the credit part, before GDPO
    # 0.4 z1 + 0.6 z2 = [-0.4, 0.6, -0.2, 0.4, -0.4, 0]: unclipped (the clip follows GDPO), mean 0,
    # sample variance (0.16 + 0.36 + 0.04 + 0.16 + 0.16) / 5 = 0.176
    torch.testing.assert_close(total, torch.tensor([-0.4, 0.6, -0.2, 0.4, -0.4, 0.0]))
    std = math.sqrt(0.176)
    want = [-0.4 / std, 0.6 / std, -0.2 / std, 0.4 / std, -0.4 / std, 0.0]  # [-0.9535, 1.4302, ...]
    assert batch_zscore(total).tolist() == pytest.approx(want, rel=1e-5)
    assert method.credit(RewardTable(columns, groups)).values.tolist() == pytest.approx(want, rel=1e-5)  # + GDPO


def test_batch_zscore_by_hand():
    from flowrl.advantages import batch_zscore

    # (N, T): each column on its own. Column 0 [1, -1, 0]: mean 0, std 1; column 1 [0, 2, -2]: std 2
    adv = torch.tensor([[1.0, 0.0], [-1.0, 2.0], [0.0, -2.0]])
    torch.testing.assert_close(batch_zscore(adv), torch.tensor([[1.0, 0.0], [-1.0, 1.0], [0.0, -1.0]]))
    # a nonzero mean: [3, 1, 0, 2] has mean 1.5 and sample std sqrt(5 / 3); the 0 (no signal) stays 0
    s = math.sqrt(5 / 3)
    assert batch_zscore(torch.tensor([3.0, 1.0, 0.0, 2.0])).tolist() == pytest.approx([1.5 / s, -0.5 / s, 0.0, 0.5 / s])
    # one outlier among 36: [35, -1 x 35] has mean 0 and sample std sqrt(36) = 6, so 35 / 6 = 5.83 before
    # the clip to 5 that follows (clipping first would give another result)
    x = torch.tensor([35.0] + [-1.0] * 35)
    z = batch_zscore(x)
    assert float(z[0]) == pytest.approx(35 / 6) and float(z[1]) == pytest.approx(-1 / 6)
    assert float(clip_advantages(z, 5.0)[0]) == 5.0
    assert torch.equal(batch_zscore(torch.zeros(4)), torch.zeros(4))  # every group flat: no NaN
