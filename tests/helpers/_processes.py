"""Running ``flowrl train`` as one process or as two under torchrun (gloo on CPU), for the tests that hold two
processes to one process's metrics (and the FSDP run to the DDP one)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flowrl.benchmarks.perf.strategies import KEYS

ENV = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
ONE_PROCESS = [sys.executable, "-m", "flowrl", "train"]
needs_torchrun = pytest.mark.skipif(
    shutil.which("torchrun") is None and not (Path(sys.executable).parent / "torchrun").exists(),
    reason="torchrun not installed",
)


def torchrun(port: int) -> list[str]:
    """torchrun with two processes on ``port`` (each test module its own, so that modules may run side by side);
    the script or ``-m flowrl train`` follows."""
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port)]


def train_metrics(command: list[str], out: Path, *overrides: str, env: dict | None = None, timeout: int = 600):
    """Run ``command`` (ending in ``train`` or its recipe) into ``out`` with ``overrides``; its metrics rows."""
    done = subprocess.run(
        [*command, f"output_dir={out}", *overrides], env=env or ENV, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def assert_same_metrics(a: list[dict], b: list[dict]) -> None:
    """The compared metrics (``strategies.KEYS``) of two runs agree to float32 noise, row by row."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for key in KEYS:
            assert x[key] == pytest.approx(y[key], rel=1e-5, abs=1e-9), key
