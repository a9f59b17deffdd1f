"""The tiny Qwen2.5-VL text encoder the Qwen-Image families share: a word-level tokenizer that knows Qwen's chat
and vision special tokens, a ``Qwen2_5_VLForConditionalGeneration`` at toy size (vision tower included, so an
edit pipeline's encoder sees its source images), and the ``Qwen2VLProcessor`` the edit pipelines call.

Nothing downloads: the tokenizer is a ``tokenizers`` word-level model made in code, the weights are random from
a fixed seed. The tokenizer keeps ``\\n`` as a token and adds no BOS/EOS, as Qwen's BPE does, so the pipelines'
prompt templates tokenize to the same number of prefix tokens they drop (``prompt_template_encode_start_idx``:
34 for Qwen-Image, 64 for Qwen-Image-Edit) and the embeddings start at the user's prompt.
"""

from __future__ import annotations

from flowrl.pipelines.kit.tiny import make_word_tokenizer, seeded

# Qwen's special tokens (tokenizer_config.json of Qwen/Qwen2.5-VL-7B-Instruct), in the order their ids follow
QWEN_SPECIAL = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "[UNK]",
)
# words of the pipelines' templates beyond the shared tiny vocabulary (the count of prefix tokens is what
# matters, but a known word keeps the template's tokens distinct)
_TEMPLATE_WORDS = (
    "system user assistant describe detailing color shape size texture quantity spatial relationships objects "
    "key features input explain how s instruction should alter or modify generate new that meets requirements "
    "while maintaining consistency original where appropriate then picture"
).split()
# one tiny vision tower: 14-pixel patches merged 2x2, as Qwen2.5-VL's; small images keep the sequence short
VISION_PATCH, VISION_MERGE = 14, 2


def make_qwen_tokenizer(max_length: int = 1024):
    """A word-level ``PreTrainedTokenizerFast`` with Qwen's special tokens; ``\\n`` and punctuation are tokens,
    no BOS/EOS is added, padding is on the right with ``<|endoftext|>`` (Qwen's pad)."""
    from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(QWEN_SPECIAL)}
    shared = [w for w in make_word_tokenizer(8).get_vocab() if w.isalpha() and w.islower()]
    for word in ["\n", *sorted(shared), *_TEMPLATE_WORDS, *",.:;'()!?-", "'s", "),"]:
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    # words, each newline, runs of punctuation and "'s": the pieces Qwen's BPE makes of the templates
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"[^\S\n]+"), behavior="removed"),
            pre_tokenizers.Split("\n", behavior="isolated"),
            pre_tokenizers.Split(Regex(r"'s|[^\w\s]+"), behavior="isolated"),
        ]
    )
    tok.add_special_tokens(list(QWEN_SPECIAL[:7]))
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<|endoftext|>",
        eos_token="<|im_end|>",
        unk_token="[UNK]",
        model_max_length=max_length,
        padding_side="right",
    )


def tiny_qwen_vl(tokenizer, hidden: int = 32, seed: int = 0, component: str = "text_encoder"):
    """A 2-layer ``Qwen2_5_VLForConditionalGeneration`` of width ``hidden`` (2 heads, M-RoPE sections summing to
    half the head width) with a 1-block vision tower whose output is ``hidden`` wide; token ids from
    ``tokenizer``."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    ids = tokenizer.get_vocab()
    head = hidden // 2
    quarter = head // 4  # mrope sections (temporal, height, width) sum to head / 2
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(ids),
            "hidden_size": hidden,
            "intermediate_size": hidden * 2,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "max_position_embeddings": 2048,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1000000.0,
                "mrope_section": [quarter, quarter, head // 2 - 2 * quarter],
            },
            "bos_token_id": ids["<|im_start|>"],
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
        },
        vision_config={
            "depth": 1,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_heads": 2,
            "out_hidden_size": hidden,
            "patch_size": VISION_PATCH,
            "spatial_merge_size": VISION_MERGE,
            "temporal_patch_size": 2,
            "window_size": VISION_PATCH * VISION_MERGE * 2,
            "fullatt_block_indexes": [0],
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    with seeded(seed, component):
        return Qwen2_5_VLForConditionalGeneration(config).eval()


def tiny_qwen_processor(tokenizer, max_pixels: int = 56 * 56):
    """The ``Qwen2VLProcessor`` the edit pipelines call, on ``tokenizer``: Qwen2-VL's image processor with the
    tiny tower's patch and merge sizes, images resized to at most ``max_pixels``."""
    from transformers import Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor

    side = VISION_PATCH * VISION_MERGE
    images = Qwen2VLImageProcessor(
        patch_size=VISION_PATCH,
        merge_size=VISION_MERGE,
        temporal_patch_size=2,
        min_pixels=side * side,
        max_pixels=max_pixels,
    )
    videos = Qwen2VLVideoProcessor(patch_size=VISION_PATCH, merge_size=VISION_MERGE, temporal_patch_size=2)
    return Qwen2VLProcessor(image_processor=images, tokenizer=tokenizer, video_processor=videos)
