"""Flow-GRPO (arXiv 2505.05470): SDE rollouts, group-normalised trajectory advantages, PPO-clip + KL.

On the method seam (``flowrl.methods.base``): ``explore`` walks the step plan (``method.options``: SDE kind,
noise level, window; ``flowrl.methods.options.FlowGRPOOptions``) from the batch's noise; ``credit`` normalises the final reward within groups;
``transition_loss`` is the clipped ratio of the recomputed log-prob plus beta times the exact Gaussian KL
to the reference. Other methods subclass it and replace one of these.

Its parts (``flowrl.methods.parts``): credit ``group_zscore``, loss ``ppo_clip``. ``method.loss=ratio_norm`` swaps
the ratio for GRPO-Guard's RatioNorm (``flowrl.losses.ratio_norm_clip_loss``) in this method and every method that
inherits ``policy_loss`` (Pref-GRPO, TP-GRPO, DenseGRPO, G²RPO, E-GRPO; the recipe ``grpo_guard`` is Flow-GRPO with
it): the rollout then keeps each transition's mean.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from flowrl.advantages import clip_advantages, group_advantages
from flowrl.configkit import ConfigError
from flowrl.losses import PolicyLossOutput, gaussian_kl, ppo_clip_loss, ratio_norm_clip_loss
from flowrl.methods.base import Context, Experience, MethodBase, PromptBatch, TransitionLoss
from flowrl.methods.options import FlowGRPOOptions
from flowrl.methods.parts import joint_pipeline
from flowrl.methods.seam import Advantages, Needs, RewardTable
from flowrl.pipelines.base import Conditioning
from flowrl.plan import StepPlan, make_plan, window_start
from flowrl.rollout import Trajectory
from flowrl.sde import StepOutput

# the step kinds whose log-prob is an exact Gaussian with a mean and a std (RatioNorm needs both)
GAUSSIAN_KINDS = ("flow_sde", "dance_sde")


def group_zscore_credit(method: MethodBase, table: RewardTable) -> Advantages:
    """The credit part ``group_zscore``: the final reward z-scored within its group (``method.options.global_std``,
    ``std_eps``), clipped to ``method.options.adv_clip_max``; (N,)."""
    t = method.options
    adv = group_advantages(table.columns["final"], table.group_ids, global_std=t.global_std, eps=t.std_eps)
    return Advantages(clip_advantages(adv, t.adv_clip_max))


def ppo_clip_policy(
    method: MethodBase, traj: Trajectory, j: int, new: StepOutput, advantages: torch.Tensor
) -> PolicyLossOutput:
    """The loss part ``ppo_clip``: the clipped surrogate of the recomputed log-prob (``method.options.clip_range``)."""
    return ppo_clip_loss(new.log_prob, traj.log_probs[:, j], advantages, method.options.clip_range)


def ratio_norm_policy(
    method: MethodBase, traj: Trajectory, j: int, new: StepOutput, advantages: torch.Tensor
) -> PolicyLossOutput:
    """The loss part ``ratio_norm``: GRPO-Guard's corrected ratio, the clipped loss divided by |Δ_j|."""
    if traj.means is None:
        raise RuntimeError(f"method.loss=ratio_norm: method {method.name}'s rollout kept no transition means")
    dt = float(traj.plan.sigma[j] - traj.plan.sigma_next[j])
    return ratio_norm_clip_loss(
        new.log_prob,
        traj.log_probs[:, j],
        new.mean,
        traj.means[:, j].to(new.mean.device),
        new.std,
        advantages,
        method.options.clip_range,
        dt,
    )


class FlowGRPO(MethodBase):
    """Flow-GRPO, and the base of the SDE family. Its own extension points (the SDE family's knobs): ``plan``
    (the step plan of a batch), ``keep_means`` / ``keep_all_states`` (what the rollout records), ``policy_loss``
    (the loss part on a recomputed step) and ``assemble`` (policy loss plus the KL)."""

    name = "flow_grpo"
    Options = FlowGRPOOptions
    default_credit = "group_zscore"
    default_loss = "ppo_clip"
    hosts_policy_loss = True

    def __init__(self, cfg):
        super().__init__(cfg)
        if "gaussian_means" in self.parts.loss.requires:
            kind = self.step_kind()
            if kind not in GAUSSIAN_KINDS:
                raise ConfigError(
                    f"method.options.sde_type: {self.name} needs a Gaussian step with an exact log-prob for "
                    f"method.loss={self.parts.loss.name} ({', '.join(GAUSSIAN_KINDS)}), got {kind!r}"
                )
            if joint_pipeline(cfg):
                raise ConfigError(
                    f"method.loss={self.parts.loss.name}: model.pipeline={cfg.model.pipeline} steps joint latents "
                    "with one std per modality, where RatioNorm's single step scale is not defined"
                )
            self.keep_means = True

    def records(self) -> frozenset[str]:
        return frozenset({"log_probs", "gaussian_means"})

    def step_kind(self) -> str:
        """The SDE kind of the trained steps (``method.options.sde_type``)."""
        return self.options.sde_type

    def needs(self) -> Needs:
        return Needs(media=self.media, reference=self.options.beta > 0, metrics=self.parts.credit.metrics)

    def plan(self, ctx: Context, batch: PromptBatch) -> StepPlan:
        """The batch's step plan; a window start is drawn from the stream ("plan", batch position), or is the
        iteration's (``window_schedule``: one draw from the stream ("window", 0), or the progressive position)."""
        s = self.options
        sigmas = ctx.sigmas()
        window_range = tuple(s.window_range) if s.window_range is not None else None
        start = None
        if s.window_size > 0 and s.window_schedule != "batch":
            # MixGRPO's range by default: max_timesteps = sampling_steps - 2 (its train_grpo_flux.py)
            lo, hi = window_range if window_range is not None else (0, len(sigmas) - 3)
            window_range = (lo, hi)
            rng = ctx.rng("window", 0)
            start = window_start(
                s.window_schedule, ctx.iteration, s.window_size, lo, hi, s.window_every, s.window_wrap, rng
            )
        return make_plan(
            sigmas,
            s.sde_type,
            s.noise_level,
            s.window_size,
            window_range,
            s.timestep_fraction,
            ctx.rng("plan", batch.position),
            start=start,
            tail=s.ode_tail,
        )

    # keep each transition's rollout mean in the trajectory (a loss that needs it, e.g. GRPO-Guard's)
    keep_means = False
    # keep every state of the rollout, not only those of the trained transitions and the final one (a method
    # that completes or scores intermediate states: DenseGRPO, TP-GRPO)
    keep_all_states = False

    def explore(self, ctx: Context, batch: PromptBatch) -> Experience:
        traj = ctx.rollout(
            self.plan(ctx, batch),
            batch.noise,
            batch.cond,
            batch.group_ids,
            ctx.generator("sde", batch.position),
            keep_means=self.keep_means,
            keep_all_states=self.keep_all_states,
        )
        return Experience(traj, {"final": traj.final})

    def transition_loss(
        self, ctx: Context, traj: Trajectory, j: int, cond: Conditioning, advantages: torch.Tensor
    ) -> TransitionLoss:
        x, x_next = traj.pair(j)
        inputs = ctx.model_inputs(cond)
        new = ctx.transition(traj.plan, j, x, inputs, x_next)
        return self.assemble(
            traj, j, new, advantages, lambda: ctx.reference_transition(traj.plan, j, x, inputs, x_next).mean
        )

    def policy_loss(self, traj: Trajectory, j: int, new: StepOutput, advantages: torch.Tensor) -> PolicyLossOutput:
        """The loss part (``method.loss``: ``ppo_clip``, ``ratio_norm``) on transition ``j`` given its
        recomputed step ``new``."""
        return self._loss(self, traj, j, new, advantages)

    def assemble(
        self,
        traj: Trajectory,
        j: int,
        new: StepOutput,
        advantages: torch.Tensor,
        reference_mean: Callable[[], torch.Tensor],
    ) -> TransitionLoss:
        """Policy loss plus beta times the exact Gaussian KL to ``reference_mean()`` (called only when
        beta > 0), with the figures the trainer logs."""
        t = self.options
        pg = self.policy_loss(traj, j, new, advantages)
        loss, kl = pg.loss, torch.zeros(())
        if t.beta > 0:
            kl = gaussian_kl(new.mean, reference_mean(), new.std).mean()
            loss = loss + t.beta * kl
        gap = (new.log_prob.detach() - traj.log_probs[:, j]).abs().max()  # read with the update's statistics
        return TransitionLoss(loss, pg.loss.detach(), kl.detach(), pg.clip_frac, pg.approx_kl, pg.ratio.mean(), gap)
