"""Two processes (gloo on CPU, launched by torchrun) against one: same rewards, advantages and losses,
with the transformer replicated (DDP) or sharded (FSDP2), and an FSDP run resumed exactly."""

import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from _processes import assert_same_metrics, needs_torchrun, torchrun, train_metrics
from flowrl.benchmarks.perf.strategies import KEYS, OVERRIDES  # the GPU check runs the same comparison

HELPERS = Path(__file__).parents[1] / "helpers"
TORCHRUN = torchrun(29531)

pytestmark = needs_torchrun


def _run(command: list[str], out: Path, *extra: str) -> list[dict]:
    return train_metrics(command, out, *OVERRIDES, *extra, timeout=300)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    out = tmp_path_factory.mktemp("one")
    return out, _run([sys.executable, "-m", "flowrl", "train"], out)


@pytest.mark.slow
def test_two_processes_match_one(tmp_path, one_process):
    _, one = one_process
    two = _run([*TORCHRUN, "-m", "flowrl", "train"], tmp_path / "two")
    assert len(one) == 2
    assert_same_metrics(one, two)


@pytest.mark.slow
def test_fsdp_shards_match_one_process_and_resume_exactly(tmp_path, one_process):
    """FSDP2 over 2 processes (``_fsdp_train.py`` shards as accelerate would on GPUs): the metrics of one
    process; checkpoints and the LoRA export hold whole tensors equal to one process's; resuming from
    the first checkpoint repeats the second iteration exactly."""
    one_dir, one = one_process
    fsdp = _run([*TORCHRUN, str(HELPERS / "_fsdp_train.py")], tmp_path / "fsdp")
    assert_same_metrics(one, fsdp)
    for name in ("trainable", "optimizer", "ema"):
        a = load_file(one_dir / "checkpoints" / "iter-000002" / f"{name}.safetensors")
        b = load_file(tmp_path / "fsdp" / "checkpoints" / "iter-000002" / f"{name}.safetensors")
        assert a.keys() == b.keys() and len(a) > 0
        for key in a:
            assert a[key].shape == b[key].shape, key
            torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5)
    lora = "lora/pytorch_lora_weights.safetensors"
    a, b = load_file(one_dir / lora), load_file(tmp_path / "fsdp" / lora)
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5)
    resumed = _run(
        [*TORCHRUN, str(HELPERS / "_fsdp_train.py")],
        tmp_path / "resumed",
        f"resume={tmp_path / 'fsdp' / 'checkpoints' / 'iter-000001'}",
    )
    assert [r["iteration"] for r in resumed] == [1]
    assert {k: resumed[0][k] for k in KEYS} == {k: fsdp[1][k] for k in KEYS}


@pytest.mark.slow
def test_a_branch_method_on_two_processes_matches_one(tmp_path):
    """G²RPO over 2 processes (one prompt group each): its per-branch optimizer steps, shared-input
    forwards and the KL reference give one process's metrics."""
    one = _run([sys.executable, "-m", "flowrl", "train"], tmp_path / "one", "method.name=g2rpo")
    two = _run([*TORCHRUN, "-m", "flowrl", "train"], tmp_path / "two", "method.name=g2rpo")
    assert len(one) == 2 and one[0]["policy/kl"] == 0.0 and one[1]["policy/kl"] > 0
    assert_same_metrics(one, two)


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra",
    [
        ["method.name=dpo", "method.options.num_noisings=2"],
        ["method.name=dgpo", "method.options.num_noisings=2", "method.options.trunc_steps=2"],
        ["method.name=dpo", "method.options.pairs=dataset", "sample.group_size=2", "sample.prompts_per_iteration=4",
         "data.prompts=builtin:preference_pairs", "reward={}", "log.eval_every=0"],
    ],
    ids=["dpo", "dgpo", "dpo_offline"],
)  # fmt: skip
def test_a_group_preference_method_on_two_processes_matches_one(tmp_path, extra):
    """Online DPO's pairs, DGPO's group sums and offline DPO's dataset pairs stay whole on each process: two
    processes give one process's metrics."""
    one = _run([sys.executable, "-m", "flowrl", "train"], tmp_path / "one", *extra)
    two = _run([*TORCHRUN, "-m", "flowrl", "train"], tmp_path / "two", *extra)
    assert len(one) == len(two) == 2
    # (cost/nfe differs by the zero-weight padding passes that keep two processes' collectives in step)
    keys = [k for k in (*KEYS, "policy/pg_loss", "cost/reward_calls", "method/dpo/pairs") if k in one[0]]
    assert "policy/loss" in keys
    for x, y in zip(one, two):
        for key in keys:
            assert x[key] == pytest.approx(y[key], rel=1e-5, abs=1e-9), key
