"""Source images of a prompt row (editing, image-to-video): an image file read to the tensor every family takes,
a content hash for the prompt cache, and the resize a family applies before encoding.

A source image is a float tensor ``(3, H, W)`` in [0, 1] on the CPU, at the file's own size: the adapter decides
the size it encodes (``fit``). Files are read with Pillow (any format it opens; alpha and palettes become RGB).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch


class SourceImageError(ValueError):
    """An image file that cannot be read; the message is one line naming it."""


def load_image(path: str | Path) -> torch.Tensor:
    """The image file at ``path`` as a float tensor (3, H, W) in [0, 1] (uint8 / 255), CPU; one line naming the
    file when it is missing or not an image."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    if path.is_dir():
        raise SourceImageError(f"source image {str(path)!r} is a folder, not an image")
    if not path.is_file():
        raise SourceImageError(f"source image {str(path)!r} does not exist")
    try:
        with Image.open(path) as opened:
            pixels = np.asarray(opened.convert("RGB"))
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise SourceImageError(
            f"source image {str(path)!r} cannot be read as an image ({type(exc).__name__})"
        ) from None
    return torch.from_numpy(pixels.copy()).permute(2, 0, 1).float() / 255.0  # (3, H, W)


def check_image(path: str | Path) -> tuple[int, int]:
    """(height, width) of the image file at ``path`` without decoding its pixels; one line naming a file that is
    missing or not an image (the check a run makes before any model loads)."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    if path.is_dir():
        raise SourceImageError(f"source image {str(path)!r} is a folder, not an image")
    if not path.is_file():
        raise SourceImageError(f"source image {str(path)!r} does not exist")
    try:
        with Image.open(path) as opened:
            opened.verify()
            width, height = opened.size
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise SourceImageError(
            f"source image {str(path)!r} cannot be read as an image ({type(exc).__name__})"
        ) from None
    return height, width


class ImageCache:
    """Source images read once and kept (least recently used evicted): a data folder's images are read again at
    every iteration that draws their row."""

    def __init__(self, capacity: int = 256):
        self.capacity = capacity
        self._images: OrderedDict[str, torch.Tensor] = OrderedDict()

    def __call__(self, paths: tuple[str, ...] | list[str]) -> list[torch.Tensor]:
        out = []
        for path in paths:
            if path not in self._images:
                self._images[path] = load_image(path)
            self._images.move_to_end(path)
            out.append(self._images[path])
        while len(self._images) > self.capacity:
            self._images.popitem(last=False)
        return out


def image_hash(image: torch.Tensor) -> str:
    """A content hash of one image tensor (its shape, dtype and bytes): two equal images share a cache row."""
    data = image.detach().to("cpu").contiguous()
    digest = hashlib.sha1(f"{tuple(data.shape)}:{data.dtype}".encode())
    digest.update(data.numpy().tobytes() if data.dtype != torch.bfloat16 else data.float().numpy().tobytes())
    return digest.hexdigest()[:20]


def images_key(images: list[torch.Tensor] | tuple[torch.Tensor, ...]) -> str:
    """One key for a row's source images (their hashes in order; "" for none)."""
    return "|".join(image_hash(i) for i in images)


def fit(image: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``image`` (3, H, W) in [0, 1] resized to (3, height, width): unchanged when it already has that size, else
    antialiased bicubic, clamped to [0, 1]."""
    if tuple(image.shape[-2:]) == (height, width):
        return image.float()
    resized = torch.nn.functional.interpolate(
        image[None].float(), size=(height, width), mode="bicubic", align_corners=False, antialias=True
    )
    return resized[0].clamp(0, 1)


def check_count(images: list | None, prompts: list[str], family: str, allowed: tuple[int, int]) -> None:
    """Refuse ``images`` (one list per prompt, or None) whose count a family does not take, in one line."""
    low, high = allowed
    if images is None:
        if low > 0:
            raise ValueError(f"{family} needs {low} source image(s) per prompt; none were given")
        return
    if len(images) != len(prompts):
        raise ValueError(f"{len(images)} source-image lists for {len(prompts)} prompts")
    for prompt, row in zip(prompts, images):
        if not low <= len(row) <= high:
            raise ValueError(f"{family} takes {low}..{high} source image(s) per prompt; {prompt!r:.60} has {len(row)}")
