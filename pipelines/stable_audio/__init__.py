"""Stable Audio 3 (``model.pipeline: stable_audio``): ``adapter`` (``StableAudioAdapter``, with the peft loader
diffusers' SA3 transformer lacks), ``layout`` (the 1-D latent math) and ``tiny`` (the offline tiny models)."""

from flowrl.pipelines.stable_audio.adapter import StableAudioAdapter

__all__ = ["StableAudioAdapter"]
