"""Stable Audio 3's latent layout: 1-D latents ``(latent_dim, L)`` with ``L = ceil(duration * sample_rate /
downsampling_ratio)`` (the SAME autoencoder's patch x strides), as the pipeline rounds them; the DiT adds its
memory tokens. Pure functions of the duration (and the model's factors), read by the adapter, the tiny builder
and the estimate."""

from __future__ import annotations

import math

from flowrl.pipelines.kit.layout import Layout

DEFAULT_DURATION_S = 10.0  # StableAudio3Pipeline's default duration
# diffusers' AutoencoderSAME / StableAudio3DiTModel defaults (SAME-L: patch 256 x stride 16 = 4096 at 44.1 kHz)
SA3_SAMPLING_RATE = 44100
SA3_DOWNSAMPLING = 4096
SA3_LATENT_DIM = 256
SA3_MEMORY_TOKENS = 64
# Tiny SAME autoencoder: stereo, patch 4 x stride 4 = down-sampling 16, at a toy 256 Hz "sample rate"
SA3_TINY_SAMPLING_RATE = 256
SA3_TINY_LATENT_DIM = 8
SA3_TINY_DOWNSAMPLING = 16
SA3_TINY_MEMORY_TOKENS = 4
# model.path values that build an offline tiny pipeline -> ``build_tiny_stable_audio``'s keywords (distilled: the
# ping-pong scheduler)
TINY_PATHS = {"tiny": {"distilled": True}, "tiny-base": {"distilled": False}}


def stable_audio_latent_length(duration: float, sampling_rate: int, downsampling_ratio: int) -> int:
    """Latent frames for ``duration`` seconds, as ``StableAudio3Pipeline`` rounds them (up to a full frame)."""
    return math.ceil(duration * sampling_rate / downsampling_ratio)


def latent_shape(duration: float, sampling_rate: int, downsampling_ratio: int, latent_dim: int) -> tuple[int, int]:
    """One sample's latent ``(latent_dim, L)``."""
    return (latent_dim, stable_audio_latent_length(duration, sampling_rate, downsampling_ratio))


def layout(
    duration: float,
    sampling_rate: int,
    downsampling_ratio: int,
    latent_dim: int,
    *,
    patch_size: int = 1,
    memory_tokens: int = 0,
) -> Layout:
    """The latent and the DiT's tokens: ``L / patch`` plus its memory tokens."""
    shape = latent_shape(duration, sampling_rate, downsampling_ratio, latent_dim)
    return Layout(shape, shape[1] // patch_size + memory_tokens)


def for_model(model_cfg) -> Layout:
    """The layout of a ``ModelConfig``: ``model.duration_s`` seconds (default 10), the tiny SAME's factors for
    ``model.path: tiny`` / ``tiny-base``, SAME-L's otherwise."""
    duration = model_cfg.duration_s or DEFAULT_DURATION_S
    if model_cfg.path in TINY_PATHS:
        factors = (SA3_TINY_SAMPLING_RATE, SA3_TINY_DOWNSAMPLING, SA3_TINY_LATENT_DIM, SA3_TINY_MEMORY_TOKENS)
    else:
        factors = (SA3_SAMPLING_RATE, SA3_DOWNSAMPLING, SA3_LATENT_DIM, SA3_MEMORY_TOKENS)
    rate, ratio, dim, memory = factors
    return layout(duration, rate, ratio, dim, memory_tokens=memory)
