"""TP-GRPO (arXiv 2602.06422, ``specs/addon_methods.md`` §2): incremental step rewards, with turning
points credited the aggregated long-term reward.

Exploration (§2 steps 1-2). The plan has an SDE window of W transitions (CPS, a = 0.7 by default; ODE
everywhere else; the window trains), drawn by ``flowrl.plan.make_plan`` from the stream ("plan", batch
position) like Flow-GRPO's. After the rollout, the state right after each window step m = 1..W-1
(state ``s + m`` for a window starting at transition s) is ODE-completed along the rest of the schedule,
and a pure-ODE sample gives the baseline R_0: from the rollout's own initial latent, the very tensor
(the paper's intent, ``baseline_noise=shared``), or from independent noise drawn from the stream
("tp_baseline", batch position) (the released code's behaviour, ``baseline_noise=independent``). They
are scored as ``"pure_ode"`` (N, 1) and ``"completion"`` (N, W-1); with ``"final"`` they make the (N, W+1)
table R_0..R_W of ``flowrl.credit.turning_point``. A window that starts at s > 0 is reached by ODE steps
from the initial latent, so the pure-ODE sample is also the completion of state s and the table means the
same thing for every start. Cost per sample: W + 1 reward calls and T (rollout) + T (pure ODE) +
Σ_{m=1..W-1} (T - s - m) forwards, times 2 rows with CFG; the update is Flow-GRPO's over the W window
transitions.

Credit (§2 steps 3-7): ``turning_point_credit`` on the table (``method.options.std_eps``, ``global_std``),
clipped to ``method.options.adv_clip_max``, then each rollout batch's (n, W) advantages are placed at its own
window's transitions (its row's ``window_start``), so column j of the (N, T) result is transition j.

Balancing pools (``balance_pool``). The authors balance turning points within one process's rollout
batch (YunzeTong/TurningPoint-GRPO ``scripts/my_train_sd3_fast_with_op3.py``: per sampled batch, before
any gather; 9 rows at the released scale). ``"batch"`` (default) does the same on flowrl's rollout
batches, taken as blocks of ``sample.batch_size`` consecutive samples in global order: each process's own
rollout batches whenever its share of the iteration is a multiple of ``sample.batch_size`` (the released
layout: 36 = 4 x 9 per GPU), and in every case independent of the number of processes, so one process and
two give the same credit. ``"iteration"`` pools all N samples: it keeps more turning points (those with the
largest |Δ| of the whole iteration) and, unlike ``"batch"``, does not change when ``sample.batch_size`` (a
memory knob) does; an ablation, not the authors' rule. Ties in |Δ| are the norm (all of a sample's turning
points share its Δ): ``balance_turning_points`` keeps the earlier sample in global order, then the earlier
step.

Where each batch's window sits: ``explore`` records every row's window start as an ``Experience.info``
column (``window_start``), which the trainer gathers over processes like the rewards; ``credit`` reads it,
and the rows come in global order, so credit is a pure function of its columns on every process.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flowrl.advantages import clip_advantages
from flowrl.configkit import ConfigError
from flowrl.credit.dense import completion_table
from flowrl.credit.turning_point import TurningPointCredit, turning_point_credit
from flowrl.media import MediaKind
from flowrl.methods.base import Context, Experience, PromptBatch
from flowrl.methods.flow_grpo import FlowGRPO
from flowrl.methods.options import AdvantageClipOptions, GroupZScoreOptions, PolicyOptions, check_knobs
from flowrl.methods.seam import Advantages, RewardTable
from flowrl.plan import StepPlan, make_plan

SDE_KINDS = ("cps", "flow_sde", "dance_sde")


@dataclass
class TPGRPOOptions(PolicyOptions, GroupZScoreOptions, AdvantageClipOptions):
    """Flow-GRPO's loss and group z-score knobs (clip_range, beta, global_std, std_eps, adv_clip_max), and its own
    window: ``sde_type``, ``noise_level``, ``window_size`` and ``window_range`` are TP-GRPO's, which the
    ``sample.*`` keys never set. ``window_size`` in particular is not Flow-GRPO's: its None is T - 1 (a window
    always; Flow-GRPO's 0 is no window), so these options do not extend ``FlowGRPOOptions``."""

    sde_type: str = "cps"  # the window's step (SD3 runs: CPS; the FLUX runs used flow_sde with a = 0.8)
    noise_level: float = 0.7  # a of the window's SDE
    window_size: int | None = None  # W; None: T - 1 (the released (0, 9) at T = 10: the last step is ODE)
    window_range: list[int] | None = None  # [lo, hi] the window lies in; None: [0, W] (it starts at step 0)
    eta: float = 1.0  # η: a turning point's reward is η (R_W - R_k)
    first_step: bool = True  # the first-step rule at k = 0
    consistency: bool = True  # the rest of the trajectory must keep the step's direction
    balance: bool = True  # keep min(n+, n-) turning points of each sign of Δ per balancing pool
    drop_incremental: bool = True  # at a turning point drop d_k (False: r_k = d_k + η (R_W - R_k))
    baseline_noise: str = "shared"  # R_0's pure ODE: "shared" initial latent (paper) | "independent" (code)
    balance_pool: str = "batch"  # balancing pool: each rollout "batch" (the code) | the whole "iteration"

    def __post_init__(self):
        check_knobs(self)
        if self.sde_type not in SDE_KINDS:
            raise ConfigError(f"method.options.sde_type: {self.sde_type!r} is not one of {', '.join(SDE_KINDS)}")
        if self.noise_level <= 0:
            raise ConfigError(f"method.options.noise_level: must be > 0, got {self.noise_level}")
        if self.window_size is not None and self.window_size < 1:
            raise ConfigError(f"method.options.window_size: must be >= 1 (or null for T - 1), got {self.window_size}")
        if self.window_range is not None:
            r = self.window_range
            if len(r) != 2 or not 0 <= r[0] < r[1] or (self.window_size is not None and r[1] - r[0] < self.window_size):
                raise ConfigError(
                    f"method.options.window_range: {r} must be [lo, hi] with 0 <= lo and hi - lo >= window_size"
                )
        if self.eta <= 0:
            raise ConfigError(f"method.options.eta: must be > 0, got {self.eta}")
        if self.baseline_noise not in ("shared", "independent"):
            raise ConfigError(
                f"method.options.baseline_noise: {self.baseline_noise!r} is not one of shared, independent"
            )
        if self.balance_pool not in ("batch", "iteration"):
            raise ConfigError(f"method.options.balance_pool: {self.balance_pool!r} is not one of batch, iteration")


class TPGRPO(FlowGRPO):
    name = "tp_grpo"
    # one latent tensor per sample: joint audio-video latents (a mapping of modalities) are not taken yet
    media = (MediaKind.IMAGE, MediaKind.VIDEO, MediaKind.AUDIO)
    Options = TPGRPOOptions
    default_credit = "turning_points"

    def __init__(self, cfg):
        super().__init__(cfg)
        o, n = self.options, cfg.sample.num_steps
        self.window_size = o.window_size if o.window_size is not None else max(1, n - 1)
        lo, hi = o.window_range if o.window_range is not None else (0, self.window_size)
        if self.window_size > n:
            raise ConfigError(f"method.options.window_size: {self.window_size} exceeds sample.num_steps={n}")
        if hi - lo < self.window_size:
            raise ConfigError(
                f"method.options.window_range: [{lo}, {hi}] is shorter than window_size={self.window_size}"
            )
        if hi > n:
            raise ConfigError(f"method.options.window_range: [{lo}, {hi}] ends past sample.num_steps={n}")
        self.window_range = (lo, hi)
        self.last_credit: TurningPointCredit | None = None  # the latest credit pass (its ``metrics()``)

    # ------------------------------------------------------------------------------------ exploration
    def records(self) -> frozenset[str]:
        return super().records() | {"window_completions"}

    def plan(self, ctx: Context, batch: PromptBatch) -> StepPlan:
        """The batch's plan: its SDE window drawn from the stream ("plan", batch position)."""
        o = self.options
        return make_plan(
            ctx.sigmas(),
            o.sde_type,
            o.noise_level,
            self.window_size,
            self.window_range,
            1.0,
            ctx.rng("plan", batch.position),
        )

    @staticmethod
    def window_start(plan: StepPlan) -> int:
        return plan.trained_indices[0]

    keep_all_states = True  # intermediate states are completed and scored

    def explore(self, ctx: Context, batch: PromptBatch) -> Experience:
        exp = super().explore(ctx, batch)  # the rollout along self.plan, SDE draws from ("sde", position)
        traj, w = exp.traj, self.window_size
        start = self.window_start(traj.plan)
        sigmas = ctx.sigmas()
        score = {"final": traj.final}
        if w > 1:  # the state right after window step m = 1..W-1, completed along the rest of the schedule
            score["completion"] = torch.stack(
                [ctx.complete(traj.states[:, start + m], sigmas[start + m :], batch.cond) for m in range(1, w)], dim=1
            )  # (B, W-1, C, H, W)
        if self.options.baseline_noise == "shared":
            x0 = batch.noise  # the rollout's own initial latent, the same tensor
        else:
            x0 = ctx.adapter.initial_noise(len(batch.noise), ctx.generator("tp_baseline", batch.position))
            x0 = x0.to(batch.noise.device, batch.noise.dtype)
        score["pure_ode"] = ctx.complete(x0, sigmas, batch.cond)[:, None]  # R_0
        return Experience(traj, score, {"window_start": torch.full((len(batch.prompts),), float(start))})

    # ------------------------------------------------------------------------------------ credit
    def table(self, rewards: dict[str, torch.Tensor]) -> torch.Tensor:
        """(N, W+1): R_0 (pure ODE), R_1..R_{W-1} (completions), R_W (the rollout's own reward)."""
        n = len(rewards["final"])
        middle = rewards["completion"] if self.window_size > 1 else rewards["final"].new_zeros(n, 0)
        return completion_table(rewards["pure_ode"][:, 0], middle, rewards["final"])

    def turning_point_credit(self, table: RewardTable) -> Advantages:
        """The credit part ``turning_points``: (N, T), each rollout batch's window advantages at its own
        window's transitions; the detection figures as metrics."""
        t = o = self.options
        rewards, group_ids = table.columns, table.group_ids
        n, num_steps = len(group_ids), self.cfg.sample.num_steps
        pools = self.balance_pools(n)
        tp = turning_point_credit(
            self.table(rewards),
            group_ids,
            eta=o.eta,
            first_step=o.first_step,
            consistency=o.consistency,
            balance=o.balance,
            pools=pools,
            drop_incremental=o.drop_incremental,
            eps=t.std_eps,
            global_std=t.global_std,
        )
        self.last_credit = tp
        adv = clip_advantages(tp.advantages, t.adv_clip_max)  # (N, W)
        columns = rewards["window_start"].long()[:, None] + torch.arange(self.window_size)[None]  # (N, W)
        values = adv.new_zeros(n, num_steps).scatter_(1, columns, adv)  # column j: transition j of the row's plan
        return Advantages(values, metrics=tp.metrics())

    def balance_pools(self, n: int) -> torch.Tensor | None:
        """(N,) each sample's balancing pool: its rollout batch, the block of ``sample.batch_size``
        consecutive samples in global order it falls in (``"batch"``); None for one pool (``"iteration"``)."""
        if self.options.balance_pool == "iteration":
            return None
        return torch.arange(n) // self.cfg.sample.batch_size
