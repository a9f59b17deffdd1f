"""The memory savers, each optional: ``train.optimizer=adamw_8bit``, ``train.activation_offload`` and
``model.base_quantization`` (docs/scaling.md, "Memory savers")."""

import math
import sys

import pytest
import torch

from flowrl.config import ConfigError
from flowrl.resolve import math_changes, resolve_config
from flowrl.trainer import Trainer
from tiny_runs import NO_SAVES, small

SMALL = small(3, *NO_SAVES)


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


def test_a_missing_cpp_compiler_is_one_line(monkeypatch):
    """torchao compiles its optimizer step: on a CPU without a C++ compiler, one line before anything trains."""
    pytest.importorskip("torchao")
    import torch._inductor.cpp_builder as cpp_builder

    from flowrl.memory import build_optimizer

    def missing():
        raise RuntimeError("no compiler")

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", missing)
    t = resolve_config("tiny-cpu", ["train.optimizer=adamw_8bit"]).train
    with pytest.raises(RuntimeError, match=r"^train.optimizer=adamw_8bit: torchao compiles .* C\+\+ compiler"):
        build_optimizer([torch.nn.Parameter(torch.zeros(2))], t, torch.device("cpu"))


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
    params = sum(p.numel() for p in full.policy.trainable.values())
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
    assert all(torch.equal(p, resumed.policy.trainable[n]) for n, p in full.policy.trainable.items())

    plain = Trainer(_cfg(tmp_path / "adamw", *base, "train.iterations=1"))
    plain.train()
    assert optimizer_state_bytes(plain.policy.optimizer.optimizer) / params == pytest.approx(8.0, abs=0.01)
    assert "quantized" not in read_state(tmp_path / "adamw" / "checkpoints" / "iter-000001")["optimizer"]


@pytest.mark.slow
def test_a_sharded_8bit_moment_is_saved_whole_and_loads_back_in_8_bits(monkeypatch):
    """Under FSDP2 (a DTensor moment; one gloo process here) the checkpoint holds each 8-bit moment's fp32 values,
    whole; loading quantizes them again into 8-bit buffers: exp_avg_sq comes back bit for bit, exp_avg to within
    its 8-bit step (a block whose largest value is negative gets a slightly smaller scale)."""
    pytest.importorskip("torchao")
    import socket

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from torchao.optim import AdamW8bit

    from flowrl.checkpoint import optimizer_from_tensors, optimizer_to_tensors
    from flowrl.memory import is_8bit_state

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        torch.manual_seed(0)
        params = [torch.nn.Parameter(distribute_tensor(torch.randn(64, 128), mesh, [Shard(0)])) for _ in range(2)]
        saved, loaded = AdamW8bit([params[0]], lr=1e-2), AdamW8bit([params[1]], lr=1e-2)
        for _ in range(2):
            params[0].grad = distribute_tensor(torch.randn(64, 128), mesh, [Shard(0)])
            saved.step()
        tensors, meta = optimizer_to_tensors(saved)
        assert "quantized" not in meta and tensors["0.exp_avg"].dtype == torch.float32
        assert not any(type(t) is not torch.Tensor for t in tensors.values())  # whole plain tensors
        optimizer_from_tensors(loaded, tensors, meta)
        a, b = saved.state[params[0]], loaded.state[params[1]]
        assert is_8bit_state(b["exp_avg"]) and is_8bit_state(b["exp_avg_sq"])
        assert torch.equal(a["exp_avg_sq"].to_local().codes, b["exp_avg_sq"].to_local().codes)
        before, after = a["exp_avg"].to_local().dequantize(), b["exp_avg"].to_local().dequantize()
        assert float((before - after).abs().max()) <= 0.02 * float(before.abs().max())
        assert torch.is_tensor(loaded.param_groups[0]["lr"])
    finally:
        dist.destroy_process_group()


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
        runs[offload] = (rows, {n: p.detach().clone() for n, p in tr.policy.trainable.items()})
    assert moved and min(moved) > 0  # every forward's activations went to the host copy
    (rows_a, weights_a), (rows_b, weights_b) = runs[False], runs[True]
    assert all(torch.equal(weights_a[n], weights_b[n]) for n in weights_a)
    for a, b in zip(rows_a, rows_b):
        for key in ("policy/loss", "policy/grad_norm", "reward/mean", "policy/onpolicy_logp_diff"):
            assert a[key] == b[key], key


# ------------------------------------------------------------------------------------------ model.base_quantization
def test_the_base_quantization_setting_is_checked_in_one_line_and_changes_the_math(monkeypatch):
    from flowrl.memory import quantize_base

    _refused("model.base_quantization=int4", "model.base_quantization: 'int4' is not one of none, int8, float8")
    with pytest.raises(ConfigError, match=r"^model.base_quantization=int8: full fine-tuning .*; set it to none$"):
        resolve_config("tiny-cpu", ["model.base_quantization=int8", "train.lora.enabled=false"])
    assert _math_changes("model.base_quantization=int8") == ["model.base_quantization ('none' -> 'int8')"]
    _without_torchao(monkeypatch)
    with pytest.raises(ImportError, match=r"^model.base_quantization=int8 needs torchao.*flowrl-toolkit\[memory\]'$"):
        quantize_base(torch.nn.Linear(2, 2), "int8")
    quantize_base(torch.nn.Linear(2, 2), "none")  # nothing to import


def test_a_quantized_base_is_refused_under_fsdp_in_one_line(tmp_path):
    """FSDP2 cannot shard torchao's quantized weights: refused before any weight loads."""
    from types import SimpleNamespace

    fsdp = SimpleNamespace(distributed_type=SimpleNamespace(value="FSDP"), is_fsdp2=True)
    with pytest.raises(ValueError, match=r"^model.base_quantization=int8: FSDP2 cannot shard .*set it to none$"):
        Trainer(_cfg(tmp_path, "model.base_quantization=int8"), accelerator=fsdp)


def _base_linears(transformer):
    return [m for n, m in transformer.named_modules() if isinstance(m, torch.nn.Linear) and "lora_" not in n]


@pytest.mark.parametrize("mode, tolerance", [("int8", 0.02), ("float8", 0.1)])
def test_a_lora_run_trains_on_a_quantized_base(tmp_path, mode, tolerance):
    """The frozen base Linears in int8 / float8 (a quarter of their fp32 bytes), the LoRA around them in fp32: the
    run trains, rollout and update use the same quantized weights (the on-policy gap is 0), and the
    transformer's prediction stays within ``tolerance`` (relative) of the unquantized one's."""
    pytest.importorskip("torchao")
    from flowrl.memory import tensor_bytes

    plain = Trainer(_cfg(tmp_path / "none", "train.iterations=1"))
    tr = Trainer(_cfg(tmp_path / mode, "train.iterations=2", f"model.base_quantization={mode}"))
    transformer = tr.policy.transformer
    base = _base_linears(transformer)
    assert base and all(type(m.weight).__name__ in ("Int8Tensor", "Float8Tensor") for m in base)
    fp32 = sum(tensor_bytes(m.weight) for m in _base_linears(plain.policy.transformer))
    ratio = sum(tensor_bytes(m.weight) for m in base) / fp32
    assert 0.25 <= ratio < 0.3, ratio  # a byte a weight, plus a scale per output row
    torch.manual_seed(0)
    inputs = {
        "hidden_states": torch.randn(2, transformer.config.in_channels, 4, 4),
        "encoder_hidden_states": torch.randn(2, 5, transformer.config.joint_attention_dim),
        "pooled_projections": torch.randn(2, transformer.config.pooled_projection_dim),
        "timestep": torch.tensor([500.0, 100.0]),
    }
    with torch.no_grad(), tr.policy.weights("reference"), plain.policy.weights("reference"):
        want = plain.policy.transformer(**inputs).sample
        got = transformer(**inputs).sample
    error = float((got - want).norm() / want.norm())
    assert error < tolerance, error
    before = {n: p.detach().clone() for n, p in tr.policy.trainable.items()}
    rows = tr.train()
    assert all(math.isfinite(r[k]) for r in rows for k in ("policy/loss", "policy/grad_norm", "reward/mean"))
    assert rows[0]["policy/onpolicy_logp_diff"] == 0.0
    assert all(not torch.equal(p, before[n]) for n, p in tr.policy.trainable.items())
    assert (tmp_path / mode / "lora" / "pytorch_lora_weights.safetensors").is_file()


@pytest.mark.slow
def test_a_quantized_base_trains_on_two_processes_as_on_one(tmp_path):
    """DDP over 2 gloo processes: the quantized weights stay out of DDP's start-up broadcast (which cannot send
    torchao's tensors), and the two processes give one process's metrics."""
    pytest.importorskip("torchao")
    from _processes import ONE_PROCESS, assert_same_metrics, needs_torchrun, torchrun, train_metrics

    if needs_torchrun.args[0]:
        pytest.skip(needs_torchrun.kwargs["reason"])
    extra = [*SMALL, "train.iterations=2", "model.base_quantization=int8"]
    one = train_metrics(ONE_PROCESS, tmp_path / "one", *extra, timeout=600)
    two = train_metrics([*torchrun(29587), "-m", "flowrl", "train"], tmp_path / "two", *extra, timeout=600)
    assert all(r["policy/onpolicy_logp_diff"] == 0.0 for r in two[:1])
    assert_same_metrics(one, two)
