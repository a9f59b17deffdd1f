"""Sampling and scoring on the toy benchmark: held-out prompts -> images -> detector -> GenEval's rules.

Accuracy is GenEval's: the official rule's ``correct`` per image, averaged per task, and the overall
score the unweighted mean of the six task accuracies (``flowrl.benchmarks.geneval.scoring.summarize``).
Images are sampled with the deterministic Euler ODE from fixed initial noise (``seed``), so two models
evaluated with the same arguments see the same prompts and the same noise (a paired comparison).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flowrl.benchmarks.geneval.scoring import summarize

from . import world
from .detect import judge_images

DEFAULT_EVAL_STEPS = 20  # the toy recipes' sample.eval_num_steps and eval_guidance_scale
DEFAULT_EVAL_GUIDANCE = 1.0


def heldout_rows(per_task: int = 16, split_seed: int = 0) -> list[dict]:
    """``per_task`` held-out rows of every task (cycling through each task's held-out prompts)."""
    return world.balanced_rows(world.split_rows(split_seed).heldout, per_task)


def load_rows(path: str | Path) -> list[dict]:
    """Toy metadata rows from a JSONL file (the format of ``flowrl/prompts/toy_*.jsonl``)."""
    rows = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(f"{path}:{n}: not valid JSON") from None
            rows.append(world.check_row(row, f"{path}:{n}"))
    if not rows:
        raise ValueError(f"{path}: holds no rows")
    return rows


@torch.no_grad()
def draw(adapter, rows: Sequence[dict], steps: int, guidance: float, seed: int, batch_size: int):
    """ODE samples of the rows' prompts in the adapter's media (images (N, 3, H, W) in [0, 1]; the toy
    audio-video mapping), initial noise drawn from ``seed``, ``batch_size`` prompts a rollout."""
    from flowrl.rollout import sample_images

    noise = adapter.initial_noise(len(rows), torch.Generator(adapter.device).manual_seed(seed))
    return sample_images(adapter, [r["prompt"] for r in rows], noise, steps, guidance, batch_size)


def score(images, rows: Sequence[dict]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per-image result rows and GenEval's summary, plus the mean partial credit (``summary["partial"]``)."""
    judgements = judge_images(images, rows)
    results = [
        {"tag": r["tag"], "prompt": r["prompt"], "correct": j.correct, "strict": j.strict,
         "partial": round(j.partial, 6), "reason": "\n".join(j.reasons), "metadata": json.dumps(r)}
        for r, j in zip(rows, judgements)
    ]  # fmt: skip
    summary = summarize(results)
    summary["partial"] = float(np.mean([r["partial"] for r in results]))
    return results, summary


def evaluate_adapter(
    adapter,
    rows: Sequence[dict],
    steps: int = DEFAULT_EVAL_STEPS,
    guidance: float = 1.0,
    seed: int = 0,
    batch_size: int = 64,
) -> tuple[torch.Tensor, list[dict[str, Any]], dict[str, Any]]:
    """Generate and score: (images, result rows, summary)."""
    images = draw(adapter, rows, steps, guidance, seed, batch_size)
    results, summary = score(images, rows)
    return images, results, summary


def adapter_for(pipe, max_sequence_length: int):
    from flowrl.pipelines.sd3 import SD3Adapter

    return SD3Adapter(pipe, pipe.transformer.config.sample_size, max_sequence_length, "cpu")


def brief(summary: dict[str, Any]) -> dict[str, Any]:
    """The numbers worth keeping from a summary: overall, partial credit and each task's accuracy."""
    return {
        "accuracy": round(summary["overall"], 4),
        "partial": round(summary["partial"], 4),
        "images": summary["images"],
        "tasks": {k: round(v["accuracy"], 4) for k, v in summary["tasks"].items()},
    }
