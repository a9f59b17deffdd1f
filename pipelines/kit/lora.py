"""LoRA export helpers shared by every family."""

from __future__ import annotations

import json
import logging
from typing import Any

import torch

logger = logging.getLogger(__name__)

# diffusers' names for the attention projections of a two-stream (MM-DiT) block: the image stream's query, key,
# value and output, and the text stream's (``add_*``); SD3, FLUX.1, FLUX.2 and Qwen-Image name theirs alike
TWO_STREAM_ATTENTION = [
    "attn.to_q",
    "attn.to_k",
    "attn.to_v",
    "attn.to_out.0",
    "attn.add_q_proj",
    "attn.add_k_proj",
    "attn.add_v_proj",
    "attn.to_add_out",
]


def _set_as_list(value: Any) -> list:
    if isinstance(value, set):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def lora_metadata(transformer: torch.nn.Module) -> dict | None:
    """The transformer's peft ``LoraConfig`` as JSON-able metadata for a diffusers LoRA export (None without
    one, or if it is not JSON). Without it diffusers assumes alpha = rank on loading, which halves a LoRA
    trained with alpha = 2 x rank."""
    config = getattr(transformer, "peft_config", {}).get("default")
    if config is None:
        return None
    try:
        return json.loads(json.dumps(config.to_dict(), default=_set_as_list))
    except (TypeError, ValueError):
        logger.warning("the LoRA config is not JSON: exported without it (diffusers will assume alpha = rank)")
        return None


def load_run_export(adapter: Any, run_dir: Any, transformer_class: str, set_backend: Any = None) -> str | None:
    """Load what a run exported into ``adapter.pipe``: ``lora/`` through the pipeline's ``load_lora_weights``, or a
    fine-tuned ``transformer/`` of the diffusers class ``transformer_class``; returns what, or None.
    ``set_backend(transformer, name, device, dtype)`` puts a loaded transformer on the adapter's
    ``attention_backend`` where one is chosen."""
    from pathlib import Path

    import diffusers

    run_dir = Path(run_dir)
    if (run_dir / "lora" / "pytorch_lora_weights.safetensors").is_file():
        adapter.pipe.load_lora_weights(str(run_dir / "lora"))
        return "LoRA"
    if (run_dir / "transformer" / "config.json").is_file():
        cls = getattr(diffusers, transformer_class)
        trained = cls.from_pretrained(run_dir / "transformer", torch_dtype=adapter.compute_dtype)
        adapter.pipe.transformer = trained.to(adapter.device)
        if set_backend is not None and adapter.attention_backend is not None:
            set_backend(trained, adapter.attention_backend, adapter.device, adapter.compute_dtype)
        return "fine-tuned transformer"
    return None
