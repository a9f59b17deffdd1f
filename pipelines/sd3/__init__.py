"""Stable Diffusion 3 / 3.5 (``model.pipeline: sd3``): ``adapter`` (``SD3Adapter``), ``layout`` (the latent shape
math), ``tiny`` (the offline tiny model), ``loading`` (folder, hub id or single file) and ``attention``
(SD3's processors through diffusers' dispatcher)."""

from flowrl.pipelines.sd3.adapter import SD3Adapter

__all__ = ["SD3Adapter"]
