"""LTX-2's latent layout: the video latent ``(128, 1 + (F-1)/8, H/32, W/32)`` packed (patch 1x1x1) to
``(F'H'W', 128)`` tokens, and the audio latent ``(8, L, 16)`` (L = round(25 F / fps)) packed to ``(L, 128)``;
both towers run every forward, so the transformer's tokens are ``F'H'W' + L``. The schedule's shift ``mu`` comes
from the packed video token count. Pure functions of frames, resolution and frame rate (and the model's
factors), read by the adapter, the tiny builder and the estimate."""

from __future__ import annotations

from flowrl.pipelines.kit.layout import Layout, dynamic_shift

DEFAULT_NUM_FRAMES = 121  # LTX2Pipeline's fixed default (LTX-2.0 / 2.3 checkpoints have no duration head)
DEFAULT_FPS = 24.0  # LTX2Pipeline's frame_rate

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


def video_grid(
    num_frames: int,
    height: int,
    width: int,
    *,
    spatial: int = LTX2_SPATIAL_COMPRESSION,
    temporal: int = LTX2_TEMPORAL_COMPRESSION,
) -> tuple[int, int, int]:
    """The unpacked video latent's ``(F', H', W')`` = ``(1 + (F-1)//t, H/s, W/s)`` (causal first frame)."""
    return ((num_frames - 1) // temporal + 1, height // spatial, width // spatial)


def ltx2_video_latent_shape(batch: int, num_frames: int, height: int, width: int) -> tuple[int, int, int, int, int]:
    """LTX-2's unpacked video latent ``(B, 128, 1 + (F-1)//8, H/32, W/32)`` (H, W multiples of 32)."""
    return (batch, LTX2_LATENT_CHANNELS, *video_grid(num_frames, height, width))


def video_seq_len(
    num_frames: int,
    height: int,
    width: int,
    *,
    spatial: int = LTX2_SPATIAL_COMPRESSION,
    temporal: int = LTX2_TEMPORAL_COMPRESSION,
    patch: int = 1,
    patch_t: int = 1,
) -> int:
    """Packed video tokens: one per ``patch_t x patch x patch`` block of the latent grid."""
    f, h, w = video_grid(num_frames, height, width, spatial=spatial, temporal=temporal)
    return (f // patch_t) * (h // patch) * (w // patch)


def ltx2_video_seq_len(num_frames: int, height: int, width: int) -> int:
    """Packed video tokens (patch 1x1x1): one per latent voxel; this count sets the scheduler's ``mu``."""
    return video_seq_len(num_frames, height, width)


def audio_latent_length(
    num_frames: int,
    frame_rate: float = 24.0,
    *,
    sample_rate: int = LTX2_AUDIO_SAMPLE_RATE,
    hop_length: int = LTX2_AUDIO_HOP_LENGTH,
    compression: int = LTX2_AUDIO_COMPRESSION,
) -> int:
    """Audio latent frames for the clip, as ``LTX2Pipeline`` rounds them: ``round(F / fps * sr / hop / c)``."""
    per_second = sample_rate / hop_length / float(compression)
    return round(num_frames / frame_rate * per_second)


def ltx2_audio_latent_length(num_frames: int, frame_rate: float = 24.0) -> int:
    """Audio latent frames for the clip, as ``LTX2Pipeline`` rounds them: ``round(F / fps * 25)``."""
    return audio_latent_length(num_frames, frame_rate)


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


def mu_of(video_tokens: int, scheduler_config=None) -> float:
    """LTX-2's shift ``mu`` for ``video_tokens`` packed video tokens, as ``LTX2Pipeline.__call__`` computes it
    (``dynamic_shift`` over the scheduler config's bounds, LTX-2's where one is missing; default: LTX-2's)."""
    cfg = LTX2_SCHEDULER_CONFIG if scheduler_config is None else scheduler_config
    return dynamic_shift(video_tokens, cfg, fallback=LTX2_SCHEDULER_CONFIG)


def ltx2_mu(num_frames: int, height: int, width: int, scheduler_config=None) -> float:
    """LTX-2's shift ``mu``, as ``LTX2Pipeline.__call__`` computes it from the packed video token count."""
    return mu_of(ltx2_video_seq_len(num_frames, height, width), scheduler_config)


def layout(
    num_frames: int,
    height: int,
    width: int,
    frame_rate: float = 24.0,
    *,
    channels: int = LTX2_LATENT_CHANNELS,
    audio_channels: int = LTX2_AUDIO_LATENT_CHANNELS,
    latent_mel_bins: int = LTX2_AUDIO_MEL_BINS // LTX2_AUDIO_COMPRESSION,
) -> Layout:
    """Both packed latents ``{"video": (N_v, 128), "audio": (L, 128)}`` and the tokens ``N_v + L``."""
    n_video = ltx2_video_seq_len(num_frames, height, width)
    length = ltx2_audio_latent_length(num_frames, frame_rate)
    return Layout({"video": (n_video, channels), "audio": (length, audio_channels * latent_mel_bins)}, n_video + length)


def for_model(model_cfg) -> Layout:
    """The layout of a ``ModelConfig``: ``model.num_frames`` (default 121) at ``model.fps`` (default 24) and
    ``model.height`` x ``model.width`` (the tiny LTX-2 keeps LTX-2's factors)."""
    height, width = model_cfg.size
    return layout(model_cfg.num_frames or DEFAULT_NUM_FRAMES, height, width, model_cfg.fps or DEFAULT_FPS)
