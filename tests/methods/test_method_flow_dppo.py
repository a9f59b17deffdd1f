"""Flow-DPPO (arXiv 2606.11025; Tencent-Hunyuan/UniRL unirl/algorithms/flowdppo.py ``_flowdppo_kl_adv_loss``): the
divergence-masked loss by hand, its KL scale against UniRL's σ_t, its costs, options, recipes and exact resume."""

import math

import pytest
import torch

from flowrl.config import ConfigError
from flowrl.losses import dppo_mask_loss
from flowrl.methods import build_method
from flowrl.resolve import resolve_config
from flowrl.sde import flow_sde
from flowrl.trainer import Trainer
from tiny_runs import NO_EVAL, assert_resume_repeats, small

SMALL = ["method.name=flow_dppo", *small(4, *NO_EVAL)]


def _trainer(tmp_path, *overrides) -> Trainer:
    return Trainer(resolve_config("tiny-cpu", [f"output_dir={tmp_path}", *SMALL, *overrides]))


def test_the_masked_loss_by_hand():
    """UniRL's rule (paper Eq. 18), four rows of two elements, step std s = 0.5 (2 s^2 = 0.5), threshold 0.01:

    row 0: A = 1, rho = 2, mu - mu_old = (0.1, 0.1): KL = mean(0.01, 0.01) / 0.5 = 0.02 >= 0.01, rho > 1 with A > 0:
           dropped;
    row 1: A = -1, rho = 1/2, the same KL: rho < 1 with A < 0: dropped;
    row 2: A = 1, rho = 1/2, the same KL: corrective, kept: -A rho = -0.5;
    row 3: A = -2, rho = 2, mu - mu_old = (0.01, 0): KL = 0.00005 / 0.5 = 1e-4 < 0.01: kept: -A rho = 4.
    L = (0 + 0 - 0.5 + 4) / 4 = 0.875; dropped fraction 1/2; approx_kl = 0.5 (ln 2)^2 = 0.2402265.
    dL/dlogp = -A rho / 4 on kept rows: (0, 0, -0.125, 1)."""
    ln2 = math.log(2)
    log_prob = torch.tensor([ln2, -ln2, -ln2, ln2], requires_grad=True)
    old_log_prob = torch.zeros(4)
    old_mean = torch.zeros(4, 2)
    mean = torch.tensor([[0.1, 0.1], [0.1, 0.1], [0.1, 0.1], [0.01, 0.0]])
    adv = torch.tensor([1.0, -1.0, 1.0, -2.0])
    out = dppo_mask_loss(log_prob, old_log_prob, mean, old_mean, torch.full((4,), 0.5), adv, 0.01)
    assert float(out.loss.detach()) == pytest.approx(0.875, rel=1e-6)
    assert float(out.clip_frac) == 0.5
    assert float(out.approx_kl) == pytest.approx(0.5 * ln2**2, rel=1e-6)
    out.loss.backward()
    torch.testing.assert_close(log_prob.grad, torch.tensor([0.0, 0.0, -0.125, 1.0]))
    # KL equal to the threshold drops too (UniRL keeps kl < threshold only); a tiny one keeps every row
    at = dppo_mask_loss(log_prob.detach(), old_log_prob, mean, old_mean, torch.full((4,), 0.5), adv, 0.02)
    assert float(at.clip_frac) == 0.5
    free = dppo_mask_loss(log_prob.detach(), old_log_prob, mean, old_mean, torch.full((4,), 0.5), adv, 1.0)
    assert float(free.clip_frac) == 0.0 and float(free.loss) == pytest.approx((-2 + 0.5 - 0.5 + 4) / 4)


def test_an_overflowing_ratio_of_a_dropped_row_gives_no_nan():
    out = dppo_mask_loss(
        torch.tensor([200.0], requires_grad=True),
        torch.zeros(1),
        torch.ones(1, 2),
        torch.zeros(1, 2),
        torch.ones(1),
        torch.ones(1),
        1e-5,
    )
    assert float(out.loss) == 0.0 and float(out.clip_frac) == 1.0


def test_the_kl_scale_is_unirl_sigma_t():
    """UniRL's add_kl_coefficient: sigma_t = sqrt(s / (1 - s)) eta sqrt(s - s'), the flow_sde step's own std."""
    x, v = torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4)
    out = flow_sde(v, x, 0.6, 0.5, 0.7)
    assert float(out.std[0]) == pytest.approx(math.sqrt(0.6 / 0.4) * 0.7 * math.sqrt(0.1), rel=1e-6)


def test_unirls_sigma_cap_by_hand():
    """UniRL's _compute_sigma_t: std = sqrt(s / (1 - min(s, 0.99))) eta sqrt(s - s'); flowrl's flow_sde step
    substitutes sigma_1 for s = 1 in 1 - s (Flow-GRPO). Grid 1, 0.9, 0.5, 0 at eta 0.7:

    step 0 (s = 1): flowrl g = 0.7 sqrt(1 / 0.1) = 2.2136, std = g sqrt(0.1) = 0.7; UniRL g = 0.7 sqrt(1 / 0.01) = 7,
           std = 7 sqrt(0.1) = 2.2136: KL_flowrl / KL_UniRL = (2.2136 / 0.7)^2 = 10;
    step 1 (s = 0.9 < 0.99): both g = 0.7 sqrt(0.9 / 0.1) = 2.1, the std unchanged (factor exactly 1).
    A pushing row (A = 1, rho = e^0.1 > 1) whose mean moved by (0.07, 0.07) at step 0: KL_flowrl = 0.0049 / (2 x
    0.49) = 0.005, KL_UniRL = 0.0049 / (2 x 4.9) = 0.0005; at threshold 1e-3 flowrl drops it (loss 0), UniRL keeps
    it (loss -A rho = -e^0.1 = -1.10517).
    UniRL's 10-step shift-3 recipe: sigma_1 = 3 x 0.9 / (1 + 2 x 0.9) = 27/28, so at s = 1 flowrl's 1 - s is 1/28
    and UniRL's 0.01; std^2 goes as 1 / (1 - s) and the KL as 1 / std^2: KL_flowrl / KL_UniRL = (1 / 0.01) / 28 =
    100 / 28 = 3.5714."""
    from flowrl.methods.flow_dppo import unirl_kl_std
    from flowrl.plan import make_plan

    plan = make_plan(torch.tensor([1.0, 0.9, 0.5, 0.0]), "flow_sde", 0.7, timestep_fraction=1.0)
    x, v = torch.zeros(1, 2), torch.zeros(1, 2)
    step0 = flow_sde(v, x, 1.0, 0.9, 0.7, sigma_at_one=plan.sigma_at_one)
    assert float(step0.std[0]) == pytest.approx(0.7, rel=1e-6)
    capped = unirl_kl_std(step0.std, plan, 0, 0.99)
    assert float(capped[0]) == pytest.approx(7 * math.sqrt(0.1), rel=1e-6)
    step1 = flow_sde(v, x, 0.9, 0.5, 0.7, sigma_at_one=plan.sigma_at_one)
    assert unirl_kl_std(step1.std, plan, 1, 0.99) is step1.std
    row = {"log_prob": torch.tensor([0.1]), "old_log_prob": torch.zeros(1), "mean": torch.full((1, 2), 0.07)}
    row.update(old_mean=torch.zeros(1, 2), advantages=torch.ones(1), threshold=1e-3)
    assert float(dppo_mask_loss(std=step0.std, **row).clip_frac) == 1.0
    kept = dppo_mask_loss(std=capped, **row)
    assert float(kept.clip_frac) == 0.0 and float(kept.loss) == pytest.approx(-math.exp(0.1), rel=1e-6)
    grid = torch.linspace(1, 0, 11)
    grid = 3 * grid / (1 + 2 * grid)
    ten = make_plan(grid, "flow_sde", 0.7, timestep_fraction=1.0)
    s0 = flow_sde(torch.zeros(1, 2), torch.zeros(1, 2), 1.0, float(grid[1]), 0.7, sigma_at_one=ten.sigma_at_one).std
    ratio = (float(unirl_kl_std(s0, ten, 0, 0.99)[0]) / float(s0[0])) ** 2
    assert ratio == pytest.approx(100 / 28, rel=1e-5)


def test_a_tiny_run_trains_with_unirls_cap(tmp_path, one_thread):
    """The tiny run with UniRL's cap: the option reaches the loss part and one iteration trains."""
    tr = _trainer(tmp_path, "train.iterations=1", "method.options.kl_sigma_cap=0.99")
    assert tr.method.options.kl_sigma_cap == 0.99
    (row,) = tr.train()
    assert 0 <= row["policy/clip_frac"] <= 1


def test_costs_and_one_iteration(tmp_path, one_thread):
    """N T CFG rollout rows, then per kept row each of its K = int(0.99 T) transitions: the policy's forward and
    (beta > 0) the reference's, both with CFG (2 rows)."""
    tr = _trainer(tmp_path, "train.iterations=1", "method.options.beta=0.01")
    assert tr.method.keep_means and tr.method.parts.loss.name == "dppo_mask"
    (row,) = tr.train()
    n, t, k = 8, 4, 3
    kept = round(row["adv/kept_frac"] * n)
    assert row["cost/nfe"] == n * t * 2 + kept * k * 2 * 2
    assert row["cost/reward_calls"] == n
    assert 0 <= row["policy/clip_frac"] <= 1 and row["policy/kl"] >= 0


@pytest.mark.parametrize(
    "override, message",
    [
        ("method.options.kl_threshold=0", "method.options.kl_threshold: must be > 0, got 0"),
        (
            "method.options.sde_type=cps",
            "method.options.sde_type: flow_dppo needs a Gaussian step with an exact log-prob for method.loss=dppo_mask",
        ),
        ("method.options.kl_sigma_cap=1", "method.options.kl_sigma_cap: must be in (0, 1) or null, got 1"),
        (
            "method.options.sde_type=dance_sde method.options.kl_sigma_cap=0.99",
            "method.options.kl_sigma_cap: UniRL's normaliser is the flow_sde std, but method.options.sde_type is",
        ),
    ],
)
def test_bad_options_are_one_line_errors(override, message):
    with pytest.raises(ConfigError) as err:
        build_method(resolve_config("tiny-cpu", [*SMALL, *override.split()]))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_loss_part_needs_the_threshold():
    """dppo_mask on Flow-GRPO (no kl_threshold among its options) is refused in one line."""
    with pytest.raises(ConfigError, match="method.loss=dppo_mask: reads method.options.kl_threshold"):
        build_method(resolve_config("tiny-cpu", ["method.loss=dppo_mask"]))


def test_resume_repeats_the_uninterrupted_run_exactly(tmp_path, one_thread):
    opts = ["log.save_every=1", "method.options.beta=0.01"]
    assert_resume_repeats(lambda out, *o: _trainer(out, *o).train(), tmp_path, *opts)


def test_the_sd35m_recipe_carries_unirl_settings():
    """examples/diffusion/sd3_flowdppo.yaml: SD3.5-M 512 px, 10 flow_sde steps at eta 0.7 without CFG, 48 prompts x
    16, 3 SDE steps in the first half, threshold 1e-5, no reference KL, global std, lr 3e-4, LoRA 32 / 64, 2 optimizer
    steps per rollout, PickScore."""
    cfg = resolve_config("sd35m-flow-dppo", [])
    o = build_method(cfg).options
    s, t = cfg.sample, cfg.train
    assert (cfg.model.resolution, s.num_steps, s.guidance_scale, s.group_size, s.prompts_per_iteration) == (
        512,
        10,
        1.0,
        16,
        48,
    )
    assert (o.sde_type, o.noise_level, o.window_size, o.window_range, o.kl_threshold, o.beta, o.global_std) == (
        "flow_sde",
        0.7,
        3,
        [0, 5],
        1e-5,
        0.0,
        True,
    )
    assert (t.learning_rate, t.optimizer_steps_per_iteration, t.lora.rank, t.lora.alpha) == (3e-4, 2, 32, 64)
    assert set(cfg.reward) == {"pickscore"} and not s.same_noise_in_group
