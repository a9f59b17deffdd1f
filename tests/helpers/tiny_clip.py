"""A tiny CLIP (the real transformers classes, random weights, built from config offline) with a byte-level
tokenizer made in code: the stand-in for the CLIP-family rewards (PickScore, CLIPScore, the LAION aesthetic)."""

from __future__ import annotations

import torch


def tiny_clip(seed: int = 0):
    """(CLIPModel, CLIPProcessor): 2 layers of width 32 per tower, 32x32 images in 8x8 patches, projection 16."""
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer

    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for char in sorted(ByteLevel.alphabet()):
        vocab.setdefault(char, len(vocab))
        vocab.setdefault(char + "</w>", len(vocab))
    tokenizer = CLIPTokenizer(vocab=vocab, merges=[])
    text = {"vocab_size": len(vocab), "hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2,
            "num_attention_heads": 4, "max_position_embeddings": 77, "bos_token_id": 0, "eos_token_id": 1,
            "pad_token_id": 1}  # fmt: skip
    vision = {"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2, "num_attention_heads": 4,
              "image_size": 32, "patch_size": 8}  # fmt: skip
    torch.manual_seed(seed)
    model = CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=16))
    image_processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    return model, CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer)
