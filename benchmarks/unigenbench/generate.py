"""UniGenBench images drawn with a run's weights: ``OUT/{index}_{k}.png`` plus ``OUT/generation.json``.

Image ``k`` of the prompt with id ``index`` uses seed ``seed + index * images_per_prompt + k``
(``flowrl.benchmarks.generation``). Every valid row is drawn (an empty testpoint description is valid, as
in the official code), and so is every invalid row whose index and prompt are fine (unscored here, but the
official scorer, which wants ``{index}_{k}.png`` for every CSV row, can then read the folder; e.g. en_long
index 509, whose JSON is broken at the repository's head and valid at an earlier commit). With ``limit``
only the first ``limit`` valid rows are drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flowrl.benchmarks.generation import GenerationSettings, PromptJob, image_seed, run_generation

from .data import PromptSet
from .evaluate import image_name


def prompt_jobs(prompts: PromptSet, out_dir: str | Path, settings: GenerationSettings) -> list[PromptJob]:
    out, n = Path(out_dir), settings.images_per_prompt
    rows = sorted([(case.index, case.prompt) for case in prompts.cases] + list(prompts.drawable_invalid.items()))
    return [
        PromptJob(
            prompt,
            [out / image_name(index, k) for k in range(n)],
            [image_seed(settings.seed, index, n, k) for k in range(n)],
        )
        for index, prompt in rows
    ]


def generate_unigenbench(
    target: str,
    prompts: PromptSet,
    out_dir: str | Path,
    overrides: Sequence[str] = (),
    images_per_prompt: int = 4,
    seed: int = 42,
    steps: int | None = None,
    guidance: float | None = None,
    batch_size: int | None = None,
    negative_prompt: str | None = None,
    limit: int | None = None,
) -> dict[str, Any]:
    """Draw the images of every valid prompt (the first ``limit``) into ``out_dir``; returns the record."""
    if limit is not None:
        prompts = PromptSet(prompts.source, prompts.language, prompts.cases[:limit], prompts.invalid, prompts.sha256)
    drawn_invalid = sorted(prompts.drawable_invalid)
    return run_generation(
        target,
        overrides,
        out_dir,
        lambda settings: prompt_jobs(prompts, out_dir, settings),
        images_per_prompt=images_per_prompt,
        seed=seed,
        steps=steps,
        guidance=guidance,
        batch_size=batch_size,
        negative_prompt=negative_prompt,
        extra_record={
            "benchmark": "unigenbench",
            "prompt_set": {
                "source": prompts.source,
                "sha256": prompts.sha256,
                "language": prompts.language,
                "prompts": len(prompts.cases),
                "invalid_rows_drawn": drawn_invalid,
                "limit": limit,
            },
        },
    )
