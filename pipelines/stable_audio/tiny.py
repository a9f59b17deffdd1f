"""The offline tiny Stable Audio 3: the real ``StableAudio3Pipeline`` classes at toy sizes, built in code."""

from __future__ import annotations

import torch

from flowrl.pipelines.kit.tiny import make_word_tokenizer, seeded
from flowrl.pipelines.stable_audio.layout import (
    SA3_TINY_LATENT_DIM,
    SA3_TINY_MEMORY_TOKENS,
    SA3_TINY_SAMPLING_RATE,
)

# Stable Audio 3 (diffusers' conversion / tests): the DiT takes t in [0, 1], hence num_train_timesteps=1.
# stochastic_sampling=True is the distilled stable-audio-3-medium ("ping-pong", 8 steps); False is
# stable-audio-3-medium-base (deterministic Euler, 100 steps).
STABLE_AUDIO3_SCHEDULER_CONFIG = {"num_train_timesteps": 1, "shift": 1.0}


# std of the tiny SAME autoencoder's learned "new tokens" (see wake_tiny_same)
TINY_SAME_TOKEN_STD = 0.3


def _reinit_zero_linears(module: torch.nn.Module) -> int:
    """Give zero-initialised linears a fresh default (Kaiming-uniform) init; returns how many.

    SAME zero-initialises every residual out-projection (``attn.to_out``, ``ff.proj_out``), so at random init
    its transformer blocks are the identity and the decoder outputs only its learned "new tokens": the
    waveform would not depend on the latents at all. The real checkpoint is trained, so this only matters
    for toy weights, where audio rewards must see different audio for different latents.
    """
    count = 0
    for sub in module.modules():
        if isinstance(sub, torch.nn.Linear) and not sub.weight.any():
            sub.reset_parameters()
            count += 1
    return count


def build_tiny_stable_audio(seed: int = 0, distilled: bool = True):
    """A tiny ``diffusers.StableAudio3Pipeline`` (Stable Audio 3 text-to-audio), built offline.

    Components:

    * ``transformer``: ``StableAudio3DiTModel(io_channels=8, patch_size=1, embed_dim=32, depth=2,
      num_heads=4, cond_token_dim=16, global_cond_dim=16, local_add_cond_dim=9, timestep_features_dim=16,
      ff_mult=2, num_memory_tokens=4, use_differential_attention=True)`` (differential attention as in
      SA3 Medium; ``local_add_cond_dim`` = latent_dim + 1, as the real 257 = 256 + 1).
    * ``text_encoder``: ``T5GemmaEncoderModel`` from a ``T5GemmaConfig(is_encoder_decoder=False)`` whose
      encoder is a 2-layer ``T5GemmaModuleConfig`` (hidden 16, 2 heads, 1 KV head, head_dim 8).
      ``tokenizer``: word-level ``PreTrainedTokenizerFast`` with model_max_length 256 (the pipeline caps
      at 256, as SA3's T5Gemma); the real one is a ``GemmaTokenizerFast`` (the pipeline only calls it).
    * ``duration_embedder``: ``StableAudio3DurationEmbedder(output_dim=16, fourier_dim=16)`` (max 384 s).
    * ``vae``: ``AutoencoderSAME(audio_channels=2, patch_size=4, encoder_channels=8, encoder_c_mults=(2,),
      encoder_strides=(4,), encoder_transformer_depths=(1,), latent_dim=8, use_differential_attention=True,
      dim_heads=8, ff_mult=2, sampling_rate=256)``: down-sampling 16. Its zero-initialised residual
      out-projections are re-initialised (``_reinit_zero_linears``) so the toy decoder's audio depends on
      the latents (with SAME's own init it outputs the same waveform for any latent).
    * ``scheduler``: ``FlowMatchEulerDiscreteScheduler(num_train_timesteps=1, shift=1.0,
      stochastic_sampling=distilled)``. ``distilled=True`` is stable-audio-3-medium (ping-pong re-noise:
      ``x_next = (1 - s') x0_hat + s' * fresh noise``, 8 steps by default); ``False`` is the base model
      (deterministic Euler, 100 steps by default). The pipeline passes its own log-SNR sigmas
      (``logsnr_min=-6.2, logsnr_max=2.0``).

    Latent layout: ``(B, latent_dim=8, L)`` with ``L = ceil(duration * 256 / 16)`` (``output_type="latent"``),
    no packing; audio (``output_type="pt"``) is ``(B, 2, int(duration * 256))`` clamped to [-1, 1].

    Sigmas: the log-SNR schedule is forced to start at exactly 1.0; timesteps equal sigmas (in [0, 1]).
    """
    from diffusers import AutoencoderSAME, FlowMatchEulerDiscreteScheduler, StableAudio3DiTModel, StableAudio3Pipeline
    from diffusers.pipelines.stable_audio_3.modeling_stable_audio_3 import StableAudio3DurationEmbedder
    from transformers import T5GemmaConfig, T5GemmaEncoderModel
    from transformers.models.t5gemma.configuration_t5gemma import T5GemmaModuleConfig

    cond_dim = 16
    tokenizer = make_word_tokenizer(256)
    vocab = len(tokenizer)

    with seeded(seed, "transformer"):
        transformer = StableAudio3DiTModel(
            io_channels=SA3_TINY_LATENT_DIM,
            patch_size=1,
            embed_dim=32,
            depth=2,
            num_heads=4,
            cond_token_dim=cond_dim,
            global_cond_dim=cond_dim,
            local_add_cond_dim=SA3_TINY_LATENT_DIM + 1,
            timestep_features_dim=16,
            ff_mult=2,
            num_memory_tokens=SA3_TINY_MEMORY_TOKENS,
            use_differential_attention=True,
        )
    with seeded(seed, "text_encoder"):
        module = T5GemmaModuleConfig(
            vocab_size=vocab,
            hidden_size=cond_dim,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=8,
            max_position_embeddings=256,
            sliding_window=64,
            layer_types=["sliding_attention", "full_attention"],
            pad_token_id=0,
            bos_token_id=2,
            eos_token_id=3,
        ).to_dict()
        text_encoder = T5GemmaEncoderModel(
            T5GemmaConfig(encoder=module, decoder=dict(module), is_encoder_decoder=False, vocab_size=vocab)
        )
    with seeded(seed, "duration_embedder"):
        duration_embedder = StableAudio3DurationEmbedder(output_dim=cond_dim, fourier_dim=16)
    with seeded(seed, "vae"):
        vae = AutoencoderSAME(
            audio_channels=2,
            patch_size=4,
            encoder_channels=8,
            encoder_c_mults=(2,),
            encoder_strides=(4,),
            encoder_transformer_depths=(1,),
            latent_dim=SA3_TINY_LATENT_DIM,
            use_differential_attention=True,
            dim_heads=8,
            ff_mult=2,
            sampling_rate=SA3_TINY_SAMPLING_RATE,
        )
        _reinit_zero_linears(vae)
    scheduler = FlowMatchEulerDiscreteScheduler(**STABLE_AUDIO3_SCHEDULER_CONFIG, stochastic_sampling=distilled)
    pipe = StableAudio3Pipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        duration_embedder=duration_embedder,
        transformer=transformer,
        scheduler=scheduler,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe


def wake_tiny_same(vae, seed: int) -> int:
    """Give a toy SAME autoencoder's learned "new tokens" a unit-ish scale (std ``TINY_SAME_TOKEN_STD``, seeded);
    returns how many tensors were redrawn (0 when they are not all near zero, e.g. a trained VAE).

    SAME draws them at 1e-5. Its decoder's output tokens are those new tokens plus differential attention
    (``softmax(q1 k1) v - softmax(q2 k2) v``) to the segment's latent: with queries near zero both softmaxes
    are uniform and cancel, so at random init the waveform is a fixed pattern that moves by about 1e-6 with the
    latents, and an audio reward could not tell samples apart. At std 0.3 the tiny decoder's output depends on
    the latents (the share of energy below 16 Hz ranges over about 0.2-0.6 for Gaussian latents). Only applied
    to ``model.path: tiny`` / ``tiny-base``; a no-op once ``build_tiny_stable_audio`` does the same."""
    tokens = [p for name, p in vae.named_parameters() if name.endswith("new_tokens")]
    if not tokens or max(float(p.detach().abs().max()) for p in tokens) > 1e-3:
        return 0
    gen = torch.Generator().manual_seed(seed * 1000 + 2)
    with torch.no_grad():
        for p in tokens:
            p.copy_(torch.randn(p.shape, generator=gen) * TINY_SAME_TOKEN_STD)
    return len(tokens)
