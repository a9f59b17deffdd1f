"""Direct reward backprop (``reward_backprop``: ReFL, DRaFT-K): its math worked by hand from the papers and UniRL's
ReFL recipe (Tencent-Hunyuan/UniRL recipes/refl: ``roles.py`` forward_backward_loss, ``models/wan21.py``
diffuse_with_grad), typed options, the refusal of a reward without a gradient, costs equal to their formula, the
reward rising on the CPU recipe, exact resume, and one process against two."""

import importlib.util
import math
import random

import pytest
import torch

from flowrl.config import ConfigError
from flowrl.methods.reward_backprop import (
    band_steps,
    cond_grad_velocity,
    euler_step,
    gaussian_velocity_kl,
    predict_x0,
    reward_backprop_loss,
    stop_step,
)
from flowrl.resolve import resolve_config
from flowrl.trainer import Trainer
from tiny_runs import NO_EVAL, assert_resume_repeats, small

# 2 prompts x 4 members in rollout batches of 4, 4 steps at CFG 4.5 (tiny-cpu's), smoothness backpropagated
SMALL = [
    "method.name=reward_backprop",
    *small(4, "reward.smoothness=1.0", "reward.jpeg_compressibility=0", *NO_EVAL),  # jpeg: logged only
]


def _cfg(tmp_path, *overrides):
    return resolve_config("tiny-cpu", [f"output_dir={tmp_path}", *SMALL, *overrides])


# ------------------------------------------------------------------------------------------- the math by hand
def test_the_clean_prediction_by_hand():
    """x_sigma = (1 - sigma) x0 + sigma eps and v = eps - x0 give x0 back: x0 = 2, eps = -1, sigma = 1/4: x = 1.25,
    v = -3, x - sigma v = 1.25 + 0.75 = 2. The Euler step to sigma = 0 is the same prediction (DRaFT's last step)."""
    x, v = torch.tensor([1.25]), torch.tensor([-3.0])
    assert predict_x0(x, 0.25, v).tolist() == [2.0]
    assert euler_step(x, v, 0.25, 0.0).tolist() == [2.0]
    assert euler_step(x, v, 0.25, 0.125).tolist() == [1.625]  # 1.25 + (0.125 - 0.25)(-3)


def test_the_band_draw_by_hand():
    """ImageReward's ReFL: 40 steps, the chain starts at a step in [30, 39] (band [0.75, 1.0)); ROLL's Reward FL:
    8 steps, boundary [0.9, 1.0]: int(7.2) = 7 to int(8) = 8, so m = 7 alone; K = 2 on 8 steps over [0.5, 1.0]:
    4 <= m < 8 and m + 2 <= 8, so 4, 5, 6. DRaFT-1 on UniRL's 25 steps starts at 24 (its mid_timestep)."""
    assert band_steps(40, (0.75, 1.0), 1) == list(range(30, 40))
    assert band_steps(8, (0.9, 1.0), 1) == [7]
    assert band_steps(8, (0.5, 1.0), 2) == [4, 5, 6]
    assert stop_step("draft_k", 25, 1, (0.75, 1.0), random.Random(0)) == 24
    assert stop_step("draft_k", 25, 3, (0.75, 1.0), random.Random(0)) == 22
    draws = [stop_step("refl", 40, 1, (0.75, 1.0), random.Random(s)) for s in range(400)]
    assert set(draws) == set(range(30, 40))  # uniform over the band: every step is drawn


def test_the_loss_by_hand():
    """UniRL's reward loss -(r - 0) / 1 * reward_weight, averaged: r = (0.2, 0.6), lambda = 0.25: -0.25 * 0.4 = -0.1;
    with row weights (1, 0): -0.25 * mean(0.2, 0) = -0.025. Its gradient in r_i is -lambda / B."""
    r = torch.tensor([0.2, 0.6], requires_grad=True)
    loss = reward_backprop_loss(r, 0.25)
    assert loss.item() == pytest.approx(-0.1)
    loss.backward()
    assert r.grad.tolist() == pytest.approx([-0.125, -0.125])
    assert reward_backprop_loss(r, 0.25, torch.tensor([1.0, 0.0])).item() == pytest.approx(-0.025)


def test_the_wan_recipe_carries_unirls_optimizer():
    """UniRL recipes/refl/configs/wan21_t2v_videoalign_refl.yaml, optimizer_cfg: lr 5e-6, betas (0.9, 0.999), eps
    1e-8, weight decay 0.0 (flowrl's default 1e-4 would pull the LoRA towards 0 by lr x 1e-4 = 5e-10 of each weight
    a step); 10 linear warm-up steps, gradient clip 1, LoRA 64 / 128, DRaFT-1 with reward weight 0.25 and no KL."""
    cfg = resolve_config("wan21-t2v-1.3b-refl", [])
    t, o = cfg.train, cfg.method.options
    assert (t.learning_rate, t.adam_betas, t.adam_eps, t.weight_decay) == (5e-6, [0.9, 0.999], 1e-8, 0.0)
    assert (t.lr_warmup_steps, t.max_grad_norm, t.lora.rank, t.lora.alpha) == (10, 1.0, 64, 128)
    assert (o["mode"], o["grad_steps"], o["reward_weight"], o["kl_weight"]) == ("draft_k", 1, 0.25, 0.0)


def test_the_gradient_flows_through_the_conditional_branch_only():
    """UniRL's CFG under grad: v = v_u + w (v_c - v_u) with v_u stopped, so dv/dtheta = w dv_c/dtheta. With
    v_c = theta a (a = 3) and w = 5 the value is the guided one and the gradient 5 * 3 = 15."""
    theta = torch.tensor(2.0, requires_grad=True)
    v_cond = theta * 3.0  # 6
    v_guided = torch.tensor(-4.0 + 5.0 * (6.0 + 4.0))  # v_u = -4: -4 + 5 (6 - -4) = 46
    v = cond_grad_velocity(v_guided, v_cond, 5.0)
    assert v.item() == 46.0
    v.backward()
    assert theta.grad.item() == 15.0


def test_the_step_kl_by_hand():
    """UniRL's per-step KL mean((v - v_ref)^2 / (2 sigma^2)): v = (1, 3), v_ref = (0, 1), sigma = 1/2:
    mean(1, 4) / 0.5 = 5."""
    assert gaussian_velocity_kl(torch.tensor([1.0, 3.0]), torch.tensor([0.0, 1.0]), 0.5).item() == pytest.approx(5.0)


# ------------------------------------------------------------------------------------------- options, refusals
@pytest.mark.parametrize(
    "override, message",
    [
        ("method.options.mode=refl_k", "method.options.mode: 'refl_k'; allowed: draft_k, refl"),
        ("method.options.cfg_grad=none", "method.options.cfg_grad: 'none'; allowed: cond, both"),
        ("method.options.grad_steps=0", "method.options.grad_steps: must be an integer >= 1, got 0"),
        ("method.options.grad_steps=5", "method.options.grad_steps: 5 is more than sample.num_steps=4"),
        ("method.options.band=[0.9,0.5]", "method.options.band: [lo, hi] with 0 <= lo < hi <= 1"),
        ("method.options.reward_weight=0", "method.options.reward_weight: must be > 0, got 0"),
        ("method.options.kl_weight=-1", "method.options.kl_weight: must be >= 0, got -1"),
    ],
)
def test_options_are_checked_in_one_line(override, message):
    from flowrl.methods import build_method

    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")) as err:
        build_method(resolve_config("tiny-cpu", [*SMALL, override]))
    assert "\n" not in str(err.value)


def test_an_empty_band_is_refused():
    from flowrl.methods import build_method

    cfg = resolve_config("tiny-cpu", [*SMALL, "method.options.mode=refl", "method.options.band=[0.0,0.2]"])
    with pytest.raises(ConfigError, match=r"band: \[0.0, 0.2\] holds no step m of sample.num_steps=4"):
        build_method(cfg)


def test_a_reward_without_a_gradient_is_refused_before_any_weight_loads():
    from flowrl.methods import build_method

    cfg = resolve_config("tiny-cpu", ["method.name=reward_backprop"])  # tiny-cpu's JPEG compressibility
    with pytest.raises(ConfigError, match="reward 'jpeg_compressibility' is not differentiable") as err:
        build_method(cfg)
    assert "\n" not in str(err.value) and "weight 0 to only log it" in str(err.value)


def test_needs_declare_the_differentiable_reward():
    from flowrl.methods import build_method

    needs = build_method(resolve_config("tiny-cpu", SMALL)).needs()
    assert needs.differentiable_reward and not needs.reference and needs.onpolicy_check
    assert needs.media == ("image", "video")
    kl = build_method(resolve_config("tiny-cpu", [*SMALL, "method.options.kl_weight=0.1"])).needs()
    assert kl.reference


# ------------------------------------------------------------------------------------------- runs
@pytest.mark.parametrize(
    "mode, extra",
    [("draft_k", ["method.options.grad_steps=2"]), ("refl", ["method.options.band=[0.25,1.0]"])],
)
def test_costs_equal_their_formula_and_every_parameter_moves(tmp_path, one_thread, mode, extra):
    """N = 8 samples, T = 4 steps, P = 2 rows a guided velocity (CFG 4.5). Exploration: m P rows to x_m, K P for
    the chain's x̂0; update: K (P + 1) (the conditional row again, with grad). Reward calls: N x 2 rewards in the
    reward phase (smoothness, JPEG at weight 0) and N x 1 through the loss (smoothness)."""
    tr = Trainer(_cfg(tmp_path, f"method.options.mode={mode}", *extra, "train.iterations=1"))
    before = {k: p.detach().clone() for k, p in tr.policy.trainable.items()}
    starts = []
    explore = tr.method.explore

    def spy(ctx, batch):
        exp = explore(ctx, batch)
        starts.append(exp.traj.start)
        return exp

    tr.method.explore = spy
    (row,) = tr.train()
    n, p, k = 8, 2, tr.method.options.grad_steps
    assert len(starts) == 2 and (mode == "refl" or starts == [4 - k, 4 - k])
    assert row["cost/nfe"] == sum(4 * (p * m + p * k + (p + 1) * k) for m in starts)
    assert row["cost/reward_calls"] == n * 2 + n * 1
    assert row["method/stop_step"] == sum(starts) / 2
    assert row["adv/kept_frac"] == 1.0 and "policy/onpolicy_logp_diff" not in row
    # the loss is -lambda r of the same x̂0 the reward phase scored (first step, same weights; second step moved)
    assert row["policy/pg_loss"] == pytest.approx(-row["reward/smoothness/mean"], rel=1e-2)
    unchanged = [name for name, q in tr.policy.trainable.items() if torch.equal(q, before[name])]
    assert not unchanged, unchanged[:3]


def test_the_kl_to_the_reference_reuses_the_conditional_forward(tmp_path, one_thread):
    """kl_weight > 0: one reference row (LoRA off, conditional) per grad step and sample beside the update's
    K (P + 1); the first optimizer step is at the reference (KL 0), the second has moved (KL > 0)."""
    tr = Trainer(_cfg(tmp_path, "method.options.kl_weight=0.5", "train.iterations=1"))
    (row,) = tr.train()
    n, p, m, k = 8, 2, 3, 1
    assert row["cost/nfe"] == n * (p * m + p * k + (p + 1) * k + k)
    assert row["policy/kl"] > 0
    assert row["policy/loss"] == pytest.approx(row["policy/pg_loss"] + 0.5 * row["policy/kl"], rel=1e-5)


def test_the_reward_gradient_reaches_the_transformer_through_the_decoder(tmp_path, one_thread):
    """One unit's loss backpropagates into every LoRA tensor; ``cfg_grad=both`` gives the same value."""
    tr = Trainer(_cfg(tmp_path, "train.iterations=1"))
    ctx = tr.context(0)
    batches, _ = tr.collect(0, ctx)
    b = batches[0]
    out = tr.method.transition_loss(ctx, b.traj, 0, b.cond, torch.ones(4))
    out.loss.backward()
    assert all(p.grad is not None for p in tr.policy.trainable.values())
    # LoRA's B starts at 0, so at the first step only the B tensors have a gradient (A's is B^T times it)
    assert all(p.grad.abs().sum() > 0 for name, p in tr.policy.trainable.items() if "lora_B" in name)
    tr.method.options.cfg_grad = "both"
    both = tr.method.transition_loss(ctx, b.traj, 0, b.cond, torch.ones(4))
    torch.testing.assert_close(both.loss, out.loss, rtol=1e-5, atol=1e-6)


def test_resume_repeats_the_uninterrupted_run_exactly(tmp_path, one_thread):
    opts = ["method.options.mode=refl", "method.options.band=[0.25,1.0]", "log.save_every=1"]
    assert_resume_repeats(lambda out, *o: Trainer(_cfg(out, *o)).train(), tmp_path, *opts)


@pytest.mark.slow
def test_video_backpropagates_through_the_checkpointed_decoder(tmp_path, one_thread):
    """tiny-wan (5-D latents, a video mapping out of the decoder) with the decoder under activation checkpointing."""
    cfg = resolve_config(
        "tiny-wan",
        [f"output_dir={tmp_path}", "method.name=reward_backprop", "reward={smoothness: 1.0}", "reward_args={}",
         "train.iterations=1", "log.eval_every=0", "method.options.decode_checkpointing=true"],
    )  # fmt: skip
    tr = Trainer(cfg)
    before = {k: p.detach().clone() for k, p in tr.policy.trainable.items()}
    (row,) = tr.train()
    assert row["policy/grad_norm"] > 0 and row["policy/pg_loss"] == pytest.approx(-row["reward/mean"], rel=1e-2)
    assert any(not torch.equal(p, before[k]) for k, p in tr.policy.trainable.items())


@pytest.mark.slow
def test_the_cpu_recipe_raises_its_reward(tmp_path, one_thread):
    """tiny-refl: smoothness backpropagated through the VAE and the last step rises within 8 iterations."""
    rows = Trainer(resolve_config("tiny-refl", [f"output_dir={tmp_path}", "train.iterations=8"])).train()
    first, last = rows[0]["reward/mean"], rows[-1]["reward/mean"]
    assert last > first + 0.02 and all(math.isfinite(r["policy/loss"]) for r in rows)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch.distributed.run") is None, reason="torchrun not installed")
def test_two_processes_match_one(tmp_path):
    """1 vs 2 processes (gloo on CPU): the ReFL draw is keyed by the rollout batch's global position, so the
    chains start at the same steps and rewards, losses, gradient norms and costs agree. One optimizer step an
    iteration: with two, each process would run a zero-weight padding pass while the other trains its unit (the
    update's collectives stay in step), and its forwards and reward calls count in the costs."""
    from _processes import ONE_PROCESS, torchrun, train_metrics

    opts = [*SMALL, "method.options.mode=refl", "method.options.band=[0.25,1.0]", "train.iterations=2",
            "train.optimizer_steps_per_iteration=1"]  # fmt: skip
    one = train_metrics(ONE_PROCESS, tmp_path / "one", *opts)
    two = train_metrics([*torchrun(29563), "-m", "flowrl", "train"], tmp_path / "two", *opts)
    assert len(one) == len(two) == 2
    for a, b in zip(one, two):
        for key in ("reward/mean", "reward/std", "method/stop_step", "policy/loss", "policy/grad_norm", "cost/nfe",
                    "cost/reward_calls"):  # fmt: skip
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-9), key
