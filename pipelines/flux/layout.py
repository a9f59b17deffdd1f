"""FLUX.1's latent layout: the 16-channel VAE latent ``(16, H/8, W/8)`` packed into 2x2 patches, i.e.
``((H/16)(W/16), 64)`` tokens, with the resolution-dependent shift ``mu`` of its schedule. Pure functions of the
resolution (and the model's factors), read by the adapter, the tiny builder and the estimate; the FLUX.1 families
share them (``flowrl.pipelines.kit.flux1``)."""

from __future__ import annotations

from flowrl.pipelines.kit.flux1 import (
    FLUX_LATENT_CHANNELS,
    FLUX_SCHEDULER_CONFIG,
    FLUX_VAE_SCALE_FACTOR,
    flux_image_seq_len,
    flux_mu,
    latent_shape,
    mu_of,
)
from flowrl.pipelines.kit.layout import Layout, packed_layout

__all__ = [
    "FLUX_LATENT_CHANNELS",
    "FLUX_SCHEDULER_CONFIG",
    "FLUX_VAE_SCALE_FACTOR",
    "flux_image_seq_len",
    "flux_mu",
    "for_model",
    "latent_shape",
    "layout",
    "mu_of",
]


def layout(
    height: int, width: int, *, vae_scale_factor: int = FLUX_VAE_SCALE_FACTOR, channels: int = FLUX_LATENT_CHANNELS
) -> Layout:
    """The packed latent (``kit.layout.packed_layout``)."""
    return packed_layout(height, width, vae_scale_factor, channels)


def for_model(model_cfg) -> Layout:
    """The layout of a ``ModelConfig`` (the tiny FLUX.1-dev keeps the real VAE factor and channels)."""
    height, width = model_cfg.size
    return layout(height, width)
