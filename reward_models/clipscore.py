"""CLIPScore: image-text cosine similarity of a CLIP dual encoder.

``formula`` picks the published variant of ``c = cos(image_embedding, text_embedding)``:

* ``"hessel"`` (default, Hessel et al. 2021): ``2.5 * max(c, 0)``;
* ``"torchmetrics"``: ``max(100 * c, 0)``;
* ``"cos"`` (Pref-GRPO): ``c``.

Default weights ``openai/clip-vit-large-patch14`` (torchmetrics' default; Hessel et al. used ViT-B/32:
pass ``model=openai/clip-vit-base-patch32``). Preprocessing and truncation to 77 tokens as PickScore.
Details: ``cos``.
"""

from __future__ import annotations

import torch
from flowrl.reward_models.base import RewardError, RewardOutput
from flowrl.reward_models.loading import load_pretrained
from flowrl.reward_models.pickscore import PickScoreReward

CLIP_L14 = "openai/clip-vit-large-patch14"
FORMULAS = ("hessel", "torchmetrics", "cos")
HESSEL_W = 2.5


def clip_score(cos: torch.Tensor, formula: str) -> torch.Tensor:
    """Map cosine similarities (B,) to the chosen CLIPScore variant (see the module docstring)."""
    if formula == "hessel":
        return HESSEL_W * cos.clamp(min=0)
    if formula == "torchmetrics":
        return (100 * cos).clamp(min=0)
    if formula == "cos":
        return cos
    raise RewardError(f"clipscore: formula={formula!r}; allowed: {', '.join(FORMULAS)}")


class ClipScoreReward(PickScoreReward):
    """CLIPScore with a transformers ``CLIPModel``; ``from_components`` as ``PickScoreReward``."""

    name = "clipscore"

    def __init__(
        self,
        model: str = CLIP_L14,
        processor: str | None = None,
        formula: str = "hessel",
        device: str | torch.device | None = None,
        dtype: torch.dtype = torch.float32,
    ):
        from transformers import AutoProcessor, CLIPModel

        clip_score(torch.zeros(1), formula)  # validate before loading anything
        self.formula = formula
        self._setup(
            load_pretrained(CLIPModel, model, self.name, "model"),
            load_pretrained(AutoProcessor, processor or model, self.name, "processor"),
            device,
            dtype,
        )

    @classmethod
    def from_components(cls, model, processor, device=None, dtype=torch.float32, formula: str = "hessel"):
        clip_score(torch.zeros(1), formula)
        reward = super().from_components(model, processor, device, dtype)
        reward.formula = formula
        return reward

    @property
    def score_range(self) -> tuple[float | None, float | None]:
        return {"hessel": (0.0, HESSEL_W), "torchmetrics": (0.0, 100.0), "cos": (-1.0, 1.0)}[self.formula]

    @torch.no_grad()
    def __call__(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        if media.ndim != 4 or media.shape[1] != 3 or media.shape[0] != len(prompts):
            raise RewardError(
                f"clipscore: expects images (B, 3, H, W) and B prompts, got {tuple(media.shape)} and {len(prompts)}"
            )
        image, text = self.embed(media, prompts)  # (B, D) each, unit norm
        cos = (image * text).sum(dim=-1).cpu()
        return RewardOutput(scores=clip_score(cos, self.formula), details={"cos": cos})
