"""CLIPScore: image-text cosine similarity of a CLIP dual encoder.

``formula`` picks the published variant of ``c = cos(image_embedding, text_embedding)``:

* ``"hessel"`` (default, Hessel et al. 2021): ``2.5 * max(c, 0)``;
* ``"torchmetrics"``: ``max(100 * c, 0)``;
* ``"cos"`` (Pref-GRPO): ``c``;
* ``"flow_grpo"`` (Flow-GRPO's ``clip_score``): ``logit_scale.exp() * c / 30`` (the CLIP logit over 30; may
  be negative; about 0.6-1.1 with ``openai/clip-vit-large-patch14``, whose logit scale is 100).

Default weights ``openai/clip-vit-large-patch14`` (torchmetrics' and Flow-GRPO's default; Hessel et al. used
ViT-B/32: pass ``model=openai/clip-vit-base-patch32``). Truncation to 77 tokens as PickScore.

Preprocessing (``preprocess``): with ``"reference"`` (default) each formula gets its reference's:

* ``hessel`` / ``torchmetrics`` / ``cos``: the model's own image processor as run on uint8 PIL images (uint8
  rounding, Pillow bicubic resize of the shortest side, centre crop at ``(H - h) // 2``), as PickScore;
* ``flow_grpo``: Flow-GRPO's torchvision transform of the float images: ``Resize(shortest_edge)`` with its
  tensor default (bilinear, antialiased, no uint8 rounding), ``CenterCrop`` (offset rounded half to even),
  ``Normalize``. ``"fast"`` is the same pipeline for this formula.

``"fast"`` (other formulas): one bicubic torch resize of the float batch. Details: ``cos``.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from flowrl.reward_models.base import RewardError, RewardOutput, check_choice
from flowrl.reward_models.loading import load_pretrained
from flowrl.reward_models.pickscore import PickScoreReward
from flowrl.reward_models.preprocess import (
    PIL_BILINEAR,
    PREPROCESS_MODES,
    ImageTransform,
    PreprocessMode,
    processor_geometry,
)

CLIP_L14 = "openai/clip-vit-large-patch14"
Formula = Literal["hessel", "torchmetrics", "cos", "flow_grpo"]
FORMULAS = ("hessel", "torchmetrics", "cos", "flow_grpo")
HESSEL_W = 2.5
FLOW_GRPO_DIVISOR = 30.0  # Flow-GRPO's clip_score: logits_per_image / 30


def clip_score(cos: torch.Tensor, formula: str, logit_scale: float | torch.Tensor = 100.0) -> torch.Tensor:
    """Map cosine similarities (B,) to the chosen CLIPScore variant (see the module docstring).

    ``logit_scale`` is the model's ``logit_scale.exp()`` (used by ``"flow_grpo"`` only).
    """
    if formula == "hessel":
        return HESSEL_W * cos.clamp(min=0)
    if formula == "torchmetrics":
        return (100 * cos).clamp(min=0)
    if formula == "cos":
        return cos
    if formula == "flow_grpo":
        return torch.as_tensor(logit_scale, dtype=cos.dtype) * cos / FLOW_GRPO_DIVISOR
    raise RewardError(f"clipscore: formula={formula!r}; allowed: {', '.join(FORMULAS)}")


class ClipScoreReward(PickScoreReward):
    """CLIPScore with a transformers ``CLIPModel``; ``from_components`` as ``PickScoreReward``."""

    name = "clipscore"

    def __init__(
        self,
        model: str = CLIP_L14,
        processor: str | None = None,
        formula: Formula = "hessel",
        device: str | torch.device | None = None,
        dtype: torch.dtype = torch.float32,
        preprocess: PreprocessMode = "reference",
    ):
        from transformers import AutoProcessor, CLIPModel

        clip_score(torch.zeros(1), formula)  # validate before loading anything
        check_choice(self.name, "preprocess", preprocess, PREPROCESS_MODES)
        self.formula = formula
        self._setup(
            load_pretrained(CLIPModel, model, self.name, "model"),
            load_pretrained(AutoProcessor, processor or model, self.name, "processor"),
            device,
            dtype,
            preprocess,
        )

    @classmethod
    def from_components(
        cls,
        model,
        processor,
        device=None,
        dtype=torch.float32,
        formula: Formula = "hessel",
        preprocess: PreprocessMode = "reference",
    ):
        clip_score(torch.zeros(1), formula)
        reward = cls.__new__(cls)
        reward.formula = formula
        reward._setup(model, processor, device, dtype, preprocess)
        return reward

    def _transform(self, image_processor: Any, preprocess: PreprocessMode) -> ImageTransform:
        if self.formula != "flow_grpo":
            return super()._transform(image_processor, preprocess)
        geometry = processor_geometry(image_processor, crop_rounding="round")
        geometry = type(geometry)(**{**geometry.__dict__, "resample": PIL_BILINEAR})  # T.Resize's default
        mean, std = image_processor.image_mean, image_processor.image_std
        return ImageTransform(geometry, mean, std, preprocess, self.name, quantise=False)

    @property
    def score_range(self) -> tuple[float | None, float | None]:
        ranges = {
            "hessel": (0.0, HESSEL_W),
            "torchmetrics": (0.0, 100.0),
            "cos": (-1.0, 1.0),
            "flow_grpo": (None, None),
        }
        return ranges[self.formula]

    @torch.no_grad()
    def __call__(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        if media.ndim != 4 or media.shape[1] != 3 or media.shape[0] != len(prompts):
            raise RewardError(
                f"clipscore: expects images (B, 3, H, W) and B prompts, got {tuple(media.shape)} and {len(prompts)}"
            )
        image, text = self.embed(media, prompts)  # (B, D) each, unit norm
        cos = (image * text).sum(dim=-1).cpu()
        scale = self.model.logit_scale.exp().float().cpu()
        return RewardOutput(scores=clip_score(cos, self.formula, scale), details={"cos": cos})

    def score_grad(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> torch.Tensor:
        """The score (B,) with autograd back to ``media``, on its device; preprocessed in torch."""
        image, text = self.embed_pixels(self.grad_transform(media.to(self.device)), prompts)
        cos = (image * text).sum(dim=-1)
        return clip_score(cos, self.formula, self.model.logit_scale.exp().float()).to(media.device)
