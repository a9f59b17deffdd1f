"""Flow-DPPO (with MixGRPO's per-iteration window) and AWM over two processes (gloo on CPU, torchrun) against one:
the window is drawn from a stream of the seed and the iteration, AWM's endpoints, times and noise from streams of the
sample's global position, so rewards, advantages, losses and gradient norms are one process's."""

import pytest

from _processes import ONE_PROCESS, needs_torchrun, torchrun, train_metrics

COMMON = [
    "sample.num_steps=4",
    "sample.group_size=4",
    "sample.prompts_per_iteration=2",
    "sample.batch_size=4",
    "train.iterations=2",
    "log.save_every=1000",
    "log.sample_every=1000",
    "log.eval_every=0",
]
METHODS = {
    "flow_dppo": [
        "method.name=flow_dppo",
        "method.options.beta=0.01",
        "method.options.window_size=2",
        "method.options.window_range=[0,3]",
        "method.options.window_schedule=iteration",
        "method.options.ode_tail=dpm2",
    ],
    "awm": ["method.name=awm", "method.options.num_noisings=2", "train.optimizer_steps_per_iteration=1"],
}
KEYS = ("reward/mean", "reward/std", "adv/abs_mean", "policy/loss", "policy/kl", "policy/grad_norm")


@pytest.mark.slow
@needs_torchrun
@pytest.mark.parametrize("method", sorted(METHODS))
def test_two_processes_match_one(tmp_path, method):
    opts = [*COMMON, *METHODS[method]]
    one = train_metrics(ONE_PROCESS, tmp_path / "one", *opts)
    two = train_metrics([*torchrun(29571), "-m", "flowrl", "train"], tmp_path / "two", *opts)
    assert len(one) == len(two) == 2
    for a, b in zip(one, two):
        for key in KEYS:
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-9), key
