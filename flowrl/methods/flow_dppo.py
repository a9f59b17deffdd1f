"""Flow-DPPO (arXiv 2606.11025; the code of Tencent-Hunyuan/UniRL ``unirl/algorithms/flowdppo.py``, X-GenGroup/
Flow-Factory ``dppo`` and verl-omni ``docs/algo/flowdppo.md``): Flow-GRPO's SDE rollout and group advantages, with the
PPO clip replaced by a trust region on the exact per-transition KL.

Each SDE transition is a Gaussian of one std under the old and the new policy, so their KL is exact:
``‖μ_old − μ_θ‖² / (2σ_k²)``, reduced by the mean over the latent's elements as UniRL does (its threshold is
calibrated on that scale). A row is dropped only when that KL is at least ``kl_threshold`` and its ratio moves
further in its advantage's direction; the loss is ``−mean(A ρ 1[¬drop])`` (``flowrl.losses.dppo_mask_loss``). The
rollout keeps each transition's mean (the loss part ``dppo_mask`` requires ``gaussian_means``); ``beta`` adds the
exact Gaussian KL to the reference as in Flow-GRPO.

The KL's σ_k is the step's own std (verl-omni's too). UniRL's normaliser caps σ at 0.99 in 1 − σ instead of
Flow-GRPO's σ_1 substitute at σ = 1, so its first-step KL is smaller (by 3.57x on a 10-step shift-3 grid); the
option ``kl_sigma_cap`` (UniRL: 0.99) computes the KL with UniRL's std, ``unirl_kl_std``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from flowrl.configkit import ConfigError
from flowrl.losses import PolicyLossOutput, dppo_mask_loss
from flowrl.methods.flow_grpo import FlowGRPO
from flowrl.methods.options import FlowGRPOOptions
from flowrl.plan import StepPlan
from flowrl.rollout import Trajectory
from flowrl.sde import StepOutput, flow_sde_g


@dataclass
class FlowDPPOOptions(FlowGRPOOptions):
    """Flow-GRPO's knobs (its ``clip_range`` is unused: no clip) and the trust region's threshold."""

    # τ on the mean-reduced KL (UniRL's kl_mask_threshold; Flow-Factory's default is 1e-6)
    kl_threshold: float = 1e-5
    # the KL's std: None, the step's own (σ_1 in place of σ = 1 in 1 - σ, as Flow-GRPO's step and verl-omni); c:
    # UniRL's a sqrt(σ / (1 - min(σ, c))) sqrt(σ - σ'), its cap 0.99 (flow_sde only)
    kl_sigma_cap: float | None = None

    def __post_init__(self):
        super().__post_init__()
        if not self.kl_threshold > 0:
            raise ConfigError(f"method.options.kl_threshold: must be > 0, got {self.kl_threshold}")
        if self.kl_sigma_cap is not None:
            if not 0 < self.kl_sigma_cap < 1:
                raise ConfigError(f"method.options.kl_sigma_cap: must be in (0, 1) or null, got {self.kl_sigma_cap}")
            if self.sde_type != "flow_sde":
                raise ConfigError(
                    f"method.options.kl_sigma_cap: UniRL's normaliser is the flow_sde std, but method.options."
                    f"sde_type is {self.sde_type!r}"
                )


def unirl_kl_std(std, plan: StepPlan, j: int, cap: float):
    """UniRL's KL normaliser for flow_sde transition ``j`` (``_compute_sigma_t``, ``add_kl_coefficient``):
    a sqrt(σ / (1 - min(σ, cap))) sqrt(σ - σ'), from the step's own ``std`` (B,) (a mapping per modality for joint
    latents) times g_UniRL / g_step, where the step's g substitutes σ_1 for σ = 1 in 1 - σ. Below the cap the
    factor is exactly 1."""
    sigma = plan.step_values(j)[0]
    own = flow_sde_g(sigma, 1.0, plan.sigma_at_one)
    factor = math.sqrt(sigma / (1 - min(sigma, cap))) / own if own > 0 else 1.0
    if factor == 1.0:
        return std
    if isinstance(std, dict):
        return {m: s * factor for m, s in std.items()}
    return std * factor


def dppo_mask_policy(
    method: FlowGRPO, traj: Trajectory, j: int, new: StepOutput, advantages: torch.Tensor
) -> PolicyLossOutput:
    """The loss part ``dppo_mask``: Flow-DPPO's divergence-masked surrogate of transition ``j``."""
    if traj.means is None:
        raise RuntimeError(f"method.loss=dppo_mask: method {method.name}'s rollout kept no transition means")
    cap = getattr(method.options, "kl_sigma_cap", None)
    std = new.std if cap is None else unirl_kl_std(new.std, traj.plan, j, cap)
    return dppo_mask_loss(
        new.log_prob,
        traj.log_probs[:, j],
        new.mean,
        traj.means[:, j].to(new.mean.device),
        std,
        advantages,
        method.options.kl_threshold,
    )


class FlowDPPO(FlowGRPO):
    name = "flow_dppo"
    Options = FlowDPPOOptions
    default_loss = "dppo_mask"
