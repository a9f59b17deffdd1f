"""LTX-2 joint audio-video (``model.pipeline: ltx2``): ``adapter`` (``LTX2Adapter``, ``tower_of``), ``layout``
(the packed video and audio latent math and the shift ``mu``) and ``tiny`` (the offline tiny LTX-2).

The names below were importable from ``flowrl.pipelines.ltx2`` when it was one module; they stay importable."""

from flowrl.pipelines.ltx2.adapter import (
    ATTENTIONS,
    CONDITION_KEYS,
    DECODE_CHUNK_ELEMENTS,
    DEFAULT_FPS,
    DEFAULT_NUM_FRAMES,
    LTX2_LORA_TARGETS,
    LTX2_UNGUIDED_CALL_KWARGS,
    MODALITIES,
    SPATIAL_MULTIPLE,
    TEMPORAL_MULTIPLE,
    TOWERS,
    LTX2Adapter,
    check_model_path,
    check_num_frames,
    check_size,
    load_ltx2_pipeline,
    tower_of,
)

__all__ = [
    "ATTENTIONS",
    "CONDITION_KEYS",
    "DECODE_CHUNK_ELEMENTS",
    "DEFAULT_FPS",
    "DEFAULT_NUM_FRAMES",
    "LTX2_LORA_TARGETS",
    "LTX2_UNGUIDED_CALL_KWARGS",
    "MODALITIES",
    "SPATIAL_MULTIPLE",
    "TEMPORAL_MULTIPLE",
    "TOWERS",
    "LTX2Adapter",
    "check_model_path",
    "check_num_frames",
    "check_size",
    "load_ltx2_pipeline",
    "tower_of",
]
