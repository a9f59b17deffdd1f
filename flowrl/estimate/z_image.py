"""Z-Image's profile: (H/16)(W/16) image tokens (the transformer patchifies the 16-channel latent 2x2) and up to
``model.max_sequence_length`` Qwen3 tokens (each prompt's own length; the padded length bounds it), refined
apart, then one single stream over both; two-branch CFG above scale 1 (flowrl's scale: the pipeline's + 1)."""

from __future__ import annotations

import torch

from flowrl.config import Config
from flowrl.estimate.meta import PROBE_HEAD_DIM, PROBE_HEADS
from flowrl.estimate.profile import FamilyParts, FamilyProfile, Layout
from flowrl.estimate.sd3 import vae_decode_cost
from flowrl.pipelines.z_image.adapter import TRANSFORMER_CLASS, Z_IMAGE_LORA_TARGETS


def layout(cfg: Config, parts: FamilyParts) -> Layout:
    mc, tc = cfg.model, parts.experts[0].config
    height, width = mc.size
    factor = 2 ** (len(parts.vae.config.block_out_channels) - 1)
    patch = tc.all_patch_size[0]
    gh, gw = height // (factor * patch), width // (factor * patch)
    n_txt = mc.max_sequence_length
    return Layout(
        (tc.in_channels, gh * patch, gw * patch), (gh, gw), gh * gw, n_txt, n_txt * tc.cap_feat_dim, 3 * height * width
    )


def width(tc) -> tuple[int, int]:
    """Every token passes its refiner blocks and the main blocks."""
    return tc.dim, tc.n_layers + tc.n_refiner_layers


def inputs(tc, grid: tuple[int, ...], n_txt: int, device, dtype) -> dict:
    kw = {"device": device, "dtype": dtype}
    patch = tc.all_patch_size[0]
    return {
        "x": [torch.randn(tc.in_channels, 1, grid[0] * patch, grid[1] * patch, **kw)],
        "t": torch.full((1,), 0.5, device=device),
        "cap_feats": [torch.randn(n_txt, tc.cap_feat_dim, **kw)],
    }


def narrow(c: dict) -> dict:
    return dict(
        c,
        dim=PROBE_HEADS * PROBE_HEAD_DIM,
        n_heads=PROBE_HEADS,
        n_kv_heads=PROBE_HEADS,
        cap_feat_dim=16,
        axes_dims=[PROBE_HEAD_DIM // 2, PROBE_HEAD_DIM // 4, PROBE_HEAD_DIM // 4],
    )


def passes(embedded: bool, scale: float) -> int:
    """Two-branch CFG above 1, else one pass (the adapter's ``guidance``)."""
    return 2 if scale > 1.0 else 1


def decode_cost(parts: FamilyParts, geo: Layout, cfg: Config) -> tuple[float, float]:
    """Z-Image decodes with FLUX.1's VAE, SD3's architecture: SD3's decode formula."""
    height, width = cfg.model.size
    return vae_decode_cost(parts.vae, height, width)


PROFILE = FamilyProfile(
    pipeline="z_image",
    media="image",
    transformer_class=TRANSFORMER_CLASS,
    vae_class="AutoencoderKL",
    tiny_builder="build_tiny_z_image",
    tiny_paths={"tiny": {}},
    lora_targets=Z_IMAGE_LORA_TARGETS,
    layout=layout,
    width=width,
    inputs=inputs,
    narrow=narrow,
    # token counts that are multiples of 32: the transformer pads image and text to 32 apiece
    probe_grids=(((4, 8), 32), ((8, 8), 32), ((4, 8), 64)),
    probe_tokens=lambda tc, grid: [grid[0] * grid[1]],
    token_split=lambda geo: [geo.main_tokens],
    passes=passes,
    decode_cost=decode_cost,
    checkpoint_text=True,  # the main blocks run one stream of image and text tokens
)
