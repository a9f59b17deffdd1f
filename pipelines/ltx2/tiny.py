"""The offline tiny LTX-2: the real ``LTX2Pipeline`` classes at toy sizes, built in code."""

from __future__ import annotations

import torch

from flowrl.pipelines.kit.tiny import make_word_tokenizer, seeded
from flowrl.pipelines.ltx2.layout import (
    LTX2_AUDIO_COMPRESSION,
    LTX2_AUDIO_HOP_LENGTH,
    LTX2_AUDIO_LATENT_CHANNELS,
    LTX2_AUDIO_MEL_BINS,
    LTX2_AUDIO_SAMPLE_RATE,
    LTX2_CONNECTOR_REGISTERS,
    LTX2_LATENT_CHANNELS,
    LTX2_SCHEDULER_CONFIG,
    LTX2_SPATIAL_COMPRESSION,
    LTX2_TEMPORAL_COMPRESSION,
    LTX2_VOCODER_SAMPLE_RATE,
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

    with seeded(seed, "text_encoder"):
        text_encoder = _gemma3_text_encoder(vocab, text_dim, text_layers)
    with seeded(seed, "connectors"):
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
    with seeded(seed, "transformer"):
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
    with seeded(seed, "vae"):
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
    with seeded(seed, "audio_vae"):
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
    with seeded(seed, "vocoder"):
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
