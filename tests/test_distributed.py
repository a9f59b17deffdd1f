"""Two processes (gloo on CPU, launched by torchrun) against one: same rewards, advantages and losses."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

OVERRIDES = ["sample.num_steps=3", "sample.group_size=4", "sample.prompts_per_iteration=2", "sample.batch_size=4",
             "train.iterations=2", "train.optimizer_steps_per_iteration=1", "train.beta=0.01", "log.save_every=100"]
KEYS = ["reward/mean", "reward/std", "adv/abs_mean", "policy/loss", "policy/kl", "policy/approx_kl",
        "policy/clip_frac", "policy/grad_norm"]


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.skipif(shutil.which("torchrun") is None and not (Path(sys.executable).parent / "torchrun").exists(),
                    reason="torchrun not installed")
def test_two_processes_match_one(tmp_path):
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    one = subprocess.run([sys.executable, "-m", "flowrl", "train", f"output_dir={tmp_path / 'one'}", *OVERRIDES],
                         env=env, capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-2000:]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29531"]
    two = subprocess.run([*torchrun, "-m", "flowrl", "train", f"output_dir={tmp_path / 'two'}", *OVERRIDES],
                         env=env, capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr[-2000:]
    a, b = _rows(tmp_path / "one"), _rows(tmp_path / "two")
    assert len(a) == len(b) == 2
    for x, y in zip(a, b):
        for key in KEYS:
            assert x[key] == pytest.approx(y[key], rel=1e-5, abs=1e-9), key
