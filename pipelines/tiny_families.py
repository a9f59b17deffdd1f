"""Offline builders of tiny FLUX.1, Wan 2.1 / 2.2 and Stable Audio 3 pipelines (diffusers 0.42).

Each builder returns the *real* diffusers pipeline class with the real component classes at toy sizes:
random weights from a fixed seed, word-level tokenizers made in code (``pipelines.tiny.make_word_tokenizer``)
and text encoders built from ``transformers`` configs. Nothing is downloaded, so they work with
``HF_HUB_OFFLINE=1``. What is kept from the real checkpoints is everything the RL code can depend on: the
latent layout (channels, VAE down-sampling, FLUX's 2x2 packing), the schedulers' configs (hence the sigma
schedules), FLUX.1-dev's guidance embedding, Wan 2.2's two-expert switch and Stable Audio 3's duration
conditioning. Widths, depths and vocabularies are tiny, so outputs are noise.

=================  ======================================================================================
family             layout (see each builder's docstring)
=================  ======================================================================================
``flux``           packed tokens ``(B, (H/16)(W/16), 64)`` with image ids ``((H/16)(W/16), 3)``
``wan``            5-D latents ``(B, 16, 1 + (F-1)/4, H/8, W/8)``; video ``(B, F, 3, H, W)``
``stable_audio``   1-D latents ``(B, latent_dim, ceil(duration*sr/ratio))``; audio ``(B, 2, duration*sr)``
=================  ======================================================================================

First sigmas (recorded because the project must not assume sigma_0 == 1 exactly):

* FLUX (FlowMatchEuler, dynamic shifting): ``sigmas = linspace(1, 1/N, N)`` then
  ``exp(mu) / (exp(mu) + 1/s - 1)``, so sigma_0 is exactly 1.0; ``mu = calculate_shift(seq_len)`` with
  seq_len = (H/16)(W/16) (0.45734375 at 32x32, 1.15 at 1024x1024).
* Wan (UniPC with flow sigmas, shift 3): sigma_0 = 0.99999899 (float32), timestep 999, not 1 / 1000.
* Stable Audio 3 (FlowMatchEuler, ``num_train_timesteps=1``): the pipeline's log-SNR schedule forces
  sigma_0 = 1.0 exactly; timesteps equal sigmas (in [0, 1]).
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch

from .tiny import make_word_tokenizer

# --------------------------------------------------------------------------------------------------------------
# Real-checkpoint constants kept by the tiny builders
# --------------------------------------------------------------------------------------------------------------

# black-forest-labs/FLUX.1-dev: vae/config.json and scheduler/scheduler_config.json
FLUX_LATENT_CHANNELS = 16
FLUX_VAE_SCALING_FACTOR = 0.3611
FLUX_VAE_SHIFT_FACTOR = 0.1159
FLUX_SCHEDULER_CONFIG = {
    "num_train_timesteps": 1000,
    "shift": 3.0,
    "use_dynamic_shifting": True,
    "base_shift": 0.5,
    "max_shift": 1.15,
    "base_image_seq_len": 256,
    "max_image_seq_len": 4096,
}

# Wan-AI/Wan2.1-T2V-*-Diffusers: scheduler/scheduler_config.json (UniPC with flow sigmas)
WAN_SCHEDULER_CONFIG = {
    "num_train_timesteps": 1000,
    "prediction_type": "flow_prediction",
    "use_flow_sigmas": True,
    "flow_shift": 3.0,
    "solver_order": 2,
    "solver_type": "bh2",
    "predict_x0": True,
    "lower_order_final": True,
    "final_sigmas_type": "zero",
    "timestep_spacing": "linspace",
}
WAN_LATENT_CHANNELS = 16
WAN22_T2V_BOUNDARY_RATIO = 0.875  # Wan2.2-T2V-A14B: high-noise expert for t >= 875

# Stable Audio 3 (diffusers' conversion / tests): the DiT takes t in [0, 1], hence num_train_timesteps=1.
# stochastic_sampling=True is the distilled stable-audio-3-medium ("ping-pong", 8 steps); False is
# stable-audio-3-medium-base (deterministic Euler, 100 steps).
STABLE_AUDIO3_SCHEDULER_CONFIG = {"num_train_timesteps": 1, "shift": 1.0}

SEED_OFFSETS = {  # one RNG stream per component, so resizing one component leaves the others' weights alone
    "transformer": 0,
    "transformer_2": 1,
    "vae": 2,
    "text_encoder": 3,
    "text_encoder_2": 4,
    "duration_embedder": 5,
}


@contextmanager
def _seeded(seed: int, component: str):
    """Seed the CPU RNG for one component without disturbing the caller's global RNG state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed * 1000 + SEED_OFFSETS[component])
        yield


def _t5_encoder(vocab: int, d_model: int, *, umt5: bool = False):
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


# --------------------------------------------------------------------------------------------------------------
# FLUX.1-dev
# --------------------------------------------------------------------------------------------------------------


def flux_image_seq_len(height: int, width: int, vae_scale_factor: int = 8) -> int:
    """Number of packed FLUX latent tokens: one per 2x2 patch of the (H/8, W/8) latent."""
    return (height // (vae_scale_factor * 2)) * (width // (vae_scale_factor * 2))


def flux_mu(height: int, width: int, scheduler_config=None) -> float:
    """FLUX's resolution-dependent shift ``mu``, as ``FluxPipeline.__call__`` computes it."""
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift

    cfg = dict(FLUX_SCHEDULER_CONFIG if scheduler_config is None else scheduler_config)
    return calculate_shift(
        flux_image_seq_len(height, width),
        cfg.get("base_image_seq_len", 256),
        cfg.get("max_image_seq_len", 4096),
        cfg.get("base_shift", 0.5),
        cfg.get("max_shift", 1.15),
    )


def build_tiny_flux(seed: int = 0):
    """A tiny FLUX.1-dev-like ``diffusers.FluxPipeline``, built offline.

    Components:

    * ``transformer``: ``FluxTransformer2DModel(in_channels=64, num_layers=1, num_single_layers=1,
      attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32,
      axes_dims_rope=(4, 6, 6), guidance_embeds=True)``. guidance_embeds=True as in FLUX.1-dev: the pipeline
      feeds ``guidance=guidance_scale`` (default 3.5) to the embedding, no two-branch CFG.
    * ``text_encoder``: ``CLIPTextModel`` (hidden 32, 2 layers, 77 positions); its ``pooler_output`` is the
      pooled projection. ``tokenizer``: word-level, model_max_length 77.
    * ``text_encoder_2``: ``T5EncoderModel`` (d_model 32, 1 layer). ``tokenizer_2``: word-level, 512.
    * ``vae``: ``AutoencoderKL`` with four levels (down-sampling 8, as FLUX's), ``latent_channels=16``,
      ``scaling_factor=0.3611``, ``shift_factor=0.1159``, no quant convs (FLUX's VAE config).
    * ``scheduler``: ``FlowMatchEulerDiscreteScheduler(**FLUX_SCHEDULER_CONFIG)`` (use_dynamic_shifting=True,
      base/max shift 0.5/1.15 over 256..4096 tokens).

    Latent layout: the VAE latent ``(B, 16, H/8, W/8)`` is packed into 2x2 patches:
    ``latents`` is ``(B, (H/16)(W/16), 64)`` (``output_type="latent"`` returns this), with image ids
    ``((H/16)(W/16), 3)`` = (0, row, col) and text ids ``(T, 3)`` of zeros. H and W must be multiples of 16.
    Images (``output_type="pt"``) are ``(B, 3, H, W)`` in [0, 1].

    Sigmas: ``linspace(1, 1/N, N)`` time-shifted with ``mu = flux_mu(H, W)``; sigma_0 = 1.0 exactly.
    """
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel

    clip_dim, t5_dim, clip_tokens = 32, 32, 77
    tokenizer = make_word_tokenizer(clip_tokens)
    tokenizer_2 = make_word_tokenizer(512)
    vocab = len(tokenizer)

    with _seeded(seed, "transformer"):
        transformer = FluxTransformer2DModel(
            patch_size=1,
            in_channels=FLUX_LATENT_CHANNELS * 4,
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=t5_dim,
            pooled_projection_dim=clip_dim,
            guidance_embeds=True,
            axes_dims_rope=(4, 6, 6),
        )
    with _seeded(seed, "text_encoder"):
        text_encoder = CLIPTextModel(
            CLIPTextConfig(
                vocab_size=vocab,
                hidden_size=clip_dim,
                intermediate_size=clip_dim * 2,
                num_hidden_layers=2,
                num_attention_heads=2,
                max_position_embeddings=clip_tokens,
                projection_dim=clip_dim,
                pad_token_id=0,
                bos_token_id=2,
                eos_token_id=3,
            )
        )
    with _seeded(seed, "text_encoder_2"):
        text_encoder_2 = _t5_encoder(vocab, t5_dim)
    with _seeded(seed, "vae"):
        vae = AutoencoderKL(
            in_channels=3,
            out_channels=3,
            down_block_types=("DownEncoderBlock2D",) * 4,
            up_block_types=("UpDecoderBlock2D",) * 4,
            block_out_channels=(8, 8, 8, 8),
            layers_per_block=1,
            latent_channels=FLUX_LATENT_CHANNELS,
            norm_num_groups=4,
            sample_size=32,
            scaling_factor=FLUX_VAE_SCALING_FACTOR,
            shift_factor=FLUX_VAE_SHIFT_FACTOR,
            use_quant_conv=False,
            use_post_quant_conv=False,
        )
    scheduler = FlowMatchEulerDiscreteScheduler(**FLUX_SCHEDULER_CONFIG)
    pipe = FluxPipeline(
        scheduler=scheduler,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        text_encoder_2=text_encoder_2,
        tokenizer_2=tokenizer_2,
        transformer=transformer,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe


# --------------------------------------------------------------------------------------------------------------
# Wan 2.1 T2V / Wan 2.2 T2V-A14B
# --------------------------------------------------------------------------------------------------------------


def wan_latent_shape(batch: int, num_frames: int, height: int, width: int) -> tuple[int, int, int, int, int]:
    """Wan's 5-D latent shape ``(B, 16, 1 + (F-1)/4, H/8, W/8)`` (F = 4k + 1; H, W multiples of 16)."""
    return (batch, WAN_LATENT_CHANNELS, (num_frames - 1) // 4 + 1, height // 8, width // 8)


def build_tiny_wan(seed: int = 0, two_experts: bool = False, flow_shift: float | None = None):
    """A tiny Wan 2.1 T2V ``diffusers.WanPipeline`` (or, with ``two_experts``, a Wan 2.2 T2V-A14B-like one).

    Components:

    * ``transformer``: ``WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2,
      attention_head_dim=12, in_channels=16, out_channels=16, text_dim=32, freq_dim=256, ffn_dim=32,
      num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads", rope_max_seq_len=32)``.
    * ``text_encoder``: ``UMT5EncoderModel`` (d_model 32, 1 layer); ``tokenizer``: word-level, 512 tokens
      (Wan's ``max_sequence_length``).
    * ``vae``: ``AutoencoderKLWan(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
      temperal_downsample=[False, True, True])``: 8x spatial, 4x temporal (causal first frame), with the
      real ``latents_mean`` / ``latents_std`` defaults (16 channels).
    * ``scheduler``: ``UniPCMultistepScheduler(**WAN_SCHEDULER_CONFIG)`` (flow_prediction, use_flow_sigmas,
      flow_shift 3.0: the Wan 2.1 Diffusers config). ``flow_shift`` overrides the shift (the original Wan 2.2
      T2V-A14B code samples with shift 12.0; diffusers' own Wan 2.2 test keeps 3.0).
    * ``two_experts=True``: a second, independently initialised ``transformer_2`` and
      ``boundary_ratio=0.875`` (Wan2.2-T2V-A14B): ``transformer`` (high noise) runs for t >= 875,
      ``transformer_2`` (low noise) for t < 875; ``guidance_scale_2`` sets the low-noise CFG.

    Latent layout: ``(B, 16, 1 + (F-1)/4, H/8, W/8)`` (``output_type="latent"``), see ``wan_latent_shape``;
    no packing (the transformer patchifies 1x2x2 inside). ``output_type="pt"`` gives video
    ``(B, F, 3, H, W)`` in [0, 1]. F must be 4k + 1 and H, W multiples of 16 (the pipeline rounds otherwise).

    Sigmas: UniPC flow sigmas start at 0.99999899 (timestep 999), *not* 1.0, and end with a 0.
    """
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel

    text_dim = 32
    tokenizer = make_word_tokenizer(512)
    vocab = len(tokenizer)

    def make_transformer():
        return WanTransformer3DModel(
            patch_size=(1, 2, 2),
            num_attention_heads=2,
            attention_head_dim=12,
            in_channels=WAN_LATENT_CHANNELS,
            out_channels=WAN_LATENT_CHANNELS,
            text_dim=text_dim,
            freq_dim=256,
            ffn_dim=32,
            num_layers=2,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            rope_max_seq_len=32,
        )

    with _seeded(seed, "transformer"):
        transformer = make_transformer()
    transformer_2 = None
    if two_experts:
        with _seeded(seed, "transformer_2"):
            transformer_2 = make_transformer()
    with _seeded(seed, "text_encoder"):
        text_encoder = _t5_encoder(vocab, text_dim, umt5=True)
    with _seeded(seed, "vae"):
        vae = AutoencoderKLWan(
            base_dim=3,
            z_dim=WAN_LATENT_CHANNELS,
            dim_mult=[1, 1, 1, 1],
            num_res_blocks=1,
            temperal_downsample=[False, True, True],
        )
    sched_cfg = dict(WAN_SCHEDULER_CONFIG)
    if flow_shift is not None:
        sched_cfg["flow_shift"] = float(flow_shift)
    scheduler = UniPCMultistepScheduler(**sched_cfg)
    pipe = WanPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        scheduler=scheduler,
        transformer=transformer,
        transformer_2=transformer_2,
        boundary_ratio=WAN22_T2V_BOUNDARY_RATIO if two_experts else None,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe


# --------------------------------------------------------------------------------------------------------------
# Stable Audio 3
# --------------------------------------------------------------------------------------------------------------

# Tiny SAME autoencoder: stereo, patch 4 x stride 4 = down-sampling 16, at a toy 256 Hz "sample rate"
# (the real SAME-L: patch 256 x stride 16 = 4096 at 44.1 kHz, latent_dim 256).
SA3_TINY_SAMPLING_RATE = 256
SA3_TINY_LATENT_DIM = 8
SA3_TINY_DOWNSAMPLING = 16


def stable_audio_latent_length(duration: float, sampling_rate: int, downsampling_ratio: int) -> int:
    """Latent frames for ``duration`` seconds, as ``StableAudio3Pipeline`` rounds them (up to a full frame)."""
    return math.ceil(duration * sampling_rate / downsampling_ratio)


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

    with _seeded(seed, "transformer"):
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
            num_memory_tokens=4,
            use_differential_attention=True,
        )
    with _seeded(seed, "text_encoder"):
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
    with _seeded(seed, "duration_embedder"):
        duration_embedder = StableAudio3DurationEmbedder(output_dim=cond_dim, fourier_dim=16)
    with _seeded(seed, "vae"):
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


TINY_FAMILIES = {
    "flux": build_tiny_flux,
    "wan": build_tiny_wan,
    "stable_audio": build_tiny_stable_audio,
}
