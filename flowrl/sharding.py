"""Whole tensors from FSDP2's sharded parameters, and back.

Under FSDP2 (``torch.distributed.fsdp.fully_shard``; accelerate's ``fsdp_version: 2``) each parameter,
its gradient and its optimizer state are DTensors that hold this process's shard. flowrl's checkpoints
and exports always hold whole tensors, so a run saved under FSDP resumes under DDP or on one process,
and the other way round. Gathering is collective: every process calls these functions, on the same
tensors in the same order. Plain tensors pass through untouched.
"""

from __future__ import annotations

import torch


def is_sharded(tensor: torch.Tensor) -> bool:
    """Is ``tensor`` a DTensor (an FSDP2 shard)?"""
    if not torch.distributed.is_available():
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def whole_on_main(tensors: dict[str, torch.Tensor], main: bool) -> dict[str, torch.Tensor]:
    """Whole CPU copies of ``tensors`` on the main process (one at a time, so a device holds at most one
    gathered tensor more); an empty dict elsewhere, which then copies nothing."""
    out = {}
    for name, tensor in tensors.items():
        if is_sharded(tensor):
            tensor = tensor.full_tensor()
        if main:
            tensor = tensor.detach().cpu().contiguous()
            if tensor.untyped_storage().nbytes() != tensor.numel() * tensor.element_size():
                tensor = tensor.clone()  # a view of a gather's padded buffer (a dim 0 shorter than N): its own copy
            out[name] = tensor
    return out


def shard_like(whole: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``whole`` in ``like``'s dtype, device and, for a DTensor, its sharding (this process's piece,
    cut from its own copy: every process holds ``whole``, so nothing is sent)."""
    if whole.shape != like.shape:
        raise ValueError(f"shape {tuple(whole.shape)} does not match the parameter's {tuple(like.shape)}")
    if not is_sharded(like):
        return whole.to(like.device, like.dtype)
    from torch.distributed.tensor import distribute_tensor

    mesh = like.device_mesh
    return distribute_tensor(whole.to(mesh.device_type, like.dtype), mesh, like.placements, src_data_rank=None)


def as_float(value: torch.Tensor | float) -> float:
    """A scalar (a gradient norm, say) as a float, gathering it first if it is a DTensor."""
    if torch.is_tensor(value) and is_sharded(value):
        value = value.full_tensor()
    return float(value)


def inner_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer that holds the moments: accelerate's wrapper (and DeepSpeed's) keeps it as ``optimizer``."""
    return getattr(optimizer, "optimizer", optimizer)


def local_bytes(tensors) -> int:
    """Bytes this process holds of ``tensors`` (an iterable of tensors, or a dict of them): a DTensor counts
    its local shard, a plain tensor all of it, a tensor seen twice (a shared parameter) once."""
    if isinstance(tensors, dict):
        tensors = tensors.values()
    seen, total = set(), 0
    for tensor in tensors:
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        local = tensor.to_local() if is_sharded(tensor) else tensor
        total += local.numel() * local.element_size()
    return total


def fsdp_settings(model: torch.nn.Module) -> dict | None:
    """The ``fully_shard`` arguments ``model``'s FSDP2 units were sharded with (mesh, mixed precision, offload),
    read from its first unit that holds parameters; None when ``model`` is not sharded by FSDP2."""
    if not torch.distributed.is_available():
        return None
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        group = module._get_fsdp_state()._fsdp_param_group if isinstance(module, FSDPModule) else None
        if group is not None:
            return {"mesh": group.mesh_info.mesh, "mp_policy": group.mp_policy, "offload_policy": group.offload_policy}
    return None


def shard_frozen(module: torch.nn.Module, settings: dict) -> None:
    """Shard a frozen module beside the trained one (the full fine-tune's reference copy) as accelerate's FSDP2
    plugin shards what it prepares: one ``fully_shard`` unit per module of a class named in its
    ``_no_split_modules`` (bottom up), then the root; resharded after each forward, so a process holds 1/N of
    it between forwards. Submodules already sharded (a frozen expert shared with the trained module) are left
    to their own units."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    blocks = set(getattr(module, "_no_split_modules", None) or ())
    shared = any(isinstance(sub, FSDPModule) for sub in module.modules())
    for sub in reversed(list(module.modules())[1:]):
        if type(sub).__name__ in blocks and not isinstance(sub, FSDPModule):
            fully_shard(sub, reshard_after_forward=True, **settings)
    own = [p for n, p in module.named_parameters() if not _under_unit(module, n)]
    if shared and own:
        raise ValueError(
            f"{type(module).__name__}: cannot shard a copy that shares sharded modules and holds weights "
            "outside its units"
        )
    if not shared:  # a root over a shared unit would take it from the trained module's root
        fully_shard(module, reshard_after_forward=True, **settings)


def _under_unit(root: torch.nn.Module, name: str) -> bool:
    """Is parameter ``name`` of ``root`` inside a submodule that is an FSDP2 unit?"""
    from torch.distributed.fsdp import FSDPModule

    module = root
    for part in name.split(".")[:-1]:
        module = getattr(module, part)
        if isinstance(module, FSDPModule):
            return True
    return False
