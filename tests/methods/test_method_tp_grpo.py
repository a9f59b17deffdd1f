"""TP-GRPO on the method seam (specs/addon_methods.md §2): the spec's cost, the pure-ODE baseline's initial
latent, each batch's window in the (N, T) credit, the batch layout over processes, exact resume, and
one-line option errors."""

import pytest
import torch

from flowrl.advantages import clip_advantages
from flowrl.cli import main
from flowrl.credit.turning_point import extra_cost, turning_point_credit
from flowrl.methods import build_method
from flowrl.methods.base import Context
from flowrl.methods.seam import RewardTable
from flowrl.methods.tp_grpo import TPGRPO
from flowrl.resolve import resolve_config
from flowrl.trainer import Trainer
from tiny_runs import NO_SAVES, assert_resume_repeats, small

# T = 4, 2 prompts x 4 samples = 8 samples in 2 rollout batches of 4
SMALL = ["method.name=tp_grpo", *small(4, *NO_SAVES)]
# a window of 2 that may start at 0, 1 or 2: the start differs between batches
MOVING = ["method.options.window_size=2", "method.options.window_range=[0, 4]"]


def _train(tmp_path, *overrides):
    return Trainer(resolve_config("tiny-cpu", [f"output_dir={tmp_path}", *SMALL, *overrides])).train()


def _record_windows(monkeypatch):
    """(iteration, batch position, rows, window start) of every explored batch."""
    seen = []
    explore = TPGRPO.explore

    def spy(self, ctx, batch):
        exp = explore(self, ctx, batch)
        seen.append((ctx.iteration, batch.position, len(batch.prompts), self.window_start(exp.traj.plan)))
        return exp

    monkeypatch.setattr(TPGRPO, "explore", spy)
    return seen


@pytest.mark.parametrize("beta", [0.0, 0.01])
def test_cost_is_the_spec_count_with_the_default_window(tmp_path, one_thread, beta):
    """Default window W = T - 1 = 3 from step 0. Per sample, CFG 2 rows a forward: main rollout 4, and
    §2's extra T + Σ_{m=1..W-1} (T - m) = 4 + 3 + 2 = 9 (``extra_cost``), so 2 * 13 = 26; 8 samples: 208.
    Update: 8 samples x 3 trained window transitions x 2 rows = 48 policy forwards, and as many reference
    forwards with beta > 0. Reward calls: W + 1 = 4 a sample, 32."""
    rows = _train(tmp_path, "train.iterations=2", f"method.options.beta={beta}")
    per_sample = 2 * 4 + extra_cost(4, 3, cfg_passes=2).nfe
    assert per_sample == 26
    assert all(r["adv/kept_frac"] == 1.0 for r in rows)  # no row dropped: every sample trains
    update = 8 * 3 * 2 * (2 if beta > 0 else 1)
    assert [r["cost/nfe"] for r in rows] == [8 * per_sample + update] * 2 == [[256, 304][beta > 0]] * 2
    assert [r["cost/reward_calls"] for r in rows] == [8 * (3 + 1)] * 2
    assert rows[0]["policy/onpolicy_logp_diff"] == 0.0  # the recomputed CPS log-prob is the rollout's


def test_cost_with_a_moving_window_counts_each_batch_completions(tmp_path, one_thread, monkeypatch):
    """W = 2 starting at s: completion of state s + 1 costs T - s - 1 forwards; the pure ODE is T."""
    seen = _record_windows(monkeypatch)
    rows = _train(tmp_path, "train.iterations=2", *MOVING)
    assert len({s for *_, s in seen}) > 1  # the windows do move between batches
    for it, row in enumerate(rows):
        batches = [(n, s) for i, _, n, s in seen if i == it]
        rollout = sum(n * 2 * (4 + 4 + (4 - s - 1)) for n, s in batches)
        assert row["cost/nfe"] == rollout + 8 * row["adv/kept_frac"] * 2 * 2
        assert row["cost/reward_calls"] == 8 * 3


@pytest.mark.parametrize("mode", ["shared", "independent"])
def test_pure_ode_baseline_starts_from_the_rollouts_initial_latent(tmp_path, one_thread, monkeypatch, mode):
    """§2 oracle: the pure-ODE rollout gets a tensor bitwise equal to the main rollout's initial latent
    (paper intent); ``independent`` (the released code) draws it from ("tp_baseline", batch position)."""
    calls = []
    rollout = Context.rollout

    def spy(self, plan, noise, cond, group_ids, generator, **kwargs):
        calls.append((self, plan, noise.clone()))
        return rollout(self, plan, noise, cond, group_ids, generator, **kwargs)

    monkeypatch.setattr(Context, "rollout", spy)
    _train(tmp_path, "train.iterations=1", f"method.options.baseline_noise={mode}")
    main_calls = [(c, n) for c, p, n in calls if "cps" in p.kinds]
    pure = [n for _, p, n in calls if set(p.kinds) == {"ode"} and len(p) == 4 and float(p.sigma[0]) == 1.0]
    assert len(main_calls) == len(pure) == 2  # one rollout and one pure ODE per batch, in order
    for position, ((ctx, x0), baseline) in zip((0, 4), zip(main_calls, pure, strict=True)):
        if mode == "shared":
            assert torch.equal(baseline, x0)
        else:
            assert not torch.equal(baseline, x0)
            drawn = ctx.adapter.initial_noise(len(x0), ctx.generator("tp_baseline", position))
            assert torch.equal(baseline, drawn)


def test_credit_puts_each_batch_window_at_its_own_transitions(tmp_path, one_thread, monkeypatch):
    """Ragged batches (8 samples in 3, 3, 2) with moving windows: column j of the (N, T) credit is
    transition j of the row's own plan; inside the window it is the clipped turning-point advantage of the
    (N, W+1) table, 0 outside; the balancing pools (the default) are the rollout batches."""
    seen = _record_windows(monkeypatch)
    credits = []
    credit = TPGRPO.credit

    def spy(self, table):
        out = credit(self, table).values
        credits.append((table.columns, table.group_ids, out))
        return credit(self, table)

    monkeypatch.setattr(TPGRPO, "credit", spy)
    _train(tmp_path, "train.iterations=2", "sample.batch_size=3", *MOVING)
    assert [(p, n) for i, p, n, _ in seen if i == 0] == [(0, 3), (3, 3), (6, 2)]
    assert len({s for *_, s in seen}) > 1
    for it, (rewards, group_ids, out) in enumerate(credits):
        assert {k for k in rewards if "/" not in k} == {"final", "completion", "pure_ode", "window_start"}
        # each reward's own score of every scored name, beside the weighted one
        assert {k.split("/")[0] for k in rewards if "/" in k} == {"final", "completion", "pure_ode"}
        assert rewards["completion"].shape == (8, 1)
        table = torch.cat([rewards["pure_ode"], rewards["completion"], rewards["final"][:, None]], dim=1)
        pools = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2])
        want = clip_advantages(turning_point_credit(table, group_ids, pools=pools).advantages, 5.0)  # (8, 2)
        assert out.shape == (8, 4)
        for _, position, n, start in (b for b in seen if b[0] == it):
            block = out[position : position + n]
            assert torch.equal(block[:, start : start + 2], want[position : position + n])
            assert not block[:, :start].any() and not block[:, start + 2 :].any()


def test_credit_is_a_pure_function_of_the_gathered_columns():
    """Each row's window comes from its gathered ``window_start``: two method objects (two processes)
    given the same columns return the same (N, T) credit, each row's block at its own window."""
    cfg = resolve_config("tiny-cpu", [*SMALL, "sample.batch_size=3", *MOVING])
    torch.manual_seed(0)
    starts = torch.tensor([0, 0, 0, 2, 2, 2, 1, 1], dtype=torch.float32)
    columns = {
        "final": torch.rand(8),
        "completion": torch.rand(8, 1),
        "pure_ode": torch.rand(8, 1),
        "window_start": starts,
    }
    group_ids = torch.arange(2).repeat_interleave(4)
    outs = [build_method(cfg).credit(RewardTable(columns, group_ids)).values for _ in range(2)]
    assert torch.equal(outs[0], outs[1]) and outs[0].shape == (8, 4)
    for row, start in enumerate(starts.long().tolist()):
        assert not outs[0][row, :start].any() and not outs[0][row, start + 2 :].any()


def test_turning_points_are_balanced_within_each_rollout_batch_by_default():
    """The authors balance turning points within one process's rollout batch, not over the iteration
    (YunzeTong/TurningPoint-GRPO 994d26a, scripts/my_train_sd3_fast_with_op3.py: the "balanced bonus" runs
    per sampled batch on each process, before the gather). W = 2 (only k = 0 can turn), rollout batches of
    2: a, b (Δ = +.3, +.5) and c, e (Δ = +.1, -.2); every k = 0 is a turning point.
      batch pools: {a, b} holds one sign (keep both), {c, e} one of each (keep both): all four take
        R_2 - R_0 at k = 0: a .3, b .5, c .1, e -.2; k = 1 keeps d_1: a .2, b .3, c .05, e -.1.
      (the whole iteration pooled, the old default: 3 positive, 1 negative, keep b and e: a .1, c .05.)
    Groups {a, b}, {c, e}, population std, eps 1e-4:
      k = 0: .3, .5 -> -+.1/.1001; .1, -.2 -> mean -.05, std .15 -> +-.15/.1501
      k = 1: .2, .3 -> -+.05/.0501; .05, -.1 -> mean -.025, std .075 -> +-.075/.0751"""
    cfg = resolve_config(
        "tiny-cpu",
        [
            *SMALL,
            "sample.batch_size=2",
            "sample.group_size=2",
            "method.options.window_size=2",
            "method.options.global_std=false",
        ],
    )
    table = torch.tensor([[0.5, 0.6, 0.8], [0.2, 0.4, 0.7], [0.5, 0.55, 0.6], [0.5, 0.4, 0.3]])  # R_0, R_1, R_2
    columns = {
        "pure_ode": table[:, :1],
        "completion": table[:, 1:2],
        "final": table[:, 2],
        "window_start": torch.zeros(4),
    }
    method = build_method(cfg)
    out = method.credit(RewardTable(columns, torch.tensor([0, 0, 1, 1]))).values  # (4, T = 4)
    assert method.last_credit.turning_points[:, 0].tolist() == [True] * 4
    want = [
        [-0.1 / 0.1001, -0.05 / 0.0501],
        [0.1 / 0.1001, 0.05 / 0.0501],
        [0.15 / 0.1501, 0.075 / 0.0751],
        [-0.15 / 0.1501, -0.075 / 0.0751],
    ]
    assert out[:, :2].tolist() == [pytest.approx(row, abs=1e-5) for row in want]
    assert not out[:, 2:].any()
    pooled = build_method(
        resolve_config(
            "tiny-cpu",
            [
                *SMALL,
                "sample.batch_size=2",
                "sample.group_size=2",
                "method.options.window_size=2",
                "method.options.global_std=false",
                "method.options.balance_pool=iteration",
            ],
        )
    )
    pooled.credit(RewardTable(columns, torch.tensor([0, 0, 1, 1])))
    assert pooled.last_credit.turning_points[:, 0].tolist() == [False, True, False, True]


def test_balancing_pools_are_global_blocks_of_the_batch_size():
    """Pools are blocks of ``sample.batch_size`` consecutive samples in global order: a process's own
    rollout batches when its share is a multiple of the batch size, and never a function of the number of
    processes (8 samples in batches of 3: [0, 3), [3, 6), [6, 8) whether one process cuts 3, 3, 2 or two
    processes cut 3, 1 each)."""
    method = build_method(resolve_config("tiny-cpu", [*SMALL, "sample.batch_size=3"]))
    assert method.balance_pools(8).tolist() == [0, 0, 0, 1, 1, 1, 2, 2]
    method = build_method(resolve_config("tiny-cpu", [*SMALL, "method.options.balance_pool=iteration"]))
    assert method.balance_pools(8) is None


def test_resume_repeats_the_uninterrupted_run_exactly(tmp_path, one_thread):
    """Moving windows, per-batch pools and independent baseline noise: every draw is seeded by (seed,
    iteration, purpose, position), and credit recomputes the windows, so a run resumed from iteration 1
    logs what the uninterrupted run logged."""
    opts = [*MOVING, "method.options.baseline_noise=independent"]
    full = assert_resume_repeats(_train, tmp_path, "log.save_every=1", *opts)
    assert full[0]["policy/onpolicy_logp_diff"] == 0.0


def test_default_options_are_the_released_settings():
    method = build_method(resolve_config("tiny-cpu", ["method.name=tp_grpo", "sample.num_steps=10"]))
    o = method.options
    assert (o.sde_type, o.noise_level, o.eta, o.first_step, o.consistency, o.balance, o.drop_incremental) == (
        "cps",
        0.7,
        1.0,
        True,
        True,
        True,
        True,
    )
    assert method.window_size == 9 and method.window_range == (0, 9)  # the released window (0, 9) at T = 10
    # the authors balance within each rollout batch (common_op3.sh, use_balanced_bonus on one process's batch)
    assert (o.baseline_noise, o.balance_pool) == ("shared", "batch")


def test_the_sd35m_recipe_carries_the_authors_launch_settings():
    """YunzeTong/TurningPoint-GRPO 994d26a: scripts/multi_node/common_op3.sh (BETA=0.0001 on 32 processes) over
    config/my_grpo.py pickscore_sd3_fast_op3: train_batch_size 9, 24 images a prompt, num_batches_per_epoch =
    48 / (32 x 9 / 24) = 4, so 32 x 9 x 4 = 1152 samples (48 prompts) an epoch, gradient_accumulation_steps =
    4 // 2 = 2 rollout batches: two optimizer steps an epoch."""
    cfg = resolve_config("sd35m-tp-grpo")
    s, t, o = cfg.sample, cfg.train, build_method(cfg).options
    assert o.beta == 1e-4
    assert s.prompts_per_iteration * s.group_size == 1152 and t.optimizer_steps_per_iteration == 2
    assert s.batch_size == 9 and (1152 // 32) % s.batch_size == 0  # 4 rollout batches of 9 per GPU: the pools
    assert (o.balance_pool, o.baseline_noise, o.noise_level, o.eta) == ("batch", "independent", 0.7, 1.0)
    assert (o.clip_range, o.global_std, t.learning_rate) == (1e-5, False, 3e-4)


@pytest.mark.parametrize(
    "option, message",
    [
        ("method.options.eta=-1", "method.options.eta: must be > 0"),
        ("method.options.noise_level=0", "method.options.noise_level: must be > 0"),
        ("method.options.sde_type=ode", "method.options.sde_type: 'ode' is not one of cps, flow_sde, dance_sde"),
        ("method.options.window_size=0", "method.options.window_size: must be >= 1"),
        ("method.options.window_size=9", "method.options.window_size: 9 exceeds sample.num_steps=6"),
        ("method.options.window_range=[0, 2]", "method.options.window_range: [0, 2] is shorter than window_size=5"),
        ("method.options.window_range=[1, 7]", "method.options.window_range: [1, 7] ends past sample.num_steps=6"),
        ("method.options.window_range=[3]", "method.options.window_range: [3] must be [lo, hi]"),
        (
            "method.options.baseline_noise=fresh",
            "method.options.baseline_noise: 'fresh' is not one of shared, independent",
        ),
        ("method.options.balance_pool=gpu", "method.options.balance_pool: 'gpu' is not one of batch, iteration"),
        ("method.options.consistency=maybe", "method.options.consistency: expected true or false"),
        (
            "method.options.frist_step=true",
            "unknown key 'method.options.frist_step'; did you mean 'method.options.first_step'",
        ),
    ],
)
def test_bad_options_are_one_line_errors(option, message, capsys):
    assert main(["validate", "method.name=tp_grpo", option]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_turning_point_figures_are_logged_and_known_before_the_run(tmp_path, one_thread):
    from flowrl.preflight import logged_metric_names

    rows = _train(tmp_path, "train.iterations=1")
    cfg = resolve_config("tiny-cpu", ["method.name=tp_grpo"])
    names = {k for k in rows[0] if k.startswith("method/")}
    assert names == {f"method/{k}" for k in build_method(cfg).needs().metrics}
    assert names <= logged_metric_names(cfg)
    assert 0 <= rows[0]["method/tp/active_frac"] <= 1


def test_the_toy_comparison_gives_tp_grpo_the_recipes_window():
    """`benchmarks.toy.compare` runs tp_grpo with the toy recipe's own SDE and window (same budget of
    stochastic, trained transitions as Flow-GRPO there)."""
    from flowrl.benchmarks.toy.compare import runs_to_make

    cfg = resolve_config("toy-flow-grpo", [*runs_to_make(["tp_grpo"])["tp_grpo"], "model.path=tiny"])
    method = build_method(cfg)
    assert (method.window_size, method.window_range, method.options.noise_level) == (2, (0, 4), 0.8)
    assert method.options.sde_type == resolve_config("toy-flow-grpo").method.options["sde_type"] == "cps"
