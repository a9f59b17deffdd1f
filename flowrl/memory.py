"""Memory savers, each optional: an 8-bit AdamW (``train.optimizer=adamw_8bit``), the update's saved activations
kept on the host (``train.activation_offload``) and a LoRA run's frozen base weights quantized
(``model.base_quantization``). The first and the last use torchao (``pip install flowrl-toolkit[memory]``).
"""

from __future__ import annotations

import warnings
from contextlib import nullcontext
from typing import Any

import torch


def require_torchao(setting: str) -> None:
    """One line naming the extra when torchao is missing."""
    try:
        import torchao.optim  # noqa: F401
        import torchao.quantization  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"{setting} needs torchao, which is not installed ({exc}): pip install 'flowrl-toolkit[memory]'"
        ) from None


def missing_inductor_backend(device: torch.device) -> str | None:
    """What torch.compile's inductor lacks to build kernels on ``device`` (None: nothing): Triton on a GPU, a C++
    compiler on a CPU (with the name of the error torch raised)."""
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        return None if has_triton() else "triton"
    if device.type == "cpu":
        from torch._inductor.cpp_builder import get_cpp_compiler

        try:
            get_cpp_compiler()
        except Exception as exc:  # noqa: BLE001 -- torch raises InvalidCxxCompiler
            return type(exc).__name__
    return None


def check_step_compiler(setting: str, device: torch.device) -> None:
    """torchao's optimizers ``torch.compile`` their step: refuse in one line where inductor cannot build kernels (a
    C++ compiler on a CPU, Triton on a GPU)."""
    missing = missing_inductor_backend(device)
    if missing == "triton":
        raise RuntimeError(
            f"{setting}: torchao compiles its optimizer step, which needs Triton on a GPU (pip install triton); "
            "or set train.optimizer=adamw"
        )
    if missing is not None:
        raise RuntimeError(
            f"{setting}: torchao compiles its optimizer step, which on a CPU needs a C++ compiler (g++ or "
            f"clang++, or $CXX) ({missing}); install one, or set train.optimizer=adamw"
        )


def build_optimizer(params: list[torch.Tensor], t: Any, device: torch.device | None = None) -> torch.optim.Optimizer:
    """``train.optimizer``'s AdamW over ``params`` (on ``device``): torch's, or torchao's ``AdamW8bit`` (moments of
    every tensor of at least 4096 values kept as 8-bit codes with an fp32 scale per block of 256; smaller ones in
    fp32; the step ``torch.compile``d, once per parameter shape)."""
    kwargs = {"lr": t.learning_rate, "betas": tuple(t.adam_betas), "weight_decay": t.weight_decay, "eps": t.adam_eps}
    if t.optimizer == "adamw":
        return torch.optim.AdamW(params, **kwargs)
    require_torchao(f"train.optimizer={t.optimizer}")
    if device is not None:
        check_step_compiler(f"train.optimizer={t.optimizer}", device)
    from torchao.optim import AdamW8bit

    return AdamW8bit(params, **kwargs)


def set_lr(group: dict[str, Any], lr: float) -> None:
    """Set a parameter group's learning rate; torchao's optimizers hold it as a tensor, filled in place."""
    if torch.is_tensor(group["lr"]):
        group["lr"].fill_(lr)
    else:
        group["lr"] = lr


def tensor_bytes(tensor: torch.Tensor) -> int:
    """Bytes a tensor holds: a torchao tensor subclass (quantized weights, 8-bit optimizer state) its parts', a
    DTensor its local shard's."""
    from flowrl.sharding import is_sharded

    if is_sharded(tensor):
        tensor = tensor.to_local()
    if hasattr(tensor, "__tensor_flatten__") and type(tensor) is not torch.Tensor:
        names, _ = tensor.__tensor_flatten__()
        return sum(tensor_bytes(getattr(tensor, name)) for name in names if getattr(tensor, name) is not None)
    return tensor.numel() * tensor.element_size()


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of an optimizer's state tensors (the step counters included)."""
    return sum(tensor_bytes(v) for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v))


# ------------------------------------------------------------------------------------------ 8-bit state in checkpoints
def is_8bit_state(value: Any) -> bool:
    """Is ``value`` (or a DTensor's local piece) a torchao 8-bit optimizer state tensor?"""
    from flowrl.sharding import is_sharded

    local = value.to_local() if torch.is_tensor(value) and is_sharded(value) else value
    return type(local).__name__ == "OptimState8bit"


def split_8bit_state(name: str, value: torch.Tensor, tensors: dict, quantized: dict) -> None:
    """An 8-bit state tensor as plain tensors for safetensors: on one process its parts (``name.codes``,
    ``name.scale``, ``name.qmap``; ``quantized[name]`` its signedness), which load back bit for bit; as an FSDP2
    shard its values (``name``, fp32 and sharded like the parameter, gathered whole with the rest), which load
    back re-quantized."""
    from flowrl.sharding import is_sharded

    if is_sharded(value):
        from torch.distributed.tensor import DTensor

        tensors[name] = DTensor.from_local(
            value.to_local().dequantize(),
            value.device_mesh,
            value.placements,
            run_check=False,
            shape=value.shape,
            stride=value.stride(),
        )
        return
    for part in ("codes", "scale", "qmap"):
        tensors[f"{name}.{part}"] = getattr(value, part)
    quantized[name] = {"signed": bool(value.signed)}


def join_8bit_state(name: str, tensors: dict, info: dict, like: torch.Tensor) -> torch.Tensor:
    """The 8-bit state ``split_8bit_state`` wrote as parts, for the parameter ``like``; its fp32 values where
    ``like`` is an FSDP2 shard (re-quantized by ``requantize_state``)."""
    from torchao.optim.subclass_8bit import OptimState8bit

    from flowrl.sharding import is_sharded

    state = OptimState8bit(
        tensors.pop(f"{name}.codes"),
        tensors.pop(f"{name}.scale"),
        tensors.pop(f"{name}.qmap"),
        info["signed"],
        dtype=like.dtype,
    )
    return state.dequantize(torch.float32) if is_sharded(like) else state.to(like.device)


def requantize_state(optimizer: torch.optim.Optimizer) -> None:
    """After ``load_state_dict``: a torchao optimizer's moments that came back in fp32 (a checkpoint saved under
    FSDP2, or loaded into one) quantized again into the buffers the optimizer makes itself, so a resumed run keeps
    the 8-bit state; its learning rates back to the tensors it steps with."""
    if not hasattr(optimizer, "_new_buffer"):
        return
    for group in optimizer.param_groups:
        if not torch.is_tensor(group["lr"]):
            group["lr"] = torch.tensor(group["lr"], dtype=torch.float32)
        for p in group["params"]:
            state = optimizer.state.get(p, {})
            for key, signed in (("exp_avg", True), ("exp_avg_sq", False), ("max_exp_avg_sq", False)):
                value = state.get(key)
                if value is None or is_8bit_state(value):
                    continue
                buffer = optimizer._new_buffer(p, signed)
                if is_8bit_state(buffer):
                    buffer.copy_(value)
                    state[key] = buffer


# ------------------------------------------------------------------------------------------------- activation offload
def _offloads(tensor: torch.Tensor) -> bool:
    """An activation on an accelerator: not a parameter or a view of one (the weights stay where they are, and a
    quantized weight is a tensor subclass, which stays too), not already on the host."""
    if type(tensor) not in (torch.Tensor, torch.nn.Parameter) or isinstance(tensor, torch.nn.Parameter):
        return False
    if isinstance(getattr(tensor, "_base", None), torch.nn.Parameter):
        return False
    return tensor.device.type != "cpu"


class ActivationOffload(torch.autograd.graph.saved_tensors_hooks):
    """The tensors the forward saves for the backward, copied to the host (pinned memory on a GPU, the copy
    asynchronous) and back to their device when the backward reads them: the same values, so the same
    gradients. ``moved``: bytes copied to the host since the context opened."""

    def __init__(self, pin_memory: bool):
        self.moved = 0

        def pack(tensor: torch.Tensor):
            if not _offloads(tensor):
                return tensor
            host = torch.empty(tensor.size(), dtype=tensor.dtype, layout=tensor.layout, pin_memory=pin_memory)
            host.copy_(tensor, non_blocking=pin_memory)
            self.moved += tensor.numel() * tensor.element_size()
            return tensor.device, host

        def unpack(packed):
            if torch.is_tensor(packed):
                return packed
            device, host = packed
            return host.to(device, non_blocking=pin_memory)

        super().__init__(pack, unpack)


def activation_offload(enabled: bool, device: torch.device):
    """``train.activation_offload``: the context under which the update's forward saves the tensors its backward
    reads on the host, each copied back when the backward needs it (``ActivationOffload``); else nothing."""
    if not enabled:
        return nullcontext()
    return ActivationOffload(pin_memory=device.type == "cuda")


# -------------------------------------------------------------------------------------- frozen base weights quantized
def quantize_base(transformer: torch.nn.Module, mode: str) -> None:
    """``model.base_quantization``: every frozen ``nn.Linear`` weight of ``transformer`` quantized in place, weight
    only (int8: per-row int8 with an fp32 scale; float8: e4m3 with a scale per row); called before the LoRA
    adapters are added, which peft then wraps around the quantized layers (``TorchaoLoraLinear``)."""
    if mode == "none":
        return
    require_torchao(f"model.base_quantization={mode}")
    from torchao.quantization import Float8WeightOnlyConfig, Int8WeightOnlyConfig, quantize_

    config = Int8WeightOnlyConfig() if mode == "int8" else Float8WeightOnlyConfig()

    def frozen_linear(module: torch.nn.Module, name: str) -> bool:
        return isinstance(module, torch.nn.Linear) and not module.weight.requires_grad

    quantize_(transformer, config, filter_fn=frozen_linear)


def add_adapter_quiet(transformer: torch.nn.Module, config: Any) -> None:
    """``transformer.add_adapter(config)`` without peft's warning, for each quantized base layer, that merging
    needs the quantization recipe: flowrl never merges (it exports the adapter itself). Then the quantized
    weights are kept out of DDP's start-up broadcast, which cannot send torchao's tensors: every process built the
    same frozen base, and DDP reduces no gradient of a frozen weight anyway."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*instantiated without `get_apply_tensor_subclass`")
        transformer.add_adapter(config)
    quantized = [n for n, p in transformer.named_parameters() if type(p) not in (torch.Tensor, torch.nn.Parameter)]
    if quantized:
        torch.nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(transformer, quantized)
