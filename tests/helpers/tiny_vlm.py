"""Tiny Qwen2-VL / Qwen2.5-VL judges built offline from config with a tokenizer made in code (the VLM reward
tests and UniGenBench's judge share them)."""

from pathlib import Path

import pytest
import torch

ASSETS = Path(__file__).parents[1] / "assets" / "rewards"
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]


def vl_tokenizer(extra_specials=()):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(ByteLevel.alphabet()))}
    merges = [("Y", "e"), ("Ye", "s"), ("y", "e"), ("ye", "s"), ("N", "o"), ("n", "o")]  # Yes / yes / No / no
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    core = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIALS + list(extra_specials)})
    return tokenizer


def special_ids(tokenizer):
    convert = tokenizer.convert_tokens_to_ids
    return {
        "image_token_id": convert("<|image_pad|>"),
        "video_token_id": convert("<|video_pad|>"),
        "vision_start_token_id": convert("<|vision_start|>"),
        "vision_end_token_id": convert("<|vision_end|>"),
    }


def vl_text_config(tokenizer):
    return {
        "vocab_size": len(tokenizer),
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 512,
        "rope_scaling": {"type": "mrope", "mrope_section": [2, 1, 1]},
        "tie_word_embeddings": True,
        "bos_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


@pytest.fixture(scope="module")
def tiny_qwen25vl():
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
    )

    tokenizer = vl_tokenizer()
    processor = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(min_pixels=28 * 28 * 4, max_pixels=56 * 56 * 4),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(),
        chat_template=(ASSETS / "qwen_vl_chat_template.jinja").read_text(),
    )
    config = Qwen2_5_VLConfig(
        text_config=vl_text_config(tokenizer),
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 4,
            "out_hidden_size": 32,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 56,
            "fullatt_block_indexes": [1],
        },
        **special_ids(tokenizer),
    )
    torch.manual_seed(0)
    return Qwen2_5_VLForConditionalGeneration(config).eval(), processor
