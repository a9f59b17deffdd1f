"""Scoring images with GenEval: detect -> filter -> colour -> rules, per image and per folder, and the summary.

Folder layout (GenEval's): ``<image_dir>/<NNNNN>/metadata.jsonl`` holds one JSON object (the prompt's
metadata row, read with ``json.load`` despite the name) and ``<NNNNN>/samples/<k>.png`` its images.
Sub-folders whose name is not all digits and files not named ``<digits>.png`` are skipped.

Summary (GenEval's ``summary_scores.py``): task accuracy = mean ``correct`` over the task's images;
**overall = unweighted mean of the task accuracies**; correct prompts = share of prompts (grouped by
their metadata) with at least one correct image. Tasks are listed in GenEval's task order.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from .constants import TASKS
from .detect import ColorClassifier, Detector
from .prompts import check_metadata
from .rules import ClassDetections, Judgement, RuleConfig, colour_requests, filter_detections, judge

logger = logging.getLogger(__name__)

_IMAGE_NAME = re.compile(r"\d+\.png")
_OVERALL_NOTE = "Overall = unweighted mean of the task accuracies."


@dataclass
class ImageResult:
    """The verdicts on one image and the detections they were made from (filtered, colour-labelled)."""

    judgement: Judgement
    detections: dict[str, ClassDetections]


class GenEvalScorer:
    """Detector + colour classifier + rule options; ``judge(images, metadata)`` scores a batch."""

    def __init__(self, detector: Detector, colors: ColorClassifier | None = None, rules: RuleConfig | None = None):
        self.detector = detector
        self.colors = colors
        self.rules = rules or RuleConfig()

    def prepare(
        self, image: Image.Image, raw: Mapping[str, ClassDetections], metadata: Mapping[str, Any]
    ) -> dict[str, ClassDetections]:
        """Filter raw detections for the row's tag and colour-label the boxes its clauses look at."""
        dets = filter_detections(raw, metadata["tag"], self.rules)
        for name, k in colour_requests(metadata).items():
            if name not in dets:
                continue
            if self.colors is None:
                raise ValueError(f"{metadata['prompt']!r} has a colour clause but no colour classifier was given")
            head = dets[name].head(k)
            labels: list[str | None] = list(self.colors(image, head, name))
            dets[name].colors = labels + [None] * (len(dets[name]) - len(head))
        return dets

    def judge(self, images: Sequence[Image.Image], metadata: Sequence[Mapping[str, Any]]) -> list[ImageResult]:
        if len(images) != len(metadata):
            raise ValueError(f"{len(images)} images but {len(metadata)} metadata rows")
        raws = self.detector(images)
        results = []
        for image, raw, meta in zip(images, raws, metadata):
            dets = self.prepare(image, raw, meta)
            results.append(ImageResult(judge(dets, meta, self.rules), dets))
        return results


# ----------------------------------------------------------------------------------------------- rows


def result_row(filename: str, metadata: Mapping[str, Any], result: ImageResult) -> dict[str, Any]:
    """One results.jsonl row: GenEval's columns plus ``strict``, ``partial`` and the colour labels."""
    j = result.judgement
    dets = result.detections
    return {
        "filename": filename,
        "tag": metadata["tag"],
        "prompt": metadata["prompt"],
        "correct": j.correct,
        "strict": j.strict,
        "partial": round(j.partial, 6),
        "reason": "\n".join(j.reasons),
        "strict_reason": "\n".join(j.strict_reasons),
        "metadata": json.dumps(dict(metadata)),
        "details": json.dumps(
            {k: [[*map(float, b), float(s)] for b, s in zip(d.boxes, d.scores)] for k, d in dets.items()}
        ),
        "colors": json.dumps({k: [c for c in d.colors if c] for k, d in dets.items() if d.colors}),
    }


def iter_folder(image_dir: str | Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(image path, validated metadata) for every sample of a GenEval image folder, in sorted order."""
    root = Path(image_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"GenEval image folder {root} does not exist")
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and p.name.isdigit()):
        meta_path = folder / "metadata.jsonl"
        try:
            metadata = check_metadata(json.loads(meta_path.read_text(encoding="utf-8")), str(meta_path))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{meta_path}: invalid JSON ({exc.msg})") from None
        samples = folder / "samples"
        names = sorted(p.name for p in samples.iterdir()) if samples.is_dir() else []
        for name in names:
            if _IMAGE_NAME.fullmatch(name) and (samples / name).is_file():
                yield samples / name, metadata


def _load_image(path: Path) -> Image.Image:
    with Image.open(path) as image:
        return ImageOps.exif_transpose(image).convert("RGB")


def score_folder(
    image_dir: str | Path,
    detector: Detector,
    colors: ColorClassifier | None = None,
    rules: RuleConfig | None = None,
    out_dir: str | Path | None = None,
    batch_size: int = 8,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Score every image of a GenEval folder; write results.jsonl and the summary when ``out_dir`` is set."""
    scorer = GenEvalScorer(detector, colors, rules)
    items = list(iter_folder(image_dir))
    if not items:
        raise ValueError(f"no GenEval samples (<digits>/samples/<digits>.png) under {image_dir}")
    rows: list[dict[str, Any]] = []
    for start in range(0, len(items), batch_size):
        chunk = items[start : start + batch_size]
        results = scorer.judge([_load_image(p) for p, _ in chunk], [m for _, m in chunk])
        rows.extend(result_row(str(p.relative_to(image_dir)), m, r) for (p, m), r in zip(chunk, results))
        logger.info("GenEval: scored %d / %d images", len(rows), len(items))
    summary = summarize(rows)
    if out_dir is not None:
        write_results(rows, Path(out_dir) / "results.jsonl")
        write_summary(summary, out_dir)
    return rows, summary


# -------------------------------------------------------------------------------------------- summary


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def summarize(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Aggregate per-image rows (ours, or GenEval's own results.jsonl rows) into the benchmark summary."""
    if not rows:
        raise ValueError("no rows to summarise")
    has_strict = all("strict" in r for r in rows)
    tasks: dict[str, dict[str, Any]] = {}
    for tag in [t for t in TASKS if any(r["tag"] == t for r in rows)]:
        sel = [r for r in rows if r["tag"] == tag]
        tasks[tag] = {
            "accuracy": _mean([bool(r["correct"]) for r in sel]),
            "strict_accuracy": _mean([bool(r["strict"]) for r in sel]) if has_strict else None,
            "correct": sum(bool(r["correct"]) for r in sel),
            "images": len(sel),
        }
    by_prompt: dict[str, bool] = {}
    for r in rows:
        by_prompt[r["metadata"]] = by_prompt.get(r["metadata"], False) or bool(r["correct"])
    return {
        "overall": _mean([t["accuracy"] for t in tasks.values()]),
        "strict_overall": _mean([t["strict_accuracy"] for t in tasks.values()]) if has_strict else None,
        "tasks": tasks,
        "missing_tasks": [t for t in TASKS if t not in tasks],
        "images": len(rows),
        "prompts": len(by_prompt),
        "correct_images": _mean([bool(r["correct"]) for r in rows]),
        "correct_prompts": _mean(list(by_prompt.values())),
    }


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def summary_markdown(summary: Mapping[str, Any]) -> str:
    """The summary as a Markdown table (percentages), GenEval's task order, overall last."""
    lines = ["| task | accuracy (%) | strict (%) | correct / images |", "|---|---:|---:|---:|"]
    for tag, t in summary["tasks"].items():
        lines.append(
            f"| {tag} | {_pct(t['accuracy'])} | {_pct(t['strict_accuracy'])} | {t['correct']} / {t['images']} |"
        )
    lines.append(f"| **overall** | **{_pct(summary['overall'])}** | {_pct(summary['strict_overall'])} | |")
    counts = f"Images: {summary['images']}; prompts: {summary['prompts']}"
    shares = f"correct images: {_pct(summary['correct_images'])}%; correct prompts: {_pct(summary['correct_prompts'])}%"
    lines += ["", f"{counts}; {shares} (a prompt counts when any of its images is correct).", _OVERALL_NOTE]
    if summary["missing_tasks"]:
        lines.append(f"Missing tasks (overall is over the others): {', '.join(summary['missing_tasks'])}.")
    return "# GenEval\n\n" + "\n".join(lines) + "\n"


def write_results(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(dict(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def load_results(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a results.jsonl (ours or GenEval's pandas ``orient=records, lines=True`` output)."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def write_summary(summary: Mapping[str, Any], out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``summary.json`` and ``summary.md`` into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "summary.json", out / "summary.md"
    json_path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(summary_markdown(summary), encoding="utf-8")
    logger.info("GenEval overall %.4f over %d images -> %s", summary["overall"], summary["images"], md_path)
    return json_path, md_path
