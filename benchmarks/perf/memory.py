"""Peak memory and throughput per recipe, measured next to the pre-flight estimate.

    python -m flowrl.benchmarks.perf.memory [--recipes tiny-cpu toy-flow-grpo] [--iterations 3] [key=value ...]

Each recipe trains for ``--iterations`` iterations in a fresh process (``flowrl train``), so that the
peak is the run's own: ``memory/peak_gib`` is the process's resident high-water mark (``VmHWM``) on a
CPU and ``torch.cuda.max_memory_allocated`` on a GPU. Throughput is the median ``throughput/images_per_s``
of the iterations after the first. The estimate is ``flowrl validate RECIPE --estimate`` for the same
device. Recipes whose model cannot be loaded here (a hub id offline, a missing toy model) are reported
as skipped with the reason, not as a failure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

DEFAULT_RECIPES = ["tiny-cpu", "toy-flow-grpo"]


def measure(recipe: str, iterations: int, overrides: list[str], device: str) -> dict:
    """Train ``recipe`` briefly in a subprocess; its peak memory, throughput and the estimate."""
    from flowrl.estimate import estimate
    from flowrl.resolve import resolve_config

    with tempfile.TemporaryDirectory(prefix="flowrl-mem-") as out:
        args = [f"output_dir={out}", f"train.iterations={iterations}", "log.eval_every=0", *overrides]
        cfg = resolve_config(recipe, args)
        env = dict(os.environ, HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"))
        proc = subprocess.run(
            [sys.executable, "-m", "flowrl", "train", recipe, *args],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            reason = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
            return {"recipe": recipe, "skipped": reason[:160]}
        rows = [json.loads(line) for line in Path(out, "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "throughput/images_per_s" in r]
    est = estimate(cfg, world_size=1, device=device)
    later = rows[1:] or rows
    return {
        "recipe": recipe,
        "samples_per_iteration": cfg.sample.prompts_per_iteration * cfg.sample.group_size,
        "peak_gib": max(r["memory/peak_gib"] for r in rows),
        "images_per_s": statistics.median(r["throughput/images_per_s"] for r in later),
        "seconds_per_iteration": statistics.median(r["timing_s/iteration"] for r in later),
        "est_peak_gib": est.peak_gib,
        "est_seconds_per_iteration": est.seconds_per_iteration,
    }


def results_table(head: list[str], results: list[dict], key: str, cells: Callable[[dict], str]) -> str:
    """A Markdown table: the ``head`` lines, then a row a result, ``r[key]`` and ``cells(r)`` (the other columns,
    joined by " | "), a skipped result as its key and the reason."""
    lines = list(head)
    empty = " |" * (head[0].count("|") - 4)  # a column count of n has n + 1 bars; n - 3 cells stay empty
    for r in results:
        rest = f"skipped: {r['skipped']} |{empty}" if "skipped" in r else cells(r)
        lines.append(f"| {r[key]} | {rest} |")
    return "\n".join(lines)


def table(results: list[dict], device: str) -> str:
    head = [
        f"| recipe ({device}) | samples/iteration | peak GiB | estimate GiB | s/iteration | estimate s | images/s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    return results_table(
        head,
        results,
        "recipe",
        lambda r: (
            f"{r['samples_per_iteration']} | {r['peak_gib']:.2f} | {r['est_peak_gib']:.2f} | "
            f"{r['seconds_per_iteration']:.2f} | {r['est_seconds_per_iteration']:.2f} | {r['images_per_s']:.1f}"
        ),
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m flowrl.benchmarks.perf.memory", description=__doc__.split("\n\n")[0])
    p.add_argument("overrides", nargs="*", help="key=value overrides for every recipe")
    p.add_argument("--recipes", nargs="+", default=DEFAULT_RECIPES)
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)
    if args.iterations < 1:
        p.error(f"--iterations: must be at least 1, got {args.iterations}")
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = []
    for recipe in args.recipes:
        results.append(measure(recipe, args.iterations, args.overrides, device))
        print(json.dumps(results[-1]), flush=True)
    print(table(results, device))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
