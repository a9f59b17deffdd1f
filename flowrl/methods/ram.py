"""RAM, Reinforce Adjoint Matching (arXiv 2605.10759; spec: addon_methods.md section 6).

No SDE rollouts, no per-step log-probs, no reward gradients. Each iteration:

1. endpoints x0 by the ODE sampler (``sample.*``) under the lagged policy θ_old (``endpoint_policy``);
2. one reward each; A = (r - mean of the prompt's group) / (std + eps), the std over the whole
   iteration (``std_scope=iteration``, the reference's) or within the group;
3. K noisings per endpoint, t ~ p(t) ∝ t^alpha, x_t = (1 - t) x0 + t eps;
4. the velocity regressed on the stop-gradient target y = v_ref + m A ((eps - x0) - v_old), all three
   conditional predictions without CFG: L = mean over items and dimensions of (v_theta(x_t) - y)^2;
5. one optimizer step over all items; then θ_old <- d_k θ_old + (1 - d_k) θ, d_k = min(0.01 k, 0.9).

With A = 0 the target is v_ref (distillation to the base); with m A = 1 and v_old = v_ref it is eps - x0,
plain flow matching on the policy's own samples. v_ref and v_old do not change within an iteration, so
they are evaluated once per item, at exploration (``forward_process``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flowrl.advantages import group_zscore
from flowrl.configkit import ConfigError
from flowrl.methods.base import Context, TransitionLoss
from flowrl.methods.forward_process import Endpoints, ForwardProcess, ForwardProcessOptions
from flowrl.methods.seam import Advantages, RewardTable, TrainEntry
from flowrl.pipelines.base import Conditioning


def ram_target(
    v_ref: torch.Tensor,
    v_old: torch.Tensor,
    x0: torch.Tensor,
    noise: torch.Tensor,
    advantages: torch.Tensor,
    multiplier: float,
) -> torch.Tensor:
    """y = v_ref + m A ((eps - x0) - v_old), no grad; advantages (B,), the rest (B, C, H, W)."""
    with torch.no_grad():
        scale = (multiplier * advantages.float()).view(-1, *[1] * (x0.ndim - 1))
        return v_ref + scale * ((noise - x0) - v_old)


def iteration_zscore_credit(method, table: RewardTable) -> Advantages:
    """The credit part ``iteration_zscore``: A = (r - group mean) / (std + std_eps), the std over the whole
    iteration (``std_scope=iteration``) or within the group; unclipped, (N,)."""
    o = method.options
    values = group_zscore(table.columns["final"], table.group_ids, eps=o.std_eps, global_std=o.std_scope == "iteration")
    return Advantages(values)


@dataclass
class RAMOptions(ForwardProcessOptions):
    reward_multiplier: float = 100.0  # m: 100 for GenEval and OCR, 1000 for PickScore in the reference configs
    std_scope: str = "iteration"  # the advantage's std: over the whole iteration (the reference's) | group
    std_eps: float = 1e-4  # A = (r - group mean) / (std + std_eps)
    target_velocity: str = "old"  # the velocity inside the target: old (θ_old) | current (θ)

    def __post_init__(self):
        super().__post_init__()
        if self.reward_multiplier <= 0:
            raise ConfigError(f"method.options.reward_multiplier: must be > 0, got {self.reward_multiplier}")
        if self.std_scope not in ("iteration", "group"):
            raise ConfigError(f"method.options.std_scope: {self.std_scope!r}; allowed: iteration, group")
        if self.std_eps <= 0:
            raise ConfigError(f"method.options.std_eps: must be > 0, got {self.std_eps}")
        if self.target_velocity not in ("old", "current"):
            raise ConfigError(f"method.options.target_velocity: {self.target_velocity!r}; allowed: old, current")


class RAM(ForwardProcess):
    name = "ram"
    Options = RAMOptions
    default_credit = "iteration_zscore"
    keeps_flat_rows = True  # its regression pulls every row, a 0 advantage too

    def target_weights(self) -> tuple[str, ...]:
        return ("ref", self.options.target_velocity)

    def schedule(self, num_units: int) -> list[list[TrainEntry]]:
        return [[TrainEntry(q) for q in range(num_units)]]  # one optimizer step over every item of the iteration

    def transition_loss(
        self, ctx: Context, traj: Endpoints, j: int, cond: Conditioning, advantages: torch.Tensor
    ) -> TransitionLoss:
        """The loss part ``ram_regression``: mean (v_theta(x_t) - y)^2, y = ``ram_target`` (v_ref in every one)."""
        o = self.options
        x_t, t = traj.x_t(j), traj.t[:, j]
        y = ram_target(
            traj.velocities["ref"][:, j],
            traj.velocities[o.target_velocity][:, j],
            traj.x0,
            traj.noise[:, j],
            advantages,
            o.reward_multiplier,
        )
        v = ctx.velocity(x_t, t, cond, guidance_scale=ctx.conditional_scale)
        loss = (v - y).pow(2).mean()
        return TransitionLoss(loss, loss.detach())
