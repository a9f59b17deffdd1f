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
            out[name] = tensor.detach().cpu().contiguous()
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
