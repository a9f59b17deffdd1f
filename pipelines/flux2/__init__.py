"""FLUX.2-klein, 4B and 9B, base and step-distilled (``model.pipeline: flux2``): ``adapter`` (``Flux2Adapter``),
``layout`` (the packed 128-channel tokens and the empirical shift ``mu``) and ``tiny`` (the offline tiny klein)."""

from flowrl.pipelines.flux2.adapter import FLUX2_LORA_TARGETS, Flux2Adapter, check_model_path

__all__ = ["FLUX2_LORA_TARGETS", "Flux2Adapter", "check_model_path"]
