"""Wan 2.1 / 2.2's profile: F' (H/16)(W/16) video tokens (F' = 1 + (F-1)/4, patch 1x2x2; TI2V-5B's Wan 2.2 VAE
compresses 16x, so F' (H/32)(W/32)), the padded UMT5
tokens entering only the cross-attention, two-branch CFG, a clip decoded at a time; Wan 2.2 A14B's two
experts take the transitions above and below ``boundary_ratio``."""

from __future__ import annotations

import torch

from flowrl.config import Config
from flowrl.estimate.meta import PROBE_HEAD_DIM, PROBE_HEADS, PROBE_WIDTH
from flowrl.estimate.profile import FamilyParts, FamilyProfile, Layout
from flowrl.pipelines.wan.adapter import TINY_PATHS, TRANSFORMER_CLASS, WAN_LORA_TARGETS

WAN_NUM_FRAMES = 81  # WanPipeline's default: 81 frames at 16 fps (model.num_frames null)


def layout(cfg: Config, parts: FamilyParts) -> Layout:
    mc, tc = cfg.model, parts.experts[0].config
    height, width = mc.size
    frames = mc.num_frames or WAN_NUM_FRAMES
    vc = parts.vae.config
    t_factor = vc.get("scale_factor_temporal") or 2 ** sum(vc.temperal_downsample)
    s_factor = vc.get("scale_factor_spatial") or 2 ** len(vc.temperal_downsample)
    f, h, w = (frames - 1) // t_factor + 1, height // s_factor, width // s_factor
    pt, ph, pw = tc.patch_size
    n_txt = mc.max_sequence_length
    return Layout(
        (tc.in_channels, f, h, w),
        (f, h, w),
        (f // pt) * (h // ph) * (w // pw),
        n_txt,
        n_txt * tc.text_dim,
        frames * 3 * height * width,
    )


def width(tc) -> tuple[int, int]:
    return tc.num_attention_heads * tc.attention_head_dim, tc.num_layers


def inputs(tc, grid: tuple[int, ...], n_txt: int, device, dtype) -> dict:
    kw = {"device": device, "dtype": dtype}
    t = torch.full((1,), 0.5, device=device)
    return {
        "hidden_states": torch.randn(1, tc.in_channels, *grid, **kw),
        "timestep": t * 1000,
        "encoder_hidden_states": torch.randn(1, n_txt, tc.text_dim, **kw),
    }


def narrow(c: dict) -> dict:
    d = c["num_attention_heads"] * c["attention_head_dim"]
    return dict(
        c,
        num_attention_heads=PROBE_HEADS,
        attention_head_dim=PROBE_HEAD_DIM,
        text_dim=16,
        ffn_dim=max(8, round(c["ffn_dim"] * PROBE_WIDTH / d)),
    )


def probe_tokens(tc, grid: tuple[int, ...]) -> list[int]:
    pt, ph, pw = tc.patch_size
    return [(grid[0] // pt) * (grid[1] // ph) * (grid[2] // pw)]


def passes(embedded: bool, scale: float) -> int:
    """Two-branch CFG, one pass at scale 1."""
    from flowrl.pipelines.base import cfg_guidance

    return cfg_guidance(scale).passes


def default_scheduler() -> dict:
    from flowrl.pipelines.wan.tiny import WAN_SCHEDULER_CONFIG

    return dict(WAN_SCHEDULER_CONFIG)


PROFILE = FamilyProfile(
    pipeline="wan",
    media="video",
    transformer_class=TRANSFORMER_CLASS,
    vae_class="AutoencoderKLWan",
    tiny_builder="build_tiny_wan",
    tiny_paths=TINY_PATHS,
    lora_targets=WAN_LORA_TARGETS,
    layout=layout,
    width=width,
    inputs=inputs,
    narrow=narrow,
    probe_grids=(((1, 8, 8), 8), ((1, 16, 16), 8), ((1, 8, 8), 24)),
    probe_tokens=probe_tokens,
    token_split=lambda geo: [geo.main_tokens],
    passes=passes,
    decode_rows=1,  # one clip at a time, the decoded ones gathered on the device
    reads_scheduler=True,
    default_scheduler=default_scheduler,
)
