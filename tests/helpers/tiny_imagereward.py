"""A tiny ImageReward (flowrl's ``ImageRewardModel``: BLIP's ViT and BERT with cross-attention, random weights,
built from config offline), for the ImageReward tests against the reward and against BLIP's own layout."""

from __future__ import annotations

import torch

# the text model's med_config.json, less the vocabulary size (the tokenizer's)
MED = {
    "hidden_size": 32,
    "intermediate_size": 37,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 64,
    "layer_norm_eps": 1e-12,
    "hidden_act": "gelu",
    "pad_token_id": 0,
    "add_cross_attention": True,
}
# the vision tower: width 24, 32x32 images in 8x8 patches
VISION = {
    "hidden_size": 24,
    "intermediate_size": 40,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "image_size": 32,
    "patch_size": 8,
}


def tiny_imagereward(tokenizer) -> tuple[torch.nn.Module, dict]:
    """(the model in eval mode, its med config) for ``tokenizer``; BLIP's init (std 0.02) leaves the image nearly
    invisible at this size, so the weights are widened (std 0.3)."""
    from flowrl.reward_models.imagereward import ImageRewardModel, text_config, vision_config

    med = {"vocab_size": len(tokenizer), **MED}
    torch.manual_seed(0)
    model = ImageRewardModel(vision_config(**VISION), text_config(med, 24)).eval()
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim >= 2:
                param.normal_(0, 0.3)
    return model, med
