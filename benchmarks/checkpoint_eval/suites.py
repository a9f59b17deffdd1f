"""The benchmarks ``flowrl eval checkpoint`` runs, each a ``Suite``: its prompts, its protocol, where its images go
and how a folder of them is scored.

Built in: ``geneval`` (GenEval's rules, ``flowrl.benchmarks.geneval``), ``ocr`` (Flow-GRPO's OCR test prompts,
its OCR reward) and ``drawbench`` (DrawBench with the six rewards of the papers' table). ``SUITES`` also names
benchmark modules by path, imported only when chosen (``geneval2``, ``dpg``); such a module provides

    load_items(source=None) -> list[dict]          each {"key", "prompt", "metadata"}
    protocol(preset) -> dict                        images_per_prompt, steps, guidance_scale, resolution,
                                                    max_sequence_length, seed (those it fixes)
    score_folder(image_dir, out_dir, judge_options) -> dict      {"metrics": {name: value}} or {"overall": v}

and may provide ``DEFAULT_PRESET`` and ``image_paths(image_dir, item, n) -> list[Path]`` (default
``image_dir/<key>_<k>.png``). Every suite's image folder also holds ``prompts.jsonl`` (one line per prompt: key,
prompt, metadata, its image files relative to the folder), written when the images are drawn.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from flowrl.benchmarks.generation import GenerationSettings, PromptJob, image_seed

from .protocols import (
    DRAWBENCH_METRICS,
    IMAGES_PER_PROMPT,
    OFFICIAL_PROMPTS,
    REWARDS_FILE,
    SCORER_DEFAULTS,
    checkout_of,
    unifiedreward_template,
)

logger = logging.getLogger(__name__)

PROMPTS_FILE = "prompts.jsonl"
SUMMARY_FILE = "metrics.json"  # beside a scorer's own summary.json
DATA_ENV = "FLOWRL_EVAL_DATA"  # a folder holding <benchmark>/test.txt (a DiffusionNFT checkout's dataset/)


class Suite(Protocol):
    name: str

    def load_items(self, source: str | None = None) -> list[dict[str, Any]]: ...

    def protocol(self, preset: str | None) -> dict[str, Any]: ...

    def image_paths(self, image_dir: Path, item: dict[str, Any], n: int) -> list[Path]: ...

    def score_folder(self, image_dir: Path, out_dir: Path, options: dict[str, dict[str, Any]]) -> dict[str, Any]: ...


def prompt_jobs(
    suite: Suite, items: Sequence[dict[str, Any]], image_dir: Path, settings: GenerationSettings, preset: str | None
) -> list[PromptJob]:
    """One job per item, image k of item i seeded ``seed + i * n + k``; the first job's ``before`` (run by the one
    process that draws it, after the folder's record was checked) writes ``prompts.jsonl`` and the suite's side
    files (``write_side_files``, where it has one)."""
    n = settings.images_per_prompt
    own = getattr(suite, "own_jobs", lambda *args: None)(items, image_dir, settings, preset)
    if own is None:
        seeds = [[image_seed(settings.seed, i, n, k) for k in range(n)] for i in range(len(items))]
        jobs = [PromptJob(it["prompt"], suite.image_paths(image_dir, it, n), s) for it, s in zip(items, seeds)]
    else:
        jobs = list(own)
    rows = [
        {**item, "images": [p.relative_to(image_dir).as_posix() for p in job.paths]} for item, job in zip(items, jobs)
    ]

    def write_prompts() -> None:
        image_dir.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        (image_dir / PROMPTS_FILE).write_text(text, encoding="utf-8")
        side = getattr(suite, "write_side_files", None)
        if side is not None:
            side(image_dir, items)

    if jobs:
        first = jobs[0].before

        def before() -> None:
            write_prompts()
            if first is not None:
                first()

        jobs[0].before = before
    return jobs


def read_prompts(image_dir: Path) -> list[dict[str, Any]]:
    path = image_dir / PROMPTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: draw the images first")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --------------------------------------------------------------------------------------------- GenEval


class GenEvalSuite:
    """GenEval: the official 553 prompts (or a metadata file), GenEval's folder layout and rules."""

    name = "geneval"

    def load_items(self, source: str | None = None) -> list[dict[str, Any]]:
        from flowrl.benchmarks.geneval.generate import load_rows

        rows, _ = load_rows(source)
        return [{"key": f"{i:05d}", "prompt": row["prompt"], "metadata": row} for i, row in enumerate(rows)]

    def protocol(self, preset: str | None) -> dict[str, Any]:
        return {"images_per_prompt": IMAGES_PER_PROMPT[self.name]}

    def image_paths(self, image_dir: Path, item: dict[str, Any], n: int) -> list[Path]:
        return [image_dir / item["key"] / "samples" / f"{k:05d}.png" for k in range(n)]

    def write_side_files(self, image_dir: Path, items: Sequence[dict[str, Any]]) -> None:
        """GenEval's layout: each prompt's metadata row in ``<key>/metadata.jsonl`` beside its samples."""
        for item in items:
            (image_dir / item["key"] / "samples").mkdir(parents=True, exist_ok=True)
            (image_dir / item["key"] / "metadata.jsonl").write_text(json.dumps(item["metadata"]), encoding="utf-8")

    def score_folder(self, image_dir: Path, out_dir: Path, options: dict[str, dict[str, Any]]) -> dict[str, Any]:
        from flowrl.benchmarks.geneval.detect import (
            DEFAULT_CLIP_ARCH,
            DEFAULT_CLIP_PRETRAINED,
            DEFAULT_DETECTOR,
            ClipColorClassifier,
            QueryInstanceDetector,
        )
        from flowrl.benchmarks.geneval.rules import RuleConfig
        from flowrl.benchmarks.geneval.scoring import score_folder

        opts = dict(options.get(self.name, {}))
        device = opts.pop("device", None)
        batch = int(opts.pop("batch_size", 8))
        detector_id = opts.pop("detector", DEFAULT_DETECTOR)
        arch = opts.pop("clip_arch", DEFAULT_CLIP_ARCH)
        pretrained = opts.pop("clip_pretrained", DEFAULT_CLIP_PRETRAINED)
        rules = RuleConfig.from_options([f"{k}={v}" for k, v in opts.items()])  # the rest: rule options
        floor = min(rules.threshold, rules.counting_threshold)
        detector = QueryInstanceDetector.from_pretrained(detector_id, device=device, min_score=floor)
        colors = ClipColorClassifier.from_pretrained(arch, pretrained, device=device)
        _, summary = score_folder(image_dir, detector, colors, rules, out_dir=out_dir, batch_size=batch)
        # GenEval's overall (the mean of the task accuracies), then the mean over images (DiffusionNFT's
        # evaluation.py prints this one as "accuracy") and each task's accuracy
        metrics = {"geneval": summary["overall"], "geneval/images": summary["correct_images"]}
        metrics.update({f"geneval/{task}": t["accuracy"] for task, t in summary["tasks"].items()})
        return {"metrics": metrics, "images": summary["images"], "summary": summary}


# -------------------------------------------------------------------------------------- reward benchmarks


def prompt_file(name: str, source: str | None, origin: str) -> Path:
    """``source`` (a file, or a folder holding ``<name>/test.txt`` or ``test.txt``), else ``$FLOWRL_EVAL_DATA``'s;
    a missing one is a one-line error saying where the file comes from."""
    root = source or os.environ.get(DATA_ENV)
    if root:
        path = Path(root).expanduser()
        for candidate in (path, path / name / "test.txt", path / "dataset" / name / "test.txt", path / "test.txt"):
            if candidate.is_file():
                return candidate
        raise FileNotFoundError(f"{name}: no prompt file at {root!r} (looked for {name}/test.txt and test.txt)")
    raise FileNotFoundError(
        f"{name}: its prompts are not shipped with flowrl; give --prompts {name}=PATH ({origin}) or set "
        f"${DATA_ENV} to a folder holding {name}/test.txt"
    )


def distinct_prompts(path: Path) -> tuple[list[str], dict[str, Any]]:
    """The file's prompts, each once, in first-seen order, and a record (path, rows, sha256)."""
    text = path.read_text(encoding="utf-8")
    rows = [line.strip() for line in text.splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"{path}: no prompts")
    seen: dict[str, int] = {}
    for row in rows:
        seen[row] = seen.get(row, 0) + 1
    record = {"file": str(path.resolve()), "rows": len(rows), "prompts": len(seen)}
    record["sha256"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return list(seen), record


def prompt_file_note(name: str, record: dict[str, Any] | None) -> str:
    """Whether the prompt file read is the published one (its sha256 against ``OFFICIAL_PROMPTS``)."""
    if record is None:
        return "read from the images' prompts.jsonl"
    official = OFFICIAL_PROMPTS.get(name)
    if official is not None and record["sha256"] == official[0]:
        return f"the published file ({official[1]}), {record['rows']} rows"
    return f"{record['file']}: {record['rows']} rows, sha256 {record['sha256'][:12]} (not the published file)"


def _column_values(output: Any, read: str, factor: float) -> list[float]:
    values = output.scores if read == "score" else output.details[read]
    return [float(v) * factor for v in list(values)]


def score_images(
    rows: Sequence[dict[str, Any]], image_dir: Path, metrics: dict[str, tuple[str, str, float]], options: dict
) -> list[dict[str, Any]]:
    """Every image of ``rows`` scored by each metric's reward (built with its protocol options and the user's,
    one reward at a time): one dict per image with the metric values."""
    import numpy as np
    import torch
    from PIL import Image

    from flowrl.reward_models import build_reward

    images = [(r, k, image_dir / rel) for r in rows for k, rel in enumerate(r["images"])]
    missing = [str(p) for _, _, p in images if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"{len(missing)} images missing, e.g. {missing[0]}: draw them first")
    out = [
        {"key": r["key"], "k": k, "file": p.relative_to(image_dir).as_posix(), "prompt": r["prompt"]}
        for r, k, p in images
    ]
    for column, (reward_name, read, factor) in metrics.items():
        opts = {**SCORER_DEFAULTS.get(reward_name, {}), **options.get(reward_name, {})}
        batch = int(opts.pop("batch_size", 8))
        reward = build_reward(reward_name, **opts)
        for start in range(0, len(images), batch):
            chunk = images[start : start + batch]
            pixels = (
                torch.stack(
                    [torch.from_numpy(np.array(Image.open(p).convert("RGB"))).permute(2, 0, 1) for _, _, p in chunk]
                ).float()
                / 255.0
            )  # (B, 3, H, W) in [0, 1]
            result = reward(
                pixels, [r["prompt"] for r, _, _ in chunk], [dict(r.get("metadata") or {}) for r, _, _ in chunk]
            )
            for row, value in zip(out[start : start + batch], _column_values(result, read, factor)):
                row[column] = value
        del reward
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


class RewardSuite:
    """A prompt file scored by rewards: ``metrics`` maps a column to (reward, value read, factor)."""

    def __init__(self, name: str, metrics: dict[str, tuple[str, str, float]], origin: str):
        self.name, self.metrics, self.origin = name, metrics, origin
        self.selected: list[str] | None = None  # --metrics: a subset of the columns

    def load_items(self, source: str | None = None) -> list[dict[str, Any]]:
        path = prompt_file(self.name, source, self.origin)
        prompts, self.record = distinct_prompts(path)
        self.checkout = checkout_of(path)  # a DiffusionNFT / flow_grpo checkout: its UnifiedReward question too
        return [{"key": f"{i:05d}", "prompt": p, "metadata": {}} for i, p in enumerate(prompts)]

    def judge_template(self, options: dict[str, dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], str]:
        """UnifiedReward's question: the user's ``template``, else the one in the prompts' checkout
        (``flow_grpo/rewards.py``), else flowrl's own; the options to score with and where it came from."""
        given = options.get("unifiedreward", {})
        if "template" in given or "template_from" in given:
            return options, "given with --option"
        if getattr(self, "checkout", None) is None:
            return options, "flowrl's own (not the papers'): give the prompts as a DiffusionNFT checkout to use its"
        template = unifiedreward_template(self.checkout / REWARDS_FILE)
        source = f"{self.checkout / REWARDS_FILE} (evaluate_image's question)"
        return {**options, "unifiedreward": {**given, "template": template}}, source

    def protocol(self, preset: str | None) -> dict[str, Any]:
        return {"images_per_prompt": IMAGES_PER_PROMPT[self.name]}

    def image_paths(self, image_dir: Path, item: dict[str, Any], n: int) -> list[Path]:
        return [image_dir / f"{item['key']}_{k}.png" for k in range(n)]

    def columns(self) -> dict[str, tuple[str, str, float]]:
        if self.selected is None:
            return self.metrics
        return {c: spec for c, spec in self.metrics.items() if c in self.selected}

    def score_folder(self, image_dir: Path, out_dir: Path, options: dict[str, dict[str, Any]]) -> dict[str, Any]:
        columns = self.columns()
        notes = {}
        if any(reward == "unifiedreward" for reward, _, _ in columns.values()):
            options, notes["unifiedreward_template"] = self.judge_template(options)
        rows = score_images(read_prompts(image_dir), image_dir, columns, options)
        out_dir.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        (out_dir / "scores.jsonl").write_text(text, encoding="utf-8")
        metrics = {c: _mean([r[c] for r in rows]) for c in columns}
        notes["prompts"] = prompt_file_note(self.name, getattr(self, "record", None))
        return {"metrics": metrics, "images": len(rows), "notes": notes}


# ------------------------------------------------------------------------------------ modules by path


class ModuleSuite:
    """A benchmark in its own module (see the module docstring), imported when chosen. ``headline``: the keys of
    its summary shown in the table (numbers, or mappings shown as ``<key>/<name>`` rows), when it returns no
    ``metrics``."""

    def __init__(self, name: str, module: str, headline: Sequence[str] = ("overall",)):
        self.name, self.module, self.headline = name, module, tuple(headline)

    def _mod(self) -> Any:
        try:
            return importlib.import_module(self.module)
        except ModuleNotFoundError as exc:
            if exc.name and self.module.startswith(exc.name):
                raise ValueError(f"{self.name}: {self.module} is not part of this flowrl version") from None
            raise

    def load_items(self, source: str | None = None) -> list[dict[str, Any]]:
        return list(self._mod().load_items(source))

    def preset_of(self, preset: str | None) -> str | None:
        """``preset``, else the module's default (``DEFAULT_PRESET``, or the one its ``protocol()`` names)."""
        if preset is not None:
            return preset
        mod = self._mod()
        return getattr(mod, "DEFAULT_PRESET", None) or mod.protocol().get("preset")

    def protocol(self, preset: str | None) -> dict[str, Any]:
        return dict(self._mod().protocol(self.preset_of(preset)))

    def image_paths(self, image_dir: Path, item: dict[str, Any], n: int) -> list[Path]:
        return [image_dir / f"{item['key']}_{k}.png" for k in range(n)]

    def own_jobs(self, items: Sequence[dict[str, Any]], image_dir: Path, settings: GenerationSettings, preset) -> Any:
        """The module's ``prompt_jobs(items, out_dir, settings, preset)`` (its seeds, sigma grid, file names), or
        its ``generate`` submodule's; None: flowrl's (``<key>_<k>.png``, seed + i * n + k)."""
        mod = self._mod()
        make = getattr(mod, "prompt_jobs", None)
        if make is None:
            try:
                make = getattr(importlib.import_module(f"{self.module}.generate"), "prompt_jobs", None)
            except ModuleNotFoundError:
                make = None
        if make is None:
            return None
        takes_preset = len(inspect.signature(make).parameters) >= 4
        return (
            make(items, image_dir, settings, self.preset_of(preset))
            if takes_preset
            else make(items, image_dir, settings)
        )

    def score_folder(self, image_dir: Path, out_dir: Path, options: dict[str, dict[str, Any]]) -> dict[str, Any]:
        result = dict(self._mod().score_folder(image_dir, out_dir, options.get(self.name, {})))
        if "metrics" in result:
            return result
        metrics: dict[str, float] = {}
        for key in self.headline:
            value = result.get(key)
            if isinstance(value, dict):
                metrics.update({f"{key}/{k}": float(v) for k, v in value.items() if isinstance(v, (int, float))})
            elif isinstance(value, (int, float)):
                metrics[key] = float(value)
        if not metrics:
            raise RuntimeError(f"{self.name}: {self.module}.score_folder returned none of {', '.join(self.headline)}")
        return {**result, "metrics": metrics, "images": result.get("scored_images", result.get("images"))}


DRAWBENCH_ORIGIN = "dataset/drawbench/test.txt of a NVlabs/DiffusionNFT checkout, 200 prompts x 5 rows"
OCR_ORIGIN = "dataset/ocr/test.txt of a yifan123/flow_grpo or NVlabs/DiffusionNFT checkout, 1,018 prompts"

# name -> a factory (built in), or "module.path" / ("module.path", headline summary keys) imported when chosen
SUITES: dict[str, Any] = {
    "geneval": GenEvalSuite,
    "ocr": lambda: RewardSuite("ocr", {"ocr": ("ocr", "score", 1.0)}, OCR_ORIGIN),
    "drawbench": lambda: RewardSuite("drawbench", dict(DRAWBENCH_METRICS), DRAWBENCH_ORIGIN),
    # GenEval 2: Soft-TIFA GM is the headline (x 100), then AM, TIFA and the per-skill AM
    "geneval2": ("flowrl.benchmarks.geneval2", ("soft_tifa_gm", "soft_tifa_am", "tifa", "per_skill_am")),
    # DPG-Bench: the DPG score (x 100) and its five level-1 categories
    "dpg": ("flowrl.benchmarks.dpgbench", ("dpg_score", "l1_categories")),
}


def get_suite(name: str) -> Suite:
    """The suite ``name``; an unknown one is refused in one line listing the known ones."""
    if name not in SUITES:
        raise ValueError(f"--benchmarks: unknown benchmark {name!r}; choose from {', '.join(SUITES)}")
    entry = SUITES[name]
    if isinstance(entry, str):
        return ModuleSuite(name, entry)
    if isinstance(entry, tuple):
        return ModuleSuite(name, *entry)
    return entry()
