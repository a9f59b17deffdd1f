"""The argument checks of AV-GRPO's math, shared by ``flowrl.sde`` (the capped step), ``flowrl.losses`` (the
weights and loss) and ``flowrl.credit.av_grpo`` (the credit): each refusal is a one-line ValueError naming the
culprit."""

from __future__ import annotations

import torch

ScalarOrTensor = float | torch.Tensor
PHASES = ("video", "audio")  # AV-GRPO's phases: the trained modality


def fail(message: str) -> None:
    raise ValueError(message)


def check_phase(phase: str) -> None:
    if phase not in PHASES:
        fail(f"phase must be 'video' or 'audio' (the trained modality), got {phase!r}")


def finite_f32(name: str, value: ScalarOrTensor) -> torch.Tensor:
    """``value`` as a float32 tensor; refused unless every element is finite."""
    t = torch.as_tensor(value, dtype=torch.float32)
    if not torch.isfinite(t).all():
        fail(f"{name} must be finite, got {value!r}")
    return t
