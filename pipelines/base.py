"""The pipeline-adapter contract and the registry of adapters.

An adapter wraps one diffusers pipeline family and exposes only what the RL loop needs, built from the
pipeline's public pieces (``encode_prompt``, ``prepare_latents``, the scheduler's sigmas, the VAE). The RL
core never looks inside a latent: states, noise and velocities are tensors of the family's own layout
(SD3 ``(B, C, H/8, W/8)``, FLUX packed tokens ``(B, N, 64)``, Wan ``(B, 16, F', H/8, W/8)``, audio
``(B, D, L)``), batch first; a joint audio-video family's latents are a mapping of modalities
(LTX-2 ``{"video": (B, N_v, 128), "audio": (B, L, 128)}``, ``flowrl.latents``), its velocity a mapping of
the same keys and its media kind ``"audio_video"``.

* ``encode_prompts(prompts, negative_prompts=None)`` -> conditioning, a dict of tensors with the batch first
  (cached per prompt); with ``negative_prompts``, each row's CFG negative is rows of it too (SD3:
  ``negative_prompt_embeds``, ``negative_pooled_prompt_embeds``), so ``select`` and ``concat`` keep them aligned;
* ``negative_conditioning(n)`` -> the unconditional branch for CFG (the empty prompt) where ``cond`` holds no
  negatives of its own;
* ``sigmas(num_steps)`` -> the schedule (T+1 values from about 1 down to 0), computed the pipeline's way (its
  shift, FLUX's resolution-dependent ``mu``, Wan's flow shift); sigma_0 need not be exactly 1;
* ``initial_noise(n, generator)`` -> x at sigma_0;
* ``guidance(scale)`` -> ``Guidance``: how a scale is applied and how many transformer rows a sample costs per
  velocity (``cost/nfe``, the estimate);
* ``model_inputs(cond, guidance_scale)`` -> transformer-ready conditioning (CFG rows stacked), once a batch;
* ``velocity(x, sigma, inputs, guidance_scale, model=None)`` -> v, one batched forward for every pass;
* ``media_kind`` ("image", "video" or "audio") and ``decode(latents)`` -> media of that kind (``flowrl.media``):
  images ``(B, 3, H, W)`` in [0, 1]; video ``{"video": (B, F, 3, H, W) in [0, 1], "fps": float}``; audio
  ``{"audio": (B, C, N) in [-1, 1], "sample_rate": int}``;
* ``transformer`` (the trained module: one diffusers model, or a module holding a family's experts) and
  ``lora_target_modules``; ``save_lora(directory, state_dict)`` writes a LoRA the family's diffusers pipeline
  loads with ``load_lora_weights``; ``load_trained(run_dir)`` loads a run's export back;
* ``generate(prompts, num_steps, guidance_scale, generator, negative_prompts=None)`` -> media of the family's
  own diffusers pipeline call (``flowrl sample``).
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Guidance:
    """How an adapter applies a guidance scale. ``kind``: ``"cfg"`` (two branches, ``v_u + w (v_c - v_u)``),
    ``"embedded"`` (the scale is an input of the transformer, FLUX.1-dev) or ``"none"`` (the conditional
    prediction alone); ``passes``: transformer rows per sample and velocity (2 for CFG, else 1)."""

    kind: str
    scale: float
    passes: int


def cfg_guidance(scale: float) -> Guidance:
    """Two-branch classifier-free guidance, off (one pass) at scale 1."""
    return Guidance("cfg", float(scale), 2) if scale != 1.0 else Guidance("none", float(scale), 1)


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

    media_kind: str

    def guidance(self, scale: float) -> Guidance: ...

    def decode(self, latents: torch.Tensor) -> Any: ...


_ADAPTERS: dict[str, str] = {
    "sd3": "flowrl.pipelines.sd3:SD3Adapter",
    "flux": "flowrl.pipelines.flux:FluxAdapter",
    "wan": "flowrl.pipelines.wan:WanAdapter",
    "stable_audio": "flowrl.pipelines.stable_audio:StableAudioAdapter",
    "ltx2": "flowrl.pipelines.ltx2:LTX2Adapter",
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
