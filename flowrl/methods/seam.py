"""What the trainer asks of a method, and the data types that cross the seam.

The trainer reads a method through these calls only, in this order:

* ``needs(method)``: a ``Needs`` declaration, read once before any weight loads (pre-flight, the policy set-up);
* per iteration: ``begin(method, i)`` (a ``Turn``: whose prompts, which parameters step), ``method.explore``,
  ``credit(method, table)`` (``Advantages`` from a ``RewardTable``), ``method.transition_loss`` for each transition
  the ``method.schedule`` names, ``method.learning_rate`` for each optimizer step, then ``end(method)`` (an
  ``Ending``);
* per run: ``method.prepare`` (before the first iteration), ``method.state_dict`` / ``load_state_dict``.

The functions here read today's ``Method`` members; a method may implement ``needs``, ``begin``, ``credit_table``
and ``end`` itself, and then those are used as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class Needs:
    """What a method asks of the run, declared before any weight loads."""

    media: tuple[str, ...] | None = None  # the media kinds it trains (``adapter.media_kind``); None: any
    whole_groups: bool = False  # every rollout batch holds whole prompt groups
    reference: bool = False  # its loss reads the reference weights (full fine-tuning then keeps a frozen copy)
    averages: Mapping[str, Callable[[int], float]] = field(default_factory=dict)  # parameter averages, by name
    onpolicy_check: str | None = None  # None: the first update checks the recomputed log-probs; else why not
    metrics: tuple[str, ...] = ()  # the names its advantages' ``metrics`` may hold (``log.stop_if`` reads them)
    freezes_parameters: bool = False  # some iterations step only a subset of the parameters (``Turn.trains``)


@dataclass(frozen=True)
class Turn:
    """What ``begin`` decides for one iteration."""

    prompts_of: int  # whose prompt draw the iteration samples (the initial noise stays the iteration's own)
    trains: Callable[[str], bool] | None = None  # which trainable parameters step; None: all of them


@dataclass
class RewardTable:
    """The reward phase's output that credit reads: named (N,) score columns of every process's samples (``final``
    the weighted sum, ``final/<name>`` each reward, plus the exploration's info columns), their prompt groups, and
    the names of the rewards that are pairwise (their columns are win rates)."""

    columns: dict[str, torch.Tensor]
    group_ids: torch.Tensor
    pairwise: frozenset[str] = frozenset()


@dataclass
class Advantages:
    """Credit's output. ``values``: (N,) or (N, T), column j the advantage of transition j. ``keep``: (N,) the rows a
    step trains whatever their value; None: the rows whose advantage is non-zero at a transition the step trains
    (a row with none carries no signal). ``metrics``: figures logged as ``method/<name>``."""

    values: torch.Tensor
    keep: torch.Tensor | None = None
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Ending:
    """What ``end`` reports after an iteration's optimizer steps."""

    reset_optimizer: bool = False  # clear the optimizer's moments and step counts (AV-GRPO's phase switch)


def needs(method: Any) -> Needs:
    if hasattr(method, "needs"):
        return method.needs()
    return Needs(
        media=method.media_kinds,
        whole_groups=method.whole_groups,
        reference=method.needs_reference,
        averages=method.averages(),
        onpolicy_check=None if method.checks_onpolicy else method.no_onpolicy_reason,
        metrics=tuple(method.metric_names),
        freezes_parameters=method.freezes_parameters,
    )


def begin(method: Any, iteration: int) -> Turn:
    if hasattr(method, "begin"):
        return method.begin(iteration)
    return Turn(
        prompts_of=method.prompt_iteration(iteration), trains=method.trains if method.freezes_parameters else None
    )


def credit(method: Any, table: RewardTable) -> Advantages:
    """The method's advantages; ``train.batch_renorm`` (GDPO) z-scores the whole iteration's again, then clips."""
    from flowrl.advantages import batch_zscore, clip_advantages

    if hasattr(method, "credit_table"):
        adv = method.credit_table(table)
    else:
        method.pairwise_rewards = table.pairwise
        values = method.credit(table.columns, table.group_ids)
        keep = None if method.drops_flat_rows else torch.ones(values.shape[0], dtype=torch.bool, device=values.device)
        adv = Advantages(values, keep)
    t = method.cfg.train
    if t.batch_renorm:
        adv.values = clip_advantages(batch_zscore(adv.values), t.adv_clip_max)
    if not hasattr(method, "credit_table"):
        adv.metrics = dict(method.metrics())
    return adv


def end(method: Any) -> Ending:
    if hasattr(method, "end"):
        return method.end()
    return Ending(reset_optimizer=method.after_update())
