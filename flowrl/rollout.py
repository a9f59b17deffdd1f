"""Rollouts: walk a step plan with the policy, recording states and exact per-transition log-probs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flowrl.pipelines.base import Conditioning, PipelineAdapter
from flowrl.plan import StepPlan, ode_plan
from flowrl.sde import StepOutput, step


@dataclass
class Trajectory:
    """One rollout batch. B samples, T transitions of one ``plan``.

    states:     (B, T+1, C, H, W) fp32; states[:, 0] is the initial noise, states[:, T] the final latent
    log_probs:  (B, T) fp32 log-prob of each transition under the rollout policy (0 for ODE steps)
    prompt_ids: (B,) index of each sample's prompt in the iteration's prompt list (its group id)
    plan:       the transitions (sigma pairs, kinds, noise levels, which ones train)
    """

    states: torch.Tensor
    log_probs: torch.Tensor
    prompt_ids: torch.Tensor
    plan: StepPlan

    @property
    def final(self) -> torch.Tensor:
        return self.states[:, -1]

    def __len__(self) -> int:
        return self.states.shape[0]

    def select(self, rows: torch.Tensor) -> "Trajectory":
        """The samples at ``rows`` (a (B,) bool mask or an index tensor)."""
        if rows.dtype == torch.bool:
            rows = rows.nonzero().flatten()
        rows = rows.to(self.states.device)
        return Trajectory(
            self.states.index_select(0, rows),
            self.log_probs.index_select(0, rows.to(self.log_probs.device)),
            self.prompt_ids.index_select(0, rows.to(self.prompt_ids.device)),
            self.plan,
        )


def transition(
    adapter: PipelineAdapter,
    plan: StepPlan,
    i: int,
    x: torch.Tensor,
    inputs: Conditioning,
    guidance_scale: float,
    *,
    x_next: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    model: torch.nn.Module | None = None,
) -> StepOutput:
    """Transition ``i`` of ``plan`` from ``x``: sample it, or score ``x_next`` when given.

    ``inputs`` is ``adapter.model_inputs(cond, guidance_scale)`` for the rows of ``x``.
    The rollout and the training update both call this, so the recomputed log-prob goes through
    exactly the same forward and step math as the one recorded. ``model`` replaces the adapter's
    transformer for this forward (the trainer passes its distributed wrapper or the KL reference).
    """
    sigma = float(plan.sigma[i])
    v = adapter.velocity(x, sigma, inputs, guidance_scale, model=model)
    return step(
        plan.kinds[i],
        v,
        x,
        sigma,
        float(plan.sigma_next[i]),
        float(plan.noise_levels[i]),
        sigma_at_one=plan.sigma_at_one,
        x_next=x_next,
        generator=generator,
    )


@torch.no_grad()
def rollout(
    adapter: PipelineAdapter,
    cond: Conditioning,
    plan: StepPlan,
    noise: torch.Tensor,
    prompt_ids: torch.Tensor,
    guidance_scale: float,
    generator: torch.Generator | None = None,
    model: torch.nn.Module | None = None,
) -> Trajectory:
    """Sample ``noise.shape[0]`` trajectories along ``plan``. ``cond`` rows align with ``noise`` rows.

    ``model`` replaces the adapter's transformer (the trainer passes its accelerate-wrapped module, so
    that sharded models such as FSDP run their forward as they must)."""
    x = noise.float()
    inputs = adapter.model_inputs(cond, guidance_scale)
    states = [x]
    log_probs = []
    for i in range(len(plan)):
        out = transition(adapter, plan, i, x, inputs, guidance_scale, generator=generator, model=model)
        x = out.x_next
        states.append(x)
        log_probs.append(out.log_prob)
    return Trajectory(torch.stack(states, dim=1), torch.stack(log_probs, dim=1), prompt_ids, plan)


@torch.no_grad()
def sample_images(
    adapter: PipelineAdapter,
    prompts: list[str],
    noise: torch.Tensor,
    num_steps: int,
    guidance_scale: float,
    batch_size: int,
    model: torch.nn.Module | None = None,
) -> torch.Tensor:
    """Decoded deterministic (ODE) samples of ``prompts`` from ``noise``, ``batch_size`` at a time, on the CPU.

    The evaluation sampler: the same prompts and noise give the same images, so two models (or two
    iterations of one) are compared like with like.
    """
    plan = ode_plan(adapter.sigmas(num_steps))
    images = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        cond = adapter.encode_prompts(chunk)
        traj = rollout(adapter, cond, plan, noise[start : start + len(chunk)], torch.arange(len(chunk)),
                       guidance_scale, model=model)  # fmt: skip
        images.append(adapter.decode(traj.final).cpu())
    return torch.cat(images)
