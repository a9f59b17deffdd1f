"""The services a method may use for one iteration: ``Context``.

A method works only through it: the adapter's forwards under the current policy (counted in ``cost/nfe``),
rollouts and ODE completions, the shared-input transition of members that start from one state, named random
streams seeded by (seed, iteration, purpose, global position) (``flowrl.seeds``), and other weights swapped in
(``weights(name)``: the reference, the EMA, a parameter average). It is built from the adapter, the config and
the ``Policy`` (``flowrl.policy``), so a method test needs no trainer and no run folder.
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from typing import Any, Iterator

import torch

from flowrl.pipelines.base import Conditioning, GuidanceKind
from flowrl.plan import StepPlan, ode_plan
from flowrl.policy import Weights
from flowrl.rollout import Trajectory, rollout, transition
from flowrl.sde import StepOutput, step
from flowrl.seeds import seed_of


class Context:
    """The services of one iteration, built from the run's adapter, config and policy (``flowrl.policy.Policy``:
    ``model``, ``device``, ``weights(name)``, ``ema``, ``averages``); methods only call these."""

    def __init__(self, adapter: Any, cfg: Any, policy: Any, iteration: int, reward: Any = None):
        self.adapter = adapter
        self.cfg = cfg
        self.policy = policy
        self.iteration = iteration
        self.reward = reward  # the differentiable reward sum (``Needs.differentiable_reward``), else None
        self.device = policy.device
        self._inputs: tuple[Conditioning, float, Conditioning] | None = None

    @property
    def guidance_scale(self) -> float:
        return self.cfg.sample.guidance_scale

    @property
    def conditional_scale(self) -> float:
        """The scale of the conditional velocity alone, one pass and no CFG branches (what RAM and DiffusionNFT
        regress): 1.0 under two-branch CFG; under guidance embedded in the transformer (FLUX.1-dev) the
        sampling scale itself, which costs no pass and is the input the guidance-distilled model was trained
        with (its prediction at guidance 1 is off its training distribution)."""
        guidance = getattr(self.adapter, "guidance", None)
        embedded = guidance is not None and guidance(self.guidance_scale).kind is GuidanceKind.EMBEDDED
        return self.guidance_scale if embedded else 1.0

    def seed(self, purpose: str, position: int) -> int:
        """The seed of the named random stream ``purpose`` at global sample ``position``."""
        return seed_of(self.cfg.seed, self.iteration, purpose, position)

    def generator(self, purpose: str, position: int) -> torch.Generator:
        return torch.Generator(self.device).manual_seed(self.seed(purpose, position))

    def rng(self, purpose: str, position: int) -> random.Random:
        return random.Random(self.seed(purpose, position))

    def sigmas(self, num_steps: int | None = None) -> torch.Tensor:
        return self.adapter.sigmas(num_steps or self.cfg.sample.num_steps)

    def model_inputs(self, cond: Conditioning, guidance_scale: float | None = None) -> Conditioning:
        """The adapter's transformer-ready conditioning of ``cond`` (CFG rows stacked) at ``guidance_scale``
        (default ``sample.guidance_scale``), built once per ``cond`` object and scale (the latest one is
        cached: a unit's transitions share it)."""
        g = self.guidance_scale if guidance_scale is None else guidance_scale
        if self._inputs is None or self._inputs[0] is not cond or self._inputs[1] != g:
            self._inputs = (cond, g, self.adapter.model_inputs(cond, g))
        return self._inputs[2]

    @torch.no_grad()
    def rollout(
        self,
        plan: StepPlan,
        noise: torch.Tensor,
        cond: Conditioning,
        group_ids: torch.Tensor,
        generator: torch.Generator | None,
        keep_means: bool = False,
        keep_all_states: bool = True,
        pinned: dict[str, torch.Tensor] | None = None,
    ) -> Trajectory:
        """Walk ``plan`` from ``noise`` with the current policy, recording states and log-probs (and each
        transition's mean with ``keep_means``); ``keep_all_states=False`` records only the states the trained
        transitions need and the final one (``flowrl.rollout.rollout``); ``pinned`` modalities of joint latents
        follow given states instead of stepping (``flowrl.rollout.rollout``)."""
        return rollout(
            self.adapter,
            cond,
            plan,
            noise,
            group_ids,
            self.guidance_scale,
            generator,
            model=self.policy.model,
            keep_means=keep_means,
            keep_all_states=keep_all_states,
            pinned=pinned,
        )

    @torch.no_grad()
    def complete(self, x: torch.Tensor, sigmas: torch.Tensor, cond: Conditioning) -> torch.Tensor:
        """ODE completion of ``x`` (B, C, H, W) along ``sigmas`` (from x's sigma down to 0), no grad:
        the final latents (B, C, H, W). A coarser schedule is a shorter ``sigmas``."""
        plan = ode_plan(sigmas)
        return self.rollout(plan, x, cond, torch.zeros(len(x), dtype=torch.long), None).final

    def transition(
        self,
        plan: StepPlan,
        j: int,
        x: torch.Tensor,
        inputs: Conditioning,
        x_next: torch.Tensor,
        velocity_options: dict | None = None,
    ) -> StepOutput:
        """Score transition ``j`` of ``plan`` (x -> x_next) under the current policy, with grad.
        ``velocity_options``: keyword arguments of the adapter's ``velocity`` for this forward."""
        return transition(
            self.adapter,
            plan,
            j,
            x,
            inputs,
            self.guidance_scale,
            x_next=x_next,
            model=self.policy.model,
            velocity_options=velocity_options,
        )

    def shared_transition(
        self,
        plan: StepPlan,
        j: int,
        x: torch.Tensor,
        cond: Conditioning,
        rows: torch.Tensor,
        *,
        x_next: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        model: torch.nn.Module | None = None,
    ) -> StepOutput:
        """Transition ``j`` of ``plan`` for len(rows) members that share their inputs: member i starts
        from x[rows[i]] under cond[rows[i]]. One forward of the n distinct inputs (``x`` (n, C, H, W),
        ``cond`` n rows), its velocity broadcast to the members, then each member's own step: sampled
        from ``generator`` or, given ``x_next`` (len(rows), ...), scored. With grad when grad is on; the
        rollout and the update both call this, so their log-probs go through the same math. ``model``:
        other weights (``reference_weights()``)."""
        rows = rows.to(x.device)
        sigma, sigma_next, noise_level = plan.step_values(j)
        v = self.adapter.velocity(
            x, sigma, self.model_inputs(cond), self.guidance_scale, model=model or self.policy.model
        )
        return step(
            plan.kinds[j],
            v.index_select(0, rows),
            x.float().index_select(0, rows),
            sigma,
            sigma_next,
            noise_level,
            sigma_at_one=plan.sigma_at_one,
            x_next=x_next,
            generator=generator,
        )

    @torch.no_grad()
    def reference_transition(
        self,
        plan: StepPlan,
        j: int,
        x: torch.Tensor,
        inputs: Conditioning,
        x_next: torch.Tensor,
        velocity_options: dict | None = None,
    ) -> StepOutput:
        """The same transition under the reference policy (the base weights: LoRA off, or a frozen copy)."""
        with self.reference_weights() as model:
            return transition(
                self.adapter,
                plan,
                j,
                x,
                inputs,
                self.guidance_scale,
                x_next=x_next,
                model=model,
                velocity_options=velocity_options,
            )

    def velocity(
        self,
        x: torch.Tensor,
        sigma: torch.Tensor | float,
        cond: Conditioning,
        *,
        guidance_scale: float | None = None,
        model: torch.nn.Module | None = None,
    ) -> torch.Tensor:
        """v(x, sigma | cond) under the current policy (or ``model``: inside ``reference_weights()`` or
        ``average_weights(name)``), with grad when grad is on. ``sigma``: a float or (B,) per row;
        ``guidance_scale`` defaults to ``sample.guidance_scale`` (1.0: the conditional prediction alone)."""
        g = self.guidance_scale if guidance_scale is None else guidance_scale
        return self.adapter.velocity(x, sigma, self.model_inputs(cond, g), g, model=model or self.policy.model)

    def reward_with_grad(self, media: Any, prompts: list[str], metadata: list[dict]) -> torch.Tensor:
        """The run's rewards of non-zero weight, summed by weight, with autograd back to ``media``: (B,) on its
        device (``flowrl.reward_models.differentiable.GradRewardSum``; a method that declares
        ``Needs.differentiable_reward``)."""
        if self.reward is None:
            raise RuntimeError(f"method {self.cfg.method.name} asked for a differentiable reward it does not declare")
        return self.reward(media, prompts, metadata)

    def decode_with_grad(self, latents: torch.Tensor, checkpoint: bool = False) -> Any:
        """The adapter's decode with autograd back to ``latents``: its ``decode_with_grad`` where the family has
        one, else its ``decode`` without the no-grad decorator it carries. ``checkpoint``: recompute the decoder's
        activations in the backward (``torch.utils.checkpoint``). A family whose decode cuts the graph inside is
        refused in one line."""
        import inspect

        own = getattr(self.adapter, "decode_with_grad", None)
        decode = own if callable(own) else inspect.unwrap(type(self.adapter).decode).__get__(self.adapter)
        if checkpoint and torch.is_grad_enabled():
            from torch.utils.checkpoint import checkpoint as recompute

            media = recompute(decode, latents, use_reentrant=False)
        else:
            media = decode(latents)
        if latents.requires_grad and torch.is_grad_enabled():
            leaves = media.values() if isinstance(media, dict) else [media]
            if not any(isinstance(t, torch.Tensor) and t.requires_grad for t in leaves):
                raise RuntimeError(
                    f"model.pipeline={self.cfg.model.pipeline}: its decode carries no gradient, which method "
                    f"{self.cfg.method.name} backpropagates through (give the adapter a decode_with_grad)"
                )
        return media

    @contextmanager
    def weights(self, name: Weights | str) -> Iterator[torch.nn.Module]:
        """The module to call (as ``model=``) with the weights ``name`` swapped in, restored on exit:
        ``Weights.REFERENCE`` (the base: LoRA off, or full fine-tuning's frozen copy), ``EMA`` (``train.ema``) or
        a parameter average the method declares (``Needs.averages``); no grad inside, except under the reference,
        whose caller chooses."""
        policy, which = self.policy, Weights.of(name)
        if which is Weights.EMA and policy.ema is None:
            raise RuntimeError(f"method {self.cfg.method.name} asked for EMA weights: set train.ema=true")
        if which not in (Weights.REFERENCE, Weights.EMA):
            self._check_average(name)
        if which is Weights.REFERENCE:
            with policy.weights(name) as model:
                yield model
            return
        with torch.no_grad(), policy.weights(name) as model:
            yield model

    @contextmanager
    def average_weights(self, name: str) -> Iterator[torch.nn.Module]:
        """The policy with the method's parameter average ``name`` (``Method.averages``) swapped in,
        restored on exit; no grad inside. Before its first update the average is the initial policy."""
        self._check_average(name)
        with self.weights(name) as model:
            yield model

    def _check_average(self, name: str) -> None:
        if name not in self.policy.averages:
            raise RuntimeError(
                f"method {self.cfg.method.name} asked for the average {name!r}, which it does "
                f"not declare in Method.averages ({sorted(self.policy.averages) or 'none'})"
            )

    def ema_weights(self) -> Iterator[torch.nn.Module]:
        """The policy with its EMA weights swapped in (``train.ema``), restored on exit; no grad inside."""
        return self.weights(Weights.EMA)

    def reference_weights(self) -> Iterator[torch.nn.Module]:
        """The reference policy (``weights(Weights.REFERENCE)``)."""
        return self.weights(Weights.REFERENCE)
