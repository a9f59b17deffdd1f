"""RAM and DiffusionNFT on the method seam (specs/addon_methods.md §6, flow_grpo_core.md on DiffusionNFT):
the spec's oracles by hand, the lagged policy θ_old kept, swapped in and checkpointed, costs, one
optimizer step per iteration, exact resume, and the on-policy check saying it does not apply."""

import logging

import pytest
import torch

from flowrl.advantages import group_zscore
from flowrl.config import ConfigError, resolve_config
from flowrl.methods.diffusion_nft import nft_loss, optimality_weight
from flowrl.methods.forward_process import ramp_decay, sample_times
from flowrl.methods.ram import ram_target
from flowrl.trainer import ParamAverage, Trainer

# 2 prompts x 4 members, 4 ODE steps with CFG 4.5, K = 2 noisings: one group per rollout batch
SMALL = ["sample.num_steps=4", "sample.group_size=4", "sample.prompts_per_iteration=2", "sample.batch_size=4",
         "log.save_every=1000", "log.sample_every=1000", "log.eval_every=0", "method.options.num_noisings=2"]
SKIP = ("timing_s/", "throughput/", "memory/")


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
    torch.testing.assert_close(group_zscore(r[:4], one, eps=1e-4, global_std=True),
                               (r[:4] - r[:4].mean()) / (r[:4].std(unbiased=False) + 1e-4))


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
        assert max(float(p.grad.abs().max()) for p in tr.trainable.values() if p.grad is not None) < 1e-6


@pytest.mark.parametrize("method", ["ram", "diffusion_nft"])
def test_costs_steps_and_the_lagged_policy(tmp_path, one_thread, method, caplog):
    """Per iteration: N reward calls; N T CFG rows for the endpoints, N K no-grad rows per target weight
    and N K training rows; RAM takes one optimizer step; θ_old starts at θ and moves after the update;
    the on-policy check says it does not apply."""
    with caplog.at_level(logging.WARNING, logger="flowrl.trainer"):
        tr = _trainer(tmp_path, f"method.name={method}", "train.iterations=1")
    assert "does not apply to method" in caplog.text
    initial = {k: p.detach().clone() for k, p in tr.trainable.items()}
    assert all(torch.equal(initial[k], v) for k, v in tr.averages["old"].shadow.items())
    (row,) = tr.train()
    n, t, k, targets = 8, 4, 2, 2
    assert row["cost/reward_calls"] == n
    assert row["cost/nfe"] == n * t * 2 + n * k * targets + n * k
    assert "policy/onpolicy_logp_diff" not in row and "policy/clip_frac" not in row
    if method == "ram":
        assert tr.optimizer_steps == 1
    assert tr.averages["old"].updates == 1
    d = tr.method.averages()["old"](1)
    for name, p in tr.trainable.items():  # θ_old = d θ_0 + (1 - d) θ_1
        torch.testing.assert_close(tr.averages["old"].shadow[name], d * initial[name] + (1 - d) * p.detach().float())
    ckpt = tmp_path / "checkpoints" / "iter-000001"
    assert (ckpt / "average-old.safetensors").is_file()


@pytest.mark.parametrize("method", ["ram", "diffusion_nft"])
def test_resume_repeats_the_uninterrupted_run_exactly(tmp_path, one_thread, method):
    opts = [f"method.name={method}", "log.save_every=1"]
    full = _trainer(tmp_path / "full", *opts, "train.iterations=3").train()
    _trainer(tmp_path / "part", *opts, "train.iterations=1").train()
    resumed = _trainer(tmp_path / "part", *opts, "train.iterations=3", "resume=latest").train()
    assert len(resumed) == 2
    for a, b in zip(full[1:], resumed, strict=True):
        assert {k: v for k, v in a.items() if not k.startswith(SKIP)} == {k: v for k, v in b.items()
                                                                            if not k.startswith(SKIP)}


def test_endpoints_come_from_the_lagged_policy(tmp_path, one_thread):
    """endpoint_policy=old samples with θ_old swapped in (and restores θ); current with θ."""
    tr = _trainer(tmp_path, "method.name=ram", "train.iterations=1")
    tr.train()
    ctx = tr.context(1)
    policy = {k: p.detach().clone() for k, p in tr.trainable.items()}
    with ctx.average_weights("old"):
        assert all(torch.equal(p, tr.averages["old"].shadow[k]) for k, p in tr.trainable.items())
    assert all(torch.equal(p, policy[k]) for k, p in tr.trainable.items())
    old = tr.collect(1, ctx)[0][0].traj.x0
    tr.method.options.endpoint_policy = "current"
    current = tr.collect(1, ctx)[0][0].traj.x0
    assert not torch.equal(old, current)
    with pytest.raises(RuntimeError, match="does not declare"), ctx.average_weights("ema"):
        pass


def test_full_fine_tuning_keeps_a_reference_for_ram_without_kl(tmp_path, one_thread):
    tr = _trainer(tmp_path, "method.name=ram", "train.beta=0", "train.lora.enabled=false")
    assert tr.ref_model is not None


@pytest.mark.parametrize("override, message", [
    ("method.options.endpoint_policy=new", "method.options.endpoint_policy: 'new'; allowed: old, current"),
    ("method.options.std_scope=batch", "method.options.std_scope: 'batch'; allowed: iteration, group"),
    ("method.options.reward_multiplier=0", "method.options.reward_multiplier: must be > 0"),
    ("method.options.num_noisings=0", "method.options.num_noisings: must be >= 1"),
    ("method.options.time_alpha=-1", "method.options.time_alpha: must be > -1"),
    ("method.options.old_decay_max=1", "method.options.old_decay_max: must be in [0, 1)"),
    ("method.options.target_velocity=ref", "method.options.target_velocity: 'ref'; allowed: old, current"),
    ("method.options.clip=1", "method.options.clip"),
    ("sample.same_noise_in_group=true", "sample.same_noise_in_group=true would make every member of a group the same"),
])
def test_bad_ram_options_are_one_line_errors(tmp_path, override, message):
    with pytest.raises(ConfigError, match=None) as err:
        _trainer(tmp_path, "method.name=ram", override)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_bad_nft_options_are_one_line_errors(tmp_path):
    for override, message in (("method.options.beta=0", "method.options.beta: must be > 0"),
                              ("method.options.kl_beta=-1", "method.options.kl_beta: must be >= 0"),
                              ("method.options.reward_multiplier=5", "method.options.reward_multiplier")):
        with pytest.raises(ConfigError) as err:
            _trainer(tmp_path, "method.name=diffusion_nft", override)
        assert message in str(err.value) and "\n" not in str(err.value)
