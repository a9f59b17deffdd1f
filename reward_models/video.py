"""Video rewards from image rewards: score sampled frames with an image reward, then aggregate.

    r = agg_k  image_reward(frame_{t_k}, prompt),   t_k = round(k (F - 1) / (K - 1)),  k = 0..K-1

``frames=K`` frames are taken uniformly (all when K >= F or K is None); ``aggregate`` is one of ``mean``,
``min``, ``max``, ``median``, ``first``, ``last``. A wrapped reward whose ``modality`` is ``"video"`` is
video-native and gets the clips as they are. Media: (B, F, 3, H, W) in [0, 1] or ``{"video": ..., "fps": ...}``.
Details: ``per_frame`` (B, K) and the wrapped reward's own details (per frame, flattened B*K).
"""

from __future__ import annotations

from typing import Any

import torch

from flowrl.reward_models.base import RewardError, RewardOutput, build_reward, check_scores
from flowrl.reward_models.media import unwrap_video

AGGREGATIONS = ("mean", "min", "max", "median", "first", "last")


def uniform_frame_indices(num_frames: int, count: int | None) -> list[int]:
    """``count`` indices spread evenly over ``num_frames`` (both ends included); all frames when it would not thin."""
    if count is None or count >= num_frames:
        return list(range(num_frames))
    if count < 1:
        raise RewardError(f"video reward: frames must be at least 1, got {count}")
    if count == 1:
        return [(num_frames - 1) // 2]
    return [round(k * (num_frames - 1) / (count - 1)) for k in range(count)]


def aggregate_frames(per_frame: torch.Tensor, how: str) -> torch.Tensor:
    """(B, K) -> (B,) by ``how`` (see ``AGGREGATIONS``)."""
    if how == "mean":
        return per_frame.mean(dim=1)
    if how == "min":
        return per_frame.min(dim=1).values
    if how == "max":
        return per_frame.max(dim=1).values
    if how == "median":
        return per_frame.median(dim=1).values  # the lower middle value for even K
    if how == "first":
        return per_frame[:, 0]
    if how == "last":
        return per_frame[:, -1]
    raise RewardError(f"video reward: aggregate={how!r}; allowed: {', '.join(AGGREGATIONS)}")


class VideoFrameReward:
    """``VideoFrameReward(reward="ocr", frames=8, aggregate="mean", reward_kwargs={...})``."""

    name = "video"
    modality = "video"

    def __init__(
        self,
        reward: Any = "pickscore",
        frames: int | None = 8,
        aggregate: str = "mean",
        reward_kwargs: dict | None = None,
    ):
        aggregate_frames(torch.zeros(1, 1), aggregate)  # validate early
        if frames is not None and frames < 1:
            raise RewardError(f"video reward: frames must be at least 1, got {frames}")
        self.inner_name = reward if isinstance(reward, str) else getattr(reward, "name", type(reward).__name__)
        self.inner = build_reward(reward, **(reward_kwargs or {})) if isinstance(reward, str) else reward
        self.frames, self.aggregate = frames, aggregate
        self.native = getattr(self.inner, "modality", "image") == "video"

    @property
    def score_range(self):
        return getattr(self.inner, "score_range", None)

    @property
    def differentiable(self) -> bool:
        """Whether ``score_grad`` works: the wrapped reward has one (``flowrl.reward_models.differentiable``)."""
        from flowrl.reward_models.differentiable import is_differentiable

        return is_differentiable(self.inner)

    def score_grad(self, media: Any, prompts: list[str], metadata: list[dict]) -> torch.Tensor:
        """The aggregated per-frame score (B,) with autograd back to ``media``, on its device."""
        if self.native:
            return self.inner.score_grad(media, prompts, metadata)
        video, _ = unwrap_video(media)  # (B, F, 3, H, W)
        batch, index = len(video), uniform_frame_indices(video.shape[1], self.frames)
        frames = video[:, index].flatten(0, 1)  # (B * K, 3, H, W), video-major
        metadata = metadata or [{} for _ in prompts]
        k = len(index)
        per_frame = self.inner.score_grad(
            frames, [p for p in prompts for _ in range(k)], [m for m in metadata for _ in range(k)]
        )
        return aggregate_frames(per_frame.view(batch, k), self.aggregate)

    def __call__(self, media: Any, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        if self.native:
            return self.inner(media, prompts, metadata)
        video, _ = unwrap_video(media)
        if video.ndim != 5 or video.shape[2] != 3:
            raise RewardError(f"video reward: expects video (B, F, 3, H, W), got {tuple(video.shape)}")
        batch = len(video)
        if batch != len(prompts):
            raise RewardError(f"video reward: {batch} videos but {len(prompts)} prompts")
        index = uniform_frame_indices(video.shape[1], self.frames)
        count = len(index)
        frames = video[:, index].flatten(0, 1)  # (B * K, 3, H, W), video-major
        metadata = metadata or [{} for _ in prompts]
        out = check_scores(
            self.inner_name,
            self.inner(frames, [p for p in prompts for _ in range(count)], [m for m in metadata for _ in range(count)]),
            batch * count,
        )
        per_frame = out.scores.view(batch, count)
        return RewardOutput(
            scores=aggregate_frames(per_frame, self.aggregate),
            details={"per_frame": per_frame, **{f"frame_{k}": v for k, v in out.details.items()}},
        )
