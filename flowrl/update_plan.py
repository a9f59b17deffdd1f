"""The update phase as a plan: the ordered steps one process runs in an iteration's update.

``plan_update`` is pure: from where the iteration's training units lie (``Place``), the method's schedule, each
unit's trained transitions and the advantages, it lists the passes (a unit's kept rows forward and backward, or a
zero-weight padding pass so that every process makes the same collectives), the sync point (the last pass of a
step, where gradients reduce across processes), then the clip, learning rate, optimizer step and EMA of each
optimizer step. ``flowrl.update.Updater`` runs the steps.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import torch

from flowrl.methods.seam import TrainEntry


class Place(NamedTuple):
    """Where a training unit (one rollout batch) lies: its process (data rank), its first sample's global index
    and its rows."""

    rank: int
    start: int
    rows: int


@dataclass(frozen=True)
class Backward:
    """One forward and backward pass: ``unit``'s rows ``rows`` (positions among its rows) at ``transitions``
    (plan indices), their mean loss weighted by ``scale``. ``padding``: a zero-weight pass of the process's first
    unit's first row, which only keeps the processes' collectives in step. ``sync``: the step's last pass, whose
    backward reduces the gradients across processes. ``measure``: the update's first pass, still on-policy, logs
    the recomputed log-prob's gap to the rollout's."""

    unit: int
    transitions: tuple[int, ...]
    rows: tuple[int, ...]
    scale: float
    sync: bool
    measure: bool = False
    padding: bool = False


@dataclass(frozen=True)
class CheckOnPolicy:
    """The run's first update, after its first pass: stop if the recomputed log-probs are not the rollout's."""


@dataclass(frozen=True)
class DropFrozen:
    """Drop the gradients of the parameters this iteration does not train, so that the optimizer leaves them be."""


@dataclass(frozen=True)
class Clip:
    """Clip the gradient norm (``train.max_grad_norm``)."""


@dataclass(frozen=True)
class SetLearningRate:
    """Set the rate of the run's optimizer step ``index`` (0-based)."""

    index: int


@dataclass(frozen=True)
class StepOptimizer:
    """Step the optimizer and zero its gradients."""


@dataclass(frozen=True)
class UpdateEma:
    """Update the EMA of the trainable parameters."""


Step = Backward | CheckOnPolicy | DropFrozen | Clip | SetLearningRate | StepOptimizer | UpdateEma


def layout(n: int, world: int, batch_size: int) -> list[Place]:
    """Where every rollout batch of an iteration of ``n`` samples lies, the batches of data rank 0 first (the
    trainer cuts each of the ``world`` processes' share into ``batch_size`` rows)."""
    share = n // world
    return [
        Place(r, r * share + s, min(batch_size, share - s)) for r in range(world) for s in range(0, share, batch_size)
    ]


def step_work(
    places: list[Place],
    entries: list[TrainEntry],
    trained: list[list[int]],
    adv_all: torch.Tensor,
    keep_rows: torch.Tensor | None,
) -> list[tuple[int, list[int], torch.Tensor]]:
    """One optimizer step's work: (unit, its transitions this step, (rows,) bool: which of its rows train), in the
    order the step's entries first name each (unit, k). Entries of one (unit, k) join; a row past the end of a
    shorter unit is skipped; a unit that trains no transition (an empty MixGRPO window) has no work. A row trains
    if its advantage is non-zero at one of the transitions (``keep_rows``, when given, names them instead), and
    it is one the entries name."""
    named: dict[tuple[int, int | None], torch.Tensor | None] = {}  # (unit, k) -> its rows named, None: all
    for q, k, row in entries:
        rows = places[q].rows
        if row is not None and row >= rows:
            continue
        mask = None if row is None else torch.arange(rows) == row
        prev = named.get((q, k), mask)
        named[(q, k)] = None if prev is None or mask is None else prev | mask
    work = []
    for (q, k), mask in named.items():
        js = trained[q] if k is None else [trained[q][k]]
        if not js:
            continue
        _, start, rows = places[q]
        adv = adv_all[start : start + rows]
        keep = (adv != 0) if adv.ndim == 1 else (adv[:, js] != 0).any(dim=1)
        if keep_rows is not None:
            keep = keep_rows[start : start + rows].to(keep.device)
        if mask is not None:
            keep = keep & mask.to(keep.device)
        work.append((q, js, keep))
    return work


def step_passes(
    places: list[Place],
    work: list[tuple[int, list[int], torch.Tensor]],
    trained: list[list[int]],
    data_rank: int,
    world: int,
    num_processes: int,
) -> list[Backward]:
    """This process's passes of one optimizer step with work: its busy units (those with a kept row), then zero-
    weight padding passes up to the busiest process's count, so that every process runs the same passes. A pass
    weighs its rows' share of the step's kept rows, times the processes (DDP and FSDP average gradients over all
    processes; a sequence group's sum to its samples' gradient). The last pass syncs."""
    step_kept = sum(int(keep.sum()) for _, _, keep in work)
    busy = [(q, js, keep) for q, js, keep in work if keep.any()]
    count = max(sum(1 for q, _, _ in busy if places[q].rank == r) for r in range(world))
    local = [q for q, place in enumerate(places) if place.rank == data_rank]
    passes = []
    for q, js, keep in busy:
        if q in local:
            rows = tuple(keep.nonzero().flatten().tolist())
            passes.append(Backward(q, tuple(js), rows, float(len(rows)) / step_kept * num_processes, sync=False))
    if len(passes) < count:  # padding: its first unit's first row, weight 0, the first busy unit's transition count
        pad = Backward(local[0], tuple(trained[local[0]][: len(busy[0][1])]), (0,), 0.0, sync=False, padding=True)
        passes += [pad] * (count - len(passes))
    passes[-1] = replace(passes[-1], sync=True)
    return passes


def plan_update(
    places: list[Place],
    schedule: list[list[TrainEntry]],
    trained: list[list[int]],
    adv_all: torch.Tensor,
    keep_rows: torch.Tensor | None,
    *,
    data_rank: int,
    world: int,
    num_processes: int,
    first_step: int,
    ema_every: int | None,
    check_onpolicy: bool,
    drop_frozen: bool,
) -> list[Step]:
    """The ordered steps of this process's update (see the module docstring). ``places``: every unit of the
    iteration (all processes, in rank order); ``schedule``: the method's optimizer steps over them; ``trained``:
    every unit's trained transitions (plan indices); ``adv_all``: (N,) or (N, T) advantages of every process's
    samples in global order; ``keep_rows``: (N,) the rows every step trains (None: those with signal);
    ``first_step``: the run's optimizer steps so far; ``ema_every``: None without an EMA; ``check_onpolicy``: the
    run's first update, whose first pass is measured and checked; ``drop_frozen``: the iteration steps only some
    of the parameters. A step none of whose samples carries signal, on any process, is skipped."""
    steps: list[Step] = []
    index = first_step
    for entries in schedule:
        work = step_work(places, entries, trained, adv_all, keep_rows)
        if sum(int(keep.sum()) for _, _, keep in work) == 0:
            continue
        passes = step_passes(places, work, trained, data_rank, world, num_processes)
        if index == first_step:  # the update's first pass: measured when it is a real one, and checked
            passes[0] = replace(passes[0], measure=not passes[0].padding)
            steps += [passes[0]] + [CheckOnPolicy()] * check_onpolicy + passes[1:]
        else:
            steps += passes
        steps += [DropFrozen()] * drop_frozen + [Clip(), SetLearningRate(index), StepOptimizer()]
        index += 1
        if ema_every is not None and index % ema_every == 0:
            steps.append(UpdateEma())
    return steps
