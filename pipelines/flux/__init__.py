"""FLUX.1 (``model.pipeline: flux``): ``adapter`` (``FluxAdapter``), ``layout`` (packed tokens and the shift ``mu``)
and ``tiny`` (the offline tiny FLUX.1-dev).

The names below were importable from ``flowrl.pipelines.flux`` when it was one module; they stay importable
(``set_dispatcher_attention_backend`` lives in ``flowrl.pipelines.kit.attention``)."""

from flowrl.pipelines.flux.adapter import FLUX_LORA_TARGETS, FluxAdapter, check_model_path, load_flux_pipeline
from flowrl.pipelines.kit.attention import set_dispatcher_attention_backend

__all__ = [
    "FLUX_LORA_TARGETS",
    "FluxAdapter",
    "check_model_path",
    "load_flux_pipeline",
    "set_dispatcher_attention_backend",
]
