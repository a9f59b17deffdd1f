"""The memory savers, each optional: ``train.optimizer=adamw_8bit`` and ``train.activation_offload``
(docs/scaling.md, "Memory savers")."""

import sys

import pytest
import torch

from flowrl.config import ConfigError, math_changes, resolve_config
from flowrl.trainer import Trainer

SMALL = [
    "sample.num_steps=3",
    "sample.group_size=4",
    "sample.prompts_per_iteration=2",
    "sample.batch_size=4",
    "log.save_every=1000",
    "log.sample_every=1000",
]


def _cfg(tmp_path, *extra):
    return resolve_config("tiny-cpu", [f"output_dir={tmp_path}", *SMALL, *extra])


def _refused(override: str, start: str) -> None:
    with pytest.raises(ConfigError) as err:
        resolve_config("tiny-cpu", [override])
    assert str(err.value).startswith(start) and "\n" not in str(err.value), str(err.value)


def _math_changes(override: str) -> list[str]:
    return math_changes(resolve_config("tiny-cpu").to_dict(), resolve_config("tiny-cpu", [override]).to_dict())


def _without_torchao(monkeypatch) -> None:
    for name in [m for m in sys.modules if m == "torchao" or m.startswith("torchao.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "torchao", None)  # import torchao raises ImportError


# ------------------------------------------------------------------------------------------ train.optimizer
def test_the_optimizer_setting_is_checked_in_one_line_and_changes_the_math():
    _refused("train.optimizer=adam8", "train.optimizer: 'adam8' is not one of adamw, adamw_8bit")
    assert _math_changes("train.optimizer=adamw_8bit") == ["train.optimizer ('adamw' -> 'adamw_8bit')"]


def test_a_missing_torchao_is_one_line_naming_the_extra(monkeypatch):
    from flowrl.memory import build_optimizer

    _without_torchao(monkeypatch)
    t = resolve_config("tiny-cpu", ["train.optimizer=adamw_8bit"]).train
    with pytest.raises(ImportError, match=r"^train.optimizer=adamw_8bit needs torchao.*flowrl-toolkit\[memory\]'$"):
        build_optimizer([torch.nn.Parameter(torch.zeros(2))], t)
    t = resolve_config("tiny-cpu").train
    assert isinstance(build_optimizer([torch.nn.Parameter(torch.zeros(2))], t), torch.optim.AdamW)  # no torchao


@pytest.mark.slow
def test_adamw_8bit_state_is_a_quarter_and_resumes_exactly(tmp_path):
    """torchao's AdamW8bit (rank 128 on the tiny model, so that each LoRA tensor is 4096+ values and quantized):
    about 2 bytes of state a parameter to AdamW's 8, and a run saved at iteration 2 and resumed trains
    iterations 2 and 3 exactly as the run that went on, the 8-bit state saved and loaded bit for bit."""
    pytest.importorskip("torchao")
    from flowrl.checkpoint import read_state
    from flowrl.memory import is_8bit_state, optimizer_state_bytes

    base = ["log.save_every=2", "train.lora.rank=128", "train.lora.alpha=128"]
    full = Trainer(_cfg(tmp_path / "full", *base, "train.iterations=4", "train.optimizer=adamw_8bit"))
    rows_full = full.train()
    optimizer = full.policy.optimizer.optimizer
    params = sum(p.numel() for p in full.trainable.values())
    for p, s in optimizer.state.items():  # torchao keeps a tensor under 4096 values (the output LoRA's B) in fp32
        big = p.numel() >= 4096 and p.numel() % 256 == 0
        assert is_8bit_state(s["exp_avg"]) == is_8bit_state(s["exp_avg_sq"]) == big, tuple(p.shape)
    assert sum(is_8bit_state(s["exp_avg"]) for s in optimizer.state.values()) >= len(optimizer.state) - 1
    per_param = optimizer_state_bytes(optimizer) / params
    assert 2.0 < per_param < 2.5, per_param  # 8-bit codes, an fp32 scale per 256 values, a 256-entry map a tensor

    part = _cfg(tmp_path / "part", *base, "train.iterations=2", "train.optimizer=adamw_8bit")
    Trainer(part).train()
    ckpt = tmp_path / "part" / "checkpoints" / "iter-000002"
    assert read_state(ckpt)["optimizer"]["quantized"]
    resumed = Trainer(
        _cfg(tmp_path / "part", *base, "train.iterations=4", "train.optimizer=adamw_8bit", f"resume={ckpt}")
    )
    state = resumed.policy.optimizer.optimizer.state
    assert state and all(is_8bit_state(s["exp_avg"]) == (p.numel() >= 4096) for p, s in state.items())
    rows = resumed.train()
    assert [r["iteration"] for r in rows] == [2, 3]
    for a, b in zip(rows_full[2:], rows):
        for key in ("reward/mean", "policy/loss", "policy/grad_norm"):
            assert a[key] == b[key], key
    assert all(torch.equal(p, resumed.trainable[n]) for n, p in full.trainable.items())

    plain = Trainer(_cfg(tmp_path / "adamw", *base, "train.iterations=1"))
    plain.train()
    assert optimizer_state_bytes(plain.policy.optimizer.optimizer) / params == pytest.approx(8.0, abs=0.01)
    assert "quantized" not in read_state(tmp_path / "adamw" / "checkpoints" / "iter-000001")["optimizer"]


# ------------------------------------------------------------------------------------------ train.activation_offload
def test_activation_offload_does_not_change_the_math():
    assert _math_changes("train.activation_offload=true") == []  # where activations wait: a resume may change it


def test_only_activations_on_an_accelerator_are_offloaded():
    from flowrl.memory import _offloads

    weight = torch.nn.Parameter(torch.zeros(2, 2, device="meta"))
    assert _offloads(torch.zeros(2, device="meta"))  # an activation on a device
    assert not _offloads(weight) and not _offloads(weight.t())  # a weight, or a view of it, stays
    assert not _offloads(torch.zeros(2))  # already on the host


def test_activation_offload_trains_bit_for_bit_the_same(tmp_path, monkeypatch):
    """The saved activations make the round trip to the host and back (on this CPU-only run every saved
    activation is copied, as a GPU run's would be), and the two iterations train exactly as without."""
    import flowrl.memory as memory

    moved = []
    real = memory.ActivationOffload

    class Counted(real):
        def __exit__(self, *args):
            moved.append(self.moved)
            return super().__exit__(*args)

    monkeypatch.setattr(memory, "ActivationOffload", Counted)
    monkeypatch.setattr(
        memory, "_offloads", lambda t: type(t) is torch.Tensor and not isinstance(t._base, torch.nn.Parameter)
    )
    runs = {}
    for offload in (False, True):
        tr = Trainer(
            _cfg(tmp_path / str(offload), "train.iterations=2", f"train.activation_offload={str(offload).lower()}")
        )
        rows = tr.train()
        runs[offload] = (rows, {n: p.detach().clone() for n, p in tr.trainable.items()})
    assert moved and min(moved) > 0  # every forward's activations went to the host copy
    (rows_a, weights_a), (rows_b, weights_b) = runs[False], runs[True]
    assert all(torch.equal(weights_a[n], weights_b[n]) for n in weights_a)
    for a, b in zip(rows_a, rows_b):
        for key in ("policy/loss", "policy/grad_norm", "reward/mean", "policy/onpolicy_logp_diff"):
            assert a[key] == b[key], key
