"""FLUX.1-Kontext's layout: FLUX.1's packed latent ``((H/16)(W/16), 64)`` is the state; the source image, resized
to the output size, adds as many packed tokens of its own to every transformer call (ids with a first coordinate
of 1). Pure functions, read by the adapter, the tiny builder and the estimate."""

from __future__ import annotations

from flowrl.pipelines.kit.flux1 import FLUX_LATENT_CHANNELS, FLUX_VAE_SCALE_FACTOR, latent_shape
from flowrl.pipelines.kit.layout import Layout


def source_tokens(height: int, width: int, vae_scale_factor: int = FLUX_VAE_SCALE_FACTOR) -> int:
    """The source image's packed tokens: it is encoded at the output size, so as many as the latent's."""
    return latent_shape(height, width, vae_scale_factor=vae_scale_factor)[0]


def layout(
    height: int, width: int, *, vae_scale_factor: int = FLUX_VAE_SCALE_FACTOR, channels: int = FLUX_LATENT_CHANNELS
) -> Layout:
    """The packed latent; the transformer's own tokens are its tokens and the source image's."""
    shape = latent_shape(height, width, vae_scale_factor=vae_scale_factor, channels=channels)
    return Layout(shape, shape[0] + source_tokens(height, width, vae_scale_factor))


def for_model(model_cfg) -> Layout:
    """The layout of a ``ModelConfig`` (the tiny FLUX.1-Kontext keeps the real VAE factor and channels)."""
    height, width = model_cfg.size
    return layout(height, width)
