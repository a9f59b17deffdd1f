"""E-GRPO (arXiv 2601.00423; ``specs/addon_methods.md`` §4): G²RPO's anchor and branches, with each branch an
entropy-aware MERGED SDE step.

For each active step n (``active_steps``, default the first half of the schedule) the branch is one SDE
transition σ_n -> σ_{n+l}: l is the smallest length whose closed-form step entropy h̃(n, l) =
log(2πe·s²) reaches ``tau`` (``flowrl.credit.entropy.merge_length``; the spec's [inferred] reading of the
paper, τ = 2.2), or a fixed ``merge_lengths`` (one for all, or one per active step: the released code's
``eta_step_merge_list``). The std of a merged step is g(σ_n)·sqrt(σ_n - σ_{n+l}); at l = 1 it is
G²RPO's branch bitwise. The ODE tails start at state n+l, one per granularity (default [1]: the paper's
single tail; [1, 2] is the code's). The released sampler starts that tail at σ_{n+1} of the spliced
schedule, which for l > 1 re-runs steps n+1..n+l-1 on a latent already at σ_{n+l} (a bug its all-1 merge
lists hide); flowrl starts it at σ_{n+l}.

Credit: z-scores within the members that share the merged step (a group's column k), per granularity,
summed over granularities, clipped to ``method.options.adv_clip_max``; loss and schedule are G²RPO's. With several
rewards the authors z-score the WEIGHTED SUM OF THE RAW REWARDS (shengjun-zhang/VisualGRPO ae619bf:
``RewardManager.compute_rewards`` returns Σ_c w_c r_c, ``RolloutBuffer.compute_advantages`` z-scores it):
``reward_zscore="weighted_sum"``, the default. ``"per_reward"`` is G²RPO's rule, Σ_c w_c z(r_c), which
makes each weight the share of its reward whatever the rewards' spreads (in the weighted sum, the reward
with the widest spread dominates whatever its weight). Both: the code's unbiased std + ``eps``, and a group
whose values are all equal gets exactly 0 (the code's float32 (r - mean)/(std + 1e-8) gives it rounding
noise times 1e8, a bias on the shared log-prob). Logs ``method/e_grpo/merge_length_mean``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from flowrl.advantages import clip_advantages
from flowrl.configkit import ConfigError
from flowrl.credit.entropy import merged_steps
from flowrl.credit.granular import granular_advantages
from flowrl.methods.g2rpo import G2RPO, G2RPOOptions
from flowrl.methods.seam import Advantages, Needs, RewardTable

QUANTITIES = ("h_tilde", "per_element")
REWARD_ZSCORES = ("weighted_sum", "per_reward")


@dataclass
class EGRPOOptions(G2RPOOptions):
    active_steps: list[int] | None = None  # the steps n a merged branch starts at; None: 0 .. T//2 - 1
    tau: float = 2.2  # entropy threshold of the adaptive merge
    merge_lengths: int | list[int] | None = None  # fixed l (one, or one per active step); None: adaptive
    entropy: str = "h_tilde"  # the quantity tau applies to: log(2πe s²), or per element ½ log(2πe s²)
    granularities: list[int] = (1,)
    reward_zscore: str = "weighted_sum"  # z-score Σ w_c r_c (the code) | "per_reward": Σ w_c z(r_c) (G²RPO)

    def __post_init__(self):
        if self.trained_steps is not None:
            raise ConfigError("method.options.trained_steps: e_grpo's branches start at active_steps")
        super().__post_init__()
        if self.merge_lengths is None and self.sde_type != "flow_sde":
            raise ConfigError(
                f"method.options.sde_type: adaptive merging needs flow_sde (a merged {self.sde_type} "
                f"step does not gain entropy); set merge_lengths for fixed lengths"
            )
        if self.reward_zscore not in REWARD_ZSCORES:
            raise ConfigError(
                f"method.options.reward_zscore: {self.reward_zscore!r} is not one of {', '.join(REWARD_ZSCORES)}"
            )
        if self.entropy not in QUANTITIES:
            raise ConfigError(f"method.options.entropy: {self.entropy!r} is not one of {', '.join(QUANTITIES)}")
        lengths = [self.merge_lengths] if isinstance(self.merge_lengths, int) else (self.merge_lengths or [])
        if any(not isinstance(length, int) or length < 1 for length in lengths):
            raise ConfigError(f"method.options.merge_lengths: {self.merge_lengths} must be integers >= 1")
        if self.active_steps is not None and (
            not self.active_steps or min(self.active_steps) < 0 or len(set(self.active_steps)) < len(self.active_steps)
        ):
            raise ConfigError(f"method.options.active_steps: {self.active_steps} must be distinct steps >= 0")


class EGRPO(G2RPO):
    name = "e_grpo"
    Options = EGRPOOptions
    default_credit = "entropy_merged"

    def __init__(self, cfg):
        super().__init__(cfg)
        o = self.options
        starts = self.active_steps()
        if starts[-1] >= self.num_steps:
            raise ConfigError(
                f"method.options.active_steps: {starts[-1]} is past the last step of sample.num_steps={self.num_steps}"
            )
        if isinstance(o.merge_lengths, list) and len(o.merge_lengths) != len(starts):
            raise ConfigError(
                f"method.options.merge_lengths: {len(o.merge_lengths)} lengths for {len(starts)} active steps"
            )
        fixed = [o.merge_lengths] * len(starts) if isinstance(o.merge_lengths, int) else o.merge_lengths
        for n, length in zip(starts, fixed or []):
            if n + length > self.num_steps:
                raise ConfigError(
                    f"method.options.merge_lengths: a step merged from {n} over {length} ends past "
                    f"sample.num_steps={self.num_steps}"
                )
        self._pairs: list[tuple[int, int]] = []

    def active_steps(self) -> list[int]:
        steps = self.options.active_steps
        return list(range(self.num_steps // 2 or 1)) if steps is None else sorted(steps)

    def branches(self, sigmas: torch.Tensor) -> list[tuple[int, int]]:
        o = self.options
        merged = merged_steps(
            sigmas.float().cpu(),
            self.active_steps(),
            o.noise_level,
            tau=o.tau,
            lengths=o.merge_lengths,
            quantity=o.entropy,
        )
        self._pairs = [(s.start, s.end) for s in merged]
        return self._pairs

    def merged_credit(self, table: RewardTable) -> Advantages:
        """The credit part ``entropy_merged``, (N, K): Σ_λ z(Σ_c w_c r_c) within groups
        (``reward_zscore="weighted_sum"``, the code), or G²RPO's Σ_λ Σ_c w_c z(r_c) (``"per_reward"``); clipped
        to ``method.options.adv_clip_max``. Its metric: the mean merge length of the latest exploration."""
        o = self.options
        if o.reward_zscore == "per_reward":
            adv = self.granular_credit(table)
        else:
            rewards = self.table(table.columns, "final")[..., None]  # (N, K, L, 1): the weighted raw reward sum
            values = granular_advantages(rewards, table.group_ids, unbiased=o.unbiased, eps=o.eps)  # (N, K)
            adv = Advantages(clip_advantages(values, self.options.adv_clip_max))
        if self._pairs:
            adv.metrics["e_grpo/merge_length_mean"] = sum(b - a for a, b in self._pairs) / len(self._pairs)
        return adv

    def needs(self) -> Needs:
        return replace(super().needs(), metrics=(*super().needs().metrics, "e_grpo/merge_length_mean"))
