"""JPEG (in)compressibility rewards (DDPO; Flow-GRPO's ``jpeg_compressibility``).

Each image is encoded as JPEG at quality 95 with PIL; ``size_kB = bytes / 1000``.
compressibility = ``-size_kB / 500``; incompressibility = ``+size_kB / 500``.
"""

from __future__ import annotations

import io

import numpy as np
import torch
from flowrl.reward_models.base import RewardOutput, images_to_uint8
from PIL import Image

JPEG_QUALITY = 95
KB_SCALE = 500.0  # the DDPO / Flow-GRPO divisor


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
    """Reward small JPEG files: ``r = -size_kB / 500`` (quality 95). Details: ``size_kb``."""

    name = "jpeg_compressibility"
    sign = -1.0

    def __init__(self, quality: int = JPEG_QUALITY):
        self.quality = quality

    def __call__(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        sizes = jpeg_sizes_kb(self.name, media, self.quality)  # (B,)
        return RewardOutput(scores=self.sign * sizes / KB_SCALE, details={"size_kb": sizes})


class JpegIncompressibility(JpegCompressibility):
    """Reward large JPEG files: ``r = +size_kB / 500`` (quality 95). Details: ``size_kb``."""

    name = "jpeg_incompressibility"
    sign = 1.0
