"""The ``reward/zero_std_ratio`` monitor (``flowrl.advantages.zero_std_ratio``): a group is flat when all its
members got exactly the same reward, the same rule that gives such a group exactly 0 advantage."""

import torch

from flowrl.advantages import group_advantages, zero_std_ratio


def test_identical_float32_groups_count_as_flat():
    # 24 copies of 0.1 in float32: their population std is 7.45e-9, not 0 (the mean rounds), so the
    # old ``std == 0`` rule called this group not flat; every member is the same number, so it is flat.
    flat = torch.full((24,), 0.1, dtype=torch.float32)
    assert float(flat.std(unbiased=False)) > 0
    assert zero_std_ratio(flat, torch.zeros(24, dtype=torch.long)) == 1.0


def test_random_identical_groups_are_all_flat_and_agree_with_the_advantages():
    # 200 groups of 24 identical float32 rewards, each a random value (about half have a float std > 0),
    # plus 100 groups whose members differ: the ratio is exactly 200 / 300, and a flat group is one
    # whose advantages are all exactly 0
    torch.manual_seed(0)
    flat = torch.rand(200, 1).expand(200, 24)
    varied = torch.rand(100, 24)
    rewards = torch.cat([flat, varied]).flatten()  # (7200,) float32
    groups = torch.arange(300).repeat_interleave(24)
    assert zero_std_ratio(rewards, groups) == 200 / 300
    adv = group_advantages(rewards, groups, global_std=False)
    zero_groups = sum(bool((adv[groups == g] == 0).all()) for g in range(300))
    assert zero_groups == 200


def test_one_differing_member_is_not_flat_and_a_single_member_group_is():
    # group 0: 0.5, 0.5, 0.5 + 1 ulp (not flat); group 1: one member (flat: no spread to learn from)
    ulp = torch.nextafter(torch.tensor(0.5), torch.tensor(1.0))
    rewards = torch.stack([torch.tensor(0.5), torch.tensor(0.5), ulp, torch.tensor(0.3)])
    assert zero_std_ratio(rewards, torch.tensor([0, 0, 0, 1])) == 0.5
