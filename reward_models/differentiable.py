"""Differentiable rewards: scores with autograd back to the decoded media, for methods that backpropagate through
the reward (direct reward backprop: ReFL, DRaFT-K).

A reward is differentiable when it has ``score_grad(media, prompts, metadata) -> Tensor``: ``media`` a float tensor
of images ``(B, 3, H, W)`` in ``[0, 1]`` (video ``(B, F, 3, H, W)``) on any device, carrying grad; the result
``(B,)`` float32 on ``media``'s device, differentiable with respect to ``media``. Its preprocessing is done in torch
(resize, crop, normalise), never through uint8 or Pillow, which would cut the graph. The CLIP-family rewards
(PickScore, CLIPScore, the LAION aesthetic, HPSv2) and the per-frame ``video`` reward over one of them have it; a
reward whose differentiability depends on what it wraps says so with a ``differentiable`` attribute.

``GradRewardSum`` is the weighted sum the loss calls (``sum_k w_k score_grad_k``) over the run's rewards of non-zero
weight, built from the very instances the reward phase scores with (no second copy of a model), counting its
calls. ``Smoothness`` is a small torch reward for tests and CPU recipes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import torch

from flowrl.reward_models.base import RewardError, RewardOutput


@runtime_checkable
class DifferentiableReward(Protocol):
    """What a method that backpropagates through the reward calls."""

    def score_grad(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> torch.Tensor: ...


def is_differentiable(reward: Any) -> bool:
    """Whether ``reward`` (an instance or a class) has ``score_grad`` and does not say otherwise (``differentiable``
    False: a wrapper around a reward without it)."""
    if not callable(getattr(reward, "score_grad", None)):
        return False
    flag = getattr(reward, "differentiable", True)
    return bool(flag) if isinstance(flag, bool) else True  # a class's property object: the instance decides


def check_differentiable_names(weights: Mapping[str, float], reward_args: Mapping[str, dict], method: str) -> None:
    """Refuse, in one line and before anything loads, a reward of non-zero weight whose class has no ``score_grad``
    (a wrapper, the ``video`` reward, is judged by the reward it wraps: ``reward_args.<name>.reward``)."""
    for name, weight in weights.items():
        if weight == 0:
            continue  # scored and logged, never backpropagated
        culprit = _not_differentiable(name, reward_args.get(name, {}))
        if culprit is not None:
            raise RewardError(_refusal(name, culprit, method))


def _not_differentiable(name: str, args: Any) -> str | None:
    """The reward (``name`` or one it wraps) without ``score_grad``; None when all have it. An unknown name is
    left to its own error."""
    from flowrl.reward_models.base import reward_target

    target = name
    for _ in range(4):  # a wrapper of a wrapper at most
        try:
            cls = reward_target(target)
        except RewardError:
            return None
        if not is_differentiable(cls):
            return target
        wrapped = args.get("reward") if hasattr(cls, "differentiable") and isinstance(args, Mapping) else None
        if not isinstance(wrapped, str):
            return None  # not a wrapper, or its default inner reward (the video reward's: pickscore)
        target, args = wrapped, args.get("reward_kwargs") or {}
    return None


def _refusal(name: str, culprit: str, method: str) -> str:
    what = f"reward {name!r}" if culprit == name else f"reward {name!r} (over {culprit!r})"
    return (
        f"{what} is not differentiable, and method {method} backpropagates through its reward: use one with "
        f"score_grad (pickscore, clipscore, aesthetic, hpsv2, smoothness, or video over one of them), or give it "
        f"weight 0 to only log it"
    )


class GradRewardSum:
    """``sum_k w_k r_k(media)`` with grad over the rewards of non-zero weight; ``calls`` counts reward evaluations
    (samples x rewards), as the reward phase counts its own."""

    def __init__(self, rewards: Mapping[str, tuple[Any, float]], method: str = "reward_backprop"):
        self.rewards = {name: (r, float(w)) for name, (r, w) in rewards.items() if w != 0}
        if not self.rewards:
            raise RewardError(f"method {method}: every reward has weight 0, so there is nothing to backpropagate")
        for name, (reward, _) in self.rewards.items():
            if not is_differentiable(reward):
                inner = getattr(reward, "inner_name", name)
                raise RewardError(_refusal(name, inner if inner != name else name, method))
        self.calls = 0

    def __call__(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> torch.Tensor:
        """(B,) float32 on ``media``'s device, with grad."""
        total = None
        for name, (reward, weight) in self.rewards.items():
            scores = reward.score_grad(media, prompts, metadata)
            if scores.shape != (len(prompts),):
                raise RewardError(
                    f"reward {name!r}: score_grad gave shape {tuple(scores.shape)}, not ({len(prompts)},)"
                )
            term = weight * scores.float().to(_device(media))
            total = term if total is None else total + term
            self.calls += len(prompts)
        return total

    def take_calls(self) -> int:
        """The calls since the last take (the trainer adds them to the iteration's ``cost/reward_calls``)."""
        calls, self.calls = self.calls, 0
        return calls


def _device(media: Any) -> torch.device:
    return media.device if isinstance(media, torch.Tensor) else next(iter(media.values())).device


def total_variation(images: torch.Tensor) -> torch.Tensor:
    """Mean absolute difference of neighbouring pixels, down and across, summed: (B, ..., C, H, W) -> (B,)."""
    down = (images[..., 1:, :] - images[..., :-1, :]).abs().flatten(1).mean(dim=1)
    across = (images[..., :, 1:] - images[..., :, :-1]).abs().flatten(1).mean(dim=1)
    return down + across


class Smoothness:
    """``-total_variation(media)``: 0 for a flat image, -2 at most for a checkerboard of 0 and 1; images or video.
    A differentiable stand-in for JPEG compressibility (flat images compress well), for tests and the CPU recipe."""

    name = "smoothness"
    modalities = ("image", "video")
    score_range = (-2.0, 0.0)

    def score_grad(self, media: Any, prompts: list[str], metadata: list[dict]) -> torch.Tensor:
        if isinstance(media, Mapping):  # a video mapping {"video": (B, F, 3, H, W), "fps": ...}
            media = media.get("video")
        if not isinstance(media, torch.Tensor) or media.ndim not in (4, 5) or media.shape[-3] != 3:
            shape = tuple(media.shape) if isinstance(media, torch.Tensor) else type(media).__name__
            raise RewardError(f"smoothness: expects images (B, 3, H, W) or video (B, F, 3, H, W), got {shape}")
        return -total_variation(media.float())

    @torch.no_grad()
    def __call__(self, media: Any, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        return RewardOutput(scores=self.score_grad(media, prompts, metadata).cpu())
