"""E-GRPO credit math (specs/addon_methods.md §4): entropies, merge lengths, merged plans, advantages, cost."""

import itertools
import math

import pytest
import torch

from flowrl.credit import granular
from flowrl.credit.entropy import (
    MergedStep,
    extra_cost,
    gaussian_entropy,
    merge_length,
    merged_entropy,
    merged_plan,
    merged_step_advantages,
    merged_steps,
    merged_transition,
    step_entropies,
    tiled_merged_steps,
    transition_std,
)
from flowrl.methods.seam import RewardTable
from flowrl.plan import make_plan
from flowrl.sde import cps, flow_sde, step

A = 0.7
LOG_2PI_E_A2 = math.log(2 * math.pi * math.e * A * A)  # log(17.07947 * 0.49) = log(8.36894) = 2.12452


def flux_sigmas(num_steps: int = 16, shift: float = 3.0) -> torch.Tensor:
    """shift * u / (1 + (shift - 1) u) over linspace(1, 0, T + 1), fp32: sigma_1 = 0.978261, sigma_3 = 0.928571,
    sigma_5 = 0.868421, sigma_6 = 0.833333, sigma_7 = 0.794118, sigma_11 = 0.576923, sigma_12 = 0.5."""
    u = torch.linspace(1, 0, num_steps + 1)
    return shift * u / (1 + (shift - 1) * u)


def h_tilde(sigmas: torch.Tensor, n: int, l: int) -> float:
    """The spec's formula written out: log(2 pi e a^2 r(sigma_n) (sigma_n - sigma_{n+l})), r with the sigma = 1 clamp."""
    s = float(sigmas[n])
    r = s / (1 - (float(sigmas[1]) if s >= 1 else s))
    return math.log(2 * math.pi * math.e * A * A * r * (s - float(sigmas[n + l])))


def test_single_step_entropies_match_the_spec_table():
    # n = 0: r(sigma_0) * Delta_0 = (1 / (1 - sigma_1)) * (1 - sigma_1) = 1, so h(0, 1) = log(2 pi e a^2) = 2.1245.
    # n = 1: r = 0.978261 / 0.021739 = 45, Delta = 0.023715 -> 8.36894 * 1.06719 = 8.9312 -> 2.1896.
    # The spec's table prints 2.13 and 0.50 for 2.1245 and 0.4953 (rounded twice); the rest agree to 0.005.
    sigmas = flux_sigmas()
    h = step_entropies(sigmas, A)
    assert h.shape == (16,) and h.dtype == torch.float64
    assert h[0].item() == pytest.approx(LOG_2PI_E_A2, abs=1e-6)
    assert h[1].item() == pytest.approx(2.1896, abs=1e-4)
    table = [2.13, 2.19, 1.52, 1.13, 0.87, 0.66, 0.50, 0.35]
    assert h[:8].tolist() == pytest.approx(table, abs=0.006)
    for n in range(8):
        assert h[n].item() == pytest.approx(h_tilde(sigmas, n, 1), abs=1e-6)


def test_merge_lengths_by_formula_and_table():
    sigmas = flux_sigmas()
    # n = 3: r = 0.928571 / 0.071429 = 13. l = 2: Delta = sigma_3 - sigma_5 = 0.060150 -> log(8.36894 * 13 * 0.060150)
    # = log(6.5442) = 1.8786 < 2.2; l = 3: Delta = 0.095238 -> log(10.3614) = 2.3381 >= 2.2 -> l* = 3.
    assert h_tilde(sigmas, 3, 2) < 2.2 <= h_tilde(sigmas, 3, 3)
    assert merge_length(sigmas, 3, A, 2.2) == 3
    # n = 7: r = 27 / 7 = 3.857143. l = 4: Delta = 0.217195 -> log(7.0111) = 1.9475; l = 5: Delta = 0.294118
    # -> log(9.4941) = 2.2507 -> l* = 5.
    assert h_tilde(sigmas, 7, 4) < 2.2 <= h_tilde(sigmas, 7, 5)
    assert merge_length(sigmas, 7, A, 2.2) == 5
    assert [s.length for s in merged_steps(sigmas, range(8), A, tau=2.2)] == [2, 2, 2, 3, 4, 4, 5, 5]
    assert merge_length(sigmas, 3, A, tau=1.0) == 1  # h(3, 1) = 1.134 already >= 1
    assert merge_length(sigmas, 14, A, tau=10.0) == 2  # never reached: the cap T - n
    assert merge_length(sigmas, 7, A, 2.2, max_length=3) == 3
    # thresholding the total entropy (d/2) h~ with tau scaled by d/2 picks the same lengths
    d = 64
    assert merge_length(sigmas, 5, A, 2.2 * d / 2, quantity="total", dim=d) == merge_length(sigmas, 5, A, 2.2)


def test_entropy_monotone_in_merge_length():
    sigmas = flux_sigmas()
    for n in range(16):
        hs = [merged_entropy(sigmas, n, l, A) for l in range(1, 17 - n)]
        assert all(b > a for a, b in itertools.pairwise(hs)), n  # flow_sde: strictly increasing in l
        assert all(h == pytest.approx(h_tilde(sigmas, n, l)) for l, h in enumerate(hs, 1))
        cs = [merged_entropy(sigmas, n, l, A, kind="cps") for l in range(1, 17 - n)]
        assert all(b < a for a, b in itertools.pairwise(cs)), n  # cps: std sigma_{n+l} sin(a pi/2) shrinks
    assert merged_entropy(sigmas, 15, 1, A, kind="cps") == -math.inf  # lands on sigma = 0: std 0
    with pytest.raises(ValueError):
        merge_length(sigmas, 0, A, kind="cps")
    with pytest.raises(ValueError):
        merged_entropy(sigmas, 10, 7, A)


def test_entropy_quantities_and_std_match_the_steps():
    sigmas = flux_sigmas()
    x, v = torch.zeros(1, 2, 2, 2), torch.zeros(1, 2, 2, 2)
    for n, l in [(0, 1), (0, 3), (5, 2), (14, 2)]:
        s, s_next, one = float(sigmas[n]), float(sigmas[n + l]), float(sigmas[1])
        std = transition_std(s, s_next, A, "flow_sde", one)
        assert flow_sde(v, x, s, s_next, A, sigma_at_one=one).std[0].item() == torch.tensor(std).float().item()
        assert cps(v, x, s, s_next, A).std[0].item() == torch.tensor(transition_std(s, s_next, A, "cps")).float().item()
        normal = torch.distributions.Normal(
            torch.tensor(0.0, dtype=torch.float64), torch.tensor(std, dtype=torch.float64)
        )
        assert gaussian_entropy(std, "per_element") == pytest.approx(normal.entropy().item(), abs=1e-12)
        assert gaussian_entropy(std, "h_tilde") == pytest.approx(2 * normal.entropy().item(), abs=1e-12)
        assert gaussian_entropy(std, "total", dim=8) == pytest.approx(8 * normal.entropy().item(), abs=1e-12)
    with pytest.raises(ValueError):
        gaussian_entropy(1.0, "total")
    with pytest.raises(ValueError):
        gaussian_entropy(1.0, "nats")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        transition_std(0.5, 0.4, A, "dance_sde")


def test_merged_transition_is_the_existing_step():
    sigmas = flux_sigmas()
    gen = torch.Generator().manual_seed(0)
    x, v, z = (torch.randn(3, 4, 2, 2, generator=gen) for _ in range(3))
    flow = make_plan(sigmas, "flow_sde", A)  # the plain Flow-GRPO plan, read as rollout.transition reads it
    for n in (0, 4):  # l = 1 is bitwise the unmerged step
        ref = step("flow_sde", v, x, float(flow.sigma[n]), float(flow.sigma_next[n]), float(flow.noise_levels[n]),
                   sigma_at_one=flow.sigma_at_one, noise=z)  # fmt: skip
        out = merged_transition(v, x, sigmas, MergedStep(n, n + 1), A, noise=z)
        for name in ("x_next", "mean", "std", "log_prob"):
            assert torch.equal(getattr(out, name), getattr(ref, name)), (n, name)
    # n = 0, l = 3: g(1) uses the clamp with sigma_1: 0.7 sqrt(1 / (1 - sigma_1)) = 0.7 sqrt(46) = 4.74763;
    # std = g sqrt(1 - sigma_3) = 0.7 sqrt(46 / 14) = 1.268858. (sigma_at_one = sigma_3 would give 0.7 sqrt(14 / 14) = 0.7.)
    out = merged_transition(v, x, sigmas, MergedStep(0, 3), A, noise=z)
    assert out.std.tolist() == pytest.approx([1.268858] * 3, rel=1e-5)
    wrong = flow_sde(v, x, 1.0, float(sigmas[3]), A, sigma_at_one=float(sigmas[3]))
    assert wrong.std[0].item() == pytest.approx(0.7, rel=1e-5)
    # mean at sigma = 1: x + [v + g^2 / 2 (x + 0 v)] Delta, g^2 = 0.49 * 46 = 22.54, Delta = sigma_3 - 1 = -0.0714286
    dt = float(sigmas[3]) - 1.0
    assert torch.allclose(out.mean, x + (v + 0.5 * 0.49 * 46 * x) * dt, rtol=1e-4, atol=1e-5)
    assert torch.allclose(out.x_next, out.mean + 1.268858 * z, rtol=1e-4, atol=1e-5)
    # a general merge n = 2, l = 3 against the §0 formulas with dt = sigma_5 - sigma_2, g at sigma_2
    s, s_next = float(sigmas[2]), float(sigmas[5])
    g = A * math.sqrt(s / (1 - s))
    out = merged_transition(v, x, sigmas, MergedStep(2, 5), A, noise=z)
    assert out.std[0].item() == pytest.approx(g * math.sqrt(s - s_next), rel=1e-6)
    mean = x + (v + g * g / (2 * s) * (x + (1 - s) * v)) * (s_next - s)
    assert torch.allclose(out.mean, mean, rtol=1e-5, atol=1e-5)


def test_merged_plan_keeps_full_sigma_one():
    sigmas = flux_sigmas()
    tiles = tiled_merged_steps(sigmas, 8, A, tau=2.2)
    assert [(s.start, s.end) for s in tiles] == [(0, 2), (2, 4), (4, 8)]
    plan = merged_plan(sigmas, tiles, A)
    assert len(plan) == 3 + 8  # three merged SDE jumps, then ODE 8 -> 9 -> ... -> 16
    assert torch.equal(plan.sigma, sigmas[[0, 2, 4, 8, 9, 10, 11, 12, 13, 14, 15]])
    assert torch.equal(plan.sigma_next, sigmas[[2, 4, 8, 9, 10, 11, 12, 13, 14, 15, 16]])
    assert plan.kinds == ("flow_sde",) * 3 + ("ode",) * 8 and plan.trained_indices == [0, 1, 2]
    assert plan.sigma_at_one == float(sigmas[1])
    # its first transition, read as the rollout reads it: std = 0.7 sqrt(46 (1 - sigma_2)) = 0.7 sqrt(2.090909) = 1.012204
    x = torch.zeros(1, 1, 2, 2)
    out = step(plan.kinds[0], x, x, float(plan.sigma[0]), float(plan.sigma_next[0]), float(plan.noise_levels[0]),
               sigma_at_one=plan.sigma_at_one)  # fmt: skip
    assert out.std[0].item() == pytest.approx(1.012204, rel=1e-5)
    # the pitfall: a Flow-GRPO plan over the merged sigma list takes sigma_2 as its sigma_1 (std would be 0.7)
    naive = make_plan(torch.cat([sigmas[[0, 2, 4]], sigmas[8:]]), "flow_sde", A)
    assert naive.sigma_at_one == float(sigmas[2]) != plan.sigma_at_one
    assert [(s.start, s.end) for s in tiled_merged_steps(sigmas, 8, A, length=3)] == [(0, 3), (3, 6), (6, 9)]
    for bad in ([MergedStep(0, 3), MergedStep(2, 4)], [MergedStep(15, 17)]):
        with pytest.raises(ValueError):
            merged_plan(sigmas, bad, A)


def test_fixed_merge_lengths():
    sigmas = flux_sigmas()
    assert all(s.length == 2 for s in merged_steps(sigmas, range(8), A, lengths=2))
    # the released script's eta_step_list 0 1 2 4 with eta_step_merge_list 1 1 2 3
    steps = merged_steps(sigmas, [0, 1, 2, 4], A, lengths=[1, 1, 2, 3])
    assert [(s.start, s.end) for s in steps] == [(0, 1), (1, 2), (2, 4), (4, 7)]
    with pytest.raises(ValueError):
        merged_steps(sigmas, [0, 1], A, lengths=[1])
    with pytest.raises(ValueError):
        merged_steps(sigmas, [15], A, lengths=2)
    with pytest.raises(ValueError):
        MergedStep(3, 3)


def test_tail_after_a_merged_step_restarts_at_n_plus_l():
    # §4.5: the tail from state n+l is the code's spliced schedule sigmas[:n+l+1] ++ sigmas[n+l+1::lam],
    # evaluated from index n+l. (The released loop starts at n+1, which for l > 1 adds l - 1 evaluations at
    # sigmas the latent is not at; the spec's cost note assumes the tail is l - 1 shorter, i.e. our reading.)
    for n, l, lam in [(2, 2, 2), (3, 3, 1), (7, 5, 2), (0, 1, 2)]:
        sched = list(range(n + l + 1)) + list(range(n + l + 1, 17, lam))
        fixed = [sched[i] for i in range(n + l, len(sched) - 1)]
        released = [sched[i] for i in range(n + 1, len(sched) - 1)]
        assert granular.tail_indices(16, n + l, lam) == fixed
        assert len(released) - len(fixed) == l - 1
    assert granular.tail_indices(16, 4, 2) == [4, 5, 7, 9, 11, 13]  # n = 2, l = 2


def test_merged_step_advantages_by_hand():
    # One prompt, two merged steps (n = 0 and n = 3) interleaved. Step 0 rows: [1, 2, 3] -> z = [-1, 0, 1]
    # (unbiased std 1); step 3 rows: 10, 10, 10 -> exactly 0. Normalising over the prompt alone would mix them:
    # mean 6, deviations [-5, 4, -4, 4, -3, 4], var 98 / 5 = 19.6, std 4.42719 -> row 0 gets -5 / 4.42719 = -1.12938.
    rewards = torch.tensor([1.0, 10.0, 2.0, 10.0, 3.0, 10.0]).reshape(6, 1, 1)
    groups = torch.zeros(6, dtype=torch.long)
    steps = torch.tensor([0, 3, 0, 3, 0, 3])
    adv = merged_step_advantages(rewards, groups, steps)
    assert adv[[0, 2, 4]].tolist() == pytest.approx([-1.0, 0.0, 1.0], abs=1e-6)
    assert adv[[1, 3, 5]].tolist() == [0.0, 0.0, 0.0]
    assert merged_step_advantages(rewards, groups)[0].item() == pytest.approx(-1.12938, abs=1e-4)
    # zero mean within every (prompt, merged step) group, with Lambda = {1, 2} summed (§4 oracle)
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randn(48, 2, 1, generator=gen)
    groups, steps = torch.randint(0, 2, (48,), generator=gen), torch.randint(0, 4, (48,), generator=gen)
    adv = merged_step_advantages(rewards, groups, steps)
    for g in range(2):
        for n in range(4):
            rows = (groups == g) & (steps == n)
            assert adv[rows].sum().abs() < 1e-5


def test_extra_cost_by_hand():
    sigmas = flux_sigmas()
    adaptive = merged_steps(sigmas, range(8), A, tau=2.2)  # l* = 2 2 2 3 4 4 5 5: tails start at 2 3 4 6 8 9 11 12
    # lam = 1 tails: 16 - m = 14 + 13 + 12 + 10 + 8 + 7 + 5 + 4 = 73; lam = 2: ceil((16 - m) / 2) = 7 + 7 + 6 + 5 + 4
    # + 4 + 3 + 2 = 38; per member 8 + 73 + 38 = 119; group 16 + 12 * 119 = 1444; rewards 12 * 8 * 2 = 192.
    cost = extra_cost(16, adaptive, (1, 2), group_size=12)
    assert (cost.nfes_per_member, cost.nfes, cost.reward_calls, cost.train_passes) == (119, 1444, 192, 8)
    # lam = 1 only: G²RPO 8 + 92 = 100 per member, E-GRPO 8 + 73 = 81: shorter by sum(l - 1) = 19
    g2 = granular.extra_cost(16, (1,))
    assert g2.nfes_per_member - extra_cost(16, adaptive, (1,)).nfes_per_member == sum(s.length - 1 for s in adaptive)
    assert extra_cost(16, merged_steps(sigmas, range(8), A, lengths=1), (1, 2)) == granular.extra_cost(16, (1, 2))
    assert extra_cost(16, adaptive, (1, 2), cfg_passes=2).nfes == 2 * 1444


def test_tiling_rejects_bad_ranges():
    sigmas = flux_sigmas()
    for kwargs in ({"stop": 17}, {"stop": 8, "first": 8}, {"stop": 8, "length": 0}):
        with pytest.raises(ValueError):
            tiled_merged_steps(sigmas, noise_level=A, **kwargs)
    assert tiled_merged_steps(sigmas, 16, A, first=14, length=5) == [MergedStep(14, 16)]  # capped at T


def _e_grpo(*overrides):
    from flowrl.methods import build_method
    from flowrl.resolve import resolve_config

    # T = 4: merged branches at n = 0, 1 (K = 2), one granularity; rewards a (weight 1) and b (weight 0.5)
    return build_method(
        resolve_config(
            "tiny-cpu",
            [
                "method.name=e_grpo",
                "sample.num_steps=4",
                "sample.group_size=3",
                "sample.prompts_per_iteration=2",
                "sample.batch_size=3",
                "reward={jpeg_compressibility: 1.0, jpeg_incompressibility: 0.5}",
                *overrides,
            ],
        )
    )


def _two_reward_columns():
    # group 0 (3 members) and group 1 (2 members); columns (k = 0, k = 1). "final"/"branch" hold the
    # weighted sum s = a + 0.5 b, as the trainer's reward call gives it; "<name>/<reward>" each reward.
    a = torch.tensor([[1.0, 3.0], [2.0, 5.0], [3.0, 1.0], [1.0, 0.0], [2.0, 1.0]])
    b = torch.tensor([[0.0, 4.0], [1.0, 0.0], [5.0, 2.0], [2.0, 0.0], [0.0, 0.0]])
    s = a + 0.5 * b
    columns = {
        "final": s[:, 0],
        "branch": s[:, 1:],
        "final/jpeg_compressibility": a[:, 0],
        "branch/jpeg_compressibility": a[:, 1:],
        "final/jpeg_incompressibility": b[:, 0],
        "branch/jpeg_incompressibility": b[:, 1:],
    }
    return columns, torch.tensor([0, 0, 0, 1, 1])


def test_e_grpo_zscores_the_weighted_sum_of_raw_rewards():
    """shengjun-zhang/VisualGRPO ae619bf (grpo_merge): fastvideo/workers/reward_manager/reward_manager.py
    returns Σ_c w_c r_c, and fastvideo/workers/rollout_buffer.py compute_advantages z-scores it per group
    (unbiased std + 1e-8), summed over granularities. Not G²RPO's Σ_c w_c z(r_c).
    Group 0, s = a + 0.5 b:
      k = 0: s = 1, 2.5, 5.5: mean 3, deviations -2, -.5, 2.5, var 10.5 / 2 = 5.25, std 2.29129
             -> -.87287, -.21822, 1.09109   (per reward: z(a) = -1, 0, 1; z(b) for 0, 1, 5: std sqrt(7)
             -> -.75593, -.37796, 1.13389; a + .5 b: -1.37796, -.18898, 1.56695)
      k = 1: s = 5, 5, 2: mean 4, deviations 1, 1, -2, var 3, std 1.73205 -> .57735, .57735, -1.15470
    Group 1: k = 0: s = 2, 2: flat, exactly 0 (per reward a = 1, 2 and b = 2, 0 are not flat:
      z(a) + .5 z(b) = -.70711 + .5 (.70711), .70711 + .5 (-.70711) = -.35355, .35355);
      k = 1: s = 0, 1 (b flat): -.70711, .70711."""
    columns, groups = _two_reward_columns()
    adv = _e_grpo().credit(RewardTable(columns, groups)).values
    want = [[-0.87287, 0.57735], [-0.21822, 0.57735], [1.09109, -1.15470], [0.0, -0.70711], [0.0, 0.70711]]
    assert adv.tolist() == [pytest.approx(row, abs=1e-5) for row in want]
    assert adv[3:, 0].tolist() == [0.0, 0.0]  # a flat group is exactly 0 (the code: rounding / 1e-8)
    per_reward = _e_grpo("method.options.reward_zscore=per_reward").credit(RewardTable(columns, groups)).values
    assert per_reward[:, 0].tolist() == pytest.approx([-1.37796, -0.18898, 1.56695, -0.35355, 0.35355], abs=1e-5)


def test_e_grpo_reward_zscore_is_a_one_line_error(capsys):
    from flowrl.cli import main

    assert main(["validate", "method.name=e_grpo", "method.options.reward_zscore=mean"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "method.options.reward_zscore: 'mean' is not one of weighted_sum, per_reward" in err
