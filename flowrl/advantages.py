"""Credit assignment: rewards -> advantages. Pure tensor functions."""

from __future__ import annotations

import torch


def group_zscore(
    values: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    eps: float = 1e-4,
    unbiased: bool = False,
    global_std: bool = False,
) -> torch.Tensor:
    """(v - mean_group) / (std + eps) within each group, separately for every trailing index.

    values: (N, *S); group_ids: (N,) (members need not be contiguous). ``std`` is the population std
    (``unbiased=False``, Flow-GRPO) or the sample std (``unbiased=True``: G²RPO, E-GRPO code), of the
    group or, with ``global_std``, of all N values. A group whose values are all equal (a one-member
    group too) gets exactly 0: ``v - mean`` would otherwise be float noise of random sign.
    Returns (N, *S) fp32.
    """
    if group_ids.shape != values.shape[:1]:
        raise ValueError(f"group_ids has shape {tuple(group_ids.shape)}, expected ({values.shape[0]},)")
    x = values.float()
    out = torch.zeros_like(x)
    correction = 1 if unbiased else 0
    all_std = x.std(dim=0, correction=correction) if global_std else None
    for g in torch.unique(group_ids):
        members = group_ids == g
        v = x[members]  # (n_g, *S)
        if v.shape[0] < 2:
            continue
        flat = v.amax(dim=0) == v.amin(dim=0)
        std = all_std if global_std else v.std(dim=0, correction=correction)
        out[members] = torch.where(flat, 0.0, (v - v.mean(dim=0)) / (std + eps))
    return out


def group_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, global_std: bool = True, eps: float = 1e-4
) -> torch.Tensor:
    """Flow-GRPO's per-prompt normalisation (arXiv 2505.05470, Eq. 4): A = (r - mean_g) / (std + eps).

    ``mean_g`` is the mean reward of the sample's group (same ``group_ids`` value). ``std`` is the
    population std of all ``rewards`` when ``global_std`` (the SD3.5 default), else of the group.
    A flat group gets exactly 0. rewards, group_ids: (N,). Returns (N,) fp32.
    """
    return group_zscore(rewards, group_ids, eps=eps, global_std=global_std)


def clip_advantages(adv: torch.Tensor, max_abs: float) -> torch.Tensor:
    """Clip to [-max_abs, max_abs] (Flow-GRPO's ``adv_clip_max`` = 5)."""
    return adv.clamp(-max_abs, max_abs)


def batch_zscore(adv: torch.Tensor, eps: float = 1e-8, unbiased: bool = True) -> torch.Tensor:
    """GDPO's batch re-normalisation, as Pref-GRPO's ``--apply_gdpo`` runs it: (a - mean) / (std + eps) over
    all N samples of the iteration (every process's), with the sample std and eps 1e-8 as the authors'
    ``compute_weighted_advantages``; clipping comes after it.

    adv: (N,) or (N, T); an (N, T) tensor is normalised per transition (column), as ``group_zscore`` treats
    trailing indices. An entry that is exactly 0 stays 0: a flat group's 0 (or an entry without credit)
    would otherwise become -mean / std, float noise for group-centred advantages (whose mean is 0 up to
    rounding), and the trainer drops the rows whose advantage is 0. Fewer than 2 samples: zeros.
    Returns (N,) or (N, T) fp32.
    """
    x = adv.float()
    if x.shape[0] < 2:
        return torch.zeros_like(x)
    std = x.std(dim=0, correction=1 if unbiased else 0)
    return torch.where(x == 0, 0.0, (x - x.mean(dim=0)) / (std + eps))


def zero_std_ratio(rewards: torch.Tensor, group_ids: torch.Tensor) -> float:
    """Fraction of groups whose rewards are all equal (they carry no learning signal).

    Flat means every member's reward is exactly the same number (max == min), the rule ``group_zscore``
    uses to give a group exactly 0: a group counted here is a group whose advantages are 0. Not ``std
    == 0``: the std of identical float32 values is often a few 1e-9 (the mean is rounded), which called
    about half of truly flat groups not flat. rewards, group_ids: (N,).
    """
    groups = torch.unique(group_ids)
    flat = 0
    for g in groups:
        members = rewards[group_ids == g]
        flat += bool(members.amax() == members.amin())
    return flat / max(len(groups), 1)
