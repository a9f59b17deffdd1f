"""Wan 2.1 T2V, Wan 2.2 T2V-A14B and Wan 2.2 TI2V-5B text-to-video (``model.pipeline: wan``): ``adapter``
(``WanAdapter``), ``experts`` (``WanExperts``, the two experts as one trained module), ``layout`` (the 5-D latent
math) and ``tiny`` (the offline tiny models)."""

from flowrl.pipelines.wan.adapter import WanAdapter

__all__ = ["WanAdapter"]
