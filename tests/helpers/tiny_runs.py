"""What the tests that train a tiny recipe share: the overrides that make a run as small as a test wants, the
metrics that differ between two runs of the same numbers, and the check that a resumed run repeats the
uninterrupted one."""

from __future__ import annotations

from collections.abc import Callable

SKIP = ("timing_s/", "throughput/", "memory/")  # wall time, speed and memory: never the same twice
NO_SAVES = ("log.save_every=1000", "log.sample_every=1000")  # no checkpoint and no logged samples in a short run
NO_EVAL = (*NO_SAVES, "log.eval_every=0")  # nor an evaluation


def small(steps: int = 3, *extra: str) -> list[str]:
    """``steps`` sampling steps, 2 prompts an iteration in groups of 4, rollout batches of 4; then ``extra``."""
    return [
        f"sample.num_steps={steps}",
        "sample.group_size=4",
        "sample.prompts_per_iteration=2",
        "sample.batch_size=4",
        *extra,
    ]


def same_numbers(row: dict) -> dict:
    """A metrics row without the keys of ``SKIP``: what two runs of the same numbers log alike."""
    return {k: v for k, v in row.items() if not k.startswith(SKIP)}


def assert_resume_repeats(
    train: Callable[..., list[dict]], tmp_path, *overrides: str, iterations: int = 3
) -> list[dict]:
    """``train(out, *overrides)`` (a run's metric rows) for ``iterations`` at once, and for 1 then resumed from its
    checkpoint (``log.save_every=1`` among ``overrides``): the resumed iterations log what the uninterrupted run
    logged, beyond ``SKIP``. Returns the uninterrupted run's rows."""
    full = train(tmp_path / "full", *overrides, f"train.iterations={iterations}")
    train(tmp_path / "part", *overrides, "train.iterations=1")
    resumed = train(tmp_path / "part", *overrides, f"train.iterations={iterations}", "resume=latest")
    assert len(resumed) == iterations - 1
    assert [same_numbers(r) for r in full[1:]] == [same_numbers(r) for r in resumed]
    return full


def assert_on_policy_ratio_norm(method, ctx, batch) -> None:
    """On policy (the batch just collected), every trained transition's RatioNorm ratio is 1 and its loss
    -mean(A) / |Δ_j| for advantages A = (1, -2, 0.5, 0.25)."""
    import pytest
    import torch

    adv = torch.tensor([1.0, -2.0, 0.5, 0.25])
    plan = batch.traj.plan
    for j in plan.trained_indices:
        out = method.transition_loss(ctx, batch.traj, j, batch.cond, adv)
        dt = float(plan.sigma[j] - plan.sigma_next[j])
        assert float(out.ratio_mean) == pytest.approx(1.0, abs=1e-6)
        assert float(out.loss.detach()) == pytest.approx(-float(adv.mean()) / dt, rel=1e-5)
