"""Under FSDP2 every kind of weight a run keeps is sharded, not only what trains: on 2 gloo processes each holds
about half of the bytes of the frozen base of a LoRA run, the trainable weights, the full fine-tune's reference
copy, the EMA, the method's parameter averages and both experts of Wan 2.2 (a frozen one included), and the
metrics stay one process's. The bytes are counted by ``_fsdp_train.weight_bytes``: the sum of each tensor's
local shard ``numel * element_size``, written before training.

Where the run's metrics hang on a sum's rounding, the one process sums its gradients in FSDP2's order
(``_unit_order_train.py``; the slight difference of plain autograd's order is in its docstring)."""

import json
import sys
from pathlib import Path

import pytest

from _processes import needs_torchrun, torchrun, train_metrics
from flowrl.benchmarks.perf.strategies import KEYS, OVERRIDES

HELPERS = Path(__file__).parents[1] / "helpers"
TORCHRUN = torchrun(29547)

pytestmark = [needs_torchrun, pytest.mark.slow]

CASES = {
    # full fine-tuning with the KL reference (OVERRIDES' beta) and the EMA
    "full_reference": (["tiny-cpu", "train.lora.enabled=false"], {"trainable", "reference", "ema"}),
    # LoRA over the frozen base, with RAM's lagged policy (a parameter average) and the EMA
    "lora_averages": (["tiny-cpu", "method.name=ram"], {"trainable", "frozen", "ema", "averages"}),
    # Wan 2.2's two experts, only the high-noise one trained: the low-noise expert is frozen whole
    "wan22_frozen_expert": (
        ["tiny-wan", "model.path=tiny-a14b", "model.trained_experts=high_noise"],
        {"trainable", "frozen", "ema", "expert/high_noise", "expert/low_noise"},
    ),
    # Wan 2.2, full fine-tune of the high-noise expert with the KL reference: the reference copies the trained
    # expert and shares the frozen one. Its iteration-2 rewards spread by about 1e-5, so the advantages
    # magnify a gradient's rounding from iteration 1 (plain autograd's order against FSDP2's: up to 7e-3
    # relative in iteration 2); the one process sums in FSDP2's order
    "wan22_full_reference": (
        ["tiny-wan", "model.path=tiny-a14b", "model.trained_experts=high_noise", "train.lora.enabled=false"],
        {"trainable", "frozen", "reference", "ema", "expert/high_noise", "expert/low_noise"},
    ),
}
# the one-process run a case is held to: plain ``flowrl train``, or one summing its gradients in FSDP2's order
IN_UNIT_ORDER = {"wan22_full_reference"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_process_holds_half_of_every_kind_of_weight(tmp_path, case):
    (recipe, *extra), kinds = CASES[case]
    single = [str(HELPERS / "_unit_order_train.py")] if case in IN_UNIT_ORDER else ["-m", "flowrl", "train"]
    one = train_metrics([sys.executable, *single, recipe], tmp_path / "one", *OVERRIDES, *extra,
                        timeout=300)  # fmt: skip
    fsdp = train_metrics([*TORCHRUN, str(HELPERS / "_fsdp_train.py"), recipe], tmp_path / "fsdp", *OVERRIDES, *extra,
                         timeout=300)  # fmt: skip
    assert len(one) == len(fsdp) == 2
    for x, y in zip(one, fsdp):  # the compared metrics the method logs (RAM logs no KL)
        keys = [k for k in KEYS if k in x]
        assert "policy/loss" in keys and keys == [k for k in KEYS if k in y]
        for key in keys:
            assert x[key] == pytest.approx(y[key], rel=1e-5, abs=1e-9), key
    counts = [json.loads((tmp_path / "fsdp" / f"bytes-{rank}.json").read_text()) for rank in (0, 1)]
    held = {kind for kind, c in counts[0].items() if c["tensors"]}
    assert held == kinds
    for kind in kinds:
        whole = counts[0][kind]["whole"]
        local = [c[kind]["local"] for c in counts]
        assert all(c[kind]["sharded"] == c[kind]["tensors"] for c in counts), kind  # every tensor a shard
        assert sum(local) == whole, kind  # the two shards make the whole, nothing held twice
        assert all(0.45 * whole <= b <= 0.55 * whole for b in local), (kind, local, whole)
