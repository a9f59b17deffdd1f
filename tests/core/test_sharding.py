"""flowrl.sharding on plain tensors (the DTensor paths run in tests/trainer/test_distributed.py under FSDP2)."""

import pytest
import torch

from flowrl import checkpoint as ckpt
from flowrl.sharding import as_float, is_sharded, shard_like, whole_on_main


def test_plain_tensors_pass_through():
    t = {"a": torch.arange(6.0).reshape(2, 3).t(), "b": torch.ones(2, dtype=torch.float16)}
    assert not is_sharded(t["a"])
    whole = whole_on_main(t, main=True)
    assert whole["a"].is_contiguous() and torch.equal(whole["a"], t["a"]) and whole["b"].dtype == torch.float16
    assert whole_on_main(t, main=False) == {}  # other processes copy nothing
    assert as_float(torch.tensor(2.5)) == 2.5 and as_float(1.5) == 1.5


def test_shard_like_casts_and_checks_the_shape():
    like = torch.zeros(2, 3, dtype=torch.float16)
    out = shard_like(torch.ones(2, 3), like)
    assert out.dtype == torch.float16 and torch.equal(out, torch.ones(2, 3, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"shape \(3, 2\) does not match the parameter's \(2, 3\)"):
        shard_like(torch.ones(3, 2), like)


def test_optimizer_state_round_trips_and_stays_off_other_processes():
    p = torch.nn.Parameter(torch.randn(4, 3))
    opt = torch.optim.AdamW([p], lr=0.1)
    p.grad = torch.randn(4, 3)
    opt.step()
    tensors, meta = ckpt.optimizer_to_tensors(opt)
    assert set(tensors) == {"0.exp_avg", "0.exp_avg_sq", "0.step"}
    assert ckpt.optimizer_to_tensors(opt, main=False)[0] == {}
    q = torch.nn.Parameter(p.detach().clone())
    fresh = torch.optim.AdamW([q], lr=0.1)
    ckpt.optimizer_from_tensors(fresh, tensors, meta)
    for key in ("exp_avg", "exp_avg_sq", "step"):
        assert torch.equal(fresh.state[q][key], opt.state[p][key])
