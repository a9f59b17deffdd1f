"""The members every family's adapter writes the same way, written once: the transformer, the prompt cache with
its CFG negative, and the LoRA export in diffusers' format. A family's adapter subclasses ``CachedPromptAdapter``
and keeps what differs: its ``_encode`` (one batch of prompts -> conditioning rows), the keys a row's own negative
keeps, the text of the default negative, its own export where diffusers' is not enough."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import torch

from flowrl.pipelines.base import Conditioning, pipeline_classes_of
from flowrl.pipelines.kit.loading import DTYPES
from flowrl.pipelines.kit.lora import lora_metadata
from flowrl.pipelines.kit.prompts import cached_rows


def sides(resolution: int | tuple[int, int], multiple: int = 1, family: str = "") -> tuple[int, int]:
    """``(height, width)`` in pixels of ``model.size`` (an int is a square); a side ``multiple`` does not divide is
    refused in one line naming ``family``."""
    height, width = (resolution, resolution) if isinstance(resolution, int) else map(int, resolution)
    for side, value in (("height", height), ("width", width)):
        if value % multiple:
            raise ValueError(f"model.{side}: {family} needs a multiple of {multiple}, got {value}")
    return height, width


def freeze_on(pipe, device: torch.device, vae_dtype: torch.dtype, frozen: tuple[str, ...], vaes=("vae",)) -> None:
    """The pipeline made ready for training its transformer: its progress bar silenced, the ``frozen`` parts it
    has (text encoders, VAEs) in eval mode without gradients on ``device``, the ``vaes`` in ``vae_dtype`` (the VAE
    decodes in fp32, as Flow-GRPO's does), the transformer on ``device``."""
    pipe.set_progress_bar_config(disable=True)
    for name in frozen:
        module = getattr(pipe, name, None)
        if module is not None:
            module.requires_grad_(False).eval()
            module.to(device)
    for name in vaes:
        module = getattr(pipe, name)
        if module.dtype != vae_dtype:
            module.to(dtype=vae_dtype)
    pipe.transformer.to(device)


def cast_parts(pipe, dtype_name: str, parts: tuple[str, ...]):
    """The pipeline's ``parts`` it has (text encoders, transformers) in ``model.dtype``; returns the pipeline."""
    dtype = DTYPES[dtype_name]
    for name in parts:
        module = getattr(pipe, name, None)
        if module is not None and module.dtype != dtype:
            module.to(dtype=dtype)
    return pipe


def expand_rows(cond: Conditioning, n: int) -> Conditioning:
    """One-row conditioning ``cond`` as ``n`` rows (views, no copy)."""
    return {k: v.expand(n, *v.shape[1:]) for k, v in cond.items()}


def save_diffusers_lora(pipeline_class: str, directory: str | Path, state_dict: dict, transformer) -> None:
    """Write a LoRA in diffusers format through ``pipeline_class``'s ``save_lora_weights``, loadable with the
    pipeline's ``load_lora_weights(directory)``. The transformer's peft config (rank, alpha, targets) goes in the
    file's metadata: without it diffusers assumes alpha = rank on loading, which halves a LoRA trained with
    alpha = 2 x rank."""
    import diffusers

    getattr(diffusers, pipeline_class).save_lora_weights(
        str(directory),
        transformer_lora_layers=state_dict,
        transformer_lora_adapter_metadata=lora_metadata(transformer),
    )


class CachedPromptAdapter:
    """A family adapter's shared members. The family sets ``pipe`` and calls ``_start_prompt_cache`` in its
    constructor, and writes ``_encode(prompts) -> Conditioning`` (one row a prompt)."""

    negative_text = ""  # the prompt whose embedding is CFG's default negative (Qwen-Image: " ")
    negative_keys: tuple[str, ...] | None = None  # the keys a row's own negative keeps (None: every key)

    def _start_prompt_cache(self, capacity: int) -> None:
        """An empty prompt cache keeping the ``capacity`` most recently used prompts, and no negative yet."""
        self._cache: OrderedDict[str, Conditioning] = OrderedDict()  # least recently used first
        self.prompt_cache = capacity
        self._negative: Conditioning | None = None

    @property
    def transformer(self) -> torch.nn.Module:
        return self.pipe.transformer

    def _rows(self, prompts: list[str]) -> list[Conditioning]:
        """One-row conditionings of each of ``prompts``, through the prompt cache (``kit.prompts.cached_rows``)."""
        return cached_rows(self._cache, self.prompt_cache, prompts, self._encode)

    def encode_prompts(self, prompts: list[str], negative_prompts: list[str] | None = None) -> Conditioning:
        """The rows of ``_encode`` for ``prompts``, each distinct prompt encoded once (the ``prompt_cache`` most
        recently used kept for later calls).

        ``negative_prompts`` (one a prompt): each row's CFG negative, kept as ``negative_`` + each key of
        ``negative_keys`` so that selecting or concatenating rows keeps every sample with its own negative; ""
        is the default negative, exactly the rows of ``negative_conditioning``. None: no negative rows, CFG uses
        the default negative."""
        if negative_prompts is not None and len(negative_prompts) != len(prompts):
            raise ValueError(f"{len(negative_prompts)} negative prompts for {len(prompts)} prompts")
        given = [n for n in negative_prompts or [] if n]
        rows = self._rows(list(prompts) + given)
        cond = {k: torch.cat([r[k] for r in rows[: len(prompts)]]) for k in rows[0]}
        if negative_prompts is None:
            return cond
        empty = self._empty_negative()
        own = iter(rows[len(prompts) :])
        negs = [next(own) if n else empty for n in negative_prompts]
        for k in self.negative_keys or rows[0]:
            cond[f"negative_{k}"] = torch.cat([r[k] for r in negs])
        return cond

    def _empty_negative(self) -> Conditioning:
        """The default negative's one-row conditioning, encoded once."""
        if self._negative is None:
            self._negative = self._encode([self.negative_text])
        return self._negative

    def negative_conditioning(self, n: int) -> Conditioning:
        """The default negative prompt's conditioning (``negative_text``: the pipeline's own), ``n`` rows."""
        return expand_rows(self._empty_negative(), n)

    def clear_cache(self) -> None:
        """Forget every cached prompt row and the default negative's."""
        self._cache.clear()
        self._negative = None

    def generate(
        self,
        prompts: list[str],
        num_steps: int,
        guidance_scale: float,
        generator: torch.Generator,
        negative_prompts: list[str] | None = None,
    ) -> torch.Tensor:
        """Images (B, 3, H, W) in [0, 1] from the pipeline's own call (``flowrl sample``) at the adapter's size and
        text length; the family's ``call_guidance`` gives the call's guidance and negatives. (A video, audio or
        image-conditioned family writes its own.)"""
        return self.pipe(
            prompt=list(prompts),
            num_inference_steps=num_steps,
            height=self.height,
            width=self.width,
            max_sequence_length=self.max_sequence_length,
            generator=generator,
            output_type="pt",
            **self.call_guidance(list(prompts), guidance_scale, negative_prompts),
        ).images

    def save_lora(self, directory: str | Path, state_dict: dict[str, torch.Tensor]) -> None:
        """A diffusers LoRA the family's pipeline class (its first ``pipeline_classes``) loads with
        ``load_lora_weights(directory)``, with the transformer's peft config as metadata."""
        save_diffusers_lora(pipeline_classes_of(self)[0], directory, state_dict, self.transformer)
