"""Offline builders of tiny FLUX.1, Wan 2.1 / 2.2, Stable Audio 3 and LTX-2 pipelines (diffusers 0.42).

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
``ltx2``           video ``(B, 128, 1 + (F-1)/8, H/32, W/32)`` packed to ``(B, F'H'W', 128)``; audio
                   ``(B, 8, L, 16)`` packed to ``(B, L, 128)``, L = round(25 F / fps); outputs video
                   ``(B, F, 3, H, W)`` and 24 kHz stereo ``(B, 2, 240 (4L - 3))``
=================  ======================================================================================

First sigmas (recorded because the project must not assume sigma_0 == 1 exactly):

* FLUX (FlowMatchEuler, dynamic shifting): ``sigmas = linspace(1, 1/N, N)`` then
  ``exp(mu) / (exp(mu) + 1/s - 1)``, so sigma_0 is exactly 1.0; ``mu = calculate_shift(seq_len)`` with
  seq_len = (H/16)(W/16) (0.45734375 at 32x32, 1.15 at 1024x1024).
* Wan (UniPC with flow sigmas, shift 3): sigma_0 = 0.99999899 (float32), timestep 999, not 1 / 1000.
* Stable Audio 3 (FlowMatchEuler, ``num_train_timesteps=1``): the pipeline's log-SNR schedule forces
  sigma_0 = 1.0 exactly; timesteps equal sigmas (in [0, 1]).
* LTX-2 (FlowMatchEuler, dynamic shifting, ``shift_terminal=0.1``): ``linspace(1, 1/N, N)`` time-shifted
  with ``mu = ltx2_mu(F, H, W)`` (from the packed *video* token count), then stretched so the last non-zero
  sigma is 0.1: sigma_0 is exactly 1.0; the audio branch steps a deep copy of the same schedule.

``TINY_FAMILIES`` lists the first three; ``build_tiny_ltx2`` is called directly.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from flowrl.pipelines.flux.layout import FLUX_LATENT_CHANNELS, FLUX_SCHEDULER_CONFIG, flux_image_seq_len, flux_mu  # noqa: F401, E501
from flowrl.pipelines.flux.tiny import FLUX_VAE_SCALING_FACTOR, FLUX_VAE_SHIFT_FACTOR, build_tiny_flux  # noqa: F401
from flowrl.pipelines.stable_audio.layout import (  # noqa: F401
    SA3_TINY_DOWNSAMPLING,
    SA3_TINY_LATENT_DIM,
    SA3_TINY_SAMPLING_RATE,
    stable_audio_latent_length,
)
from flowrl.pipelines.stable_audio.tiny import STABLE_AUDIO3_SCHEDULER_CONFIG, build_tiny_stable_audio  # noqa: F401
from flowrl.pipelines.wan.layout import WAN_LATENT_CHANNELS, wan_latent_shape  # noqa: F401
from flowrl.pipelines.wan.tiny import WAN22_T2V_BOUNDARY_RATIO, WAN_SCHEDULER_CONFIG, build_tiny_wan  # noqa: F401

from .tiny import make_word_tokenizer

# --------------------------------------------------------------------------------------------------------------
# Real-checkpoint constants kept by the tiny builders
# --------------------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------------------
# Wan 2.1 T2V / Wan 2.2 T2V-A14B
# --------------------------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------------------------
# Stable Audio 3
# --------------------------------------------------------------------------------------------------------------


TINY_FAMILIES = {
    "flux": build_tiny_flux,
    "wan": build_tiny_wan,
    "stable_audio": build_tiny_stable_audio,
}


# --------------------------------------------------------------------------------------------------------------
# LTX-2 (joint audio-video)
# --------------------------------------------------------------------------------------------------------------

# Lightricks/LTX-2 (diffusers conversion): scheduler/scheduler_config.json. The pipeline reads the shift bounds
# from this config when it calls ``calculate_shift(video_tokens, 1024, 4096, 0.95, 2.05)``.
LTX2_SCHEDULER_CONFIG = {
    "num_train_timesteps": 1000,
    "shift": 1.0,
    "use_dynamic_shifting": True,
    "base_shift": 0.95,
    "max_shift": 2.05,
    "base_image_seq_len": 1024,
    "max_image_seq_len": 4096,
    "shift_terminal": 0.1,
    "time_shift_type": "exponential",
}
# Video VAE: 128 latent channels, 32x spatial (patch 4 x three 2x stages), 8x temporal (causal first frame)
LTX2_LATENT_CHANNELS = 128
LTX2_SPATIAL_COMPRESSION = 32
LTX2_TEMPORAL_COMPRESSION = 8
# Audio VAE: 16 kHz, mel hop 160 (100 mel frames/s), 64 mel bins, 8 latent channels, 4x down-sampling in
# time and mel -> 25 latent frames/s of (8, 16); the vocoder turns each mel frame into 240 samples (24 kHz).
LTX2_AUDIO_LATENT_CHANNELS = 8
LTX2_AUDIO_SAMPLE_RATE = 16000
LTX2_AUDIO_HOP_LENGTH = 160
LTX2_AUDIO_MEL_BINS = 64
LTX2_AUDIO_COMPRESSION = 4
LTX2_VOCODER_SAMPLE_RATE = 24000
LTX2_VOCODER_UPSAMPLING = 240
LTX2_CONNECTOR_REGISTERS = 128  # the text sequence length (max_sequence_length) must be a multiple of this

# Keyword arguments that make an ``LTX2Pipeline`` call a plain, single-pass sampler (no CFG, no STG, no
# modality guidance, no rescale). The pipeline's own defaults are the LTX-2.3 recipe: guidance_scale 3.0,
# audio_guidance_scale 7.0, stg_scale = audio_stg_scale = 1.0 on block 28, modality_scale 3.0 and
# guidance_rescale 0.7, i.e. three transformer calls per step (one of them on a doubled batch). Each audio_*
# value falls back to the video one when it is falsy (``audio_stg_scale or stg_scale``), so 0.0 for audio
# alone does not switch audio STG / rescale off.
LTX2_UNGUIDED_CALL_KWARGS = {
    "guidance_scale": 1.0,
    "audio_guidance_scale": 1.0,
    "stg_scale": 0.0,
    "audio_stg_scale": 0.0,
    "modality_scale": 1.0,
    "audio_modality_scale": 1.0,
    "guidance_rescale": 0.0,
    "audio_guidance_rescale": 0.0,
    "spatio_temporal_guidance_blocks": None,
}


def ltx2_video_latent_shape(batch: int, num_frames: int, height: int, width: int) -> tuple[int, int, int, int, int]:
    """LTX-2's unpacked video latent ``(B, 128, 1 + (F-1)//8, H/32, W/32)`` (H, W multiples of 32)."""
    return (
        batch,
        LTX2_LATENT_CHANNELS,
        (num_frames - 1) // LTX2_TEMPORAL_COMPRESSION + 1,
        height // LTX2_SPATIAL_COMPRESSION,
        width // LTX2_SPATIAL_COMPRESSION,
    )


def ltx2_video_seq_len(num_frames: int, height: int, width: int) -> int:
    """Packed video tokens (patch 1x1x1): one per latent voxel; this count sets the scheduler's ``mu``."""
    _, _, f, h, w = ltx2_video_latent_shape(1, num_frames, height, width)
    return f * h * w


def ltx2_audio_latent_length(num_frames: int, frame_rate: float = 24.0) -> int:
    """Audio latent frames for the clip, as ``LTX2Pipeline`` rounds them: ``round(F / fps * 25)``."""
    per_second = LTX2_AUDIO_SAMPLE_RATE / LTX2_AUDIO_HOP_LENGTH / LTX2_AUDIO_COMPRESSION
    return round(num_frames / frame_rate * per_second)


def ltx2_audio_latent_shape(batch: int, num_frames: int, frame_rate: float = 24.0) -> tuple[int, int, int, int]:
    """LTX-2's unpacked audio latent ``(B, 8, L, 16)``: channels, latent frames, latent mel bins."""
    return (
        batch,
        LTX2_AUDIO_LATENT_CHANNELS,
        ltx2_audio_latent_length(num_frames, frame_rate),
        LTX2_AUDIO_MEL_BINS // LTX2_AUDIO_COMPRESSION,
    )


def ltx2_waveform_length(audio_latent_length: int) -> int:
    """Samples per channel of the decoded audio: the causal audio VAE gives 4L - 3 mel frames, x240 each."""
    mel_frames = max(audio_latent_length * LTX2_AUDIO_COMPRESSION - (LTX2_AUDIO_COMPRESSION - 1), 1)
    return mel_frames * LTX2_VOCODER_UPSAMPLING


def ltx2_mu(num_frames: int, height: int, width: int, scheduler_config=None) -> float:
    """LTX-2's shift ``mu``, as ``LTX2Pipeline.__call__`` computes it from the packed video token count."""
    from diffusers.pipelines.ltx2.pipeline_ltx2 import calculate_shift

    cfg = dict(LTX2_SCHEDULER_CONFIG if scheduler_config is None else scheduler_config)
    return calculate_shift(
        ltx2_video_seq_len(num_frames, height, width),
        cfg.get("base_image_seq_len", 1024),
        cfg.get("max_image_seq_len", 4096),
        cfg.get("base_shift", 0.95),
        cfg.get("max_shift", 2.05),
    )


def _gemma3_text_encoder(vocab: int, hidden: int, layers: int):
    """A tiny ``Gemma3ForConditionalGeneration``: 2-layer text model plus a minimal SigLIP tower (unused by T2V)."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3TextConfig, SiglipVisionConfig

    text = Gemma3TextConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=1024,
        sliding_window=64,
        layer_types=["sliding_attention", "full_attention"][:layers],
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )
    vision = SiglipVisionConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=14
    )
    config = Gemma3Config(
        text_config=text.to_dict(),
        vision_config=vision.to_dict(),
        mm_tokens_per_image=4,  # (28 / 14)^2 patches, pooled 1:1
        # image / begin / end-of-image ids outside the word vocabulary: a text-only prompt never contains them
        boi_token_index=vocab,
        eoi_token_index=vocab + 1,
        image_token_index=vocab + 2,
    )
    return Gemma3ForConditionalGeneration(config)


def build_tiny_ltx2(seed: int = 0):
    """A tiny LTX-2 ``diffusers.LTX2Pipeline`` (joint text-to-audio+video), built offline.

    Components (real classes, toy widths, LTX-2.0 layouts):

    * ``text_encoder``: ``Gemma3ForConditionalGeneration`` from a ``Gemma3Config`` whose text model has 2 layers,
      hidden 32, 2 heads, 1 KV head, head_dim 16 (sliding + full attention), plus a 1-layer SigLIP tower
      (hidden 16, 28 px, patch 14) that text-to-video never calls. The pipeline runs it with
      ``output_hidden_states=True`` and stacks **all** ``layers + 1`` hidden states (embeddings included):
      ``prompt_embeds`` is ``(B, T, 32 * 3)``. ``tokenizer``: word-level ``PreTrainedTokenizerFast``,
      left padding (the pipeline forces ``padding_side="left"`` anyway), model_max_length 1024; the pipeline
      only calls it with ``padding="max_length"`` (no chat template: that is ``enhance_prompt``'s, which needs a
      ``processor`` and is not built here).
    * ``connectors``: ``LTX2TextConnectors(caption_channels=32, text_proj_in_factor=3, 4 heads x 8, 1 layer,
      128 learnable registers, rope_type="split")`` (LTX-2.0 path: per-layer masked normalisation, one shared
      ``text_proj_in``). Registers replace the padding, so the text length (``max_sequence_length``, default
      1024) must be a multiple of 128 and the returned mask is all ones. Outputs video and audio text
      embeddings, both ``(B, T, 32)``.
    * ``transformer``: ``LTX2VideoTransformer3DModel(in_channels=128, out_channels=128, patch_size=1,
      patch_size_t=1, num_attention_heads=2, attention_head_dim=8, cross_attention_dim=16, audio_in_channels=128,
      audio_out_channels=128, audio_num_attention_heads=2, audio_attention_head_dim=4,
      audio_cross_attention_dim=8, num_layers=2, caption_channels=32, rope_type="split")``; the rest is the
      LTX-2.0 default (``vae_scale_factors=(8, 32, 32)``, 16 kHz / hop 160 audio RoPE, double-precision RoPE).
    * ``vae``: ``AutoencoderKLLTX2Video(latent_channels=128, patch_size=4, block_out_channels=(8, 8, 8, 8),
      decoder_block_out_channels=(8, 16, 32), one layer per block, downsample_type=("spatial", "temporal",
      "spatiotemporal", "spatiotemporal"), three 2x spatio-temporal up-samplers with residuals,
      spatial_compression_ratio=32, temporal_compression_ratio=8, decoder_causal=False)``. The decoder pads with
      zeros (LTX-2.3's setting; LTX-2.0's "reflect" cannot pad the 1x1 latent of a 32x32 video).
    * ``audio_vae``: ``AutoencoderKLLTX2Audio(base_channels=128, ch_mult=(1, 1, 1), num_res_blocks=1,
      latent_channels=8, output_channels=2, mel_bins=64, sample_rate=16000, mel_hop_length=160,
      norm_type="pixel", causality_axis="height")``: two real 2x stages (time and mel). base_channels stays 128
      because ``latents_mean`` / ``latents_std`` have base_channels entries and the pipeline broadcasts them over
      the packed 8 x 16 = 128 features.
    * ``vocoder``: ``LTX2Vocoder(in_channels=2 * 64, hidden_channels=32, out_channels=2,
      upsample_factors=[6, 5, 8], upsample_kernel_sizes=[12, 15, 16], resnet_kernel_sizes=[3],
      resnet_dilations=[[1, 3, 5]], output_sampling_rate=24000)``: 240 samples per mel frame, as the real one.
    * ``scheduler``: ``FlowMatchEulerDiscreteScheduler(**LTX2_SCHEDULER_CONFIG)``.
    * Both VAEs' ``latents_mean`` / ``latents_std`` (identity at init) are drawn from the seed
      (mean ~ 0.1 N(0, 1), std ~ U(0.5, 1.5)) so the pipeline's (de)normalisation is not a no-op, as with
      the real per-channel statistics.

    Latent layout. Video: unpacked ``(B, 128, F', H/32, W/32)`` with F' = 1 + (F - 1)//8
    (``ltx2_video_latent_shape``); F should be 8k + 1 (F = 5 gives one latent frame and a 1-frame video), H and
    W multiples of 32 (checked). Packed tokens ``(B, F' H' W', 128)`` (patch 1, frame-major). Audio: unpacked
    ``(B, C=8, L, M=16)`` with L = round(F / frame_rate * 25) (``ltx2_audio_latent_shape``), packed
    ``(B, L, C * M = 128)`` by ``transpose(1, 2).flatten(2, 3)``. Normalisation: the sampling loop runs in
    normalised space; video latents passed in 5-D are normalised per channel ``(x - mean) * scaling_factor /
    std`` (scaling_factor 1.0) before packing, audio latents passed in 4-D are packed and then normalised per
    packed feature; fresh noise is not normalised; at the end both are denormalised, so
    ``output_type="latent"`` returns VAE-space ``frames`` ``(B, 128, F', H', W')`` and ``audio``
    ``(B, 8, L, 16)`` (which can be passed back as ``latents`` / ``audio_latents``). Decoded: ``frames`` is
    ``(B, F, 3, H, W)`` in [0, 1] (``output_type="pt"``), ``audio`` the vocoder waveform ``(B, 2, 240 (4L - 3))``
    at 24 kHz in [-1, 1] (tanh), ``ltx2_waveform_length``.

    Sigmas: ``linspace(1, 1/N, N)``, exponential time shift with ``mu = ltx2_mu(F, H, W)`` (calculate_shift of
    the packed video token count over 1024..4096 -> 0.95..2.05, extrapolated linearly outside), then
    ``shift_terminal`` stretches the last non-zero sigma to 0.1; a final 0 is appended. sigma_0 is exactly 1.0
    (timestep 1000); timesteps = 1000 sigma. The audio latents step a ``copy.deepcopy`` of the scheduler with
    the same sigmas (and the same ``timestep`` is fed to both towers).

    Guidance (all in x0 space: v -> x0 = x - sigma v, deltas added, back to v): CFG ``guidance_scale`` /
    ``audio_guidance_scale`` (on when either is > 1; negative prompt in a doubled batch); STG ``stg_scale`` /
    ``audio_stg_scale`` (> 0; an extra pass whose self-attention at ``spatio_temporal_guidance_blocks`` is
    replaced by its values; the default block 28 does not exist in this 2-layer model, so pass ``[0]`` or
    ``[1]``); modality guidance ``modality_scale`` / ``audio_modality_scale`` (> 1; an extra pass with
    ``isolate_modalities=True``, i.e. audio-to-video and video-to-audio cross-attention off); then
    ``guidance_rescale``. ``LTX2_UNGUIDED_CALL_KWARGS`` switches all of it off (one pass per step).

    Velocity call: ``transformer(hidden_states=(B, N_v, 128), audio_hidden_states=(B, L, 128),
    encoder_hidden_states=(B, T, 32), audio_encoder_hidden_states=(B, T, 32), timestep=(B,) in [0, 1000],
    audio_timestep=None (defaults to timestep), sigma / audio_sigma (LTX-2.3 prompt modulation and the
    cross-modal modulation when ``use_cross_timestep``, which then needs them; the pipeline passes
    sigma=timestep; audio_sigma defaults to sigma), encoder_attention_mask / audio_encoder_attention_mask
    (B, T), num_frames=F', height=H', width=W', fps, audio_num_frames=L, video_coords / audio_coords (optional),
    isolate_modalities=False, spatio_temporal_guidance_blocks, perturbation_mask, use_cross_timestep=False
    (the pipeline passes True, LTX-2.3 behaviour), return_dict=False)`` returns ``(video_velocity (B, N_v, 128),
    audio_velocity (B, L, 128))``, v ~ noise - x0.
    """
    from diffusers import (
        AutoencoderKLLTX2Audio,
        AutoencoderKLLTX2Video,
        FlowMatchEulerDiscreteScheduler,
        LTX2Pipeline,
        LTX2VideoTransformer3DModel,
    )
    from diffusers.pipelines.ltx2 import LTX2TextConnectors, LTX2Vocoder

    text_dim, text_layers = 32, 2
    tokenizer = make_word_tokenizer(1024)
    tokenizer.padding_side = "left"
    vocab = len(tokenizer)
    packed_audio = LTX2_AUDIO_LATENT_CHANNELS * (LTX2_AUDIO_MEL_BINS // LTX2_AUDIO_COMPRESSION)  # 128

    def seeded_stats(module, size):
        module.latents_mean.copy_(0.1 * torch.randn(size))
        module.latents_std.copy_(0.5 + torch.rand(size))

    with _seeded(seed, "text_encoder"):
        text_encoder = _gemma3_text_encoder(vocab, text_dim, text_layers)
    with _seeded(seed, "connectors"):
        connectors = LTX2TextConnectors(
            caption_channels=text_dim,
            text_proj_in_factor=text_layers + 1,
            video_connector_num_attention_heads=4,
            video_connector_attention_head_dim=8,
            video_connector_num_layers=1,
            video_connector_num_learnable_registers=LTX2_CONNECTOR_REGISTERS,
            audio_connector_num_attention_heads=4,
            audio_connector_attention_head_dim=8,
            audio_connector_num_layers=1,
            audio_connector_num_learnable_registers=LTX2_CONNECTOR_REGISTERS,
            connector_rope_base_seq_len=4096,
            rope_type="split",
        )
    with _seeded(seed, "transformer"):
        transformer = LTX2VideoTransformer3DModel(
            in_channels=LTX2_LATENT_CHANNELS,
            out_channels=LTX2_LATENT_CHANNELS,
            patch_size=1,
            patch_size_t=1,
            num_attention_heads=2,
            attention_head_dim=8,
            cross_attention_dim=16,
            audio_in_channels=packed_audio,
            audio_out_channels=packed_audio,
            audio_num_attention_heads=2,
            audio_attention_head_dim=4,
            audio_cross_attention_dim=8,
            num_layers=2,
            qk_norm="rms_norm_across_heads",
            caption_channels=text_dim,
            rope_type="split",
        )
    with _seeded(seed, "vae"):
        vae = AutoencoderKLLTX2Video(
            latent_channels=LTX2_LATENT_CHANNELS,
            block_out_channels=(8, 8, 8, 8),
            decoder_block_out_channels=(8, 16, 32),
            layers_per_block=(1, 1, 1, 1, 1),
            decoder_layers_per_block=(1, 1, 1, 1),
            spatio_temporal_scaling=(True, True, True, True),
            decoder_spatio_temporal_scaling=(True, True, True),
            decoder_inject_noise=(False, False, False, False),
            downsample_type=("spatial", "temporal", "spatiotemporal", "spatiotemporal"),
            upsample_residual=(True, True, True),
            upsample_factor=(2, 2, 2),
            timestep_conditioning=False,
            patch_size=4,
            patch_size_t=1,
            encoder_causal=True,
            decoder_causal=False,
            encoder_spatial_padding_mode="zeros",
            decoder_spatial_padding_mode="zeros",
            spatial_compression_ratio=LTX2_SPATIAL_COMPRESSION,
            temporal_compression_ratio=LTX2_TEMPORAL_COMPRESSION,
        )
        seeded_stats(vae, LTX2_LATENT_CHANNELS)
    with _seeded(seed, "audio_vae"):
        audio_vae = AutoencoderKLLTX2Audio(
            base_channels=packed_audio,
            output_channels=2,
            ch_mult=(1, 1, 1),
            num_res_blocks=1,
            in_channels=2,
            resolution=256,
            latent_channels=LTX2_AUDIO_LATENT_CHANNELS,
            norm_type="pixel",
            causality_axis="height",
            mel_bins=LTX2_AUDIO_MEL_BINS,
            sample_rate=LTX2_AUDIO_SAMPLE_RATE,
            mel_hop_length=LTX2_AUDIO_HOP_LENGTH,
            is_causal=True,
        )
        seeded_stats(audio_vae, packed_audio)
    with _seeded(seed, "vocoder"):
        vocoder = LTX2Vocoder(
            in_channels=2 * LTX2_AUDIO_MEL_BINS,
            hidden_channels=32,
            out_channels=2,
            upsample_kernel_sizes=[12, 15, 16],
            upsample_factors=[6, 5, 8],
            resnet_kernel_sizes=[3],
            resnet_dilations=[[1, 3, 5]],
            output_sampling_rate=LTX2_VOCODER_SAMPLE_RATE,
        )
    scheduler = FlowMatchEulerDiscreteScheduler(**LTX2_SCHEDULER_CONFIG)
    pipe = LTX2Pipeline(
        scheduler=scheduler,
        vae=vae,
        audio_vae=audio_vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        connectors=connectors,
        transformer=transformer,
        vocoder=vocoder,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe
