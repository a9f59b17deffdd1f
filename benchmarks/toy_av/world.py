"""The toy audio-video world: a coloured flash and a pitched beep at a prompt-given time, and an exact detector.

A clip is ``FRAMES`` frames of ``SIZE`` x ``SIZE`` pixels at ``FPS`` (2.1 s) with a stereo sound track at
``SAMPLE_RATE`` (the LTX-2 vocoder's rate). A prompt names three things:

    "a red flash and a low beep early"      colour (6) x pitch (3) x time slot (3) = 54 prompts

* **Video**: black frames, then at the onset frame ``o`` the whole frame in the colour at full intensity,
  0.4 of it at ``o + 1`` and 0.15 at ``o + 2``.
* **Audio**: silence, then from ``o / FPS`` seconds a sine of the pitch (200, 400 or 800 Hz: multiples of
  100 Hz, so every 240-sample vocoder frame starts at phase 0) with a 5 ms attack and an exponential decay
  (time constant 0.15 s), amplitude 0.6, the same on both channels.
* **Slots**: ``early`` onsets frames 2-5, ``middle`` 7-10, ``late`` 12-15. A render draws the onset uniformly in
  the prompt's slot; flash and beep start on the same frame (they are one event).

**The detector** (``detect``) is exact on renders (``tests/benchmarks/test_toy_av.py`` checks every prompt):

* video: ``m_k`` = the largest channel mean of frame ``k``; the onset is the frame of the largest rise
  ``m_k - m_{k-1}`` (``m_{-1} = 0``); a flash is present when ``m`` at the onset is >= 0.3; its colour is the
  pattern of channels above half the brightest one at the onset frame (none of the six: ``"unknown"``);
* audio: ``r_k`` = the RMS of the mono mix in frame ``k``'s window (``SAMPLE_RATE / FPS`` samples); the onset
  is the frame of the largest rise; a beep is present when ``r`` there is >= 0.05; its pitch is the nearest of
  the three in log-frequency to the strongest FFT bin of the onset window and the next one.

**The judgement** (``judge``): ``video_ok`` (present, right colour, onset in the slot), ``audio_ok`` (present,
right pitch, onset in the slot), ``sync`` (both present, onsets at most ``SYNC_TOLERANCE`` = 1 frame, 0.125 s,
apart) and ``all_ok``; and the soft scores the rewards train on (``reward.py``).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

FRAMES = 17  # 8k + 1 for LTX-2's video VAE: 3 latent frames
FPS = 8
SIZE = 32
SAMPLE_RATE = 24000  # the LTX-2 vocoder's output rate
SAMPLES_PER_FRAME = SAMPLE_RATE // FPS  # 3000

COLORS: dict[str, tuple[float, float, float]] = {
    "red": (1.0, 0.0, 0.0),
    "green": (0.0, 1.0, 0.0),
    "blue": (0.0, 0.0, 1.0),
    "yellow": (1.0, 1.0, 0.0),
    "magenta": (1.0, 0.0, 1.0),
    "cyan": (0.0, 1.0, 1.0),
}
PITCHES: dict[str, float] = {"low": 200.0, "mid": 400.0, "high": 800.0}
SLOTS: dict[str, tuple[int, int]] = {"early": (2, 5), "middle": (7, 10), "late": (12, 15)}  # onset frames, inclusive
FLASH_DECAY = (1.0, 0.4, 0.15)  # intensity at the onset frame and the two after it
BEEP_AMPLITUDE, BEEP_DECAY_S, BEEP_ATTACK_S = 0.6, 0.15, 0.005
SYNC_TOLERANCE = 1  # frames
MIN_FLASH, MIN_BEEP = 0.3, 0.05

WORDS: tuple[str, ...] = ("a", "flash", "and", "beep", *COLORS, *PITCHES, *SLOTS)


def prompt_of(color: str, pitch: str, slot: str) -> str:
    return f"a {color} flash and a {pitch} beep {slot}"


def row_of(color: str, pitch: str, slot: str) -> dict[str, Any]:
    return {"prompt": prompt_of(color, pitch, slot), "color": color, "pitch": pitch, "slot": slot}


def all_rows() -> list[dict[str, Any]]:
    """Every prompt of the world, in a fixed order (54)."""
    return [row_of(c, p, s) for c, p, s in itertools.product(COLORS, PITCHES, SLOTS)]


def split_rows(heldout: int = 12, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """(train, held-out) prompts: ``heldout`` combinations drawn with ``seed`` such that every colour, pitch and
    slot stays in the training set (the held-out ones are new combinations of known words)."""
    rows = all_rows()
    rng = random.Random(f"toy_av:{seed}")
    for _ in range(1000):
        test = rng.sample(rows, heldout)
        train = [r for r in rows if r not in test]
        if all({r[k] for r in train} == set(v) for k, v in (("color", COLORS), ("pitch", PITCHES), ("slot", SLOTS))):
            return train, test
    raise ValueError(f"toy_av: no split with {heldout} held-out prompts keeps every word in training")


def check_row(row: Any, where: str) -> dict[str, Any]:
    """The row's colour, pitch and slot, checked; one-line ``ValueError`` naming ``where`` otherwise."""
    if not isinstance(row, dict):
        raise ValueError(f"{where}: metadata is {type(row).__name__}, expected a dict with color, pitch, slot")
    for key, allowed in (("color", COLORS), ("pitch", PITCHES), ("slot", SLOTS)):
        if row.get(key) not in allowed:
            raise ValueError(f"{where}: {key}={row.get(key)!r}; allowed: {', '.join(allowed)}")
    return row


# ------------------------------------------------------------------------------------------ renders


def render_video(color: str, onset: int) -> np.ndarray:
    """(FRAMES, 3, SIZE, SIZE) float32 in [0, 1]."""
    frames = np.zeros((FRAMES, 3, SIZE, SIZE), dtype=np.float32)
    rgb = np.asarray(COLORS[color], dtype=np.float32)[:, None, None]
    for k, level in enumerate(FLASH_DECAY):
        if onset + k < FRAMES:
            frames[onset + k] = level * rgb
    return frames


def render_audio(pitch: str, onset: int, num_samples: int, channels: int = 2) -> np.ndarray:
    """(channels, num_samples) float32 in [-1, 1]: the beep from frame ``onset``'s start."""
    t = np.arange(num_samples, dtype=np.float64) / SAMPLE_RATE
    start = onset / FPS
    after = np.clip(t - start, 0.0, None)
    envelope = np.where(t >= start, np.minimum(after / BEEP_ATTACK_S, 1.0) * np.exp(-after / BEEP_DECAY_S), 0.0)
    wave = BEEP_AMPLITUDE * envelope * np.sin(2 * np.pi * PITCHES[pitch] * t)
    return np.repeat(wave[None].astype(np.float32), channels, axis=0)


def draw_onset(slot: str, rng: random.Random) -> int:
    lo, hi = SLOTS[slot]
    return rng.randint(lo, hi)


@dataclass(frozen=True)
class Clip:
    row: dict[str, Any]
    onset: int


def draw_clips(rows: Sequence[dict], rng: random.Random) -> list[Clip]:
    return [Clip(row, draw_onset(row["slot"], rng)) for row in rows]


# ------------------------------------------------------------------------------------------ detector


@dataclass(frozen=True)
class Detection:
    video_onset: int
    video_present: bool
    color: str
    audio_onset: int
    audio_present: bool
    pitch: str


def _largest_rise(levels: np.ndarray) -> int:
    rise = np.diff(np.concatenate([[0.0], levels]))
    return int(np.argmax(rise))


def detect_video(frames: np.ndarray) -> tuple[int, bool, str]:
    """(F, 3, H, W) in [0, 1] -> (onset frame, present, colour)."""
    means = np.asarray(frames, dtype=np.float64).mean(axis=(2, 3))  # (F, 3)
    level = means.max(axis=1)
    onset = _largest_rise(level)
    present = bool(level[onset] >= MIN_FLASH)
    pattern = tuple(float(c > 0.5 * level[onset]) for c in means[onset])
    color = next((name for name, rgb in COLORS.items() if rgb == pattern), "unknown")
    return onset, present, color


def detect_audio(audio: np.ndarray, num_frames: int = FRAMES) -> tuple[int, bool, str]:
    """(C, N) at SAMPLE_RATE -> (onset frame, present, pitch)."""
    mono = np.asarray(audio, dtype=np.float64).reshape(-1, np.shape(audio)[-1]).mean(axis=0)
    windows = [mono[k * SAMPLES_PER_FRAME : (k + 1) * SAMPLES_PER_FRAME] for k in range(num_frames)]
    rms = np.array([math.sqrt(float(np.mean(w**2))) if w.size else 0.0 for w in windows])
    onset = _largest_rise(rms)
    present = bool(rms[onset] >= MIN_BEEP)
    segment = mono[onset * SAMPLES_PER_FRAME : (onset + 2) * SAMPLES_PER_FRAME]
    if segment.size < 16:
        return onset, False, "unknown"
    spectrum = np.abs(np.fft.rfft(segment * np.hanning(segment.size)))
    freqs = np.fft.rfftfreq(segment.size, 1.0 / SAMPLE_RATE)
    peak = float(freqs[int(np.argmax(spectrum[1:])) + 1])
    pitch = min(PITCHES, key=lambda name: abs(math.log(peak / PITCHES[name])))
    return onset, present, pitch


def detect(video: np.ndarray, audio: np.ndarray) -> Detection:
    vo, vp, color = detect_video(video)
    ao, ap, pitch = detect_audio(audio, num_frames=len(video))
    return Detection(vo, vp, color, ao, ap, pitch)


def slot_score(onset: int, slot: str) -> float:
    """1 inside the slot, then 1/3 less per frame outside it."""
    lo, hi = SLOTS[slot]
    distance = max(lo - onset, onset - hi, 0)
    return max(0.0, 1.0 - distance / 3)


@dataclass(frozen=True)
class Judgement:
    video_ok: bool
    audio_ok: bool
    sync: bool
    video_score: float  # (colour right + slot score) / 2 when a flash is present, else 0
    audio_score: float  # (pitch right + slot score) / 2 when a beep is present, else 0
    sync_score: float  # 1 - |video onset - audio onset| / 4 (at least 0) when both are present, else 0
    detection: Detection

    @property
    def all_ok(self) -> bool:
        return self.video_ok and self.audio_ok and self.sync


def judge(video: np.ndarray, audio: np.ndarray, row: dict[str, Any]) -> Judgement:
    d = detect(video, audio)
    lo, hi = SLOTS[row["slot"]]
    video_ok = d.video_present and d.color == row["color"] and lo <= d.video_onset <= hi
    audio_ok = d.audio_present and d.pitch == row["pitch"] and lo <= d.audio_onset <= hi
    both = d.video_present and d.audio_present
    gap = abs(d.video_onset - d.audio_onset)
    video_score = (
        (float(d.color == row["color"]) + slot_score(d.video_onset, row["slot"])) / 2 if d.video_present else 0.0
    )
    audio_score = (
        (float(d.pitch == row["pitch"]) + slot_score(d.audio_onset, row["slot"])) / 2 if d.audio_present else 0.0
    )
    return Judgement(
        video_ok=video_ok,
        audio_ok=audio_ok,
        sync=both and gap <= SYNC_TOLERANCE,
        video_score=video_score,
        audio_score=audio_score,
        sync_score=max(0.0, 1.0 - gap / 4) if both else 0.0,
        detection=d,
    )


def summarize(judgements: Sequence[Judgement]) -> dict[str, float]:
    """Accuracies over a list of judgements: video, audio, sync and all three."""
    n = max(1, len(judgements))
    return {
        "video_acc": sum(j.video_ok for j in judgements) / n,
        "audio_acc": sum(j.audio_ok for j in judgements) / n,
        "sync_acc": sum(j.sync for j in judgements) / n,
        "all_acc": sum(j.all_ok for j in judgements) / n,
        "n": len(judgements),
    }
