"""Direct reward backprop: ReFL (Xu et al. 2023, ImageReward, arXiv 2304.05977) and DRaFT-K (Clark et al. 2023,
arXiv 2309.17400), as UniRL ships it for Wan (Tencent-Hunyuan/UniRL recipes/refl) and ROLL as Reward FL.

No advantages and no log-probs: the loss is the reward itself, backpropagated through the decoder and the last
K sampler steps into the transformer. With the schedule sigma_0 > ... > sigma_N = 0 of ``sample.num_steps`` N:

* the sample is walked without grad by the Euler ODE from the initial noise to the state x_m at sigma_m;
* from x_m, K forwards carry grad: K - 1 Euler steps, then the clean prediction x̂0 = x - sigma v (the one-step
  jump to sigma = 0, which at m + K = N is the last Euler step itself);
* x̂0 is decoded with grad and scored by the run's rewards of non-zero weight through their torch path
  (``flowrl.reward_models.differentiable``), and the loss is -lambda * mean(r(x̂0)) (+ kl_weight * KL).

``mode`` chooses m: ``draft_k`` m = N - K, the last K steps (K = 1: DRaFT-1, UniRL's Wan recipe with
``mid_timestep = final_timestep = 24`` of 25); ``refl`` m drawn uniformly, per rollout batch, among the steps of a
late band (``band`` = [lo, hi) as fractions of N: m in [floor(lo N), floor(hi N)), and m <= N - K; ImageReward's
40 steps and t in [30, 39] is [0.75, 1.0); ROLL's 8 steps and boundary [0.9, 1.0] is m = 7).

Under two-branch CFG the gradient flows through the conditional branch only, as UniRL's (``cfg_grad="cond"``:
v = v_guided + w (v_c - sg(v_c)), the guided value with the gradient w dv_c); ``"both"`` backpropagates both
branches (DRaFT's sampler as written).

The exploration computes the same x̂0 without grad, which the reward phase scores and logs as every method's
rewards are logged; the update recomputes the K forwards with grad from the stored x_m (on the first optimizer
step of an iteration, at the weights that sampled: the same values). Cost per sample, P the transformer rows of a
guided velocity (2 under CFG, else 1): the exploration m P + K P, the update K (P + 1) (``cond``, CFG) or K P,
plus K reference rows with ``kl_weight`` (and K conditional rows more under ``cfg_grad=both``); reward calls:
samples x rewards in the reward phase plus samples x rewards of non-zero weight in the update.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from flowrl.configkit import ConfigError
from flowrl.media import MediaKind
from flowrl.methods.base import Context, Experience, MethodBase, PromptBatch, TransitionLoss
from flowrl.methods.seam import Advantages, Needs, RewardTable
from flowrl.pipelines.base import Conditioning, GuidanceKind
from flowrl.plan import ode_plan
from flowrl.policy import Weights
from flowrl.rollout import states_moved

MODES = ("draft_k", "refl")
CFG_GRADS = ("cond", "both")


# ------------------------------------------------------------------------------------------- the math
def predict_x0(x: torch.Tensor, sigma: float | torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """x̂0 = x - sigma v: the clean sample a velocity predicts from x_sigma = (1 - sigma) x0 + sigma eps,
    v = eps - x0 (exact when v is)."""
    return x.float() - sigma * v.float()


def euler_step(x: torch.Tensor, v: torch.Tensor, sigma: float, sigma_next: float) -> torch.Tensor:
    """x' = x + (sigma_next - sigma) v, the ODE step of ``flowrl.sde.ode``."""
    return x.float() + (sigma_next - sigma) * v.float()


def band_steps(num_steps: int, band: tuple[float, float], grad_steps: int) -> list[int]:
    """The steps m a ReFL chain may start at: floor(lo N) <= m < floor(hi N) and m + K <= N (the DiffSynth
    convention ROLL's boundary follows: ``randint(int(lo N), int(hi N))``)."""
    lo, hi = band
    return [m for m in range(math.floor(lo * num_steps), math.floor(hi * num_steps)) if m + grad_steps <= num_steps]


def stop_step(mode: str, num_steps: int, grad_steps: int, band: tuple[float, float], rng: random.Random) -> int:
    """m, the first step that carries grad: N - K (``draft_k``), or uniform over ``band_steps`` (``refl``)."""
    if mode == "draft_k":
        return num_steps - grad_steps
    return rng.choice(band_steps(num_steps, band, grad_steps))


def cond_grad_velocity(v_guided: torch.Tensor, v_cond: torch.Tensor, scale: float) -> torch.Tensor:
    """v_u + w (v_c - v_u) with v_u stopped: the guided value (``v_guided``, computed without grad) with the gradient
    w dv_c (``v_cond`` the conditional velocity with grad; v_c - sg(v_c) is 0 in value)."""
    return v_guided.detach() + scale * (v_cond - v_cond.detach())


def reward_backprop_loss(rewards: torch.Tensor, weight: float, row_weights: torch.Tensor | None = None) -> torch.Tensor:
    """-lambda mean_i(a_i r_i) (UniRL's ``-(r - baseline) / scale * reward_weight`` with baseline 0 and scale 1,
    whose baseline moves no gradient): rewards (B,), ``row_weights`` a_i (None: 1)."""
    r = rewards.float() if row_weights is None else rewards.float() * row_weights.float().to(rewards.device)
    return -weight * r.mean()


def gaussian_velocity_kl(v: torch.Tensor, v_ref: torch.Tensor, sigma: float) -> torch.Tensor:
    """mean((v - v_ref)^2 / (2 sigma^2)), UniRL's per-step KL of the ReFL recipe (on the conditional velocity)."""
    return ((v.float() - v_ref.float()) ** 2 / (2.0 * sigma**2)).mean()


# ------------------------------------------------------------------------------------------- options
@dataclass
class RewardBackpropOptions:
    mode: str = "draft_k"  # draft_k: the last grad_steps steps; refl: a chain starting in a late band
    grad_steps: int = 1  # K, forwards with grad (the last one predicts x̂0)
    band: list[float] = field(default_factory=lambda: [0.75, 1.0])  # refl: [lo, hi) fractions of the N steps
    reward_weight: float = 1.0  # lambda (UniRL's Wan recipe: 0.25)
    kl_weight: float = 0.0  # UniRL's per-step KL to the reference on the grad steps (its recipe: 0)
    cfg_grad: str = "cond"  # cond: grad through the conditional branch only (UniRL); both: through both
    decode_checkpointing: bool = False  # recompute the decoder's activations in the backward (video)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ConfigError(f"method.options.mode: {self.mode!r}; allowed: {', '.join(MODES)}")
        if self.cfg_grad not in CFG_GRADS:
            raise ConfigError(f"method.options.cfg_grad: {self.cfg_grad!r}; allowed: {', '.join(CFG_GRADS)}")
        if isinstance(self.grad_steps, bool) or not isinstance(self.grad_steps, int) or self.grad_steps < 1:
            raise ConfigError(f"method.options.grad_steps: must be an integer >= 1, got {self.grad_steps!r}")
        band = list(self.band)
        if len(band) != 2 or not 0 <= band[0] < band[1] <= 1:
            raise ConfigError(f"method.options.band: [lo, hi] with 0 <= lo < hi <= 1, got {self.band!r}")
        self.band = [float(b) for b in band]
        if not math.isfinite(self.reward_weight) or self.reward_weight <= 0:
            raise ConfigError(f"method.options.reward_weight: must be > 0, got {self.reward_weight}")
        if not math.isfinite(self.kl_weight) or self.kl_weight < 0:
            raise ConfigError(f"method.options.kl_weight: must be >= 0, got {self.kl_weight}")


# ------------------------------------------------------------------------------------------- the unit
@dataclass
class ChainStart:
    """B states x_m where the gradient-carrying chain starts (the training unit; its one "transition" is the chain).

    x:          (B, C, H, W) fp32 (a video latent has its frames in C's place: any trailing shape)
    start:      m, the same for the unit's rows (one draw per rollout batch)
    prompt_ids: (B,) each row's prompt group
    prompts, metadata: each row's, which the reward reads
    """

    x: torch.Tensor
    start: int
    prompt_ids: torch.Tensor
    prompts: list[str]
    metadata: list[dict]
    row_mask: None = None  # every row trains the chain

    trained_indices = (0,)

    def __len__(self) -> int:
        return self.x.shape[0]

    def trained_only(self) -> ChainStart:
        return self

    def states_to(self, device: torch.device) -> ChainStart:
        return states_moved(self, ("x",), device)

    def select(self, rows: torch.Tensor) -> ChainStart:
        if rows.dtype == torch.bool:
            rows = rows.nonzero().flatten()
        idx = rows.tolist()
        return replace(
            self,
            x=self.x.index_select(0, rows.to(self.x.device)),
            prompt_ids=self.prompt_ids.index_select(0, rows.to(self.prompt_ids.device)),
            prompts=[self.prompts[i] for i in idx],
            metadata=[self.metadata[i] for i in idx],
        )


# ------------------------------------------------------------------------------------------- the method
def uniform_credit(method: Any, table: RewardTable) -> Advantages:
    """Every row weighs 1 and trains (the reward's gradient is the signal); ``stop_step``: the mean chain start m."""
    n = len(table.group_ids)
    metrics = {}
    if "stop_step" in table.columns:
        metrics["stop_step"] = float(table.columns["stop_step"].float().mean())
    return Advantages(torch.ones(n), keep=torch.ones(n, dtype=torch.bool), metrics=metrics)


class RewardBackprop(MethodBase):
    name = "reward_backprop"
    Options = RewardBackpropOptions
    default_credit = "uniform"
    keeps_flat_rows = True  # the reward's gradient pulls every row; there is no advantage to be 0
    min_group_size = 1  # each sample's reward is backpropagated on its own
    media = (MediaKind.IMAGE, MediaKind.VIDEO)

    def __init__(self, cfg: Any):
        super().__init__(cfg)
        from flowrl.reward_models.base import RewardError
        from flowrl.reward_models.differentiable import check_differentiable_names

        o, n = self.options, cfg.sample.num_steps
        if o.grad_steps > n:
            raise ConfigError(f"method.options.grad_steps: {o.grad_steps} is more than sample.num_steps={n}")
        if o.mode == "refl" and not band_steps(n, tuple(o.band), o.grad_steps):
            raise ConfigError(
                f"method.options.band: {o.band} holds no step m of sample.num_steps={n} with m + grad_steps "
                f"({o.grad_steps}) <= {n}"
            )
        try:
            check_differentiable_names(cfg.reward, cfg.reward_args, self.name)
        except RewardError as exc:
            raise ConfigError(str(exc)) from None

    def needs(self) -> Needs:
        return Needs(
            media=self.media,
            reference=self.options.kl_weight > 0,
            onpolicy_check="it has no log-probs: its loss backpropagates the reward",
            metrics=self.parts.credit.metrics,
            differentiable_reward=True,
        )

    # ------------------------------------------------------------------ exploration
    def explore(self, ctx: Context, batch: PromptBatch) -> Experience:
        """x_m without grad, then the chain's x̂0 without grad (scored as ``final``)."""
        o, sigmas = self.options, ctx.sigmas()
        m = stop_step(o.mode, len(sigmas) - 1, o.grad_steps, tuple(o.band), ctx.rng("reward_backprop", batch.position))
        x = batch.noise.float()
        if m > 0:
            x = ctx.rollout(
                ode_plan(sigmas[: m + 1]), x, batch.cond, batch.group_ids, None, keep_all_states=False
            ).final
        with torch.no_grad():
            x0, _ = self.chain(ctx, x, m, sigmas, batch.cond)
        unit = ChainStart(x, m, batch.group_ids, list(batch.prompts), list(batch.metadata))
        stop = torch.full((len(x),), float(m))
        return Experience(unit, score={"final": x0}, info={"stop_step": stop})

    def chain(
        self, ctx: Context, x: torch.Tensor, m: int, sigmas: torch.Tensor, cond: Conditioning
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """K forwards from x_m: K - 1 Euler steps, then x̂0 = x - sigma v; with grad when grad is on. Returns x̂0
        and the mean per-step KL to the reference (None without ``kl_weight`` or grad)."""
        o = self.options
        kls = []
        for i in range(m, m + o.grad_steps):
            sigma = float(sigmas[i])
            v, v_cond = self.velocity(ctx, x, sigma, cond)
            if o.kl_weight > 0 and torch.is_grad_enabled():
                kls.append(self.step_kl(ctx, x, sigma, cond, v_cond))
            x = predict_x0(x, sigma, v) if i == m + o.grad_steps - 1 else euler_step(x, v, sigma, float(sigmas[i + 1]))
        return x, (torch.stack(kls).mean() if kls else None)

    def velocity(
        self, ctx: Context, x: torch.Tensor, sigma: float, cond: Conditioning
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The guided velocity, and the conditional one where a forward gave it (None: not computed). With grad,
        under two-branch CFG and ``cfg_grad="cond"``, the gradient flows through the conditional branch only
        (``cond_grad_velocity``); without CFG the guided velocity is the conditional one."""
        g = ctx.guidance_scale
        cfg_kind = ctx.adapter.guidance(g).kind is GuidanceKind.CFG
        if not torch.is_grad_enabled() or (cfg_kind and self.options.cfg_grad == "both"):
            return ctx.velocity(x, sigma, cond), None
        if not cfg_kind:
            v = ctx.velocity(x, sigma, cond)
            return v, v
        with torch.no_grad():
            v_guided = ctx.velocity(x, sigma, cond)
        v_cond = ctx.velocity(x, sigma, cond, guidance_scale=1.0)
        return cond_grad_velocity(v_guided, v_cond, g), v_cond

    def step_kl(
        self, ctx: Context, x: torch.Tensor, sigma: float, cond: Conditioning, v_cond: torch.Tensor | None
    ) -> torch.Tensor:
        """UniRL's per-step KL on the conditional velocity (the step's own conditional forward where it made one,
        else one more with grad) against the reference's, at the same guidance input."""
        cfg_kind = ctx.adapter.guidance(ctx.guidance_scale).kind is GuidanceKind.CFG
        scale = 1.0 if cfg_kind else ctx.guidance_scale
        if v_cond is None:
            v_cond = ctx.velocity(x, sigma, cond, guidance_scale=scale)
        with torch.no_grad(), ctx.weights(Weights.REFERENCE) as ref:
            v_ref = ctx.velocity(x, sigma, cond, guidance_scale=scale, model=ref)
        return gaussian_velocity_kl(v_cond, v_ref, sigma)

    # ------------------------------------------------------------------ the loss
    def transition_loss(
        self, ctx: Context, unit: ChainStart, j: int, cond: Conditioning, advantages: torch.Tensor
    ) -> TransitionLoss:
        """The loss part ``reward_backprop``: -lambda mean(a r(decode(x̂0))) (+ kl_weight KL), a the rows' credit."""
        o = self.options
        x0, kl = self.chain(ctx, unit.x.to(ctx.device), unit.start, ctx.sigmas(), cond)
        media = ctx.decode_with_grad(x0, checkpoint=o.decode_checkpointing)
        rewards = ctx.reward_with_grad(media, unit.prompts, unit.metadata)  # (B,)
        policy = reward_backprop_loss(rewards, o.reward_weight, advantages)
        loss = policy if kl is None else policy + o.kl_weight * kl
        return TransitionLoss(loss, policy.detach(), kl=None if kl is None else kl.detach())
