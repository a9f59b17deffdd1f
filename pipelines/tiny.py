"""Offline builders of small SD3 pipelines: the real diffusers and transformers classes at toy sizes.

Nothing here downloads: the tokenizers are word-level ``tokenizers`` models made in code and wrapped in
``PreTrainedTokenizerFast``; all weights are randomly initialised from a fixed seed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

# Words the tiny tokenizers know; everything else maps to [UNK]. Enough for the shipped prompt sets.
_WORDS = (
    "a an the of and in on with to at by photo picture image painting drawing render close up "
    "one two three four five six seven eight nine ten red orange yellow green blue purple pink brown black white "
    "gray grey dark light bright small large big tiny huge round square flat smooth plain simple clear calm "
    "cat dog bird fish horse cow sheep car bus train boat plane apple banana orange cake pizza cup bowl chair "
    "table bed sofa clock book vase tree flower sky sea sun moon mountain river city street house field forest "
    "sign text word letter poster board wall paper left right above below behind front top bottom next "
    "background foreground sunset night day snow rain cloud water grass sand stone wood metal glass"
).split()
SPECIAL = ("[PAD]", "[UNK]", "[BOS]", "[EOS]")


def make_word_tokenizer(max_length: int, vocabulary: list[str] | None = None):
    """A lower-casing word-level tokenizer with BOS/EOS, padded with [PAD]; ids: PAD 0, UNK 1, BOS 2, EOS 3.

    ``vocabulary``: the words it knows (default: the shipped prompt sets' words).
    """
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL)}
    for word in _WORDS if vocabulary is None else vocabulary:
        vocab.setdefault(word.lower(), len(vocab))
    tok = Tokenizer(WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[BOS] $A [EOS]", special_tokens=[("[BOS]", vocab["[BOS]"]), ("[EOS]", vocab["[EOS]"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="[BOS]",
        eos_token="[EOS]",
        pad_token="[PAD]",
        unk_token="[UNK]",
        model_max_length=max_length,
    )


@dataclass(frozen=True)
class TinySize:
    layers: int
    heads: int
    head_dim: int
    clip_dim: int  # hidden size of each of the two CLIP text encoders
    t5_dim: int  # = joint attention dim
    vae_channels: tuple[int, ...]
    latent_channels: int = 4
    patch_size: int = 2
    text_tokens: int = 16  # CLIP tokenizer length (SD3 uses 77)


SIZES = {
    "tiny": TinySize(layers=2, heads=2, head_dim=16, clip_dim=16, t5_dim=32, vae_channels=(8, 16)),
    "small": TinySize(layers=4, heads=4, head_dim=32, clip_dim=32, t5_dim=64, vae_channels=(16, 32)),
    # about 70M transformer parameters, the size the perf benchmark reports
    "70m": TinySize(layers=8, heads=8, head_dim=64, clip_dim=64, t5_dim=128, vae_channels=(32, 64)),
}


def _clip_text_encoder(size: TinySize, vocab: int, eos_id: int):
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    cfg = CLIPTextConfig(
        vocab_size=vocab,
        hidden_size=size.clip_dim,
        intermediate_size=size.clip_dim * 2,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=size.text_tokens,
        projection_dim=size.clip_dim,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=eos_id,
    )
    return CLIPTextModelWithProjection(cfg)


def _t5_encoder(size: TinySize, vocab: int):
    from transformers import T5Config, T5EncoderModel

    cfg = T5Config(
        vocab_size=vocab,
        d_model=size.t5_dim,
        d_kv=size.t5_dim // 2,
        d_ff=size.t5_dim * 2,
        num_layers=1,
        num_heads=2,
        relative_attention_num_buckets=8,
        dropout_rate=0.0,
        pad_token_id=0,
        eos_token_id=3,
    )
    return T5EncoderModel(cfg)


def build_tiny_sd3_pipeline(
    resolution: int = 32, size: str = "tiny", seed: int = 0, vocabulary: list[str] | None = None
):
    """A ``StableDiffusion3Pipeline`` with random weights at the chosen size preset, built offline.

    ``vocabulary``: the tokenizers' words (default: the shipped prompt sets' words).
    """
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )

    if size not in SIZES:
        raise ValueError(f"unknown tiny size {size!r}; choose one of {', '.join(SIZES)}")
    s = SIZES[size]
    vae_factor = 2 ** (len(s.vae_channels) - 1)
    latent = resolution // vae_factor
    if latent % s.patch_size:
        raise ValueError(f"resolution {resolution} gives a latent of {latent}, not divisible by patch {s.patch_size}")
    torch.manual_seed(seed)
    tokenizer = make_word_tokenizer(s.text_tokens, vocabulary)
    tokenizer_3 = make_word_tokenizer(512, vocabulary)
    vocab = len(tokenizer)
    transformer = SD3Transformer2DModel(
        sample_size=latent,
        patch_size=s.patch_size,
        in_channels=s.latent_channels,
        out_channels=s.latent_channels,
        num_layers=s.layers,
        attention_head_dim=s.head_dim,
        num_attention_heads=s.heads,
        joint_attention_dim=s.t5_dim,
        caption_projection_dim=s.heads * s.head_dim,
        pooled_projection_dim=2 * s.clip_dim,
        pos_embed_max_size=latent // s.patch_size,
    )
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * len(s.vae_channels),
        up_block_types=("UpDecoderBlock2D",) * len(s.vae_channels),
        block_out_channels=s.vae_channels,
        layers_per_block=1,
        latent_channels=s.latent_channels,
        norm_num_groups=4,
        sample_size=resolution,
        shift_factor=0.0609,
        scaling_factor=1.5035,
        use_quant_conv=False,
        use_post_quant_conv=False,
    )
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    pipe = StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=scheduler,
        vae=vae,
        text_encoder=_clip_text_encoder(s, vocab, eos_id=3),
        tokenizer=tokenizer,
        text_encoder_2=_clip_text_encoder(s, vocab, eos_id=3),
        tokenizer_2=make_word_tokenizer(s.text_tokens, vocabulary),
        text_encoder_3=_t5_encoder(s, vocab),
        tokenizer_3=tokenizer_3,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe


def count_parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def words_known(prompt: str) -> bool:
    """True if every word of ``prompt`` is in the tiny vocabulary (for tests of the prompt sets)."""
    return all(w in _WORDS for w in re.findall(r"[a-z]+", prompt.lower()))
