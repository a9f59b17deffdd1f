"""The offline tiny SD3: the real ``StableDiffusion3Pipeline`` classes at toy sizes, built in code."""

from __future__ import annotations

import torch

from flowrl.pipelines.kit.tiny import image_vae, make_word_tokenizer, t5_encoder
from flowrl.pipelines.sd3.layout import SIZES, TinySize, latent_shape


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


def build_tiny_sd3_pipeline(
    resolution: int = 32, size: str = "tiny", seed: int = 0, vocabulary: list[str] | None = None
):
    """A ``StableDiffusion3Pipeline`` with random weights at the chosen size preset, built offline.

    ``vocabulary``: the tokenizers' words (default: the shipped prompt sets' words).
    """
    from diffusers import (
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )

    if size not in SIZES:
        raise ValueError(f"unknown tiny size {size!r}; choose one of {', '.join(SIZES)}")
    s = SIZES[size]
    vae_factor = 2 ** (len(s.vae_channels) - 1)
    latent = latent_shape(resolution, resolution, vae_scale_factor=vae_factor, channels=s.latent_channels)[1]
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
    vae = image_vae(s.latent_channels, 1.5035, 0.0609, s.vae_channels, sample_size=resolution)
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    pipe = StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=scheduler,
        vae=vae,
        text_encoder=_clip_text_encoder(s, vocab, eos_id=3),
        tokenizer=tokenizer,
        text_encoder_2=_clip_text_encoder(s, vocab, eos_id=3),
        tokenizer_2=make_word_tokenizer(s.text_tokens, vocabulary),
        text_encoder_3=t5_encoder(vocab, s.t5_dim),
        tokenizer_3=tokenizer_3,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe
