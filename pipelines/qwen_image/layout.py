"""Qwen-Image's latent layout: the 16-channel VAE latent ``(16, H/8, W/8)`` packed into 2x2 patches, i.e.
``((H/16)(W/16), 64)`` tokens (as FLUX packs them), with the resolution-dependent shift ``mu`` of its schedule
(exponential time shift, ``max_image_seq_len`` 8192, terminal sigma stretched to 0.02). Pure functions of the
resolution (and the model's factors), read by the adapter, the tiny builder and the estimate; the math every
Qwen-Image family shares is in ``flowrl.pipelines.kit.qwen_image``."""

from __future__ import annotations

from flowrl.pipelines.kit.layout import Layout, packed_layout
from flowrl.pipelines.kit.qwen_image import (
    QWEN_LATENT_CHANNELS,
    QWEN_SCHEDULER_CONFIG,
    QWEN_VAE_SCALE_FACTOR,
    image_seq_len,
    img_shape,
    latent_shape,
    mu_of,
)

__all__ = [
    "QWEN_LATENT_CHANNELS",
    "QWEN_SCHEDULER_CONFIG",
    "QWEN_VAE_SCALE_FACTOR",
    "for_model",
    "image_seq_len",
    "img_shape",
    "latent_shape",
    "layout",
    "mu_of",
]


def layout(
    height: int, width: int, *, vae_scale_factor: int = QWEN_VAE_SCALE_FACTOR, channels: int = QWEN_LATENT_CHANNELS
) -> Layout:
    """The packed latent (``kit.layout.packed_layout``)."""
    return packed_layout(height, width, vae_scale_factor, channels)


def for_model(model_cfg) -> Layout:
    """The layout of a ``ModelConfig`` (the tiny Qwen-Image keeps the real VAE factor and channels)."""
    height, width = model_cfg.size
    return layout(height, width)
