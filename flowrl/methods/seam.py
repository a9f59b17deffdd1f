"""What the trainer asks of a method, and the data types that cross the seam.

The trainer reads a method through these members only, in this order (``flowrl.methods.base.MethodBase`` gives
the defaults):

* ``needs()``: a ``Needs`` declaration, read once before any weight loads (pre-flight, the policy set-up);
* per iteration: ``begin(i)`` (a ``Turn``: whose prompts, which parameters step), ``explore``, ``credit(table)``
  (``Advantages`` from a ``RewardTable``), ``transition_loss`` for each transition ``schedule`` names,
  ``learning_rate`` for each optimizer step, then ``end()`` (an ``Ending``);
* per run: ``prepare`` (before the first iteration), ``state_dict`` / ``load_state_dict``.

The data types below are what crosses the seam.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from flowrl.media import MediaKind
    from flowrl.media_data import DatasetKind


@dataclass(frozen=True)
class Needs:
    """What a method asks of the run, declared before any weight loads."""

    media: tuple[MediaKind, ...] | None = None  # the media kinds it trains (``adapter.media_kind``); None: any
    whole_groups: bool = False  # every rollout batch holds whole prompt groups
    reference: bool = False  # its loss reads the reference weights (full fine-tuning then keeps a frozen copy)
    averages: Mapping[str, Callable[[int], float]] = field(default_factory=dict)  # parameter averages, by name
    onpolicy_check: str | None = None  # None: the first update checks the recomputed log-probs; else why not
    metrics: tuple[str, ...] = ()  # the names its advantages' ``metrics`` may hold (``log.stop_if`` reads them)
    freezes_parameters: bool = False  # some iterations step only a subset of the parameters (``Turn.trains``)
    # its loss backpropagates through the rewards of non-zero weight (``Context.reward_with_grad``), each of which must
    # be differentiable (``flowrl.reward_models.differentiable``), and through the decode (``Context.decode_with_grad``)
    differentiable_reward: bool = False
    # False: the method learns from preferences or targets its experience carries (a dataset), so a run may have
    # no reward configured (``reward: {}``): then none is built or called and no ``reward/*`` is logged
    rewards: bool = True
    # where its experience comes from: None, rollouts of the prompts; ``DatasetKind.PREFERENCE`` (chosen / rejected
    # pairs) or ``MEDIA`` (target images), the media of the ``data.prompts`` folder's rows (``flowrl.media_data``),
    # which are checked before any weight loads
    dataset: DatasetKind | None = None


@runtime_checkable
class TrainingUnit(Protocol):
    """The rows an exploration trains together (``Experience.traj``, ``RolloutBatch.traj``) as the trainer and the
    update read them: a rollout's ``flowrl.rollout.Trajectory``, forward-process methods' re-noised
    ``Endpoints``, reward backprop's ``ChainStart``. Its "transitions" are what ``transition_loss`` trains one at a
    time (a rollout's steps, an endpoint's noisings, a chain)."""

    prompt_ids: torch.Tensor  # (B,) each row's prompt group

    @property
    def trained_indices(self) -> tuple[int, ...]:
        """The transitions the update trains, in order (``TrainEntry.k`` indexes them)."""

    @property
    def row_mask(self) -> torch.Tensor | None:
        """(B, T) bool: the rows that train each transition; None: every row trains every one."""

    def __len__(self) -> int:
        """B, the unit's rows."""

    def select(self, rows: torch.Tensor) -> TrainingUnit:
        """The unit of the rows at ``rows`` (a (B,) bool mask or an index tensor)."""

    def trained_only(self) -> TrainingUnit:
        """The unit as the update keeps it: only what its trained transitions read."""

    def states_to(self, device: torch.device) -> TrainingUnit:
        """The unit with its stored states on ``device`` (``train.offload_states``)."""


class TrainEntry(NamedTuple):
    """What one optimizer step of ``schedule`` trains of one training unit: the transition at position ``k``
    among the unit's trained ones (None: all of them), of every row of the unit or of row ``row`` only (its
    position among the unit's rows)."""

    unit: int
    k: int | None = None
    row: int | None = None


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
