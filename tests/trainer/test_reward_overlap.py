"""Rewards that overlap the rollout (``train.reward_overlap``): each rollout batch is scored in a background
thread while the next one samples, up to ``train.reward_in_flight`` at once, with the same calls and results as
in turn."""

import threading
import time

import pytest

import fault_rewards
from flowrl.resolve import resolve_config
from flowrl.trainer import Trainer
from tiny_runs import same_numbers

# 12 samples in 3 rollout batches of 4; TP-GRPO scores completions and a pure-ODE sample too
SMALL = [
    "sample.num_steps=3",
    "sample.group_size=4",
    "sample.prompts_per_iteration=3",
    "sample.batch_size=4",
    "log.save_every=1000",
    "log.sample_every=1000",
    "log.eval_every=0",
    "train.iterations=2",
]


def _rows(tmp_path, *overrides):
    return Trainer(resolve_config("tiny-cpu", [f"output_dir={tmp_path}", *SMALL, *overrides])).train()


def test_overlapped_rewards_give_the_metrics_of_rewards_in_turn(tmp_path, one_thread):
    two = [
        "reward={jpeg_compressibility: 1.0, 'fault_rewards:brightness': 0.5}",
        "method.name=tp_grpo",
        "method.options.window_size=2",
    ]
    overlapped = _rows(tmp_path / "on", *two)
    in_turn = _rows(tmp_path / "off", *two, "train.reward_overlap=false")
    assert len(overlapped) == 2
    for a, b in zip(overlapped, in_turn, strict=True):
        assert same_numbers(a) == same_numbers(b)


def test_a_batch_is_scored_in_the_background_while_the_next_one_samples(tmp_path, monkeypatch, one_thread):
    fault_rewards.Slow.CALLS.clear()
    collected = []
    collect = Trainer.collect

    def timed_collect(self, *args, **kwargs):
        out = collect(self, *args, **kwargs)
        collected.append(time.monotonic())
        return out

    monkeypatch.setattr(Trainer, "collect", timed_collect)
    _rows(tmp_path, "reward={'fault_rewards:Slow': 1.0}", "train.iterations=1")
    calls = fault_rewards.Slow.CALLS
    assert [n for _, _, n in calls] == [4, 4, 4]  # one call per rollout batch
    assert "MainThread" not in {name for _, name, _ in calls}  # the rewards' background worker (or its watcher)
    assert calls[0][0] < collected[0]  # batch 0's reward began before the rollout ended


def test_a_share_of_one_batch_starts_no_reward_thread(tmp_path, one_thread):
    """Nothing samples while the only batch's reward runs: it is scored in the reward phase, no worker started."""

    def workers():
        return {t for t in threading.enumerate() if t.name.startswith("flowrl-rewards")}

    tr = Trainer(resolve_config("tiny-cpu", [f"output_dir={tmp_path}", *SMALL, "sample.prompts_per_iteration=1"]))
    before = workers()
    batches, _ = tr.collect(0)
    assert len(batches) == 1 and batches[0].pending is None
    assert tr.scoring.score(batches).final.shape == (4,)
    assert workers() == before


def test_a_reward_slower_than_a_batch_gives_the_same_metrics_with_several_calls_in_flight(tmp_path, one_thread):
    """Each batch's call takes 1.5 s, longer than a rollout batch: one in flight, each call waits for the one before;
    three in flight, they overlap; every logged value is the same (results in batch order)."""
    slow = ["reward={'fault_rewards:Slow': 1.0}", "reward_args={'fault_rewards:Slow': {seconds: 1.5}}"]
    rows, starts = {}, {}
    for n in (1, 3):
        fault_rewards.Slow.CALLS.clear()
        rows[n] = _rows(tmp_path / str(n), *slow, "train.iterations=1", f"train.reward_in_flight={n}")
        starts[n] = sorted(t for t, _, _ in fault_rewards.Slow.CALLS)
        assert len(starts[n]) == 3  # one call per rollout batch
    assert all(b - a >= 1.5 for a, b in zip(starts[1], starts[1][1:]))  # one call at a time
    assert any(b - a < 1.5 for a, b in zip(starts[3], starts[3][1:]))  # calls overlap
    assert same_numbers(rows[1][0]) == same_numbers(rows[3][0])


def test_no_reward_worker_outlives_the_run(tmp_path, one_thread):
    """The background reward threads stop when ``train()`` returns, so a process ends with none of them left
    (a daemon thread still alive while the interpreter tears torch down can abort a process at exit)."""
    import threading

    before = set(threading.enumerate())  # other tests' trainers that never ran train() may hold theirs

    def workers():
        return [t for t in threading.enumerate() if t.name.startswith("flowrl-rewards") and t not in before]

    trainer = Trainer(resolve_config("tiny-cpu", [f"output_dir={tmp_path}", *SMALL, "train.reward_in_flight=3"]))
    trainer.train()
    assert not workers()
    trainer.step(2)  # a step after the run starts them again
    assert workers()
    trainer.scoring.close()
    assert not workers()


@pytest.mark.parametrize("policy", ["skip", "stop"])
def test_a_failing_background_reward_keeps_the_error_policy(tmp_path, policy, one_thread):
    """Call 1 (the second rollout batch of iteration 0) raises in the background thread."""
    opts = ["reward={'fault_rewards:FailAt': 1.0}", f"train.on_reward_error={policy}"]
    if policy == "skip":
        rows = _rows(tmp_path, *opts)
        assert rows[0].get("skipped") == 1.0 and "skipped" not in rows[1]
    else:
        from flowrl.reward_models import RewardError

        with pytest.raises(RewardError, match="reward 'fault_rewards:FailAt' raised ConnectionError"):
            _rows(tmp_path, *opts)


def test_reward_in_flight_is_at_least_one():
    from flowrl.config import ConfigError

    with pytest.raises(ConfigError, match=r"^train.reward_in_flight: must be > 0, got 0$"):
        resolve_config("tiny-cpu", ["train.reward_in_flight=0"])


def test_the_perf_summary_names_each_target_and_the_calls_in_flight():
    """``python -m flowrl.benchmarks.perf``'s summary table (no timing: rows as the benchmark writes them)."""
    from flowrl.benchmarks.perf import overhead

    rows = [
        {"size": "70m", "transformer_params_m": 73.5, "what": "reward_overlap", "slowness": 2.0, "in_flight": 4,
         "ratio": 0.51},
        {"size": "70m", "transformer_params_m": 73.5, "what": "iteration", "beta": 0.004, "ratio": 1.05},
        {"size": "70m", "transformer_params_m": 73.5, "what": "rollout", "ratio": 1.0},
    ]  # fmt: skip
    table = overhead.summary(rows).splitlines()
    assert table[0] == "| size | iteration/bare beta 0.004 | slow reward x2 / serial (4 in flight) |"
    assert table[2] == "| 70m (73.5M) | 1.050 (> 1.03) | 0.510 (<= 0.52) |"
    with pytest.raises(
        SystemExit,
        match="--what 'rollouts' is none of rollout, update, iteration, iteration_flow_grpo, iteration_self, reward_overlap",
    ):
        overhead.main(["--what", "rollouts"])
