import math

import numpy as np
import pytest
import torch

from flowrl.sde import cps, dance_sde, flow_sde, flow_sde_g, gaussian_log_prob, ode, step


def test_flow_sde_hand_numbers():
    # sigma 0.5 -> 0.4, a = 0.7: g = 0.7 * sqrt(0.5 / 0.5) = 0.7, dt = -0.1
    # mean = x + dt (v + g^2 / (2 s) (x + (1 - s) v)) = 1 - 0.1 (2 + 0.49 (1 + 1)) = 0.702
    # std = g sqrt(|dt|) = 0.7 sqrt(0.1) = 0.2213594
    x = torch.ones(1, 2, 2)
    v = 2 * torch.ones(1, 2, 2)
    out = flow_sde(v, x, 0.5, 0.4, 0.7, noise=torch.zeros(1, 2, 2))
    assert torch.allclose(out.mean, torch.full_like(x, 0.702), atol=1e-6)
    assert out.std.item() == pytest.approx(0.2213594, abs=1e-6)
    assert torch.equal(out.x_next, out.mean)  # zero noise


def test_flow_sde_log_prob_is_the_gaussian_density():
    torch.manual_seed(0)
    x, v, x_next = torch.randn(3, 4, 5, 5), torch.randn(3, 4, 5, 5), torch.randn(3, 4, 5, 5)
    sigma = torch.tensor([0.9, 0.6, 0.3])
    sigma_next = torch.tensor([0.8, 0.5, 0.2])
    out = flow_sde(v, x, sigma, sigma_next, 0.7, x_next=x_next)
    for b in range(3):
        std = out.std[b]
        dist = torch.distributions.Normal(out.mean[b], std)
        # Flow-GRPO's reduction: the mean over latent elements
        assert out.log_prob[b].item() == pytest.approx(dist.log_prob(x_next[b]).mean().item(), rel=1e-5)
    out_sum = flow_sde(v, x, sigma, sigma_next, 0.7, x_next=x_next, reduction="sum")
    assert torch.allclose(out_sum.log_prob, out.log_prob * 100, rtol=1e-5)


def test_flow_sde_sigma_one_substitution():
    # at sigma = 1 the denominator 1 - sigma is replaced by 1 - sigma_at_one
    g = flow_sde_g(torch.tensor([1.0, 0.5]), 0.7, sigma_at_one=0.9)
    assert g[0].item() == pytest.approx(0.7 * math.sqrt(1 / 0.1), rel=1e-6)
    assert g[1].item() == pytest.approx(0.7, rel=1e-6)
    out = flow_sde(torch.randn(2, 3), torch.randn(2, 3), 1.0, 0.9, 0.7, sigma_at_one=0.9)
    assert torch.isfinite(out.log_prob).all()


def test_ode_is_an_euler_step():
    x, v = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    out = ode(v, x, 0.7, 0.55)
    assert torch.allclose(out.x_next, x + (0.55 - 0.7) * v)
    assert torch.equal(out.log_prob, torch.zeros(2))
    # flow_sde with noise level 0 degenerates to the same Euler step
    sde = flow_sde(v, x, 0.7, 0.55, 0.0, noise=torch.randn(2, 3, 4))
    assert torch.allclose(sde.x_next, out.x_next, atol=1e-6)


def test_cps_hand_numbers():
    # sigma 0.5 -> 0.25, a = 0.8: std = 0.25 sin(0.4 pi) = 0.2377641
    # x = 1, v = 2: x0_hat = 1 - 0.5 * 2 = 0, x1_hat = 1 + 0.5 * 2 = 2
    # mean = 0.75 * 0 + sqrt(0.25^2 - std^2) * 2 = 0.25 cos(0.4 pi) * 2 = 0.1545085
    x, v = torch.ones(1, 3), 2 * torch.ones(1, 3)
    out = cps(v, x, 0.5, 0.25, 0.8, x_next=torch.full((1, 3), 0.2545085))
    assert out.std.item() == pytest.approx(0.2377641, abs=1e-6)
    assert torch.allclose(out.mean, torch.full((1, 3), 0.1545085), atol=1e-6)
    # unnormalised log-prob: -mean((x' - mean)^2) = -(0.1)^2
    assert out.log_prob.item() == pytest.approx(-0.01, abs=1e-6)


def test_dance_sde_constant_coefficient():
    x, v = torch.ones(1, 2), torch.zeros(1, 2)
    out = dance_sde(v, x, 0.5, 0.4, 0.3, noise=torch.zeros(1, 2))
    # mean = 1 - 0.1 * (0.09 / 1.0 * 1) = 0.991; std = 0.3 sqrt(0.1)
    assert torch.allclose(out.mean, torch.full((1, 2), 0.991))
    assert out.std.item() == pytest.approx(0.3 * math.sqrt(0.1), rel=1e-6)


def test_scoring_reproduces_sampling():
    gen = torch.Generator().manual_seed(3)
    x, v = torch.randn(4, 2, 3, 3), torch.randn(4, 2, 3, 3)
    sampled = flow_sde(v, x, 0.8, 0.7, 0.7, generator=gen)
    scored = flow_sde(v, x, 0.8, 0.7, 0.7, x_next=sampled.x_next)
    assert torch.equal(sampled.log_prob, scored.log_prob)


def test_unknown_kind():
    with pytest.raises(ValueError, match="unknown step kind 'sdee'"):
        step("sdee", torch.zeros(1, 1), torch.zeros(1, 1), 0.5, 0.4)


def _gaussian_flow_velocity(x, sigma, m, c):
    """Exact velocity E[eps - x0 | x_sigma = x] for data N(m, c^2) and noise N(0, 1)."""
    var = (1 - sigma) ** 2 * c**2 + sigma**2
    centred = x - (1 - sigma) * m
    return (sigma - (1 - sigma) * c**2) / var * centred - m


def test_flow_sde_preserves_the_ode_marginal_on_a_gaussian_flow():
    # data N(2, 0.5^2): the ODE and the SDE (any noise level) share the marginals, so both end at
    # mean 2 and variance 0.25 up to discretisation and sampling error
    m, c, n, steps = 2.0, 0.5, 200_000, 200
    sigmas = torch.linspace(1, 0, steps + 1)
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn(n, 1, generator=gen)
    ends = {}
    for kind, a in (("ode", 0.0), ("flow_sde", 0.7)):
        x = x0.clone()
        for i in range(steps):
            s, s_next = sigmas[i].item(), sigmas[i + 1].item()
            v = _gaussian_flow_velocity(x, s, m, c)
            x = step(kind, v, x, s, s_next, a, sigma_at_one=sigmas[1].item(), generator=gen).x_next
        ends[kind] = x
    for kind, x in ends.items():
        assert x.mean().item() == pytest.approx(m, abs=0.01), kind
        assert x.var().item() == pytest.approx(c**2, abs=0.015), kind
    assert ends["flow_sde"].var().item() == pytest.approx(ends["ode"].var().item(), abs=0.015)


def test_gaussian_log_prob_reduction():
    x = torch.zeros(2, 4)
    lp = gaussian_log_prob(x, torch.zeros(2, 4), torch.ones(2, 1))
    assert torch.allclose(lp, torch.full((2,), -0.5 * math.log(2 * math.pi)))


def test_the_first_step_substitute_does_not_need_sigma_to_be_exactly_one():
    """Wan's UniPC flow sigmas start at 0.99999899: the substitute applies there too (within SIGMA_ONE_TOL),
    so g is Flow-GRPO's a sqrt(s0 / (1 - s1)), not a sqrt(s0 / 1e-6) ~ 700; an exact 1 gives the same value
    as before, and a sigma just outside the tolerance is left alone."""
    from flowrl.sde import SIGMA_ONE_TOL

    s0, s1, a = 0.99999899, 0.97, 0.7
    expected = a * math.sqrt(s0 / (1 - s1))
    assert flow_sde_g(s0, a, sigma_at_one=s1) == pytest.approx(expected, rel=1e-12)
    assert float(flow_sde_g(torch.tensor([s0]), a, sigma_at_one=s1)[0]) == pytest.approx(expected, rel=1e-6)
    assert flow_sde_g(1.0, a, sigma_at_one=s1) == pytest.approx(a * math.sqrt(1 / (1 - s1)), rel=1e-12)
    outside = 1 - 2 * SIGMA_ONE_TOL
    assert flow_sde_g(outside, a, sigma_at_one=s1) == pytest.approx(a * math.sqrt(outside / (1 - outside)))
    # every family's own schedule: the first transition's g stays Flow-GRPO's substitute value
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift

    from flowrl.pipelines.flux.tiny import build_tiny_flux
    from flowrl.pipelines.wan.tiny import build_tiny_wan

    wan = build_tiny_wan().scheduler
    wan.set_timesteps(20)
    sd3 = __import__("diffusers").FlowMatchEulerDiscreteScheduler(shift=3.0)
    sd3.set_timesteps(10)
    flux = build_tiny_flux().scheduler
    flux.set_timesteps(sigmas=np.linspace(1.0, 1 / 6, 6), mu=calculate_shift(4))
    for sigmas in (wan.sigmas, sd3.sigmas, flux.sigmas):
        sigmas = sigmas.float()
        g = flow_sde_g(float(sigmas[0]), a, sigma_at_one=float(sigmas[1]))
        assert g == pytest.approx(a * math.sqrt(float(sigmas[0]) / (1 - float(sigmas[1]))), rel=1e-6) and g < 10
    assert float(wan.sigmas[0]) < 1.0  # the case the exact test missed
