"""LAION aesthetic predictor v2 (the "improved aesthetic predictor"), as Flow-GRPO's ``aesthetic`` reward.

    score = MLP( e / |e| ),   e = CLIP ViT-L/14 image embedding (projection output, 768-d)

The MLP is 768-1024-128-64-16-1 (dropouts between the first four linears, no activations), trained on
SAC + LOGOS + AVA ratings with an MSE loss; scores sit on the 1-10 rating scale (generated images score
about 4.5-7). Images go through CLIP's preprocessing (bicubic shortest-edge 224, centre crop at
``(H - h) // 2``, CLIP mean/std): with ``preprocess="reference"`` (default) as Flow-GRPO's scorer, which
rounds to uint8 and hands the images to ``CLIPProcessor`` (Pillow's resize); ``"fast"``: one torch resize.

Weights: the CLIP tower from ``openai/clip-vit-large-patch14`` (hub id or local folder) and the MLP file
``sac+logos+ava1-l14-linearMSE.pth`` (a local path, or ``"hub_repo::filename"``; the default names trl's
copy used by its DDPO example, the same 768-1024-128-64-16-1 LAION MLP that Flow-GRPO bundles; a file of
another layout is refused by the strict load).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from flowrl.reward_models.base import RewardError, RewardOutput, check_choice
from flowrl.reward_models.loading import load_into, load_pretrained, load_state_dict, pick_device, resolve_file
from flowrl.reward_models.preprocess import PREPROCESS_MODES, PreprocessMode, processor_transform

CLIP_L14 = "openai/clip-vit-large-patch14"
DEFAULT_PREDICTOR = "trl-lib/ddpo-aesthetic-predictor::aesthetic-model.pth"


class PreferenceMLP(nn.Module):
    """The 5-linear head shared by the LAION aesthetic predictor and ImageReward.

    Layer indices match the released state dicts (``layers.0``, ``layers.2``, ``layers.4``, ``layers.6``,
    ``layers.7``): Linear(d, 1024), Dropout(0.2), Linear(1024, 128), Dropout(0.2), Linear(128, 64),
    Dropout(0.1), Linear(64, 16), Linear(16, 1). No activation functions, as released.
    """

    def __init__(self, input_size: int = 768):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(input_size, 1024),
            nn.Dropout(0.2),
            nn.Linear(1024, 128),
            nn.Dropout(0.2),
            nn.Linear(128, 64),
            nn.Dropout(0.1),
            nn.Linear(64, 16),
            nn.Linear(16, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, d) -> (B,)
        return self.layers(x).squeeze(-1)


class AestheticReward:
    """LAION aesthetic score of each image (the prompt is not used). Details: none."""

    name = "aesthetic"
    score_range = (None, None)  # about 1-10 with the real weights; unbounded in principle

    def __init__(
        self,
        clip: str = CLIP_L14,
        predictor: str = DEFAULT_PREDICTOR,
        device: str | torch.device | None = None,
        dtype: torch.dtype = torch.float32,
        preprocess: PreprocessMode = "reference",
    ):
        from transformers import CLIPImageProcessor, CLIPModel

        check_choice(self.name, "preprocess", preprocess, PREPROCESS_MODES)  # before loading anything

        # the whole CLIPModel, as Flow-GRPO: its projection_dim is the one the checkpoint was saved with
        vision = load_pretrained(CLIPModel, clip, self.name, "CLIP model")
        processor = load_pretrained(CLIPImageProcessor, clip, self.name, "CLIP image processor")
        mlp = PreferenceMLP(vision.config.projection_dim)
        load_into(mlp, load_state_dict(resolve_file(predictor, self.name, "MLP"), self.name), self.name, "MLP")
        self._setup(vision, processor, mlp, device, dtype, preprocess)

    @classmethod
    def from_components(
        cls,
        vision: Any,
        image_processor: Any,
        mlp: nn.Module,
        device=None,
        dtype=torch.float32,
        preprocess: PreprocessMode = "reference",
    ):
        """From a ready ``CLIPModel`` (or anything with ``get_image_features``), its image processor and an MLP."""
        reward = cls.__new__(cls)
        reward._setup(vision, image_processor, mlp, device, dtype, preprocess)
        return reward

    def _setup(self, vision: Any, image_processor: Any, mlp: nn.Module, device, dtype, preprocess="reference") -> None:
        self.device, self.dtype = pick_device(device), dtype
        self.vision = vision.to(device=self.device, dtype=dtype).eval().requires_grad_(False)
        self.mlp = mlp.to(device=self.device, dtype=torch.float32).eval().requires_grad_(False)
        self.preprocess = preprocess
        self.transform = processor_transform(image_processor, preprocess, self.name)
        self.grad_transform = processor_transform(image_processor, "fast", self.name)  # in torch: ``score_grad``

    @torch.no_grad()
    def embed(self, media: torch.Tensor) -> torch.Tensor:
        """L2-normalised CLIP image embeddings (B, D), float32."""
        return self.embed_pixels(self.transform(media.to(self.device)))

    def embed_pixels(self, pixels: torch.Tensor) -> torch.Tensor:
        """``embed`` of preprocessed pixels (B, 3, 224, 224), with grad when grad is on."""
        features = self.vision.get_image_features(pixel_values=pixels.to(self.dtype))
        features = features if isinstance(features, torch.Tensor) else features.pooler_output
        return F.normalize(features.float(), dim=-1)

    @torch.no_grad()
    def __call__(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        if media.ndim != 4 or media.shape[1] != 3:
            raise RewardError(f"aesthetic: expects images (B, 3, H, W), got {tuple(media.shape)}")
        return RewardOutput(scores=self.mlp(self.embed(media)).cpu())

    def score_grad(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> torch.Tensor:
        """The score (B,) with autograd back to ``media``, on its device; preprocessed in torch."""
        return self.mlp(self.embed_pixels(self.grad_transform(media.to(self.device)))).to(media.device)
