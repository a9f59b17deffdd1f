"""FLUX.1-Kontext's profile: FLUX.1's (``flowrl.estimate.flux``) with the source image's packed latents appended to
the image tokens: (H/16)(W/16) latent tokens + as many source tokens (the source is encoded at the output size)
in every forward, ``model.max_sequence_length`` T5 tokens, embedded guidance. The source latents are conditioning
rows kept with each sample (``N x 64`` floats)."""

from __future__ import annotations

import dataclasses

import torch

from flowrl.config import Config
from flowrl.estimate import flux
from flowrl.estimate.profile import FamilyParts, Layout


def layout(cfg: Config, parts: FamilyParts) -> Layout:
    geo = flux.layout(cfg, parts)
    tokens, channels = geo.latent
    return dataclasses.replace(geo, main_tokens=2 * tokens, cond_elems=geo.cond_elems + tokens * channels)


def inputs(tc, grid: tuple[int, ...], n_txt: int, device, dtype) -> dict:
    """FLUX.1's row with the source tokens appended (ids with the first coordinate 1)."""
    out = flux.inputs(tc, grid, n_txt, device, dtype)
    source_ids = out["img_ids"].clone()
    if torch.device(device).type != "meta":
        source_ids[:, 0] = 1
    out["hidden_states"] = torch.cat([out["hidden_states"], torch.randn_like(out["hidden_states"])], dim=1)
    out["img_ids"] = torch.cat([out["img_ids"], source_ids], dim=0)
    return out


PROFILE = dataclasses.replace(
    flux.PROFILE,
    pipeline="flux_kontext",
    tiny_builder="build_tiny_flux_kontext",
    layout=layout,
    inputs=inputs,
    probe_tokens=lambda tc, grid: [2 * grid[0] * grid[1]],
)
