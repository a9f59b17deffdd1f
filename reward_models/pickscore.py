"""PickScore (Kirstain et al., 2023): a CLIP ViT-H/14 fine-tuned on Pick-a-Pic preferences.

    score = logit_scale.exp() * cos(image_embedding, text_embedding) / 26

(the raw PickScore divided by 26, Flow-GRPO's convention; raw values are about 18-24). Images are
preprocessed in torch from the float tensor, following the processor's config: bicubic resize of the
shortest edge, centre crop, CLIP mean/std. Prompts are tokenised with truncation to 77 tokens.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F
from flowrl.reward_models.base import RewardError, RewardOutput

logger = logging.getLogger(__name__)

PICKSCORE_MODEL = "yuvalkirstain/PickScore_v1"
PICKSCORE_PROCESSOR = "laion/CLIP-ViT-H-14-laion2B-s32B-b79K"
SCORE_DIVISOR = 26.0  # Flow-GRPO's normalisation of the raw PickScore
MAX_TEXT_TOKENS = 77


def _load(loader: Any, source: str, what: str) -> Any:
    try:
        return loader.from_pretrained(source)
    except (OSError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RewardError(
            f"pickscore: cannot load the {what} {source!r} ({reason}); download it first "
            f"(`hf download {source}` where the hub is reachable) or pass a local folder"
        ) from exc


def _features(output: Any) -> torch.Tensor:
    """``get_*_features`` returns a tensor (transformers 4) or an output with ``pooler_output`` (5)."""
    return output if isinstance(output, torch.Tensor) else output.pooler_output


def _size_of(size: Any, key: str) -> int | None:
    return None if size is None else size.get(key)


class ClipImageTransform:
    """Float images (B, 3, H, W) in [0, 1] -> CLIP pixel values, as the processor's config says."""

    def __init__(self, image_processor: Any):
        size = getattr(image_processor, "size", None)
        crop = getattr(image_processor, "crop_size", None) if getattr(image_processor, "do_center_crop", True) else None
        self.shortest_edge = _size_of(size, "shortest_edge")
        self.resize_hw = (_size_of(size, "height"), _size_of(size, "width"))
        self.crop_hw = (_size_of(crop, "height"), _size_of(crop, "width"))
        self.mean = torch.tensor(image_processor.image_mean, dtype=torch.float32).view(1, 3, 1, 1)
        self.std = torch.tensor(image_processor.image_std, dtype=torch.float32).view(1, 3, 1, 1)

    def _resize(self, images: torch.Tensor) -> torch.Tensor:
        height, width = images.shape[-2:]
        if self.shortest_edge is not None:
            short, long = sorted((height, width))
            long_out = int(self.shortest_edge * long / short)  # as transformers' get_resize_output_image_size
            out_hw = (self.shortest_edge, long_out) if height <= width else (long_out, self.shortest_edge)
        elif None not in self.resize_hw:
            out_hw = self.resize_hw
        else:
            return images
        if tuple(out_hw) == (height, width):
            return images
        resized = F.interpolate(images, size=out_hw, mode="bicubic", align_corners=False, antialias=True)
        return resized.clamp(0, 1)

    def _center_crop(self, images: torch.Tensor) -> torch.Tensor:
        crop_h, crop_w = self.crop_hw
        if crop_h is None or crop_w is None:
            return images
        height, width = images.shape[-2:]
        if crop_h > height or crop_w > width:
            raise RewardError(f"pickscore: image {height}x{width} is smaller than the crop {crop_h}x{crop_w}")
        top, left = (height - crop_h) // 2, (width - crop_w) // 2
        return images[..., top : top + crop_h, left : left + crop_w]

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        images = self._center_crop(self._resize(images.float()))  # (B, 3, h, w)
        return (images - self.mean.to(images.device)) / self.std.to(images.device)


class PickScoreReward:
    """PickScore as a reward: ``logit_scale.exp() * cos(img, txt) / 26``. Details: ``raw`` (undivided)."""

    name = "pickscore"

    def __init__(
        self,
        model: str = PICKSCORE_MODEL,
        processor: str = PICKSCORE_PROCESSOR,
        device: str | torch.device | None = None,
        dtype: torch.dtype = torch.float32,
    ):
        from transformers import AutoProcessor, CLIPModel

        self._setup(_load(CLIPModel, model, "model"), _load(AutoProcessor, processor, "processor"), device, dtype)

    @classmethod
    def from_components(
        cls,
        model: Any,
        processor: Any,
        device: str | torch.device | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> PickScoreReward:
        """Build from a ready ``CLIPModel`` and a processor with ``image_processor`` and ``tokenizer``."""
        reward = cls.__new__(cls)
        reward._setup(model, processor, device, dtype)
        return reward

    def _setup(self, model: Any, processor: Any, device: str | torch.device | None, dtype: torch.dtype) -> None:
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = dtype
        self.model = model.to(device=self.device, dtype=dtype).eval().requires_grad_(False)
        self.tokenizer = processor.tokenizer
        self.transform = ClipImageTransform(processor.image_processor)
        max_positions = getattr(model.config.text_config, "max_position_embeddings", MAX_TEXT_TOKENS)
        self.max_tokens = min(MAX_TEXT_TOKENS, max_positions)

    @torch.no_grad()
    def embed(self, media: torch.Tensor, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """L2-normalised image and text embeddings, (B, D) each, float32."""
        pixels = self.transform(media.to(self.device)).to(self.dtype)  # (B, 3, h, w)
        tokens = self.tokenizer(
            prompts, padding=True, truncation=True, max_length=self.max_tokens, return_tensors="pt"
        ).to(self.device)
        image = _features(self.model.get_image_features(pixel_values=pixels)).float()
        text = _features(
            self.model.get_text_features(input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"])
        ).float()
        return F.normalize(image, dim=-1), F.normalize(text, dim=-1)

    @torch.no_grad()
    def __call__(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        if media.ndim != 4 or media.shape[1] != 3 or media.shape[0] != len(prompts):
            raise RewardError(
                f"pickscore: expects images (B, 3, H, W) and B prompts, got {tuple(media.shape)} and {len(prompts)}"
            )
        image, text = self.embed(media, prompts)  # (B, D), (B, D)
        raw = self.model.logit_scale.exp().float() * (image * text).sum(dim=-1)  # (B,)
        raw = raw.cpu()
        return RewardOutput(scores=raw / SCORE_DIVISOR, details={"raw": raw})
