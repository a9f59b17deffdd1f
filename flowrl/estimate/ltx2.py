"""LTX-2's profile (joint audio + video): packed video tokens F' H' W' (F' = 1 + (F-1)/8, H' = H/32, patch 1)
and L audio latent frames, both towers in every forward; ``model.max_sequence_length`` connector tokens with a
video and an audio context; the decode runs the video VAE, the audio VAE and the vocoder."""

from __future__ import annotations

import warnings

import torch

from flowrl.config import Config
from flowrl.estimate.meta import PROBE_HEAD_DIM, PROBE_HEADS, PROBE_WIDTH, meta_cost
from flowrl.estimate.profile import FamilyParts, FamilyProfile, Layout
from flowrl.pipelines.ltx2.adapter import LTX2_LORA_TARGETS, TRANSFORMER_CLASS

LTX2_NUM_FRAMES, LTX2_FPS = 121, 24.0  # the adapter's defaults


def layout(cfg: Config, parts: FamilyParts) -> Layout:
    """Video tokens N_v = F' H' W' and L = round(F / fps x sr / hop / 4) audio latent frames, both of 128
    channels; the main tokens are N_v + L. Text: the video and the audio context and the mask cached."""
    mc = cfg.model
    tc, vc, ac = parts.experts[0].config, parts.vae.config, parts.decoders[0].config
    height, width = mc.size
    frames = mc.num_frames or LTX2_NUM_FRAMES
    fps = mc.fps or LTX2_FPS
    s_factor = vc.get("spatial_compression_ratio") or parts.vae.spatial_compression_ratio
    t_factor = vc.get("temporal_compression_ratio") or parts.vae.temporal_compression_ratio
    pt, p = tc.patch_size_t, tc.patch_size
    f, h, w = (frames - 1) // t_factor + 1, height // s_factor, width // s_factor
    n_video = (f // pt) * (h // p) * (w // p)
    audio_vae = parts.decoders[0]
    length = round(frames / fps * ac.sample_rate / ac.mel_hop_length / float(audio_vae.temporal_compression_ratio))
    latent_mel = ac.mel_bins // audio_vae.mel_compression_ratio
    n_txt = mc.max_sequence_length
    channels_v = tc.in_channels * pt * p * p
    channels_a = ac.latent_channels * latent_mel
    vocoder = parts.decoders[1].config
    samples = int(round(frames / fps * vocoder.output_sampling_rate))
    return Layout(
        (n_video * channels_v + length * channels_a,),
        (f, h, w, length),
        n_video + length,
        n_txt,
        n_txt * 2 * tc.caption_channels + n_txt,
        frames * 3 * height * width + vocoder.out_channels * samples,
    )


def width(tc) -> tuple[int, int]:
    """The video tower's width (the audio tower's is its own)."""
    return tc.num_attention_heads * tc.attention_head_dim, tc.num_layers


def inputs(tc, grid: tuple[int, ...], n_txt: int, device, dtype) -> dict:
    """As the adapter calls it: grid (F', H', W', L), use_cross_timestep."""
    kw = {"device": device, "dtype": dtype}
    t = torch.full((1,), 0.5, device=device)
    f, h, w, length = grid
    ts = t * 1000
    ones = torch.ones(1, n_txt, device=device, dtype=torch.int64)
    return {
        "hidden_states": torch.randn(1, f * h * w, tc.in_channels * tc.patch_size_t * tc.patch_size**2, **kw),
        "audio_hidden_states": torch.randn(1, length, tc.audio_in_channels, **kw),
        "encoder_hidden_states": torch.randn(1, n_txt, tc.caption_channels, **kw),
        "audio_encoder_hidden_states": torch.randn(1, n_txt, tc.caption_channels, **kw),
        "timestep": ts,
        "audio_timestep": ts,
        "sigma": ts,
        "audio_sigma": ts,
        "encoder_attention_mask": ones,
        "audio_encoder_attention_mask": ones,
        "num_frames": f,
        "height": h,
        "width": w,
        "fps": LTX2_FPS,
        "audio_num_frames": length,
        "use_cross_timestep": True,
    }


def narrow(c: dict) -> dict:
    """The audio tower narrowed by the same factor (its width over the video's kept)."""
    d = c["num_attention_heads"] * c["attention_head_dim"]
    d_a = c["audio_num_attention_heads"] * c["audio_attention_head_dim"]
    audio_head = max(2, round(PROBE_HEAD_DIM * d_a / d))
    return dict(
        c,
        num_attention_heads=PROBE_HEADS,
        attention_head_dim=PROBE_HEAD_DIM,
        cross_attention_dim=PROBE_WIDTH,
        audio_num_attention_heads=PROBE_HEADS,
        audio_attention_head_dim=audio_head,
        audio_cross_attention_dim=PROBE_HEADS * audio_head,
        caption_channels=16,
    )


def passes(embedded: bool, scale: float) -> int:
    from flowrl.pipelines.base import cfg_guidance

    return cfg_guidance(scale).passes


def decode_cost(parts: FamilyParts, geo: Layout, cfg: Config) -> tuple[float, float]:
    """One sample on meta, in fp32: the video VAE over the whole clip, then the audio VAE to a mel spectrogram
    and the vocoder to the waveform. FLOPs add up; the working set is the larger of the two (they run one after
    the other; the decoded video waits in the output, counted in the media bytes)."""
    f, h, w, length = geo.grid
    tc = parts.experts[0].config
    vae, audio_vae, vocoder = parts.vae, *parts.decoders
    latent_mel = audio_vae.config.mel_bins // audio_vae.mel_compression_ratio
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zv = torch.randn(1, tc.in_channels, f, h, w)
        za = torch.randn(1, audio_vae.config.latent_channels, length, latent_mel)
        temb = torch.zeros(1) if vae.config.timestep_conditioning else None
    fv, bv = meta_cost(vae, lambda z: vae.decode(z, temb, return_dict=False), {"z": zv})
    fa, ba = meta_cost(audio_vae, lambda z: audio_vae.decode(z, return_dict=False), {"z": za})
    with torch.no_grad(), torch.device("meta"):
        mel = audio_vae.decode(za, return_dict=False)[0]
    fo, bo = meta_cost(vocoder, lambda x: vocoder(x), {"x": mel})
    return fv + fa + fo, max(bv, ba + 4 * mel.numel(), bo)


PROFILE = FamilyProfile(
    pipeline="ltx2",
    media="audio+video",
    transformer_class=TRANSFORMER_CLASS,
    vae_class=None,
    tiny_builder="build_tiny_ltx2",
    tiny_paths={"tiny": {}},
    lora_targets=LTX2_LORA_TARGETS,
    layout=layout,
    width=width,
    inputs=inputs,
    narrow=narrow,
    # (F', H', W', L); solved for (per row, per video token, per audio token, per text token)
    probe_grids=(((1, 2, 2, 4), 8), ((1, 4, 4, 4), 8), ((1, 2, 2, 16), 8), ((1, 2, 2, 4), 24)),
    probe_tokens=lambda tc, grid: [grid[0] * grid[1] * grid[2], grid[3]],
    token_split=lambda geo: [geo.main_tokens - geo.grid[3], geo.grid[3]],
    passes=passes,
    decode_cost=decode_cost,
)
