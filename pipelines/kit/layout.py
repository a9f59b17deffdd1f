"""``Layout``: what one sample occupies, the shape every family's ``layout`` module computes from the
resolution, frames or duration (and the model's compression factors), once for the adapter, the tiny builder
and the estimate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """One sample's latent, batch dimension left out: a shape, or a mapping of modality -> shape (LTX-2);
    ``tokens``: the length of the transformer's own sequence for it (image / video / audio tokens, all
    modalities together)."""

    latent: tuple[int, ...] | Mapping[str, tuple[int, ...]]
    tokens: int


def packed_tokens(height: int, width: int, vae_scale_factor: int) -> int:
    """Tokens of a latent packed into 2x2 patches (FLUX.1, Qwen-Image): one per patch of the (H/f, W/f) VAE
    latent."""
    return (height // (vae_scale_factor * 2)) * (width // (vae_scale_factor * 2))


def packed_layout(height: int, width: int, vae_scale_factor: int, channels: int) -> Layout:
    """One sample's packed latent ``(tokens, 4 x latent channels)``; its tokens are the transformer's image tokens
    (patch 1 on the packed layout)."""
    shape = (packed_tokens(height, width, vae_scale_factor), channels * 4)
    return Layout(shape, shape[0])


# diffusers' fallbacks where a scheduler config lacks a bound of the shift: FLUX.1's and Qwen-Image's pipelines
SHIFT_FALLBACK = {"base_image_seq_len": 256, "max_image_seq_len": 4096, "base_shift": 0.5, "max_shift": 1.15}


def dynamic_shift(tokens: int, scheduler_config: Mapping, fallback: Mapping = SHIFT_FALLBACK) -> float:
    """The schedule's shift ``mu`` for ``tokens`` as the FLUX.1, Qwen-Image and LTX-2 pipelines compute it:
    diffusers' ``calculate_shift`` (one function in the three), a line from ``base_shift`` at
    ``base_image_seq_len`` tokens to ``max_shift`` at ``max_image_seq_len``, each bound the scheduler config's,
    else the pipeline's ``fallback``."""
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift

    bounds = ("base_image_seq_len", "max_image_seq_len", "base_shift", "max_shift")
    return calculate_shift(tokens, *(scheduler_config.get(key, fallback[key]) for key in bounds))
