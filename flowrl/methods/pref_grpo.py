"""Pref-GRPO (arXiv 2508.20751; spec: addon_methods.md section 5): pairwise-preference win rates.

Flow-GRPO's rollouts and clipped loss, with two changes:

* **credit**: every reward component is z-scored separately within its group (the sample std, eps
  1e-8 by default) and the z-scores are summed with the rewards' weights. A pairwise reward (e.g.
  ``unifiedreward`` with ``mode: pairwise``) already scores each sample by its win rate over its group,
  every unordered pair judged once (or in both orders); ``win_rate_from`` turns pointwise rewards into
  the score-derived win rate w_i = (1 / (G - 1)) sum_{j != i} [1(r_i > r_j) + 1/2 1(r_i = r_j)], so the two
  kinds mix. The reward calls of each reward are logged (``cost/reward_calls/<name>``: C(G, 2) per
  group for a pairwise judge).
* **a random subset of transitions per sample** (``subset_fraction``, the authors' 60 %): each row
  trains its own draw of the plan's trained transitions (``Trajectory.row_mask``), and the update
  forwards only the rows that train each transition.

The authors' scripts (``scripts/_common_finetune.sh`` since 2026-02) also switch on three things flowrl has
for every method: ``--apply_gdpo`` is the credit normalisation ``method.credit_norm=gdpo`` (the weighted sum
z-scored again over the whole gathered batch, then clipped: this credit then leaves the clip to it), ``--rationorm``
is the loss ``method.loss=ratio_norm`` (GRPO-Guard's ratio, the loss divided by |dt|) and ``--init_same_noise`` is
``sample.same_noise_in_group``; ``sd35m-pref-grpo`` turns all three on.

The mean win rate is always 1/2, so judge progress by an absolute held-out reward (``eval_reward``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from flowrl.advantages import clip_advantages, group_zscore
from flowrl.configkit import ConfigError
from flowrl.methods.base import Context, Experience, PromptBatch
from flowrl.methods.flow_grpo import FlowGRPO
from flowrl.methods.options import AdvantageClipOptions, PolicyOptions, SDEOptions, check_knobs
from flowrl.methods.seam import Advantages, RewardTable


def score_win_rates(scores: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """The score-derived win rate of every sample within its group, (N,): a tie counts a half; a group
    of one gets 1/2. Invariant to any strictly increasing transform of the scores."""
    out = torch.full(scores.shape, 0.5, dtype=torch.float32)
    for g in torch.unique(group_ids):
        members = (group_ids == g).nonzero().flatten()
        r = scores[members].double()
        if len(r) < 2:
            continue
        wins = (r[:, None] > r[None, :]).double().sum(1) + 0.5 * ((r[:, None] == r[None, :]).double().sum(1) - 1)
        out[members] = (wins / (len(r) - 1)).float()
    return out


@dataclass
class PrefGRPOOptions(SDEOptions, PolicyOptions, AdvantageClipOptions):
    """Flow-GRPO's step plan, loss knobs and advantage clip; its credit z-scores each reward's win rates with its own
    ``std_eps`` (1e-8, the authors'), which ``train.std_eps`` never set (no ``global_std``: always per group)."""

    subset_fraction: float = 0.6  # each sample trains this share of the plan's trained transitions (at least 1)
    win_rate_from: list[str] = field(default_factory=list)  # pointwise rewards scored by their win rates
    std_eps: float = 1e-8  # z = (w - mean) / (std + std_eps) per component
    unbiased_std: bool = True  # the sample std (the authors' code) or the population std

    def __post_init__(self):
        check_knobs(self)
        if not 0 < self.subset_fraction <= 1:
            raise ConfigError(f"method.options.subset_fraction: must be in (0, 1], got {self.subset_fraction}")
        if self.std_eps <= 0:
            raise ConfigError(f"method.options.std_eps: must be > 0, got {self.std_eps}")


class PrefGRPO(FlowGRPO):
    name = "pref_grpo"
    Options = PrefGRPOOptions
    default_credit = "win_rates"

    def __init__(self, cfg):
        super().__init__(cfg)
        unknown = [n for n in self.options.win_rate_from if n not in cfg.reward]
        if unknown:
            raise ConfigError(
                f"method.options.win_rate_from: {unknown[0]!r} is not a configured reward "
                f"(reward: {', '.join(cfg.reward) or 'none'})"
            )

    def explore(self, ctx: Context, batch: PromptBatch) -> Experience:
        exp = super().explore(ctx, batch)
        traj = exp.traj
        trained = traj.trained_indices
        m = max(1, round(self.options.subset_fraction * len(trained)))
        mask = torch.zeros(len(traj), len(traj.plan), dtype=torch.bool)
        for i in range(len(traj)):  # each sample's own draw, seeded by its global position
            mask[i, ctx.rng("subset", batch.position + i).sample(trained, m)] = True
        return replace(exp, traj=replace(traj, row_mask=mask))

    def win_rate_credit(self, table: RewardTable) -> Advantages:
        """The credit part ``win_rates``: each reward's win rates (a pairwise reward's own, or derived from the
        scores of ``win_rate_from``) z-scored within groups and summed with the rewards' weights; clipped unless
        GDPO (``method.credit_norm=gdpo``) re-normalises first, as the authors' code clamps only after GDPO."""
        o = t = self.options
        rewards, group_ids = table.columns, table.group_ids
        total = torch.zeros(len(group_ids))
        rates = []
        for name, weight in self.cfg.reward.items():
            values = rewards[f"final/{name}"]
            if name in o.win_rate_from:
                values = score_win_rates(values, group_ids)
            if name in o.win_rate_from or name in table.pairwise:
                rates.append(values.float())
            total += float(weight) * group_zscore(values, group_ids, eps=o.std_eps, unbiased=o.unbiased_std)
        metrics = {}
        if rates:
            all_rates = torch.cat(rates)
            metrics = {
                "pref/win_rate_mean": float(all_rates.mean()),
                "pref/win_rate_std": float(all_rates.std(unbiased=False)),
            }
        renorm = self.parts.credit_norm.name == "gdpo"
        return Advantages(total if renorm else clip_advantages(total, t.adv_clip_max), metrics=metrics)
