"""Audio-visual synchrony: a scorer slot for joint audio-video, with a model-free default.

Media: ``{"video": (B, F, 3, H, W), "audio": (B, C, N), "fps": float, "sample_rate": int}`` (missing rates
come from the reward's ``fps`` / ``sample_rate`` arguments).

``scorer="onset"`` (default; in the spirit of AV-Align, with frame differences instead of optical flow):

    motion_t = mean |frame_t - frame_{t-1}|               (t = 1..F-1; motion_0 = 0)
    energy_t = RMS of the audio inside frame t's window  (N / F samples per frame), then its rise
               onset_t = max(energy_t - energy_{t-1}, 0)
    peaks    = local maxima above mean + ``peak_std`` x std of each envelope
    r        = matched / (peaks_video + peaks_audio - matched)   (IoU; a peak matches a peak of the other
               stream within +-``tolerance`` frames, greedily, one-to-one); 0 when neither has a peak

``scorer="module:attr"`` plugs a model in (Synchformer's offset classifier, ImageBind / CAVP similarity):
a callable ``(video, audio, fps, sample_rate) -> (B,)`` scores, e.g. ``-|offset seconds|`` or P(offset 0).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from flowrl.registry import import_target
from flowrl.reward_models.base import RewardError, RewardOutput


def motion_envelope(video: torch.Tensor) -> torch.Tensor:
    """(F, 3, H, W) -> (F,) mean absolute frame difference (0 for the first frame)."""
    diff = (video[1:].float() - video[:-1].float()).abs().mean(dim=(1, 2, 3))
    return torch.cat([torch.zeros(1), diff])


def audio_onsets(audio: torch.Tensor, num_frames: int) -> torch.Tensor:
    """(C, N) -> (F,) positive rise of the per-frame RMS energy."""
    mono = audio.float().mean(dim=0)
    per_frame = mono.shape[0] // num_frames
    if per_frame < 1:
        raise RewardError(f"av_sync: {mono.shape[0]} audio samples for {num_frames} frames")
    rms = mono[: per_frame * num_frames].view(num_frames, per_frame).pow(2).mean(dim=1).sqrt()
    rise = torch.cat([rms[:1], rms[1:] - rms[:-1]])
    return rise.clamp(min=0)


def peaks(envelope: torch.Tensor, peak_std: float = 1.0) -> list[int]:
    """Indices of local maxima (>= both neighbours, > the left one) above mean + peak_std * std."""
    if envelope.numel() < 2 or float(envelope.std()) == 0.0:
        return []
    level = float(envelope.mean() + peak_std * envelope.std())
    padded = torch.cat([envelope[:1] - 1, envelope, envelope[-1:] - 1])
    out = []
    for t in range(envelope.numel()):
        value = padded[t + 1]
        if value > level and value > padded[t] and value >= padded[t + 2]:
            out.append(t)
    return out


def peak_iou(a: list[int], b: list[int], tolerance: int) -> float:
    """Greedy one-to-one matching within ``tolerance``; matched / (|a| + |b| - matched), 0 if both empty."""
    if not a and not b:
        return 0.0
    free = sorted(b)
    matched = 0
    for t in sorted(a):
        near = [u for u in free if abs(u - t) <= tolerance]
        if near:
            free.remove(min(near, key=lambda u: (abs(u - t), u)))
            matched += 1
    return matched / (len(a) + len(b) - matched)


def onset_sync(
    video: torch.Tensor, audio: torch.Tensor, fps: float, sample_rate: int, tolerance: int = 3, peak_std: float = 1.0
) -> torch.Tensor:
    """The default scorer over a batch: (B, F, 3, H, W), (B, C, N) -> (B,)."""
    scores = []
    for clip, sound in zip(video, audio):
        scores.append(
            peak_iou(
                peaks(motion_envelope(clip), peak_std), peaks(audio_onsets(sound, clip.shape[0]), peak_std), tolerance
            )
        )
    return torch.tensor(scores, dtype=torch.float32)


class AvSyncReward:
    """Audio-visual synchrony (see the module docstring)."""

    name = "av_sync"
    modality = "audio_video"
    reads_prompt = False  # pure audio-visual sync: AV-GRPO refuses it as a phase's only reward

    def __init__(
        self,
        scorer: str | Callable = "onset",
        fps: float | None = None,
        sample_rate: int | None = None,
        **scorer_kwargs: Any,
    ):
        if scorer == "onset":
            self.scorer, self.score_range = onset_sync, (0.0, 1.0)
        else:
            self.scorer = import_target(scorer, "reward", RewardError) if isinstance(scorer, str) else scorer
            self.score_range = None
        if not callable(self.scorer):
            raise RewardError(f"av_sync: scorer {scorer!r} is not callable")
        self.fps, self.sample_rate, self.kwargs = fps, sample_rate, scorer_kwargs

    def __call__(self, media: Any, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        if not isinstance(media, Mapping) or "video" not in media or "audio" not in media:
            raise RewardError(
                "av_sync: expects media {'video': (B, F, 3, H, W), 'audio': (B, C, N), 'fps', 'sample_rate'}"
            )
        video, audio = media["video"], media["audio"]
        audio = audio if audio.ndim == 3 else audio[:, None]
        fps, rate = media.get("fps", self.fps), media.get("sample_rate", self.sample_rate)
        if fps is None or rate is None:
            raise RewardError("av_sync: fps and sample_rate are needed (in the media mapping or as arguments)")
        scores = self.scorer(video, audio, float(fps), int(rate), **self.kwargs)
        return RewardOutput(scores=torch.as_tensor(scores, dtype=torch.float32).reshape(len(video)))
