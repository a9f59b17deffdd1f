"""A family's profile: what the estimate needs to know of one pipeline family beyond SD3, as data and small
pure functions, so that a new family is one entry in ``flowrl.estimate.families.PROFILES``, not branches.

The shared machinery (``families.py``) loads a family's parts, then asks its profile for the layout of one
sample (``layout``: latent, token grid, tokens, conditioning and media sizes), the transformer's width and
blocks, one row of forward inputs, the narrow copy the activation probe runs and its token counts, and the
decode cost. Everything else (parameters, LoRA, FLOPs and working sets on the meta device, experts) is the
same for every family.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flowrl.config import Config


@dataclass
class FamilyParts:
    """A family model's modules: on the meta device (published or read configs) or as built (tiny presets)."""

    pipeline: str
    experts: list  # transformer(s) on meta: Wan 2.2's high-noise expert first
    vae: Any
    text_encoders: list  # and conditioning modules (SA3's duration embedder)
    boundary_ratio: float | None
    scheduler: dict | None  # scheduler config (Wan: which transitions each expert takes)
    text_tokens: int | None  # the text tokenizer's padded length, where it caps the model's
    source: str
    decoders: list = field(default_factory=list)  # LTX-2: the audio VAE and the vocoder (after ``vae``)


@dataclass(frozen=True)
class Layout:
    """One sample's sizes in a family's layout."""

    latent: tuple[int, ...]  # one sample's latent (the adapter's layout, batch dimension left out)
    grid: tuple[int, ...]  # FLUX (h, w) token grid; Wan (f', h/8, w/8) latent; audio (L,); LTX-2 (f', h', w', L)
    main_tokens: int  # the tokens of the transformer's own sequence (image / video / audio + memory)
    text_tokens: int
    cond_elems: int
    media_elems: int  # one decoded sample, in floats


@dataclass(frozen=True)
class FamilyProfile:
    """One family's rules (see the module docstring). Functions take configs (``tc``: the transformer's)."""

    pipeline: str  # model.pipeline
    media: str  # what a sample decodes to: image | video | audio | audio+video
    transformer_class: str  # diffusers class of the transformer
    vae_class: str | None  # diffusers class of the VAE, for the generic meta decode (None: ``decode_cost``)
    tiny_builder: str  # the builder in the family's flowrl.pipelines.<pipeline>.tiny
    tiny_paths: dict[str, dict]  # model.path values that build the tiny model -> the builder's keywords
    lora_targets: list[str]  # where the adapter cannot be imported (it names its own: lora_target_modules)
    layout: Callable[[Config, FamilyParts], Layout]
    width: Callable[[Any], tuple[int, int]]  # tc -> (hidden width D, transformer blocks) of one expert
    inputs: Callable[..., dict]  # (tc, grid, n_txt, device, dtype) -> one row of transformer inputs
    narrow: Callable[[dict], dict]  # plain transformer config -> the probe's copy at width PROBE_WIDTH
    probe_grids: tuple  # (grid, text tokens) of the probe forwards, one per unknown
    probe_tokens: Callable[[Any, tuple[int, ...]], list[int]]  # (tc, grid) -> main tokens, by kind, of a grid
    token_split: Callable[[Layout], list[int]]  # a sample's main tokens by the kinds of ``probe_tokens``
    passes: Callable[[bool, float], int]  # (guidance embedded, scale) -> rows, where the adapter cannot say
    decode_cost: Callable[[FamilyParts, Layout, Config], tuple[float, float]] | None = None  # None: the VAE on meta
    checkpoint_text: bool = False  # checkpointing keeps the text stream per block too (a two-stream model)
    decode_rows: int | None = None  # samples a decode call holds at once; None: the rollout batch
    reads_scheduler: bool = False  # the scheduler config and boundary_ratio matter (experts by sigma)
    text_tokens_from_tokenizer: bool = False  # the tokenizer's padded length caps the text tokens
    default_scheduler: Callable[[], dict] | None = None  # where the configs leave it out (the published table)
