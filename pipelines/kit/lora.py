"""LoRA export helpers shared by every family."""

from __future__ import annotations

import json
import logging
from typing import Any

import torch

logger = logging.getLogger(__name__)


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


def load_run_export(adapter: Any, run_dir: Any, transformer_class: str) -> str | None:
    """Load what a run exported into ``adapter.pipe``: ``lora/`` through the pipeline's ``load_lora_weights``, or a
    fine-tuned ``transformer/`` of the diffusers class ``transformer_class``; returns what, or None."""
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
        return "fine-tuned transformer"
    return None
