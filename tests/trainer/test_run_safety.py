"""A rerun never clobbers or mixes runs; a run that cannot learn says so; small things that make a run
trustworthy (issue "Never lose a run")."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flowrl.checkpoint import list_checkpoints
from flowrl.cli import main
from flowrl.logs import read_metrics
from flowrl.preflight import logged_metric_names
from flowrl.resolve import resolve_config
from flowrl.trainer import Trainer
from flowrl.update import Updater
from tiny_runs import small

SMALL = small(2, "log.sample_every=1000", "train.iterations=2", "log.save_every=1")


def _train(tmp_path, *extra) -> int:
    return main(["train", f"output_dir={tmp_path}", *SMALL, *extra])


def _err(capsys) -> str:
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("flowrl: error: ")]
    assert len(err) == 1, err
    return err[0]


def test_a_second_run_into_the_same_folder_is_refused_and_loses_nothing(tmp_path, capsys):
    assert _train(tmp_path) == 0
    before = sorted(p.name for p in list_checkpoints(tmp_path / "checkpoints"))
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert _train(tmp_path, "seed=7") == 2
    err = _err(capsys)
    assert "already holds a run (2 checkpoint(s), 2 metrics row(s))" in err
    assert "resume=latest" in err and "run_name=auto" in err and "overwrite=true" in err
    assert sorted(p.name for p in list_checkpoints(tmp_path / "checkpoints")) == before
    assert read_metrics(tmp_path / "metrics.jsonl") == rows
    # the three ways on: resume (already done), a new folder, or overwrite
    assert _train(tmp_path, "resume=latest") == 0
    assert "already done: the run in" in capsys.readouterr().out
    assert _train(tmp_path, "run_name=auto") == 0
    assert _train(tmp_path, "run_name=auto") == 0
    made = sorted(p for p in tmp_path.iterdir() if p.is_dir() and p.name[:2] == "20")
    assert len(made) == 2 and all(list_checkpoints(p / "checkpoints") for p in made)
    assert _train(tmp_path, "overwrite=true", "train.iterations=1", "seed=7") == 0
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == ["iter-000001"]
    assert [r["iteration"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0]
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["seed"] == 7


def test_a_resume_with_other_math_is_refused_naming_the_keys(tmp_path, capsys):
    assert _train(tmp_path, "train.iterations=1") == 0
    assert (
        _train(
            tmp_path,
            "resume=latest",
            "train.learning_rate=1e-4",
            "sample.group_size=2",
            "sample.prompts_per_iteration=4",
        )
        == 2
    )
    err = _err(capsys)
    assert "train.learning_rate (0.01 -> 0.0001)" in err and "sample.group_size (4 -> 2)" in err
    assert "resume_allow_changes=true" in err
    # how long, what is logged and how rewards are waited for do not change the math
    assert _train(tmp_path, "resume=latest", "log.keep_last=5", "train.reward_timeout_s=30") == 0
    assert (
        _train(tmp_path, "resume=latest", "train.iterations=3", "train.learning_rate=1e-4", "resume_allow_changes=true")
        == 0
    )
    assert [r["iteration"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 1, 2]


def test_a_flat_reward_warns_then_stops_after_saving(tmp_path, capsys, caplog):
    code = _train(
        tmp_path,
        "reward.jpeg_compressibility=0",
        "train.iterations=10",
        "train.max_flat_iterations=3",
        "log.save_every=100",
    )
    assert code == 2
    err = _err(capsys)
    assert "the reward was flat within every group for 3 iterations in a row" in err
    assert "every reward weight is 0" in caplog.text and "iteration 0 learned nothing" in caplog.text
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == ["iter-000003"]


def test_every_sample_weighs_the_same_with_ragged_batches(tmp_path, monkeypatch):
    """8 samples in rollout batches of 3, 3 and 2, two optimizer steps: the units of a step carry
    weights proportional to their rows (each sample 1 / the step's kept samples)."""
    seen = []
    update = Updater.unit

    def recording(self, ctx, b, adv, transitions, scale, *args, **kwargs):
        seen.append((len(b.traj), scale))
        return update(self, ctx, b, adv, transitions, scale, *args, **kwargs)

    monkeypatch.setattr(Updater, "unit", recording)
    cfg = resolve_config("tiny-cpu", [f"output_dir={tmp_path}", *SMALL, "sample.batch_size=3", "train.iterations=1"])
    Trainer(cfg).train()
    # step 0 trains units 0 and 2 (3 + 2 rows), step 1 unit 1 (3 rows)
    assert seen == [(3, pytest.approx(3 / 5)), (2, pytest.approx(2 / 5)), (3, pytest.approx(1.0))]


def test_the_metric_names_a_run_logs_are_known_before_it_runs(tmp_path):
    cfg = resolve_config(
        "tiny-cpu",
        [
            f"output_dir={tmp_path}",
            *SMALL,
            "log.eval_every=1",
            "log.eval_num_prompts=2",
            "sample.eval_num_steps=2",
            "eval_reward={jpeg_incompressibility: 1}",
        ],
    )
    rows = Trainer(cfg).train()
    logged = set().union(*rows)
    assert logged <= logged_metric_names(cfg), logged - logged_metric_names(cfg)


def test_skip_works_on_the_first_iteration(tmp_path):
    cfg = resolve_config(
        "tiny-cpu",
        [
            f"output_dir={tmp_path}",
            *SMALL,
            "train.iterations=3",
            "reward={'fault_rewards:FailAt': 1.0}",
            "log.sample_every=1",
            "reward_args={'fault_rewards:FailAt': {at: 0}}",
            "train.on_reward_error=skip",
        ],
    )
    rows = Trainer(cfg).train()
    assert [r.get("skipped", 0) for r in rows] == [1, 0, 0]
    # sample grids count like checkpoints: iter-N is the N-th iteration's rollouts (the skipped one has none)
    assert sorted(p.name for p in (tmp_path / "samples").iterdir()) == ["iter-000002.png", "iter-000003.png"]
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")][-1] == "iter-000003"


def test_evaluation_runs_end_cleanly_and_a_finished_run_says_so(tmp_path, capsys):
    extra = ["log.eval_every=1", "log.eval_num_prompts=2", "sample.eval_num_steps=2"]
    assert _train(tmp_path, *extra) == 0
    assert "done: 2 iterations" in capsys.readouterr().out
    assert _train(tmp_path, "resume=latest", *extra) == 0
    assert "already done" in capsys.readouterr().out


def test_tokens_are_not_written_and_files_are_group_readable(tmp_path):
    cfg = resolve_config(
        "tiny-cpu",
        [
            f"output_dir={tmp_path}",
            *SMALL,
            "train.iterations=1",
            "eval_reward={remote: 1}",
            "reward_args={remote: {url: 'http://127.0.0.1:9', token: s3cret-token}}",
        ],
    )
    old = os.umask(0o022)
    try:
        Trainer(cfg).train()
    finally:
        os.umask(old)
    for path in [tmp_path / "config.yaml", *(tmp_path / "checkpoints").rglob("*.json")]:
        assert "s3cret-token" not in path.read_text(), path
    assert "<redacted>" in (tmp_path / "config.yaml").read_text()
    for f in [*(tmp_path / "checkpoints").rglob("*"), *(tmp_path / "lora").rglob("*")]:
        if f.is_file():
            assert f.stat().st_mode & 0o044 == 0o044, f


@pytest.mark.slow
def test_debug_after_the_command_and_a_closed_pipe(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "flowrl", "validate", "--debug", "train.learnig_rate=1"], capture_output=True, text=True
    )
    assert out.returncode == 2 and "Traceback" in out.stderr and "did you mean" in out.stderr
    piped = subprocess.run(
        f"{sys.executable} -m flowrl ls rewards | head -1", shell=True, capture_output=True, text=True
    )
    assert "BrokenPipe" not in piped.stderr and "Traceback" not in piped.stderr, piped.stderr


def test_yaml_floats_without_a_dot_are_floats(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("train:\n  learning_rate: 1e-3\n  weight_decay: 2E-4\n")
    cfg = resolve_config(str(recipe), [])
    assert cfg.train.learning_rate == 1e-3 and cfg.train.weight_decay == 2e-4


def test_state_json_records_the_run_config(tmp_path):
    assert _train(tmp_path, "train.iterations=1") == 0
    state = json.loads((tmp_path / "checkpoints" / "iter-000001" / "state.json").read_text())
    assert state["config"]["train"]["learning_rate"] == 0.01
    assert Path(state["config"]["output_dir"]) == tmp_path
