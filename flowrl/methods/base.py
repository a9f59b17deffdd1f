"""The method seam: what a method chooses, and the context the trainer hands it.

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

from flowrl.methods.context import Context
from flowrl.pipelines.base import Conditioning
from flowrl.rollout import Trajectory


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

    traj:   the training unit (rows: the batch's samples): a ``Trajectory``, or any object with the
            same unit interface (``trained_indices``, ``row_mask``, ``prompt_ids``, ``len``,
            ``select(rows)``, ``trained_only()``), e.g. the re-noised ``Endpoints`` of forward-process
            methods, whose "transitions" are a sample's K noisings
    score:  latents to decode and score by name. ``"final"`` (B, C, H, W) is required and is the
            sample's reward; any other entry (B, K, C, H, W) becomes a (N, K) reward column.
    info:   per-row facts of the exploration that credit needs, (B,) or (B, K) numbers (a row's window
            start, its rollout batch), gathered over processes like the rewards into credit's columns
            under the same names.
    """

    traj: Trajectory
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
    logp_gap: float | None = None


@dataclass
class NoOptions:
    """A method without options."""


class Method:
    """Base of every method: typed options from ``method.options``, no state, trajectory-level credit
    left to subclasses. ``needs_reference``: the loss uses the reference weights when beta > 0."""

    name = "method"
    Options: type = NoOptions

    def __init__(self, cfg: Any):
        from flowrl.config import ConfigError, build_section

        self.cfg = cfg
        try:
            self.options = build_section(self.Options, dict(cfg.method.options), "method.options.")
        except ConfigError as exc:
            raise ConfigError(f"{exc} (method {self.name})") from None

    def explore(self, ctx: Context, batch: PromptBatch) -> Experience:
        raise NotImplementedError

    def credit(self, rewards: dict[str, torch.Tensor], group_ids: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def transition_loss(
        self, ctx: Context, traj: Trajectory, j: int, cond: Conditioning, advantages: torch.Tensor
    ) -> TransitionLoss:
        """The loss of transition ``j`` of the unit ``traj`` (its rows' conditioning ``cond``;
        ``ctx.model_inputs(cond)`` is the transformer's), advantages (B,)."""
        raise NotImplementedError

    # every rollout batch holds whole prompt groups (a method that explores per group: an anchor, branches)
    whole_groups: bool = False

    # the media kinds of the pipelines it trains (``adapter.media_kind``); None: every kind
    media_kinds: tuple[str, ...] | None = None

    # rows whose advantage is 0 at every transition a step trains carry no signal and are left out of it;
    # False for a loss that still pulls them somewhere (RAM's regression to the reference velocity)
    drops_flat_rows: bool = True

    # the loss recomputes the rollout's per-step log-probs, so the run's first update checks that they
    # match (``train.onpolicy_check``); False for methods without log-probs, where the trainer says so
    # (``no_onpolicy_reason``), or whose training forward differs from the rollout's by design
    checks_onpolicy: bool = True
    no_onpolicy_reason: str = "it records no per-step log-probs to recompute"

    # the names of the run's pairwise rewards (their scores are win rates), set by the trainer
    pairwise_rewards: frozenset[str] = frozenset()

    def averages(self) -> dict[str, Any]:
        """Parameter averages the method needs, by name: a function of the update count k (from 1) to
        the decay d_k (``shadow <- d_k shadow + (1 - d_k) params``). The trainer keeps each one from the
        initial weights, updates it after each iteration's optimizer steps, saves it in checkpoints and
        swaps it in through ``Context.average_weights(name)``. Default: none."""
        return {}

    @property
    def needs_reference(self) -> bool:
        """The loss evaluates the reference weights (full fine-tuning then keeps a frozen copy)."""
        return self.cfg.train.beta > 0

    def schedule(self, num_units: int) -> list[list[tuple[int, int | None] | tuple[int, int | None, int]]]:
        """The iteration's optimizer steps over its ``num_units`` training units (the rollout batches of
        all processes, in rank order): each step lists (unit, k), k the position of the transition to
        train among the unit's trained ones, or None for all of them; or (unit, k, row): that transition
        of one row of the unit only (its position among the unit's rows; entries of one (unit, k) join
        into one forward, and a row beyond a shorter last unit is skipped). Default: ``train.
        optimizer_steps_per_iteration`` steps S, step s training every transition of the units q with
        q % S == s. The same list on every process (it may depend only on ``num_units`` and config)."""
        steps = min(self.cfg.train.optimizer_steps_per_iteration, num_units)
        return [[(q, None) for q in range(s, num_units, steps)] for s in range(steps)]

    def learning_rate(self, scheduled: float, optimizer_step: int) -> float:
        """The rate of the next optimizer step: ``scheduled`` is what ``train.learning_rate`` and
        ``train.lr_schedule`` give optimizer step ``optimizer_step`` (0-based, counted over the run); a
        method with its own schedule returns another (AV-GRPO: one rate per AV-GRPO step, its first at
        the authors' initial rate). The same on every process; it may use only config and method state."""
        return scheduled

    # names of the figures ``metrics`` returns (``log.stop_if`` may name them before the run starts)
    metric_names: tuple[str, ...] = ()

    def metrics(self) -> dict[str, float]:
        """Figures of the latest ``credit``, logged as ``method/<name>`` (the same on every process)."""
        return {}

    def prepare(self, ctx: Context, sample_round: Any) -> dict[str, float]:
        """Before the first iteration of a run (not on resume): e.g. DenseGRPO's noise calibration.
        ``sample_round(k)`` explores and scores round k of fresh prompts without updating and returns
        (reward columns, group ids) as ``credit`` gets them. Returns figures to log."""
        return {}

    def prompt_iteration(self, iteration: int) -> int:
        """Whose prompts iteration ``iteration`` samples: the prompt draw of that iteration (default: its own).
        A method that revisits prompts (AV-GRPO's audio phase on the video phase's prompts) names an earlier
        one; the initial noise and every other stream stay the iteration's own."""
        return iteration

    # the method trains a subset of the trainable parameters that changes over the run (``trains``)
    freezes_parameters: bool = False

    def trains(self, name: str) -> bool:
        """Whether trainable parameter ``name`` (a transformer parameter name) steps this iteration: the others
        get no gradient at the optimizer step (AdamW then leaves them, weight decay included). Asked only when
        ``freezes_parameters``."""
        return True

    def after_update(self) -> bool:
        """Called after each iteration's optimizer steps; True clears the optimizer's state (its moments and
        step counts) before the next one. Default: False."""
        return False

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state saved in every checkpoint (``state.json``) and restored on resume."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
