"""The overhead benchmark's flow_grpo side does Flow-GRPO's step math: its log-prob and mean equal flowrl's
``flow_sde`` on the same inputs (so iteration/flow_grpo compares the same work), and a run prints both ratios."""

import pytest
import torch

from flowrl.benchmarks.perf import overhead
from flowrl.sde import flow_sde


def test_the_flow_grpo_side_steps_as_flow_sde_does():
    g = torch.Generator().manual_seed(0)
    x, v, x_next = (torch.randn(3, 4, 8, 8, generator=g) for _ in range(3))
    sigmas = [1.0, 0.9, 0.6, 0.0]
    for j in (0, 1):
        _, lp, mean, std = overhead._flow_grpo_sde_step(x, v, sigmas, j, 0.7, x_next=x_next)
        ref = flow_sde(v, x, sigmas[j], sigmas[j + 1], 0.7, sigma_at_one=sigmas[1], x_next=x_next)
        torch.testing.assert_close(mean, ref.mean, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(lp, ref.log_prob, rtol=1e-5, atol=1e-5)
        assert abs(std - float(ref.std.flatten()[0])) < 1e-6


def test_the_summary_names_both_iteration_ratios():
    rows = [
        {"size": "tiny", "transformer_params_m": 0.08, "what": w, "beta": 0.0, "ratio": r}
        for w, r in (("iteration", 1.05), ("iteration_flow_grpo", 0.99))
    ]
    text = overhead.summary(rows)
    assert "iteration/bare beta 0" in text and "iteration/flow_grpo loop beta 0" in text
    assert "1.050 (> 1.03)" in text and "0.990 (<= 1.03)" in text


def test_the_summary_shows_the_noise_floor_beside_the_targets():
    rows = [
        {"size": "tiny", "transformer_params_m": 0.08, "what": w, "beta": 0.0, "ratio": r}
        for w, r in (("iteration", 1.05), ("iteration_self", 1.001))
    ]
    header, _, line = overhead.summary(rows).splitlines()
    assert header == "| size | iteration/bare beta 0 | iteration/itself beta 0 (noise floor) |"
    assert line == "| tiny (0.08M) | 1.050 (> 1.03) | 1.001 |"


def test_a_target_counts_as_shown_only_where_its_whole_interval_is_below_it():
    row = {"size": "tiny", "transformer_params_m": 0.08, "what": "iteration", "beta": 0.0}
    assert overhead._cell({**row, "ratio": 1.01, "interval": [0.99, 1.02]}) == "1.010 [0.990, 1.020] (<= 1.03)"
    assert (
        overhead._cell({**row, "ratio": 1.01, "interval": [0.97, 1.05]}) == "1.010 [0.970, 1.050] (<= 1.03 not shown)"
    )
    assert overhead._cell({**row, "ratio": 1.04, "interval": [1.01, 1.07]}) == "1.040 [1.010, 1.070] (> 1.03)"


def test_the_ratio_is_the_median_of_the_pairs_and_its_interval_holds_it():
    """Pair 3 ran in a slow spell that scaled both of its sides by 3: its ratio is the others', where the
    two sides' medians would not be. The interval is the same on every call (a seeded bootstrap)."""
    timing = overhead.Timing(ours=[1.0, 1.2, 3.3, 1.05, 1.0], bare=[1.0, 1.0, 3.0, 1.0, 1.25])
    assert timing.ratios == pytest.approx([1.0, 1.2, 1.1, 1.05, 0.8])
    assert timing.ratio == pytest.approx(1.05)
    lo, hi = timing.interval()
    assert 0.8 <= lo <= timing.ratio <= hi <= 1.2
    assert timing.interval() == (lo, hi)
