"""AV-GRPO (arXiv 2609.29816): modality-anchored, decoupled GRPO for joint audio-video generators (LTX-2).

On the method seam, for joint latents ``{"video", "audio"}`` (``flowrl.latents``); the math is pure functions with
their oracles: the credit in ``flowrl.credit.av_grpo``, the loss ``flowrl.losses.av_grpo_loss``, the capped noise
``flowrl.sde.capped_noise``; the phase schedule is here (``PhaseSchedule``). One flowrl iteration is one AV-GRPO step;
``../shared/specs/addon_methods.md`` section 7 and its "Corrections" section (the authors' code,
zhiyuxu03/AV-GRPO ``ltx-trainer``, wins over the older text).

* **Phases** (``PhaseSchedule``): the trained modality alternates, ``steps_per_phase`` iterations of video then
  as many of audio on the same prompts (``begin`` points the audio phase at the video phase's prompt draws); the
  optimizer state is cleared at every switch (``end``), and the phase travels in
  checkpoints (``state_dict``).
* **Anchor**: per prompt group, one deterministic joint ODE trajectory of both modalities (the group's first
  member's noise, ``sample.guidance_scale``), every step's states cached.
* **Anchored rollouts**: every member has its own noise; the frozen modality is pinned to the anchor's state at
  every step (``rollout(pinned=...)``), so it is bitwise the same across the group; the trained one takes
  Flow-GRPO SDE steps at its own noise level (``noise_video`` 0.02, ``noise_audio`` 0.8, as the code) with the
  per-step std capped at ``max_std`` (0.5) by lowering that step's noise level, so the drift uses the capped g
  too. At sigma = 1 the code clamps 1 - t at 1e-5 (g = a sqrt(1e5)), so the first step is capped to std 0.5 in
  both phases (no sigma_1 substitute). Every transition trains (the code's SDE at all steps).
* **Trainable sets**: the video phase trains the video tower and the audio-to-video cross-attention, the audio
  phase the audio tower and the video-to-audio one (``adapter.tower_of``); the others get no gradient at the
  optimizer step. The a2v / v2a scale-shift tables of LTX-2 are shared by both directions (one parameter), so
  they train in both phases (flowrl's choice; the code's split by module names cannot separate them either).
  With ``frozen_input=dropped`` only the trained tower trains: the code's forward never reaches the cross-modal
  attention or those tables, so they get no gradient there (its AdamW skips them).
* **Credit** (``modality_advantages``): the phase's rewards (``video_rewards`` / ``audio_rewards``, each a
  reward's own column) z-scored per group (population std + 1e-8) and averaged, with the fallbacks (video: the
  ``vq_reward`` alone where its group mean <= 0; audio: the ``clap_reward`` alone where its mean < 0.4), then
  z-scored again (sample std + 1e-8). A NaN metric makes its group's advantages NaN (as the code); a NaN drops
  the step (zero advantages, no update) and switches the phase at once (``PhaseSchedule.on_nan``). A phase
  whose every reward is an audio-video score that never reads the prompt (``reads_prompt = False``: pure sync
  such as ``av_sync`` or ``desync``) is refused unless ``allow_promptless_phase_reward``: sync alone is met
  by a collapsed video as well as by a good one.
* **Optimizer steps** (``schedule``): the code steps AdamW (clipped) after every (sample, transition) backward,
  sample order then transition order: one per group member i and transition k, training member i of every
  prompt group at k (the code's processes, one prompt each, averaged by DDP). ``optimizer_steps=train`` uses
  ``train.optimizer_steps_per_iteration`` instead. Every step of one AV-GRPO step runs at that step's rate
  (``learning_rate``): the first at ``first_learning_rate`` (the code's yaml: 1e-5; default the base rate),
  then ``train.learning_rate`` under ``train.lr_schedule`` counted in AV-GRPO steps (the code: 1e-6, one
  warm-up step, cosine to 0 over the run).
* **Loss**: lambda_pol PPO-clip (clip 0.2) with lambda_pol = sqrt(t / (|dt| (1 - t))), plus beta lambda_rw KL,
  beta 0.01 (video) / 0.002 (audio), lambda_rw = t / (|dt| (1 - t)) in the video phase and 1 in the audio one.
  The KL is the exact Gaussian KL of the two step means under the step's own (capped) g, which equals
  lambda_KL MSE(v, v_ref) (``flowrl.losses.av_grpo_loss``, pinned in ``tests/credit/test_credit_av_grpo.py``); the
  authors' code uses the uncapped g in lambda_KL.
* **The training forward** gets the stored joint state, the frozen modality's part being the anchor's state
  that the rollout saw, at the rollout's guidance, so the first ratio is 1 (flowrl's default: the
  recomputed policy is the one that sampled). ``frozen_input=dropped`` is the authors' code: one conditional
  pass (no CFG, no STG, whatever ``sample.guidance_scale``) with the frozen modality left out (the adapter's
  ``isolate_modalities``), so the ratio is not 1 at the first update and the cross-modal attention gets no
  gradient (it does not train then); the gap is logged (``policy/onpolicy_logp_diff``) and the on-policy check
  does not stop the run.
* **Not as the code** (``docs/methods.md``): the frozen partner at the end of a rollout is the anchor's final
  state (the code decodes the anchor's last cached input, at sigma_{T-1}); the initial noises come from
  flowrl's seeded streams, the anchor starting from its group's first member's noise (the code: 42 + rank for
  the anchor, 42 + 8 rank + i for member i, each reused at every step).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace

import torch

from flowrl.checks import PHASES
from flowrl.configkit import ConfigError
from flowrl.credit.av_grpo import (
    BETA,
    CLAP_FLOOR,
    CLIP_RANGE,
    LR_WARMUP_STEPS,
    NOISE_LEVEL,
    PROMPTS_PER_CYCLE,
    STEPS_PER_PHASE,
    TOTAL_STEPS,
    VQ_FLOOR,
    modality_advantages,
)
from flowrl.losses import av_grpo_loss
from flowrl.lr import lr_factor
from flowrl.media import MediaKind
from flowrl.methods.base import Context, Experience, MethodBase, PromptBatch, TransitionLoss
from flowrl.methods.seam import Advantages, Ending, Needs, RewardTable, TrainEntry, Turn
from flowrl.pipelines.base import Conditioning
from flowrl.plan import StepPlan, make_plan, ode_plan
from flowrl.rollout import Trajectory
from flowrl.sde import MAX_STD, capped_noise, flow_sde_g

MODALITIES = ("video", "audio")
# which parameter groups (``adapter.tower_of``) each phase trains
PHASE_GROUPS = {"video": ("video", "audio_to_video", "shared"), "audio": ("audio", "video_to_audio", "shared")}


@dataclass
class AVGRPOOptions:
    start: str = "video"  # the first phase's trained modality
    steps_per_phase: int = 4  # iterations (AV-GRPO steps) per phase
    noise_video: float = NOISE_LEVEL["video"]  # the SDE noise level a of the video while it trains
    noise_audio: float = NOISE_LEVEL["audio"]  # the SDE noise level a of the audio while it trains
    max_std: float = MAX_STD  # cap on a step's std g sqrt(|dt|)
    clip_range: float = CLIP_RANGE  # the PPO clip of AV-GRPO's loss (train.clip_range never sets it)
    beta_video: float = BETA["video"]  # KL weight in the video phase
    beta_audio: float = BETA["audio"]  # KL weight in the audio phase
    video_rewards: list[str] = field(default_factory=list)  # the video phase's rewards (names of `reward`); empty: all
    audio_rewards: list[str] = field(default_factory=list)  # the audio phase's rewards; empty: all
    vq_reward: str | None = None  # video-phase fallback: this reward alone where its group mean <= vq_floor
    clap_reward: str | None = None  # audio-phase fallback: this reward alone where its group mean < clap_floor
    vq_floor: float = VQ_FLOOR  # the video fallback's threshold on the vq_reward's group mean
    clap_floor: float = CLAP_FLOOR  # the audio fallback's threshold on the clap_reward's group mean
    # the training forward's frozen modality: "anchor" feeds the anchored state the rollout saw, at the rollout's
    # guidance (the first ratio is 1); "dropped" is the authors' code: one conditional pass (no CFG, no STG) with
    # the frozen modality left out (the adapter's isolate_modalities: no cross-modal attention), which is not the
    # rollout's policy: the gap is logged as policy/onpolicy_logp_diff, not checked
    frozen_input: str = "anchor"
    # "per_sample_transition": one clipped AdamW step after each (sample, transition), sample order then
    # transition order (the code); "train": train.optimizer_steps_per_iteration steps over the rollout batches
    optimizer_steps: str = "per_sample_transition"
    # the first AV-GRPO step's learning rate (the code's yaml: 1e-5, before its loop sets 1e-6); null: the
    # base rate train.learning_rate
    first_learning_rate: float | None = None
    # accept a phase whose every reward is an audio-video score that never reads the prompt (pure sync)
    allow_promptless_phase_reward: bool = False


class AVGRPO(MethodBase):
    name = "av_grpo"
    Options = AVGRPOOptions
    media = (MediaKind.AUDIO_VIDEO,)
    # its metrics (``Part.metrics``): the phase (1: video trains), the groups on a fallback, the transitions whose
    # std the cap lowered, NaN switches
    default_credit = "modality_zscore"

    def __init__(self, cfg):
        super().__init__(cfg)
        o = self.options
        if o.start not in MODALITIES:
            raise ConfigError(f"method.options.start: {o.start!r} is not one of video, audio")
        if o.frozen_input not in ("anchor", "dropped"):
            raise ConfigError(f"method.options.frozen_input: {o.frozen_input!r} is not one of anchor, dropped")
        if o.optimizer_steps not in ("per_sample_transition", "train"):
            raise ConfigError(
                f"method.options.optimizer_steps: {o.optimizer_steps!r} is not one of per_sample_transition, train"
            )
        if o.first_learning_rate is not None and not 0 < o.first_learning_rate < float("inf"):
            raise ConfigError(f"method.options.first_learning_rate: must be > 0 (or null), got {o.first_learning_rate}")
        if o.steps_per_phase < 1:
            raise ConfigError(f"method.options.steps_per_phase: must be >= 1, got {o.steps_per_phase}")
        for name in ("noise_video", "noise_audio", "max_std", "clip_range"):
            if not getattr(o, name) > 0:
                raise ConfigError(f"method.options.{name}: must be > 0, got {getattr(o, name)}")
        for name in ("beta_video", "beta_audio"):
            if getattr(o, name) < 0:
                raise ConfigError(f"method.options.{name}: must be >= 0, got {getattr(o, name)}")
        rewards = set(cfg.reward)
        for key in ("video_rewards", "audio_rewards"):
            unknown = [r for r in getattr(o, key) if r not in rewards]
            if unknown:
                raise ConfigError(
                    f"method.options.{key}: {unknown[0]!r} is not a configured reward ({', '.join(sorted(rewards))})"
                )
        for key, phase in (("vq_reward", "video"), ("clap_reward", "audio")):
            name = getattr(o, key)
            if name is not None and name not in self._phase_rewards(phase):
                raise ConfigError(f"method.options.{key}: {name!r} is not one of the {phase} phase's rewards")
        if not o.allow_promptless_phase_reward:
            for phase in MODALITIES:
                self._refuse_promptless(phase)
        self.schedule_state = PhaseSchedule(o.steps_per_phase, o.steps_per_phase, o.start)
        self._tower_of = None
        self._dropped = False
        self._capped = 0.0
        self._last: dict[str, float] = {}

    def records(self) -> frozenset[str]:
        return frozenset({"log_probs", "joint_phases"})

    def needs(self) -> Needs:
        o = self.options
        # frozen_input=dropped is by design not the rollout's forward: log the gap, do not stop on it
        dropped = (
            "method.options.frozen_input=dropped leaves the frozen modality out of the "
            "training forward (the authors' code); policy/onpolicy_logp_diff logs the gap"
        )
        return Needs(
            media=self.media,
            whole_groups=True,  # one anchor per prompt group
            reference=o.beta_video > 0 or o.beta_audio > 0,
            onpolicy_check=dropped if o.frozen_input == "dropped" else None,
            metrics=self.parts.credit.metrics,
            freezes_parameters=True,
        )

    def begin(self, iteration: int) -> Turn:
        """The step's prompt draw, both phases of a cycle using the cycle's ``steps_per_phase`` draws; and the
        phase's parameters (``_phase_trains``)."""
        s = self.schedule_state.state
        return Turn(prompts_of=s.cycle * self.options.steps_per_phase + s.step_in_phase, trains=self._phase_trains)

    def end(self) -> Ending:
        """The phase schedule advances; the optimizer state is cleared at a phase switch (or after ``on_nan``
        switched the phase already: the optimizer state goes with the phase)."""
        if self._dropped:
            self._dropped = False
            return Ending(reset_optimizer=True)
        return Ending(reset_optimizer=self.schedule_state.after_step())

    # ------------------------------------------------------------------ phases
    @property
    def phase(self) -> str:
        """The modality this iteration trains."""
        return self.schedule_state.state.phase

    @property
    def frozen(self) -> str:
        return "audio" if self.phase == "video" else "video"

    def _phase_rewards(self, phase: str) -> list[str]:
        own = self.options.video_rewards if phase == "video" else self.options.audio_rewards
        return list(own) or list(self.cfg.reward)

    def _refuse_promptless(self, phase: str) -> None:
        """The reward guard: a phase trained only on audio-video scores that never read the prompt (pure sync:
        ``av_sync``, ``desync``) is refused; a collapsed video can be perfectly in sync with its sound."""
        names = self._phase_rewards(phase)
        if not names or not all(_promptless(name) for name in names):
            return
        key = f"method.options.{phase}_rewards" if getattr(self.options, f"{phase}_rewards") else "reward"
        raise ConfigError(
            f"{key}: the {phase} phase's only rewards {names} are audio-video scores that never read "
            "the prompt (pure sync), which a collapsed video satisfies too: add a reward that reads "
            "the prompt, or set method.options.allow_promptless_phase_reward=true"
        )

    def schedule(self, num_units: int) -> list[list[TrainEntry]]:
        """One optimizer step per (group member i, transition k), i then k, each training member i of every
        prompt group at transition k (the code: each process's sample i, averaged over processes); or the
        default with ``optimizer_steps=train``."""
        if self.options.optimizer_steps == "train":
            return super().schedule(num_units)
        s = self.cfg.sample
        return [
            [TrainEntry(q, k, r) for q in range(num_units) for r in range(i, s.batch_size, s.group_size)]
            for i in range(s.group_size)
            for k in range(s.num_steps)
        ]

    def learning_rate(self, scheduled: float, optimizer_step: int) -> float:
        """The rate of every optimizer step of this AV-GRPO step (``av_grpo_learning_rate`` below):
        ``first_learning_rate`` at the first, then ``train.learning_rate`` under ``train.lr_schedule`` counted in
        AV-GRPO steps (iterations that updated; a NaN-dropped one is not counted) over ``train.iterations``."""
        t, o = self.cfg.train, self.options
        first = t.learning_rate if o.first_learning_rate is None else o.first_learning_rate
        return av_grpo_learning_rate(
            self.schedule_state.state.optimizer_steps,
            max(t.iterations, 1),
            t.learning_rate,
            first,
            t.lr_schedule,
            t.lr_warmup_steps,
            t.lr_min_ratio,
        )

    def _phase_trains(self, name: str) -> bool:
        """This phase's parameter groups (``PHASE_GROUPS``); with ``frozen_input=dropped`` the trained tower alone:
        the code's forward leaves the cross-modal attention and its shared tables out, so they get no gradient
        (the code's AdamW skips them)."""
        if self._tower_of is None:
            return True
        groups = PHASE_GROUPS[self.phase] if self.options.frozen_input == "anchor" else (self.phase,)
        return self._tower_of(name) in groups

    # ------------------------------------------------------------------ exploration
    def plan(self, ctx: Context) -> StepPlan:
        """Every transition SDE and trained for the trained modality, at its noise level capped per step;
        the frozen modality deterministic and untrained (it is pinned to the anchor)."""
        o = self.options
        base = make_plan(ctx.sigmas(), "flow_sde", 1.0, timestep_fraction=1.0)
        a = o.noise_video if self.phase == "video" else o.noise_audio
        levels, capped_steps = [], 0
        for s, s_next in zip(base.sigma.tolist(), base.sigma_next.tolist()):
            g = flow_sde_g(s, a, base.sigma_at_one)  # what the step computes from a noise level a
            code = capped_noise(s, s_next, a, o.max_std)  # the code's g: 1 - t clamped at 1e-5, then capped
            levels.append(a * code.g / g if code.g != g else a)  # the level at which the step's g is the code's
            capped_steps += code.capped
        self._capped = capped_steps / len(levels)
        n = len(base)
        return replace(
            base,
            noise_levels=torch.tensor(levels, dtype=torch.float32),
            train=torch.ones(n, dtype=torch.bool),
            modality_kinds={self.frozen: ("ode",) * n},
            trained_modalities=(self.phase,),
        )

    def explore(self, ctx: Context, batch: PromptBatch) -> Experience:
        if not isinstance(batch.noise, dict) or set(batch.noise) != set(MODALITIES):
            raise ValueError(
                "method av_grpo trains joint audio-video latents {video, audio} (model.pipeline=ltx2); "
                f"model.pipeline={self.cfg.model.pipeline} has none"
            )
        tower_of = getattr(ctx.adapter, "tower_of", None)
        if tower_of is None:
            raise ValueError(
                f"method av_grpo: the {self.cfg.model.pipeline} adapter has no tower_of to split the "
                "trainable parameters by modality"
            )
        self._tower_of = tower_of
        groups = batch.group_ids
        firsts, owner = [], []
        for g in groups.tolist():
            if g not in owner:
                owner.append(g)
                firsts.append(int((groups == g).nonzero()[0]))
        first = torch.tensor(firsts)
        anchor_noise = {m: t[first.to(t.device)] for m, t in batch.noise.items()}
        anchor_cond = {k: v[first.to(v.device)] for k, v in batch.cond.items()}
        anchor = ctx.rollout(ode_plan(ctx.sigmas()), anchor_noise, anchor_cond, torch.arange(len(first)), None)
        row_group = torch.tensor([owner.index(g) for g in groups.tolist()])
        frozen = anchor.states[self.frozen]
        pinned = {self.frozen: frozen[row_group.to(frozen.device)]}
        plan = self.plan(ctx)
        traj = ctx.rollout(
            plan, batch.noise, batch.cond, batch.group_ids, ctx.generator("sde", batch.position), pinned=pinned
        )
        return Experience(traj, {"final": traj.final})

    # ------------------------------------------------------------------ credit
    def modality_credit(self, table: RewardTable) -> Advantages:
        """The credit part ``modality_zscore``: the phase's rewards per group (``modality_advantages``), every row
        kept (a flat group trains at advantage 0, its KL term alone, as the authors' trainer steps on every sample),
        with the NaN guard (zero advantages, no row kept, the phase switched at once)."""
        o = self.options
        rewards, group_ids = table.columns, table.group_ids
        names = self._phase_rewards(self.phase)
        columns = {name: rewards[f"final/{name}"] for name in names}  # each reward's own score
        adv = torch.zeros(len(group_ids))
        fallbacks = []
        for g in torch.unique(group_ids).tolist():
            idx = (group_ids == g).nonzero().flatten()
            metrics = {name: col[idx].double() for name, col in columns.items()}
            out = modality_advantages(metrics, self.phase, o.vq_reward, o.clap_reward, o.vq_floor, o.clap_floor)
            adv[idx] = out.advantages.float()
            fallbacks.append(float(out.fallback))
        # every row trains, a flat group's at advantage 0 (its KL term alone), as the authors' trainer steps on
        # every sample; the NaN guard trains none
        keep = torch.ones(len(group_ids), dtype=torch.bool)
        if not torch.isfinite(adv).all():  # the NaN guard: no update, switch the phase at once
            self.schedule_state.on_nan()
            self._dropped = True
            adv = torch.zeros_like(adv)
            keep = torch.zeros_like(keep)
        s = self.schedule_state.state
        self._last = {
            "av/phase_video": float(self.phase == "video"),
            "av/fallback_frac": sum(fallbacks) / max(len(fallbacks), 1),
            "av/capped_frac": self._capped,
            "av/nan_switches": float(s.nan_switches),
        }
        return Advantages(adv, keep, metrics=dict(self._last))

    # ------------------------------------------------------------------ loss
    def transition_loss(
        self, ctx: Context, traj: Trajectory, j: int, cond: Conditioning, advantages: torch.Tensor
    ) -> TransitionLoss:
        """The loss part ``av_grpo``: lambda_pol PPO-clip plus beta lambda_rw KL of the phase's modality."""
        o = self.options
        phase = traj.plan.trained_modalities[0]
        x, x_next = traj.pair(j)
        if o.frozen_input == "dropped":  # the code's training forward: one conditional pass, the partner left out
            inputs, options = ctx.model_inputs(cond, 1.0), {"isolate_modalities": True, "unguided": True}
        else:
            inputs, options = ctx.model_inputs(cond), None
        new = ctx.transition(traj.plan, j, x, inputs, x_next, velocity_options=options)
        t, t_next, _ = traj.plan.step_values(j)
        beta = o.beta_video if phase == "video" else o.beta_audio
        ref_mean = None
        if beta > 0:
            ref_mean = ctx.reference_transition(traj.plan, j, x, inputs, x_next, velocity_options=options).mean
        out = av_grpo_loss(
            new.log_prob,
            traj.log_probs[:, j],
            advantages,
            t,
            t - t_next,
            new.mean,
            ref_mean,
            new.std,
            phase,
            o.clip_range,
            o.beta_video,
            o.beta_audio,
        )
        loss, pg, kl = out.loss, out.policy, out.kl
        gap = (new.log_prob.detach() - traj.log_probs[:, j]).abs().max()  # read with the update's statistics
        return TransitionLoss(loss, pg.loss.detach(), kl.detach(), pg.clip_frac, pg.approx_kl, pg.ratio.mean(), gap)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        return {"phases": self.schedule_state.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if "phases" in state:
            self.schedule_state.load_state_dict(state["phases"])


def _promptless(name: str) -> bool:
    """Whether reward ``name`` declares itself an audio-video score that never reads the prompt."""
    from flowrl.reward_models.base import reward_target

    try:
        target = reward_target(name)
    except Exception:  # an unknown or unimportable reward: preflight names it
        return False
    return getattr(target, "reads_prompt", True) is False and getattr(target, "modality", None) == "audio_video"


# ------------------------------------------------------------------------------------------------------------------
# §7 step 1: the phase schedule; 8: the learning rate
# ------------------------------------------------------------------------------------------------------------------
def _fail(message: str) -> None:
    raise ValueError(message)


@dataclass
class PhaseState:
    cycle: int = 0  # which block of prompts_per_cycle prompts of the shuffled list
    phase: str = "video"  # the trained modality
    step_in_phase: int = 0  # AV-GRPO steps done in this phase, 0..steps_per_phase-1
    optimizer_steps: int = 0  # AV-GRPO steps taken (a NaN-dropped one is not): the LR schedule's counter
    nan_switches: int = 0


class PhaseSchedule:
    """§7 step 1 as a state machine. One cycle: ``start`` for ``steps_per_phase`` AV-GRPO steps, the other
    modality for as many on the same prompts; the cycle index advances only when the second phase ends.

    ``after_step()`` after every AV-GRPO step and ``on_nan()`` instead of a dropped step both return
    whether the optimizer state must be cleared (at every switch). Rollouts are regenerated before every
    step either way. ``state_dict()`` / ``load_state_dict()`` for checkpoints (plain JSON-able dict).
    """

    def __init__(
        self, steps_per_phase: int = STEPS_PER_PHASE, prompts_per_cycle: int = PROMPTS_PER_CYCLE, start: str = "video"
    ):
        if not (isinstance(steps_per_phase, int) and steps_per_phase >= 1):
            _fail(f"steps_per_phase must be an int >= 1, got {steps_per_phase!r}")
        if not (
            isinstance(prompts_per_cycle, int) and prompts_per_cycle >= 1 and prompts_per_cycle % steps_per_phase == 0
        ):
            _fail(
                f"prompts_per_cycle must be a positive multiple of steps_per_phase={steps_per_phase}, "
                f"got {prompts_per_cycle!r}"
            )
        if start not in PHASES:
            _fail(f"start must be 'video' or 'audio', got {start!r}")
        self.steps_per_phase, self.prompts_per_cycle, self.start = steps_per_phase, prompts_per_cycle, start
        self.state = PhaseState(phase=start)

    @property
    def prompts_per_step(self) -> int:
        return self.prompts_per_cycle // self.steps_per_phase

    def _switch(self) -> None:
        s = self.state
        if s.phase != self.start:  # the cycle's second phase is over
            s.cycle += 1
        s.phase = "audio" if s.phase == "video" else "video"
        s.step_in_phase = 0

    def after_step(self) -> bool:
        """Count one AV-GRPO step; True when the phase just ended (switch; clear the optimizer state)."""
        s = self.state
        s.optimizer_steps += 1
        s.step_in_phase += 1
        if s.step_in_phase < self.steps_per_phase:
            return False
        self._switch()
        return True

    def on_nan(self) -> bool:
        """A step dropped for missing/NaN advantages [code]: switch to the other modality at once, in-phase
        counter to 0, cycle index unchanged (also when leaving the second phase), not counted. Always True."""
        s = self.state
        s.phase = "audio" if s.phase == "video" else "video"
        s.step_in_phase = 0
        s.nan_switches += 1
        return True

    def prompts_of(self, cycle: int, num_prompts: int | None = None) -> list[int]:
        """Indices into the shuffled prompt list used by ``cycle`` (both phases), wrapping modulo num_prompts."""
        if not (isinstance(cycle, int) and cycle >= 0):
            _fail(f"cycle must be an int >= 0, got {cycle!r}")
        if num_prompts is not None and not (isinstance(num_prompts, int) and num_prompts >= 1):
            _fail(f"num_prompts must be an int >= 1 or None, got {num_prompts!r}")
        idx = range(cycle * self.prompts_per_cycle, (cycle + 1) * self.prompts_per_cycle)
        return [i % num_prompts for i in idx] if num_prompts else list(idx)

    def step_prompts(self, num_prompts: int | None = None) -> list[int]:
        """The current step's prompts (one per GPU): block ``step_in_phase`` of the cycle's prompts."""
        k, n = self.state.step_in_phase, self.prompts_per_step
        return self.prompts_of(self.state.cycle, num_prompts)[k * n : (k + 1) * n]

    def state_dict(self) -> dict:
        return {
            "steps_per_phase": self.steps_per_phase,
            "prompts_per_cycle": self.prompts_per_cycle,
            "start": self.start,
            **asdict(self.state),
        }

    def load_state_dict(self, state: Mapping) -> None:
        for key in ("steps_per_phase", "prompts_per_cycle", "start"):
            if state.get(key) != getattr(self, key):
                _fail(f"state {key}={state.get(key)!r} does not match this schedule's {getattr(self, key)!r}")
        fields = {k: state.get(k) for k in PhaseState.__dataclass_fields__}
        if fields["phase"] not in PHASES:
            _fail(f"state phase must be 'video' or 'audio', got {fields['phase']!r}")
        for k in ("cycle", "step_in_phase", "optimizer_steps", "nan_switches"):
            if not (isinstance(fields[k], int) and fields[k] >= 0):
                _fail(f"state {k} must be an int >= 0, got {fields[k]!r}")
        if fields["step_in_phase"] >= self.steps_per_phase:
            _fail(
                f"state step_in_phase must be < steps_per_phase={self.steps_per_phase}, got {fields['step_in_phase']}"
            )
        self.state = PhaseState(**fields)


def av_grpo_lr_factor(step: int, total: int = TOTAL_STEPS, first: float = 10.0) -> float:  # 1e-5 / 1e-6
    """Multiplier of ``LR`` (1e-6) for AV-GRPO step ``step`` (0-based, dropped NaN steps not counted).

    [code] sets the rate AFTER each step, from the count n of steps done: n <= 1 ("warm-up" from 1e-6 to
    1e-6) -> 1, else 0.5·(1 + cos(π(n−1)/(total−1))), reaching 0 at n = total (never used). So step k >= 1
    runs at 0.5·(1 + cos(π(k−1)/(total−1))) = ``flowrl.lr.lr_factor(k, total, "cosine", warmup=1)``, and
    step 0 at the optimizer's initial rate: ``first`` = that rate / 1e-6 (the shipped yaml's 1e-5: 10, the
    default). flowrl's lr_factor warms up from 0: its step 0 would be 0. Every optimizer step of one AV-GRPO
    step (one per sample and transition) runs at the same rate.
    """
    if not (isinstance(total, int) and total >= 2):
        _fail(f"total must be an int >= 2, got {total!r}")
    if not (isinstance(step, int) and 0 <= step):
        _fail(f"step must be an int >= 0, got {step!r}")
    if not (isinstance(first, (int, float)) and first >= 0):
        _fail(f"first must be a number >= 0, got {first!r}")
    return float(first) if step == 0 else lr_factor(step, total, "cosine", warmup=LR_WARMUP_STEPS)


def av_grpo_learning_rate(
    step: int,
    total: int,
    base_lr: float,
    first_lr: float,
    schedule: str = "cosine",
    warmup: int = LR_WARMUP_STEPS,
    min_ratio: float = 0.0,
) -> float:
    """The learning rate of AV-GRPO step ``step`` (0-based; dropped NaN steps not counted) of ``total``:
    ``first_lr`` at step 0 (the optimizer's initial rate [code]), then ``base_lr · lr_factor(step, total,
    schedule, warmup, min_ratio)`` (``flowrl.lr``). With the code's 1e-6, 1e-5, cosine and one warm-up step
    this is ``LR · av_grpo_lr_factor(step, total)``; it is never 0 at step 0."""
    if not (isinstance(step, int) and step >= 0):
        _fail(f"step must be an int >= 0, got {step!r}")
    if not (isinstance(total, int) and total >= 1):
        _fail(f"total must be an int >= 1, got {total!r}")
    for name, rate in (("base_lr", base_lr), ("first_lr", first_lr)):
        if not (isinstance(rate, (int, float)) and 0 < rate < math.inf):
            _fail(f"{name} must be a finite number > 0, got {rate!r}")
    return float(first_lr) if step == 0 else base_lr * lr_factor(step, total, schedule, warmup, min_ratio)
