"""Image preprocessing of the CLIP-family rewards: the reference pipelines and a fast torch path.

Every transform maps float images ``(B, 3, H, W)`` in ``[0, 1]`` to normalised pixel values ``(B, 3, h, w)``
on the images' device. Two things set one apart: its *geometry* (how the image is resized, cropped or
padded; the same in both modes) and its *mode*:

* ``"reference"`` (the default of every learned reward) does what the reward's reference scorer does with
  the images it is handed: round to uint8 (``clip(round(255 x), 0, 255)``, as Flow-GRPO converts its float
  images before calling the scorer), resize with Pillow (which works in uint8, rounding and clipping between
  its horizontal and vertical passes), crop or pad, divide by 255, normalise;
  Some reference scorers resize in torch instead (``resampler="torch"``): HPSv2's evaluation transform
  converts the uint8 image to float first (``ToTensor``) and resizes that tensor with torchvision
  (``F.interpolate(antialias=True)``, bicubic values left unclamped, so they may leave [0, 1]); Flow-GRPO's
  CLIPScore resizes its float images without any uint8 rounding (``quantise=False``);
* ``"fast"`` resizes the float batch once on its device with ``F.interpolate(antialias=True)`` (no uint8
  rounding, no Pillow, bicubic clamped to [0, 1]); same geometry, slightly different pixel values (the
  measured score gap is in docs/rewards.md).

Geometries (``Geometry``):

* ``"shortest"``: the shortest side to ``edge`` with the other side ``int(edge * long / short)`` (as both
  transformers' CLIP processor and torchvision's ``Resize(int)`` compute it), then a centre crop whose offset
  is ``(H - h) // 2`` (``crop_rounding="floor"``, transformers' processors) or ``round((H - h) / 2)`` with
  Python's half-to-even rounding (``"round"``, torchvision's ``CenterCrop``);
* ``"longest"``: the longest side to ``edge`` with each side ``round(side * edge / longest)``, then zero
  padding to ``edge x edge``, ``pad // 2`` before and the rest after (HPSv2's ``ResizeMaxSize``); the padding
  is black pixels, i.e. it is applied before normalisation;
* ``"fixed"``: both sides resized to ``size_hw`` (processors whose ``size`` has ``height`` and ``width``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F

from flowrl.reward_models.base import RewardError, check_choice, images_to_uint8

PreprocessMode = Literal["reference", "fast"]
PREPROCESS_MODES = ("reference", "fast")
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
# PIL resampling codes, as transformers' processor configs store them (``resample``)
PIL_BILINEAR, PIL_BICUBIC = 2, 3
_TORCH_MODES = {PIL_BILINEAR: "bilinear", PIL_BICUBIC: "bicubic"}


@dataclass(frozen=True)
class Geometry:
    """How an image is resized and cropped / padded (see the module docstring)."""

    resize: Literal["shortest", "longest", "fixed", "none"] = "shortest"
    edge: int | None = None  # shortest / longest side after the resize
    size_hw: tuple[int, int] | None = None  # "fixed"
    crop_hw: tuple[int, int] | None = None  # centre crop ("shortest", "fixed", "none") or padded canvas ("longest")
    crop_rounding: Literal["floor", "round"] = "floor"
    resample: int = PIL_BICUBIC  # PIL code: 2 bilinear, 3 bicubic

    def resized_hw(self, height: int, width: int) -> tuple[int, int]:
        if self.resize == "shortest":
            short, long = sorted((height, width))
            long_out = int(self.edge * long / short)
            return (self.edge, long_out) if height <= width else (long_out, self.edge)
        if self.resize == "longest":
            scale = self.edge / max(height, width)
            return round(height * scale), round(width * scale)
        if self.resize == "fixed":
            return self.size_hw
        return height, width

    def crop_box(self, height: int, width: int) -> tuple[int, int, int, int] | None:
        """(top, left, crop_h, crop_w) of the centre crop of an image of the resized size, or None."""
        if self.crop_hw is None or self.resize == "longest":
            return None
        crop_h, crop_w = self.crop_hw
        if crop_h > height or crop_w > width:
            raise RewardError(f"image {height}x{width} is smaller than the crop {crop_h}x{crop_w}")
        if self.crop_rounding == "round":
            return round((height - crop_h) / 2), round((width - crop_w) / 2), crop_h, crop_w
        return (height - crop_h) // 2, (width - crop_w) // 2, crop_h, crop_w

    def pad(self, height: int, width: int) -> tuple[int, int, int, int] | None:
        """(top, bottom, left, right) zero padding of the resized image ("longest" only), or None."""
        if self.resize != "longest":
            return None
        canvas_h, canvas_w = self.crop_hw or (self.edge, self.edge)
        pad_h, pad_w = canvas_h - height, canvas_w - width
        return pad_h // 2, pad_h - pad_h // 2, pad_w // 2, pad_w - pad_w // 2


class ImageTransform:
    """Float images (B, 3, H, W) in [0, 1] -> normalised pixels, by ``geometry`` in ``mode``.

    Reference mode: ``quantise`` rounds to uint8 first (``False`` keeps the float images, as Flow-GRPO's
    CLIPScore does); ``resampler`` "pillow" resizes the uint8 image with Pillow, "torch" resizes the float
    tensor as torchvision does for tensors (``F.interpolate(antialias=True)``), clamping bicubic overshoot
    to [0, 1] only when ``clamp``. Without ``quantise`` the resize is always torch's.
    """

    def __init__(
        self,
        geometry: Geometry,
        mean: Any = CLIP_MEAN,
        std: Any = CLIP_STD,
        mode: PreprocessMode = "reference",
        reward: str = "reward",
        quantise: bool = True,
        resampler: Literal["pillow", "torch"] = "pillow",
        clamp: bool = True,
    ):
        check_choice(reward, "preprocess", mode, PREPROCESS_MODES)
        check_choice(reward, "resampler", resampler, ("pillow", "torch"))
        torch_resize = mode == "fast" or not quantise or resampler == "torch"
        if torch_resize and geometry.resize != "none" and geometry.resample not in _TORCH_MODES:
            raise RewardError(
                f"{reward}: preprocess={mode!r} resizes in torch, which supports PIL resample 2 (bilinear) and "
                f"3 (bicubic), not {geometry.resample}; use preprocess='reference'"
            )
        self.geometry, self.mode, self.reward, self.quantise = geometry, mode, reward, quantise
        self.resampler, self.clamp = resampler, clamp
        self.mean = torch.tensor(list(mean), dtype=torch.float32).view(1, 3, 1, 1)
        self.std = torch.tensor(list(std), dtype=torch.float32).view(1, 3, 1, 1)

    def _normalise(self, images: torch.Tensor) -> torch.Tensor:
        return (images - self.mean.to(images.device)) / self.std.to(images.device)

    def _crop_error(self, exc: RewardError) -> RewardError:
        return RewardError(f"{self.reward}: {exc}")

    def _torch(self, images: torch.Tensor, clamp: bool = True) -> torch.Tensor:
        images = images.float()
        height, width = images.shape[-2:]
        out_hw = self.geometry.resized_hw(height, width)
        if tuple(out_hw) != (height, width):
            mode = _TORCH_MODES[self.geometry.resample]
            images = F.interpolate(images, size=out_hw, mode=mode, align_corners=False, antialias=True)
            if mode == "bicubic" and clamp:
                images = images.clamp(0, 1)  # bicubic overshoots; bilinear cannot
        try:
            box = self.geometry.crop_box(*out_hw)
        except RewardError as exc:
            raise self._crop_error(exc) from None
        if box is not None:
            top, left, crop_h, crop_w = box
            images = images[..., top : top + crop_h, left : left + crop_w]
        pad = self.geometry.pad(*out_hw)
        if pad is not None:
            top, bottom, left, right = pad
            images = F.pad(images, (left, right, top, bottom), value=0.0)
        return self._normalise(images)

    def _pillow(self, images: torch.Tensor) -> torch.Tensor:
        from PIL import Image

        out = []
        for pixels in images_to_uint8(self.reward, images):  # (H, W, 3) uint8 each
            height, width = pixels.shape[:2]
            out_h, out_w = self.geometry.resized_hw(height, width)
            if (out_h, out_w) != (height, width):
                pixels = np.asarray(Image.fromarray(pixels).resize((out_w, out_h), resample=self.geometry.resample))
            try:
                box = self.geometry.crop_box(out_h, out_w)
            except RewardError as exc:
                raise self._crop_error(exc) from None
            if box is not None:
                top, left, crop_h, crop_w = box
                pixels = pixels[top : top + crop_h, left : left + crop_w]
            pad = self.geometry.pad(out_h, out_w)
            if pad is not None:
                top, bottom, left, right = pad
                pixels = np.pad(pixels, ((top, bottom), (left, right), (0, 0)))
            out.append(np.ascontiguousarray(pixels))
        batch = torch.from_numpy(np.stack(out)).to(images.device)  # (B, h, w, 3) uint8
        return self._normalise(batch.permute(0, 3, 1, 2).float() / 255.0)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if images.ndim != 4 or images.shape[1] != 3:
            raise RewardError(f"{self.reward}: expects images (B, 3, H, W), got shape {tuple(images.shape)}")
        if self.mode == "fast":
            return self._torch(images)
        if not self.quantise:
            return self._torch(images, self.clamp)
        if self.resampler == "pillow":
            return self._pillow(images)
        pixels = (images.detach().float() * 255).round().clamp(0, 255) / 255.0  # the uint8 values, as floats
        return self._torch(pixels, self.clamp)


def _size_of(size: Any, key: str) -> int | None:
    if size is None:
        return None
    if isinstance(size, int):
        return size
    return size.get(key) if hasattr(size, "get") else getattr(size, key, None)


def processor_geometry(image_processor: Any, crop_rounding: Literal["floor", "round"] = "floor") -> Geometry:
    """The geometry a transformers CLIP image processor's config describes (its ``size``, ``crop_size``,
    ``do_resize``, ``do_center_crop`` and ``resample``); transformers crops at ``(H - h) // 2``."""
    size = getattr(image_processor, "size", None)
    resample = int(getattr(image_processor, "resample", PIL_BICUBIC) or PIL_BICUBIC)
    shortest = _size_of(size, "shortest_edge") if not isinstance(size, int) else size
    height, width = _size_of(size, "height"), _size_of(size, "width")
    if not getattr(image_processor, "do_resize", True):
        resize, edge, size_hw = "none", None, None
    elif shortest is not None:
        resize, edge, size_hw = "shortest", int(shortest), None
    elif height is not None and width is not None:
        resize, edge, size_hw = "fixed", None, (int(height), int(width))
    else:
        resize, edge, size_hw = "none", None, None
    crop = getattr(image_processor, "crop_size", None) if getattr(image_processor, "do_center_crop", True) else None
    crop_hw = None
    if crop is not None:
        crop_h, crop_w = (crop, crop) if isinstance(crop, int) else (_size_of(crop, "height"), _size_of(crop, "width"))
        crop_hw = (int(crop_h), int(crop_w)) if crop_h is not None and crop_w is not None else None
    return Geometry(resize, edge, size_hw, crop_hw, crop_rounding, resample)


def processor_transform(
    image_processor: Any,
    mode: PreprocessMode = "reference",
    reward: str = "reward",
    crop_rounding: Literal["floor", "round"] = "floor",
) -> ImageTransform:
    """``ImageTransform`` following a transformers CLIP image processor (reference: as its Pillow backend)."""
    geometry = processor_geometry(image_processor, crop_rounding)
    mean = getattr(image_processor, "image_mean", CLIP_MEAN)
    std = getattr(image_processor, "image_std", CLIP_STD)
    if not getattr(image_processor, "do_normalize", True):
        mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    return ImageTransform(geometry, mean, std, mode, reward)
