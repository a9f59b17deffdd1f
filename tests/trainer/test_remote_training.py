"""A tiny-cpu run trained against a reward served by `flowrl serve-reward` matches the in-process run."""

import subprocess
import sys

import pytest

from flowrl.resolve import resolve_config
from flowrl.trainer import Trainer

SMALL = [
    "sample.num_steps=2",
    "sample.group_size=4",
    "sample.prompts_per_iteration=2",
    "sample.batch_size=4",
    "train.iterations=2",
    "log.save_every=100",
    "log.sample_every=100",
    "method.options.beta=0.01",
]
KEYS = ["reward/mean", "reward/std", "adv/abs_mean", "policy/loss", "policy/kl", "policy/grad_norm"]


@pytest.mark.slow
def test_training_against_a_served_reward_matches_in_process(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "flowrl", "serve-reward", "jpeg_compressibility", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert "serving reward" in line, (line, proc.stderr.read()[-2000:] if proc.poll() is not None else "")
        url = line.split(" on ", 1)[1].split()[0]
        local = Trainer(resolve_config("tiny-cpu", [f"output_dir={tmp_path / 'local'}", *SMALL])).train()
        remote_cfg = resolve_config(
            "tiny-cpu",
            [
                f"output_dir={tmp_path / 'remote'}",
                *SMALL,
                "reward={remote: 1.0}",
                f"reward_args={{remote: {{url: '{url}'}}}}",
            ],
        )
        remote = Trainer(remote_cfg).train()
    finally:
        proc.kill()
        proc.wait(timeout=30)
    for a, b in zip(local, remote):
        assert a["reward/jpeg_compressibility/mean"] == b["reward/remote/mean"]
        for key in KEYS:
            assert a[key] == b[key], key


def test_monitors_and_early_stop(tmp_path):
    cfg = resolve_config(
        "tiny-cpu",
        [f"output_dir={tmp_path}", *SMALL, "train.iterations=5", "log.stop_if=['monitor/diversity/in_group>0.0']"],
    )
    rows = Trainer(cfg).train()
    assert len(rows) == 1  # the rule holds after the first iteration: saved and stopped
    for key in ("monitor/diversity/in_group", "monitor/saturation/mean"):
        assert key in rows[0], key
    assert (tmp_path / "checkpoints" / "iter-000001" / "state.json").is_file()
