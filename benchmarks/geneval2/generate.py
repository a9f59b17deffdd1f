"""GenEval 2 images drawn with a run's weights: ``OUT/{key}_{k}.png``, ``OUT/generation.json`` and
``OUT/images.json`` (``{prompt: path of image 0}``, what the official ``evaluation.py`` takes as
``--image_filepath_data``).

Presets (``protocol(preset)``):

* ``unirl``: UniRL's pinned protocol (Tencent-Hunyuan/UniRL#236, ``benchmarks/core/registry.py`` spec
  ``image/geneval2`` and ``benchmarks/core/generate.py``), under which Flow-DPPO reports GenEval 2:
  512 x 512, 40 steps, guidance 1.0 (no CFG), ``max_sequence_length`` 256, one image per prompt, the sigma
  grid ``numpy.linspace(1, 1/steps, steps)`` passed to the pipeline (the scheduler's shift still applies,
  as in diffusers), and image ``s`` of a prompt seeded from the prompt's text:
  ``torch.Generator("cpu").manual_seed((seed + h + s) % 2**31)`` with
  ``h = int.from_bytes(sha256(prompt.encode()).digest()[:4], "big")`` and ``seed`` 42.
* ``flowrl``: the run's own evaluation schedule (``sample.eval_num_steps``, ``eval_guidance_scale``,
  ``model.resolution``), one image per prompt, and flowrl's seed rule (``seed + row * n + k``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flowrl.benchmarks.generation import GenerationSettings, PromptJob, image_seed, process_state, run_generation

PRESETS = ("unirl", "flowrl")
IMAGE_MAP = "images.json"  # {prompt: image 0}, the official script's --image_filepath_data
UNIRL_SEED = 42


def prompt_seed(prompt: str, seed: int, k: int) -> int:
    """UniRL's seed of image ``k`` of ``prompt``: ``(seed + first 4 bytes of sha256(prompt), big-endian + k) % 2**31``."""
    h = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:4], "big")
    return (seed + h + k) % (2**31)


def linspace_sigmas(steps: int) -> list[float]:
    """UniRL's flow-matching sigma grid ``linspace(1, 1/steps, steps)``."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    return [float(s) for s in np.linspace(1.0, 1.0 / steps, steps)]


def protocol(preset: str = "unirl") -> dict[str, Any]:
    """The generation protocol of ``preset`` (see the module docstring); None means "the run's own"."""
    if preset == "unirl":
        return {
            "preset": "unirl",
            "resolution": 512,
            "steps": 40,
            "guidance": 1.0,
            "max_sequence_length": 256,
            "images_per_prompt": 1,
            "sigmas": "linspace(1, 1/steps, steps)",
            "seed": UNIRL_SEED,
            "seed_rule": "(seed + int.from_bytes(sha256(prompt.encode()).digest()[:4], 'big') + k) % 2**31, "
            "torch.Generator('cpu')",
            "source": "Tencent-Hunyuan/UniRL#236 (benchmarks/core/registry.py, benchmarks/core/generate.py)",
        }
    if preset == "flowrl":
        return {
            "preset": "flowrl",
            "resolution": None,
            "steps": None,
            "guidance": None,
            "max_sequence_length": None,
            "images_per_prompt": 1,
            "sigmas": None,
            "seed": 42,
            "seed_rule": "seed + row * images_per_prompt + k, torch.Generator('cpu')",
            "source": "the run's sample.eval_num_steps, sample.eval_guidance_scale and model.resolution",
        }
    raise ValueError(f"--preset {preset!r}: choose one of {', '.join(PRESETS)}")


def prompt_jobs(items: Sequence[dict[str, Any]], out_dir: str | Path, settings: GenerationSettings,
                preset: str) -> list[PromptJob]:  # fmt: skip
    out, n = Path(out_dir), settings.images_per_prompt
    kwargs = {"sigmas": linspace_sigmas(settings.steps)} if preset == "unirl" else None
    jobs = []
    for item in items:
        if preset == "unirl":
            seeds = [prompt_seed(item["prompt"], settings.seed, k) for k in range(n)]
        else:
            seeds = [image_seed(settings.seed, int(item["index"]), n, k) for k in range(n)]
        jobs.append(PromptJob(item["prompt"], [out / f"{item['key']}_{k}.png" for k in range(n)], seeds,
                              pipe_kwargs=kwargs))  # fmt: skip
    return jobs


def generate_geneval2(
    target: str,
    items: Sequence[dict[str, Any]],
    out_dir: str | Path,
    preset: str = "unirl",
    overrides: Sequence[str] = (),
    images_per_prompt: int | None = None,
    seed: int | None = None,
    steps: int | None = None,
    guidance: float | None = None,
    batch_size: int | None = None,
    prompt_set: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Draw every prompt's images under ``preset`` (explicit arguments override it); returns the record."""
    spec = protocol(preset)
    fixed = []
    if spec["resolution"] is not None:
        fixed += [f"model.resolution={spec['resolution']}", f"model.max_sequence_length={spec['max_sequence_length']}"]
    record = run_generation(
        target,
        [*fixed, *overrides],
        out_dir,
        lambda settings: prompt_jobs(items, out_dir, settings, preset),
        images_per_prompt=images_per_prompt or spec["images_per_prompt"],
        seed=spec["seed"] if seed is None else seed,
        steps=steps or spec["steps"],
        guidance=guidance if guidance is not None else spec["guidance"],
        batch_size=batch_size,
        extra_record={"benchmark": "geneval2", "preset": spec, "prompt_set": prompt_set or {"prompts": len(items)}},
    )
    if process_state().is_main_process:  # the official evaluation.py reads {prompt: image path}
        out = Path(out_dir).resolve()
        paths = {item["prompt"]: str(out / f"{item['key']}_0.png") for item in items}
        (out / IMAGE_MAP).write_text(json.dumps(paths, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return record
