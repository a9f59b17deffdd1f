"""The members every family's adapter writes the same way, written once: the transformer, the prompt cache with
its CFG negative, and the LoRA export in diffusers' format. A family's adapter subclasses ``CachedPromptAdapter``
and keeps what differs: its ``_encode`` (one batch of prompts -> conditioning rows), the keys a row's own negative
keeps, the text of the default negative, its own export where diffusers' is not enough."""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import torch

from flowrl.pipelines.base import Conditioning, GuidanceKind, pipeline_classes_of, source_images_of
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


@dataclass(frozen=True)
class Draw:
    """One ``generate`` call: the prompts, the pipeline's steps and guidance scale, the noise generator (None: the
    family's default), the negative prompts (None: the default negative) and the source images (one list per
    prompt; None for a text-only family)."""

    prompts: list[str]
    num_steps: int
    guidance_scale: float
    generator: torch.Generator | None
    negative_prompts: list[str] | None = None
    images: list | None = None


class CachedPromptAdapter:
    """A family adapter's shared members. The family sets ``pipe`` and calls ``_start_prompt_cache`` in its
    constructor, and writes ``_encode(prompts) -> Conditioning`` (one row a prompt)."""

    negative_text = ""  # the prompt whose embedding is CFG's default negative (Qwen-Image: " ")
    negative_keys: tuple[str, ...] | None = None  # the keys a row's own negative keeps (None: every key)
    # an image family's constructor (this class's __init__; a video or audio family writes its own)
    default_size: int | tuple[int, int] = 512  # the size in pixels where none is given
    default_max_sequence_length = 128  # the prompt's token length where none is given
    frozen_parts: tuple[str, ...] = ("text_encoder", "vae")  # what freeze_on freezes on the device
    side_multiple = "patch"  # "patch": the sides are a multiple of the VAE's factor times the 2x2 patch; "any"
    family_title = ""  # as a size error names the family

    def __init__(
        self,
        pipe,
        resolution: int | tuple[int, int] | None = None,
        max_sequence_length: int | None = None,
        device: torch.device | str = "cpu",
        vae_dtype: torch.dtype = torch.float32,
        prompt_cache: int = 1024,
        attention_backend: str | None = None,
    ):
        """What an image family's constructor does alike: its sides in pixels (``sides``; ``resolution`` an int is
        a square, None ``default_size``), the pipeline made ready on ``device`` (``freeze_on`` of
        ``frozen_parts``, the VAE in ``vae_dtype``), a private copy of its scheduler (sigmas are read from it,
        never stepped), the prompt cache, the transformer's dtype (``ModelMixin.dtype`` walks every parameter:
        asked once); then the family's own ``_start(pipe, attention_backend)``, which sets the attention backend
        (``_set_attention``) last."""
        size = self.default_size if resolution is None else resolution
        multiple = pipe.vae_scale_factor * 2 if self.side_multiple == "patch" else 1
        self.height, self.width = sides(size, multiple, self.family_title)
        self.pipe = pipe
        self.device = torch.device(device)
        self.resolution = self.height if self.height == self.width else (self.height, self.width)
        self.max_sequence_length = (
            self.default_max_sequence_length if max_sequence_length is None else max_sequence_length
        )
        freeze_on(pipe, self.device, vae_dtype, self.frozen_parts)
        self._scheduler = copy.deepcopy(pipe.scheduler)
        self._start_prompt_cache(prompt_cache)
        self.compute_dtype = pipe.transformer.dtype
        self._start(pipe, attention_backend)

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

    # ------------------------------------------------------------------ the guided velocity
    def velocity(
        self,
        x: torch.Tensor,
        sigma: torch.Tensor | float,
        inputs: Conditioning,
        guidance_scale: float,
        model: torch.nn.Module | None = None,
    ) -> torch.Tensor:
        """v(x, sigma | c), fp32: one call of ``model`` (default: the transformer; pass its DDP/FSDP wrapper or a
        frozen reference copy) through the family's ``forward``, both branches of two-branch CFG in it (the
        family's ``guidance(scale).kind`` is ``GuidanceKind.CFG``), combined by ``cfg_combine``. sigma: a float or (B,);
        inputs: ``model_inputs(cond, guidance_scale)``, whose rows must match."""
        use_cfg = self.guidance(guidance_scale).kind is GuidanceKind.CFG
        rows, given = (2 if use_cfg else 1) * x.shape[0], inputs["prompt_embeds"].shape[0]
        if given != rows:
            raise ValueError(
                f"conditioning has {given} rows for {x.shape[0]} latents; "
                f"build it with model_inputs(cond, guidance_scale={guidance_scale})"
            )
        out = self.forward(model or self.transformer, x, sigma, inputs, use_cfg)
        return self.cfg_combine(out, guidance_scale, sigma) if use_cfg else out

    def cfg_combine(self, out: torch.Tensor, scale: float, sigma: torch.Tensor | float) -> torch.Tensor:
        """CFG ``v_u + w (v_c - v_u)`` of a forward's rows, the unconditional half first (as ``model_inputs``
        stacks them); a family whose guidance depends on the noise level reads ``sigma``."""
        v_uncond, v_cond = out.chunk(2)
        return v_uncond + scale * (v_cond - v_uncond)

    def _negatives(self, cond: Conditioning, keys: tuple[str, ...] = ("prompt_embeds",)) -> Conditioning:
        """CFG's negative rows of ``cond``'s ``keys``: each row's own (``negative_`` + key, from
        ``encode_prompts(prompts, negative_prompts)``) where ``cond`` holds them, else the default negative's."""
        if cond.get(f"negative_{keys[0]}") is not None:
            return {k: cond[f"negative_{k}"] for k in keys}
        return self.negative_conditioning(cond[keys[0]].shape[0])

    def _set_attention(self, attention_backend: str | None, set_backend, **options) -> None:
        """``model.attention_backend`` on the transformer through the family's ``set_backend`` (None keeps
        diffusers' default processors); ``attention_backpropagates`` False marks an inference-only kernel, which
        the Trainer refuses."""
        self.attention_backend = attention_backend
        self.attention_backpropagates = True
        if attention_backend is not None:
            self.attention_backpropagates = set_backend(
                self.pipe.transformer, attention_backend, self.device, self.compute_dtype, **options
            )

    @classmethod
    def from_pipe(cls, pipe, model_cfg, device: torch.device | str = "cpu", **options):
        """The adapter of a built pipeline at ``ModelConfig``'s size, text length, prompt cache and attention
        backend (``options``: the family's own keywords)."""
        return cls(
            pipe,
            getattr(model_cfg, "size", model_cfg.resolution),
            model_cfg.max_sequence_length,
            device,
            prompt_cache=model_cfg.prompt_cache,
            attention_backend=getattr(model_cfg, "attention_backend", None),
            **options,
        )

    def generate(
        self,
        prompts: list[str],
        num_steps: int,
        guidance_scale: float,
        generator: torch.Generator | None,
        negative_prompts: list[str] | None = None,
        images: list | None = None,
    ):
        """Media from the family's own diffusers pipeline call (``flowrl sample``): the family's ``draw`` of the
        request (``Draw``); ``images`` (one list per prompt, as in ``encode_prompts``) only for a family that
        takes source images."""
        if images is not None and source_images_of(self)[1] == 0:
            raise ValueError(f"{type(self).__name__} takes no source images; got {len(images)} lists")
        return self.draw(Draw(list(prompts), num_steps, guidance_scale, generator, negative_prompts, images))

    def draw(self, request: Draw) -> torch.Tensor:
        """Images (B, 3, H, W) in [0, 1] from the pipeline's own call at the adapter's size and text length; the
        family's ``call_guidance`` gives the call's guidance and negatives. (A video, audio or image-conditioned
        family writes its own.)"""
        return self.pipe(
            prompt=request.prompts,
            generator=request.generator,
            **self.call_options(request),
            **self.call_guidance(request.prompts, request.guidance_scale, request.negative_prompts),
        ).images

    def call_options(self, request: Draw) -> dict:
        """The options every family's pipeline call takes alike: the request's steps, the adapter's size and text
        length (as in training), tensors out."""
        return {
            "num_inference_steps": request.num_steps,
            "height": self.height,
            "width": self.width,
            "max_sequence_length": self.max_sequence_length,
            "output_type": "pt",
        }

    def save_lora(self, directory: str | Path, state_dict: dict[str, torch.Tensor]) -> None:
        """A diffusers LoRA the family's pipeline class (its first ``pipeline_classes``) loads with
        ``load_lora_weights(directory)``, with the transformer's peft config as metadata."""
        save_diffusers_lora(pipeline_classes_of(self)[0], directory, state_dict, self.transformer)
