"""Credit assignment: rewards -> advantages. Pure tensor functions."""

from __future__ import annotations

import torch


def group_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, global_std: bool = True, eps: float = 1e-4
) -> torch.Tensor:
    """Flow-GRPO's per-prompt normalisation (arXiv 2505.05470, Eq. 4): A = (r - mean_g) / (std + eps).

    ``mean_g`` is the mean reward of the sample's group (same ``group_ids`` value). ``std`` is the
    population std of all ``rewards`` when ``global_std`` (the SD3.5 default), else of the group.
    rewards, group_ids: (N,). Returns (N,) fp32.
    """
    rewards = rewards.float()
    adv = torch.empty_like(rewards)
    all_std = rewards.std(unbiased=False)
    for g in torch.unique(group_ids):
        members = group_ids == g
        r = rewards[members]
        std = all_std if global_std else r.std(unbiased=False)
        adv[members] = (r - r.mean()) / (std + eps)
    return adv


def clip_advantages(adv: torch.Tensor, max_abs: float) -> torch.Tensor:
    """Clip to [-max_abs, max_abs] (Flow-GRPO's ``adv_clip_max`` = 5)."""
    return adv.clamp(-max_abs, max_abs)


def zero_std_ratio(rewards: torch.Tensor, group_ids: torch.Tensor) -> float:
    """Fraction of groups whose rewards are all equal (they carry no learning signal)."""
    groups = torch.unique(group_ids)
    flat = sum(bool(rewards[group_ids == g].std(unbiased=False) == 0) for g in groups)
    return flat / max(len(groups), 1)
