"""DPG-Bench images drawn with a run's weights: ``OUT/{key}_{k}.png`` (k < 4), then ``OUT/grids/{key}.png``,
the 2 x 2 grid that ELLA's ``dist_eval.sh OUT/grids RESOLUTION`` reads (ELLA's README: 4 images per prompt,
gridded 2 x 2, the file named after the prompt). Seeds: flowrl's rule (image k of CSV prompt i:
``seed + i * 4 + k``); ELLA prescribes no resolution, steps, guidance or seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flowrl.benchmarks.generation import GenerationSettings, PromptJob, image_seed, process_state, run_generation

from .scoring import OFFICIAL_CROPS


def protocol(preset: str = "official") -> dict[str, Any]:
    """DPG-Bench's protocol: 4 images per prompt in a 2 x 2 grid, each crop judged; generation settings are
    the model's own (ELLA fixes none)."""
    if preset != "official":
        raise ValueError(f"--preset {preset!r}: DPG-Bench has one protocol, official")
    return {
        "preset": "official",
        "resolution": None,
        "steps": None,
        "guidance": None,
        "images_per_prompt": OFFICIAL_CROPS,
        "grid": "2 x 2, crops top-left, top-right, bottom-left, bottom-right",
        "seed": 42,
        "seed_rule": "seed + row * 4 + k, torch.Generator('cpu') (ELLA fixes none)",
        "source": "TencentQQGYLab/ELLA README and dpg_bench/compute_dpg_bench.py",
    }


def write_grid(paths: Sequence[Path], dest: Path) -> Path:
    """Paste 4 equal images into a 2 x 2 grid (top-left, top-right, bottom-left, bottom-right)."""
    import os

    from PIL import Image

    images = [Image.open(p).convert("RGB") for p in paths]
    w, h = images[0].size
    grid = Image.new("RGB", (2 * w, 2 * h))
    for i, image in enumerate(images):
        grid.paste(image, ((i % 2) * w, (i // 2) * h))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    grid.save(tmp, format="PNG")
    os.replace(tmp, dest)
    return dest


def prompt_jobs(items: Sequence[dict[str, Any]], out_dir: str | Path, settings: GenerationSettings) -> list[PromptJob]:
    out, n = Path(out_dir), settings.images_per_prompt
    return [
        PromptJob(item["prompt"], [out / f"{item['key']}_{k}.png" for k in range(n)],
                  [image_seed(settings.seed, i, n, k) for k in range(n)])
        for i, item in enumerate(items)
    ]  # fmt: skip


def generate_dpg(target: str, items: Sequence[dict[str, Any]], out_dir: str | Path, overrides: Sequence[str] = (),
                 seed: int = 42, steps: int | None = None, guidance: float | None = None,
                 batch_size: int | None = None, prompt_set: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """Draw 4 images per prompt, then write the grids; returns the generation record."""
    record = run_generation(
        target, overrides, out_dir, lambda settings: prompt_jobs(items, out_dir, settings),
        images_per_prompt=OFFICIAL_CROPS, seed=seed, steps=steps, guidance=guidance, batch_size=batch_size,
        extra_record={"benchmark": "dpgbench", "preset": protocol(), "prompt_set": prompt_set or {"prompts": len(items)}},
    )  # fmt: skip
    if process_state().is_main_process:
        out = Path(out_dir)
        for item in items:
            paths = [out / f"{item['key']}_{k}.png" for k in range(OFFICIAL_CROPS)]
            grid = out / "grids" / f"{item['key']}.png"
            if all(p.is_file() for p in paths) and not grid.is_file():
                write_grid(paths, grid)
    return record
