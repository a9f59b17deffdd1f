"""UniGenBench images drawn with a run's weights: ``OUT/{index}_{k}.png`` plus ``OUT/generation.json``.

Image ``k`` of the prompt with id ``index`` uses seed ``seed + index * images_per_prompt + k``
(``flowrl.benchmarks.generation``). Invalid prompt rows are skipped (they are reported when judging).
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
    return [
        PromptJob(
            case.prompt,
            [out / image_name(case.index, k) for k in range(n)],
            [image_seed(settings.seed, case.index, n, k) for k in range(n)],
        )
        for case in prompts.cases
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
                "limit": limit,
            },
        },
    )
