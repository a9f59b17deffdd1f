"""Qwen-Image-Edit's profile: Qwen-Image's (``flowrl.estimate.qwen_image``) with one source image's packed latents
in every forward, at the pipelines' VAE size (a 1024 x 1024 area at the output's aspect ratio: 4,096 tokens),
after the (H/16)(W/16) generated tokens. Published: Qwen-Image-Edit, -2509 and -2511 share Qwen-Image's
architecture (the 20B transformer, Qwen2.5-VL-7B, the Qwen VAE). The text tokens are bounded by
``model.max_sequence_length`` as Qwen-Image's; the source image's vision tokens in the VL encoder's output (Edit
shows it at the VAE size, Edit-Plus at a 384 x 384 area) are not counted beyond that bound."""

from __future__ import annotations

import dataclasses

import torch

from flowrl.config import Config
from flowrl.estimate import qwen_image
from flowrl.estimate.profile import FamilyParts, Layout
from flowrl.pipelines.qwen_image_edit.adapter import TINY_PATHS

SOURCE_GRID = 64  # packed tokens a side of a 1024 x 1024 source (VAE factor 8, 2x2 packing)

PUBLISHED = {
    name: {"pipeline": "qwen_image_edit", "components": dict(qwen_image.PUBLISHED["Qwen/Qwen-Image"]["components"])}
    for name in ("Qwen/Qwen-Image-Edit", "Qwen/Qwen-Image-Edit-2509", "Qwen/Qwen-Image-Edit-2511")
}


def _source_grid(height: int, width: int, area: int | None = None) -> tuple[int, int]:
    from flowrl.pipelines.qwen_image_edit.layout import VAE_AREA, condition_size

    h, w = condition_size(height, width, area or VAE_AREA)
    return h // 16, w // 16


def layout(cfg: Config, parts: FamilyParts) -> Layout:
    base = qwen_image.layout(cfg, parts)
    sh, sw = _source_grid(*cfg.model.size, cfg.model.source_area)
    tokens = base.main_tokens + sh * sw
    return dataclasses.replace(base, grid=(*base.grid, sh, sw), main_tokens=tokens)


def inputs(tc, grid: tuple[int, ...], n_txt: int, device, dtype) -> dict:
    gh, gw, sh, sw = grid if len(grid) == 4 else (*grid, grid[0], grid[1])
    out = qwen_image.inputs(tc, (gh, gw), n_txt, device, dtype)
    source = torch.randn(1, sh * sw, tc.in_channels, device=device, dtype=dtype)
    out["hidden_states"] = torch.cat([out["hidden_states"], source], dim=1)
    out["img_shapes"] = [[(1, gh, gw), (1, sh, sw)]]
    return out


PROFILE = dataclasses.replace(
    qwen_image.PROFILE,
    pipeline="qwen_image_edit",
    tiny_builder="build_tiny_qwen_image_edit",
    tiny_paths=TINY_PATHS,
    layout=layout,
    inputs=inputs,
    probe_grids=(((4, 4, 4, 4), 8), ((8, 8, 4, 4), 8), ((4, 4, 4, 4), 24)),
    probe_tokens=lambda tc, grid: [grid[0] * grid[1] + (grid[2] * grid[3] if len(grid) == 4 else grid[0] * grid[1])],
)
