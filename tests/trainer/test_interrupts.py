"""SIGINT/SIGTERM at random instants of a run (rollout, reward, update, evaluation, checkpoint write):
every completed iteration is saved, and resuming gives the uninterrupted run's metrics bit for bit."""

import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from flowrl.checkpoint import list_checkpoints
from flowrl.interrupts import Interrupted
from flowrl.logs import read_metrics
from flowrl.resolve import resolve_config
from flowrl.trainer import Trainer
from flowrl.update import Updater

RUN = [
    "sample.num_steps=2",
    "sample.group_size=4",
    "sample.prompts_per_iteration=2",
    "sample.batch_size=4",
    "train.iterations=6",
    "log.save_every=2",
    "log.sample_every=1000",
    "method.options.beta=0.01",
    "train.ema=true",
    "train.ema_every=1",
    "log.eval_every=3",
    "log.eval_num_prompts=2",
    "sample.eval_num_steps=2",
]


def _rows(run):
    if not (run / "metrics.jsonl").exists():  # interrupted before its first iteration ended
        return []
    return [
        {k: v for k, v in r.items() if not k.startswith(("timing_s/", "throughput/", "memory/"))}
        for r in read_metrics(run / "metrics.jsonl")
    ]


def _train(run, *extra, interrupt_after: float | None = None, sig=signal.SIGTERM, timing: list | None = None):
    """Train (resuming where asked); send ``sig`` to this process ``interrupt_after`` s into ``train()``.
    Returns the Interrupted message, if any; appends the seconds ``train()`` took to ``timing``."""
    trainer = Trainer(resolve_config("tiny-cpu", [f"output_dir={run}", *RUN, *extra]))
    timer = threading.Timer(interrupt_after, os.kill, (os.getpid(), sig)) if interrupt_after is not None else None
    start = time.perf_counter()
    try:
        if timer is not None:
            timer.start()
        trainer.train()
    except Interrupted as exc:
        return str(exc)
    finally:
        if timer is not None:
            timer.cancel()
        if timing is not None:
            timing.append(time.perf_counter() - start)
    return None


@pytest.mark.slow
def test_interrupts_at_random_instants_lose_nothing(tmp_path, one_thread, signals_ignored_outside_training):
    timing = []
    for clean in ("clean", "clean-again"):  # the second run is warm: its duration is what a case takes
        assert _train(tmp_path / clean, timing=timing) is None
    duration = timing[1]
    reference = _rows(tmp_path / "clean")
    assert _rows(tmp_path / "clean-again") == reference
    assert [r["iteration"] for r in reference] == [0, 1, 2, 3, 4, 5, 6]  # 6 iterations and the final eval
    rng = random.Random(0)
    interrupted = attempts = 0
    while interrupted < 20:  # 20 runs really interrupted (an instant past a loaded run's end is drawn again)
        attempts += 1
        assert attempts <= 80, f"only {interrupted} of {attempts} instants fell inside a run"
        run = tmp_path / f"run{attempts}"
        sig = (signal.SIGINT, signal.SIGTERM)[attempts % 2]
        seconds = []
        message = _train(run, interrupt_after=rng.uniform(0.0, duration), sig=sig, timing=seconds)
        if message is None:  # the run ended first: it took `seconds`, so draw within that from now on
            duration = min(duration, seconds[0])
            continue
        interrupted += 1
        assert message.startswith(f"interrupted ({sig.name}):"), message
        assert "resume=latest" in message
        saved = list_checkpoints(run / "checkpoints")
        done = int(saved[-1].name.split("-")[1]) if saved else 0
        assert f"{done} completed iterations are saved" in message or (done == 0 and "no iteration" in message)
        # every iteration that has a metrics row is in the newest checkpoint
        rows = [r for r in _rows(run) if "reward/mean" in r]
        assert len(rows) == done, (attempts, message)
        for _ in range(3):  # resume until done (an interrupt can only stop it once here)
            if _train(run, "resume=latest") is None:
                break
        assert _rows(run) == reference, attempts


def test_a_signal_during_the_update_finishes_the_iteration_then_saves(
    tmp_path, monkeypatch, signals_ignored_outside_training
):
    """The case that lost work before: SIGTERM while the weights are being updated."""
    update = Updater.unit
    calls = {"n": 0}

    def signalling_update(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # iteration 1's update, between its two optimizer steps
            os.kill(os.getpid(), signal.SIGTERM)
        return update(self, *args, **kwargs)

    monkeypatch.setattr(Updater, "unit", signalling_update)
    message = _train(tmp_path)
    assert message.startswith("interrupted (SIGTERM): 2 completed iterations are saved"), message
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == ["iter-000002"]
    assert [r["iteration"] for r in _rows(tmp_path)] == [0, 1]


def test_a_second_signal_stops_at_once_and_says_what_it_abandons(
    tmp_path, monkeypatch, signals_ignored_outside_training
):
    update = Updater.unit
    calls = {"n": 0}

    def signalling_update(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] in (3, 4):
            os.kill(os.getpid(), signal.SIGINT)
        return update(self, *args, **kwargs)

    monkeypatch.setattr(Updater, "unit", signalling_update)
    message = _train(tmp_path)
    assert message.startswith("stopped at once by a second signal"), message
    assert "abandoned iteration 1" in message and "iter-000000" not in message
    assert list_checkpoints(tmp_path / "checkpoints") == []  # nothing half-updated was saved


@pytest.mark.slow
def test_sigterm_to_the_cli_prints_one_line_and_exits_130(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flowrl",
            "train",
            f"output_dir={tmp_path}",
            *RUN,
            "train.iterations=400",
            "log.eval_every=0",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.time() + 120
    while not list_checkpoints(tmp_path / "checkpoints") and time.time() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    line = [x for x in err.splitlines() if x.startswith("flowrl:") and "%" not in x][-1]
    assert line.startswith("flowrl: interrupted (SIGTERM): ") and "resume=latest" in line, err[-2000:]
