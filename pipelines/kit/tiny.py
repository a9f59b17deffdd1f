"""Pieces every tiny offline family builder shares: word-level tokenizers made in code, a tiny T5/UMT5 text
encoder, and one seeded RNG stream per component.

Nothing here downloads: the tokenizers are word-level ``tokenizers`` models made in code and wrapped in
``PreTrainedTokenizerFast``; all weights are randomly initialised from a fixed seed.
"""

from __future__ import annotations

import re
from contextlib import contextmanager

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


SEED_OFFSETS = {  # one RNG stream per component, so resizing one component leaves the others' weights alone
    "transformer": 0,
    "transformer_2": 1,
    "vae": 2,
    "text_encoder": 3,
    "text_encoder_2": 4,
    "duration_embedder": 5,
    "audio_vae": 6,
    "connectors": 7,
    "vocoder": 8,
}


@contextmanager
def seeded(seed: int, component: str):
    """Seed the CPU RNG for one component without disturbing the caller's global RNG state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed * 1000 + SEED_OFFSETS[component])
        yield


def t5_encoder(vocab: int, d_model: int, *, umt5: bool = False):
    """A 1-layer ``T5EncoderModel`` (``umt5``: ``UMT5EncoderModel``) of width ``d_model``, 2 heads."""
    from transformers import T5Config, T5EncoderModel, UMT5Config, UMT5EncoderModel

    kwargs = {
        "vocab_size": vocab,
        "d_model": d_model,
        "d_kv": d_model // 2,
        "d_ff": d_model * 2,
        "num_layers": 1,
        "num_heads": 2,
        "relative_attention_num_buckets": 8,
        "dropout_rate": 0.0,
        "pad_token_id": 0,
        "eos_token_id": 3,
        "decoder_start_token_id": 0,
    }
    if umt5:
        return UMT5EncoderModel(UMT5Config(**kwargs))
    return T5EncoderModel(T5Config(**kwargs))


def count_parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def words_known(prompt: str) -> bool:
    """True if every word of ``prompt`` is in the tiny vocabulary (for tests of the prompt sets)."""
    return all(w in _WORDS for w in re.findall(r"[a-z]+", prompt.lower()))


def image_vae(latent_channels: int, scaling_factor: float, shift_factor: float, channels=(8, 8, 8, 8), sample_size=32):
    """A tiny image ``AutoencoderKL``: a block of one layer per entry of ``channels`` (the VAE factor is 2 to the
    blocks less one), ``latent_channels`` out, the family's latent scaling and shift, no quant convs."""
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * len(channels),
        up_block_types=("UpDecoderBlock2D",) * len(channels),
        block_out_channels=channels,
        layers_per_block=1,
        latent_channels=latent_channels,
        norm_num_groups=4,
        sample_size=sample_size,
        scaling_factor=scaling_factor,
        shift_factor=shift_factor,
        use_quant_conv=False,
        use_post_quant_conv=False,
    )
