"""FLUX.1 (``model.pipeline: flux``): ``adapter`` (``FluxAdapter``), ``layout`` (packed tokens and the shift ``mu``)
and ``tiny`` (the offline tiny FLUX.1-dev)."""

from flowrl.pipelines.flux.adapter import FLUX_LORA_TARGETS, FluxAdapter, check_model_path, load_flux_pipeline

__all__ = ["FLUX_LORA_TARGETS", "FluxAdapter", "check_model_path", "load_flux_pipeline"]
