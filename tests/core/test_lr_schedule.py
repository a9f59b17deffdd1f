"""The learning-rate schedule: the factor by hand, the trainer setting it on every optimizer step, and a
resumed run continuing it exactly."""

import math

import pytest

from flowrl.config import ConfigError
from flowrl.lr import lr_factor
from flowrl.resolve import resolve_config
from flowrl.trainer import Trainer

SMALL = [
    "sample.num_steps=3",
    "sample.group_size=4",
    "sample.prompts_per_iteration=2",
    "sample.batch_size=4",
    "log.save_every=1",
    "log.sample_every=1000",
    "log.eval_every=0",
    "log.monitors=false",
]


def test_the_factor_by_hand():
    assert [lr_factor(s, 10) for s in range(10)] == [1.0] * 10
    # warm-up from 0 (diffusers' convention), then a cosine half-wave from the end of the warm-up
    assert [lr_factor(s, 10, "cosine", warmup=2) for s in (0, 1)] == [0.0, 0.5]
    assert lr_factor(2, 10, "cosine", warmup=2) == 1.0
    assert lr_factor(6, 10, "cosine", warmup=2) == pytest.approx(0.5 * (1 + math.cos(math.pi * 4 / 8)))
    assert lr_factor(10, 10, "cosine", warmup=2) == pytest.approx(0.0, abs=1e-12)
    assert lr_factor(10, 10, "cosine", min_ratio=0.1) == pytest.approx(0.1)
    assert lr_factor(5, 10, "linear") == pytest.approx(0.5)
    assert lr_factor(50, 10, "linear") == 0.0  # past the end it stays at the end
    with pytest.raises(ValueError, match="allowed: constant, cosine, linear"):
        lr_factor(0, 1, "step")


def test_the_trainer_follows_the_schedule_and_resumes_it(tmp_path, one_thread):
    """2 optimizer steps an iteration over 3 iterations: cosine over 6 steps after 1 of warm-up; the
    logged lr is the mean of the iteration's two; a resume from iteration 1 continues it exactly."""
    opts = [
        "train.lr_schedule=cosine",
        "train.lr_warmup_steps=1",
        "train.learning_rate=0.01",
        "train.optimizer_steps_per_iteration=2",
    ]
    full = Trainer(resolve_config("tiny-cpu", [f"output_dir={tmp_path / 'full'}", *SMALL, *opts, "train.iterations=3"]))
    assert full.updater.total_optimizer_steps == 6
    rows = full.train()
    expected = [0.01 * lr_factor(s, 6, "cosine", 1) for s in range(6)]
    for i, row in enumerate(rows):
        assert row["policy/lr"] == pytest.approx((expected[2 * i] + expected[2 * i + 1]) / 2)
    assert full.policy.optimizer.param_groups[0]["lr"] == pytest.approx(expected[-1])
    Trainer(
        resolve_config("tiny-cpu", [f"output_dir={tmp_path / 'part'}", *SMALL, *opts, "train.iterations=1"])
    ).train()
    resumed = Trainer(
        resolve_config(
            "tiny-cpu", [f"output_dir={tmp_path / 'part'}", *SMALL, *opts, "train.iterations=3", "resume=latest"]
        )
    ).train()
    skip = ("timing_s/", "throughput/", "memory/")
    for a, b in zip(rows[1:], resumed, strict=True):
        assert {k: v for k, v in a.items() if not k.startswith(skip)} == {
            k: v for k, v in b.items() if not k.startswith(skip)
        }


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.lr_schedule=step", "train.lr_schedule"),
        ("train.lr_warmup_steps=-1", "train.lr_warmup_steps: must be >= 0"),
        ("train.lr_min_ratio=2", "train.lr_min_ratio: must be in [0, 1]"),
    ],
)
def test_bad_schedule_settings_are_one_line_errors(override, message):
    with pytest.raises(ConfigError) as err:
        resolve_config("tiny-cpu", [override])
    assert message in str(err.value) and "\n" not in str(err.value)
