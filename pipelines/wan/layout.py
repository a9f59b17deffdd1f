"""Wan's latent layout: 5-D latents ``(16, 1 + (F-1)/4, H/8, W/8)`` (the causal VAE keeps the first frame and
compresses the rest 4x in time, 8x in space; Wan 2.2 TI2V-5B's VAE ``(48, 1 + (F-1)/4, H/16, W/16)``), no
packing; the transformer patchifies them 1x2x2 into tokens.
Pure functions of frames and resolution (and the model's factors), read by the adapter, the tiny builder and the
estimate."""

from __future__ import annotations

import torch

from flowrl.pipelines.kit.layout import Layout

WAN_LATENT_CHANNELS = 16
WAN22_LATENT_CHANNELS = 48  # the Wan 2.2 VAE of TI2V-5B: 48 channels at 16x spatial, 4x temporal
# Wan-AI/Wan2.2-TI2V-5B-Diffusers: vae/config.json, the Wan 2.2 VAE's compression (48 channels, 16x spatial through
# a 2x2 patchify before a residual 8x encoder, 4x temporal): the tiny VAE and the estimate's published table keep it
WAN22_VAE_LAYOUT = {
    "z_dim": WAN22_LATENT_CHANNELS,
    "in_channels": 12,
    "out_channels": 12,
    "patch_size": 2,
    "scale_factor_spatial": 16,
    "scale_factor_temporal": 4,
    "is_residual": True,
}
WAN_SPATIAL_COMPRESSION = 8
WAN22_SPATIAL_COMPRESSION = 16
WAN_TEMPORAL_COMPRESSION = 4
WAN_PATCH_SIZE = (1, 2, 2)
DEFAULT_NUM_FRAMES = 81  # WanPipeline's default: 81 frames at 16 fps


def latent_shape(
    num_frames: int,
    height: int,
    width: int,
    *,
    spatial: int = WAN_SPATIAL_COMPRESSION,
    temporal: int = WAN_TEMPORAL_COMPRESSION,
    channels: int = WAN_LATENT_CHANNELS,
) -> tuple[int, int, int, int]:
    """One sample's latent ``(C, 1 + (F-1)/t, H/s, W/s)`` (F = tk + 1)."""
    return (channels, (num_frames - 1) // temporal + 1, height // spatial, width // spatial)


def wan_latent_shape(batch: int, num_frames: int, height: int, width: int) -> tuple[int, int, int, int, int]:
    """Wan's 5-D latent shape ``(B, 16, 1 + (F-1)/4, H/8, W/8)`` (F = 4k + 1; H, W multiples of 16)."""
    return (batch, *latent_shape(num_frames, height, width))


def layout(
    num_frames: int,
    height: int,
    width: int,
    *,
    spatial: int = WAN_SPATIAL_COMPRESSION,
    temporal: int = WAN_TEMPORAL_COMPRESSION,
    channels: int = WAN_LATENT_CHANNELS,
    patch_size: tuple[int, int, int] = WAN_PATCH_SIZE,
) -> Layout:
    """The latent and the transformer's video tokens ``(F'/pt) (H'/ph) (W'/pw)``."""
    shape = latent_shape(num_frames, height, width, spatial=spatial, temporal=temporal, channels=channels)
    pt, ph, pw = patch_size
    return Layout(shape, (shape[1] // pt) * (shape[2] // ph) * (shape[3] // pw))


def token_timesteps(
    timestep: torch.Tensor, latent_frames: int, height: int, width: int, *, first_frame_fixed: bool = False
) -> torch.Tensor:
    """Wan 2.2 TI2V-5B's timestep per video token (``expand_timesteps``): (B,) -> (B, F' (h/2) (w/2)) in the
    transformer's token order (frame, row, column), every token at its row's timestep, or 0 for the first
    latent frame's tokens where they hold a source image's latent (``first_frame_fixed``), as
    ``Wan*Pipeline``'s ``(mask[0][0][:, ::2, ::2] * t).flatten()`` makes them."""
    mask = torch.ones(latent_frames, height // 2, width // 2, dtype=torch.float32, device=timestep.device)
    if first_frame_fixed:
        mask[0] = 0
    return mask.flatten()[None, :] * timestep.reshape(-1, 1)


def for_model(model_cfg) -> Layout:
    """The layout of a ``ModelConfig``: ``model.num_frames`` (default 81) at ``model.height`` x ``model.width``
    (the tiny models keep Wan's factors; ``model.path: tiny-ti2v`` the Wan 2.2 VAE's 48 channels at 16x)."""
    height, width = model_cfg.size
    frames = model_cfg.num_frames or DEFAULT_NUM_FRAMES
    if model_cfg.path == "tiny-ti2v":
        return layout(frames, height, width, spatial=WAN22_SPATIAL_COMPRESSION, channels=WAN22_LATENT_CHANNELS)
    return layout(frames, height, width)
