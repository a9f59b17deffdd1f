"""PickScore (Kirstain et al., 2023): a CLIP ViT-H/14 fine-tuned on Pick-a-Pic preferences.

    score = logit_scale.exp() * cos(image_embedding, text_embedding) / 26

(the raw PickScore divided by 26, Flow-GRPO's convention; raw values are about 18-24). Prompts are
tokenised with truncation to 77 tokens.

Preprocessing follows the processor's config (bicubic resize of the shortest edge, centre crop at
``(H - h) // 2``, CLIP mean/std). ``preprocess="reference"`` (default) does it as Flow-GRPO's scorer, which
hands uint8 PIL images to ``CLIPProcessor``: uint8 rounding and Pillow's resize (``preprocess.py``);
``preprocess="fast"`` resizes the float batch once in torch.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F

from flowrl.reward_models.base import RewardError, RewardOutput, check_choice
from flowrl.reward_models.preprocess import PREPROCESS_MODES, ImageTransform, PreprocessMode, processor_transform

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


class ClipImageTransform(ImageTransform):
    """The fast torch path following a processor's config: ``processor_transform(processor, "fast")``."""

    def __init__(self, image_processor: Any, reward: str = "pickscore"):
        fast = processor_transform(image_processor, "fast", reward)
        super().__init__(fast.geometry, fast.mean.flatten().tolist(), fast.std.flatten().tolist(), "fast", reward)


class PickScoreReward:
    """PickScore as a reward: ``logit_scale.exp() * cos(img, txt) / 26``. Details: ``raw`` (undivided)."""

    name = "pickscore"

    def __init__(
        self,
        model: str = PICKSCORE_MODEL,
        processor: str = PICKSCORE_PROCESSOR,
        device: str | torch.device | None = None,
        dtype: torch.dtype = torch.float32,
        preprocess: PreprocessMode = "reference",
    ):
        """``preprocess``: ``"reference"`` (uint8 + Pillow, as Flow-GRPO) or ``"fast"`` (one torch resize)."""
        from transformers import AutoProcessor, CLIPModel

        check_choice(self.name, "preprocess", preprocess, PREPROCESS_MODES)  # before loading anything
        model_, processor_ = _load(CLIPModel, model, "model"), _load(AutoProcessor, processor, "processor")
        self._setup(model_, processor_, device, dtype, preprocess)

    @classmethod
    def from_components(
        cls,
        model: Any,
        processor: Any,
        device: str | torch.device | None = None,
        dtype: torch.dtype = torch.float32,
        preprocess: PreprocessMode = "reference",
    ) -> PickScoreReward:
        """Build from a ready ``CLIPModel`` and a processor with ``image_processor`` and ``tokenizer``."""
        reward = cls.__new__(cls)
        reward._setup(model, processor, device, dtype, preprocess)
        return reward

    def _setup(
        self,
        model: Any,
        processor: Any,
        device: str | torch.device | None,
        dtype: torch.dtype,
        preprocess: PreprocessMode = "reference",
    ) -> None:
        check_choice(self.name, "preprocess", preprocess, PREPROCESS_MODES)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = dtype
        self.model = model.to(device=self.device, dtype=dtype).eval().requires_grad_(False)
        self.tokenizer = processor.tokenizer
        self.preprocess = preprocess
        self.transform = self._transform(processor.image_processor, preprocess)
        self.grad_transform = self._transform(processor.image_processor, "fast")  # in torch: ``score_grad``
        max_positions = getattr(model.config.text_config, "max_position_embeddings", MAX_TEXT_TOKENS)
        self.max_tokens = min(MAX_TEXT_TOKENS, max_positions)

    def _transform(self, image_processor: Any, preprocess: PreprocessMode) -> ImageTransform:
        return processor_transform(image_processor, preprocess, self.name)

    @torch.no_grad()
    def embed(self, media: torch.Tensor, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """L2-normalised image and text embeddings, (B, D) each, float32."""
        return self.embed_pixels(self.transform(media.to(self.device)), prompts)

    def embed_pixels(self, pixels: torch.Tensor, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """``embed`` of preprocessed pixels (B, 3, h, w), with grad when grad is on."""
        pixels = pixels.to(self.dtype)
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

    def score_grad(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> torch.Tensor:
        """The score (B,) with autograd back to ``media`` (``flowrl.reward_models.differentiable``), on its device;
        preprocessed in torch (``preprocess="fast"``'s path) whatever ``preprocess`` says."""
        image, text = self.embed_pixels(self.grad_transform(media.to(self.device)), prompts)
        raw = self.model.logit_scale.exp().float() * (image * text).sum(dim=-1)
        return (raw / SCORE_DIVISOR).to(media.device)
