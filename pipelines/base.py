"""The pipeline-adapter contract (``PipelineAdapter``: every member the core calls), the registry of families,
and the conditioning helpers every family shares.

An adapter wraps one diffusers pipeline family and exposes only what the RL loop needs, built from the
pipeline's public pieces (``encode_prompt``, ``prepare_latents``, the scheduler's sigmas, the VAE). The RL
core never looks inside a latent: states, noise and velocities are tensors of the family's own layout
(SD3 ``(B, C, H/8, W/8)``, FLUX packed tokens ``(B, N, 64)``, Wan ``(B, 16, F', H/8, W/8)``, audio
``(B, D, L)``), batch first; a joint audio-video family's latents are a mapping of modalities
(LTX-2 ``{"video": (B, N_v, 128), "audio": (B, L, 128)}``, ``flowrl.latents``), its velocity a mapping of
the same keys and its media kind ``"audio_video"``. Each family's layout math is its ``layout`` module.

Conditioning is a dict of tensors with the batch first; with negative prompts, each row's CFG negative is rows
of it too (SD3: ``negative_prompt_embeds``, ``negative_pooled_prompt_embeds``), so ``select`` and ``concat``
keep them aligned. Media: images ``(B, 3, H, W)`` in [0, 1]; video ``{"video": (B, F, 3, H, W) in [0, 1],
"fps": float}``; audio ``{"audio": (B, C, N) in [-1, 1], "sample_rate": int}``.

Source images (editing, image-to-video): a prompt row may carry images (``flowrl.data.PromptItem.images``, files
named by a data folder's rows). A family that takes them declares ``source_images = (min, max)`` images per row
on its adapter class (text-only families leave it out: ``(0, 0)``, read with ``source_images_of``), and its
``encode_prompts`` and ``generate`` take ``images``: None, or one list per prompt of float tensors ``(3, H, W)``
in [0, 1] on the CPU (``flowrl.pipelines.kit.images.load_image`` reads a file to one). The adapter turns them
into conditioning rows (VAE latents, a vision-language encoder's input), batch first like the text's, so
``select`` and ``concat`` keep them aligned; its prompt cache keys a row by the prompt and the images' content
hash (``kit.prompts.cached_rows``). Rewards see the same images (``metadata["source_images"]``).

One folder per family (``flowrl.pipelines.<family>``: ``adapter``, ``layout``, ``tiny``); what families share
is in ``flowrl.pipelines.kit`` (loading, attention backends, the prompt cache, LoRA metadata, tiny text
encoders). No family imports another's module.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

from flowrl.configkit import NamedEnum
from flowrl.media import MediaKind, as_media_kind
from flowrl.registry import Registry

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


class GuidanceKind(NamedEnum):
    """How a guidance scale reaches the velocity."""

    CFG = "cfg"  # two branches, v_u + w (v_c - v_u)
    EMBEDDED = "embedded"  # the scale is an input of the transformer (FLUX.1-dev)
    NONE = "none"  # the conditional prediction alone


@dataclass(frozen=True)
class Guidance:
    """How an adapter applies a guidance scale: its ``kind`` (``GuidanceKind``; a family may give the name), the
    ``scale``, and ``passes``, the transformer rows per sample and velocity (2 for CFG, else 1)."""

    kind: GuidanceKind
    scale: float
    passes: int

    def __post_init__(self) -> None:
        if not isinstance(self.kind, GuidanceKind):
            if self.kind not in {k.value for k in GuidanceKind}:
                raise ValueError(f"guidance kind {self.kind!r} is none of {[k.value for k in GuidanceKind]}")
            object.__setattr__(self, "kind", GuidanceKind(self.kind))

    @classmethod
    def cfg_above_one(cls, scale: float) -> Guidance:
        """Two-branch CFG above a scale of 1, the conditional prediction alone at or below it."""
        return cls(GuidanceKind.CFG, float(scale), 2) if scale > 1.0 else cls(GuidanceKind.NONE, float(scale), 1)


def cfg_guidance(scale: float) -> Guidance:
    """Two-branch classifier-free guidance, off (one pass) at scale 1."""
    return Guidance(GuidanceKind.CFG, float(scale), 2) if scale != 1.0 else Guidance(GuidanceKind.NONE, float(scale), 1)


Latent = torch.Tensor | Mapping[str, torch.Tensor]  # a tensor, or a mapping of modalities (LTX-2)


@runtime_checkable
class PipelineAdapter(Protocol):
    """Everything the core (trainer, methods, rollout, ``flowrl sample``, benchmarks) calls on a family's adapter.

    A family joins by registering its adapter class (``register_family``); the conformance kit
    (``tests/pipelines/test_family_contract.py``) then runs every member below on the family's tiny recipe."""

    media_kind: MediaKind  # the kind ``decode`` and ``generate`` make (``flowrl.media``)
    tiny_recipe: str  # the shipped recipe that runs the family's tiny offline model (the conformance kit's)
    lora_target_modules: list[str]  # module-name suffixes peft's LoraConfig targets
    device: torch.device  # where the pipeline's modules live
    attention_backpropagates: bool  # False: an inference-only attention kernel (the trainer refuses to train)
    pipe: Any  # the family's diffusers pipeline (benchmarks read its components)

    @classmethod
    def from_config(cls, model_cfg: Any, device: torch.device | str = "cpu", seed: int = 0) -> PipelineAdapter:
        """Build from ``ModelConfig``: ``model.path`` ``tiny`` (and the family's other tiny names) offline."""
        ...

    @staticmethod
    def check_model_path(model_cfg: Any) -> None:
        """Refuse a ``model.path`` that cannot load, in one line, before any model is built."""
        ...

    @property
    def transformer(self) -> torch.nn.Module:
        """The trained module: one diffusers model, or a module holding the family's experts."""
        ...

    def encode_prompts(
        self, prompts: list[str], negative_prompts: list[str] | None = None, images: list | None = None
    ) -> Conditioning:
        """Conditioning rows of ``prompts`` (cached per prompt); with ``negative_prompts``, each row's negative;
        with ``images`` (a family whose ``source_images`` allows them), each row's source images (one list of
        (3, H, W) [0, 1] CPU tensors per prompt). A text-only family may leave ``images`` out of its signature."""
        ...

    def negative_conditioning(self, n: int) -> Conditioning:
        """The unconditional branch for CFG (the empty prompt), ``n`` rows."""
        ...

    def clear_cache(self) -> None:
        """Forget the cached prompt embeddings (after the text encoders changed, or between evaluations)."""
        ...

    def sigmas(self, num_steps: int) -> torch.Tensor:
        """The pipeline's schedule, ``num_steps + 1`` values (fp32, CPU) from about 1 down to 0."""
        ...

    def initial_noise(self, n: int, generator: torch.Generator) -> Latent:
        """``n`` latents at sigma_0, in the family's layout (``<family>.layout``)."""
        ...

    def guidance(self, scale: float) -> Guidance:
        """How ``scale`` is applied and how many transformer rows a sample costs per velocity."""
        ...

    def model_inputs(self, cond: Conditioning, guidance_scale: float) -> Conditioning:
        """Transformer-ready conditioning (CFG rows stacked, model dtype), built once a batch."""
        ...

    def velocity(
        self,
        x: Latent,
        sigma: torch.Tensor | float,
        inputs: Conditioning,
        guidance_scale: float,
        model: torch.nn.Module | None = None,
    ) -> Latent:
        """v(x, sigma | c), guided, fp32; ``model`` replaces the transformer (a DDP/FSDP wrapper, a reference)."""
        ...

    def decode(self, latents: Latent) -> Any:
        """Latents -> media of ``media_kind`` (``flowrl.media``)."""
        ...

    def save_lora(self, directory: str | Path, state_dict: dict[str, torch.Tensor]) -> None:
        """Write a LoRA the family's diffusers pipeline loads back (``load_lora_weights`` or the family's loader)."""
        ...

    def load_trained(self, run_dir: str | Path) -> str | None:
        """Load a run's export (``lora/`` or the fine-tuned transformer) into the pipeline; returns what, or None."""
        ...

    def generate(
        self,
        prompts: list[str],
        num_steps: int,
        guidance_scale: float,
        generator: torch.Generator,
        negative_prompts: list[str] | None = None,
        images: list | None = None,
    ) -> Any:
        """Media from the family's own diffusers pipeline call (``flowrl sample``); ``images`` as in
        ``encode_prompts`` (a text-only family may leave it out of its signature)."""
        ...


class TowerAdapter(PipelineAdapter, Protocol):
    """A joint family whose transformer holds one tower per modality (LTX-2), read by per-modality methods."""

    def tower_of(self, parameter_name: str) -> str:
        """The tower a parameter belongs to (``"video"``, ``"audio"``, a cross-modal group or ``"shared"``)."""
        ...


# built-in families, imported only when chosen; another package registers its own family with register_family
# (or an entry point in the group ``flowrl.pipelines``), and the conformance kit then runs it
PIPELINES = Registry(
    "pipeline",
    "flowrl.pipelines",
    builtins={
        "sd3": "flowrl.pipelines.sd3:SD3Adapter",
        "flux": "flowrl.pipelines.flux:FluxAdapter",
        "flux_kontext": "flowrl.pipelines.flux_kontext:FluxKontextAdapter",
        "wan": "flowrl.pipelines.wan:WanAdapter",
        "wan_i2v": "flowrl.pipelines.wan_i2v:WanI2VAdapter",
        "stable_audio": "flowrl.pipelines.stable_audio:StableAudioAdapter",
        "ltx2": "flowrl.pipelines.ltx2:LTX2Adapter",
        "z_image": "flowrl.pipelines.z_image:ZImageAdapter",
        "flux2": "flowrl.pipelines.flux2:Flux2Adapter",
        "qwen_image": "flowrl.pipelines.qwen_image:QwenImageAdapter",
        "qwen_image_edit": "flowrl.pipelines.qwen_image_edit:QwenImageEditAdapter",
    },
)


def source_images_of(adapter: Any) -> tuple[int, int]:
    """(min, max) source images per prompt row that a family's adapter (class or instance) takes; (0, 0) for a
    text-only family, which declares nothing."""
    low, high = getattr(adapter, "source_images", (0, 0))
    return int(low), int(high)


def register_family(name: str, adapter: Any | None = None):
    """Register a family's adapter class (or ``"module:attr"``) under ``name``; usable as a class decorator.
    A name already taken by another adapter is refused."""
    return PIPELINES.register(name, adapter)


def list_pipelines() -> list[str]:
    """The registered family names (``flowrl ls pipelines``)."""
    return PIPELINES.names()


def adapter_class(name: str) -> Any:
    """The adapter class registered as ``name``; an unknown name is refused in one line with the closest one."""
    return PIPELINES.get(name)


def media_kind_of(pipeline: str) -> MediaKind:
    """The media kind the family registered as ``pipeline`` makes, images where its adapter declares none (an
    unknown name: ``adapter_class``'s error)."""
    return as_media_kind(getattr(adapter_class(pipeline), "media_kind", MediaKind.IMAGE))


def pipeline_classes_of(adapter: Any) -> tuple[str, ...]:
    """The diffusers pipeline classes (``model_index.json``'s ``_class_name``) a family's adapter loads: its
    ``pipeline_classes``, else its one ``pipeline_class``; () for a family that declares neither (not checked)."""
    classes = getattr(adapter, "pipeline_classes", None)
    if classes is None:
        single = getattr(adapter, "pipeline_class", None)
        classes = (single,) if single else ()
    return tuple(classes)


def tiny_paths_of(adapter: Any) -> tuple[str, ...]:
    """The ``model.path`` values that build a family's offline tiny models (``tiny_paths``; default ``tiny``)."""
    return tuple(getattr(adapter, "tiny_paths", ("tiny",)))


def _families_where(test) -> list[str]:
    """The registered families whose adapter class passes ``test`` (one that cannot be imported is skipped)."""
    found = []
    for name in list_pipelines():
        try:
            if test(adapter_class(name)):
                found.append(name)
        except (ImportError, ValueError):
            continue
    return found


def _use_instead(family: str, path: str) -> str:
    """How to run ``model.path`` with the family it belongs to: its recipe (the family's tiny one as the example)."""
    recipe = getattr(adapter_class(family), "tiny_recipe", None)
    return f"use a recipe of family {family}" + (f" (e.g. {recipe} with model.path={path})" if recipe else "")


def check_model_family(model_cfg: Any) -> None:
    """Refuse, before any weight loads, a ``model.path`` of another family than ``model.pipeline``: another
    family's tiny name (``tiny-plus`` under sd3), or a local folder whose ``model_index.json`` names a pipeline
    class the family does not load (an SD3 folder under a FLUX recipe). One line naming the path's family."""
    pipeline, path = model_cfg.pipeline, model_cfg.path
    adapter = adapter_class(pipeline)
    own_tiny = tiny_paths_of(adapter)
    local = Path(path).expanduser()
    if path in own_tiny:
        return
    if not local.exists():
        owners = _families_where(lambda a: path in tiny_paths_of(a)) if path.startswith("tiny") else []
        if owners:
            raise ValueError(
                f"model.path: {path!r} is a tiny model of family {' and '.join(owners)}, not of model.pipeline="
                f"{pipeline}, whose tiny models are {', '.join(own_tiny)}; {_use_instead(owners[0], path)}, or set "
                f"model.path={own_tiny[0]}"
            )
        return
    accepted = pipeline_classes_of(adapter)
    index = local / "model_index.json"
    if not accepted or not index.is_file():
        return
    try:
        class_name = json.loads(index.read_text()).get("_class_name")
    except (OSError, ValueError, AttributeError):  # unreadable: the family's own check says so
        return
    if not isinstance(class_name, str) or class_name in accepted:
        return
    owners = _families_where(lambda a: class_name in pipeline_classes_of(a))
    whose = f"family {owners[0]}" if owners else "no flowrl family loads it"
    fix = _use_instead(owners[0], path) if owners else f"give a {' or '.join(accepted)} folder"
    raise ValueError(
        f"model.path: {path!r} holds a {class_name} ({whose}), but model.pipeline is {pipeline}, which loads "
        f"{' or '.join(accepted)}; {fix}, or give model.path a model of family {pipeline}"
    )


def check_model_path(model_cfg: Any) -> None:
    """Refuse a ``model.path`` that cannot load, before any model is built (one line naming it): a path of another
    family (``check_model_family``), then the chosen adapter's ``check_model_path`` where it has one (SD3:
    ``flowrl.pipelines.sd3.check_model_path``)."""
    check_model_family(model_cfg)
    check = getattr(adapter_class(model_cfg.pipeline), "check_model_path", None)
    if check is not None:
        check(model_cfg)
