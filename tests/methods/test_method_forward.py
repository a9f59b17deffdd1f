"""RAM and DiffusionNFT on the method seam (specs/addon_methods.md §6, flow_grpo_core.md on DiffusionNFT):
the spec's oracles by hand, the lagged policy θ_old kept, swapped in and checkpointed, costs, one
optimizer step per iteration, exact resume, and the on-policy check saying it does not apply."""

import importlib.util
import logging

import pytest
import torch

from flowrl.advantages import group_zscore
from flowrl.config import ConfigError
from flowrl.methods.diffusion_nft import nft_loss, optimality_weight
from flowrl.methods.forward_process import ramp_decay, sample_times
from flowrl.methods.ram import ram_target
from flowrl.policy import ParamAverage
from flowrl.resolve import resolve_config
from flowrl.trainer import Trainer
from flowrl.update import Updater
from stand_ins import FixedVelocity
from tiny_runs import NO_EVAL, assert_resume_repeats, same_numbers, small

# 2 prompts x 4 members, 4 ODE steps with CFG 4.5, K = 2 noisings: one group per rollout batch
SMALL = small(4, *NO_EVAL, "method.options.num_noisings=2")


def _trainer(tmp_path, *overrides) -> Trainer:
    return Trainer(resolve_config("tiny-cpu", [f"output_dir={tmp_path}", *SMALL, *overrides]))


def test_the_time_law_of_alpha_one():
    """§6 oracle: p(t) ∝ t: E[t] = 2/3, median 1/sqrt 2, P(t < 1/2) = 1/4 (10^6 draws)."""
    t = sample_times(1.0, (10**6,), torch.Generator().manual_seed(0))
    assert float(t.mean()) == pytest.approx(2 / 3, abs=2e-3)
    assert float(t.median()) == pytest.approx(2**-0.5, abs=2e-3)
    assert float((t < 0.5).float().mean()) == pytest.approx(0.25, abs=2e-3)
    uniform = sample_times(0.0, (10**6,), torch.Generator().manual_seed(1))
    assert float(uniform.mean()) == pytest.approx(0.5, abs=2e-3)
    assert 0 <= float(t.min()) and float(t.max()) <= 1


def test_the_lagged_policy_ramp():
    """§6 oracle: d_1 = 0.01, d_50 = 0.5, d_90 = d_500 = 0.9; one update moves θ_old 99 % of the way."""
    d = ramp_decay(0.01, 0.9)
    assert [d(1), d(50), d(90), d(500)] == pytest.approx([0.01, 0.5, 0.9, 0.9])
    params = {"w": torch.zeros(3)}
    average = ParamAverage(params, d)
    average.update({"w": torch.ones(3)})
    assert average.shadow["w"].tolist() == pytest.approx([0.99] * 3)


def test_the_ram_target_by_hand():
    """§6 oracles: A = 0 gives v_ref; m A = 1 with v_old = v_ref gives eps - x0; the sign of
    (y - v_ref) . ((eps - x0) - v_old) is the sign of A; no gradient reaches v_ref or v_old."""
    g = torch.Generator().manual_seed(0)
    v_ref, v_old, x0, eps = (torch.randn(3, 2, 4, 4, generator=g) for _ in range(4))
    v_ref.requires_grad_(True)
    v_old.requires_grad_(True)
    y = ram_target(v_ref, v_old, x0, eps, torch.zeros(3), 100.0)
    assert torch.equal(y, v_ref.detach()) and not y.requires_grad
    y = ram_target(v_ref, v_ref, x0, eps, torch.full((3,), 0.01), 100.0)
    torch.testing.assert_close(y, eps - x0)
    adv = torch.tensor([-1.0, 0.5, 2.0])
    y = ram_target(v_ref, v_old, x0, eps, adv, 10.0)
    direction = ((y - v_ref) * ((eps - x0) - v_old)).sum(dim=(1, 2, 3))
    assert torch.sign(direction).tolist() == torch.sign(adv).tolist()
    # the loss's gradient is that of ||v - const||^2: nothing flows into the target
    v = torch.randn(3, 2, 4, 4, generator=g, requires_grad=True)
    ((v - y) ** 2).mean().backward()
    torch.testing.assert_close(v.grad, 2 * (v - y).detach() / v.numel())
    assert v_ref.grad is None and v_old.grad is None


def test_ram_advantages_centre_each_group_and_ignore_affine_changes():
    """§6 oracle: they sum to 0 in every group, are invariant to r -> a r + b (a > 0), and with one prompt
    they are the plain group z-score."""
    r = torch.tensor([0.1, 0.5, 0.9, 0.3, 2.0, 2.5, 1.0, 4.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    adv = group_zscore(r, groups, eps=1e-4, global_std=True)
    assert float(adv[:4].sum()) == pytest.approx(0, abs=1e-6) and float(adv[4:].sum()) == pytest.approx(0, abs=1e-6)
    torch.testing.assert_close(group_zscore(3 * r + 7, groups, eps=1e-4 * 3, global_std=True), adv)
    one = torch.zeros(4, dtype=torch.long)
    torch.testing.assert_close(
        group_zscore(r[:4], one, eps=1e-4, global_std=True), (r[:4] - r[:4].mean()) / (r[:4].std(unbiased=False) + 1e-4)
    )


def test_nft_weights_and_the_balanced_loss():
    """r = clip(A / (2 A_max) + 1/2, 0, 1); at θ = θ_old a sample with r = 1/2 gets no gradient, r = 1 pulls
    x0(v_theta) towards x0 and r = 0 away from it."""
    assert optimality_weight(torch.tensor([-10.0, -5.0, 0.0, 2.5, 5.0]), 5.0).tolist() == [0.0, 0.0, 0.5, 0.75, 1.0]
    g = torch.Generator().manual_seed(0)
    x0, eps, v_old = (torch.randn(2, 3, 4, 4, generator=g) for _ in range(3))
    t = torch.tensor([0.3, 0.8])
    x_t = (1 - t.view(-1, 1, 1, 1)) * x0 + t.view(-1, 1, 1, 1) * eps
    for r, sign in ((0.5, 0), (1.0, 1), (0.0, -1)):
        v = v_old.clone().requires_grad_(True)
        nft_loss(v, v_old, x_t, t, x0, torch.full((2,), r), 1.0).sum().backward()
        step = -v.grad  # gradient descent direction on v
        # d x0_hat = -t dv: descent moves x0(v) by -t * step; towards x0 means (x0 - x0_hat) . (-t step) > 0
        toward = ((x0 - (x_t - t.view(-1, 1, 1, 1) * v_old)) * (-t.view(-1, 1, 1, 1) * step)).sum(dim=(1, 2, 3))
        if sign == 0:
            assert float(v.grad.abs().max()) < 1e-6
        else:
            assert bool((torch.sign(toward) == sign).all())


@pytest.mark.parametrize("method", ["ram", "diffusion_nft"])
def test_the_loss_at_initialisation(tmp_path, one_thread, method):
    """RAM: with A = 0 at θ = θ_old = ref the loss is exactly 0 (the target is v_ref, which the policy
    still is). NFT: the loss's gradient with A = 0 vanishes there."""
    tr = _trainer(tmp_path, f"method.name={method}")
    ctx = tr.context(0)
    batches, _ = tr.collect(0, ctx)
    b = batches[0]
    assert set(b.traj.velocities) == ({"ref", "old"} if method == "ram" else {"old", "ref"})
    for j in b.traj.trained_indices:
        tl = tr.method.transition_loss(ctx, b.traj, j, b.cond, torch.zeros(len(b.traj)))
        if method == "ram":
            assert tl.loss.item() == 0.0 and tl.logp_gap is None
        else:
            tl.loss.backward()
    if method == "diffusion_nft":
        assert max(float(p.grad.abs().max()) for p in tr.policy.trainable.values() if p.grad is not None) < 1e-6


@pytest.mark.parametrize("method", ["ram", "diffusion_nft"])
def test_costs_steps_and_the_lagged_policy(tmp_path, one_thread, method, caplog):
    """Per iteration: N reward calls; N T CFG rows for the endpoints, N K no-grad rows per target weight
    and N K training rows; RAM takes one optimizer step; θ_old starts at θ and moves after the update;
    the on-policy check says it does not apply."""
    with caplog.at_level(logging.WARNING, logger="flowrl.trainer"):
        tr = _trainer(tmp_path, f"method.name={method}", "train.iterations=1")
    assert "does not apply to method" in caplog.text
    initial = {k: p.detach().clone() for k, p in tr.policy.trainable.items()}
    assert all(torch.equal(initial[k], v) for k, v in tr.policy.averages["old"].shadow.items())
    (row,) = tr.train()
    n, t, k, targets = 8, 4, 2, 2
    assert row["cost/reward_calls"] == n
    assert row["cost/nfe"] == n * t * 2 + n * k * targets + n * k
    assert "policy/onpolicy_logp_diff" not in row and "policy/clip_frac" not in row
    if method == "ram":
        assert tr.updater.optimizer_steps == 1
    assert tr.policy.averages["old"].updates == 1
    d = tr.method.averages()["old"](1)
    for name, p in tr.policy.trainable.items():  # θ_old = d θ_0 + (1 - d) θ_1
        torch.testing.assert_close(
            tr.policy.averages["old"].shadow[name], d * initial[name] + (1 - d) * p.detach().float()
        )
    ckpt = tmp_path / "checkpoints" / "iter-000001"
    assert (ckpt / "average-old.safetensors").is_file()


@pytest.mark.parametrize("method", ["ram", "diffusion_nft"])
def test_resume_repeats_the_uninterrupted_run_exactly(tmp_path, one_thread, method):
    opts = [f"method.name={method}", "log.save_every=1"]
    assert_resume_repeats(lambda out, *o: _trainer(out, *o).train(), tmp_path, *opts)


def test_endpoints_come_from_the_lagged_policy(tmp_path, one_thread):
    """endpoint_policy=old samples with θ_old swapped in (and restores θ); current with θ."""
    tr = _trainer(tmp_path, "method.name=ram", "train.iterations=1")
    tr.train()
    ctx = tr.context(1)
    policy = {k: p.detach().clone() for k, p in tr.policy.trainable.items()}
    with ctx.average_weights("old"):
        assert all(torch.equal(p, tr.policy.averages["old"].shadow[k]) for k, p in tr.policy.trainable.items())
    assert all(torch.equal(p, policy[k]) for k, p in tr.policy.trainable.items())
    old = tr.collect(1, ctx)[0][0].traj.x0
    tr.method.options.endpoint_policy = "current"
    current = tr.collect(1, ctx)[0][0].traj.x0
    assert not torch.equal(old, current)
    with pytest.raises(RuntimeError, match="does not declare"), ctx.average_weights("ema"):
        pass


def test_full_fine_tuning_keeps_a_reference_for_ram_without_kl(tmp_path, one_thread):
    tr = _trainer(tmp_path, "method.name=ram", "train.lora.enabled=false")
    assert tr.policy.ref_model is not None


@pytest.mark.parametrize(
    "override, message",
    [
        ("method.options.endpoint_policy=new", "method.options.endpoint_policy: 'new'; allowed: old, current"),
        ("method.options.std_scope=batch", "method.options.std_scope: 'batch'; allowed: iteration, group"),
        ("method.options.reward_multiplier=0", "method.options.reward_multiplier: must be > 0"),
        ("method.options.num_noisings=0", "method.options.num_noisings: must be >= 1"),
        ("method.options.time_alpha=-1", "method.options.time_alpha: must be > -1"),
        ("method.options.old_decay_max=1", "method.options.old_decay_max: must be in [0, 1)"),
        ("method.options.target_velocity=ref", "method.options.target_velocity: 'ref'; allowed: old, current"),
        ("method.options.clip=1", "method.options.clip"),
        (
            "sample.same_noise_in_group=true",
            "sample.same_noise_in_group=true would make every member of a group the same",
        ),
    ],
)
def test_bad_ram_options_are_one_line_errors(tmp_path, override, message):
    with pytest.raises(ConfigError, match=None) as err:
        _trainer(tmp_path, "method.name=ram", override)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_bad_nft_options_are_one_line_errors(tmp_path):
    for override, message in (
        ("method.options.beta=0", "method.options.beta: must be > 0"),
        ("method.options.kl_beta=-1", "method.options.kl_beta: must be >= 0"),
        ("method.options.reward_multiplier=5", "method.options.reward_multiplier"),
    ):
        with pytest.raises(ConfigError) as err:
            _trainer(tmp_path, "method.name=diffusion_nft", override)
        assert message in str(err.value) and "\n" not in str(err.value)


# ---------------------------------------------------------------- DiffusionNFT as its authors' code runs it
# NVlabs/DiffusionNFT @ 24af555: scripts/train_nft_sd3.py (loss, training times, θ_old decay) and config/nft.py
# (the released configs); flow_grpo/diffusers_patch/solver.py (the dpm2 sampler, tests/core/test_solver_dpm2.py).


def test_nft_policy_term_is_scaled_by_adv_clip_max():
    """train_nft_sd3.py: policy_loss = (ori_policy_loss * adv_clip_max).mean(), loss = policy_loss + beta_KL
    mean ||v - v_ref||^2. By hand, one row of two elements: x0 = 0, eps = (1, -1), t = 1/2, so x_t = (0.5, -0.5);
    v = (0.2, 0.2), v_old = v_ref = 0; A = 2.5 with A_max = 5 gives r = 0.75; beta = 1, so v+ = v and
    v- = 2 v_old - v = -v. x0(v+) - x0 = (0.4, -0.6) and x0(v-) - x0 = (0.6, -0.4): both have w = 0.5 and mean
    square 0.26, so the bracket is 0.52, the policy term 5 x 0.52 = 2.6, and the KL 1e-4 x 0.04."""
    from flowrl.methods.diffusion_nft import DiffusionNFT
    from flowrl.methods.forward_process import Endpoints

    method = DiffusionNFT(resolve_config("tiny-cpu", ["method.name=diffusion_nft"]))
    assert method.options.adv_clip_max == 5.0
    zero = torch.zeros(1, 1, 2)
    unit = Endpoints(
        torch.zeros(1, 2),
        torch.tensor([[0.5]]),
        torch.tensor([[[1.0, -1.0]]]),
        torch.zeros(1),
        velocities={"old": zero, "ref": zero},
    )
    tl = method.transition_loss(FixedVelocity(torch.tensor([[0.2, 0.2]])), unit, 0, {}, torch.tensor([2.5]))
    assert float(tl.policy_loss) == pytest.approx(2.6, rel=1e-6)
    assert float(tl.kl) == pytest.approx(0.04, rel=1e-6)
    assert float(tl.loss) == pytest.approx(2.6 + 1e-4 * 0.04, rel=1e-6)


def test_grid_times_are_distinct_points_of_the_sampling_grid():
    """train_nft_sd3.py: each sample's 10 scheduler timesteps are permuted (perms_time) and the first
    int(10 x 0.99) = 9 train, each with its own noise: 9 distinct sigmas of SD3.5-M's shift-3 grid (1.0, 0.960,
    0.913, 0.858, 0.790, 0.707, 0.602, 0.465, 0.278, 0.0089), in a random order, the one left out uniform."""
    from flowrl.methods.forward_process import grid_times

    grid = torch.tensor([1.0, 0.9601, 0.9133, 0.8577, 0.7904, 0.7073, 0.6022, 0.4649, 0.2780, 0.0089])
    t = grid_times(grid, (20000, 9), torch.Generator().manual_seed(0))
    assert t.shape == (20000, 9)
    assert bool(torch.isin(t, grid).all())
    assert all(len(set(row)) == 9 for row in t[:500].tolist())
    left_out = torch.stack([(t != g).all(dim=1) for g in grid], dim=1).float().mean(dim=0)  # (10,)
    torch.testing.assert_close(left_out, torch.full((10,), 0.1), atol=0.01, rtol=0)
    first = torch.stack([t[:, 0] == g for g in grid], dim=1).float().mean(dim=0)  # any point may come first
    torch.testing.assert_close(first, torch.full((10,), 0.1), atol=0.01, rtol=0)
    with pytest.raises(ValueError, match="11 distinct times asked of a grid of 10"):
        grid_times(grid, (1, 11))


def test_nft_trains_on_the_sampling_grid_with_dpm2_endpoints(tmp_path, one_thread):
    """The defaults: endpoints by a dpm2 plan over sample.num_steps (RAM keeps Euler); each row trains at
    K = int(0.99 N) = 3 of the N = 4 sigmas of its schedule, distinct, with its own noise each."""
    tr = _trainer(tmp_path, "method.name=diffusion_nft", "method.options.num_noisings=null")
    ctx = tr.context(0)
    plans = []
    rollout = ctx.rollout
    ctx.rollout = lambda plan, *a, **k: (plans.append(plan), rollout(plan, *a, **k))[1]
    batches, _ = tr.collect(0, ctx)
    assert plans and all(p.kinds == ("dpm2",) * 4 for p in plans)
    grid = ctx.sigmas()[:-1]
    unit = batches[0].traj
    assert unit.t.shape == (len(unit), 3)
    for row in unit.t.tolist():
        assert len(set(row)) == 3 and all(any(abs(v - g) < 1e-7 for g in grid.tolist()) for v in row)
    assert not torch.equal(unit.noise[:, 0], unit.noise[:, 1])
    ram = _trainer(tmp_path / "ram", "method.name=ram")
    ctx = ram.context(0)
    plans.clear()
    rollout = ctx.rollout
    ctx.rollout = lambda plan, *a, **k: (plans.append(plan), rollout(plan, *a, **k))[1]
    ram.collect(0, ctx)
    assert plans and all(p.kinds == ("ode",) * 4 for p in plans)


def test_the_old_policy_decay_of_the_authors_configs():
    """train_nft_sd3.py return_decay(global_step, decay_type), called after each epoch with the optimizer steps so
    far: type 1 (GenEval, PickScore, HPS) min(0.001 s, 0.5); type 2 (OCR) 0 while s < 75, then
    min(0.0075 (s - 75), 0.999). The OCR config takes 2 optimizer steps an epoch, so after update k, s = 2k."""
    from flowrl.methods.diffusion_nft import DiffusionNFT

    ocr = ramp_decay(0.0075, 0.999, 75)
    assert [ocr(0), ocr(74), ocr(75), ocr(76), ocr(100), ocr(208), ocr(209), ocr(10**4)] == pytest.approx(
        [0.0, 0.0, 0.0, 0.0075, 0.1875, 0.9975, 0.999, 0.999]
    )
    cfg = resolve_config(
        "tiny-cpu",
        [
            "method.name=diffusion_nft",
            "train.optimizer_steps_per_iteration=2",
            "method.options.old_decay_rate=0.0075",
            "method.options.old_decay_max=0.999",
            "method.options.old_decay_flat=75",
        ],
    )
    d = DiffusionNFT(cfg).averages()["old"]
    assert [d(37), d(38), d(50), d(105)] == pytest.approx([0.0, 0.0075, 0.1875, 0.999])
    d = DiffusionNFT(resolve_config("tiny-cpu", ["method.name=diffusion_nft", "train.optimizer_steps_per_iteration=1"]))
    assert [d.averages()["old"](k) for k in (1, 250, 500, 501)] == pytest.approx([0.001, 0.25, 0.5, 0.5])
    per_update = resolve_config(
        "tiny-cpu",
        ["method.name=diffusion_nft", "train.optimizer_steps_per_iteration=2", "method.options.old_decay_unit=update"],
    )
    assert DiffusionNFT(per_update).averages()["old"](10) == pytest.approx(0.01)


@pytest.mark.parametrize(
    "override, message",
    [
        ("method.options.time_law=uniform", "method.options.time_law: 'uniform'; allowed: power, grid"),
        ("method.options.endpoint_solver=rk4", "method.options.endpoint_solver: 'rk4'; allowed: euler, dpm2"),
        (
            "method.options.num_noisings=5",
            "method.options.num_noisings: 5 distinct grid times, but the sampling grid has sample.num_steps=4",
        ),
        ("method.options.old_decay_flat=-1", "method.options.old_decay_flat: must be >= 0"),
        (
            "method.options.old_decay_unit=epoch",
            "method.options.old_decay_unit: 'epoch'; allowed: update, optimizer_step",
        ),
    ],
)
def test_bad_nft_schedule_options_are_one_line_errors(tmp_path, override, message):
    with pytest.raises(ConfigError) as err:
        _trainer(tmp_path, "method.name=diffusion_nft", override)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_null_noisings_need_the_grid(tmp_path):
    with pytest.raises(ConfigError, match="num_noisings: null .* needs time_law=grid"):
        _trainer(tmp_path, "method.name=ram", "method.options.num_noisings=null")


@pytest.mark.parametrize(
    "task, reward, beta, flat, rate, cap, steps",
    [
        ("geneval", "geneval", 1.0, 0, 0.001, 0.5, 1),
        ("ocr", "ocr", 0.1, 75, 0.0075, 0.999, 2),
        ("pickscore", "pickscore", 1.0, 0, 0.001, 0.5, 1),
    ],
)
def test_the_sd35m_recipes_carry_the_released_configs(task, reward, beta, flat, rate, cap, steps):
    """config/nft.py sd3_<task> over config/base.py: SD3.5-M at 512 px, 10 dpm2 steps CFG-free (guidance 1),
    48 groups of 24, 9 per GPU, beta (0.1 for OCR), kl 1e-4, lr 3e-4, LoRA 32 / 64, decay type 1 (2 for OCR),
    1 optimizer step an epoch (2 for OCR), EMA 0.9, evaluation at 40 Euler steps with guidance 1."""
    from flowrl.methods.diffusion_nft import DiffusionNFT

    cfg = resolve_config(f"sd35m-diffusion-nft-{task}", [])
    o = DiffusionNFT(cfg).options
    s, t = cfg.sample, cfg.train
    assert (cfg.model.resolution, s.num_steps, s.eval_num_steps, s.guidance_scale, s.eval_guidance_scale) == (
        512,
        10,
        40,
        1.0,
        1.0,
    )
    assert (s.group_size, s.prompts_per_iteration, s.batch_size, s.same_noise_in_group) == (24, 48, 9, False)
    assert (o.beta, o.kl_beta, o.time_law, o.endpoint_solver, o.endpoint_policy) == (beta, 1e-4, "grid", "dpm2", "old")
    assert o.num_noisings in (None, 9)
    assert (o.old_decay_flat, o.old_decay_rate, o.old_decay_max, o.old_decay_unit) == (
        flat,
        rate,
        cap,
        "optimizer_step",
    )
    assert (t.learning_rate, t.weight_decay, t.max_grad_norm, o.adv_clip_max, t.optimizer_steps_per_iteration) == (
        3e-4,
        1e-4,
        1.0,
        5.0,
        steps,
    )
    assert (t.lora.rank, t.lora.alpha, t.ema, t.ema_decay, t.ema_every, o.global_std) == (32, 64, True, 0.9, 1, True)
    assert dict(cfg.reward) == {reward: 1.0}


def test_nft_sigterm_during_the_update_then_resume_repeats_the_run(tmp_path, one_thread):
    """SIGTERM while DiffusionNFT's weights update (grid times, dpm2 endpoints, θ_old counted in optimizer steps):
    the finished iterations are saved, and resuming gives the uninterrupted run's metrics exactly."""
    import os
    import signal

    from flowrl.interrupts import Interrupted
    from flowrl.logs import read_metrics

    opts = ["method.name=diffusion_nft", "method.options.num_noisings=1", "train.iterations=3", "log.save_every=1"]

    def rows(run):
        return [same_numbers(r) for r in read_metrics(run / "metrics.jsonl")]

    _trainer(tmp_path / "full", *opts).train()
    update, calls = Updater.unit, {"n": 0}

    def signalling_update(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # iteration 1's update, between its two optimizer steps
            os.kill(os.getpid(), signal.SIGTERM)
        return update(self, *args, **kwargs)

    previous = signal.signal(signal.SIGTERM, lambda *a: None)
    try:
        Updater.unit = signalling_update
        with pytest.raises(Interrupted, match="2 completed iterations are saved"):
            _trainer(tmp_path / "part", *opts).train()
    finally:
        Updater.unit = update
        signal.signal(signal.SIGTERM, previous)
    _trainer(tmp_path / "part", *opts, "resume=latest").train()
    assert rows(tmp_path / "part") == rows(tmp_path / "full")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch.distributed.run") is None, reason="torchrun not installed")
def test_nft_on_two_processes_matches_one(tmp_path):
    """1 vs 2 processes (gloo on CPU): DiffusionNFT's grid times and dpm2 endpoints draw from streams keyed by the
    sample's global position, so rewards, advantages, losses and gradient norms are the same."""
    from _processes import ONE_PROCESS, torchrun, train_metrics

    opts = [*SMALL, "method.name=diffusion_nft", "train.iterations=2", "train.optimizer_steps_per_iteration=2"]

    one = train_metrics(ONE_PROCESS, tmp_path / "one", *opts)
    two = train_metrics([*torchrun(29537), "-m", "flowrl", "train"], tmp_path / "two", *opts)
    assert len(one) == len(two) == 2
    for a, b in zip(one, two):
        for key in ("reward/mean", "reward/std", "adv/abs_mean", "policy/loss", "policy/kl", "policy/grad_norm"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-9), key
