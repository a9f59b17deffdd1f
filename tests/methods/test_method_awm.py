"""AWM, Advantage Weighted Matching (arXiv 2509.25050; scxue/advantage_weighted_matching scripts/train_sd3_awm.py
``compute_log_prob_awm`` and the loss of its training loop, config/dgx_awm.py): the surrogate log-probs and the loss by
hand, the time strata, costs, the KL-EMA average, options, the recipe and exact resume."""

import math

import pytest
import torch

from flowrl.config import ConfigError
from flowrl.methods import build_method
from flowrl.methods.awm import AWM, AWMOptions, matching_loss, strata_times, surrogate_log_prob
from flowrl.methods.forward_process import Endpoints
from flowrl.resolve import resolve_config
from flowrl.trainer import Trainer
from stand_ins import FixedVelocity
from tiny_runs import NO_EVAL, assert_resume_repeats, small

SMALL = [
    "method.name=awm",
    *small(4, "train.optimizer_steps_per_iteration=1", *NO_EVAL, "method.options.num_noisings=2"),
]


def _trainer(tmp_path, *overrides) -> Trainer:
    return Trainer(resolve_config("tiny-cpu", [f"output_dir={tmp_path}", *SMALL, *overrides]))


def test_the_surrogate_log_probs_by_hand():
    """compute_log_prob_awm with l = 0.0625 at t = 1/2: uniform -l = -0.0625; t: -0.03125; t**2: -0.015625;
    huber -(sqrt(l + 1e-10) - 1e-5) t = -(0.25 - 1e-5) / 2 = -0.124995; ghuber (p = 1/4)
    -((l + 1e-10)^p - (1e-10)^p) t / p = -2 (0.5 - 10^-2.5) = -0.99367544."""
    loss, t = torch.tensor([0.0625]), torch.tensor([0.5])
    want = {
        "uniform": -0.0625,
        "t": -0.03125,
        "t2": -0.015625,
        "huber": -(0.25 - 1e-5) / 2,
        "ghuber": -2 * (0.5 - 10**-2.5),
    }
    for weighting, value in want.items():
        got = surrogate_log_prob(loss, t, weighting, 0.25)
        assert got.dtype == torch.float64 and float(got) == pytest.approx(value, rel=1e-7), weighting
    with pytest.raises(ValueError, match="unknown AWM weighting 'l1'"):
        surrogate_log_prob(loss, t, "l1")


def test_the_matching_loss_is_the_flow_matching_loss():
    """l = mean (v - (eps - x0))^2: 0 at the target; (0.2, -0.2) off it gives 0.04."""
    x0, eps = torch.zeros(1, 2), torch.tensor([[1.0, -1.0]])
    assert float(matching_loss(eps - x0, x0, eps)) == 0.0
    assert float(matching_loss(torch.tensor([[1.2, -1.2]]), x0, eps)) == pytest.approx(0.04)


def test_the_loss_by_hand():
    """The training loop's loss, one row of two elements: x0 = 0, eps = (1, -1) so u = (1, -1); v = v_old = (1.2, -1.2)
    (on-policy: ratio 1); uniform weighting, t = 1/2; A = 2.5 clipped to 5 and scaled by advantage_max / adv_clip_max
    = 1/5 to 0.5, so the policy term is max(-0.5, -0.5 clip(1)) = -0.5; v_ref = 0 gives 0.001 x mean(1.44, 1.44)
    = 0.00144 and v_ema = u gives 1 x 0.04: L = -0.45856. The gradient moves v towards u for A > 0."""
    method = AWM(resolve_config("tiny-cpu", [*SMALL, "method.options.weighting=uniform"]))
    u = torch.tensor([[1.0, -1.0]])
    v_old = torch.tensor([[[1.2, -1.2]]])
    unit = Endpoints(
        torch.zeros(1, 2),
        torch.tensor([[0.5]]),
        u.unsqueeze(1),
        torch.zeros(1),
        velocities={"current": v_old, "ref": torch.zeros(1, 1, 2), "old": u.unsqueeze(1)},
    )
    v = v_old[:, 0].clone().requires_grad_(True)
    tl = method.transition_loss(FixedVelocity(v), unit, 0, {}, torch.tensor([2.5]))
    assert float(tl.policy_loss) == pytest.approx(-0.5, rel=1e-6)
    assert float(tl.kl) == pytest.approx(1.44, rel=1e-6)
    assert float(tl.loss) == pytest.approx(-0.45856, rel=1e-6)  # -0.5 + 0.001 x 1.44 + 1 x 0.04
    assert float(tl.ratio_mean) == 1.0 and float(tl.clip_frac) == 0.0
    method.options.kl_beta = method.options.ema_kl_beta = 0.0
    method.transition_loss(FixedVelocity(v), unit, 0, {}, torch.tensor([2.5])).loss.backward()
    assert float(((v - u) * -v.grad).sum()) < 0  # descent shrinks v - u


def test_the_time_strata_of_the_official_config():
    """discrete_wo_init at 14 steps, fraction 0.9, 6 times: indices floor(linspace(1, 12, 7)) = 1, 2, 4, 6, 8, 10, 12,
    so time j lies at grid index 1 (j = 0) or in {2j, 2j + 1}, each half the time; never index 0 (sigma 1)."""
    grid = torch.linspace(1.0, 1 / 14, 14)
    t = strata_times(grid, (4000, 6), 0.9, torch.Generator().manual_seed(0))
    index = (t.unsqueeze(-1) - grid).abs().argmin(dim=-1)  # (4000, 6)
    assert bool((index[:, 0] == 1).all())
    for j in range(1, 6):
        assert set(index[:, j].unique().tolist()) == {2 * j, 2 * j + 1}
        assert float((index[:, j] == 2 * j).float().mean()) == pytest.approx(0.5, abs=0.03)
    with pytest.raises(ValueError, match="leave one empty"):
        strata_times(grid, (1, 12), 0.9)


def test_costs_one_step_and_the_kl_average(tmp_path, one_thread):
    """Per iteration: N reward calls; N T CFG rows for the stochastic endpoints, N K no-grad rows for each of the
    current (the old log-prob), reference and KL-EMA velocities, and N K training rows (every row trains); one
    optimizer step; the KL-EMA moves with d = min(0.001 s, 0.3) = 0.001 after it."""
    tr = _trainer(tmp_path, "train.iterations=1")
    initial = {k: p.detach().clone() for k, p in tr.policy.trainable.items()}
    (row,) = tr.train()
    n, t, k = 8, 4, 2
    assert row["cost/reward_calls"] == n
    assert row["cost/nfe"] == n * t * 2 + n * k * 3 + n * k
    assert tr.updater.optimizer_steps == 1 and row["policy/ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert tr.method.averages()["old"](1) == pytest.approx(0.001)
    for name, p in tr.policy.trainable.items():
        want = 0.001 * initial[name] + 0.999 * p.detach().float()
        torch.testing.assert_close(tr.policy.averages["old"].shadow[name], want)


def test_the_default_noisings_are_six_strata_or_what_the_grid_holds():
    """K = 6 (train_timesteps) where int(N 0.9) - 1 >= 6 strata fit (N = 8 and up), else that many: 2 at 4 steps."""
    small = [o for o in SMALL if not o.startswith("method.options.num_noisings")]
    for steps, k in ((4, 2), (6, 4), (8, 6), (14, 6)):
        cfg = resolve_config("tiny-cpu", [*small, f"sample.num_steps={steps}"])
        assert build_method(cfg).num_noisings == k, steps
    with pytest.raises(ConfigError, match="time_fraction: the grid indices \\[1, 1\\] of sample.num_steps=2 hold no"):
        build_method(resolve_config("tiny-cpu", [*small, "sample.num_steps=2"]))
    cfg = resolve_config("tiny-cpu", [*small, "sample.num_steps=2", "method.options.time_fraction=1.0"])
    assert build_method(cfg).num_noisings == 1


def test_without_the_kls_no_other_weights_are_evaluated():
    cfg = resolve_config("tiny-cpu", [*SMALL, "method.options.kl_beta=0", "method.options.ema_kl_beta=0"])
    method = build_method(cfg)
    assert method.target_weights() == ("current",) and not method.needs().reference


@pytest.mark.parametrize(
    "override, message",
    [
        ("method.options.weighting=l1", "method.options.weighting: 'l1'; allowed: uniform, t, t2, huber, ghuber"),
        ("method.options.ghuber_power=0", "method.options.ghuber_power: must be > 0"),
        ("method.options.clip_range=0", "method.options.clip_range: must be > 0"),
        ("method.options.kl_beta=-1", "method.options.kl_beta: must be >= 0"),
        ("method.options.time_fraction=1.5", "method.options.time_fraction: must be in (0, 1]"),
        ("method.options.time_law=uniform", "method.options.time_law: 'uniform'; allowed: power, grid, strata"),
        (
            "method.options.num_noisings=3",
            "method.options.num_noisings: 3 strata of the grid indices [1, 3] (sample.num_steps=4, time_fraction=0.9) "
            "leave one empty: at most 2",
        ),
        (
            "method.options.endpoint_noise_level=0",
            "sample.same_noise_in_group=true would make every member of a group the same image",
        ),
    ],
)
def test_bad_options_are_one_line_errors(override, message):
    overrides = [*SMALL, override, "sample.same_noise_in_group=true"]
    with pytest.raises(ConfigError) as err:
        build_method(resolve_config("tiny-cpu", overrides))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_stochastic_endpoints_take_a_shared_group_noise():
    """The endpoints' SDE makes members of a group differ even from one initial noise."""
    build_method(resolve_config("tiny-cpu", [*SMALL, "sample.same_noise_in_group=true"]))


def test_resume_repeats_the_uninterrupted_run_exactly(tmp_path, one_thread):
    opts = ["log.save_every=1"]
    assert_resume_repeats(lambda out, *o: _trainer(out, *o).train(), tmp_path, *opts, iterations=2)


def test_the_sd35m_recipe_carries_the_official_config():
    """config/dgx_awm.py geneval_sd3_no_cfg_1node: 512 px, 14 steps (noise 0.4) and 40 to evaluate, guidance 1,
    24 per group, 6 times of discrete_wo_init at fraction 0.9, lr 3e-4, ghuber 0.25, clip 1, advantage_max 1 of
    adv_clip_max 5, beta 0.001 (the authors' be51372, 2026-03-27, lowered it from 0.003), ema_beta 1 with kl_ema_decay
    0.3 linear, model EMA 0.99, one step an iteration."""
    cfg = resolve_config("sd35m-awm", [])
    o = build_method(cfg).options
    assert AWMOptions().kl_beta == 0.001  # the option's default is the GenEval config's too
    s, t = cfg.sample, cfg.train
    assert (cfg.model.resolution, s.num_steps, s.eval_num_steps, s.guidance_scale, s.group_size) == (
        512,
        14,
        40,
        1.0,
        24,
    )
    assert (o.num_noisings, o.time_law, o.time_fraction, o.weighting, o.ghuber_power) == (
        6,
        "strata",
        0.9,
        "ghuber",
        0.25,
    )
    assert (o.clip_range, o.advantage_max, o.adv_clip_max, o.kl_beta, o.ema_kl_beta, o.endpoint_noise_level) == (
        1.0,
        1.0,
        5.0,
        0.001,
        1.0,
        0.4,
    )
    assert (o.old_decay_rate, o.old_decay_max, o.old_decay_unit, o.endpoint_policy) == (
        0.001,
        0.3,
        "optimizer_step",
        "current",
    )
    assert (t.learning_rate, t.optimizer_steps_per_iteration, t.ema, t.ema_decay, t.lora.rank, t.lora.alpha) == (
        3e-4,
        1,
        True,
        0.99,
        32,
        64,
    )
    assert math.isclose(t.max_grad_norm, 1.0) and set(cfg.reward) == {"geneval"}
