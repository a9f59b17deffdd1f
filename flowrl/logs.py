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


def progress(iterable, disable: bool, stream=None, desc: str = "flowrl", unit: str = "iteration"):
    """The run's progress (rank 0): tqdm's bar on a terminal; where stderr is not one (nohup, Slurm, a CI log),
    where a bar would print nothing until the run ends, a plain line every few seconds (``LineProgress``).
    ``desc`` names the bar and starts the lines, ``unit`` is what the lines count (the benchmarks' drawing:
    ``progress(batches, ..., desc="generate", unit="batch")``)."""
    import sys

    stream = sys.stderr if stream is None else stream
    if disable:
        return LineProgress(iterable, stream=None)
    if not stream.isatty():
        return LineProgress(iterable, stream=stream, desc=desc, unit=unit)
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, unit="it", dynamic_ncols=True, file=stream)


def _duration(seconds: float) -> str:
    """``42s``, ``7m05s``, ``3h12m``."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class LineProgress:
    """Progress for a log: after an iteration, one line when ``every_s`` seconds have passed since the last one
    (and always after the first and the last iteration)::

        flowrl: iteration 12/150 (8%), 3.2 s/it, about 7m22s left; reward=-0.0031 kl=0

    ``stream=None`` prints nothing (the other processes of a launch). ``set_postfix`` as tqdm's. ``desc`` and
    ``unit`` replace ``flowrl`` and ``iteration`` in the line."""

    def __init__(
        self,
        iterable,
        stream,
        every_s: float = 10.0,
        clock=time.monotonic,
        desc: str = "flowrl",
        unit: str = "iteration",
    ):
        self.iterable, self.stream, self.every_s, self.clock = iterable, stream, every_s, clock
        self.desc, self.unit = desc, unit
        self.total = len(iterable) if hasattr(iterable, "__len__") else None
        self.postfix: dict[str, str] = {}

    def set_postfix(self, **values) -> None:
        self.postfix = {k: str(v) for k, v in values.items()}

    def line(self, done: int, first: int, elapsed: float) -> str:
        """The line after ``done`` iterations of this run, ``first`` of them done before it started (resume)."""
        per = elapsed / max(done - first, 1)
        where = f"{self.unit} {done}"
        if self.total is not None:
            end = first + self.total
            left = f", about {_duration(per * (end - done))} left" if done < end else ""
            where = f"{self.unit} {done}/{end} ({100 * done // max(end, 1)}%), {per:.3g} s/it{left}"
        else:
            where += f", {per:.3g} s/it"
        extra = " ".join(f"{k}={v}" for k, v in self.postfix.items())
        return f"{self.desc}: {where}" + (f"; {extra}" if extra else "")

    def __iter__(self):
        start = self.clock()
        last = None  # when the last line was printed
        first = None
        for count, item in enumerate(self.iterable):
            if first is None:
                first = item if isinstance(item, int) else 0
            yield item
            if self.stream is None:
                continue
            now = self.clock()
            done = (item + 1) if isinstance(item, int) else count + 1
            final = self.total is not None and count + 1 == self.total
            if last is None or final or now - last >= self.every_s:
                print(self.line(done, first, now - start), file=self.stream, flush=True)
                last = now


def stop_rule_hit(rules: list[str], metrics: dict[str, float]) -> str | None:
    """The first ``log.stop_if`` rule that an iteration's metrics satisfy."""
    from flowrl.configkit import parse_stop_rule

    for rule in rules:
        name, op, value = parse_stop_rule(rule)
        if name in metrics and (metrics[name] < value if op == "<" else metrics[name] > value):
            return f"{rule} ({name} = {metrics[name]:.4g})"
    return None
