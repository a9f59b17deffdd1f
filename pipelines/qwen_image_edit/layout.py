"""Qwen-Image-Edit's latent layout: the generated image's packed tokens ``((H/16)(W/16), 64)``, as Qwen-Image's;
the source images' packed latents join the transformer's sequence after them (``source_tokens``), each at the
pipeline's VAE size (an area of 1024 x 1024 at the output's aspect ratio)."""

from __future__ import annotations

import math

from flowrl.pipelines.kit.layout import Layout
from flowrl.pipelines.kit.qwen_image import QWEN_VAE_SCALE_FACTOR, image_seq_len, latent_shape

VAE_AREA = 1024 * 1024  # QwenImageEditPipeline / QwenImageEditPlusPipeline: the source images' VAE size


def condition_size(height: int, width: int, area: int = VAE_AREA) -> tuple[int, int]:
    """(height, width) the pipelines resize a source image of this aspect ratio to: ``area`` pixels, sides
    rounded to multiples of 32 (their ``calculate_dimensions``)."""
    ratio = width / height
    w = math.sqrt(area * ratio)
    return round(w / ratio / 32) * 32, round(w / 32) * 32


def source_tokens(height: int, width: int, images: int = 1, area: int = VAE_AREA) -> int:
    """Packed tokens of ``images`` source images fitted to the output's aspect ratio at ``area`` pixels."""
    h, w = condition_size(height, width, area)
    return images * image_seq_len(h, w, QWEN_VAE_SCALE_FACTOR)


def for_model(model_cfg) -> Layout:
    """The generated latent, and the transformer's tokens with one source image."""
    height, width = model_cfg.size
    shape = latent_shape(height, width)
    area = getattr(model_cfg, "source_area", None) or VAE_AREA
    return Layout(shape, shape[0] + source_tokens(height, width, area=area))
