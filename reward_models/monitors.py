"""Pure functions that watch for reward hacking: in-group diversity, saturation and colour statistics.

Each takes images (B, 3, H, W) in [0, 1] (and group ids (B,) where it says so) and returns a flat dict of
floats with slash names, ready for the trainer's metrics (``monitor/...``). No model, no state.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

DIVERSITY_SIZE = 32  # images are compared at 32 x 32 (area-averaged), so the cost does not grow with resolution


def in_group_diversity(images: torch.Tensor, group_ids: torch.Tensor, size: int = DIVERSITY_SIZE) -> dict[str, float]:
    """Mean pairwise RMS pixel distance between members of the same group, averaged over groups.

    d(a, b) = sqrt(mean((a - b)^2)) on images downsampled to ``size``; a group of one contributes nothing.
    A collapse of the policy (every member of a group alike) drives ``monitor/diversity/in_group`` to 0.
    """
    small = F.adaptive_avg_pool2d(images.float(), size).flatten(1)  # (B, 3 * size * size)
    per_group = []
    for g in torch.unique(group_ids):
        members = small[group_ids == g]
        if len(members) < 2:
            continue
        dist = torch.cdist(members, members) / members.shape[1] ** 0.5  # RMS distance
        n = len(members)
        per_group.append(float(dist.sum() / (n * (n - 1))))
    mean = sum(per_group) / len(per_group) if per_group else 0.0
    return {"monitor/diversity/in_group": mean, "monitor/diversity/groups": float(len(per_group))}


def saturation_stats(images: torch.Tensor, clip_eps: float = 1.0 / 255) -> dict[str, float]:
    """HSV saturation (max - min) / max per pixel (0 where max is 0): mean and the share of pixels at 1;
    the share of channel values clipped at 0 or 1 (within ``clip_eps``). HPS-style rewards push these up."""
    x = images.float().clamp(0, 1)
    high, low = x.max(dim=1).values, x.min(dim=1).values  # (B, H, W)
    sat = torch.where(high > 0, (high - low) / high.clamp(min=1e-8), torch.zeros_like(high))
    return {
        "monitor/saturation/mean": float(sat.mean()),
        "monitor/saturation/full_frac": float((sat > 0.99).float().mean()),
        "monitor/pixels/clipped_frac": float(((x <= clip_eps) | (x >= 1 - clip_eps)).float().mean()),
    }


def colour_stats(images: torch.Tensor) -> dict[str, float]:
    """Per-channel means, brightness (mean of the channel means), contrast (std of the luma) and the
    Hasler-Suesstrunk colourfulness ``sqrt(std_rg^2 + std_yb^2) + 0.3 sqrt(mean_rg^2 + mean_yb^2)`` with
    rg = R - G, yb = (R + G) / 2 - B (on the [0, 1] scale), averaged over images."""
    x = images.float().clamp(0, 1)
    r, g, b = x[:, 0], x[:, 1], x[:, 2]
    rg, yb = r - g, 0.5 * (r + g) - b
    std = (rg.flatten(1).std(dim=1, unbiased=False) ** 2 + yb.flatten(1).std(dim=1, unbiased=False) ** 2).sqrt()
    mean = (rg.flatten(1).mean(dim=1) ** 2 + yb.flatten(1).mean(dim=1) ** 2).sqrt()
    luma = 0.299 * r + 0.587 * g + 0.114 * b
    return {
        "monitor/colour/r_mean": float(r.mean()),
        "monitor/colour/g_mean": float(g.mean()),
        "monitor/colour/b_mean": float(b.mean()),
        "monitor/colour/brightness": float(x.mean()),
        "monitor/colour/contrast": float(luma.flatten(1).std(dim=1, unbiased=False).mean()),
        "monitor/colour/colourfulness": float((std + 0.3 * mean).mean()),
    }


def image_monitors(images: torch.Tensor, group_ids: torch.Tensor) -> dict[str, float]:
    """All of the above in one flat dict."""
    return {**in_group_diversity(images, group_ids), **saturation_stats(images), **colour_stats(images)}
