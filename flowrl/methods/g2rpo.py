"""G²RPO (Granular-GRPO, arXiv 2510.01982; ``specs/addon_methods.md`` §3): one SDE step off a shared anchor,
credited by ODE tails at several granularities.

Exploration, per prompt group (``whole_groups``: every rollout batch holds whole groups):

1. **Anchor.** One deterministic ODE trajectory per group from the group's initial latent (its first
   member's: with ``sample.same_noise_in_group`` every member's), on one row per group.
2. **Branches.** For each trained step k (``trained_steps``, default the first half of the schedule) every
   member takes one SDE transition σ_k -> σ_{k+1} from the anchor state a_k; members differ only in their
   noise, drawn from the stream ("branch<k>", batch position). The velocity at a_k is computed once per
   group and broadcast (``Context.shared_transition``), in the rollout and again in the update.
3. **Tails.** Each branch end is ODE-completed at every granularity λ (``flowrl.credit.granular.ode_tail``:
   the stride-λ sub-schedule, ending in the x0-prediction) and scored.

Scored names: ``"final"`` is the tail of the first branch at the first granularity (the sample a member
stands for; ``reward/mean`` is its reward), ``"branch"`` the other K·|Λ| - 1 in (k, λ) order, so the reward
calls are exactly G·K·|Λ| per group. Credit: per-(k, λ, reward) z-scores within groups (the code's unbiased
std + ``eps``), summed over granularities and over rewards, each reward's z-score multiplied by its weight
(1: the code's plain sum), clipped to ``method.options.adv_clip_max``: (N, K), column k the k-th branch. Loss:
Flow-GRPO's clipped ratio (and KL when beta > 0) on the branch transition, with the shared-input forward.
One optimizer step per branch k over all units (``schedule``).

NFEs per group, times 2 with CFG: T (anchor) + K (branch forwards, shared) + G·Σ_{k,λ} |tail(k, λ)|.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from flowrl.advantages import clip_advantages
from flowrl.configkit import ConfigError
from flowrl.credit.granular import granular_zscores, ode_tail
from flowrl.media import MediaKind
from flowrl.methods.base import Context, Experience, PromptBatch, TransitionLoss
from flowrl.methods.flow_grpo import FlowGRPO
from flowrl.methods.options import AdvantageClipOptions, PolicyOptions, check_knobs
from flowrl.methods.seam import Advantages, Needs, RewardTable, TrainEntry
from flowrl.pipelines.base import Conditioning, select
from flowrl.plan import StepPlan, ode_plan
from flowrl.rollout import Trajectory
from flowrl.sde import StepOutput

SDE_KINDS = ("flow_sde", "dance_sde", "cps")


def group_rows(group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(first, rows): the index of each distinct group's first row (n,), and each row's group among them (B,)."""
    ids = group_ids.long().cpu()
    unique, rows = torch.unique(ids, return_inverse=True)
    first = torch.full((len(unique),), len(ids), dtype=torch.long).scatter_reduce(
        0, rows, torch.arange(len(ids)), reduce="amin"
    )
    return first, rows


@dataclass
class G2RPOOptions(PolicyOptions, AdvantageClipOptions):
    """Flow-GRPO's loss knobs (clip_range, beta) and advantage clip, and its own branch step: ``sde_type`` and
    ``noise_level`` are G²RPO's, which ``sample.sde_type`` / ``sample.noise_level`` never set."""

    sde_type: str = "flow_sde"  # the branch step (the code: Flow-GRPO's SDE, a = 0.7)
    noise_level: float = 0.7  # a of the branch step
    trained_steps: list[int] | None = None  # M; None: the first half of the schedule, 0 .. T//2 - 1
    granularities: list[int] = (1, 2)  # Λ (the released scripts; the paper's best is [1, 2, 3])
    eps: float = 1e-8  # z-score: (R - mean) / (std + eps), the code's
    unbiased: bool = True  # the code's unbiased std (False: population std)

    def __post_init__(self):
        check_knobs(self)
        self.granularities = list(self.granularities)
        if self.sde_type not in SDE_KINDS:
            raise ConfigError(f"method.options.sde_type: {self.sde_type!r} is not one of {', '.join(SDE_KINDS)}")
        if self.noise_level <= 0:
            raise ConfigError(f"method.options.noise_level: must be > 0, got {self.noise_level}")
        if (
            not self.granularities
            or any(g < 1 for g in self.granularities)
            or len(set(self.granularities)) < len(self.granularities)
        ):
            raise ConfigError(f"method.options.granularities: {self.granularities} must be distinct integers >= 1")
        if self.trained_steps is not None and (
            not self.trained_steps
            or len(set(self.trained_steps)) < len(self.trained_steps)
            or min(self.trained_steps) < 0
        ):
            raise ConfigError(f"method.options.trained_steps: {self.trained_steps} must be distinct steps >= 0")
        if self.eps < 0:
            raise ConfigError(f"method.options.eps: must be >= 0, got {self.eps}")


class G2RPO(FlowGRPO):
    name = "g2rpo"
    # one latent tensor per sample: joint audio-video latents (a mapping of modalities) are not taken yet
    media = (MediaKind.IMAGE, MediaKind.VIDEO, MediaKind.AUDIO)
    Options = G2RPOOptions
    default_credit = "granular"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.num_steps = cfg.sample.num_steps
        self.weights = {name: float(w) for name, w in cfg.reward.items() if w != 0}
        self.num_branches = 0  # K, known once the schedule is (the first exploration)
        steps = self.options.trained_steps
        if steps is not None and max(steps) >= self.num_steps:
            raise ConfigError(
                f"method.options.trained_steps: {max(steps)} is past the last step of sample.num_steps={self.num_steps}"
            )

    def records(self) -> frozenset[str]:
        return super().records() | {"branches"}

    def needs(self) -> Needs:
        return replace(super().needs(), whole_groups=True)  # one anchor per prompt group

    def branches(self, sigmas: torch.Tensor) -> list[tuple[int, int]]:
        """(start, end) state indices of every branch transition: G²RPO's k -> k + 1 for k in M
        (``sigmas``: the full schedule, which E-GRPO's merge lengths depend on)."""
        steps = self.options.trained_steps
        steps = list(range(self.num_steps // 2 or 1)) if steps is None else sorted(steps)
        return [(k, k + 1) for k in steps]

    def branch_plan(self, sigmas: torch.Tensor) -> StepPlan:
        """One trained transition per branch, σ_start -> σ_end; ``sigma_at_one`` the full schedule's σ_1."""
        sigmas = sigmas.float().cpu()
        pairs = self.branches(sigmas)
        k = len(pairs)
        return StepPlan(
            sigma=sigmas[[a for a, _ in pairs]],
            sigma_next=sigmas[[b for _, b in pairs]],
            kinds=(self.options.sde_type,) * k,
            noise_levels=torch.full((k,), float(self.options.noise_level)),
            train=torch.ones(k, dtype=torch.bool),
            sigma_at_one=float(sigmas[1]),
        )

    # ------------------------------------------------------------------------------------ exploration
    def explore(self, ctx: Context, batch: PromptBatch) -> Experience:
        sigmas = ctx.sigmas()
        first, rows = group_rows(batch.group_ids)
        anchor_cond = select(batch.cond, first)
        anchor = ctx.rollout(
            ode_plan(sigmas), batch.noise[first.to(batch.noise.device)], anchor_cond, batch.group_ids[first], None
        )  # (n, T+1): one ODE trajectory per group
        plan = self.branch_plan(sigmas)
        self.num_branches = len(plan)
        inputs, outputs, log_probs, means, scored = [], [], [], [], []
        for k, (start, end) in enumerate(self.branches(sigmas)):
            a_k = anchor.states[:, start]
            with torch.no_grad():
                out = ctx.shared_transition(
                    plan, k, a_k, anchor_cond, rows, generator=ctx.generator(f"branch{start}-{end}", batch.position)
                )
            inputs.append(a_k.index_select(0, rows.to(a_k.device)))
            outputs.append(out.x_next)
            log_probs.append(out.log_prob)
            means.append(out.mean)  # kept for method.loss=ratio_norm (keep_means)
            for lam in self.options.granularities:
                tail = ode_tail(sigmas, end, lam)
                scored.append(
                    ctx.rollout(tail.plan, out.x_next, batch.cond, batch.group_ids, None).final
                    if len(tail.plan)
                    else out.x_next
                )
        traj = Trajectory(
            torch.stack(inputs, 1),
            torch.stack(log_probs, 1),
            batch.group_ids,
            plan,
            next_states=torch.stack(outputs, 1),
            means=torch.stack(means, 1) if self.keep_means else None,
        )
        score = {"final": scored[0]}
        if len(scored) > 1:
            score["branch"] = torch.stack(scored[1:], 1)  # (B, K·L - 1, C, H, W)
        return Experience(traj, score)

    # ------------------------------------------------------------------------------------ credit
    def table(self, rewards: dict[str, torch.Tensor], name: str) -> torch.Tensor:
        """(N, K, L) rewards of every branch and granularity under reward column ``name`` ("final" or a
        reward's own "final/<reward>")."""
        n, lams = len(rewards["final"]), len(self.options.granularities)
        rest = name.replace("final", "branch", 1)
        parts = [rewards[name].reshape(n, 1)] + ([rewards[rest]] if rest in rewards else [])
        return torch.cat(parts, 1).view(n, -1, lams)

    def granular_credit(self, table: RewardTable) -> Advantages:
        """The credit part ``granular``: (N, K), column k the k-th branch."""
        o = self.options
        rewards, group_ids = table.columns, table.group_ids
        tables = torch.stack([self.table(rewards, f"final/{name}") for name in self.weights], -1)  # (N, K, L, C)
        z = granular_zscores(tables, group_ids, unbiased=o.unbiased, eps=o.eps)  # (N, K, L, C)
        weights = torch.tensor(list(self.weights.values()), dtype=z.dtype)
        adv = (z * weights).sum(dim=(-2, -1))  # Σ_λ Σ_c w_c z: the code's plain sum at weight 1
        return Advantages(clip_advantages(adv, self.options.adv_clip_max))

    # ------------------------------------------------------------------------------------ update
    def schedule(self, num_units: int) -> list[list[TrainEntry]]:
        """One optimizer step per branch k, over every unit."""
        return [[TrainEntry(q, k) for q in range(num_units)] for k in range(self.num_branches)]

    def transition_loss(
        self, ctx: Context, traj: Trajectory, j: int, cond: Conditioning, advantages: torch.Tensor
    ) -> TransitionLoss:
        x, x_next = traj.pair(j)
        first, rows = group_rows(traj.prompt_ids)
        x_shared, cond_shared = x.index_select(0, first.to(x.device)), select(cond, first)
        new: StepOutput = ctx.shared_transition(traj.plan, j, x_shared, cond_shared, rows, x_next=x_next)

        def reference_mean() -> torch.Tensor:
            with torch.no_grad(), ctx.reference_weights() as model:
                return ctx.shared_transition(traj.plan, j, x_shared, cond_shared, rows, x_next=x_next, model=model).mean

        return self.assemble(traj, j, new, advantages, reference_mean)
