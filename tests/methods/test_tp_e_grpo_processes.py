"""TP-GRPO (per-rollout-batch balancing) and E-GRPO (z-scored weighted sum of two rewards) over two processes
and through a SIGTERM during the update: one process's metrics, and the uninterrupted run's after resuming."""

import os
import signal
import sys
from pathlib import Path

import pytest

from _processes import KEYS, needs_torchrun, torchrun, train_metrics
from flowrl.interrupts import Interrupted
from flowrl.logs import read_metrics
from flowrl.resolve import resolve_config
from flowrl.trainer import Trainer
from flowrl.update import Updater
from tiny_runs import same_numbers

TWO_REWARDS = "reward={jpeg_compressibility: 1.0, jpeg_incompressibility: 0.5}"
COMMON = [
    "sample.num_steps=4",
    "sample.group_size=4",
    "sample.prompts_per_iteration=2",
    "method.options.beta=0.01",
    "log.sample_every=1000",
    "log.eval_every=0",
    TWO_REWARDS,
]
METHODS = {
    # rollout batches of 2: two balancing pools on each process, the same blocks of the global order on one;
    # a moving window of 2 that never reaches sigma = 0
    "tp_grpo": [
        "method.name=tp_grpo",
        "sample.batch_size=2",
        "method.options.window_size=2",
        "method.options.window_range=[0,3]",
    ],
    "e_grpo": ["method.name=e_grpo", "sample.batch_size=4"],  # one group per rollout batch
}
TORCHRUN = torchrun(29547)


def _run(command: list[str], out: Path, *extra: str) -> list[dict]:
    overrides = [*COMMON, *extra, "train.iterations=1", "log.save_every=1000"]
    return train_metrics([*command, "tiny-cpu"], out, *overrides, timeout=300)


@pytest.mark.slow
@needs_torchrun
@pytest.mark.parametrize("method", sorted(METHODS))
def test_two_processes_give_one_process_credit_and_losses(tmp_path, method):
    """Credit runs on the rewards gathered in global order, so each method's own figures (turning points
    detected and kept, merge lengths) are equal, and the losses equal to float rounding."""
    one = _run([sys.executable, "-m", "flowrl", "train"], tmp_path / "one", *METHODS[method])
    two = _run([*TORCHRUN, "-m", "flowrl", "train"], tmp_path / "two", *METHODS[method])
    assert len(one) == len(two) == 1
    own = [k for k in one[0] if k.startswith("method/")]
    assert own and {k: one[0][k] for k in own} == {k: two[0][k] for k in own}
    for key in KEYS:
        assert one[0][key] == pytest.approx(two[0][key], rel=1e-5, abs=1e-9), key


def _train(run: Path, method: str, *extra: str) -> list[dict]:
    cfg = resolve_config(
        "tiny-cpu", [f"output_dir={run}", *COMMON, *METHODS[method], "train.iterations=3", "log.save_every=1", *extra]
    )
    Trainer(cfg).train()
    return [same_numbers(r) for r in read_metrics(run / "metrics.jsonl")]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_sigterm_during_the_update_then_resume_repeats_the_run(
    tmp_path, one_thread, monkeypatch, method, signals_ignored_outside_training
):
    reference = _train(tmp_path / "clean", method)
    update, calls = Updater.unit, {"n": 0}

    def signalling_update(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # inside iteration 0's or 1's update
            os.kill(os.getpid(), signal.SIGTERM)
        return update(self, *args, **kwargs)

    monkeypatch.setattr(Updater, "unit", signalling_update)
    with pytest.raises(Interrupted, match=r"^interrupted \(SIGTERM\)"):
        _train(tmp_path / "cut", method)
    monkeypatch.setattr(Updater, "unit", update)
    assert _train(tmp_path / "cut", method, "resume=latest") == reference
