"""Flow-DPPO (arXiv 2606.11025; the code of Tencent-Hunyuan/UniRL ``unirl/algorithms/flowdppo.py``, X-GenGroup/
Flow-Factory ``dppo`` and verl-omni ``docs/algo/flowdppo.md``): Flow-GRPO's SDE rollout and group advantages, with the
PPO clip replaced by a trust region on the exact per-transition KL.

Each SDE transition is a Gaussian of one std under the old and the new policy, so their KL is exact:
``‖μ_old − μ_θ‖² / (2σ_k²)``, reduced by the mean over the latent's elements as UniRL does (its threshold is
calibrated on that scale). A row is dropped only when that KL is at least ``kl_threshold`` and its ratio moves
further in its advantage's direction; the loss is ``−mean(A ρ 1[¬drop])`` (``flowrl.losses.dppo_mask_loss``). The
rollout keeps each transition's mean (the loss part ``dppo_mask`` requires ``gaussian_means``); ``beta`` adds the
exact Gaussian KL to the reference as in Flow-GRPO.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flowrl.configkit import ConfigError
from flowrl.losses import PolicyLossOutput, dppo_mask_loss
from flowrl.methods.flow_grpo import FlowGRPO
from flowrl.methods.options import FlowGRPOOptions
from flowrl.rollout import Trajectory
from flowrl.sde import StepOutput


@dataclass
class FlowDPPOOptions(FlowGRPOOptions):
    """Flow-GRPO's knobs (its ``clip_range`` is unused: no clip) and the trust region's threshold."""

    # τ on the mean-reduced KL (UniRL's kl_mask_threshold; Flow-Factory's default is 1e-6)
    kl_threshold: float = 1e-5

    def __post_init__(self):
        super().__post_init__()
        if not self.kl_threshold > 0:
            raise ConfigError(f"method.options.kl_threshold: must be > 0, got {self.kl_threshold}")


def dppo_mask_policy(
    method: FlowGRPO, traj: Trajectory, j: int, new: StepOutput, advantages: torch.Tensor
) -> PolicyLossOutput:
    """The loss part ``dppo_mask``: Flow-DPPO's divergence-masked surrogate of transition ``j``."""
    if traj.means is None:
        raise RuntimeError(f"method.loss=dppo_mask: method {method.name}'s rollout kept no transition means")
    return dppo_mask_loss(
        new.log_prob,
        traj.log_probs[:, j],
        new.mean,
        traj.means[:, j].to(new.mean.device),
        new.std,
        advantages,
        method.options.kl_threshold,
    )


class FlowDPPO(FlowGRPO):
    name = "flow_dppo"
    Options = FlowDPPOOptions
    default_loss = "dppo_mask"
