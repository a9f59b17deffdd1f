"""Qwen-Image's profile: (H/16)(W/16) image tokens of 64 channels (2x2 packed latents), at most
``model.max_sequence_length`` Qwen2.5-VL tokens (the prompts are padded to the longest of a batch, so this is a
bound), two streams in every block, true CFG (two rows above scale 1); the decode runs the 3-D causal VAE on
one frame. The published table: the 20B transformer (``QwenImageTransformer2DModel``'s defaults), the
Qwen2.5-VL-7B-Instruct encoder with its vision tower, and ``AutoencoderKLQwenImage``'s defaults."""

from __future__ import annotations

import json
import warnings

import torch

from flowrl.config import Config
from flowrl.estimate.meta import PROBE_HEAD_DIM, PROBE_HEADS, component, meta_cost, plain
from flowrl.estimate.profile import FamilyParts, FamilyProfile, Layout
from flowrl.pipelines.kit.qwen_image import QWEN_IMAGE_LORA_TARGETS, QWEN_IMAGE_TRANSFORMER_CLASS

# Qwen/Qwen2.5-VL-7B-Instruct config.json (the text model and the vision tower Qwen-Image keeps resident)
QWEN25_VL_7B = {
    "text_config": {
        "vocab_size": 152064,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "max_position_embeddings": 128000,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]},
    },
    "vision_config": {
        "depth": 32,
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "out_hidden_size": 3584,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
    },
}
_QWEN_IMAGE_PARTS = {
    "transformer": ("QwenImageTransformer2DModel", {}),  # the class defaults are Qwen-Image's 20B config
    "vae": ("AutoencoderKLQwenImage", {}),
    "text_encoder": ("Qwen2_5_VLForConditionalGeneration", QWEN25_VL_7B),
}
PUBLISHED = {
    "Qwen/Qwen-Image": {"pipeline": "qwen_image", "components": dict(_QWEN_IMAGE_PARTS)},
    "Qwen/Qwen-Image-2512": {"pipeline": "qwen_image", "components": dict(_QWEN_IMAGE_PARTS)},
}


def layout(cfg: Config, parts: FamilyParts) -> Layout:
    mc, tc = cfg.model, parts.experts[0].config
    height, width = mc.size
    factor = 2 ** len(parts.vae.config.temperal_downsample)
    gh, gw = height // (2 * factor), width // (2 * factor)
    n_txt = mc.max_sequence_length
    return Layout(
        (gh * gw, tc.in_channels), (gh, gw), gh * gw, n_txt, n_txt * (tc.joint_attention_dim + 1), 3 * height * width
    )


def width(tc) -> tuple[int, int]:
    return tc.num_attention_heads * tc.attention_head_dim, tc.num_layers


def inputs(tc, grid: tuple[int, ...], n_txt: int, device, dtype) -> dict:
    kw = {"device": device, "dtype": dtype}
    gh, gw = grid
    return {
        "hidden_states": torch.randn(1, gh * gw, tc.in_channels, **kw),
        "encoder_hidden_states": torch.randn(1, n_txt, tc.joint_attention_dim, **kw),
        "timestep": torch.full((1,), 0.5, device=device),
        "img_shapes": [[(1, gh, gw)]],
    }


def narrow(c: dict) -> dict:
    return dict(
        c,
        num_attention_heads=PROBE_HEADS,
        attention_head_dim=PROBE_HEAD_DIM,
        joint_attention_dim=16,
        axes_dims_rope=(8, 12, 12),
    )


def passes(embedded: bool, scale: float) -> int:
    """True CFG: two rows above scale 1."""
    return 2 if scale > 1.0 else 1


def decode_cost(parts: FamilyParts, geo: Layout, cfg: Config) -> tuple[float, float]:
    """One image through the 3-D causal VAE on meta: the latent (16, 1, H/8, W/8)."""
    vcfg = plain(dict(parts.vae.config))
    gh, gw = geo.grid[:2]  # the generated image (an edit layout adds its source grid after it)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vae = component("AutoencoderKLQwenImage", json.loads(json.dumps(vcfg, default=list)))
        z = torch.randn(1, vcfg.get("z_dim", 16), 1, 2 * gh, 2 * gw)
    return meta_cost(vae, lambda z: vae.decode(z, return_dict=False), {"z": z})


PROFILE = FamilyProfile(
    pipeline="qwen_image",
    media="image",
    transformer_class=QWEN_IMAGE_TRANSFORMER_CLASS,
    vae_class="AutoencoderKLQwenImage",
    tiny_builder="build_tiny_qwen_image",
    tiny_paths={"tiny": {}},
    lora_targets=QWEN_IMAGE_LORA_TARGETS,
    layout=layout,
    width=width,
    inputs=inputs,
    narrow=narrow,
    probe_grids=(((4, 4), 8), ((8, 8), 8), ((4, 4), 24)),
    probe_tokens=lambda tc, grid: [grid[0] * grid[1]],
    token_split=lambda geo: [geo.main_tokens],
    passes=passes,
    decode_cost=decode_cost,
    checkpoint_text=True,  # both streams enter every block
)
