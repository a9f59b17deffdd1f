"""Wan 2.1 T2V, Wan 2.2 T2V-A14B and Wan 2.2 TI2V-5B text-to-video (``model.pipeline: wan``): ``adapter``
(``WanAdapter``), ``experts`` (``WanExperts``, the two experts as one trained module), ``layout`` (the 5-D latent
math) and ``tiny`` (the offline tiny models).

The names below were importable from ``flowrl.pipelines.wan`` when it was one module; they stay importable."""

from flowrl.pipelines.wan.adapter import (
    DECODE_CHUNK_ELEMENTS,
    DEFAULT_FPS,
    DEFAULT_NUM_FRAMES,
    LORA_FILES,
    TINY_PATHS,
    WAN_LORA_TARGETS,
    WanAdapter,
    check_model_path,
    check_num_frames,
    load_wan_pipeline,
)
from flowrl.pipelines.wan.experts import EXPERTS, WanExperts

__all__ = [
    "DECODE_CHUNK_ELEMENTS",
    "DEFAULT_FPS",
    "DEFAULT_NUM_FRAMES",
    "EXPERTS",
    "LORA_FILES",
    "TINY_PATHS",
    "WAN_LORA_TARGETS",
    "WanAdapter",
    "WanExperts",
    "check_model_path",
    "check_num_frames",
    "load_wan_pipeline",
]
