"""FLUX.1-Kontext (``model.pipeline: flux_kontext``): image editing on FLUX.1's transformer. ``adapter``
(``FluxKontextAdapter``), ``layout`` (the packed tokens and the source image's tokens) and ``tiny`` (the offline
tiny FLUX.1-Kontext-dev)."""

from flowrl.pipelines.flux_kontext.adapter import FluxKontextAdapter, check_model_path

__all__ = ["FluxKontextAdapter", "check_model_path"]
