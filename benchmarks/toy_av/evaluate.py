"""Held-out evaluation of the toy audio-video world: ODE samples of the held-out prompts, judged by the detector."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flowrl.benchmarks.toy.evaluate import draw

from . import world

DEFAULT_EVAL_STEPS = 16
DEFAULT_CLIPS_PER_PROMPT = 8


def heldout_rows(clips_per_prompt: int = DEFAULT_CLIPS_PER_PROMPT, split_seed: int = 0) -> list[dict]:
    """Every held-out prompt (``world.split_rows``) ``clips_per_prompt`` times."""
    return [row for row in world.split_rows(seed=split_seed)[1] for _ in range(clips_per_prompt)]


def score(media: dict[str, Any], rows: Sequence[dict]) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Per-clip result rows and the accuracies (``world.summarize``)."""
    judgements = [world.judge(v.numpy(), a.numpy(), r) for v, a, r in zip(media["video"], media["audio"], rows)]
    results = []
    for row, j in zip(rows, judgements):
        d = j.detection
        results.append({"prompt": row["prompt"], "video_ok": j.video_ok, "audio_ok": j.audio_ok, "sync": j.sync,
                        "all_ok": j.all_ok, "video_onset": d.video_onset, "color": d.color if d.video_present else None,
                        "audio_onset": d.audio_onset, "pitch": d.pitch if d.audio_present else None})  # fmt: skip
    return results, {k: round(v, 4) if isinstance(v, float) else v for k, v in world.summarize(judgements).items()}


def evaluate_adapter(
    adapter, rows: Sequence[dict], steps: int = DEFAULT_EVAL_STEPS, guidance: float = 1.0, seed: int = 0
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, float]]:
    """Generate (``toy.evaluate.draw``, 32 prompts a rollout) and score: (media, result rows, accuracies)."""
    media = draw(adapter, rows, steps, guidance, seed, 32)
    results, summary = score(media, rows)
    return media, results, summary
