"""Latents that are one tensor or a mapping of named tensors (joint audio-video: ``{"video": ..., "audio": ...}``).

Every family but LTX-2 has one tensor per sample, and the core's tensor path is untouched by this module: each
function below returns exactly what the plain tensor operation does on a tensor. A joint latent is a dict of
tensors with the batch first and one entry per modality, in the adapter's order (the order random draws are
made in). Operations apply per modality; a transition's log-prob over several modalities is the mean over all
their elements together (``flowrl.sde.joint_step``), as if the modalities were one flat tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

Latents = Any  # torch.Tensor | dict[str, torch.Tensor]


def is_joint(x: Any) -> bool:
    """Whether ``x`` is a mapping of named tensors (a joint latent) rather than one tensor."""
    return isinstance(x, Mapping)


def tree_map(fn: Callable[..., torch.Tensor], x: Latents, *rest: Latents) -> Latents:
    """``fn`` applied to ``x`` (and the matching entries of ``rest``) per modality; on tensors, ``fn(x, *rest)``."""
    if not is_joint(x):
        return fn(x, *rest)
    for other in rest:
        if not is_joint(other) or set(other) != set(x):
            raise ValueError(
                f"joint latents with modalities {sorted(x)} met "
                f"{sorted(other) if is_joint(other) else 'a single tensor'}"
            )
    return {k: fn(v, *(o[k] for o in rest)) for k, v in x.items()}


def stack(items: list[Latents], dim: int = 1) -> Latents:
    """``torch.stack`` of a list of latents, per modality."""
    if not is_joint(items[0]):
        return torch.stack(items, dim=dim)
    return {k: torch.stack([it[k] for it in items], dim=dim) for k in items[0]}


def batch_size(x: Latents) -> int:
    if not is_joint(x):
        return x.shape[0]
    sizes = {v.shape[0] for v in x.values()}
    if len(sizes) != 1:
        raise ValueError(f"joint latents whose modalities hold different batch sizes: {sorted(sizes)}")
    return sizes.pop()


def index_select(x: Latents, dim: int, index: torch.Tensor) -> Latents:
    return tree_map(lambda t: t.index_select(dim, index.to(t.device)), x)


def rows(x: Latents, index: Any) -> Latents:
    """``x[index]`` on the batch dimension (an int slice, a bool mask or an index tensor), per modality."""
    return tree_map(lambda t: t[index.to(t.device) if isinstance(index, torch.Tensor) else index], x)


def num_slots(states: Latents) -> int:
    """The stored states of a trajectory's ``states`` (its dimension 1)."""
    return (next(iter(states.values())) if is_joint(states) else states).shape[1]


def slot(states: Latents, i: int) -> Latents:
    """``states[:, i]`` per modality."""
    return tree_map(lambda t: t[:, i], states)


def first(x: Latents) -> torch.Tensor:
    """The first modality's tensor (its device, dtype), or the tensor itself."""
    return next(iter(x.values())) if is_joint(x) else x
