"""AV-GRPO (arXiv 2609.29816): modality-anchored, decoupled GRPO for joint audio-video generators (LTX-2).

On the method seam, for joint latents ``{"video", "audio"}`` (``flowrl.latents``); the math is in
``flowrl.credit.av_grpo`` (pure functions with their oracles). One flowrl iteration is one AV-GRPO step (its
recipes set ``train.optimizer_steps_per_iteration: 1``); ``../shared/specs/addon_methods.md`` section 7.

* **Phases** (``PhaseSchedule``): the trained modality alternates, ``steps_per_phase`` iterations of video then
  as many of audio on the same prompts (``prompt_iteration`` points the audio phase at the video phase's prompt
  draws); the optimizer state is cleared at every switch (``after_update``), and the phase travels in
  checkpoints (``state_dict``).
* **Anchor**: per prompt group, one deterministic joint ODE trajectory of both modalities (the group's first
  member's noise, ``sample.guidance_scale``), every step's states cached.
* **Anchored rollouts**: every member has its own noise; the frozen modality is pinned to the anchor's state at
  every step (``rollout(pinned=...)``), so it is bitwise the same across the group; the trained one takes
  Flow-GRPO SDE steps at its own noise level (``noise_video`` 0.8, ``noise_audio`` 0.02) with the per-step std
  capped at ``max_std`` (0.5) by lowering that step's noise level, so the drift uses the capped g too. Every
  transition trains (the code's SDE at all steps).
* **Trainable sets**: the video phase trains the video tower and the audio-to-video cross-attention, the audio
  phase the audio tower and the video-to-audio one (``adapter.tower_of``); the others get no gradient at the
  optimizer step. The a2v / v2a scale-shift tables of LTX-2 are shared by both directions (one parameter), so
  they train in both phases (flowrl's choice; the code's split by module names cannot separate them either).
* **Credit** (``modality_advantages``): the phase's rewards (``video_rewards`` / ``audio_rewards``, each a
  reward's own column) z-scored per group (population std + 1e-8) and averaged, with the fallbacks (video: the
  ``vq_reward`` alone where its group mean <= 0; audio: the ``clap_reward`` alone where its mean < 0.4), then
  z-scored again (sample std + 1e-8). A NaN in them drops the step (zero advantages, no update) and switches
  the phase at once (``PhaseSchedule.on_nan``).
* **Loss**: lambda_pol PPO-clip (clip 0.2) with lambda_pol = sqrt(t / (|dt| (1 - t))), plus beta lambda_rw KL,
  beta 0.01 (video) / 0.002 (audio), lambda_rw = t / (|dt| (1 - t)) in the video phase and 1 in the audio one.
  The KL is the exact Gaussian KL of the two step means under the step's own (capped) g, which equals
  lambda_KL MSE(v, v_ref) (the oracle in ``tests/test_credit_av_grpo.py``); the authors' code uses the
  uncapped g in lambda_KL.
* **The training forward** gets the stored joint state, the frozen modality's part being the anchor's state
  that the rollout saw, so the first ratio is 1 (flowrl's default). ``frozen_input=dropped`` is the authors'
  code: the frozen modality left out of that forward (the adapter's ``isolate_modalities``), so the ratio is
  not 1 at the first update and the cross-modal attention that trains gets no gradient from it; the gap is
  logged (``policy/onpolicy_logp_diff``) and the on-policy check does not stop the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from flowrl.config import ConfigError
from flowrl.credit.av_grpo import (
    BETA,
    CLAP_FLOOR,
    CLIP_RANGE,
    MAX_STD,
    NOISE_LEVEL,
    VQ_FLOOR,
    PhaseSchedule,
    capped_noise,
    modality_advantages,
    policy_weight,
    reward_weight,
)
from flowrl.losses import gaussian_kl, ppo_clip_loss
from flowrl.methods.base import Context, Experience, Method, PromptBatch, TransitionLoss
from flowrl.pipelines.base import Conditioning
from flowrl.plan import StepPlan, make_plan, ode_plan
from flowrl.rollout import Trajectory
from flowrl.sde import flow_sde_g

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
    clip_range: float = CLIP_RANGE  # the PPO clip of AV-GRPO's own loss (train.clip_range is not read)
    beta_video: float = BETA["video"]  # KL weight in the video phase
    beta_audio: float = BETA["audio"]  # KL weight in the audio phase
    video_rewards: list[str] = field(default_factory=list)  # the video phase's rewards (names of `reward`); empty: all
    audio_rewards: list[str] = field(default_factory=list)  # the audio phase's rewards; empty: all
    vq_reward: str | None = None  # video-phase fallback: this reward alone where its group mean <= vq_floor
    clap_reward: str | None = None  # audio-phase fallback: this reward alone where its group mean < clap_floor
    vq_floor: float = VQ_FLOOR  # the video fallback's threshold on the vq_reward's group mean
    clap_floor: float = CLAP_FLOOR  # the audio fallback's threshold on the clap_reward's group mean
    # the training forward's frozen modality: "anchor" feeds the anchored state the rollout saw (the first ratio
    # is 1); "dropped" leaves it out, as the authors' code does (the adapter's isolate_modalities: no cross-modal
    # attention), which is not the rollout's policy: the gap is logged as policy/onpolicy_logp_diff, not checked
    frozen_input: str = "anchor"


class AVGRPO(Method):
    name = "av_grpo"
    Options = AVGRPOOptions
    whole_groups = True  # one anchor per prompt group
    freezes_parameters = True
    media_kinds = ("audio_video",)
    # the phase (1: video trains), the groups on a fallback, the transitions whose std the cap lowered, NaN switches
    metric_names = ("av/phase_video", "av/fallback_frac", "av/capped_frac", "av/nan_switches")

    def __init__(self, cfg):
        super().__init__(cfg)
        o = self.options
        if o.start not in MODALITIES:
            raise ConfigError(f"method.options.start: {o.start!r} is not one of video, audio")
        if o.frozen_input not in ("anchor", "dropped"):
            raise ConfigError(f"method.options.frozen_input: {o.frozen_input!r} is not one of anchor, dropped")
        if o.frozen_input == "dropped":  # by design not the rollout's forward: log the gap, do not stop on it
            self.checks_onpolicy = False
            self.no_onpolicy_reason = ("method.options.frozen_input=dropped leaves the frozen modality out of the "
                                       "training forward (the authors' code); policy/onpolicy_logp_diff logs the gap")
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
                raise ConfigError(f"method.options.{key}: {unknown[0]!r} is not a configured reward "
                                  f"({', '.join(sorted(rewards))})")
        for key, phase in (("vq_reward", "video"), ("clap_reward", "audio")):
            name = getattr(o, key)
            if name is not None and name not in self._phase_rewards(phase):
                raise ConfigError(f"method.options.{key}: {name!r} is not one of the {phase} phase's rewards")
        self.schedule_state = PhaseSchedule(o.steps_per_phase, o.steps_per_phase, o.start)
        self._tower_of = None
        self._dropped = False
        self._capped = 0.0
        self._last: dict[str, float] = {}

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

    def prompt_iteration(self, iteration: int) -> int:
        """The prompt draw of this step: both phases of a cycle use the cycle's ``steps_per_phase`` draws."""
        s = self.schedule_state.state
        return s.cycle * self.options.steps_per_phase + s.step_in_phase

    def trains(self, name: str) -> bool:
        if self._tower_of is None:
            return True
        return self._tower_of(name) in PHASE_GROUPS[self.phase]

    def after_update(self) -> bool:
        if self._dropped:  # on_nan switched already; the optimizer state goes with the phase
            self._dropped = False
            return True
        return self.schedule_state.after_step()

    @property
    def needs_reference(self) -> bool:
        return self.options.beta_video > 0 or self.options.beta_audio > 0

    # ------------------------------------------------------------------ exploration
    def plan(self, ctx: Context) -> StepPlan:
        """Every transition SDE and trained for the trained modality, at its noise level capped per step;
        the frozen modality deterministic and untrained (it is pinned to the anchor)."""
        o = self.options
        base = make_plan(ctx.sigmas(), "flow_sde", 1.0, timestep_fraction=1.0)
        a = o.noise_video if self.phase == "video" else o.noise_audio
        levels = []
        for s, s_next in zip(base.sigma.tolist(), base.sigma_next.tolist()):
            g = flow_sde_g(s, a, base.sigma_at_one)
            capped = capped_noise(s, s_next, a, o.max_std, base.sigma_at_one)
            levels.append(a * capped.g / g if capped.capped else a)
        self._capped = sum(lv != a for lv in levels) / len(levels)
        n = len(base)
        return replace(base, noise_levels=torch.tensor(levels, dtype=torch.float32),
                       train=torch.ones(n, dtype=torch.bool),
                       modality_kinds={self.frozen: ("ode",) * n}, trained_modalities=(self.phase,))

    def explore(self, ctx: Context, batch: PromptBatch) -> Experience:
        if not isinstance(batch.noise, dict) or set(batch.noise) != set(MODALITIES):
            raise ValueError("method av_grpo trains joint audio-video latents {video, audio} (model.pipeline=ltx2); "
                             f"model.pipeline={self.cfg.model.pipeline} has none")
        tower_of = getattr(ctx.adapter, "tower_of", None)
        if tower_of is None:
            raise ValueError(f"method av_grpo: the {self.cfg.model.pipeline} adapter has no tower_of to split the "
                             "trainable parameters by modality")
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
        traj = ctx.rollout(plan, batch.noise, batch.cond, batch.group_ids, ctx.generator("sde", batch.position),
                           pinned=pinned)
        return Experience(traj, {"final": traj.final})

    # ------------------------------------------------------------------ credit
    def credit(self, rewards: dict[str, torch.Tensor], group_ids: torch.Tensor) -> torch.Tensor:
        o = self.options
        names = self._phase_rewards(self.phase)
        columns = {name: rewards[f"final/{name}"] for name in names}  # each reward's own score
        adv = torch.zeros(len(group_ids))
        fallbacks = []
        for g in torch.unique(group_ids).tolist():
            idx = (group_ids == g).nonzero().flatten()
            metrics = {name: col[idx].double() for name, col in columns.items()}
            out = modality_advantages(metrics, self.phase, o.vq_reward, o.clap_reward, o.vq_floor, o.clap_floor,
                                      nan_to_zero=False)
            adv[idx] = out.advantages.float()
            fallbacks.append(float(out.fallback))
        if not torch.isfinite(adv).all():  # the NaN guard: no update, switch the phase at once
            self.schedule_state.on_nan()
            self._dropped = True
            adv = torch.zeros_like(adv)
        s = self.schedule_state.state
        self._last = {"av/phase_video": float(self.phase == "video"),
                      "av/fallback_frac": sum(fallbacks) / max(len(fallbacks), 1),
                      "av/capped_frac": self._capped, "av/nan_switches": float(s.nan_switches)}
        return adv

    def metrics(self) -> dict[str, float]:
        return dict(self._last)

    # ------------------------------------------------------------------ loss
    def transition_loss(self, ctx: Context, traj: Trajectory, j: int, cond: Conditioning,
                        advantages: torch.Tensor) -> TransitionLoss:
        o = self.options
        phase = traj.plan.trained_modalities[0]
        x, x_next = traj.pair(j)
        inputs = ctx.model_inputs(cond)
        options = {"isolate_modalities": True} if o.frozen_input == "dropped" else None
        new = ctx.transition(traj.plan, j, x, inputs, x_next, velocity_options=options)
        t, t_next = float(traj.plan.sigma[j]), float(traj.plan.sigma_next[j])
        dt = t - t_next
        pg = ppo_clip_loss(new.log_prob, traj.log_probs[:, j], advantages, o.clip_range)
        loss = float(policy_weight(t, dt)) * pg.loss
        kl = torch.zeros(())
        beta = o.beta_video if phase == "video" else o.beta_audio
        if beta > 0:
            ref = ctx.reference_transition(traj.plan, j, x, inputs, x_next, velocity_options=options)
            kl = gaussian_kl(new.mean, ref.mean, new.std).mean()
            loss = loss + beta * float(reward_weight(t, dt, phase)) * kl
        gap = float((new.log_prob.detach() - traj.log_probs[:, j]).abs().max())
        return TransitionLoss(loss, pg.loss.detach(), kl.detach(), pg.clip_frac, pg.approx_kl, pg.ratio.mean(), gap)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        return {"phases": self.schedule_state.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if "phases" in state:
            self.schedule_state.load_state_dict(state["phases"])
