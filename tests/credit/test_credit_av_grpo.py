"""AV-GRPO math (specs/addon_methods.md §7), against values worked out by hand and the spec's oracles."""

import json
import math

import pytest
import torch

from flowrl.credit.av_grpo import A_AUDIO, A_VIDEO, desync_reward, modality_advantages, zscore
from flowrl.losses import av_grpo_loss, gaussian_kl, kl_factor, policy_weight, reward_weight
from flowrl.lr import lr_factor
from flowrl.methods.av_grpo import PhaseSchedule, av_grpo_learning_rate, av_grpo_lr_factor
from flowrl.sde import MAX_STD, capped_noise, flow_sde, flow_sde_g, sde_step_with_g

S = 1 / math.sqrt(1.25)  # 1 / population std of [1, 2, 3, 4] (or of [-1.5, -0.5, 0.5, 1.5])
U = 1 / math.sqrt(5 / 3)  # 1 / sample std of the same


def _latents(seed=0, shape=(2, 3, 4, 4)):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g) for _ in range(4)]  # v1, v2, x, noise


# ---------------------------------------------------------------------------------------- capped noise


def test_the_noise_levels_are_the_codes_video_002_audio_08():
    # zhiyuxu03/AV-GRPO ltx-trainer (spec "Corrections"): the sampler uses a = 0.8 when the video is frozen
    # (audio phase) and 0.02 otherwise (video phase); flowrl had them the other way round.
    assert (A_VIDEO, A_AUDIO) == (0.02, 0.8)


def test_capped_noise_by_hand():
    # t = 0.5, a = 0.8 (the audio's): g = 0.8 sqrt(0.5/0.5) = 0.8; |Δ| = 0.04, std = 0.8 * 0.2 = 0.16 < 0.5: not
    # capped, and g is flowrl's own flow_sde_g to the bit.
    g, std, capped = capped_noise(0.5, 0.46, A_AUDIO)
    assert (capped, g) == (False, flow_sde_g(0.5, 0.8)) and std == pytest.approx(0.16)
    # t = 0.75 -> 0.5, a = 0.8: g = 0.8 sqrt(3) = 1.386, std = 1.386 * 0.5 = 0.693 > 0.5: capped to
    # g = 0.5 / sqrt(0.25) = 1.0 and std = 0.5, both exactly.
    assert capped_noise(0.75, 0.5, A_AUDIO) == (1.0, 0.5, True)
    # The cap is strict: t = 0.5 -> 0.25, a = 1: g = 1, std = 0.5 exactly -> not capped.
    assert capped_noise(0.5, 0.25, 1.0) == (1.0, 0.5, False)


def test_first_step_is_capped_by_the_codes_clamp_not_the_sigma_1_substitute():
    # zhiyuxu03/AV-GRPO ltx-trainer (spec "Corrections"): 1 - t is clamped at 1e-5, so at t = 1 g = a sqrt(1e5).
    # Video (a = 0.02), σ 1 -> 0.9: g = 0.02 sqrt(1e5) = 6.325, std = 6.325 sqrt(0.1) = 2.0 > 0.5 -> capped:
    # g = 0.5 / sqrt(0.1) = 1.581, std 0.5. Flow-GRPO's substitute (sigma_at_one = 0.9) would give
    # g = 0.02 sqrt(1/0.1) = 0.0632, std = 0.02: not capped (flowrl's old first step).
    g, std, capped = capped_noise(1.0, 0.9, A_VIDEO)
    assert capped and g == pytest.approx(0.5 / math.sqrt(0.1)) and 0.5 - 1e-16 <= std <= 0.5
    g, std, capped = capped_noise(1.0, 0.9, A_VIDEO, sigma_at_one=0.9)
    assert not capped and g == flow_sde_g(1.0, 0.02, 0.9) and std == pytest.approx(0.02)
    # a tiny first step is not capped: |Δ| = 1e-6, g = 6.325, std = 6.325e-3, the code's finite g itself
    g, std, capped = capped_noise(1.0, 1.0 - 1e-6, A_VIDEO)
    assert not capped and g == pytest.approx(0.02 * math.sqrt(1e5)) and std == pytest.approx(0.02 * math.sqrt(0.1))
    g, std, capped = capped_noise(torch.tensor([1.0, 0.5]), torch.tensor([0.9, 0.4]), A_VIDEO)
    assert capped.tolist() == [True, False] and torch.isfinite(g).all()
    assert g[0].item() == pytest.approx(0.5 / math.sqrt(0.1))
    assert g[1].item() == flow_sde_g(torch.tensor(0.5), 0.02).item()


def test_cap_on_a_15_step_schedule():
    # Uniform σ_k = 1 - k/15, |Δ| = 1/15. Audio (a = 0.8): capped iff 0.8 sqrt(t/(1-t)) sqrt(1/15) > 0.5, i.e.
    # t/(1-t) > 5.86, t > 0.854: t = 1, 14/15, 13/15 (13/2 = 6.5 > 5.86) are, 12/15 (4) is not.
    # Video (a = 0.02): only t = 1 (g = 0.02 sqrt(1e5), std 1.63); at t = 14/15, std = 0.02 sqrt(14/15) = 0.019.
    sigmas = torch.linspace(1, 0, 16)
    for a, n_capped in ((A_AUDIO, 3), (A_VIDEO, 1)):
        g, std, capped = capped_noise(sigmas[:-1], sigmas[1:], a)
        assert capped.tolist() == [True] * n_capped + [False] * (15 - n_capped)
        assert (std <= MAX_STD).all()  # the oracle: the step std never exceeds 0.5, not even by an ulp
        assert torch.allclose(std[capped], torch.full((n_capped,), 0.5), rtol=0, atol=6e-8)
        assert torch.equal(g[~capped], flow_sde_g(sigmas[:-1], a)[~capped])  # uncapped: a sqrt(t/(1-t))


def test_the_step_computes_the_same_capped_std():
    # The std the SDE step computes from g (g * sqrt(-dt)) is also <= max_std, for many awkward |Δ|.
    sigmas = torch.rand(2000, generator=torch.Generator().manual_seed(1)).sort(descending=True).values * 0.98 + 0.01
    s, s_next = sigmas[:-1], sigmas[1:]
    keep = s_next < s
    g, std, capped = capped_noise(s[keep], s_next[keep], 1e6)
    assert capped.all() and (std <= 0.5).all()
    v, _, x, noise = _latents(shape=(int(keep.sum()), 3))
    assert (sde_step_with_g(v, x, s[keep], s_next[keep], g, noise=noise).std <= 0.5).all()
    for t, t_next in [(0.9, 0.9 - 1 / 3), (0.7, 0.1), (0.33, 0.32)]:
        g, std, capped = capped_noise(t, t_next, 40.0)
        assert capped and std <= 0.5 and g * math.sqrt(t - t_next) == std


# ---------------------------------------------------------------------------------------- SDE step with g


@pytest.mark.parametrize(
    "sigma, sigma_next, a, at_one",
    [
        (0.7, 0.6, A_AUDIO, None),  # float path
        (1.0, 0.9, A_VIDEO, 0.9),  # first step, Flow-GRPO's substitute
        (torch.tensor([0.7, 0.4]), torch.tensor([0.6, 0.3]), A_AUDIO, None),  # per-sample sigmas
    ],
)
def test_step_with_the_uncapped_g_is_flow_sde_bitwise(sigma, sigma_next, a, at_one):
    v, _, x, noise = _latents()
    g, _, capped = capped_noise(sigma, sigma_next, a, sigma_at_one=at_one)
    assert not bool(torch.as_tensor(capped).any())
    ours = sde_step_with_g(v, x, sigma, sigma_next, g, noise=noise)
    ref = flow_sde(v, x, sigma, sigma_next, a, sigma_at_one=at_one, noise=noise)
    for field in ("x_next", "log_prob", "mean", "std"):
        assert torch.equal(getattr(ours, field), getattr(ref, field)), field
    scored = sde_step_with_g(v, x, sigma, sigma_next, g, x_next=ref.x_next)  # scoring a stored transition
    assert torch.equal(scored.log_prob, ref.log_prob)


def test_capped_step_recomputes_the_drift_and_log_prob_by_hand():
    # t = 0.75 -> 0.5 with a = 0.8 is capped to g = 1: μ = x - 0.25 [v + 1/(2*0.75) (x + 0.25 v)], std = 0.5,
    # log-prob = mean_d [-(x' - μ)^2 / (2 * 0.25) - log(2π * 0.25) / 2], the code's own expression.
    v, _, x, noise = _latents()
    g, _, _ = capped_noise(0.75, 0.5, A_AUDIO)
    out = sde_step_with_g(v, x, 0.75, 0.5, g, noise=noise)
    mean = x - 0.25 * (v + (x + 0.25 * v) / 1.5)
    assert torch.allclose(out.mean, mean, atol=1e-6) and out.std.tolist() == [0.5, 0.5]
    assert torch.allclose(out.x_next, mean + 0.5 * noise, atol=1e-6)
    per_element = -((out.x_next - out.mean) ** 2) / (2 * 0.25) - 0.5 * math.log(2 * math.pi * 0.25)
    assert torch.allclose(out.log_prob, per_element.mean(dim=(1, 2, 3)), atol=1e-6)
    uncapped = flow_sde(v, x, 0.75, 0.5, A_AUDIO, noise=noise)  # differs: the cap changes drift and noise
    assert not torch.allclose(uncapped.mean, out.mean, atol=1e-3)


# ---------------------------------------------------------------------------------------- KL factor


def test_kl_factor_by_hand():
    # t = 0.5, |Δ| = 0.25, g = 1: (0.25/2) (1 * 0.5/1 + 1)^2 = 0.125 * 2.25 = 0.28125
    assert kl_factor(0.5, 0.25, 1.0).item() == pytest.approx(0.28125)
    # t = 0.75, |Δ| = 0.25, g = 1: 0.125 (0.25/1.5 + 1)^2 = 0.125 * (7/6)^2 = 0.1701389
    assert kl_factor(0.75, 0.25, 1.0).item() == pytest.approx(0.125 * (7 / 6) ** 2)


@pytest.mark.parametrize("t, t_next", [(0.5, 0.4), (0.75, 0.5), (0.95, 0.9)])  # uncapped, capped, capped
def test_kl_factor_is_the_exact_same_variance_gaussian_kl(t, t_next):
    """The spec's oracle with the SDE means of the step itself: two velocities at the same (x, t, g) give
    means that differ by |Δ|(1 + g²(1−t)/(2t))Δv, variance s² = g²|Δ|, and λ_KL·MSE(Δv) = KL/n."""
    v1, v2, x, noise = _latents(seed=3)
    g, std, _ = capped_noise(t, t_next, A_AUDIO)
    dt_abs = t - t_next
    m1 = sde_step_with_g(v1, x, t, t_next, g, noise=noise).mean
    m2 = sde_step_with_g(v2, x, t, t_next, g, noise=noise).mean
    assert torch.allclose(m2 - m1, dt_abs * (1 + g * g * (1 - t) / (2 * t)) * (v1 - v2), atol=1e-5)
    kl_per_element = ((m1 - m2) ** 2).mean(dim=(1, 2, 3)) / (2 * std**2)  # ‖μ1−μ2‖² / (2 s²) / n
    lam = kl_factor(t, dt_abs, g)
    assert torch.allclose(lam * ((v1 - v2) ** 2).mean(dim=(1, 2, 3)), kl_per_element, rtol=1e-5)
    assert torch.allclose(kl_per_element, gaussian_kl(m1, m2, torch.full((2,), std)), rtol=1e-5)


def test_kl_factor_with_the_codes_uncapped_g_is_not_the_kl_at_a_capped_step():
    # At t = 0.75 -> 0.5 the step used g = 1 (capped); the code's λ_KL takes g = 0.8 sqrt(3) = 1.386:
    # 0.125 (1.386 * 0.25/1.5 + 1/1.386)^2 = 0.1134, not the exact 0.1701.
    uncapped = A_AUDIO * math.sqrt(3)
    assert kl_factor(0.75, 0.25, uncapped).item() == pytest.approx(0.125 * (uncapped / 6 + 1 / uncapped) ** 2)
    assert kl_factor(0.75, 0.25, uncapped).item() < 0.7 * kl_factor(0.75, 0.25, 1.0).item()


# ---------------------------------------------------------------------------------------- weights and loss


def test_weights_by_hand():
    # t = 0.5, |Δ| = 0.25: λ_pol = sqrt(0.5/(0.25*0.5)) = 2, λ_rw = 4 (video), 1 (audio)
    # t = 0.8, |Δ| = 0.1: λ_pol = sqrt(0.8/0.02) = sqrt(40), λ_rw = 40
    t, dt = torch.tensor([0.5, 0.8]), torch.tensor([0.25, 0.1])
    assert policy_weight(t, dt).tolist() == pytest.approx([2.0, math.sqrt(40)])
    assert reward_weight(t, dt, "video").tolist() == pytest.approx([4.0, 40.0])
    assert reward_weight(t, dt, "audio").tolist() == [1.0, 1.0]
    # t = 1 is clamped to 0.999 as in the code: λ_pol = sqrt(0.999/(0.1 * 0.001)) = sqrt(9990)
    assert policy_weight(1.0, 0.1).item() == pytest.approx(math.sqrt(9990), rel=1e-5)
    with pytest.raises(ValueError, match="t == 1"):
        policy_weight(1.0, 0.1, t_clamp=None)


def test_loss_by_hand():
    # Two samples at t = 0.5, |Δ| = 0.25, g = 1: λ_pol = 2, λ_rw = 4 (video), λ_KL = 0.28125.
    # ρ = [1.5, 0.5], A = [1, -2], ε = 0.2: sample 0 max(-1.5, -1.2) = -1.2; sample 1 max(1.0, 1.6) = 1.6.
    # policy = mean(2 * [-1.2, 1.6]) = 0.4.  MSE(v, v_ref) = [1, (4 + 4)/4 = 2].
    # video: KL = mean(4 * 0.28125 * [1, 2]) = 1.6875, β = 0.01 -> 0.016875; loss 0.416875
    # audio: KL = mean(1 * 0.28125 * [1, 2]) = 0.421875, β = 0.002 -> 0.00084375; loss 0.40084375
    # The loss takes the step means of v and v_ref at the step's own g: their exact Gaussian KL is λ_KL·MSE.
    logp_new, logp_old = torch.log(torch.tensor([1.5, 0.5])), torch.zeros(2)
    adv = torch.tensor([1.0, -2.0])
    v_ref = torch.zeros(2, 4)
    v = torch.tensor([[1.0, -1.0, 1.0, -1.0], [2.0, 2.0, 0.0, 0.0]])
    x, noise = torch.randn(2, 4, generator=torch.Generator().manual_seed(0)), torch.zeros(2, 4)
    new, ref = (sde_step_with_g(u, x, 0.5, 0.25, 1.0, noise=noise) for u in (v, v_ref))
    loss, _, _, fig = av_grpo_loss(
        logp_new, logp_old, adv, 0.5, 0.25, new.mean, ref.mean, new.std, "video", 0.2, 0.01, 0.002
    )
    assert loss.item() == pytest.approx(0.416875, rel=1e-6)
    assert fig["loss/policy"] == pytest.approx(0.4) and fig["loss/kl"] == pytest.approx(0.016875)
    assert fig["policy/clip_frac"] == 1.0 and fig["kl/gaussian"] == pytest.approx(0.28125 * 1.5)  # λ_KL·MSE
    loss, _, _, fig = av_grpo_loss(
        logp_new, logp_old, adv, 0.5, 0.25, new.mean, ref.mean, new.std, "audio", 0.2, 0.01, 0.002
    )
    assert loss.item() == pytest.approx(0.40084375, rel=1e-6) and fig["weights/lambda_rw"] == 1.0


def test_loss_at_ratio_one_and_no_drift_is_minus_weighted_advantage():
    # ρ = 1, v = v_ref: loss = -mean(λ_pol A) = -(2 * 1 + sqrt(40) * -2)/2 = sqrt(40) - 1; its gradient in
    # logp_new is -λ_pol A / B = [-1, sqrt(40)], and the KL term has zero gradient in v.
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    v = torch.randn(2, 3, 5, requires_grad=True)
    x, noise = torch.randn(2, 3, 5), torch.randn(2, 3, 5)
    t, dt, adv = torch.tensor([0.5, 0.8]), torch.tensor([0.25, 0.1]), torch.tensor([1.0, -2.0])
    g = torch.tensor([1.0, 2.0])
    new, ref = (sde_step_with_g(u, x, t, t - dt, g, noise=noise) for u in (v, v.detach().clone()))
    loss, *_ = av_grpo_loss(logp, logp.detach(), adv, t, dt, new.mean, ref.mean, new.std, "video", 0.2, 0.01, 0.002)
    assert loss.item() == pytest.approx(math.sqrt(40) - 1, rel=1e-6)
    loss.backward()
    assert logp.grad.tolist() == pytest.approx([-1.0, math.sqrt(40)]) and v.grad.abs().max() == 0


# ---------------------------------------------------------------------------------------- advantages


def test_zscore_by_hand():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.1] * 4])
    assert zscore(x, unbiased=False)[0].tolist() == pytest.approx([-1.5 * S, -0.5 * S, 0.5 * S, 1.5 * S])
    assert zscore(x, unbiased=True)[0].tolist() == pytest.approx([-1.5 * U, -0.5 * U, 0.5 * U, 1.5 * U])
    assert zscore(x, unbiased=False)[1].tolist() == [0.0] * 4  # a flat row: exactly 0, not round-off / 1e-8


def test_modality_advantages_by_hand():
    # Video phase, G = 4. VQ [1, 2, 3, 4] (mean 2.5 > 0) -> z = [-1.5, -0.5, 0.5, 1.5] S; CLIP constant -> 0;
    # -DeSync [0, -0.4, 0, -0.4] (mean -0.2, pop std 0.2) -> [1, -1, 1, -1].
    # score = mean of the three = [(1 - 1.5S)/3, (-1 - 0.5S)/3, (1 + 0.5S)/3, (-1 + 1.5S)/3] (sums to 0),
    # advantage = score / sample std(score).
    metrics = {
        "vq": torch.tensor([1.0, 2, 3, 4]),
        "clip": torch.full((4,), 0.3),
        "desync": torch.tensor([0.0, -0.4, 0.0, -0.4]),
    }
    out = modality_advantages(metrics, "video")
    score = [(1 - 1.5 * S) / 3, (-1 - 0.5 * S) / 3, (1 + 0.5 * S) / 3, (-1 + 1.5 * S) / 3]
    sd = math.sqrt(sum(s * s for s in score) / 3)
    assert out.score.tolist() == pytest.approx(score, abs=1e-6)
    assert out.advantages.tolist() == pytest.approx([s / sd for s in score], abs=1e-6)
    assert (out.fallback.item(), out.rule) == (False, "vq_only")
    # The constant metric only rescales the score, which the final z-score undoes: same advantages without it.
    no_clip = modality_advantages({k: m for k, m in metrics.items() if k != "clip"}, "video")
    assert torch.allclose(no_clip.advantages, out.advantages, atol=1e-6)


def test_fallbacks_trigger_exactly_at_the_thresholds():
    f64 = {"dtype": torch.float64}
    base = {"clip": torch.tensor([0.1, 0.3, 0.2, 0.4], **f64), "desync": torch.tensor([0.0, -0.2, -0.4, 0.0], **f64)}
    # VQ mean exactly 0 -> VQ only: advantages = z of VQ = [-1.5, -0.5, 0.5, 1.5] U
    vq = torch.tensor([-1.5, -0.5, 0.5, 1.5], **f64)
    out = modality_advantages({"vq": vq, **base}, "video")
    assert out.fallback.item() and out.advantages.tolist() == pytest.approx([-1.5 * U, -0.5 * U, 0.5 * U, 1.5 * U])
    assert not modality_advantages({"vq": vq + 1e-6, **base}, "video").fallback.item()
    assert modality_advantages({"vq": vq - 1.0, **base}, "video").fallback.item()
    assert modality_advantages({"vq": torch.zeros(4, **f64), **base}, "video").fallback.item()
    assert not modality_advantages({"vq": torch.full((4,), 1e-6, **f64), **base}, "video").fallback.item()
    # CLAP: mean 0.3999 -> CLAP only; 0.4 -> not (fp32 0.4 is 0.4000000060 and passes too)
    audio = {"aq": torch.tensor([5.0, 6.0, 5.5, 6.5], **f64), "desync": base["desync"]}
    assert modality_advantages({"clap": torch.full((4,), 0.3999, **f64), **audio}, "audio").fallback.item()
    assert not modality_advantages({"clap": torch.full((4,), 0.4, **f64), **audio}, "audio").fallback.item()
    assert not modality_advantages({"clap": torch.full((4,), 0.4), **audio}, "audio").fallback.item()
    # fp32 rounding can cross it: fp32 0.15 and 0.65 average to 0.39999999; as fp64 (or a list) to 0.4 exactly
    assert modality_advantages({"clap": torch.tensor([0.15, 0.65] * 2), **audio}, "audio").fallback.item()
    assert not modality_advantages({"clap": [0.15, 0.65] * 2, **audio}, "audio").fallback.item()
    clap = torch.tensor([0.2, 0.4, 0.3, 0.3], **f64)  # mean 0.3: CLAP only
    out = modality_advantages({"clap": clap, **audio}, "audio")
    assert out.fallback.item() and torch.allclose(out.advantages, zscore(zscore(clap, False), True))
    # Each phase looks only at its own key: a low VQ does nothing in the audio phase, and vice versa.
    assert not modality_advantages({"clap": clap + 0.5, "vq": vq, **audio}, "audio").fallback.item()
    assert not modality_advantages({"vq": vq + 1, "clap": clap, **base}, "video").fallback.item()
    assert modality_advantages({"vq": vq, **base}, "video", vq_key=None).rule is None


def test_advantages_are_zero_mean_unit_std_per_group_and_batched_groups_are_independent():
    gen = torch.Generator().manual_seed(0)
    metrics = {
        "aq": torch.randn(5, 8, generator=gen) + 6,
        "clap": torch.rand(5, 8, generator=gen),
        "desync": -torch.rand(5, 8, generator=gen),
    }
    out = modality_advantages(metrics, "audio")
    assert out.advantages.shape == (5, 8) and out.fallback.shape == (5,)
    assert torch.allclose(out.advantages.mean(dim=1), torch.zeros(5), atol=1e-6)
    assert torch.allclose(out.advantages.std(dim=1), torch.ones(5), atol=1e-6)
    for row in range(5):
        alone = modality_advantages({k: m[row] for k, m in metrics.items()}, "audio")
        assert torch.allclose(alone.advantages, out.advantages[row]) and alone.fallback == out.fallback[row]


def test_constant_metrics_and_nan_values():
    flat = {"vq": torch.full((4,), 2.0), "clip": torch.full((4,), 0.3), "desync": torch.zeros(4)}
    assert modality_advantages(flat, "video").advantages.tolist() == [0.0] * 4  # no NaN, no round-off
    # A NaN metric value makes its group's advantages NaN, as the code's numpy statistics do (zhiyuxu03/AV-GRPO
    # ltx-trainer, spec "Corrections"; it is not counted as 0): the method's NaN guard then drops the step. The
    # other group is untouched: vq [1, 2, 3, 4] and clip [0.1, 0.2, 0.3, 0.2] give the same as alone.
    vq = torch.tensor([[1.0, float("nan"), 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]])
    clip = torch.tensor([[0.1, 0.2, 0.3, 0.2]] * 2)
    out = modality_advantages({"vq": vq, "clip": clip}, "video").advantages
    alone = modality_advantages({"vq": vq[1], "clip": clip[1]}, "video").advantages
    assert torch.isnan(out[0]).all() and torch.equal(out[1], alone)
    zeroed = modality_advantages({"vq": vq.nan_to_num(0.0), "clip": clip}, "video").advantages
    assert torch.isfinite(zeroed).all()  # what counting NaN as 0 would have given instead


def test_desync_reward():
    # mean |offset| over windows: [0.2, -0.2, 0.4] -> 0.8/3; perfect sync -> 0, the maximum
    assert desync_reward([0.2, -0.2, 0.4]).item() == pytest.approx(-0.8 / 3)
    assert desync_reward(torch.tensor([[0.0, 0.0], [0.2, 0.0]])).tolist() == pytest.approx([0.0, -0.1])
    assert str(desync_reward([0.0, 0.0]).item()) == "0.0"  # +0.0
    offsets = torch.rand(100, 7) * 4 - 2  # Synchformer's range, ±2 s
    assert (desync_reward(offsets) <= 0).all()


# ---------------------------------------------------------------------------------------- schedule and LR


def test_one_cycle_is_8_steps_4_video_then_4_audio_on_the_same_prompts():
    sched = PhaseSchedule()
    phases, resets, prompts = [], [], []
    for _ in range(8):
        phases.append(sched.state.phase)
        prompts.append(sched.step_prompts())
        resets.append(sched.after_step())
    assert phases == ["video"] * 4 + ["audio"] * 4
    assert resets == [False, False, False, True] * 2  # the optimizer state is cleared at every switch
    assert prompts[:4] == prompts[4:]  # audio step k uses video step k's 8 prompts (one per GPU)
    assert sorted(i for block in prompts[:4] for i in block) == sched.prompts_of(0) == list(range(32))
    assert (sched.state.cycle, sched.state.phase, sched.state.step_in_phase) == (1, "video", 0)
    assert sched.step_prompts() == list(range(32, 40))
    audio_first = PhaseSchedule(start="audio")  # the cycle ends with its second phase, whichever starts
    assert [audio_first.after_step() for _ in range(8)] == [False, False, False, True] * 2
    assert (audio_first.state.cycle, audio_first.state.phase) == (1, "audio")


def test_1440_steps_are_180_cycles_and_5760_prompt_visits():
    sched = PhaseSchedule()
    resets = sum(sched.after_step() for _ in range(1440))
    assert sched.state.cycle == 180 and sched.state.optimizer_steps == 1440 and resets == 360
    visited = [i for c in range(180) for i in sched.prompts_of(c)]
    assert len(visited) == len(set(visited)) == 5760
    assert sched.prompts_of(2, num_prompts=70) == [i % 70 for i in range(64, 96)]  # wraps around the list


def test_a_nan_switch_keeps_the_cycle_and_resets_the_in_phase_counter():
    sched = PhaseSchedule()
    sched.after_step(), sched.after_step()  # video steps 0, 1 of cycle 0
    assert sched.on_nan() is True  # clear the optimizer state
    assert (sched.state.cycle, sched.state.phase, sched.state.step_in_phase) == (0, "audio", 0)
    assert sched.state.optimizer_steps == 2 and sched.state.nan_switches == 1  # the dropped step is not counted
    for _ in range(4):
        sched.after_step()
    assert (sched.state.cycle, sched.state.phase) == (1, "video")  # the audio phase ended the cycle
    for _ in range(5):
        sched.after_step()  # 4 video steps, then audio step 0 of cycle 1
    sched.on_nan()  # NaN in audio: back to video, still cycle 1
    assert (sched.state.cycle, sched.state.phase, sched.state.step_in_phase) == (1, "video", 0)


def test_schedule_state_round_trips_through_json():
    sched = PhaseSchedule()
    for _ in range(6):
        sched.after_step()
    sched.on_nan()
    sched.after_step()
    saved = json.loads(json.dumps(sched.state_dict()))
    resumed = PhaseSchedule()
    resumed.load_state_dict(saved)
    assert resumed.state == sched.state
    assert [resumed.after_step() for _ in range(9)] == [sched.after_step() for _ in range(9)]
    assert resumed.state_dict() == sched.state_dict()
    with pytest.raises(ValueError, match="steps_per_phase"):
        PhaseSchedule(steps_per_phase=2, prompts_per_cycle=16).load_state_dict(saved)
    with pytest.raises(ValueError, match="step_in_phase"):
        resumed.load_state_dict({**saved, "step_in_phase": 4})


def test_the_lr_schedule_per_step():
    # N = 5 steps: the code sets the rate after each step from the count n done: n = 1 -> 1 (warm-up 1e-6 ->
    # 1e-6), n >= 2 -> 0.5 (1 + cos(π (n-1)/4)). Step k runs at the rate set after step k-1 (n = k); step 0
    # at the optimizer's initial rate, the yaml's 1e-5 = 10 x 1e-6 (zhiyuxu03/AV-GRPO ltx-trainer, spec
    # "Corrections": never 0).
    expected = [10.0, 1.0, 0.5 * (1 + math.cos(math.pi / 4)), 0.5, 0.5 * (1 + math.cos(3 * math.pi / 4))]
    assert [av_grpo_lr_factor(k, 5) for k in range(5)] == pytest.approx(expected)
    assert av_grpo_lr_factor(5, 5) == pytest.approx(0.0, abs=1e-12)  # "to 0", after the last step
    # flowrl's lr_factor (diffusers: warm-up from 0) agrees from step 1 on; its step 0 is 0, the code's is not
    assert [lr_factor(k, 5, "cosine", warmup=1) for k in range(1, 5)] == [av_grpo_lr_factor(k, 5) for k in range(1, 5)]
    assert lr_factor(0, 5, "cosine", warmup=1) == 0.0
    assert av_grpo_lr_factor(0, 1440) == 10.0 and av_grpo_lr_factor(0, 1440, first=1.0) == 1.0
    assert av_grpo_lr_factor(1440 - 1, 1440) == pytest.approx(0.5 * (1 + math.cos(math.pi * 1438 / 1439)))


def test_the_learning_rate_of_each_av_grpo_step():
    # The code's numbers: 1e-5 at AV-GRPO step 0, then 1e-6 x 0.5 (1 + cos(π (n-1)/1439)) at step n (cosine over
    # 1440 steps, one warm-up step); flowrl's plain cosine with one warm-up step would run step 0 at 0.
    rates = [av_grpo_learning_rate(n, 1440, 1e-6, 1e-5, "cosine", 1) for n in (0, 1, 2, 720, 1439)]
    assert rates[0] == 1e-5 and rates[1] == 1e-6
    assert rates == pytest.approx([1e-6 * av_grpo_lr_factor(n, 1440) for n in (0, 1, 2, 720, 1439)], rel=1e-12)
    assert rates[3] == pytest.approx(1e-6 * 0.5 * (1 + math.cos(math.pi * 719 / 1439)))
    assert lr_factor(0, 1440, "cosine", warmup=1) == 0.0
    # a constant schedule: the first step at first_lr, every later one at the base rate
    assert [av_grpo_learning_rate(n, 10, 1e-3, 2e-3, "constant", 0) for n in range(3)] == [2e-3, 1e-3, 1e-3]


# ---------------------------------------------------------------------------------------- bad arguments

_M = {"vq": torch.tensor([1.0, 2.0]), "clip": torch.tensor([0.1, 0.2])}
_L = (torch.zeros(2), torch.zeros(2), torch.ones(2), 0.5, 0.25, torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2))
_W = (0.2, 0.01, 0.002)  # clip, beta_video, beta_audio


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: capped_noise(0.5, 0.4, 0.8, max_std=-0.5), "max_std"),
        (lambda: capped_noise(0.5, 0.4, 0.8, max_std=0), "max_std"),
        (lambda: capped_noise(0.5, 0.5, 0.8), "sigma_next"),
        (lambda: capped_noise(1.5, 0.5, 0.8), "sigma"),
        (lambda: capped_noise(0.5, 0.4, 0.0), "a"),
        (lambda: capped_noise(1.0, 0.9, 0.8, sigma_at_one=1.0), "sigma_at_one"),
        (lambda: sde_step_with_g(torch.zeros(1, 2), torch.zeros(1, 2), 0.5, 0.4, 0.0), "g"),
        (lambda: kl_factor(0.5, 0.1, -1.0), "g"),
        (lambda: policy_weight(0.5, 0.0), "dt_abs"),
        (lambda: policy_weight(0.0, 0.1), "t"),
        (lambda: reward_weight(0.5, 0.1, "image"), "phase"),
        (lambda: av_grpo_loss(*_L, "both", *_W), "phase"),
        (lambda: av_grpo_loss(*_L, "video", -0.2, 0.01, 0.002), "clip"),
        (lambda: av_grpo_loss(*_L, "video", 0.2, 0.01, -1.0), "beta_audio"),
        (lambda: av_grpo_loss(*_L[:5], torch.zeros(2, 3), torch.zeros(2, 4), _L[7], "video", *_W), "ref_mean"),
        (lambda: av_grpo_loss(*_L[:3], torch.tensor([0.5, 0.5, 0.5]), *_L[4:], "video", *_W), "t"),
        (lambda: zscore(torch.ones(1), unbiased=True), "G >= 2"),
        (lambda: modality_advantages({"vq": torch.ones(1)}, "video"), "G >= 2"),
        (lambda: modality_advantages(_M, "audio"), "clap"),
        (lambda: modality_advantages(_M, "none"), "phase"),
        (lambda: modality_advantages({}, "video"), "metrics"),
        (lambda: modality_advantages({**_M, "x": torch.tensor([1.0, math.inf])}, "video"), "inf"),
        (lambda: desync_reward([]), "offsets"),
        (lambda: PhaseSchedule(steps_per_phase=0), "steps_per_phase"),
        (lambda: PhaseSchedule(prompts_per_cycle=30), "prompts_per_cycle"),
        (lambda: PhaseSchedule(start="both"), "start"),
        (lambda: PhaseSchedule().prompts_of(-1), "cycle"),
        (lambda: av_grpo_lr_factor(0, 1), "total"),
        (lambda: av_grpo_lr_factor(-1, 10), "step"),
    ],
)
def test_bad_arguments_are_one_line_value_errors_naming_them(call, name):
    with pytest.raises(ValueError) as err:
        call()
    assert name in str(err.value) and "\n" not in str(err.value)
