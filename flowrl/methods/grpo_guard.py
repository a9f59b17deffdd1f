"""GRPO-Guard's RatioNorm (arXiv 2510.22319; ``specs/flow_grpo_core.md`` §1.8): Flow-GRPO with a corrected ratio.

GRPO-Guard is a recipe, not a class: Flow-GRPO with the loss part ``ratio_norm`` (``flowrl.methods.parts``),
registered as ``grpo_guard`` in ``flowrl.methods``. The rollout also keeps each transition's mean μ_old
(``keep_means``). With s_j the step's per-element std and b = mean_d (μ_θ - μ_old)² / (2 s_j²), the log-ratio
becomes (log π_θ - log π_old + b)·s_j, which is mean_d[(μ_θ - μ_old)·ε] with ε the rollout's noise: the
step-dependent bias (ratio mean below 1 at low-noise steps) and scale are gone. The clipped surrogate of
transition j is divided by |Δ_j| (``flowrl.losses.ratio_norm_clip_loss``). Exploration, credit and the KL term
are Flow-GRPO's own; any other method built on Flow-GRPO's loss gets the same ratio with
``method.loss=ratio_norm``.

This module keeps the old import path of ``GRPOGuard`` (the recipe's class) and ``ratio_norm_log_ratio``.
"""

from __future__ import annotations

from flowrl.losses import ratio_norm_log_ratio
from flowrl.methods.flow_grpo import GAUSSIAN_KINDS


def __getattr__(name: str):
    if name == "GRPOGuard":
        from flowrl.methods import method_class

        return method_class("grpo_guard")
    raise AttributeError(name)


__all__ = ["GAUSSIAN_KINDS", "ratio_norm_log_ratio"]
