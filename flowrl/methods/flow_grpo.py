"""Flow-GRPO (arXiv 2505.05470): SDE rollouts, group-normalised trajectory advantages, PPO-clip + KL.

Other methods subclass this and override one of its three choices:

* ``plan``: the step plan of one rollout call (kinds, noise levels, windows, merged steps);
* ``advantages``: rewards of the iteration -> (N,) trajectory or (N, T) per-transition advantages;
* ``transition_loss``: the loss of one trained transition.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from flowrl.advantages import clip_advantages, group_advantages
from flowrl.losses import gaussian_kl, ppo_clip_loss
from flowrl.plan import StepPlan, make_plan
from flowrl.sde import StepOutput


@dataclass
class TransitionLoss:
    loss: torch.Tensor  # scalar, with grad
    policy_loss: torch.Tensor  # detached scalars from here on
    kl: torch.Tensor
    clip_frac: torch.Tensor
    approx_kl: torch.Tensor
    ratio_mean: torch.Tensor


class FlowGRPO:
    name = "flow_grpo"
    needs_reference = True  # the trainer computes the reference mean when beta > 0

    def __init__(self, cfg):
        self.cfg = cfg
        if cfg.method.options:
            unknown = ", ".join(sorted(cfg.method.options))
            raise ValueError(f"method.options: flow_grpo takes no options, got {unknown}")

    def plan(self, sigmas: torch.Tensor, rng: random.Random) -> StepPlan:
        s = self.cfg.sample
        window_range = tuple(s.window_range) if s.window_range is not None else None
        return make_plan(sigmas, s.sde_type, s.noise_level, s.window_size, window_range, s.timestep_fraction, rng)

    def advantages(self, rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
        t = self.cfg.train
        adv = group_advantages(rewards, group_ids, global_std=t.global_std, eps=t.std_eps)
        return clip_advantages(adv, t.adv_clip_max)

    def transition_loss(
        self,
        new: StepOutput,
        old_log_prob: torch.Tensor,
        advantages: torch.Tensor,
        ref_mean: torch.Tensor | None,
    ) -> TransitionLoss:
        t = self.cfg.train
        pg = ppo_clip_loss(new.log_prob, old_log_prob, advantages, t.clip_range)
        loss = pg.loss
        kl = torch.zeros(())
        if ref_mean is not None and t.beta > 0:
            kl = gaussian_kl(new.mean, ref_mean, new.std).mean()
            loss = loss + t.beta * kl
        return TransitionLoss(
            loss, pg.loss.detach(), kl.detach(), pg.clip_frac, pg.approx_kl, pg.ratio.mean()
        )
