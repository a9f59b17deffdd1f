"""Wan image-to-video's layout: the state is the Wan noise latent, as text-to-video's (``flowrl.pipelines.wan.layout``:
``(16, 1 + (F-1)/4, H/8, W/8)``, TI2V-5B ``(48, 1 + (F-1)/4, H/16, W/16)``); the source image adds conditioning
rows, not state."""

from __future__ import annotations

from flowrl.pipelines.kit.layout import Layout
from flowrl.pipelines.wan import layout as wan_layout


def for_model(model_cfg) -> Layout:
    """The layout of a ``ModelConfig`` (``model.path: tiny-ti2v``: the Wan 2.2 VAE's 48 channels at 16x)."""
    return wan_layout.for_model(model_cfg)
