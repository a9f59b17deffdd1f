"""JPEG (in)compressibility rewards (DDPO; Flow-GRPO's ``jpeg_compressibility``).

Each image is encoded as JPEG at quality 95 with PIL; ``size_kB = bytes / 1000``.
compressibility = ``-size_kB / 500``; incompressibility = ``+size_kB / 500`` (flowrl's default).

The divisor 500 is Flow-GRPO's ``jpeg_compressibility`` (DDPO's rewards have none); Flow-GRPO's
``jpeg_incompressibility`` is the size in kB itself, which ``jpeg_incompressibility`` gives with
``raw_kb=True``. ``jpeg_compressibility`` is Flow-GRPO's as it stands.
"""

from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image

from flowrl.reward_models.base import RewardError, RewardOutput, check_type, images_to_uint8

JPEG_QUALITY = 95
KB_SCALE = 500.0  # Flow-GRPO's jpeg_compressibility divisor (DDPO's rewards have none)


def jpeg_size_kb(image: np.ndarray, quality: int = JPEG_QUALITY) -> float:
    """Size in kB (bytes / 1000) of one uint8 image (H, W, 3) encoded as JPEG at ``quality``."""
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    return buffer.tell() / 1000.0


def jpeg_sizes_kb(name: str, media: torch.Tensor, quality: int = JPEG_QUALITY) -> torch.Tensor:
    """JPEG sizes in kB of a batch of float images (B, 3, H, W) in [0, 1]; returns (B,) float32."""
    pixels = images_to_uint8(name, media)  # (B, H, W, 3)
    return torch.tensor([jpeg_size_kb(image, quality) for image in pixels], dtype=torch.float32)


class JpegCompressibility:
    """Reward small JPEG files: ``r = -size_kB / 500`` (quality 95, Flow-GRPO's). Details: ``size_kb``."""

    name = "jpeg_compressibility"
    sign = -1.0

    def __init__(self, quality: int = JPEG_QUALITY):
        check_type(self.name, "quality", quality, int)
        if not 1 <= quality <= 100:
            raise RewardError(f"{self.name}: quality={quality!r}; expected an integer from 1 to 100")
        self.quality, self.raw_kb = quality, False

    def __call__(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        sizes = jpeg_sizes_kb(self.name, media, self.quality)  # (B,)
        scale = 1.0 if self.raw_kb else KB_SCALE
        return RewardOutput(scores=self.sign * sizes / scale, details={"size_kb": sizes})


class JpegIncompressibility(JpegCompressibility):
    """Reward large JPEG files: ``r = +size_kB / 500``; ``raw_kb=True``: ``+size_kB`` (Flow-GRPO's). Quality 95."""

    name = "jpeg_incompressibility"
    sign = 1.0

    def __init__(self, quality: int = JPEG_QUALITY, raw_kb: bool = False):
        super().__init__(quality)
        check_type(self.name, "raw_kb", raw_kb, bool)
        self.raw_kb = raw_kb
