"""``flowrl eval checkpoint``: a base model and a checkpoint drawn and scored on the same benchmarks, side by side.

Folder (``--out``)::

    OUT/base.yaml                            the recipe of a hub id or diffusers folder given as --base
    OUT/checkpoint-lora/pytorch_lora_weights.safetensors
                                             the checkpoint's LoRA in diffusers' layout (what the pipeline loads)
    OUT/<model>/<benchmark>/images/          generation.json, prompts.jsonl and the images (model: base, checkpoint)
    OUT/<model>/<benchmark>/scores/          metrics.json and the per-image scores
    OUT/results.json, OUT/results.md         the table: metric | base | checkpoint | delta
    OUT/report.html                          the table and sample images, base beside checkpoint

Every process of an ``accelerate launch`` draws its share of each folder (``flowrl.benchmarks.generation``);
images already drawn are kept, so a stopped command continues where it stopped, and a folder made with
other settings or weights is refused. The main process then scores each folder (a folder already scored
after its last drawing is not scored again) and writes the table and the page.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .lora import LoraWeights, check_fits, checkpoint_lora, read_lora, sha256_of, transformer_skeleton, write_diffusers
from .protocols import DEFAULT_PRESET, preset_settings
from .suites import SUMMARY_FILE, get_suite, prompt_jobs

logger = logging.getLogger(__name__)

MODELS = ("base", "checkpoint")
RESULTS_JSON, RESULTS_MD, REPORT = "results.json", "results.md", "report.html"
CONVERTED = "checkpoint-lora"
DEFAULT_SEED = 42  # GenEval's diffusers_generate.py default, as flowrl eval geneval


@dataclass
class Request:
    """What ``flowrl eval checkpoint`` was asked (the command line, parsed)."""

    out: Path
    benchmarks: list[str]
    base: str | None = None
    lora: str | None = None
    run: str | None = None
    ema: bool = False
    preset: str = DEFAULT_PRESET
    presets: dict[str, str] = field(default_factory=dict)  # per benchmark (--preset NAME=PRESET)
    prompts: dict[str, str] = field(default_factory=dict)  # per benchmark (--prompts NAME=PATH)
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # per scorer or benchmark (--option)
    metrics: list[str] | None = None
    limit: int | None = None
    images_per_prompt: int | None = None
    steps: int | None = None
    guidance: float | None = None
    seed: int | None = None  # default: the benchmark's protocol's, else DEFAULT_SEED
    batch_size: int | None = None
    overrides: list[str] = field(default_factory=list)


def _say(text: str) -> None:
    from flowrl.benchmarks.generation import process_state

    if process_state().is_main_process:
        print(f"flowrl eval checkpoint: {text}", flush=True)


# ------------------------------------------------------------------------------------------------ the base


def _override(overrides: list[str], key: str) -> str | None:
    given = [o.split("=", 1)[1] for o in overrides if o.startswith(key + "=")]
    return given[-1] if given else None


def family_of_folder(path: str, revision: str | None = None) -> str:
    """The flowrl family whose pipeline class a diffusers folder or hub id's ``model_index.json`` names."""
    from flowrl.pipelines.base import _families_where, pipeline_classes_of

    local = Path(path).expanduser()
    if local.is_dir():
        index_file = local / "model_index.json"
        if not index_file.is_file():
            raise FileNotFoundError(f"--base {path!r}: a folder without model_index.json or config.yaml")
    else:
        from huggingface_hub import hf_hub_download

        try:
            index_file = Path(hf_hub_download(path, "model_index.json", revision=revision))
        except Exception as exc:  # noqa: BLE001 - offline, unknown id, gated: said in one line
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise FileNotFoundError(
                f"--base {path!r}: cannot read its model_index.json ({reason}); give a local folder or a recipe, "
                "or set model.pipeline=FAMILY"
            ) from None
    class_name = json.loads(index_file.read_text(encoding="utf-8")).get("_class_name")
    owners = _families_where(lambda a: class_name in pipeline_classes_of(a))
    if not owners:
        raise ValueError(f"--base {path!r}: holds a {class_name}, which no flowrl family loads")
    return owners[0]


def _looks_like_recipe(base: str) -> bool:
    return base.endswith((".yaml", ".yml")) or ("/" not in base and not Path(base).exists())


def base_target(req: Request) -> str:
    """What ``load_config`` reads for the base: a recipe, a run folder (its config, not its weights), or the
    recipe written to ``OUT/base.yaml`` for a hub id or diffusers folder."""
    if req.base is None:
        if req.run is None:
            raise ValueError("give --base (a hub id, diffusers folder, recipe or run folder), --run, or both")
        return str(run_folder_of(Path(req.run)))
    if (Path(req.base).expanduser() / "config.yaml").is_file() or _looks_like_recipe(req.base):
        return req.base
    import yaml

    family = _override(req.overrides, "model.pipeline") or family_of_folder(
        req.base, _override(req.overrides, "model.revision")
    )
    path = req.out / "base.yaml"
    data = {"model": {"pipeline": family, "path": req.base}}
    if path.is_file() and yaml.safe_load(path.read_text(encoding="utf-8")) != data:
        raise ValueError(f"--out {str(req.out)!r} was made with another --base ({path}); use a new --out")
    from flowrl.benchmarks.generation import process_state

    state = process_state()
    if state.is_main_process:
        req.out.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    state.wait_for_everyone()
    return str(path)


def run_folder_of(path: Path) -> Path:
    """A flowrl run folder, or the run two levels above one of its checkpoints."""
    if (path / "config.yaml").is_file():
        return path
    from flowrl.sample import _checkpoint_run, checkpoint_folder

    folder, _ = checkpoint_folder(str(path))
    return _checkpoint_run(folder)


# --------------------------------------------------------------------------------------------- the weights


@dataclass
class Weights:
    """The checkpoint's trained weights: a LoRA (any format) or a flowrl full fine-tune, and how to load them."""

    description: str
    lora: LoraWeights | None = None
    load_full: Callable[[Any], str] | None = None  # loads full weights into an adapter; returns what
    source: Path | None = None


def resolve_weights(req: Request, base_family: str) -> Weights:
    """The weights of ``--lora`` or ``--run``; a flowrl run of another family than the base's is refused."""
    from flowrl.benchmarks.generation import load_config

    if req.lora is not None:
        lora = read_lora(req.lora)
        return Weights(lora.describe(), lora=lora, source=lora.path)
    path = Path(req.run).expanduser()
    run = run_folder_of(path)
    cfg, _ = load_config(str(run))
    if cfg.model.pipeline != base_family:
        raise ValueError(
            f"--run {req.run!r} trained model.pipeline={cfg.model.pipeline}, but the base is of family {base_family}"
        )
    if path != run:  # a checkpoint: RUN/checkpoints/iter-N
        if cfg.train.lora.enabled:
            lora = checkpoint_lora(path, cfg.train.lora, req.ema)
            return Weights(lora.describe(), lora=lora, source=lora.path)
        from flowrl.sample import load_checkpoint_weights

        name = "ema.safetensors" if req.ema else "trainable.safetensors"
        return Weights(
            f"flowrl checkpoint, full weights ({name})",
            load_full=lambda adapter: load_checkpoint_weights(adapter, cfg, path, req.ema),
            source=path / name,
        )
    if req.ema:
        raise ValueError("--ema: needs a checkpoint (RUN/checkpoints/iter-N); a run's export is already its EMA")
    if (run / "lora").is_dir():
        lora = read_lora(run / "lora")
        lora.format, lora.tool = "flowrl", "flowrl run export (lora/, diffusers layout)"
        return Weights(lora.describe(), lora=lora, source=lora.path)
    if (run / "transformer" / "config.json").is_file():
        files = sorted((run / "transformer").glob("*.safetensors"))
        return Weights(
            "flowrl run export, fine-tuned transformer/",
            load_full=lambda adapter: adapter.load_trained(run),
            source=files[0] if files else None,
        )
    raise ValueError(f"--run {req.run!r}: holds no export (lora/ or transformer/); give one of its checkpoints")


def weights_loader(weights: Weights, converted: Path | None, family: str) -> Callable[[Any], dict[str, Any]]:
    """What ``run_generation`` calls on the built adapter: check the LoRA against the transformer (before any
    image is drawn), load it through the pipeline's ``load_lora_weights``; or load the full weights."""

    def load(adapter: Any) -> dict[str, Any]:
        if weights.lora is not None:
            check_fits(
                weights.lora, adapter.transformer, family, "--lora" if weights.lora.format != "flowrl" else "--run"
            )
            adapter.pipe.load_lora_weights(str(converted))
            loaded = f"LoRA ({weights.lora.tool})"
        else:
            loaded = weights.load_full(adapter)
        return {
            "trained_weights": loaded,
            "trained_weights_file": str(weights.source.resolve()) if weights.source else None,
            "trained_weights_sha256": sha256_of(weights.source)
            if weights.source and weights.source.is_file()
            else None,
        }

    return load


def prepare_lora(req: Request, weights: Weights, cfg: Any) -> Path | None:
    """Check a LoRA against the base transformer built on the meta device (before the base weights load, where
    its config can be read), and write its diffusers file (main process); returns the folder."""
    from flowrl.benchmarks.generation import process_state
    from flowrl.pipelines.base import adapter_class, pipeline_classes_of, tiny_paths_of

    if weights.lora is None:
        return None
    family = cfg.model.pipeline
    if cfg.model.path not in tiny_paths_of(adapter_class(family)):
        skeleton = transformer_skeleton(cfg.model.path, cfg.model.revision)
        if skeleton is not None:
            check_fits(weights.lora, skeleton, family, "--lora" if req.lora else "--run")
    folder = req.out / CONVERTED
    state = process_state()
    if state.is_main_process:
        import diffusers

        classes = pipeline_classes_of(adapter_class(family))
        if not classes:
            raise ValueError(f"family {family} names no diffusers pipeline class to write its LoRA for")
        write_diffusers(weights.lora, getattr(diffusers, classes[0]), folder)
    state.wait_for_everyone()
    return folder


# ------------------------------------------------------------------------------------------- generation


def benchmark_settings(req: Request, suite: Any) -> tuple[dict[str, Any], str | None]:
    """The settings one benchmark is drawn with (its protocol, the preset's shared settings, the command line
    last) and the preset name handed to the suite."""
    builtin = not hasattr(suite, "preset_of")
    preset = req.presets.get(suite.name, req.preset if builtin else None)
    preset = preset if builtin else suite.preset_of(preset)  # a module's own default when none is given
    merged: dict[str, Any] = preset_settings(preset) if builtin else {}
    for key, value in suite.protocol(preset).items():
        key = {"guidance": "guidance_scale"}.get(key, key)
        if value is not None and key in ("images_per_prompt", "steps", "guidance_scale", "resolution",
                                          "max_sequence_length", "seed"):  # fmt: skip
            merged[key] = value
    given = {
        "images_per_prompt": req.images_per_prompt,
        "steps": req.steps,
        "guidance_scale": req.guidance,
        "seed": req.seed,
    }
    merged.update({k: v for k, v in given.items() if v is not None})
    merged.setdefault("seed", DEFAULT_SEED)
    merged.setdefault("images_per_prompt", 1)
    return merged, preset


def _config_overrides(settings: dict[str, Any], user: list[str]) -> list[str]:
    """The benchmark's resolution and text length as config overrides, the user's ``key=value`` after them."""
    out = [f"model.resolution={settings['resolution']}"] if "resolution" in settings else []
    if "max_sequence_length" in settings:
        out.append(f"model.max_sequence_length={settings['max_sequence_length']}")
    return out + list(user)


def draw(req: Request, suite: Any, items: list, model: str, target: str, weights: Any, preset: str | None,
         settings: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """Draw (the missing images of) one benchmark for one model; returns its generation record."""
    from flowrl.benchmarks.generation import load_config, run_generation

    image_dir = req.out / model / suite.name / "images"
    config = load_config(target, _config_overrides(settings, req.overrides))
    return run_generation(
        target,
        [],
        image_dir,
        lambda s: prompt_jobs(suite, items, image_dir, s, preset),
        images_per_prompt=int(settings["images_per_prompt"]),
        seed=int(settings["seed"]),
        steps=settings.get("steps"),
        guidance=settings.get("guidance_scale"),
        batch_size=req.batch_size,
        extra_record={"benchmark": suite.name, "preset": preset},  # more prompts may be added to the folder later
        config=(config[0], None),
        load_weights=weights,
    )


# ---------------------------------------------------------------------------------------------- scoring


def images_fingerprint(image_dir: Path) -> str:
    """A hash of the folder's images (names, sizes, modification times): it changes when an image is drawn."""
    import hashlib

    entries = sorted(
        f"{p.relative_to(image_dir).as_posix()} {p.stat().st_size} {p.stat().st_mtime_ns}"
        for p in image_dir.rglob("*.png")
    )
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()


def score(req: Request, suite: Any, model: str, record: dict[str, Any]) -> dict[str, Any]:
    """Score one folder (main process), unless it was scored with these images and metrics; returns its summary.

    ``scores/images.sha256`` holds the fingerprint of the images a scoring started on: scores of other images
    (more prompts drawn since) are removed first; a scoring of the same images that was stopped is continued
    where the benchmark's scorer can (GenEval 2, DPG-Bench: ``resume``)."""
    import shutil

    base = req.out / model / suite.name
    out = base / "scores"
    done = out / SUMMARY_FILE
    fingerprint = images_fingerprint(base / "images")
    if done.is_file():
        summary = json.loads(done.read_text(encoding="utf-8"))
        if summary.get("images_fingerprint") == fingerprint and summary.get("metrics_asked") == req.metrics:
            return summary
    started = out / "images.sha256"
    if out.is_dir() and (not started.is_file() or started.read_text(encoding="utf-8") != fingerprint):
        shutil.rmtree(out)  # the scores of other images: this command's own, stale
    out.mkdir(parents=True, exist_ok=True)
    started.write_text(fingerprint, encoding="utf-8")
    if hasattr(suite, "selected"):
        suite.selected = req.metrics
    options = {name: dict(values) for name, values in req.options.items()}
    if hasattr(suite, "preset_of"):  # a module's scorer: the prompts it drew and how many images each
        opts = options.setdefault(suite.name, {})
        opts.setdefault("images_per_prompt", record["settings"]["images_per_prompt"])
        opts.setdefault("pic_num", min(4, record["settings"]["images_per_prompt"]))  # DPG-Bench's crops
        if req.prompts.get(suite.name):
            opts.setdefault("prompts", req.prompts[suite.name])
        if req.limit:
            opts.setdefault("limit", req.limit)
        opts.setdefault("resume", True)  # the same images (above): continue a stopped judging
    result = suite.score_folder(base / "images", out, options)
    summary = {
        "metrics": result["metrics"],
        "images": result.get("images"),
        "notes": result.get("notes") or {},
        "images_fingerprint": fingerprint,
        "metrics_asked": req.metrics,
    }
    done.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


# -------------------------------------------------------------------------------------------------- run


def evaluate_checkpoint(req: Request) -> dict[str, Any] | None:
    """Draw and score the base and the checkpoint on every benchmark; write the table and the page. Returns the
    results (None on the processes other than the main one)."""
    from flowrl.benchmarks.generation import load_config, process_state

    from .page import results_markdown, write_page

    suites = [get_suite(name) for name in req.benchmarks]
    items = {}
    for suite in suites:  # every prompt file first: a missing one fails before any model loads
        rows = suite.load_items(req.prompts.get(suite.name))
        items[suite.name] = rows[: req.limit] if req.limit else rows
        suite.items = items[suite.name]
    target = base_target(req)
    base_cfg, _ = load_config(target, list(req.overrides))
    weights = resolve_weights(req, base_cfg.model.pipeline)
    converted = prepare_lora(req, weights, base_cfg)
    loader = weights_loader(weights, converted, base_cfg.model.pipeline)
    _say(f"base {base_cfg.model.path} ({base_cfg.model.pipeline}); checkpoint: {weights.description}")
    records: dict[str, dict[str, dict[str, Any]]] = {m: {} for m in MODELS}
    plan = {}
    # the checkpoint first: its LoRA is checked on the built transformer before any image is drawn
    steps = [(suite, model) for suite in suites for model in reversed(MODELS)]
    for i, (suite, model) in enumerate(steps, start=1):
        settings, preset = plan.get(suite.name) or benchmark_settings(req, suite)
        plan[suite.name] = (settings, preset)
        n = len(items[suite.name]) * int(settings["images_per_prompt"])
        _say(f"[{i}/{len(steps)}] {model} · {suite.name}: {n} images")
        records[model][suite.name] = draw(
            req, suite, items[suite.name], model, target, loader if model == "checkpoint" else None, preset, settings
        )
        _release_memory()  # the pipeline of this drawing is gone: give its accelerator memory back
    state = process_state()
    state.wait_for_everyone()
    if not state.is_main_process:
        return None
    summaries: dict[str, dict[str, Any]] = {}
    for suite in suites:
        for model in MODELS:
            _say(f"scoring {model} · {suite.name}")
            summaries.setdefault(suite.name, {})[model] = score(req, suite, model, records[model][suite.name])
    results = {
        "benchmarks": {
            s.name: {
                "preset": plan[s.name][1],
                "settings": records["base"][s.name]["settings"],
                "prompts": len(items[s.name]),
                "metrics": table_rows(summaries[s.name]),
                "notes": summaries[s.name]["checkpoint"].get("notes") or {},
            }
            for s in suites
        },
        "models": {m: records[m][suites[0].name]["model"] for m in MODELS},
        "checkpoint": {
            "description": weights.description,
            "format": weights.lora.format if weights.lora else "flowrl",
            "notes": weights.lora.notes if weights.lora else [],
            "converted": str((converted / "pytorch_lora_weights.safetensors").resolve()) if converted else None,
        },
    }
    (req.out / RESULTS_JSON).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (req.out / RESULTS_MD).write_text(results_markdown(results), encoding="utf-8")
    write_page(req.out, results, {s.name: items[s.name] for s in suites})
    return results


def _release_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def table_rows(summary: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """metric -> {base, checkpoint, delta} for the metrics both models have."""
    base, ckpt = summary["base"]["metrics"], summary["checkpoint"]["metrics"]
    return {m: {"base": base[m], "checkpoint": ckpt[m], "delta": ckpt[m] - base[m]} for m in base if m in ckpt}
