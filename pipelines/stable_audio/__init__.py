"""Stable Audio 3 (``model.pipeline: stable_audio``): ``adapter`` (``StableAudioAdapter``, with the peft loader
diffusers' SA3 transformer lacks), ``layout`` (the 1-D latent math) and ``tiny`` (the offline tiny models).

The names below were importable from ``flowrl.pipelines.stable_audio`` when it was one module; they stay
importable."""

from flowrl.pipelines.stable_audio.adapter import (
    LORA_PREFIX,
    LORA_WEIGHT_NAME,
    SA3_LORA_TARGETS,
    TEXT_TOKENS,
    TINY_PATHS,
    StableAudioAdapter,
    check_model_path,
    load_lora,
    load_stable_audio_pipeline,
    save_lora_file,
    set_sa3_attention_backend,
    with_peft,
)
from flowrl.pipelines.stable_audio.tiny import TINY_SAME_TOKEN_STD, wake_tiny_same

__all__ = [
    "LORA_PREFIX",
    "LORA_WEIGHT_NAME",
    "SA3_LORA_TARGETS",
    "TEXT_TOKENS",
    "TINY_PATHS",
    "TINY_SAME_TOKEN_STD",
    "StableAudioAdapter",
    "check_model_path",
    "load_lora",
    "load_stable_audio_pipeline",
    "save_lora_file",
    "set_sa3_attention_backend",
    "wake_tiny_same",
    "with_peft",
]
