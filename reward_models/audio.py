"""Audio rewards: ``speech`` (Silero VAD, bundled ONNX), ``clap`` (text-audio similarity, transformers CLAP) and
``band_energy`` (the share of spectral energy in a frequency band, no model).

Audio arrives as (B, C, N) or (B, N) float in [-1, 1] with a sample rate: a tensor plus the reward's
``sample_rate`` argument, or a mapping ``{"audio": tensor, "sample_rate": int}`` (``media.unwrap_audio``).
Channels are averaged to mono; audio is resampled (polyphase, ``scipy``) to the model's rate.

speech: Silero VAD v6 (``silero-vad`` wheel: ``silero_vad.onnx``, MIT) run with onnxruntime only. The 16 kHz
signal is cut into 512-sample chunks, each fed with the 64 samples before it and the recurrent state
(2, B, 128); the model returns P(speech) per chunk. ``r = mean over chunks of P(speech)`` in [0, 1];
details ``speech_frac`` (chunks with P > 0.5).

clap: ``r = cos(text_embedding, audio_embedding)`` of a CLAP model (default ``laion/clap-htsat-unfused``,
48 kHz, the processor's log-mel features and padding rules; clips longer than the extractor's
``max_length_s`` keep their first part, so that its random crop never runs); details none.

band_energy: ``r = sum of P(f) over low_hz <= f <= high_hz / sum of P(f) over all f``, in [0, 1], where P is
the power spectrum ``|rfft|^2`` of the mono mix (channels averaged) of the whole clip, Hann-windowed by
default (``window: none`` for the plain rectangular one), at the audio's own sample rate (no resampling).
A ``high_hz`` above the Nyquist frequency (half the sample rate) is clipped to it; a ``low_hz`` at or above
it is an error (the band would be empty). Silence (zero energy) scores 0. Details none. No model, no
download: a cheap reward for tests and tiny audio models.
"""

from __future__ import annotations

import math
import os
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F

from flowrl.reward_models.base import RewardError, RewardOutput, check_choice, check_type
from flowrl.reward_models.loading import load_pretrained, pick_device
from flowrl.reward_models.media import unwrap_audio

VAD_RATE = 16000
VAD_CHUNK = 512
VAD_CONTEXT = 64
CLAP_MODEL = "laion/clap-htsat-unfused"


def resample(wave: torch.Tensor, rate: int, target: int) -> torch.Tensor:
    """(..., N) at ``rate`` -> (..., M) at ``target`` with a polyphase filter (scipy)."""
    if rate == target:
        return wave
    from scipy.signal import resample_poly

    ratio = Fraction(target, rate).limit_denominator(1000)
    out = resample_poly(wave.detach().cpu().numpy(), ratio.numerator, ratio.denominator, axis=-1)
    return torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32))


def to_mono(name: str, media: Any, default_rate: int | None, target: int) -> torch.Tensor:
    """(B, N) mono at ``target`` Hz."""
    wave, rate = unwrap_audio(name, media, default_rate)  # (B, C, N)
    return resample(wave.mean(dim=1), rate, target)


class SpeechReward:
    """Mean Silero-VAD speech probability (see module docstring)."""

    name = "speech"
    modality = "audio"
    score_range = (0.0, 1.0)

    def __init__(self, sample_rate: int = VAD_RATE, model_path: str | None = None):
        if model_path is None:
            try:
                import silero_vad
            except ImportError as exc:
                raise RewardError("speech: needs `pip install silero-vad` (its wheel bundles the ONNX model)") from exc
            model_path = os.path.join(os.path.dirname(silero_vad.__file__), "data", "silero_vad.onnx")
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
        self.sample_rate = sample_rate

    def chunk_probs(self, mono: torch.Tensor) -> np.ndarray:
        """(B, N) at 16 kHz -> (B, T) speech probabilities of consecutive 512-sample chunks."""
        x = mono.float().numpy()
        pad = (-x.shape[1]) % VAD_CHUNK
        x = np.pad(x, ((0, 0), (0, pad)))
        state = np.zeros((2, len(x), 128), dtype=np.float32)
        context = np.zeros((len(x), VAD_CONTEXT), dtype=np.float32)
        probs = []
        for start in range(0, x.shape[1], VAD_CHUNK):
            chunk = np.concatenate([context, x[:, start : start + VAD_CHUNK]], axis=1)  # (B, 576)
            out, state = self.session.run(
                None, {"input": chunk, "state": state, "sr": np.array(VAD_RATE, dtype=np.int64)}
            )
            probs.append(out[:, 0])
            context = chunk[:, -VAD_CONTEXT:]
        return np.stack(probs, axis=1) if probs else np.zeros((len(x), 0), dtype=np.float32)

    def __call__(self, media: Any, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        probs = self.chunk_probs(to_mono(self.name, media, self.sample_rate, VAD_RATE))  # (B, T)
        if probs.shape[1] == 0:
            raise RewardError("speech: the audio is empty")
        scores = torch.from_numpy(probs.mean(axis=1).astype(np.float32))
        return RewardOutput(
            scores=scores, details={"speech_frac": torch.from_numpy((probs > 0.5).mean(axis=1).astype(np.float32))}
        )


class ClapReward:
    """CLAP text-audio cosine; ``from_components`` takes a ready ``ClapModel`` and ``ClapProcessor``."""

    name = "clap"
    modality = "audio"
    score_range = (-1.0, 1.0)

    def __init__(self, model: str = CLAP_MODEL, sample_rate: int = 48000, device=None, dtype=torch.float32):
        from transformers import ClapModel, ClapProcessor

        self._setup(
            load_pretrained(ClapModel, model, self.name, "model"),
            load_pretrained(ClapProcessor, model, self.name, "processor"),
            sample_rate,
            device,
            dtype,
        )

    @classmethod
    def from_components(cls, model: Any, processor: Any, sample_rate: int = 48000, device=None, dtype=torch.float32):
        reward = cls.__new__(cls)
        reward._setup(model, processor, sample_rate, device, dtype)
        return reward

    def _setup(self, model, processor, sample_rate, device, dtype) -> None:
        self.device, self.dtype = pick_device(device), dtype
        self.model = model.to(device=self.device, dtype=dtype).eval().requires_grad_(False)
        self.processor, self.sample_rate = processor, sample_rate
        self.model_rate = int(processor.feature_extractor.sampling_rate)

    @torch.no_grad()
    def embed(self, media: Any, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Unit-norm audio and text embeddings (B, D) each."""
        mono = to_mono(self.name, media, self.sample_rate, self.model_rate)  # (B, N)
        longest = int(self.processor.feature_extractor.nb_max_samples)
        mono = mono[:, :longest]  # keep the first max_length_s: the extractor would otherwise crop at random
        features = self.processor.feature_extractor(
            list(mono.numpy()), sampling_rate=self.model_rate, return_tensors="pt"
        )
        tokens = self.processor.tokenizer(prompts, padding=True, truncation=True, return_tensors="pt")
        audio_in = {k: v.to(self.device) for k, v in features.items()}
        audio_in["input_features"] = audio_in["input_features"].to(self.dtype)
        audio = _pooled(self.model.get_audio_features(**audio_in))
        text = _pooled(self.model.get_text_features(**{k: v.to(self.device) for k, v in tokens.items()}))
        return F.normalize(audio.float(), dim=-1), F.normalize(text.float(), dim=-1)

    def __call__(self, media: Any, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        audio, text = self.embed(media, prompts)
        if len(audio) != len(prompts):
            raise RewardError(f"clap: {len(audio)} clips but {len(prompts)} prompts")
        return RewardOutput(scores=(audio * text).sum(dim=-1).cpu())


def band_fraction(mono: torch.Tensor, rate: int, low_hz: float, high_hz: float, window: str = "hann") -> torch.Tensor:
    """(B, N) mono audio at ``rate`` Hz -> (B,) float32: the share of its power spectrum (rfft) in
    [low_hz, high_hz] (inclusive, ``high_hz`` clipped to Nyquist); 0 where the clip has no energy."""
    n = mono.shape[-1]
    x = mono.detach().to(torch.float64).cpu()
    if window == "hann":
        x = x * torch.hann_window(n, periodic=False, dtype=torch.float64)
    power = torch.fft.rfft(x, dim=-1).abs().square()  # (B, n // 2 + 1)
    freqs = torch.fft.rfftfreq(n, d=1.0 / rate, dtype=torch.float64)
    band = (freqs >= low_hz) & (freqs <= min(high_hz, rate / 2))
    total = power.sum(dim=-1)
    inside = (power * band).sum(dim=-1)
    frac = torch.where(total > 0, inside / total.clamp_min(torch.finfo(torch.float64).tiny), torch.zeros_like(total))
    return frac.clamp(0.0, 1.0).float()


class BandEnergyReward:
    """Share of the mono mix's spectral energy in ``[low_hz, high_hz]`` (see module docstring)."""

    name = "band_energy"
    modality = "audio"
    score_range = (0.0, 1.0)

    def __init__(
        self, low_hz: float, high_hz: float, sample_rate: int | None = None, window: Literal["hann", "none"] = "hann"
    ):
        for arg, value in (("low_hz", low_hz), ("high_hz", high_hz)):
            check_type(self.name, arg, value, float)
            if not math.isfinite(value) and not (arg == "high_hz" and value == math.inf):
                raise RewardError(f"{self.name}: {arg}={value!r}; expected a finite number of Hz")
        if low_hz < 0:
            raise RewardError(f"{self.name}: low_hz={low_hz!r}; expected 0 <= low_hz < high_hz")
        if not low_hz < high_hz:
            raise RewardError(f"{self.name}: high_hz={high_hz!r} must exceed low_hz={low_hz!r}")
        if sample_rate is not None:
            check_type(self.name, "sample_rate", sample_rate, int)
            if sample_rate <= 0:
                raise RewardError(f"{self.name}: sample_rate={sample_rate!r}; expected a positive integer")
        check_choice(self.name, "window", window, ("hann", "none"))
        self.low_hz, self.high_hz = float(low_hz), float(high_hz)
        self.sample_rate, self.window = sample_rate, window

    def __call__(self, media: Any, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        wave, rate = unwrap_audio(self.name, media, self.sample_rate)  # (B, C, N)
        if wave.shape[-1] == 0:
            raise RewardError(f"{self.name}: the audio is empty")
        if self.low_hz >= rate / 2:
            raise RewardError(
                f"{self.name}: low_hz={self.low_hz:g} is at or above the Nyquist frequency "
                f"{rate / 2:g} Hz of this {rate} Hz audio: the band is empty"
            )
        return RewardOutput(scores=band_fraction(wave.mean(dim=1), rate, self.low_hz, self.high_hz, self.window))


def _pooled(output: Any) -> torch.Tensor:
    return output if isinstance(output, torch.Tensor) else output.pooler_output


def tone(freq: float, seconds: float, rate: int) -> torch.Tensor:
    """A sine tone (N,) at amplitude 0.5: a helper for synthetic test audio."""
    t = torch.arange(int(seconds * rate)) / rate
    return 0.5 * torch.sin(2 * math.pi * freq * t)
