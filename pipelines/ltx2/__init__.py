"""LTX-2 joint audio-video (``model.pipeline: ltx2``): ``adapter`` (``LTX2Adapter``, ``tower_of``), ``layout``
(the packed video and audio latent math and the shift ``mu``) and ``tiny`` (the offline tiny LTX-2)."""

from flowrl.pipelines.ltx2.adapter import LTX2Adapter

__all__ = ["LTX2Adapter"]
