"""Rollouts: walk a step plan with the policy, recording states and exact per-transition log-probs."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

from flowrl import latents
from flowrl.latents import is_joint
from flowrl.media import cat_media, to_cpu
from flowrl.pipelines.base import Conditioning, PipelineAdapter
from flowrl.plan import StepPlan, ode_plan
from flowrl.sde import DETERMINISTIC_KINDS, MULTISTEP_KINDS, StepOutput, joint_step, step

if TYPE_CHECKING:
    from flowrl.methods.seam import TrainingUnit


def states_moved(unit, names: tuple[str, ...], device: torch.device):
    """A dataclass training unit (a ``Trajectory``, ``Endpoints``) with its fields ``names`` (tensors, dicts of
    tensors or None) on ``device``: the large per-sample states that ``train.offload_states`` keeps on the CPU
    between the rollout and the update. Everything else stays where it is."""

    def move(value):
        if isinstance(value, torch.Tensor):
            return value.to(device)
        if isinstance(value, dict):
            return {k: move(v) for k, v in value.items()}
        return value

    return replace(unit, **{name: move(getattr(unit, name)) for name in names})


@dataclass
class Trajectory:
    """One rollout batch. B samples, T transitions of one ``plan``.

    states:      (B, S, C, H, W) fp32, the stored states. A chain (``next_states`` None) stores its
                 T+1 states in order (states[:, 0] the initial noise, states[:, T] the final latent), or,
                 after ``trained_only``, only those at ``state_index``. Branches (``next_states`` given)
                 store transition j's own input at states[:, j].
    next_states: (B, T, C, H, W) or None: transition j lands on next_states[:, j] (branches off an
                 anchor, which do not chain), instead of on the next state of the chain.
    log_probs:   (B, T) fp32 log-prob of each transition under the rollout policy (0 for ODE steps)
    prompt_ids:  (B,) index of each sample's prompt in the iteration's prompt list (its group id)
    plan:        the transitions (sigma pairs, kinds, noise levels, which ones train)
    means:       (B, T, C, H, W) or None: each transition's mean under the rollout policy, kept when a
                 loss needs it (``rollout(keep_means=True)``; GRPO-Guard)
    state_index: the schedule index of each stored state of a chain; None: all T+1 in order
    row_mask:    (B, T) bool or None: row i trains transition j only where row_mask[i, j] (a per-sample
                 subset of the trained transitions, Pref-GRPO's); None: every row trains every one.
                 The update forwards only the rows that train each transition.
    """

    states: torch.Tensor
    log_probs: torch.Tensor
    prompt_ids: torch.Tensor
    plan: StepPlan
    next_states: torch.Tensor | None = None
    means: torch.Tensor | None = None
    state_index: tuple[int, ...] | None = None
    row_mask: torch.Tensor | None = None

    @property
    def trained_indices(self) -> tuple[int, ...]:
        """The transitions that train (those of the plan; with ``row_mask``, each row some of them)."""
        return tuple(self.plan.trained_indices)

    @property
    def final(self) -> torch.Tensor:
        if self.next_states is not None or (self.state_index is not None and self.state_index[-1] != len(self.plan)):
            raise ValueError("this trajectory does not hold a final state (branches, or a trained_only chain)")
        return latents.slot(self.states, -1)

    def __len__(self) -> int:
        return latents.batch_size(self.states)

    def _slot(self, i: int) -> int:
        if self.state_index is None:
            return i
        try:
            return self.state_index.index(i)
        except ValueError:
            raise ValueError(f"state {i} was not kept (trained_only keeps {list(self.state_index)})") from None

    def state(self, i: int) -> torch.Tensor:
        """State ``i`` of a chain (B, C, H, W); an error if it was not kept."""
        if self.next_states is not None:
            raise ValueError("a trajectory of branches has no chain of states")
        return latents.slot(self.states, self._slot(i))

    def pair(self, j: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, x_next) of transition ``j``: (B, C, H, W) each."""
        if self.next_states is not None:
            return latents.slot(self.states, j), latents.slot(self.next_states, j)
        return latents.slot(self.states, self._slot(j)), latents.slot(self.states, self._slot(j + 1))

    def trained_only(self) -> Trajectory:
        """The same trajectory holding only the states its trained transitions read or write: ODE-only
        stretches of a chain keep nothing (a 2-step window of 10 keeps 3 states of 11)."""
        if self.next_states is not None:
            return self
        keep = sorted({i for j in self.plan.trained_indices for i in (j, j + 1)})
        held = list(self.state_index) if self.state_index is not None else list(range(latents.num_slots(self.states)))
        if keep == held:
            return self
        index = torch.tensor([held.index(i) for i in keep], dtype=torch.long)  # empty: an empty window
        states = latents.tree_map(lambda t: t.index_select(1, index.to(t.device)).contiguous(), self.states)
        return replace(self, states=states, state_index=tuple(keep))

    def states_to(self, device: torch.device) -> Trajectory:
        """The same trajectory with its states (and branch ends, means) on ``device`` (``train.offload_states``)."""
        return states_moved(self, ("states", "next_states", "means"), device)

    def select(self, rows: torch.Tensor) -> Trajectory:
        """The samples at ``rows`` (a (B,) bool mask or an index tensor)."""
        if rows.dtype == torch.bool:
            rows = rows.nonzero().flatten()

        def pick(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else latents.index_select(t, 0, rows)

        return replace(
            self,
            states=pick(self.states),
            log_probs=pick(self.log_probs),
            prompt_ids=pick(self.prompt_ids),
            next_states=pick(self.next_states),
            means=pick(self.means),
            row_mask=pick(self.row_mask),
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
    velocity_options: dict | None = None,
    previous: tuple[float, Any] | None = None,
) -> StepOutput:
    """Transition ``i`` of ``plan`` from ``x``: sample it, or score ``x_next`` when given.

    ``inputs`` is ``adapter.model_inputs(cond, guidance_scale)`` for the rows of ``x``.
    The rollout and the training update both call this, so the recomputed log-prob goes through
    exactly the same forward and step math as the one recorded. ``model`` replaces the adapter's
    transformer for this forward (the trainer passes its distributed wrapper or the KL reference).
    ``velocity_options``: keyword arguments of the adapter's own ``velocity`` (LTX-2: ``isolate_modalities``).
    ``previous``: (sigma, data prediction) of the transition before, which a multistep step kind (``dpm2``)
    reads (``StepOutput.x0``); None: it takes a first-order step.
    """
    sigma, sigma_next, noise_level = plan.step_values(i)
    v = adapter.velocity(x, sigma, inputs, guidance_scale, model=model, **(velocity_options or {}))
    if is_joint(x):  # each modality its own kind and noise level; the log-prob over the trained stochastic ones
        kinds = plan.kinds_at(i, x)
        trained = tuple(m for m in plan.trained_of(x) if kinds[m] not in DETERMINISTIC_KINDS)
        return joint_step(
            kinds,
            v,
            x,
            sigma,
            sigma_next,
            plan.noise_levels_at(i, x),
            trained,
            sigma_at_one=plan.sigma_at_one,
            x_next=x_next,
            generator=generator,
            previous=previous,
        )
    history = {"previous": previous} if previous is not None and plan.kinds[i] in MULTISTEP_KINDS else {}
    return step(
        plan.kinds[i],
        v,
        x,
        sigma,
        sigma_next,
        noise_level,
        sigma_at_one=plan.sigma_at_one,
        x_next=x_next,
        generator=generator,
        **history,
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
    keep_means: bool = False,
    keep_all_states: bool = True,
    pinned: dict[str, torch.Tensor] | None = None,
) -> Trajectory:
    """Sample ``noise.shape[0]`` trajectories along ``plan``. ``cond`` rows align with ``noise`` rows.

    ``model`` replaces the adapter's transformer (the trainer passes its accelerate-wrapped module, so
    that sharded models such as FSDP run their forward as they must). ``keep_means``: also keep each
    transition's mean (``Trajectory.means``). ``keep_all_states=False`` keeps only the states the trained
    transitions read or write, and the final one (``state_index`` says which): the others are never held
    together on the device, which matters for video latents. ``pinned`` (joint latents): modality -> states
    (B, T+1, ...) it follows: the modality starts at its state 0 and is overwritten by state i + 1 after
    transition i, so it is the same in every row that shares them (AV-GRPO's anchored partner); its step
    kind should be ``"ode"`` and it should not train (its log-prob would score the overwritten state).
    A multistep step kind (``dpm2``) gets the previous transition's data prediction."""
    x = latents.tree_map(lambda t: t.float(), noise)
    if pinned:
        x = {**x, **{m: states[:, 0].float() for m, states in pinned.items()}}
    inputs = adapter.model_inputs(cond, guidance_scale)
    kept = None if keep_all_states else {i for j in plan.trained_indices for i in (j, j + 1)} | {len(plan)}
    states, index, log_probs, means = [], [], [], []

    def hold(i: int, state: torch.Tensor) -> None:
        if kept is None or i in kept:
            states.append(state)
            index.append(i)

    hold(0, x)
    previous = None  # (sigma, x0) of the transition before, for a multistep step kind
    for i in range(len(plan)):
        out = transition(
            adapter, plan, i, x, inputs, guidance_scale, generator=generator, model=model, previous=previous
        )
        previous = None if out.x0 is None else (plan.step_values(i)[0], out.x0)
        x = out.x_next
        if pinned:
            x = {**x, **{m: states[:, i + 1].float() for m, states in pinned.items()}}
        hold(i + 1, x)
        log_probs.append(out.log_prob)
        if keep_means:
            means.append(out.mean)
    return Trajectory(
        latents.stack(states, dim=1),
        torch.stack(log_probs, dim=1),
        prompt_ids,
        plan,
        means=latents.stack(means, dim=1) if keep_means else None,
        state_index=None if kept is None else tuple(index),
    )


def encode_rows(
    adapter: PipelineAdapter,
    prompts: list[str],
    negative_prompts: list[str] | None = None,
    images: list | None = None,
) -> Conditioning:
    """``adapter.encode_prompts`` with only the arguments given: a text-only run calls it as it always has (no
    ``images`` keyword reaches a family that does not take source images); ``images``: one list of (3, H, W)
    [0, 1] tensors per prompt (``flowrl.data.item_images``)."""
    if images is not None:
        return adapter.encode_prompts(prompts, negative_prompts, images=images)
    if negative_prompts is not None:
        return adapter.encode_prompts(prompts, negative_prompts)
    return adapter.encode_prompts(prompts)


@torch.no_grad()
def sample_images(
    adapter: PipelineAdapter,
    prompts: list[str],
    noise: torch.Tensor,
    num_steps: int,
    guidance_scale: float,
    batch_size: int,
    model: torch.nn.Module | None = None,
    negative_prompts: list[str] | None = None,
    images: list | None = None,
) -> Any:
    """Decoded deterministic (ODE) samples of ``prompts`` from ``noise``, ``batch_size`` at a time, on the CPU:
    the adapter's media (images, or a video or audio mapping, ``flowrl.media``). ``images``: each prompt's
    source images (one list per prompt; None for a text-only family).

    The evaluation sampler: the same prompts and noise give the same images, so two models (or two
    iterations of one) are compared like with like. ``negative_prompts``: each prompt's CFG negative
    (None, or all "": the empty prompt).
    """
    plan = ode_plan(adapter.sigmas(num_steps))
    own_negatives = negative_prompts is not None and any(negative_prompts)
    media = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        negatives = negative_prompts[start : start + batch_size] if own_negatives else None
        sources = images[start : start + batch_size] if images is not None else None
        cond = encode_rows(adapter, chunk, negatives, sources)
        traj = rollout(adapter, cond, plan, latents.rows(noise, slice(start, start + len(chunk))), torch.arange(len(chunk)),
                       guidance_scale, model=model, keep_all_states=False)  # fmt: skip
        media.append(to_cpu(adapter.decode(traj.final)))
    return cat_media(media)


@dataclass
class RolloutBatch:
    """The rollout phase's output for one rollout batch of this process (the update's training unit)."""

    traj: TrainingUnit  # a ``Trajectory``, or a method's own unit (``flowrl.methods.seam.TrainingUnit``)
    cond: Conditioning
    prompts: list[str]
    metadata: list[dict]
    media: Any  # the final samples as the adapter decodes them (``flowrl.media``: images, video, audio), CPU
    # name -> media of B x K samples (sample-major: sample i's K are rows i K .. i K + K - 1): more to score
    extra: dict[str, Any] = field(default_factory=dict)
    info: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> (B,) or (B, K): facts for credit
    pending: Future | None = None  # its reward calls, running in the background (``train.reward_overlap``)
