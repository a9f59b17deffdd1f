"""The method seam: what a method chooses, and the context the trainer hands it (the seam's data types,
``Needs``, ``Turn``, ``RewardTable``, ``Advantages``, ``Ending``, are in ``flowrl.methods.seam``).

A method owns three things:

* **exploration** (``explore``): what is sampled for one batch of prompts: the rollout, and any ODE
  completions or branches whose rewards its credit needs. It returns an ``Experience``: the training
  unit (trajectory and conditioning of the batch's rows) and the latents to score, by name;
* **credit** (``credit``): a pure function from the named reward columns of the whole iteration, and
  the per-row facts its exploration recorded (``Experience.info``), gathered over processes in global
  sample order, to advantages (N,) or (N, T) (column j: transition j);
* **the loss of one trained transition** (``transition_loss``), and which transitions each optimizer step
  trains (``schedule``; default: ``train.optimizer_steps_per_iteration`` steps over the rollout batches).

It works only through ``Context``: the adapter's forwards (counted in ``cost/nfe``), rollouts and ODE
completions, the shared-input transition of members that start from one state (one forward per distinct
input, broadcast), named random streams seeded by (seed, iteration, purpose, global position) so that a new
draw never shifts another's, and the reference weights. The trainer keeps what is common: prompts and
seeding, reward calls with their error policy and gathering, accumulation, clipping, optimizer steps,
the on-policy check, logs and checkpoints (which hold ``state_dict()``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from flowrl.media import MediaKind
from flowrl.methods.context import Context
from flowrl.methods.seam import Advantages, Ending, Needs, RewardTable, TrainEntry, TrainingUnit, Turn
from flowrl.pipelines.base import Conditioning


@dataclass
class PromptBatch:
    """One rollout batch of this process: B consecutive samples of the iteration (global order)."""

    position: int  # global index of the first sample
    prompts: list[str]
    metadata: list[dict]  # each with "group", the sample's prompt group
    group_ids: torch.Tensor  # (B,)
    noise: torch.Tensor  # (B, C, H, W) the initial latents (sigma = 1)
    cond: Conditioning


@dataclass
class Experience:
    """What a method's exploration of one ``PromptBatch`` produced.

    traj:   the training unit (rows: the batch's samples), a ``TrainingUnit``: a ``Trajectory``, or e.g. the
            re-noised ``Endpoints`` of forward-process methods, whose "transitions" are a sample's K noisings
    score:  latents to decode and score by name. ``"final"`` (B, C, H, W) is required and is the
            sample's reward; any other entry (B, K, C, H, W) becomes a (N, K) reward column.
    info:   per-row facts of the exploration that credit needs, (B,) or (B, K) numbers (a row's window
            start, its rollout batch), gathered over processes like the rewards into credit's columns
            under the same names.
    """

    traj: TrainingUnit
    score: dict[str, torch.Tensor] = field(default_factory=dict)
    info: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class TransitionLoss:
    loss: torch.Tensor  # scalar, with grad
    policy_loss: torch.Tensor  # detached scalars from here on
    # None: a figure the method's loss does not have (a forward-process loss has no ratio); not logged
    kl: torch.Tensor | None = None
    clip_frac: torch.Tensor | None = None
    approx_kl: torch.Tensor | None = None
    ratio_mean: torch.Tensor | None = None
    # max |recomputed - rollout log-prob| for the on-policy check; None: the check does not apply
    logp_gap: torch.Tensor | float | None = None  # a device scalar is read once the update is done


@dataclass
class NoOptions:
    """A method without options."""


class MethodBase:
    """Base of every method: typed options from ``method.options``, its parts (``flowrl.methods.parts``) and the
    declared seam with defaults. A method implements ``explore`` and names its default parts; it overrides the
    rest where it differs.

    The seam, in the order the trainer calls it: ``needs()`` once before any weight loads; per iteration
    ``begin(i)``, ``explore``, ``credit(table)``, ``transition_loss`` for each transition ``schedule`` names,
    ``learning_rate`` for each optimizer step, ``end()``; per run ``prepare``, ``state_dict`` /
    ``load_state_dict``."""

    name = "method"
    Options: type = NoOptions
    # the default parts, by registered name (``flowrl.methods.parts``); ``method.credit``, ``method.credit_norm``
    # and ``method.loss`` choose others where they fit. No loss part: the method's own ``transition_loss``
    default_credit: str = "group_zscore"
    default_credit_norm: str = "none"
    default_loss: str | None = None
    # its own loss still pulls a row whose advantage is 0 (a regression on its target): every row trains
    keeps_flat_rows = False
    # the media kinds of the pipelines it trains (``adapter.media_kind``; ``Needs.media``); None: every kind
    media: tuple[MediaKind, ...] | None = None
    # the method computes a recomputed SDE step and lets a ``policy`` loss part score it (Flow-GRPO's family)
    hosts_policy_loss: bool = False

    # samples per prompt (``sample.group_size``) the method needs: 2 where its credit compares a prompt's samples
    # (group advantages, pairs); 1 where each sample trains on its own (SFT's targets, a backpropagated reward)
    min_group_size = 2

    def __init__(self, cfg: Any):
        from flowrl.configkit import ConfigError, build_section
        from flowrl.methods import PART_KEYS, recipe_on
        from flowrl.methods.parts import compose

        self.cfg = cfg
        recipe = recipe_on(cfg.method.name, type(self))
        if recipe is not None:  # a recipe runs this class under its own name, with its own default parts
            self.name = recipe.name
        defaults = {key: getattr(type(self), f"default_{key}") for key in PART_KEYS}
        defaults |= dict(recipe.parts) if recipe is not None else {}
        try:
            self.options = build_section(self.Options, dict(cfg.method.options), "method.options.")
        except ConfigError as exc:
            raise ConfigError(f"{exc} (method {self.name})") from None
        self.parts = compose(self.name, type(self), self.options, cfg, self.records(), defaults)
        self._credit_rule = self.parts.credit.load()
        self._credit_norm = self.parts.credit_norm.load()
        self._loss = self.parts.loss.load() if self.parts.loss is not None else None

    def records(self) -> frozenset[str]:
        """What this method's exploration records (``flowrl.methods.parts.RECORDS``), which the parts need."""
        return frozenset()

    # ------------------------------------------------------------------ the declaration
    def needs(self) -> Needs:
        """What the method asks of the run, read before any weight loads. Default: nothing special; the credit
        part's metric names."""
        return Needs(media=self.media, metrics=self.parts.credit.metrics)

    # ------------------------------------------------------------------ one iteration
    def begin(self, iteration: int) -> Turn:
        """Whose prompt draw iteration ``iteration`` samples and which parameters step. Default: its own draw,
        every trainable parameter."""
        return Turn(prompts_of=iteration)

    def explore(self, ctx: Context, batch: PromptBatch) -> Experience:
        raise NotImplementedError

    def credit(self, table: RewardTable) -> Advantages:
        """The iteration's advantages: the credit part on ``table``, then the credit normalisation part. Rows
        whose advantage is 0 at every trained transition carry no signal (``keep`` None), unless the method's own
        loss still pulls them (``keeps_flat_rows``: every row trains)."""
        adv = self._credit_norm(self._credit_rule(self, table), self)
        if self.keeps_flat_rows and adv.keep is None:
            adv.keep = torch.ones(adv.values.shape[0], dtype=torch.bool, device=adv.values.device)
        return adv

    def transition_loss(
        self, ctx: Context, traj: TrainingUnit, j: int, cond: Conditioning, advantages: torch.Tensor
    ) -> TransitionLoss:
        """The loss of transition ``j`` of the unit ``traj`` (its rows' conditioning ``cond``;
        ``ctx.model_inputs(cond)`` is the transformer's), advantages (B,): every method defines its own (Flow-GRPO's
        scores the recomputed step with the loss part, ``method.loss``)."""
        raise NotImplementedError(f"method {self.name} defines no transition_loss")

    def schedule(self, num_units: int) -> list[list[TrainEntry]]:
        """The iteration's optimizer steps over its ``num_units`` training units (the rollout batches of
        all processes, in rank order): each step lists ``TrainEntry(unit, k)``, k the position of the transition
        to train among the unit's trained ones, or None for all of them; with ``row``, that transition of one
        row of the unit only (its position among the unit's rows; entries of one (unit, k) join into one
        forward, and a row beyond a shorter last unit is skipped). Default: ``train.
        optimizer_steps_per_iteration`` steps S, step s training every transition of the units q with
        q % S == s. The same list on every process (it may depend only on ``num_units`` and config)."""
        steps = min(self.cfg.train.optimizer_steps_per_iteration, num_units)
        return [[TrainEntry(q) for q in range(s, num_units, steps)] for s in range(steps)]

    def learning_rate(self, scheduled: float, optimizer_step: int) -> float:
        """The rate of the next optimizer step: ``scheduled`` is what ``train.learning_rate`` and
        ``train.lr_schedule`` give optimizer step ``optimizer_step`` (0-based, counted over the run); a
        method with its own schedule returns another (AV-GRPO: one rate per AV-GRPO step, its first at
        the authors' initial rate). The same on every process; it may use only config and method state."""
        return scheduled

    def end(self) -> Ending:
        """After the iteration's optimizer steps. Default: nothing to report."""
        return Ending()

    # ------------------------------------------------------------------ the run
    def prepare(self, ctx: Context, sample_round: Any) -> dict[str, float]:
        """Before the first iteration of a run (not on resume): e.g. DenseGRPO's noise calibration.
        ``sample_round(k)`` explores and scores round k of fresh prompts without updating and returns
        (reward columns, group ids). Returns figures to log."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state saved in every checkpoint (``state.json``) and restored on resume."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
