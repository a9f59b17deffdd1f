"""FLUX.2-klein's profile: (H/16)(W/16) packed tokens of 128 channels, ``model.max_sequence_length`` Qwen3 tokens
(three hidden states stacked per token: ``joint_attention_dim``), two streams in the double blocks; the base
models' two-branch CFG above scale 1 (a distilled checkpoint runs one pass: its recipes sample at 1)."""

from __future__ import annotations

import warnings

import torch

from flowrl.config import Config
from flowrl.estimate.meta import PROBE_HEAD_DIM, PROBE_HEADS, component, meta_cost, plain
from flowrl.estimate.profile import FamilyParts, FamilyProfile, Layout
from flowrl.pipelines.flux2.adapter import FLUX2_LORA_TARGETS, TRANSFORMER_CLASS
from flowrl.pipelines.flux2.tiny import TINY_PATHS


def layout(cfg: Config, parts: FamilyParts) -> Layout:
    mc, tc = cfg.model, parts.experts[0].config
    height, width = mc.size
    factor = 2 ** (len(parts.vae.config.block_out_channels) - 1)
    gh, gw = height // (2 * factor), width // (2 * factor)
    n_txt = mc.max_sequence_length
    return Layout(
        (gh * gw, tc.in_channels), (gh, gw), gh * gw, n_txt, n_txt * tc.joint_attention_dim, 3 * height * width
    )


def width(tc) -> tuple[int, int]:
    return tc.num_attention_heads * tc.attention_head_dim, tc.num_layers + tc.num_single_layers


def _ids(rows: int, cols: int, length: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(image ids (1, rows x cols, 4) = (0, row, col, 0), text ids (1, length, 4) = (0, 0, 0, l))."""
    img, txt = torch.zeros(1, rows * cols, 4, device=device, dtype=dtype), torch.zeros(1, length, 4, device=device)
    if torch.device(device).type != "meta":
        r, c = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
        img[0, :, 1], img[0, :, 2] = r.flatten().to(dtype), c.flatten().to(dtype)
        txt[0, :, 3] = torch.arange(length)
    return img, txt.to(dtype)


def inputs(tc, grid: tuple[int, ...], n_txt: int, device, dtype) -> dict:
    kw = {"device": device, "dtype": dtype}
    img_ids, txt_ids = _ids(grid[0], grid[1], n_txt, device, dtype)
    return {
        "hidden_states": torch.randn(1, grid[0] * grid[1], tc.in_channels, **kw),
        "encoder_hidden_states": torch.randn(1, n_txt, tc.joint_attention_dim, **kw),
        "timestep": torch.full((1,), 0.5, device=device),
        "img_ids": img_ids,
        "txt_ids": txt_ids,
    }


def narrow(c: dict) -> dict:
    quarter = PROBE_HEAD_DIM // 4
    return dict(
        c,
        num_attention_heads=PROBE_HEADS,
        attention_head_dim=PROBE_HEAD_DIM,
        joint_attention_dim=16,
        axes_dims_rope=(quarter,) * 4,
    )


def passes(embedded: bool, scale: float) -> int:
    """A base model's two-branch CFG above 1, else one pass."""
    return 2 if scale > 1.0 else 1


def decode_cost(parts: FamilyParts, geo: Layout, cfg: Config) -> tuple[float, float]:
    """``AutoencoderKLFlux2.decode`` of one sample's unpatchified latent (32, H/8, W/8) on meta, in fp32."""
    vcfg = plain(dict(parts.vae.config))
    gh, gw = geo.grid
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vae = component("AutoencoderKLFlux2", vcfg)
        z = torch.randn(1, vcfg["latent_channels"], 2 * gh, 2 * gw)
    return meta_cost(vae, lambda z: vae.decode(z, return_dict=False), {"z": z})


PROFILE = FamilyProfile(
    pipeline="flux2",
    media="image",
    transformer_class=TRANSFORMER_CLASS,
    vae_class="AutoencoderKLFlux2",
    tiny_builder="build_tiny_flux2",
    tiny_paths=TINY_PATHS,
    lora_targets=FLUX2_LORA_TARGETS,
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
