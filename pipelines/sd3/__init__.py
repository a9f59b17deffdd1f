"""Stable Diffusion 3 / 3.5 (``model.pipeline: sd3``): ``adapter`` (``SD3Adapter``), ``layout`` (the latent shape
math), ``tiny`` (the offline tiny model), ``loading`` (folder, hub id or single file) and ``attention``
(SD3's processors through diffusers' dispatcher).

The names below were importable from ``flowrl.pipelines.sd3`` when it was one module; they stay importable."""

from flowrl.pipelines.kit.attention import attention_backend_names
from flowrl.pipelines.kit.loading import (
    DTYPES,
    SINGLE_FILE_SUFFIXES,
    HubUnavailableError,
    check_folder_or_hub,
    is_single_file,
    load_pretrained_pipeline,
    local_or_hub,
    looks_local,
    single_file_keys,
)
from flowrl.pipelines.kit.lora import lora_metadata
from flowrl.pipelines.kit.prompts import cached_rows
from flowrl.pipelines.sd3.adapter import SD3_LORA_TARGETS, SD3Adapter
from flowrl.pipelines.sd3.attention import DispatchedJointAttention, set_attention_backend
from flowrl.pipelines.sd3.loading import check_model_path, load_sd3_pipeline, load_sd3_single_file, single_file_parts

__all__ = [
    "DTYPES",
    "SD3_LORA_TARGETS",
    "SINGLE_FILE_SUFFIXES",
    "DispatchedJointAttention",
    "HubUnavailableError",
    "SD3Adapter",
    "attention_backend_names",
    "cached_rows",
    "check_folder_or_hub",
    "check_model_path",
    "is_single_file",
    "load_pretrained_pipeline",
    "load_sd3_pipeline",
    "load_sd3_single_file",
    "local_or_hub",
    "looks_local",
    "lora_metadata",
    "set_attention_backend",
    "single_file_keys",
    "single_file_parts",
]
