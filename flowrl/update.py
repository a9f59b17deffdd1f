"""The update phase: the method's loss over every trained transition of every kept sample, accumulated into
optimizer steps.

Every rollout batch of an iteration (over all processes, in rank order) is one training unit; the method's
``schedule`` says which units and transitions each optimizer step trains. The phase keeps the rows that carry
signal, weighs every kept sample the same, runs zero-weight padding passes so that processes make the same
collectives, clips, sets each step's learning rate, steps the optimizer and the EMA, updates the parameter
averages once an iteration, and checks at the run's first update that the recomputed log-probs are the rollout's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import nullcontext
from typing import TYPE_CHECKING

import torch

from flowrl import sharding
from flowrl.lr import lr_factor
from flowrl.media import select_media
from flowrl.memory import activation_offload, set_lr
from flowrl.mesh import Mesh
from flowrl.methods.context import Context
from flowrl.rollout import RolloutBatch
from flowrl.update_plan import (
    Backward,
    CheckOnPolicy,
    Clip,
    DropFrozen,
    Place,
    SetLearningRate,
    Step,
    StepOptimizer,
    UpdateEma,
    layout,
    plan_update,
)

if TYPE_CHECKING:
    from accelerate import Accelerator

    from flowrl.config import Config
    from flowrl.methods.base import MethodBase
    from flowrl.policy import Policy

logger = logging.getLogger(__name__)


class OnPolicyError(RuntimeError):
    """The first update's recomputed log-probs differ from the rollout's."""


class UpdateStats:
    """Update statistics as weighted sums, so that means over processes are means over samples.

    Values may be device scalars: they are kept as they come and read to the host all at once (one
    synchronisation, not one per transition) when the sums or maxima are first read, then added in the order
    ``add`` received them, so the sums are the ones a float read per value gives."""

    def __init__(self) -> None:
        self._sums: dict[str, float] = {}
        self.weights: dict[str, float] = {}
        self._maxima: dict[str, float] = {}
        self._pending: list[tuple[str, str, float | torch.Tensor, float]] = []  # (kind, key, value, weight)

    def add(self, weight: float = 1.0, **kwargs: float | torch.Tensor | None) -> None:
        for k, v in kwargs.items():
            if v is None:  # a figure this method's loss does not have
                continue
            self._pending.append(("sum", k, v, weight))
            self.weights[k] = self.weights.get(k, 0.0) + weight

    def add_max(self, **kwargs: float | torch.Tensor) -> None:
        for k, v in kwargs.items():
            self._pending.append(("max", k, v, 1.0))

    def _read(self) -> None:
        tensors = [v for _, _, v, _ in self._pending if torch.is_tensor(v)]
        if all(t.device.type == "cpu" for t in tensors):  # reading a host tensor waits for nothing: no stacked copy
            values = iter([float(t) for t in tensors])
        else:
            wide = [t.detach().reshape(()).to(torch.float64) for t in tensors]
            values = iter(torch.stack([t.to(wide[0].device) for t in wide]).tolist())
        for kind, k, v, weight in self._pending:
            v = next(values) if torch.is_tensor(v) else float(v)
            if kind == "sum":
                self._sums[k] = self._sums.get(k, 0.0) + v * weight
            else:
                self._maxima[k] = max(self._maxima.get(k, float("-inf")), v)
        self._pending = []

    @property
    def sums(self) -> dict[str, float]:
        self._read()
        return self._sums

    @property
    def maxima(self) -> dict[str, float]:
        self._read()
        return self._maxima

    def reduce(self, acc: Accelerator) -> dict[str, float]:
        """Weighted means over every process's entries, and maxima over processes (collective)."""
        keys = sorted(self.sums)
        sums = [self.sums[k] for k in keys] + [self.weights[k] for k in keys]
        maxima = dict(self.maxima)
        if acc.num_processes > 1:
            t = acc.reduce(torch.tensor(sums, dtype=torch.float64, device=acc.device), reduction="sum")
            sums = t.tolist()
            names = ["onpolicy_logp_diff"]  # the only maximum logged; the same list on every process
            m = torch.tensor([maxima.get(k, 0.0) for k in names], dtype=torch.float64, device=acc.device)
            maxima = dict(zip(names, acc.gather(m[None]).max(dim=0).values.tolist()))
        n = len(keys)
        out = {k: sums[i] / sums[n + i] for i, k in enumerate(keys) if sums[n + i] > 0}
        return {**out, **maxima}


class Updater:
    """The update phase of a run: the policy's optimizer stepped by the method's losses (``run``).
    ``optimizer_steps`` counts the run's steps (checkpointed); ``total_optimizer_steps`` is the run's whole count,
    which the learning-rate schedule spans; ``checked_onpolicy``: the on-policy check is done or does not apply."""

    def __init__(
        self, cfg: Config, acc: Accelerator, policy: Policy, method: MethodBase, mesh: Mesh | None = None
    ) -> None:
        self.cfg, self.acc, self.policy, self.method = cfg, acc, policy, method
        self.mesh = mesh or Mesh.of(acc)  # the units are the data group's; a sequence group's processes share them
        self.optimizer_steps = 0
        num_units = len(self.layout(cfg.sample.prompts_per_iteration * cfg.sample.group_size))
        self.total_optimizer_steps = cfg.train.iterations * len(method.schedule(num_units))
        self.checked_onpolicy = False

    def run(
        self,
        batches: list[RolloutBatch],
        adv_all: torch.Tensor,
        first: bool,
        ctx: Context,
        keep_rows: torch.Tensor | None = None,
        trains: Callable[[str], bool] | None = None,
    ) -> dict[str, float]:
        """Update phase: the method's loss over every trained transition of every kept sample.

        ``adv_all``: (N,) or (N, T) advantages of all processes' samples, in global order. Every rollout
        batch of the iteration (over all processes, in rank order) is one training unit; the method's
        ``schedule`` says which units, transitions and rows each optimizer step trains, so each step sees the
        same global samples whatever the number of processes (given equal batch boundaries, which equal results
        need anyway). Every step runs at the rate the method's ``learning_rate`` gives (default:
        ``train.lr_schedule`` over the run's optimizer steps). Rows whose advantage is 0 at every transition a
        step trains carry no signal and are dropped; every kept sample weighs the same in its step's gradient (1 /
        the step's kept samples), ragged batches included; ``keep_rows`` (the credit's ``Advantages.keep``) names
        the rows every step trains instead. ``trains`` names the parameters that step (None: all). Processes run
        the same number of forward/backward passes (zero-weight passes where one holds fewer units) so that DDP
        and FSDP collectives stay in step. The steps are ``flowrl.update_plan.plan_update``'s.
        """
        places = self.layout(len(adv_all))  # every unit, in rank order
        local = [q for q, place in enumerate(places) if place.rank == self.mesh.data_rank]
        trained = self.trained_per_unit(batches, local)  # unit -> its trained transitions
        steps = plan_update(
            places,
            self.method.schedule(len(places)),
            trained,
            adv_all,
            keep_rows,
            data_rank=self.mesh.data_rank,
            world=self.mesh.data,
            num_processes=self.acc.num_processes,
            first_step=self.optimizer_steps,
            ema_every=None if self.policy.ema is None else self.cfg.train.ema_every,
            check_onpolicy=first,
            drop_frozen=trains is not None,
        )
        runner = StepRunner(self, ctx, batches, adv_all, places, local, trains)
        for step in steps:
            runner.run(step)
        for average in self.policy.averages.values():
            average.update(self.policy.trainable)
        if self.method.end().reset_optimizer:  # the method starts afresh (AV-GRPO's phase switch): no moments carried
            sharding.inner_optimizer(self.policy.optimizer).state.clear()
        out = runner.stats.reduce(self.acc)
        keep_all = (adv_all != 0) if adv_all.ndim == 1 else (adv_all != 0).any(dim=1)
        out["kept_frac"] = float(keep_all.float().mean())
        return out

    def trained_per_unit(self, batches: list[RolloutBatch], local: list[int]) -> list[list[int]]:
        """Every unit's trained transitions (plan indices), the same lists on every process: a process
        knows only its own units' plans, so they are gathered (one small list per process)."""
        mine = [list(batches[local.index(q)].traj.trained_indices) for q in local]
        if self.acc.num_processes == 1:
            return mine
        from accelerate.utils import gather_object

        return [js for part in self.mesh.once_objects(gather_object([mine])) for js in part]

    def layout(self, n: int) -> list[Place]:
        """Where every rollout batch of an iteration of ``n`` samples lies, the batches of rank 0 first
        (``collect`` cuts each process's share into ``sample.batch_size`` rows)."""
        return layout(n, self.mesh.data, self.cfg.sample.batch_size)

    @staticmethod
    def kept_unit(
        b: RolloutBatch, adv_all: torch.Tensor, where: Place, idx: torch.Tensor
    ) -> tuple[RolloutBatch, torch.Tensor]:
        """The unit's rows at ``idx`` (positions among its rows) with their advantages."""
        _, start, n = where
        adv = adv_all[start : start + n]
        if len(idx) < n:
            b = RolloutBatch(
                b.traj.select(idx),
                {k: v[idx.to(v.device)] for k, v in b.cond.items()},
                [b.prompts[i] for i in idx.tolist()],
                [b.metadata[i] for i in idx.tolist()],
                select_media(b.media, idx),
            )
            adv = adv[idx]
        return b, adv

    def unit(
        self,
        ctx: Context,
        b: RolloutBatch,
        adv: torch.Tensor,
        transitions: list[int],
        scale: float,
        sync: bool,
        stats: UpdateStats,
        measure: bool,
        untrained: list[torch.nn.Parameter] | tuple[()] = (),
    ) -> None:
        """Loss and backward for ``transitions`` of one unit, their mean loss weighted by ``scale``
        (0: a padding pass that only keeps the processes' collectives in step). ``measure``: this is
        the iteration's first unit, still on-policy, so log the log-prob gap. ``untrained``: parameters the
        method does not train now, joined to the loss with weight 0 under DDP (see ``StepRunner``).

        With a ``row_mask`` (a per-row subset of the transitions) each transition forwards only the rows
        that train it, and every trained (row, transition) pair weighs the same; a transition no row
        trains still makes one zero-weight pass, so processes run the same passes."""
        traj = b.traj.states_to(self.acc.device) if self.cfg.train.offload_states else b.traj
        max_diff = None
        mask = traj.row_mask
        pairs = int(mask[:, transitions].sum()) if mask is not None else 0
        for k, j in enumerate(transitions):
            last = sync and k == len(transitions) - 1
            sync_ctx = nullcontext() if last or self.acc.num_processes == 1 else self.acc.no_sync(self.policy.model)
            adv_j = (adv if adv.ndim == 1 else adv[:, j]).to(self.acc.device)
            unit, cond, weight = traj, b.cond, scale / len(transitions)
            rows = float(len(traj)) if scale > 0 else 0.0  # a padding pass adds nothing to the statistics
            if mask is not None:
                idx = mask[:, j].nonzero().flatten()
                weight = scale * len(idx) / pairs if len(idx) and pairs else 0.0
                idx = idx if len(idx) else torch.zeros(1, dtype=torch.long)
                unit, adv_j = traj.select(idx), adv_j[idx.to(adv_j.device)]
                cond = {key: v.index_select(0, idx.to(v.device)) for key, v in b.cond.items()}
                rows = float(len(idx)) if weight > 0 else 0.0
            with sync_ctx, activation_offload(self.cfg.train.activation_offload, self.acc.device):
                tl = self.method.transition_loss(ctx, unit, j, cond, adv_j)
                loss = tl.loss * weight
                if untrained:  # weight 0: DDP's reducer hears from every parameter (see ``StepRunner``)
                    loss = loss + 0.0 * sum(p.sum() for p in untrained)
                if self.policy.deepspeed:  # DeepSpeed steps the optimizer inside the backward it is told is last
                    self.acc.sync_gradients = last
                self.acc.backward(loss)
            if measure and tl.logp_gap is not None:  # a device scalar: read with the statistics, after the update
                gap = torch.as_tensor(tl.logp_gap, dtype=torch.float64)
                max_diff = gap if max_diff is None else torch.maximum(max_diff, gap.to(max_diff.device))
            stats.add(
                rows,
                loss=tl.loss.detach(),
                pg_loss=tl.policy_loss,
                kl=tl.kl,
                approx_kl=tl.approx_kl,
                clip_frac=tl.clip_frac,
                ratio_mean=tl.ratio_mean,
            )
        if max_diff is not None:  # None: not measured, or the method's loss has no rollout log-prob to match
            stats.add_max(onpolicy_logp_diff=max_diff)

    def check_onpolicy(self, stats: UpdateStats) -> None:
        """The run's first update: stop if the recomputed log-prob is not the rollout's (on any process)."""
        if not self.cfg.train.onpolicy_check or self.checked_onpolicy:
            return
        self.checked_onpolicy = True
        diff = stats.maxima.get("onpolicy_logp_diff", 0.0)
        if self.acc.num_processes > 1:
            diff = float(self.acc.gather(torch.tensor([diff], device=self.acc.device)).max())
        if diff > self.cfg.train.onpolicy_tol:
            raise OnPolicyError(
                f"step-0 on-policy check failed: recomputed log-prob differs from the rollout's by "
                f"{diff:.3g} > train.onpolicy_tol={self.cfg.train.onpolicy_tol:g}; the training "
                "forward is not the rollout's (precision/autocast mismatch, a different schedule or "
                "batch, or dropout left on)"
            )


class StepRunner:
    """Runs the steps of one update's plan (``flowrl.update_plan``) against the policy: the passes' losses and
    backwards, then each optimizer step's clip, rate, step and EMA; ``stats`` gathers the figures.

    DDP (without find_unused_parameters) waits in every backward for a gradient of each parameter it wraps: the
    ones a method does not train now (``trains``; AV-GRPO's other tower, which its loss may not reach) join the
    loss with weight 0, and their gradient is dropped before the optimizer step as on one process."""

    def __init__(
        self,
        updater: Updater,
        ctx: Context,
        batches: list[RolloutBatch],
        adv_all: torch.Tensor,
        places: list[Place],
        local: list[int],
        trains: Callable[[str], bool] | None,
    ) -> None:
        self.updater, self.ctx, self.batches, self.adv_all = updater, ctx, batches, adv_all
        self.places, self.local, self.trains = places, local, trains
        policy = updater.policy
        ddp = isinstance(policy.model, torch.nn.parallel.DistributedDataParallel) and trains is not None
        self.untrained = [p for n, p in policy.trainable.items() if not trains(n)] if ddp else []
        self.stats = UpdateStats()
        self.grad_norm, self.lr = float("nan"), 0.0  # the current optimizer step's, logged at its step

    def run(self, step: Step) -> None:
        up, policy, t = self.updater, self.updater.policy, self.updater.cfg.train
        match step:
            case Backward():
                self.backward(step)
            case CheckOnPolicy():
                up.check_onpolicy(self.stats)
            case DropFrozen():  # this phase's frozen set: no gradient, so AdamW leaves it be
                for name, p in policy.trainable.items():
                    if not self.trains(name):
                        p.grad = None
            case Clip():
                grad_norm = up.acc.clip_grad_norm_(list(policy.trainable.values()), t.max_grad_norm)
                # None: DeepSpeed's first step
                self.grad_norm = float("nan") if grad_norm is None else sharding.as_float(grad_norm)
            case SetLearningRate(index=index):
                scheduled = t.learning_rate * lr_factor(
                    index, up.total_optimizer_steps, t.lr_schedule, t.lr_warmup_steps, t.lr_min_ratio
                )
                self.lr = up.method.learning_rate(scheduled, index)
                for group in policy.optimizer.param_groups:
                    set_lr(group, self.lr)
            case StepOptimizer():
                policy.optimizer.step()
                policy.optimizer.zero_grad(set_to_none=True)
                up.optimizer_steps += 1
                self.stats.add(grad_norm=float(self.grad_norm), lr=self.lr)
            case UpdateEma():
                policy.ema.update(policy.trainable)

    def backward(self, step: Backward) -> None:
        """One pass: the unit's rows, at its transitions, forward and backward."""
        up = self.updater
        # a padding pass's row index stays on the host; kept rows are where the advantages are
        idx = torch.arange(1) if step.padding else torch.tensor(step.rows, device=self.adv_all.device)
        b, adv = up.kept_unit(self.batches[self.local.index(step.unit)], self.adv_all, self.places[step.unit], idx)
        up.unit(
            self.ctx, b, adv, list(step.transitions), step.scale, step.sync, self.stats, step.measure, self.untrained
        )
