"""Run-folder outputs: metrics.jsonl, sample grids, the reward curve."""

from __future__ import annotations

import json
import math
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch


class MetricsWriter:
    """Appends one JSON object per iteration to ``metrics.jsonl``.

    When a run resumes at iteration k, lines of iterations >= k (written after the checkpoint by a
    run that was then stopped) are dropped, so the file reads as one uninterrupted run.
    """

    def __init__(self, path: str | Path, start_iteration: int = 0):
        self.path = Path(path)
        if self.path.exists():
            kept = [
                line
                for line in self.path.read_text().splitlines()
                if line.strip() and json.loads(line).get("iteration", -1) < start_iteration
            ]
            self.path.write_text("".join(line + "\n" for line in kept))

    def write(self, metrics: dict[str, float]) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(metrics) + "\n")


def read_metrics(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


@contextmanager
def timed(store: dict[str, float], name: str) -> Iterator[None]:
    """Adds the wall time of the block to ``store["timing_s/<name>"]``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        key = f"timing_s/{name}"
        store[key] = store.get(key, 0.0) + time.perf_counter() - start


def save_grid(images: torch.Tensor, path: str | Path) -> None:
    """Images (B, 3, H, W) in [0, 1] -> one PNG grid."""
    from torchvision.utils import save_image

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    nrow = max(1, int(math.ceil(math.sqrt(images.shape[0]))))
    save_image(images.float().cpu(), str(path), nrow=nrow, padding=2)


def plot_reward_curve(metrics: list[dict], path: str | Path) -> None:
    """reward/mean (with a +-std band) against iterations, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [m for m in metrics if "reward/mean" in m]  # evaluation-only rows have no training reward
    its = [m["iteration"] for m in metrics]
    mean = [m["reward/mean"] for m in metrics]
    std = [m["reward/std"] for m in metrics]
    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=120)
    ax.plot(its, mean, color="tab:blue", label="reward/mean")
    ax.fill_between(
        its,
        [a - b for a, b in zip(mean, std)],
        [a + b for a, b in zip(mean, std)],
        color="tab:blue",
        alpha=0.2,
        label="+-std",
    )
    ax.set_xlabel("iteration")
    ax.set_ylabel("reward")
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def peak_memory_gib(device: torch.device) -> float:
    """Peak accelerator memory since the last call (CUDA), else the process's peak resident memory."""
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        return peak / 2**30
    # VmHWM is this process's own high-water mark; ru_maxrss survives exec, so a process started from a
    # large parent (pytest, a launcher) would report the parent's peak
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**20  # kB
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def progress(iterable, disable: bool):
    """The run's one progress bar (rank 0)."""
    from tqdm.auto import tqdm

    # disable=None: no bar when stderr is not a terminal (logs of batch jobs, a piped error line)
    return tqdm(iterable, desc="flowrl", unit="it", disable=True if disable else None, dynamic_ncols=True)


def stop_rule_hit(rules: list[str], metrics: dict[str, float]) -> str | None:
    """The first ``log.stop_if`` rule that an iteration's metrics satisfy."""
    from flowrl.configkit import parse_stop_rule

    for rule in rules:
        name, op, value = parse_stop_rule(rule)
        if name in metrics and (metrics[name] < value if op == "<" else metrics[name] > value):
            return f"{rule} ({name} = {metrics[name]:.4g})"
    return None
