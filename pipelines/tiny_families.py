"""Re-exports of the tiny family builders and their layout math, for code that imports them from here. Each
family's builder is ``flowrl.pipelines.<family>.tiny``, its latent math ``flowrl.pipelines.<family>.layout``
(the layouts, first sigmas and real-checkpoint constants are documented there)."""

from flowrl.pipelines.flux.layout import FLUX_LATENT_CHANNELS, FLUX_SCHEDULER_CONFIG, flux_image_seq_len, flux_mu
from flowrl.pipelines.flux.tiny import FLUX_VAE_SCALING_FACTOR, FLUX_VAE_SHIFT_FACTOR, build_tiny_flux
from flowrl.pipelines.kit.tiny import SEED_OFFSETS
from flowrl.pipelines.ltx2.adapter import LTX2_UNGUIDED_CALL_KWARGS
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
    LTX2_VOCODER_UPSAMPLING,
    ltx2_audio_latent_length,
    ltx2_audio_latent_shape,
    ltx2_mu,
    ltx2_video_latent_shape,
    ltx2_video_seq_len,
    ltx2_waveform_length,
)
from flowrl.pipelines.ltx2.tiny import build_tiny_ltx2
from flowrl.pipelines.stable_audio.layout import (
    SA3_TINY_DOWNSAMPLING,
    SA3_TINY_LATENT_DIM,
    SA3_TINY_SAMPLING_RATE,
    stable_audio_latent_length,
)
from flowrl.pipelines.stable_audio.tiny import STABLE_AUDIO3_SCHEDULER_CONFIG, build_tiny_stable_audio
from flowrl.pipelines.wan.layout import WAN_LATENT_CHANNELS, wan_latent_shape
from flowrl.pipelines.wan.tiny import WAN22_T2V_BOUNDARY_RATIO, WAN_SCHEDULER_CONFIG, build_tiny_wan

# the builders of the single-modality families other than SD3 (``flowrl.pipelines.sd3.tiny``)
TINY_FAMILIES = {
    "flux": build_tiny_flux,
    "wan": build_tiny_wan,
    "stable_audio": build_tiny_stable_audio,
}

__all__ = [
    "FLUX_LATENT_CHANNELS",
    "FLUX_SCHEDULER_CONFIG",
    "FLUX_VAE_SCALING_FACTOR",
    "FLUX_VAE_SHIFT_FACTOR",
    "LTX2_AUDIO_COMPRESSION",
    "LTX2_AUDIO_HOP_LENGTH",
    "LTX2_AUDIO_LATENT_CHANNELS",
    "LTX2_AUDIO_MEL_BINS",
    "LTX2_AUDIO_SAMPLE_RATE",
    "LTX2_CONNECTOR_REGISTERS",
    "LTX2_LATENT_CHANNELS",
    "LTX2_SCHEDULER_CONFIG",
    "LTX2_SPATIAL_COMPRESSION",
    "LTX2_TEMPORAL_COMPRESSION",
    "LTX2_UNGUIDED_CALL_KWARGS",
    "LTX2_VOCODER_SAMPLE_RATE",
    "LTX2_VOCODER_UPSAMPLING",
    "SA3_TINY_DOWNSAMPLING",
    "SA3_TINY_LATENT_DIM",
    "SA3_TINY_SAMPLING_RATE",
    "SEED_OFFSETS",
    "STABLE_AUDIO3_SCHEDULER_CONFIG",
    "TINY_FAMILIES",
    "WAN22_T2V_BOUNDARY_RATIO",
    "WAN_LATENT_CHANNELS",
    "WAN_SCHEDULER_CONFIG",
    "build_tiny_flux",
    "build_tiny_ltx2",
    "build_tiny_stable_audio",
    "build_tiny_wan",
    "flux_image_seq_len",
    "flux_mu",
    "ltx2_audio_latent_length",
    "ltx2_audio_latent_shape",
    "ltx2_mu",
    "ltx2_video_latent_shape",
    "ltx2_video_seq_len",
    "ltx2_waveform_length",
    "stable_audio_latent_length",
    "wan_latent_shape",
]
