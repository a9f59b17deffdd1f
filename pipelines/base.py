"""The pipeline-adapter contract and the registry of adapters.

An adapter wraps one diffusers pipeline family and exposes only what the RL loop needs, built from the
pipeline's public pieces (``encode_prompt``, ``prepare_latents``, the scheduler's sigmas, the VAE):

* ``encode_prompts(prompts, negative_prompts=None)`` -> conditioning, a dict of tensors with the batch first
  (cached per prompt); with ``negative_prompts``, each row's CFG negative is rows of it too (SD3:
  ``negative_prompt_embeds``, ``negative_pooled_prompt_embeds``), so ``select`` and ``concat`` keep them aligned;
* ``negative_conditioning(n)`` -> the unconditional branch for CFG (the empty prompt) where ``cond`` holds no
  negatives of its own;
* ``sigmas(num_steps)`` -> the schedule (T+1 values from 1 to 0), shift included;
* ``initial_noise(n, generator)`` -> x at sigma = 1;
* ``model_inputs(cond, guidance_scale)`` -> transformer-ready conditioning (CFG rows stacked), once a batch;
* ``velocity(x, sigma, inputs, guidance_scale)`` -> v, one batched forward for both CFG branches;
* ``decode(latents)`` -> images (B, 3, H, W) in [0, 1];
* ``transformer`` (the trained module) and ``lora_target_modules``.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any, Protocol

import torch

Conditioning = dict[str, torch.Tensor]


def select(cond: Conditioning, index: torch.Tensor) -> Conditioning:
    """Rows ``index`` of every tensor in ``cond``."""
    return {k: v.index_select(0, index.to(v.device)) for k, v in cond.items()}


def concat(conds: list[Conditioning]) -> Conditioning:
    """The rows of ``conds`` one after another; every one must hold the same keys (e.g. all with negatives)."""
    keys = set(conds[0])
    for c in conds[1:]:
        if set(c) != keys:
            raise ValueError(f"cannot concatenate conditionings with different keys: {sorted(keys)} and {sorted(c)}")
    return {k: torch.cat([c[k] for c in conds]) for k in conds[0]}


class PipelineAdapter(Protocol):
    transformer: torch.nn.Module
    lora_target_modules: list[str]
    device: torch.device

    def encode_prompts(self, prompts: list[str], negative_prompts: list[str] | None = None) -> Conditioning: ...

    def negative_conditioning(self, n: int) -> Conditioning: ...

    def sigmas(self, num_steps: int) -> torch.Tensor: ...

    def initial_noise(self, n: int, generator: torch.Generator) -> torch.Tensor: ...

    def model_inputs(self, cond: Conditioning, guidance_scale: float) -> Conditioning: ...

    def velocity(
        self,
        x: torch.Tensor,
        sigma: torch.Tensor | float,
        inputs: Conditioning,
        guidance_scale: float,
        model: torch.nn.Module | None = None,
    ) -> torch.Tensor: ...

    def decode(self, latents: torch.Tensor) -> torch.Tensor: ...


_ADAPTERS: dict[str, str] = {
    "sd3": "flowrl.pipelines.sd3:SD3Adapter",
    "flux": "flowrl.pipelines.flux:FluxAdapter",
}


def list_pipelines() -> list[str]:
    return sorted(_ADAPTERS)


def adapter_class(name: str) -> Any:
    if name not in _ADAPTERS:
        close = difflib.get_close_matches(name, list(_ADAPTERS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(list_pipelines())}"
        raise ValueError(f"unknown pipeline {name!r}{hint}")
    module, _, attr = _ADAPTERS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def check_model_path(model_cfg: Any) -> None:
    """Refuse a ``model.path`` that cannot load, before any model is built (one line naming it): the chosen
    adapter's ``check_model_path`` where it has one (SD3: ``flowrl.pipelines.sd3.check_model_path``)."""
    check = getattr(adapter_class(model_cfg.pipeline), "check_model_path", None)
    if check is not None:
        check(model_cfg)
