"""DenseGRPO (arXiv 2601.20218, specs/addon_methods.md section 1): step-wise reward gains as dense credit.

Exploration: an SDE at every step with the calibrated per-transition noise ψ (``dance_sde`` with
g_j = ψ_j); then an ODE completion of every intermediate state (state j along the rest of the full
schedule, n = t) and a pure-ODE sample from the same initial noise, all scored. Credit: the gain of each
transition, R(completion of state j+1) - R(completion of state j), group-normalised per transition; the
terminal reward is the rollout's own (never re-run). Before training, Algorithm 1 calibrates ψ on rounds
that sample and score without updating; ψ is saved in ``method_state.json`` and in checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flowrl.advantages import clip_advantages
from flowrl.configkit import ConfigError
from flowrl.credit.dense import (
    calibrate_psi,
    calibration_done,
    calibration_signs,
    completion_table,
    dense_advantages,
    initial_psi,
    step_gains,
)
from flowrl.media import MediaKind
from flowrl.methods.base import Context, Experience, PromptBatch
from flowrl.methods.flow_grpo import FlowGRPO
from flowrl.methods.options import AdvantageClipOptions, GroupZScoreOptions, PolicyOptions, check_knobs
from flowrl.methods.seam import Advantages, RewardTable
from flowrl.plan import StepPlan


@dataclass
class DenseGRPOOptions(PolicyOptions, GroupZScoreOptions, AdvantageClipOptions):
    """Flow-GRPO's loss and group z-score knobs (clip_range, beta, global_std, std_eps, adv_clip_max), and its own
    step plan: every step a ``dance_sde`` of calibrated noise ψ (``noise_level`` and ``timestep_fraction`` are its
    own knobs, which ``sample.noise_level`` / ``sample.timestep_fraction`` never set)."""

    noise_level: float = 0.7  # a of ψ before calibration: Flow-GRPO's a sqrt(σ / (1 - σ))
    calibrate: bool = True  # Algorithm 1 before training
    calibration_max_rounds: int = 50  # [inferred] stop after this many rounds ...
    calibration_min_flips: int = 3  # ... or once every transition's update direction flipped this often
    eps1: int = 2  # balance threshold on |n+ - n-|
    eps2: float = 0.01  # ψ step
    baseline: bool = False  # the "Dense Reward (Baseline)" ablation: normalise R after each step itself
    timestep_fraction: float = 1.0  # transitions that train (DenseGRPO: every one)

    def __post_init__(self):
        check_knobs(self)
        if self.noise_level <= 0:
            raise ConfigError(f"method.options.noise_level: must be > 0, got {self.noise_level}")
        if not 0 < self.timestep_fraction <= 1:
            raise ConfigError(f"method.options.timestep_fraction: must be in (0, 1], got {self.timestep_fraction}")
        if self.calibration_max_rounds < 1 or self.eps2 <= 0:
            raise ConfigError("method.options: calibration_max_rounds must be >= 1 and eps2 > 0")


class DenseGRPO(FlowGRPO):
    name = "dense_grpo"
    # one latent tensor per sample: joint audio-video latents (a mapping of modalities) are not taken yet
    media = (MediaKind.IMAGE, MediaKind.VIDEO, MediaKind.AUDIO)
    Options = DenseGRPOOptions
    default_credit = "dense_gains"

    def __init__(self, cfg):
        super().__init__(cfg)
        if cfg.sample.num_steps < 2:
            raise ConfigError("sample.num_steps: dense_grpo needs at least 2 steps (intermediate states to complete)")
        self.psi: list[float] | None = None  # (T,) the noise of each transition
        self.calibration_rounds = 0

    def records(self) -> frozenset[str]:
        return super().records() | {"state_completions"}

    def step_kind(self) -> str:
        return "dance_sde"  # ψ's steps, whatever the options

    def _psi(self, ctx: Context) -> torch.Tensor:
        if self.psi is None:
            self.psi = initial_psi(ctx.sigmas(), self.options.noise_level).tolist()
        return torch.tensor(self.psi, dtype=torch.float32)

    def plan(self, ctx: Context, batch: PromptBatch) -> StepPlan:
        sigmas = ctx.sigmas().float().cpu()
        n = len(sigmas) - 1
        n_train = max(1, int(n * self.options.timestep_fraction))
        return StepPlan(
            sigma=sigmas[:-1].clone(),
            sigma_next=sigmas[1:].clone(),
            kinds=("dance_sde",) * n,
            noise_levels=self._psi(ctx),
            train=torch.arange(n) < n_train,
            sigma_at_one=float(sigmas[1]),
        )

    keep_all_states = True  # intermediate states are completed and scored

    def explore(self, ctx: Context, batch: PromptBatch) -> Experience:
        exp = super().explore(ctx, batch)
        sigmas = ctx.sigmas()
        states = exp.traj.states  # (B, T+1, C, H, W)
        # ODE completion of every intermediate state j = 1..T-1 along the rest of the schedule (n = t)
        completions = torch.stack(
            [ctx.complete(states[:, j], sigmas[j:], batch.cond) for j in range(1, states.shape[1] - 1)], dim=1
        )  # (B, T-1, C, H, W)
        pure_ode = ctx.complete(batch.noise, sigmas, batch.cond)  # R of state 0: the same initial noise
        return Experience(exp.traj, {"final": exp.traj.final, "completion": completions, "pure_ode": pure_ode[:, None]})

    def _table(self, rewards: dict[str, torch.Tensor]) -> torch.Tensor:
        return completion_table(rewards["pure_ode"][:, 0], rewards["completion"], rewards["final"])  # (N, T+1)

    def dense_credit(self, table: RewardTable) -> Advantages:
        """The credit part ``dense_gains``: each transition's gain, group-normalised per transition, clipped;
        (N, T), column j transition j."""
        t = self.options
        adv = dense_advantages(
            self._table(table.columns),
            table.group_ids,
            eps=t.std_eps,
            baseline=self.options.baseline,
            global_std=t.global_std,
        )  # (N, T): column j is transition j
        return Advantages(clip_advantages(adv, t.adv_clip_max))

    def prepare(self, ctx: Context, sample_round) -> dict[str, float]:
        """Algorithm 1: rounds of sampling with the current ψ (no update) until the stop rule holds."""
        o = self.options
        psi = self._psi(ctx)
        if not o.calibrate or self.calibration_rounds:
            return {}
        signs = []
        while True:
            rewards, group_ids = sample_round(self.calibration_rounds)
            gains = step_gains(self._table(rewards))  # (N, T)
            signs.append(calibration_signs(gains, o.eps1))
            psi = calibrate_psi(psi, gains, o.eps1, o.eps2)
            self.psi = psi.tolist()
            self.calibration_rounds += 1
            if calibration_done(torch.stack(signs), o.calibration_min_flips, o.calibration_max_rounds):
                break
        return {"calibration_rounds": float(self.calibration_rounds), "psi_mean": float(psi.mean())}

    def state_dict(self) -> dict:
        return {"psi": self.psi, "calibration_rounds": self.calibration_rounds}

    def load_state_dict(self, state: dict) -> None:
        self.psi = state.get("psi", self.psi)
        self.calibration_rounds = state.get("calibration_rounds", self.calibration_rounds)
