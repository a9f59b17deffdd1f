"""Wan image-to-video's profile (``model.pipeline: wan_i2v``): the Wan one (``flowrl.estimate.wan``) with the source
image's conditioning. Wan 2.1 I2V and 2.2 I2V-A14B read 36 channels (the 16 of the state, the 4 of the first-frame
mask and the 16 of the image's latent) and write 16; Wan 2.1 I2V's blocks also attend to the CLIP image
encoder's 257 penultimate states (``image_dim``, ``added_kv_proj_dim``); TI2V-5B's image mode reads and writes
48. The image's VAE encode and CLIP pass run once per distinct image (cached, like the text) and are not timed.

Left out of the FLOPs (under 2 % of a forward at 5B): TI2V-5B embeds a timestep per video token, which the probe's
one timestep per row does not."""

from __future__ import annotations

import torch

from flowrl.config import Config
from flowrl.estimate import wan
from flowrl.estimate.meta import PROBE_HEAD_DIM, PROBE_HEADS
from flowrl.estimate.profile import FamilyParts, FamilyProfile, Layout
from flowrl.pipelines.wan_i2v.adapter import TINY_PATHS, WAN_I2V_LORA_TARGETS

CLIP_IMAGE_TOKENS = 257  # CLIP ViT-H/14 at 224 px: 16 x 16 patches and the class token


def layout(cfg: Config, parts: FamilyParts) -> Layout:
    """The state is ``out_channels`` wide; the conditioning adds the mask and image latent (or TI2V's first
    latent frame) and the CLIP states."""
    geo = wan.layout(cfg, parts)
    tc = parts.experts[0].config
    f, h, w = geo.grid
    latent = (tc.out_channels, f, h, w)
    image = (
        (tc.in_channels - tc.out_channels) * f * h * w if tc.in_channels != tc.out_channels else tc.out_channels * h * w
    )
    if tc.get("image_dim"):
        image += CLIP_IMAGE_TOKENS * tc.image_dim
    return Layout(latent, geo.grid, geo.main_tokens, geo.text_tokens, geo.cond_elems + image, geo.media_elems)


def inputs(tc, grid: tuple[int, ...], n_txt: int, device, dtype) -> dict:
    out = wan.inputs(tc, grid, n_txt, device, dtype)
    if tc.get("image_dim"):
        out["encoder_hidden_states_image"] = torch.randn(1, CLIP_IMAGE_TOKENS, tc.image_dim, device=device, dtype=dtype)
    return out


def narrow(c: dict) -> dict:
    """Wan's narrow copy; the image cross-attention's projections follow the narrow width."""
    out = wan.narrow(c)
    if c.get("added_kv_proj_dim"):
        out.update(added_kv_proj_dim=PROBE_HEADS * PROBE_HEAD_DIM, image_dim=16)
    return out


PROFILE = FamilyProfile(
    pipeline="wan_i2v",
    media="video",
    transformer_class=wan.PROFILE.transformer_class,
    vae_class="AutoencoderKLWan",
    tiny_builder="build_tiny_wan_i2v",
    tiny_paths=TINY_PATHS,
    lora_targets=WAN_I2V_LORA_TARGETS,
    layout=layout,
    width=wan.width,
    inputs=inputs,
    narrow=narrow,
    probe_grids=wan.PROFILE.probe_grids,
    probe_tokens=wan.probe_tokens,
    token_split=lambda geo: [geo.main_tokens],
    passes=wan.passes,
    decode_rows=1,
    reads_scheduler=True,
    default_scheduler=wan.default_scheduler,
)
