"""Wan's latent layout: 5-D latents ``(16, 1 + (F-1)/4, H/8, W/8)`` (the causal VAE keeps the first frame and
compresses the rest 4x in time, 8x in space), no packing; the transformer patchifies them 1x2x2 into tokens.
Pure functions of frames and resolution (and the model's factors), read by the adapter, the tiny builder and the
estimate."""

from __future__ import annotations

from flowrl.pipelines.kit.layout import Layout

WAN_LATENT_CHANNELS = 16
WAN_SPATIAL_COMPRESSION = 8
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


def for_model(model_cfg) -> Layout:
    """The layout of a ``ModelConfig``: ``model.num_frames`` (default 81) at ``model.height`` x ``model.width``
    (the tiny models keep Wan's factors)."""
    height, width = model_cfg.size
    return layout(model_cfg.num_frames or DEFAULT_NUM_FRAMES, height, width)
