"""FLUX.1's profile: (H/16)(W/16) image tokens of 64 channels (2x2 packed latents), ``model.max_sequence_length``
T5 tokens (CLIP gives only the pooled vector), two streams in the double blocks, embedded guidance."""

from __future__ import annotations

import torch

from flowrl.config import Config
from flowrl.estimate.meta import PROBE_HEAD_DIM, PROBE_HEADS
from flowrl.estimate.profile import FamilyParts, FamilyProfile, Layout
from flowrl.estimate.sd3 import vae_decode_cost
from flowrl.pipelines.kit.flux1 import FLUX_LORA_TARGETS, FLUX_TRANSFORMER_CLASS


def layout(cfg: Config, parts: FamilyParts) -> Layout:
    mc, tc = cfg.model, parts.experts[0].config
    height, width = mc.size
    factor = 2 ** (len(parts.vae.config.block_out_channels) - 1)
    gh, gw = height // (2 * factor), width // (2 * factor)
    n_txt = mc.max_sequence_length
    return Layout(
        (gh * gw, tc.in_channels),
        (gh, gw),
        gh * gw,
        n_txt,
        n_txt * tc.joint_attention_dim + tc.pooled_projection_dim,
        3 * height * width,
    )


def width(tc) -> tuple[int, int]:
    return tc.num_attention_heads * tc.attention_head_dim, tc.num_layers + tc.num_single_layers


def inputs(tc, grid: tuple[int, ...], n_txt: int, device, dtype) -> dict:
    kw = {"device": device, "dtype": dtype}
    t = torch.full((1,), 0.5, device=device)
    gh, gw = grid
    ids = torch.zeros(gh * gw, 3, **kw)
    if torch.device(device).type != "meta":
        rows, cols = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")
        ids[:, 1], ids[:, 2] = rows.flatten().to(dtype), cols.flatten().to(dtype)
    out = {
        "hidden_states": torch.randn(1, gh * gw, tc.in_channels, **kw),
        "encoder_hidden_states": torch.randn(1, n_txt, tc.joint_attention_dim, **kw),
        "pooled_projections": torch.randn(1, tc.pooled_projection_dim, **kw),
        "timestep": t,
        "img_ids": ids,
        "txt_ids": torch.zeros(n_txt, 3, **kw),
    }
    if tc.guidance_embeds:
        out["guidance"] = torch.full((1,), 3.5, device=device)
    return out


def narrow(c: dict) -> dict:
    return dict(
        c,
        num_attention_heads=PROBE_HEADS,
        attention_head_dim=PROBE_HEAD_DIM,
        joint_attention_dim=16,
        pooled_projection_dim=16,
        axes_dims_rope=(8, 12, 12),
    )


def passes(embedded: bool, scale: float) -> int:
    """FLUX.1's embedded guidance: one pass."""
    from flowrl.pipelines.base import Guidance, GuidanceKind

    return Guidance(GuidanceKind.EMBEDDED if embedded else GuidanceKind.NONE, float(scale), 1).passes


def decode_cost(parts: FamilyParts, geo: Layout, cfg: Config) -> tuple[float, float]:
    """FLUX's VAE is SD3's architecture: SD3's decode formula."""
    height, width = cfg.model.size
    return vae_decode_cost(parts.vae, height, width)


PROFILE = FamilyProfile(
    pipeline="flux",
    media="image",
    transformer_class=FLUX_TRANSFORMER_CLASS,
    vae_class="AutoencoderKL",
    tiny_builder="build_tiny_flux",
    tiny_paths={"tiny": {}},
    lora_targets=FLUX_LORA_TARGETS,
    layout=layout,
    width=width,
    inputs=inputs,
    narrow=narrow,
    probe_grids=(((4, 4), 8), ((8, 8), 8), ((4, 4), 24)),
    probe_tokens=lambda tc, grid: [grid[0] * grid[1]],
    token_split=lambda geo: [geo.main_tokens],
    passes=passes,
    decode_cost=decode_cost,
    checkpoint_text=True,  # both streams enter every double block
)
