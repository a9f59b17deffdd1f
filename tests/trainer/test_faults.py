"""Faults: misbehaving rewards, and runs killed with SIGKILL at several points then resumed."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from flowrl.checkpoint import list_checkpoints
from flowrl.resolve import resolve_config
from flowrl.reward_models import RewardError
from flowrl.trainer import Trainer
from tiny_runs import small

HELPERS = Path(__file__).parents[1] / "helpers"
SMALL = small(2, "log.sample_every=1000", "method.options.beta=0.01")


def _cfg(tmp_path, *extra):
    return resolve_config("tiny-cpu", [f"output_dir={tmp_path}", *SMALL, *extra])


@pytest.mark.parametrize(
    "how, args, message",
    [
        ("raise", {}, "reward 'fault_rewards:FailAt' raised ConnectionError: scorer backend went away"),
        ("nan", {}, "reward 'fault_rewards:FailAt' returned 1 non-finite score(s)"),
        ("shape", {}, "reward 'fault_rewards:FailAt' returned scores of shape (3,), expected (4,)"),
        ("hang", {"seconds": 3}, "reward 'fault_rewards:FailAt' timed out after 0.5 s"),
    ],
)
def test_a_failing_reward_stops_the_run_and_keeps_its_progress(tmp_path, how, args, message):
    # the reward is called once per rollout batch (2 an iteration): call 2 is iteration 1's first
    kwargs = ", ".join(f"{k}: {v}" for k, v in {"how": how, "at": 2, **args}.items())
    cfg = _cfg(
        tmp_path,
        "train.iterations=3",
        "log.save_every=100",
        "reward={'fault_rewards:FailAt': 1.0}",
        f"reward_args={{'fault_rewards:FailAt': {{{kwargs}}}}}",
        "train.reward_timeout_s=0.5",
    )
    with pytest.raises(RewardError) as info:
        Trainer(cfg).train()
    assert message in str(info.value)
    # iteration 0 completed before the failure in iteration 1: it was saved, nothing else was lost
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == ["iter-000001"]


def test_skip_policy_skips_the_iteration(tmp_path):
    cfg = _cfg(
        tmp_path,
        "train.iterations=3",
        "reward={'fault_rewards:FailAt': 1.0}",
        "reward_args={'fault_rewards:FailAt': {at: 2}}",
        "train.on_reward_error=skip",
    )
    rows = Trainer(cfg).train()
    assert [r.get("skipped", 0) for r in rows] == [0, 1, 0]
    assert "reward/mean" not in rows[1] and "policy/loss" in rows[2]


KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    import flowrl.checkpoint as C
    import flowrl.trainer as T

    mode, at = sys.argv[1], int(sys.argv[2])
    die = lambda: os.kill(os.getpid(), signal.SIGKILL)
    if mode == "rollout":
        collect = T.Trainer.collect
        T.Trainer.collect = lambda self, it, *a: die() if it == at else collect(self, it, *a)
    elif mode == "update":
        import flowrl.update as U
        update, now = U.Updater.unit, {}
        def killing_update(self, *args, **kwargs):
            if now["iteration"] == at and self.optimizer_steps > 0:
                die()  # after this iteration's first optimizer step: the weights are half updated
            return update(self, *args, **kwargs)
        step = T.Trainer.step
        def tracking_step(self, it):
            now["iteration"] = it
            return step(self, it)
        U.Updater.unit, T.Trainer.step = killing_update, tracking_step
    elif mode == "save":
        save_file = C.save_file
        def killing_save(tensors, path, *args, **kwargs):
            save_file(tensors, path, *args, **kwargs)
            if Path(path).parent.name == f"iter-{at:06d}.tmp" and Path(path).name == "optimizer.safetensors":
                die()  # the checkpoint folder is half written
        C.save_file = killing_save
    from flowrl.cli import main
    sys.exit(main(["train", *sys.argv[3:]]))
    """
)


def _run(args, cwd):
    env = {**os.environ, "PYTHONPATH": str(HELPERS)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, env=env, cwd=cwd)


def _metrics(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(("timing_s/", "throughput/", "memory/"))} for r in rows]


@pytest.mark.slow
def test_killed_runs_resume_to_the_same_metrics(tmp_path):
    overrides = ["train.iterations=6", "log.save_every=2", *SMALL]
    done = _run(["-m", "flowrl", "train", f"output_dir={tmp_path / 'clean'}", *overrides], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    reference = _metrics(tmp_path / "clean")
    assert len(reference) == 6
    (tmp_path / "killer.py").write_text(KILLER)
    for mode, at in (("rollout", 3), ("update", 3), ("save", 4)):
        run = tmp_path / mode
        killed = _run(["killer.py", mode, str(at), f"output_dir={run}", *overrides], tmp_path)
        assert killed.returncode == -9, (mode, killed.stderr[-2000:])
        if mode == "save":
            assert (run / "checkpoints" / "iter-000004.tmp").is_dir()  # left half written ...
        assert list_checkpoints(run / "checkpoints")[-1].name == "iter-000002"  # ... and never picked up
        resumed = _run(["-m", "flowrl", "train", f"output_dir={run}", "resume=latest", *overrides], tmp_path)
        assert resumed.returncode == 0, (mode, resumed.stderr[-2000:])
        assert _metrics(run) == reference, mode  # bit-identical on CPU
