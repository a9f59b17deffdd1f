"""Learning-rate schedules over optimizer steps, as pure functions (the trainer sets each step's rate).

The conventions are those of ``diffusers.optimization.get_scheduler`` (and transformers'): a linear
warm-up from 0 over ``warmup`` steps, then constant, a cosine half-wave or a linear ramp down to
``min_ratio`` of the base rate at the last step. The rate is a function of the step count alone, which
checkpoints hold, so a resumed run continues the same schedule.
"""

from __future__ import annotations

import math

SCHEDULES = ("constant", "cosine", "linear")


def lr_factor(step: int, total: int, schedule: str = "constant", warmup: int = 0, min_ratio: float = 0.0) -> float:
    """The multiplier of the base learning rate at optimizer step ``step`` (0-based) of ``total``."""
    if schedule not in SCHEDULES:
        raise ValueError(f"lr schedule {schedule!r}; allowed: {', '.join(SCHEDULES)}")
    if step < warmup:
        return step / warmup
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    shape = 0.5 * (1.0 + math.cos(math.pi * progress)) if schedule == "cosine" else 1.0 - progress
    return min_ratio + (1.0 - min_ratio) * shape
