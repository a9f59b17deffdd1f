"""Benchmark image generation with a run's trained weights, split over processes by ``accelerate``.

Shared by ``flowrl eval geneval --generate`` and ``flowrl eval unigenbench --generate``. A benchmark turns
its prompts into ``PromptJob`` s (one prompt, the file of each of its images, one seed per image); this
module builds the pipeline from a run folder or a recipe, deals whole prompts to the processes
(``PartialState().split_between_processes``: contiguous shares, every process writes only its own
prompts), and samples with the run's evaluation schedule.

Seeds: image ``k`` of the prompt numbered ``i`` (row number, or the benchmark's prompt id) is drawn with
``torch.Generator("cpu").manual_seed(seed + i * images_per_prompt + k)``, one generator per image, so an
image does not depend on the number of processes or on the batch it was drawn in (up to the kernels'
batch-size-dependent rounding). Existing images are kept, so a stopped run continues where it stopped;
a folder made with other settings is refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

RECORD_NAME = "generation.json"


@dataclass
class PromptJob:
    """One prompt and its images: ``paths[k]`` is drawn with ``seeds[k]``; ``before`` writes side files;
    ``pipe_kwargs`` are further arguments of the pipeline call (e.g. an explicit ``sigmas`` grid; a batch
    only holds images whose kwargs are equal)."""

    prompt: str
    paths: list[Path]
    seeds: list[int]
    before: Callable[[], None] | None = field(default=None, repr=False)
    pipe_kwargs: dict[str, Any] | None = None


@dataclass
class GenerationSettings:
    """What decides the pixels besides the weights; recorded in ``generation.json``."""

    steps: int
    guidance_scale: float
    height: int
    width: int
    max_sequence_length: int
    seed: int
    images_per_prompt: int
    negative_prompt: str | None = None


def image_seed(seed: int, prompt_number: int, images_per_prompt: int, k: int) -> int:
    return seed + prompt_number * images_per_prompt + k


def process_state() -> Any:
    """accelerate's process state, honouring ``ACCELERATE_USE_CPU`` (``accelerate launch --cpu``) as the
    trainer's ``Accelerator`` does; without it, CPU processes started by torchrun would not see each other."""
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    return PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))


# ------------------------------------------------------------------------------------------------ model


def load_config(target: str, overrides: Sequence[str] = ()) -> tuple[Any, Path | None]:
    """A run folder's resolved ``config.yaml`` (returns the folder too), or a recipe; plus ``key=value``."""
    from flowrl.config import config_from_dict
    from flowrl.resolve import load_recipe, merge_overrides, resolve

    run = Path(target)
    if (run / "config.yaml").is_file():
        import yaml

        data = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8")) or {}
        data["resume"] = None
        return resolve(config_from_dict(merge_overrides(data, list(overrides)))), run
    if run.is_dir():
        raise FileNotFoundError(f"{run} is a folder without config.yaml; give a flowrl run folder or a recipe")
    return resolve(config_from_dict(merge_overrides(load_recipe(target), list(overrides)))), None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def build_pipeline(
    cfg: Any, run: Path | None, device: Any, load_weights: Callable[[Any], dict[str, Any]] | None = None
) -> tuple[Any, dict[str, Any]]:
    """The diffusers pipeline with the run's trained weights loaded, and a record of what was loaded.

    ``load_weights``: instead of a run's export, a function that loads trained weights into the built adapter and
    returns the record's ``trained_weights*`` entries (``flowrl eval checkpoint``: a LoRA of another tool)."""
    from flowrl.benchmarks.models import check_model_path_or_hint
    from flowrl.pipelines.base import adapter_class

    check_model_path_or_hint(cfg.model)  # a toy recipe before its pretraining names the command that makes it
    adapter = adapter_class(cfg.model.pipeline).from_config(cfg.model, device=device, seed=cfg.seed)
    if load_weights is not None:
        return adapter.pipe, {**_model_record(cfg, None), **load_weights(adapter)}
    loaded = adapter.load_trained(run) if run is not None else None
    if run is not None and loaded is None:
        logger.warning("%s holds no lora/ or transformer/ export: generating with the base weights", run)
    weights = None
    if loaded == "LoRA":
        weights = run / "lora" / "pytorch_lora_weights.safetensors"
    elif loaded is not None:
        weights = next(iter(sorted((run / "transformer").glob("*.safetensors"))), None)
    model = {
        **_model_record(cfg, run),
        "trained_weights": loaded,
        "trained_weights_file": str(weights.resolve()) if weights else None,
        "trained_weights_sha256": _sha256(weights) if weights else None,
    }
    return adapter.pipe, model


def _model_record(cfg: Any, run: Path | None) -> dict[str, Any]:
    return {
        "pipeline": cfg.model.pipeline,
        "path": cfg.model.path,
        "tiny_size": cfg.model.tiny_size if cfg.model.path == "tiny" else None,
        "revision": cfg.model.revision,
        "dtype": cfg.model.dtype,
        "build_seed": cfg.seed,
        "run_dir": str(run.resolve()) if run is not None else None,
    }


def settings_from_config(
    cfg: Any,
    images_per_prompt: int,
    seed: int,
    steps: int | None = None,
    guidance: float | None = None,
    negative_prompt: str | None = None,
) -> GenerationSettings:
    """The run's evaluation schedule (``sample.eval_num_steps``, ``sample.eval_guidance_scale``) unless given."""
    if images_per_prompt < 1:
        raise ValueError(f"--images-per-prompt: must be at least 1, got {images_per_prompt}")
    if steps is not None and steps < 1:
        raise ValueError(f"--steps: must be at least 1, got {steps}")
    if guidance is not None and guidance <= 0:
        raise ValueError(f"--guidance: must be > 0, got {guidance}")
    return GenerationSettings(
        steps=steps or cfg.sample.eval_num_steps,
        guidance_scale=float(guidance if guidance is not None else cfg.sample.eval_guidance_scale),
        height=cfg.model.resolution,
        width=cfg.model.resolution,
        max_sequence_length=cfg.model.max_sequence_length,
        seed=seed,
        images_per_prompt=images_per_prompt,
        negative_prompt=negative_prompt,
    )


# ----------------------------------------------------------------------------------------------- record


def _versions() -> dict[str, str]:
    import importlib

    import flowrl

    out = {"flowrl": flowrl.__version__}
    for name in ("torch", "diffusers", "transformers", "peft", "accelerate"):
        try:
            out[name] = getattr(importlib.import_module(name), "__version__", "installed")
        except ImportError:
            out[name] = "not installed"
    return out


def check_record(out_dir: Path, expected: dict[str, Any]) -> None:
    """Refuse to add images to a folder whose ``generation.json`` says other settings or weights made it."""
    path = out_dir / RECORD_NAME
    if not path.is_file():
        return
    old = json.loads(path.read_text(encoding="utf-8"))
    for key, value in expected.items():
        if old.get(key) != value:
            raise ValueError(
                f"{out_dir} already holds images made with other {key} ({path}); use a new --out or the same {key}"
            )


def write_record(out_dir: Path, record: dict[str, Any]) -> Path:
    path = out_dir / RECORD_NAME
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def base_record(settings: GenerationSettings, model: dict[str, Any], num_processes: int) -> dict[str, Any]:
    return {
        "settings": asdict(settings),
        "seed_rule": "image k of prompt i: torch.Generator('cpu').manual_seed(seed + i * images_per_prompt + k)",
        "model": model,
        "versions": _versions(),
        "num_processes": num_processes,
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


# -------------------------------------------------------------------------------------------- sampling


def _save_png(image: Any, path: Path) -> None:
    """Write through a temporary name so that a killed run never leaves a truncated PNG behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    image.save(tmp, format="PNG")
    os.replace(tmp, path)


def generate_images(
    pipe: Any, jobs: Sequence[PromptJob], settings: GenerationSettings, batch_size: int, show_progress: bool = True
) -> int:
    """Draw every missing image of ``jobs``, ``batch_size`` images per pipeline call; returns how many."""
    import torch

    from flowrl.logs import progress

    if batch_size < 1:
        raise ValueError(f"--batch-size: must be at least 1, got {batch_size}")
    for job in jobs:
        if job.before is not None:
            job.before()
    todo = [
        (job.prompt, path, seed, job.pipe_kwargs or {})
        for job in jobs
        for path, seed in zip(job.paths, job.seeds)
        if not path.is_file()
    ]
    batches: list[list[tuple[str, Path, int, dict[str, Any]]]] = []
    for entry in todo:
        if not batches or len(batches[-1]) == batch_size or batches[-1][0][3] != entry[3]:
            batches.append([])
        batches[-1].append(entry)
    for batch in progress(batches, disable=not show_progress or not batches, desc="generate", unit="batch"):
        prompts = [entry[0] for entry in batch]
        negative = [settings.negative_prompt] * len(batch) if settings.negative_prompt else None
        images = pipe(
            prompt=prompts,
            negative_prompt=negative,
            num_inference_steps=settings.steps,
            guidance_scale=settings.guidance_scale,
            height=settings.height,
            width=settings.width,
            max_sequence_length=settings.max_sequence_length,
            generator=[torch.Generator("cpu").manual_seed(entry[2]) for entry in batch],
            output_type="pil",
            **batch[0][3],
        ).images
        for image, entry in zip(images, batch):
            _save_png(image, entry[1])
    return len(todo)


def run_generation(
    target: str,
    overrides: Sequence[str],
    out_dir: str | Path,
    make_jobs: Callable[[GenerationSettings], list[PromptJob]],
    images_per_prompt: int,
    seed: int,
    steps: int | None = None,
    guidance: float | None = None,
    batch_size: int | None = None,
    negative_prompt: str | None = None,
    extra_record: dict[str, Any] | None = None,
    config: tuple[Any, Path | None] | None = None,
    load_weights: Callable[[Any], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Build the model, split the prompts over the processes, draw, and write ``generation.json`` (rank 0).

    ``make_jobs(settings)`` lists every prompt of the benchmark in a fixed order (the same on every
    process). ``config``: the (config, run folder) to use instead of reading ``target`` and ``overrides``;
    ``load_weights``: as ``build_pipeline``'s. Returns the record written to ``out_dir/generation.json``.
    """
    state = process_state()
    cfg, run = config if config is not None else load_config(target, overrides)
    settings = settings_from_config(cfg, images_per_prompt, seed, steps, guidance, negative_prompt)
    jobs = make_jobs(settings)
    if not jobs:
        raise ValueError("no prompts to generate")
    out = Path(out_dir)
    extra = dict(extra_record or {})
    # every process reads the same file, so all refuse alike; settings first, before the slow model build
    check_record(out, {"settings": asdict(settings), **extra})
    pipe, model = build_pipeline(cfg, run, state.device, load_weights)
    check_record(out, {"model": model})
    state.wait_for_everyone()
    record = {**base_record(settings, model, state.num_processes), **extra}
    record["seeds"] = {
        path.relative_to(out).as_posix(): seed for job in jobs for path, seed in zip(job.paths, job.seeds)
    }
    if state.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        write_record(out, {**record, "complete": False})
    state.wait_for_everyone()
    with state.split_between_processes(jobs) as mine:
        written = generate_images(pipe, mine, settings, batch_size or images_per_prompt, state.is_main_process)
    logger.info("process %d drew %d images for %d prompts", state.process_index, written, len(mine))
    state.wait_for_everyone()
    total = sum(1 for job in jobs for path in job.paths if path.is_file())
    record.update(complete=total == sum(len(job.paths) for job in jobs), images=total, prompts=len(jobs))
    record["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if state.is_main_process:
        write_record(out, record)
    return record
