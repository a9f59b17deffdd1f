"""Stable Audio 3's profile: ceil(duration x rate / 4096) latent frames + the DiT's 64 memory tokens, 256
T5Gemma tokens + 1 duration token of context (one tensor every block shares), CFG only above scale 1."""

from __future__ import annotations

import math

import torch

from flowrl.config import Config
from flowrl.estimate.meta import PROBE_HEADS, PROBE_WIDTH
from flowrl.estimate.profile import FamilyParts, FamilyProfile, Layout
from flowrl.pipelines.stable_audio.adapter import SA3_LORA_TARGETS, TRANSFORMER_CLASS
from flowrl.pipelines.stable_audio.layout import TINY_PATHS

SA3_DURATION_S = 10.0  # StableAudio3Pipeline's default duration (model.duration_s null)
SA3_TEXT_TOKENS = 256  # the pipeline caps T5Gemma at 256 tokens; one duration token follows


def layout(cfg: Config, parts: FamilyParts) -> Layout:
    mc, tc = cfg.model, parts.experts[0].config
    vc = parts.vae.config
    duration = mc.duration_s or SA3_DURATION_S
    ratio = getattr(parts.vae, "downsampling_ratio", None) or vc.patch_size * math.prod(vc.encoder_strides)
    length = math.ceil(duration * vc.sampling_rate / ratio)
    text = min(parts.text_tokens or SA3_TEXT_TOKENS, SA3_TEXT_TOKENS)
    return Layout(
        (tc.io_channels, length),
        (length,),
        length // tc.patch_size + tc.num_memory_tokens,
        text + 1,
        text * tc.cond_token_dim + text + tc.global_cond_dim,
        vc.audio_channels * int(duration * vc.sampling_rate),
    )


def inputs(tc, grid: tuple[int, ...], n_txt: int, device, dtype) -> dict:
    kw = {"device": device, "dtype": dtype}
    t = torch.full((1,), 0.5, device=device)
    (length,) = grid
    return {
        "hidden_states": torch.randn(1, tc.io_channels, length, **kw),
        "timestep": t,
        "encoder_hidden_states": torch.randn(1, n_txt, tc.cond_token_dim, **kw),
        "global_hidden_states": torch.randn(1, tc.global_cond_dim, **kw),
    }


def passes(embedded: bool, scale: float) -> int:
    """CFG only above scale 1."""
    from flowrl.pipelines.base import cfg_guidance

    return 1 if scale <= 1.0 else cfg_guidance(scale).passes


PROFILE = FamilyProfile(
    pipeline="stable_audio",
    media="audio",
    transformer_class=TRANSFORMER_CLASS,
    vae_class="AutoencoderSAME",
    tiny_builder="build_tiny_stable_audio",
    tiny_paths=TINY_PATHS,
    lora_targets=SA3_LORA_TARGETS,
    layout=layout,
    width=lambda tc: (tc.embed_dim, tc.depth),
    inputs=inputs,
    narrow=lambda c: dict(c, embed_dim=PROBE_WIDTH, num_heads=PROBE_HEADS, cond_token_dim=16, global_cond_dim=16),
    probe_grids=(((16,), 8), ((64,), 8), ((16,), 24)),
    probe_tokens=lambda tc, grid: [grid[0] // tc.patch_size + tc.num_memory_tokens],
    token_split=lambda geo: [geo.main_tokens],
    passes=passes,
    text_tokens_from_tokenizer=True,
)
