"""The processes of a launch as a 2-D mesh, data x sequence (``train.sequence_parallel``).

With W processes and ``train.sequence_parallel = S`` (S divides W), process r sits in data group ``r // S`` at
sequence position ``r % S``: the S processes of a group are one data-parallel replica. They draw the same
samples (the same prompts, noise and SDE draws, all seeded by a sample's global position), run each transformer
forward together with the tokens split over them (diffusers' context-parallel engine: Ulysses all-to-all,
``enable_sequence_parallel``), so they hold the same rollouts, log-probs and losses, and each backward leaves
every process the gradient of its own tokens. The data-parallel wrapper (DDP or FSDP2 over all W processes)
averages gradients over W, which is the mean over the W/S data groups of the group's summed gradient: the
gradient of one process of W/S, as the update's loss scale already assumes (``Updater.run``).

What flowrl wrote itself, and why: the data side (which samples a process draws, gathering each sample once,
the reward called by a group's first process only) is the trainer's, since diffusers' engine splits one forward
and knows nothing of iterations; and the device mesh is built here so that diffusers' ``_resolve_parallel_config``
is not needed, because it places a process on ``torch.accelerator.device_count()`` devices, which is 0 on a CPU.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Mesh:
    """Where this process sits: ``world`` processes, this one ``rank``, ``seq`` to a data group."""

    world: int = 1
    rank: int = 0
    seq: int = 1

    def __post_init__(self):
        if self.seq < 1 or self.world % self.seq:
            raise ValueError(
                f"train.sequence_parallel={self.seq} must divide the {self.world} processes of the launch "
                f"(the processes form a data x sequence mesh)"
            )

    @classmethod
    def of(cls, acc: Any, seq: int = 1) -> Mesh:
        return cls(acc.num_processes, acc.process_index, seq)

    @property
    def data(self) -> int:
        """Data-parallel replicas (groups of ``seq`` processes)."""
        return self.world // self.seq

    @property
    def data_rank(self) -> int:
        return self.rank // self.seq

    @property
    def seq_rank(self) -> int:
        return self.rank % self.seq

    @property
    def leads(self) -> bool:
        """The first process of its group: the one that calls rewards for the group's samples."""
        return self.seq_rank == 0

    def once(self, gathered: torch.Tensor) -> torch.Tensor:
        """Of rows gathered over every process in rank order (each process the same number), each data group's
        rows once (its first process's): (W n, ...) -> (W/S n, ...)."""
        if self.seq == 1:
            return gathered
        return gathered.unflatten(0, (self.data, self.seq, -1))[:, 0].flatten(0, 1)

    def once_objects(self, gathered: list) -> list:
        """``once`` for a list with one entry per process (``accelerate.utils.gather_object``)."""
        return gathered[:: self.seq]


def check_family(seq: int, family: str, adapter_cls: type) -> None:
    """Before any weight loads: a family takes ``train.sequence_parallel`` > 1 unless its adapter says why not
    (``sequence_parallel_refusal``: no context-parallel plan in diffusers, or one that does not yet split it)."""
    reason = getattr(adapter_cls, "sequence_parallel_refusal", None)
    if seq > 1 and reason:
        raise ValueError(f"train.sequence_parallel={seq}: model.pipeline={family} cannot split a sample yet: {reason}")


def check_heads(seq: int, transformer: torch.nn.Module) -> None:
    """Ulysses hands each process 1/S of every attention's heads: S must divide them (the split tokens' count is
    checked by diffusers at the first forward)."""
    config = getattr(transformer, "config", {})
    for key in ("num_attention_heads", "audio_num_attention_heads"):
        heads = config.get(key) if hasattr(config, "get") else None
        if heads is not None and heads % seq:
            raise ValueError(
                f"train.sequence_parallel={seq} does not divide the transformer's {heads} attention heads ({key})"
            )


@functools.cache
def _device_mesh(mesh: Mesh, device_type: str):
    """The (data, ring, ulysses) device mesh, built once a launch (building it is collective)."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device_type, (mesh.data, 1, mesh.seq), mesh_dim_names=("data", "ring", "ulysses"))


def enable_sequence_parallel(
    transformer: torch.nn.Module, mesh: Mesh, device: torch.device, plan: dict | None = None
) -> None:
    """Split ``transformer``'s tokens over each data group (diffusers' Ulysses context parallelism), with the
    device mesh (data, ring, ulysses) built here. ``plan``: the family's own context-parallel plan (None:
    diffusers' plan of the transformer's class). Collective: every process calls it, in the same order."""
    from diffusers import ContextParallelConfig
    from diffusers.models._modeling_parallel import ParallelConfig

    device_mesh = _device_mesh(mesh, device.type)
    config = ParallelConfig(context_parallel_config=ContextParallelConfig(ulysses_degree=mesh.seq, mesh=device_mesh))

    def resolve(cfg: Any) -> ParallelConfig:  # diffusers' own divides by the accelerator count: 0 on a CPU
        config.setup(mesh.rank, mesh.world, device, mesh=device_mesh)
        transformer._parallel_config = config
        return config

    check_heads(mesh.seq, transformer)
    transformer._resolve_parallel_config = resolve
    transformer.enable_parallelism(config=config, cp_plan=plan)


def sequence_degree(transformer: torch.nn.Module) -> int:
    """How many processes split ``transformer``'s tokens (``enable_sequence_parallel``'s Ulysses degree; 1 when
    the transformer runs whole). An adapter asks it before a forward whose token counts it must make divide."""
    config = getattr(getattr(transformer, "_parallel_config", None), "context_parallel_config", None)
    return int(getattr(config, "ulysses_degree", 1) or 1) if config is not None else 1
