"""MixGRPO's moving SDE window as an option of the SDE methods (arXiv 2507.21802; Tencent-Hunyuan/MixGRPO
fastvideo/utils/grpo_states.py ``update_iteration``, verl-omni docs/algo/mixgrpo.md): the progressive positions by
hand, one seeded draw per iteration shared by every batch, the DPM-Solver++ tail after the window, errors, resume."""

import random

import pytest
import torch

from flowrl.config import ConfigError
from flowrl.methods import build_method
from flowrl.plan import make_plan, window_start
from flowrl.resolve import resolve_config
from flowrl.seeds import seed_of
from flowrl.trainer import Trainer
from tiny_runs import NO_EVAL, assert_resume_repeats, small

SMALL = small(4, *NO_EVAL, "method.options.window_size=1", "method.options.window_range=[0,3]")


class _AuthorsStates:
    """Tencent-Hunyuan/MixGRPO (e5cdd6a) fastvideo/utils/grpo_states.py, GRPOTrainingStates with
    sample_strategy="progressive", restated: train_grpo_flux.py builds it with max_timesteps = sampling_steps - 2
    and, each iteration, trains get_current_timesteps() = range(cur, min(cur + group_size, max_timesteps)) and then
    calls update_iteration(): the counter advances, every iters_per_group iterations cur += group_size, and once
    cur > max_timesteps it rolls back to 0 (roll_back) or is clipped to max_timesteps."""

    def __init__(self, every, size, top, roll_back):
        self.every, self.size, self.top, self.roll_back = every, size, top, roll_back
        self.cur = self.count = 0

    def timesteps(self):
        return list(range(self.cur, min(self.cur + self.size, self.top)))

    def update(self):
        self.count += 1
        if self.count >= self.every:
            self.count = 0
            self.cur += self.size
        if self.cur > self.top:
            if self.roll_back:
                self.cur = self.count = 0
            else:
                self.cur = self.top


def _trained(schedule, it, size, lo, hi, every=1, wrap=True, steps=25):
    start = window_start(schedule, it, size, lo, hi, every, wrap)
    return make_plan(torch.linspace(1, 0, steps + 1), "flow_sde", 0.7, size, (lo, hi), start=start).trained_indices


def test_progressive_positions_by_hand():
    """The authors' FLUX run: 25 steps, window 4, every 25 iterations, max_timesteps = 25 - 2 = 23 (hi). Starts
    0, 4, ..., 20 while start <= 23: 6 positions, iterations 0-24 at 0, 25-49 at 4, ..., 125-149 at 20, whose window
    is cut at 23 to steps 20, 21, 22; at 150 the start 24 > 23 rolls back to 0 (roll_back), or is clipped to 23,
    where the window range(23, 23) is empty: nothing trains from then on."""
    at = [window_start("progressive", i, 4, 0, 23, 25) for i in (0, 24, 25, 49, 50, 125, 149, 150, 175)]
    assert at == [0, 0, 4, 4, 8, 20, 20, 0, 4]
    assert _trained("progressive", 0, 4, 0, 23, 25) == [0, 1, 2, 3]
    assert _trained("progressive", 125, 4, 0, 23, 25) == [20, 21, 22]  # not 20-23
    stay = [window_start("progressive", i, 4, 0, 23, 25, wrap=False) for i in (125, 150, 1000)]
    assert stay == [20, 23, 23]
    assert _trained("progressive", 150, 4, 0, 23, 25, wrap=False) == []
    # the official run (its 300 iterations, and 400): 50 (125-149 and 275-299) train 3 steps, the others 4
    sizes = [len(_trained("progressive", i, 4, 0, 23, 25)) for i in range(400)]
    assert sizes.count(3) == 50 and sizes.count(4) == 350 and sizes[:300].count(3) == 50
    assert [i for i, n in enumerate(sizes) if n == 3] == [*range(125, 150), *range(275, 300)]
    # hi a multiple of the size (26 steps: max_timesteps 24): the 7th position starts at 24 and is empty, even
    # with roll_back, since only a start > 24 rolls back
    assert [_trained("progressive", i, 4, 0, 24, 1, steps=26) for i in (5, 6, 7)] == [
        [20, 21, 22, 23],
        [],
        [0, 1, 2, 3],
    ]
    # a range that does not start at 0: [2, 9], size 3: starts 2, 5, 8 (cut to step 8), then back to 2 or stay at 9
    assert [window_start("progressive", i, 3, 2, 9, 1) for i in range(4)] == [2, 5, 8, 2]
    assert [window_start("progressive", i, 3, 2, 9, 1, wrap=False) for i in range(5)] == [2, 5, 8, 9, 9]
    assert [_trained("progressive", i, 3, 2, 9, 1, steps=10) for i in range(4)] == [
        [2, 3, 4],
        [5, 6, 7],
        [8],
        [2, 3, 4],
    ]


@pytest.mark.parametrize("steps, size, every, roll_back", [(25, 4, 25, True), (25, 4, 3, False), (26, 4, 2, True),
                                                          (16, 3, 1, True), (16, 3, 1, False), (10, 8, 2, True)])  # fmt: skip
def test_progressive_windows_are_the_authors_iteration_by_iteration(steps, size, every, roll_back):
    """The trained steps of every iteration equal the authors' states machine above, over several cycles."""
    top = steps - 2
    authors = _AuthorsStates(every, size, top, roll_back)
    for it in range(every * (top // size + 3) * 2):
        assert _trained("progressive", it, size, 0, top, every, roll_back, steps) == authors.timesteps(), it
        authors.update()


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
    # a window cut at hi (the authors' last position), and an empty one at hi: every step an ODE step
    cut = make_plan(torch.linspace(1, 0, 7), "flow_sde", 0.7, 2, (0, 5), start=4, tail="dpm2")
    assert cut.kinds == ("ode",) * 4 + ("flow_sde", "dpm2") and cut.trained_indices == [4]
    empty = make_plan(torch.linspace(1, 0, 7), "flow_sde", 0.7, 2, (0, 5), start=5, tail="dpm2")
    assert empty.kinds == ("ode",) * 5 + ("dpm2",) and empty.trained_indices == []
    with pytest.raises(ValueError, match="window start 6 is outside \\[0, 5\\]"):
        make_plan(torch.linspace(1, 0, 7), "flow_sde", 0.7, 2, (0, 5), start=6)


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
    """Range [0, 3], size 1, every 2 iterations: starts 0, 1, 2, then 3 = hi, where the authors' window is empty
    (range(3, 3)), for 2 iterations, before 4 > 3 rolls back to 0."""
    tr = _trainer(
        tmp_path,
        "method.options.window_schedule=progressive",
        "method.options.window_every=2",
        "method.options.ode_tail=dpm2",
    )
    assert [_starts(tr, it)[0] for it in range(6)] == [0, 0, 1, 1, 2, 2]
    assert [b.traj.plan.trained_indices for it in (6, 7) for b in tr.collect(it, tr.context(it))[0]] == [[]] * 4
    assert _starts(tr, 8)[0] == 0
    plan = tr.collect(2, tr.context(2))[0][0].traj.plan
    assert plan.kinds == ("ode", "flow_sde", "dpm2", "dpm2")


def test_an_empty_window_takes_no_optimizer_step(tmp_path, one_thread):
    """window_wrap=false: after the last position the window stays at hi and is empty (the authors' clip), so the
    rollout is all ODE steps (4 x 8 rows x 2 for CFG = 64 evaluations), the rewards are scored, and nothing
    trains."""
    tr = _trainer(
        tmp_path,
        "method.options.window_schedule=progressive",
        "method.options.window_every=1",
        "method.options.window_wrap=false",
        "train.iterations=5",
    )
    rows = tr.train()
    assert [r["cost/optimizer_steps"] for r in rows] == [2.0, 2.0, 2.0, 0.0, 0.0]
    assert rows[3]["cost/nfe"] == 4 * 8 * 2 and rows[3]["cost/reward_calls"] == 8


def test_the_schedules_default_range_is_the_authors_max_timesteps(tmp_path, one_thread):
    """Without window_range, iteration and progressive take [0, num_steps - 2] (train_grpo_flux.py's max_timesteps =
    sampling_steps - 2): 4 steps, size 1, so the draw is randint(0, 4 - 2 - 1) = randint(0, 1); progressive every
    iteration: 0, 1, then 2 = hi (empty), then back to 0. A window that does not fit there is one line."""
    tr = _trainer(tmp_path, "method.options.window_range=null", "method.options.window_schedule=iteration")
    for it in (0, 1, 2, 3):
        want = random.Random(seed_of(tr.cfg.seed, it, "window", 0)).randint(0, 1)
        assert _starts(tr, it) == [want, want]
    tr = _trainer(
        tmp_path,
        "method.options.window_range=null",
        "method.options.window_schedule=progressive",
        "method.options.window_every=1",
    )
    assert [b.traj.plan.trained_indices for it in range(4) for b in tr.collect(it, tr.context(it))[0][:1]] == [
        [0],
        [1],
        [],
        [0],
    ]
    with pytest.raises(ConfigError, match="method.options.window_size: 3 exceeds the window schedule's range"):
        build_method(
            resolve_config(
                "tiny-cpu",
                [
                    *SMALL,
                    "method.options.window_range=null",
                    "method.options.window_size=3",
                    "method.options.window_schedule=iteration",
                ],
            )
        )


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
    assert_resume_repeats(lambda out, *o: _trainer(out, *o).train(), tmp_path, *opts)
