"""A pairwise reward for tests (importable as ``pairwise_rewards:Brighter``): the brighter image wins."""

import torch

from flowrl.reward_models.base import PairwiseReward


class Brighter(PairwiseReward):
    name = "brighter"

    def __init__(self, both_orders: bool = False, bias: float = 0.0):
        self.both_orders, self.bias = both_orders, bias  # bias: how much the judge favours the first image
        self.calls = 0

    def compare(self, media_a, media_b, prompts, metadata):
        self.calls += len(prompts)
        a, b = media_a.float().mean(dim=(1, 2, 3)), media_b.float().mean(dim=(1, 2, 3))
        return torch.where(a + self.bias > b, 1.0, torch.where(a + self.bias == b, 0.5, 0.0))
