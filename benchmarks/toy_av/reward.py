"""The toy audio-video scores as rewards (``world.judge`` on each clip).

Registered names (each sample's metadata carries its row: ``color``, ``pitch``, ``slot``):

* ``toy_av_video``: the flash's soft score, (colour right + slot score) / 2 (0 without a flash);
* ``toy_av_audio``: the beep's, (pitch right + slot score) / 2;
* ``toy_av_sync``: 1 - |video onset - audio onset| / 4 frames, at least 0 (0 unless both are present);
* ``toy_av``: the mean of the three (the joint reward Flow-GRPO trains on);
* ``toy_av_accuracy``: 1 when the flash, the beep and their sync are all right (the benchmark's accuracy).

AV-GRPO's phases take ``toy_av_video`` + ``toy_av_sync`` (video) and ``toy_av_audio`` + ``toy_av_sync`` (audio).
Details (length B): ``video_ok``, ``audio_ok``, ``sync``, ``all_ok`` (bool tensors).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from flowrl.reward_models.base import RewardError, RewardOutput

from . import world

PARTS = ("video", "audio", "sync", "mean", "all_ok")


def judge_media(media: Any, metadata: list[dict], who: str) -> list[world.Judgement]:
    """Judge every clip of audio-video ``media`` against its metadata row; one-line ``RewardError`` otherwise."""
    if not isinstance(media, Mapping) or "video" not in media or "audio" not in media:
        raise RewardError(f"{who}: expects audio-video media {{'video': (B, F, 3, H, W), 'audio': (B, C, N)}}")
    rate = int(media.get("sample_rate", world.SAMPLE_RATE))
    if rate != world.SAMPLE_RATE:
        raise RewardError(f"{who}: audio at {rate} Hz; the toy world's detector reads {world.SAMPLE_RATE} Hz")
    video = torch.as_tensor(media["video"]).float().cpu().numpy()
    audio = torch.as_tensor(media["audio"]).float().cpu()
    audio = (audio if audio.ndim == 3 else audio[:, None]).numpy()
    if not len(video) == len(audio) == len(metadata):
        raise RewardError(f"{who}: {len(video)} clips, {len(audio)} sound tracks, {len(metadata)} metadata rows")
    rows = []
    for i, meta in enumerate(metadata):
        try:
            rows.append(world.check_row(meta, f"{who}: sample {i}"))
        except ValueError as exc:
            raise RewardError(str(exc)) from None
    return [world.judge(v, a, row) for v, a, row in zip(video, audio, rows)]


class ToyAVReward:
    name = "toy_av"
    modality = "audio_video"
    score_range = (0.0, 1.0)
    part = "mean"

    def __init__(self, part: str | None = None) -> None:
        part = part or self.part
        if part not in PARTS:
            raise RewardError(f"{self.name} reward: part={part!r}; allowed: {', '.join(PARTS)}")
        self.part = part

    def __call__(self, media: Any, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        judgements = judge_media(media, metadata, f"{self.name} reward")
        parts = {
            "video": [j.video_score for j in judgements],
            "audio": [j.audio_score for j in judgements],
            "sync": [j.sync_score for j in judgements],
            "all_ok": [float(j.all_ok) for j in judgements],
        }
        parts["mean"] = [(v + a + s) / 3 for v, a, s in zip(parts["video"], parts["audio"], parts["sync"])]
        details = {key: torch.tensor([getattr(j, key) for j in judgements], dtype=torch.bool)
                   for key in ("video_ok", "audio_ok", "sync", "all_ok")}  # fmt: skip
        return RewardOutput(scores=torch.tensor(parts[self.part], dtype=torch.float32), details=details)


class ToyAVVideo(ToyAVReward):
    name, part = "toy_av_video", "video"


class ToyAVAudio(ToyAVReward):
    name, part = "toy_av_audio", "audio"


class ToyAVSync(ToyAVReward):
    name, part = "toy_av_sync", "sync"
    reads_prompt = False  # the flash-beep gap only: AV-GRPO refuses it as a phase's only reward


class ToyAVAccuracy(ToyAVReward):
    name, part = "toy_av_accuracy", "all_ok"
