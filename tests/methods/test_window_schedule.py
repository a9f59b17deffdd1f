"""MixGRPO's moving SDE window as an option of the SDE methods (arXiv 2507.21802; Tencent-Hunyuan/MixGRPO
fastvideo/utils/grpo_states.py ``update_iteration``, verl-omni docs/algo/mixgrpo.md): the progressive positions by
hand, one seeded draw per iteration shared by every batch, the DPM-Solver++ tail after the window, errors, resume."""

import random

import pytest
import torch

from flowrl.config import ConfigError, resolve_config
from flowrl.methods import build_method
from flowrl.plan import make_plan, window_start
from flowrl.seeds import seed_of
from flowrl.trainer import Trainer

SMALL = [
    "sample.num_steps=4",
    "sample.group_size=4",
    "sample.prompts_per_iteration=2",
    "sample.batch_size=4",
    "log.save_every=1000",
    "log.sample_every=1000",
    "log.eval_every=0",
    "method.options.window_size=1",
    "method.options.window_range=[0,3]",
]
SKIP = ("timing_s/", "throughput/", "memory/")


def test_progressive_positions_by_hand():
    """The authors' FLUX run: 25 steps, window 4, every 25 iterations, starts up to 25 - 2 = 23 (range [0, 24)).
    Starts that fit in [0, 24 - 4]: 0, 4, 8, 12, 16, 20 (6 positions): iterations 0-24 at 0, 25-49 at 4, ...,
    125-149 at 20; at 150 wrap back to 0 (roll_back), or stay at 20."""
    at = [window_start("progressive", i, 4, 0, 24, 25) for i in (0, 24, 25, 49, 50, 125, 149, 150, 175)]
    assert at == [0, 0, 4, 4, 8, 20, 20, 0, 4]
    stay = [window_start("progressive", i, 4, 0, 24, 25, wrap=False) for i in (125, 150, 1000)]
    assert stay == [20, 20, 20]
    # a range that does not start at 0, and a last position that is not a multiple of the size: [2, 9], size 3
    assert [window_start("progressive", i, 3, 2, 9, 1) for i in range(4)] == [2, 5, 2, 5]
    assert [window_start("progressive", i, 3, 2, 9, 1, wrap=False) for i in range(4)] == [2, 5, 6, 6]


def test_the_iteration_draw_and_its_errors():
    rng = random.Random(7)
    want = random.Random(7).randint(0, 6)
    assert window_start("iteration", 3, 4, 0, 10, rng=rng) == want
    assert window_start("batch", 3, 4, 0, 10) is None
    with pytest.raises(ValueError, match="window of size 4 does not fit in range \\(0, 3\\)"):
        window_start("progressive", 0, 4, 0, 3)
    with pytest.raises(ValueError, match="unknown window schedule 'sliding'"):
        window_start("sliding", 0, 1, 0, 3)


def test_a_dpm2_tail_after_the_window():
    """Euler before the window, the SDE in it, DPM-Solver++ (2nd order) after it; only the window trains."""
    plan = make_plan(torch.linspace(1, 0, 7), "flow_sde", 0.7, 2, start=1, tail="dpm2")
    assert plan.kinds == ("ode", "flow_sde", "flow_sde", "dpm2", "dpm2", "dpm2")
    assert plan.train.tolist() == [False, True, True, False, False, False]
    assert make_plan(torch.linspace(1, 0, 7), "flow_sde", 0.7, 2, start=1).kinds[3:] == ("ode",) * 3
    with pytest.raises(ValueError, match="window start 5 is outside \\[0, 4\\]"):
        make_plan(torch.linspace(1, 0, 7), "flow_sde", 0.7, 2, start=5)


def _trainer(tmp_path, *overrides) -> Trainer:
    return Trainer(resolve_config("tiny-cpu", [f"output_dir={tmp_path}", *SMALL, *overrides]))


def _starts(tr, iteration) -> list[int]:
    ctx = tr.context(iteration)
    batches, _ = tr.collect(iteration, ctx)
    return [b.traj.plan.trained_indices[0] for b in batches]


@pytest.mark.parametrize("method", ["flow_grpo", "flow_dppo"])
def test_one_window_per_iteration_from_the_seed(tmp_path, one_thread, method):
    """window_schedule=iteration: every rollout batch of an iteration has the start drawn from the stream
    ("window", 0) of (seed, iteration), whatever the process (the stream holds no rank)."""
    tr = _trainer(tmp_path, f"method.name={method}", "method.options.window_schedule=iteration")
    for it in (0, 1, 2):
        want = random.Random(seed_of(tr.cfg.seed, it, "window", 0)).randint(0, 2)
        assert _starts(tr, it) == [want, want]


def test_the_progressive_window_in_a_run_and_its_tail(tmp_path, one_thread):
    tr = _trainer(
        tmp_path,
        "method.options.window_schedule=progressive",
        "method.options.window_every=2",
        "method.options.ode_tail=dpm2",
    )
    assert [_starts(tr, it)[0] for it in range(7)] == [0, 0, 1, 1, 2, 2, 0]
    plan = tr.collect(2, tr.context(2))[0][0].traj.plan
    assert plan.kinds == ("ode", "flow_sde", "dpm2", "dpm2")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["method.options.window_schedule=sliding"], "method.options.window_schedule: 'sliding' is not one of"),
        (["method.options.window_every=0"], "method.options.window_every: must be >= 1, got 0"),
        (["method.options.ode_tail=rk4"], "method.options.ode_tail: 'rk4' is not one of euler, dpm2"),
        (
            ["method.options.window_size=0", "method.options.window_range=null", "method.options.ode_tail=dpm2"],
            "method.options.ode_tail: needs an SDE window (method.options.window_size > 0)",
        ),
        (
            [
                "method.options.window_size=0",
                "method.options.window_range=null",
                "method.options.window_schedule=iteration",
            ],
            "method.options.window_schedule: needs an SDE window",
        ),
    ],
)
def test_bad_schedule_options_are_one_line_errors(overrides, message):
    with pytest.raises(ConfigError) as err:
        build_method(resolve_config("tiny-cpu", [*SMALL, *overrides]))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_method_without_the_window_drops_its_knobs_with_a_warning():
    """As for Flow-GRPO's other knobs: a shared list of overrides keeps working for a method without them."""
    with pytest.warns(UserWarning, match="method.options.window_schedule: method ram has no such knob"):
        resolve_config("tiny-cpu", ["method.name=ram", "method.options.window_schedule=iteration"])


def test_resume_repeats_the_progressive_run_exactly(tmp_path, one_thread):
    """The window's position is a function of the iteration: a resumed run takes the same windows."""
    opts = ["log.save_every=1", "method.options.window_schedule=progressive", "method.options.window_every=1"]
    full = _trainer(tmp_path / "full", *opts, "train.iterations=3").train()
    _trainer(tmp_path / "part", *opts, "train.iterations=1").train()
    resumed = _trainer(tmp_path / "part", *opts, "train.iterations=3", "resume=latest").train()
    assert len(resumed) == 2
    for a, b in zip(full[1:], resumed, strict=True):
        assert {k: v for k, v in a.items() if not k.startswith(SKIP)} == {
            k: v for k, v in b.items() if not k.startswith(SKIP)
        }
