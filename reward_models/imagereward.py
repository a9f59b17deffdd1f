"""ImageReward (Xu et al., 2023): BLIP ViT-L image encoder + BERT-base text encoder with cross-attention + MLP.

    h      = text_encoder(prompt tokens, cross-attending to the image patch states)[:, 0]   ([CLS], 768-d)
    score  = (MLP(h) - 0.16717362830052426) / 1.0333394966054072

(the released normalisation to mean 0, std 1 on its test set; SD1.4 images fall 98% inside [-2, 2]).
Preprocessing: ImageReward's own transform (torchvision ``Resize(224, BICUBIC)`` of the shortest edge,
``CenterCrop(224)`` whose offset ``round((H - 224) / 2)`` rounds half to even, CLIP mean/std) applied to
PIL images: ``preprocess="reference"`` (default) rounds to uint8 and resizes with Pillow as it does,
``"fast"`` resizes the float batch in torch (same geometry); prompts are tokenised by BERT's uncased WordPiece, padded to ``max_length`` 35 with truncation.

The architecture is built from transformers' ``BlipVisionModel`` and ``BlipTextModel`` (the same modules
BLIP's original code defines) and the released ``ImageReward.pt`` is renamed into them
(``convert_imagereward_state_dict``). Weights: ``THUDM/ImageReward::ImageReward.pt`` and
``THUDM/ImageReward::med_config.json`` (text encoder config), tokenizer ``bert-base-uncased`` (BLIP adds
``[DEC]`` and ``[ENC]``, giving 30,524 ids); each may be a local path instead.
"""

from __future__ import annotations

import json
import re
from typing import Any

import torch
from torch import nn

from flowrl.reward_models.aesthetic import PreferenceMLP
from flowrl.reward_models.base import RewardError, RewardOutput, check_choice
from flowrl.reward_models.loading import load_into, load_pretrained, load_state_dict, pick_device, resolve_file
from flowrl.reward_models.preprocess import PIL_BICUBIC, PREPROCESS_MODES, Geometry, ImageTransform, PreprocessMode

IMAGEREWARD_CHECKPOINT = "THUDM/ImageReward::ImageReward.pt"
IMAGEREWARD_MED_CONFIG = "THUDM/ImageReward::med_config.json"
IMAGEREWARD_TOKENIZER = "bert-base-uncased"
REWARD_MEAN = 0.16717362830052426
REWARD_STD = 1.0333394966054072
MAX_TEXT_TOKENS = 35
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
IMAGE_SIZE = 224


def vision_config(**overrides: Any):
    """BLIP's ViT-L/16 at 224 px as a ``BlipVisionConfig`` (LayerNorm eps 1e-6 as BLIP's ViT)."""
    from transformers import BlipVisionConfig

    values = {
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "image_size": IMAGE_SIZE,
        "patch_size": 16,
        "layer_norm_eps": 1e-6,
        "hidden_act": "gelu",
    }
    return BlipVisionConfig(**{**values, **overrides})


def text_config(med_config: dict, encoder_hidden_size: int):
    """``BlipTextConfig`` from BLIP's ``med_config.json`` (a BERT config with cross-attention)."""
    from transformers import BlipTextConfig

    keys = (
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "max_position_embeddings",
        "layer_norm_eps",
        "hidden_act",
        "pad_token_id",
    )
    values = {k: med_config[k] for k in keys if k in med_config}
    return BlipTextConfig(**values, encoder_hidden_size=encoder_hidden_size, is_decoder=True)


class ImageRewardModel(nn.Module):
    """The three parts of ImageReward; ``forward`` returns the un-normalised MLP output (B,)."""

    def __init__(self, vision_cfg: Any, text_cfg: Any):
        super().__init__()
        from transformers import BlipTextModel, BlipVisionModel

        self.vision = BlipVisionModel(vision_cfg)
        self.text = BlipTextModel(text_cfg, add_pooling_layer=False)
        self.mlp = PreferenceMLP(text_cfg.hidden_size)

    def forward(self, pixels: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        image_states = self.vision(pixel_values=pixels).last_hidden_state  # (B, 1 + patches, Dv)
        image_mask = torch.ones(image_states.shape[:-1], dtype=torch.long, device=pixels.device)
        text = self.text(
            input_ids=input_ids,
            attention_mask=attention_mask,
            encoder_hidden_states=image_states,
            encoder_attention_mask=image_mask,
            is_decoder=False,  # bidirectional self-attention, as BLIP's text encoder
        ).last_hidden_state  # (B, L, Dt)
        return self.mlp(text[:, 0].float())  # (B,)


_VISION_RENAMES = [
    (r"^cls_token$", "embeddings.class_embedding"),
    (r"^pos_embed$", "embeddings.position_embedding"),
    (r"^patch_embed\.proj\.", "embeddings.patch_embedding."),
    (r"^blocks\.(\d+)\.norm1\.", r"encoder.layers.\1.layer_norm1."),
    (r"^blocks\.(\d+)\.norm2\.", r"encoder.layers.\1.layer_norm2."),
    (r"^blocks\.(\d+)\.attn\.qkv\.", r"encoder.layers.\1.self_attn.qkv."),
    (r"^blocks\.(\d+)\.attn\.proj\.", r"encoder.layers.\1.self_attn.projection."),
    (r"^blocks\.(\d+)\.mlp\.fc(\d)\.", r"encoder.layers.\1.mlp.fc\2."),
    (r"^norm\.", "post_layernorm."),
]


def convert_imagereward_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename a released ImageReward state dict (BLIP layout) to ``ImageRewardModel``'s keys.

    ``blip.visual_encoder.*`` (timm-style ViT) -> ``vision.*``; ``blip.text_encoder.*`` (BLIP's BERT, already
    named as transformers' BERT) -> ``text.*``; ``mlp.*`` kept. Buffers (``position_ids``) and BLIP parts the
    score does not use are dropped.
    """
    out = {}
    for key, value in state.items():
        if key.startswith("blip.visual_encoder."):
            name = key[len("blip.visual_encoder.") :]
            for pattern, replacement in _VISION_RENAMES:
                name = re.sub(pattern, replacement, name)
            out["vision." + name] = value
        elif key.startswith("blip.text_encoder."):
            name = key[len("blip.text_encoder.") :]
            if not name.endswith("position_ids") and not name.startswith("pooler."):
                out["text." + name] = value
        elif key.startswith("mlp."):
            out[key] = value
    return out


def imagereward_transform(size: int = IMAGE_SIZE, preprocess: PreprocessMode = "reference") -> ImageTransform:
    """ImageReward's transform: shortest side to ``size`` (bicubic), centre crop rounded as torchvision's."""
    geometry = Geometry("shortest", size, crop_hw=(size, size), crop_rounding="round", resample=PIL_BICUBIC)
    return ImageTransform(geometry, CLIP_MEAN, CLIP_STD, preprocess, "imagereward")


class ImageRewardReward:
    """ImageReward as a reward (normalised score). ``from_components`` takes a ready ``ImageRewardModel``."""

    name = "imagereward"
    score_range = (None, None)  # mostly [-2, 2]

    def __init__(
        self,
        checkpoint: str = IMAGEREWARD_CHECKPOINT,
        med_config: str = IMAGEREWARD_MED_CONFIG,
        tokenizer: str = IMAGEREWARD_TOKENIZER,
        device: str | torch.device | None = None,
        dtype: torch.dtype = torch.float32,
        vision_overrides: dict | None = None,
        preprocess: PreprocessMode = "reference",
    ):
        """``vision_overrides`` change the ViT-L config (only for other BLIP sizes, e.g. tiny test models)."""
        from transformers import AutoTokenizer

        check_choice(self.name, "preprocess", preprocess, PREPROCESS_MODES)  # before loading anything

        med = json.loads(resolve_file(med_config, self.name, "text config").read_text())
        vision_cfg = vision_config(**(vision_overrides or {}))
        model = ImageRewardModel(vision_cfg, text_config(med, vision_cfg.hidden_size))
        state = convert_imagereward_state_dict(
            load_state_dict(resolve_file(checkpoint, self.name, "checkpoint"), self.name)
        )
        load_into(model, state, self.name, "checkpoint")
        tok = load_pretrained(AutoTokenizer, tokenizer, self.name, "tokenizer")
        tok.add_special_tokens({"bos_token": "[DEC]", "additional_special_tokens": ["[ENC]"]})  # as BLIP
        self._setup(model, tok, device, dtype, preprocess)

    @classmethod
    def from_components(
        cls,
        model: ImageRewardModel,
        tokenizer: Any,
        device=None,
        dtype=torch.float32,
        preprocess: PreprocessMode = "reference",
    ):
        reward = cls.__new__(cls)
        reward._setup(model, tokenizer, device, dtype, preprocess)
        return reward

    def _setup(self, model: ImageRewardModel, tokenizer: Any, device, dtype, preprocess="reference") -> None:
        check_choice(self.name, "preprocess", preprocess, PREPROCESS_MODES)
        self.device, self.dtype = pick_device(device), dtype
        self.model = model.to(device=self.device, dtype=dtype).eval().requires_grad_(False)
        self.model.mlp.float()
        self.tokenizer = tokenizer
        self.preprocess = preprocess
        self.transform = imagereward_transform(model.vision.config.image_size, preprocess)

    def tokenize(self, prompts: list[str]) -> dict[str, torch.Tensor]:
        return self.tokenizer(
            prompts, padding="max_length", truncation=True, max_length=MAX_TEXT_TOKENS, return_tensors="pt"
        )

    @torch.no_grad()
    def __call__(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        if media.ndim != 4 or media.shape[1] != 3 or len(media) != len(prompts):
            raise RewardError(f"imagereward: expects images (B, 3, H, W) and B prompts, got {tuple(media.shape)}")
        pixels = self.transform(media.to(self.device)).to(self.dtype)
        tokens = self.tokenize(prompts).to(self.device)
        raw = self.model(pixels, tokens["input_ids"], tokens["attention_mask"]).cpu()  # (B,)
        return RewardOutput(scores=(raw - REWARD_MEAN) / REWARD_STD, details={"raw": raw})
