"""Conformance check of a reward on synthetic media (``flowrl rewards test NAME``).

Checks, each a line of the verdict: the call succeeds; scores have shape (B,); they are finite; they lie
in the declared ``score_range``; reversing the batch reverses the scores (batch-order invariance; groups
of a pairwise reward stay whole); a second identical call gives identical scores (determinism).

Synthetic media per ``modality``: images half of which show the word quoted in their prompt (so OCR and
text-alignment rewards see both matches and mismatches), each with a source image (``metadata["source_images"]``,
for edit rewards), videos of a moving square, audio of tones, noise
and silence, and audio-video clips whose clicks coincide with flashes.
"""

from __future__ import annotations

import glob
import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from flowrl.reward_models.base import RewardError, batch_size_of, check_scores, index_media

WORDS = ("Hello", "Flow", "Reward", "Quantum", "Zebra", "Sunset", "Orbit", "Maple")
ATOL, RTOL = 1e-4, 1e-4


def _font(size: int):
    from PIL import ImageFont

    found = sorted(glob.glob("/usr/share/fonts/**/DejaVuSans-Bold.ttf", recursive=True))
    return ImageFont.truetype(found[0], size) if found else ImageFont.load_default(size=size)


def text_image(text: str, size: int = 256) -> torch.Tensor:
    """Dark text on a light background, (3, size, size) in [0, 1]."""
    import numpy as np
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (size, size), (245, 245, 240))
    ImageDraw.Draw(image).text((size // 2, size // 2), text, fill=(20, 20, 20), font=_font(size // 6), anchor="mm")
    return torch.from_numpy(np.array(image)).permute(2, 0, 1).float() / 255


def synthetic_batch(
    modality: str, batch: int = 4, pairwise: bool = False, seed: int = 0
) -> tuple[Any, list[str], list[dict]]:
    """(media, prompts, metadata) of ``batch`` samples; pairwise rewards get prompt groups of 2."""
    gen = torch.Generator().manual_seed(seed)
    words = [WORDS[(i // 2 if pairwise else i) % len(WORDS)] for i in range(batch)]
    prompts = [f'A wooden sign that says "{w}"' for w in words]
    metadata = [{"ocr_text": w} for w in words]
    if modality == "image":
        images = [text_image(w) if i % 2 == 0 else torch.rand(3, 256, 256, generator=gen) for i, w in enumerate(words)]
        # each sample's source image, as an editing row carries it (edit rewards compare with it): the sign's
        # word on a smaller canvas, so sources differ in size from the samples as real ones may
        for meta, w in zip(metadata, words):
            meta["source_images"] = [text_image(w, 128)]
        return torch.stack(images), prompts, metadata
    if modality == "video":
        return moving_square(batch, 6, 64, gen), prompts, metadata
    if modality == "audio":
        return {"audio": synthetic_audio(batch, 16000, gen), "sample_rate": 16000}, prompts, metadata
    if modality == "audio_video":
        video, audio = flashes_and_clicks(batch, 24, 16000, gen)
        return {"video": video, "audio": audio, "fps": 8.0, "sample_rate": 16000}, prompts, metadata
    raise RewardError(f"unknown modality {modality!r}")


def moving_square(batch: int, frames: int, size: int, gen: torch.Generator) -> torch.Tensor:
    """(B, F, 3, size, size): a bright square moving right over a random dark background."""
    video = 0.2 * torch.rand(batch, 1, 3, size, size, generator=gen).expand(-1, frames, -1, -1, -1).clone()
    side = size // 4
    for b in range(batch):
        for f in range(frames):
            x = (f * (size - side) // max(1, frames - 1) + 7 * b) % (size - side)
            video[b, f, :, size // 3 : size // 3 + side, x : x + side] = 0.9
    return video


def synthetic_audio(batch: int, rate: int, gen: torch.Generator) -> torch.Tensor:
    """(B, 1, rate): 1 s of tone, noise, silence, chirp, in turn."""
    t = torch.arange(rate) / rate
    kinds = [
        0.5 * torch.sin(2 * math.pi * 440 * t),
        0.3 * torch.randn(rate, generator=gen),
        torch.zeros(rate),
        0.5 * torch.sin(2 * math.pi * (200 + 800 * t) * t),
    ]
    return torch.stack([kinds[i % 4] for i in range(batch)])[:, None]


def flashes_and_clicks(batch: int, frames: int, rate: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Video (B, F, 3, 32, 32) with flashes and audio (B, 1, N) at 8 fps with clicks at the same frames."""
    video = 0.1 * torch.ones(batch, frames, 3, 32, 32)
    per_frame = rate // 8
    audio = 0.01 * torch.randn(batch, 1, frames * per_frame, generator=gen)
    for b in range(batch):
        for f in (4 + b, 12 + b):
            video[b, f] = 0.9
            audio[b, 0, f * per_frame : f * per_frame + 400] += 0.8
    return video, audio


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""


@dataclass
class ConformanceReport:
    reward: str
    modality: str
    batch: int
    checks: list[Check] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def format(self) -> str:
        lines = [f"reward {self.reward!r}  modality {self.modality}  batch {self.batch}  {self.seconds:.2f} s per call"]
        for check in self.checks:
            lines.append(
                f"  [{'ok' if check.ok else 'FAIL'}] {check.name}" + (f": {check.detail}" if check.detail else "")
            )
        if self.scores:
            lines.append("  scores: " + ", ".join(f"{s:.4f}" for s in self.scores))
        lines.append(f"verdict: {'PASS' if self.ok else 'FAIL'}")
        return "\n".join(lines)


def _close(a: torch.Tensor, b: torch.Tensor) -> tuple[bool, float]:
    diff = float((a - b).abs().max()) if a.numel() else 0.0
    return bool(torch.allclose(a, b, atol=ATOL, rtol=RTOL)), diff


def _range_check(scores: torch.Tensor, score_range: Any) -> Check:
    if not score_range:
        return Check("range", True, "none declared")
    low, high = score_range
    bad = [s for s in scores.tolist() if (low is not None and s < low - ATOL) or (high is not None and s > high + ATOL)]
    return Check("range", not bad, f"declared [{low}, {high}]" + (f"; outside: {bad}" if bad else ""))


def run_conformance(reward: Any, name: str, batch: int = 4, seed: int = 0) -> ConformanceReport:
    """Run every check on ``reward``; never raises for a misbehaving reward (failures are checks)."""
    modality = getattr(reward, "modality", "image")
    report = ConformanceReport(name, modality, batch)
    media, prompts, metadata = synthetic_batch(modality, batch, bool(getattr(reward, "pairwise", False)), seed)
    try:
        start = time.perf_counter()
        out = reward(media, prompts, metadata)
        report.seconds = time.perf_counter() - start
    except (RewardError, ValueError, RuntimeError, TypeError, KeyError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        report.checks.append(Check("call", False, f"{type(exc).__name__}: {message}"))
        return report
    report.checks.append(Check("call", True))
    scores = torch.as_tensor(getattr(out, "scores", out)).detach().float().cpu()
    report.checks.append(Check("shape", tuple(scores.shape) == (batch,), f"{tuple(scores.shape)}, expected ({batch},)"))
    if not report.checks[-1].ok:
        return report
    report.scores = scores.tolist()
    bad = int((~torch.isfinite(scores)).sum())
    report.checks.append(Check("finiteness", bad == 0, f"{bad} NaN or inf" if bad else ""))
    if bad:
        return report
    report.checks.append(_range_check(scores, getattr(reward, "score_range", None)))

    order = list(reversed(range(batch_size_of(media))))
    checks = [
        (
            "batch-order invariance",
            (index_media(media, order), [prompts[i] for i in order], [metadata[i] for i in order]),
            scores[order],
            "after reversing the batch",
        ),
        ("determinism", (media, prompts, metadata), scores, "between two identical calls"),
    ]
    for check, args, expected, what in checks:
        try:
            got = check_scores(name, reward(*args), batch).scores
        except (RewardError, ValueError, RuntimeError, TypeError, KeyError) as exc:
            report.checks.append(
                Check(check, False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            )
            continue
        same, diff = _close(got, expected)
        report.checks.append(Check(check, same, f"max |diff| {diff:.2e} {what}"))
    return report
