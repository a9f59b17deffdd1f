"""The run folder keeps what flowrl did not write: the marker, overwrite=true that removes only flowrl's own
outputs, and the lock that refuses a second launch into a folder in use (flowrl.runs)."""

import json
import os
import subprocess
import sys
import time

import pytest

from flowrl import runs
from flowrl.cli import main
from flowrl.config import ConfigError
from flowrl.logs import read_metrics
from tiny_runs import small

SMALL = small(2, "log.sample_every=1", "train.iterations=1", "log.save_every=1")


def _err(capsys) -> str:
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("flowrl: error: ")]
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(
    "path, ours",
    [
        ("config.yaml", True),
        ("metrics.jsonl", True),
        (".flowrl-run", True),
        (".flowrl.lock", True),
        ("checkpoints/iter-000004/trainable.safetensors", True),
        ("checkpoints/iter-000004.tmp/state.json", True),
        ("samples/iter-000001.png", True),
        ("samples/eval-000010/0001.mp4", True),
        ("lora/adapter.safetensors", True),
        ("trackers/wandb-id", True),
        ("samples_cli/0001/0000.png", True),  # flowrl sample RUN
        ("samples_cli/0002/frames.png", True),
        ("samples_cli/0002/sample.json", True),
        ("checkpoints/my_model.ckpt", False),
        ("samples/holiday.png", False),
        ("notes.txt", False),
        (".flowrl-run/x", False),
        ("samples/iter-1-mine.png", False),
        ("samples_cli/0001/holiday.png", False),
        ("samples_cli/mine.png", False),
    ],
)
def test_what_flowrl_writes(path, ours):
    assert runs.is_flowrl_output(path) is ours


def test_overwrite_keeps_every_file_flowrl_did_not_write(tmp_path, capsys):
    """The user's own config, sample and checkpoint in a folder: overwrite=true removes none of them."""
    (tmp_path / "samples").mkdir()
    (tmp_path / "checkpoints").mkdir()
    files = {"config.yaml": b"mine: 1\n", "samples/holiday.png": b"\x89PNG mine", "checkpoints/my_model.ckpt": b"w"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    assert main(["train", f"output_dir={tmp_path}", "overwrite=true", *SMALL]) == 2
    assert "which flowrl did not write there" in _err(capsys)
    assert {n: (tmp_path / n).read_bytes() for n in files} == files
    assert not (tmp_path / runs.MARKER).exists()


def test_overwrite_of_a_flowrl_run_removes_its_outputs_only(tmp_path, capsys):
    assert main(["train", f"output_dir={tmp_path}", *SMALL]) == 0
    assert (tmp_path / runs.MARKER).is_file() and any((tmp_path / "samples").iterdir())
    (tmp_path / "samples" / "holiday.png").write_bytes(b"mine")
    assert main(["train", f"output_dir={tmp_path}", "overwrite=true", *SMALL]) == 2
    assert "holds 'samples/holiday.png', which flowrl did not write; nothing was removed" in _err(capsys)
    assert (tmp_path / "checkpoints" / "iter-000001").is_dir()  # nothing removed
    (tmp_path / "samples" / "holiday.png").unlink()
    assert main(["train", f"output_dir={tmp_path}", "overwrite=true", "seed=9", *SMALL]) == 0
    assert [r["iteration"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0]


def test_a_held_lock_refuses_and_a_dead_one_is_taken_over(tmp_path, caplog):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from pathlib import Path; from flowrl.runs import RunLock; "
                f"lock = RunLock.acquire(Path({str(tmp_path)!r})); print('held', flush=True); time.sleep(60)"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError) as err:
            runs.RunLock.acquire(tmp_path)
        assert f"is in use by another flowrl run (pid {holder.pid} on " in str(err.value)
    finally:
        holder.kill()
        holder.wait()
    lock = runs.RunLock.acquire(tmp_path)  # killed: the kernel dropped its lock, the file still names it
    assert f"taking over the lock left by pid {holder.pid}" in caplog.text
    assert json.loads((tmp_path / runs.LOCK).read_text())["pid"] == os.getpid()
    lock.release()
    assert (tmp_path / runs.LOCK).read_text() == ""  # a clean exit leaves nothing to take over


@pytest.mark.slow
def test_a_second_launch_into_a_folder_in_use_is_refused(tmp_path, capsys):
    """Two real launches into one folder: the second is refused at once and the first finishes intact."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    first = subprocess.Popen(
        [sys.executable, "-m", "flowrl", "train", f"output_dir={tmp_path}", *SMALL, "train.iterations=3"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (tmp_path / runs.LOCK).is_file():
            time.sleep(0.2)
        while time.time() < deadline and not (tmp_path / runs.LOCK).read_text().strip():
            time.sleep(0.2)
        assert main(["train", f"output_dir={tmp_path}", *SMALL]) == 2
        err = _err(capsys)
        assert f"output_dir '{tmp_path}' is in use by another flowrl run (pid {first.pid}" in err
        assert first.wait(timeout=300) == 0, first.stderr.read()[-2000:]
    finally:
        first.kill()
    assert [r["iteration"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 1, 2]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["iter-000001", "iter-000002", "iter-000003"]
