"""Pretrain a tiny LTX-2 on the toy audio-video world, and cache it as a diffusers ``LTX2Pipeline`` folder.

The pipeline is the offline tiny LTX-2 (``flowrl.pipelines.ltx2.tiny.build_tiny_ltx2``: the real classes) with a
tokenizer over the toy words and a wider transformer. Two stages, both on fresh renders (``world.py``):

1. **Decoders.** LTX-2's video VAE compresses 32x in space and 8x in time, so it cannot be set to the identity by
   hand as the toy GenEval's SD3 VAE is. Instead, the latents of a render are a **fixed random code of its
   parameters** (``Codes``, local in time: a random vector for the flash's offset in a latent frame plus one for
   its colour; radial features of the time since the beep's onset mixed by a random per-pitch matrix, silence
   being the zero code), and the real decoders are trained to render them on fresh clips of every prompt: the
   video VAE's decoder on frames (MSE before ``decode``'s clamp), the audio VAE's decoder and the vocoder
   together on the waveform (MSE), along ``LTX2Adapter.decode``'s path, with noise of ``code_noise`` added to
   the codes so that imperfect latents still decode to something the detector can judge. The VAE encoders are
   never used (text-to-audio-video only decodes). Normalisation statistics are the identity (the codes are
   unit-scale). The audio VAE (32 channels) and the vocoder (64) are narrower and wider than the tiny
   builder's: its 128-channel audio VAE is too slow to train on two cores, its 32-channel vocoder too narrow to
   learn a tone.
2. **Transformer.** Rectified flow on the codes, ``v = noise - x0`` for both modalities at one sigma (LTX-2's
   shifted logit-normal), prompts through the frozen tiny Gemma-3 and connectors, 10% empty prompts, EMA.
   The training prompts are ``world.split_rows()[0]``; 12 combinations are held out.

``pretrain(cfg)`` writes the folder under ``cache_root() / cfg.folder_name()`` (its name holds a hash of the
config) and returns it; an existing complete folder is reused. ``flowrl eval toy-av --pretrain`` runs it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flowrl.benchmarks.toy.pretrain import _ema_update, save_folder

from . import world

logger = logging.getLogger(__name__)

WORLD_VERSION = 1  # bump when renders, prompts or codes change: cached models are keyed on it
INFO_FILE = "toy_av_pretrain.json"
MAX_SEQUENCE_LENGTH = 128  # LTX-2's connectors take multiples of 128 tokens
AUDIO_LATENT_RATE = 25.0  # LTX-2 audio latent frames per second (16 kHz, hop 160, 4x)
RBF_CENTRES = np.arange(-0.12, 0.61, 0.04)  # seconds after the onset
RBF_WIDTH = 0.03
AUDIO_CHANNELS = 32  # the toy audio VAE's width = its packed latent features
VOCODER_CHANNELS = 64  # the tiny vocoder's 32 leave 4 channels at 24 kHz, too few to learn a tone


@dataclass(frozen=True)
class ToyAVConfig:
    """Architecture and pretraining schedule of the toy audio-video model (all of it goes into the cache key)."""

    heads: int = 4
    head_dim: int = 16
    audio_heads: int = 4
    audio_head_dim: int = 8
    layers: int = 2
    video_steps: int = 1200
    video_batch: int = 16
    video_lr: float = 1e-2
    audio_steps: int = 400
    audio_batch: int = 8
    audio_lr: float = 1e-2
    code_noise: float = 0.3  # std of the noise added to the codes while the decoders train
    steps: int = 3000
    batch_size: int = 32
    learning_rate: float = 2e-3
    warmup: int = 20
    caption_dropout: float = 0.1
    ema_decay: float = 0.99
    seed: int = 0

    def key(self) -> str:
        blob = json.dumps({"world": WORLD_VERSION, **dataclasses.asdict(self)}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def folder_name(self) -> str:
        return f"ltx2-toy-av-{self.key()}"


def cache_root() -> Path:
    """``$FLOWRL_CACHE/toy_av``, else ``~/.cache/flowrl/toy_av`` (the path the toy-av recipes name)."""
    if os.environ.get("FLOWRL_CACHE"):
        return Path(os.environ["FLOWRL_CACHE"]).expanduser() / "toy_av"
    return Path.home() / ".cache" / "flowrl" / "toy_av"


# ------------------------------------------------------------------------------------------ the model


def build_toy_av_pipeline(cfg: ToyAVConfig):
    """The tiny LTX-2 with the toy words' tokenizer, a wider transformer and identity latent statistics."""
    from diffusers import AutoencoderKLLTX2Audio, LTX2VideoTransformer3DModel
    from diffusers.pipelines.ltx2 import LTX2Vocoder

    from flowrl.pipelines.kit.tiny import make_word_tokenizer
    from flowrl.pipelines.ltx2.tiny import build_tiny_ltx2

    pipe = build_tiny_ltx2(seed=cfg.seed)
    tokenizer = make_word_tokenizer(1024, list(world.WORDS))
    tokenizer.padding_side = "left"
    # a narrower audio VAE (32 channels, 2 latent channels: packed features 2 x 16 = 32): the tiny one's 128
    # channels at full mel resolution cost seconds a batch, too slow to train on two cores
    audio_config = {k: v for k, v in pipe.audio_vae.config.items() if not k.startswith("_")}
    audio_config.update(base_channels=AUDIO_CHANNELS, latent_channels=AUDIO_CHANNELS // 16)
    config = {k: v for k, v in pipe.transformer.config.items() if not k.startswith("_")}
    config.update(audio_in_channels=AUDIO_CHANNELS, audio_out_channels=AUDIO_CHANNELS, num_attention_heads=cfg.heads, attention_head_dim=cfg.head_dim,
                  cross_attention_dim=cfg.heads * cfg.head_dim, audio_num_attention_heads=cfg.audio_heads,
                  audio_attention_head_dim=cfg.audio_head_dim,
                  audio_cross_attention_dim=cfg.audio_heads * cfg.audio_head_dim, num_layers=cfg.layers)  # fmt: skip
    torch.manual_seed(cfg.seed)
    vocoder_config = {k: v for k, v in pipe.vocoder.config.items() if not k.startswith("_")}
    vocoder_config.update(hidden_channels=VOCODER_CHANNELS)
    pipe.register_modules(
        tokenizer=tokenizer,
        transformer=LTX2VideoTransformer3DModel(**config),
        audio_vae=AutoencoderKLLTX2Audio(**audio_config),
        vocoder=LTX2Vocoder(**vocoder_config),
    )
    with torch.no_grad():
        for vae in (pipe.vae, pipe.audio_vae):
            vae.latents_mean.zero_()
            vae.latents_std.fill_(1.0)
    return pipe


def adapter_for(pipe, device: str = "cpu"):
    from flowrl.pipelines.ltx2.adapter import LTX2Adapter

    return LTX2Adapter(pipe, resolution=world.SIZE, num_frames=world.FRAMES, fps=world.FPS,
                       max_sequence_length=MAX_SEQUENCE_LENGTH, device=device)  # fmt: skip


# ------------------------------------------------------------------------------------------ the codes


class Codes:
    """The fixed random latent code of a clip's parameters (seeded; the adapter's packed, normalised layout).

    Both codes are local in time, so that a convolutional decoder can learn them: the video token of latent
    frame ``k`` (LTX-2's first latent frame is video frame 0, latent frame ``k >= 1`` frames ``8k - 7 .. 8k``) is
    ``E[onset - first frame of k] + C[colour]`` when the flash (its onset frame and the two after it) reaches
    into that latent frame's frames, else 0; the audio latent frame at ``t`` seconds is ``rbf(t - onset) @
    M[pitch]``, radial features of the time since the onset (``RBF_CENTRES``), so silence is (about) the zero code.
    """

    def __init__(self, adapter, seed: int = 0):
        gen = torch.Generator().manual_seed(seed + 7919)
        (nv, dv), (na, da) = adapter.latent_shapes["video"], adapter.latent_shapes["audio"]
        self.temporal = int(adapter.pipe.vae_temporal_compression_ratio)
        self.latent_frames = nv
        self.offsets = range(1 - len(world.FLASH_DECAY), self.temporal)  # onset - first frame of the span
        self.video_offset = torch.randn(len(self.offsets), dv, generator=gen) / math.sqrt(2)
        self.video_color = torch.randn(len(world.COLORS), dv, generator=gen) / math.sqrt(2)
        self.audio_mix = torch.randn(len(world.PITCHES), len(RBF_CENTRES), da, generator=gen)
        self.audio_times = torch.arange(na, dtype=torch.float64) / AUDIO_LATENT_RATE

    def span(self, k: int) -> tuple[int, int]:
        """The first and last video frame of latent frame ``k``."""
        return (0, 0) if k == 0 else (self.temporal * k - self.temporal + 1, self.temporal * k)

    def __call__(self, clips: Sequence[world.Clip]) -> dict[str, torch.Tensor]:
        colors, pitches = list(world.COLORS), list(world.PITCHES)
        video = torch.zeros(len(clips), self.latent_frames, self.video_offset.shape[1])
        audio = []
        for i, c in enumerate(clips):
            last = c.onset + len(world.FLASH_DECAY) - 1
            for k in range(self.latent_frames):
                first, end = self.span(k)
                if c.onset <= end and last >= first:
                    offset = max(c.onset - first, self.offsets.start)
                    video[i, k] = (
                        self.video_offset[offset - self.offsets.start] + self.video_color[colors.index(c.row["color"])]
                    )
            offset = self.audio_times[:, None] - c.onset / world.FPS - torch.as_tensor(RBF_CENTRES)[None]
            rbf = torch.exp(-0.5 * (offset / RBF_WIDTH) ** 2).float()  # (L, K)
            audio.append(rbf @ self.audio_mix[pitches.index(c.row["pitch"])])
        return {"video": video, "audio": torch.stack(audio)}


def render(clips: Sequence[world.Clip], num_samples: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The clips' frames (B, F, 3, H, W) and waveforms (B, 2, num_samples)."""
    video = np.stack([world.render_video(c.row["color"], c.onset) for c in clips])
    audio = np.stack([world.render_audio(c.row["pitch"], c.onset, num_samples) for c in clips])
    return torch.from_numpy(video), torch.from_numpy(audio)


def _training_rows(seed: int) -> list[dict]:
    return world.split_rows(seed=seed)[0]


def _video_frames(adapter, latents: torch.Tensor) -> torch.Tensor:
    """The video part of ``adapter.decode`` with gradients, stopped before the clamp to [0, 1] (which would stop
    the gradient of a black frame that should light up): the decoder's raw (B, F, 3, H, W) in its [-1, 1] range."""
    p = adapter.pipe
    z = p._unpack_latents(latents, adapter.latent_frames, adapter.latent_height, adapter.latent_width,
                          adapter.patch, adapter.patch_t)  # fmt: skip
    z = p._denormalize_latents(z, p.vae.latents_mean, p.vae.latents_std, p.vae.config.scaling_factor)
    return p.vae.decode(z, None, return_dict=False)[0].permute(0, 2, 1, 3, 4)


def _waveform(adapter, latents: torch.Tensor) -> torch.Tensor:
    """The audio part of ``adapter.decode`` with gradients: the vocoder's (B, 2, N) of the audio VAE's mel."""
    p = adapter.pipe
    a = p._denormalize_audio_latents(latents, p.audio_vae.latents_mean, p.audio_vae.latents_std)
    a = p._unpack_audio_latents(a, adapter.audio_frames, num_mel_bins=adapter.latent_mel_bins)
    return p.vocoder(p.audio_vae.decode(a, return_dict=False)[0])


def _fit(
    name: str,
    modules: list[torch.nn.Module],
    loss_fn: Callable,
    steps: int,
    lr: float,
    batch: int,
    codes: Codes,
    cfg: ToyAVConfig,
    say: Callable[[str], None],
) -> float:
    """Fit ``modules`` for ``steps`` steps of ``loss_fn(noisy codes, clips)`` on fresh clips of every prompt
    (the decoders are the world's renderer); AdamW, cosine learning rate from ``lr``; returns the seconds."""
    group = torch.nn.ModuleList(modules).train().requires_grad_(True)
    params = list(group.parameters())
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    rng = random.Random(f"{cfg.seed}:{name}")
    gen = torch.Generator().manual_seed(cfg.seed + len(name))
    rows, start, losses = world.all_rows(), time.perf_counter(), []
    for step in range(steps):
        clips = world.draw_clips([rng.choice(rows) for _ in range(batch)], rng)
        z = {k: v + cfg.code_noise * torch.randn(v.shape, generator=gen) for k, v in codes(clips).items()}
        loss = loss_fn(z, clips)
        for g in opt.param_groups:
            g["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / steps))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(loss.item())
        if (step + 1) % 100 == 0 or step + 1 == steps:
            say(
                f"{name} step {step + 1}/{steps}: loss {np.mean(losses[-100:]):.4f}, {time.perf_counter() - start:.0f} s"
            )
    group.eval().requires_grad_(False)
    return round(time.perf_counter() - start, 1)


def train_decoders(adapter, codes: Codes, cfg: ToyAVConfig, say: Callable[[str], None]) -> dict[str, float]:
    """The video VAE's decoder on frames (MSE in its [-1, 1] range), then the audio VAE's decoder with the
    vocoder on waveforms (MSE: every pitch is a multiple of 100 Hz, so the tone's phase is the same
    in every 240-sample vocoder frame and the target is a function of the code; spectral losses made it fall silent)."""
    pipe = adapter.pipe

    def video_loss(z, clips):
        frames, _ = render(clips, 1)
        return torch.nn.functional.mse_loss(_video_frames(adapter, z["video"]), 2 * frames - 1)

    def audio_loss(z, clips):
        wave = _waveform(adapter, z["audio"])
        _, target = render(clips, wave.shape[-1])
        return 100 * torch.nn.functional.mse_loss(wave, target)

    return {
        "video_decoder_s": _fit("video decoder", [pipe.vae.decoder], video_loss, cfg.video_steps, cfg.video_lr,
                                cfg.video_batch, codes, cfg, say),
        "audio_decoder_s": _fit("audio decoder", [pipe.audio_vae.decoder, pipe.vocoder], audio_loss, cfg.audio_steps,
                                cfg.audio_lr, cfg.audio_batch, codes, cfg, say),
    }  # fmt: skip


@torch.no_grad()
def decoder_accuracy(adapter, codes: Codes, noise: float = 0.0, n: int = 108, seed: int = 1) -> dict[str, float]:
    """The detector's accuracies on decoded codes of fresh clips (``noise``: std added to the codes)."""
    rng = random.Random(f"{seed}:probe")
    clips = world.draw_clips([world.all_rows()[i % 54] for i in range(n)], rng)
    z = codes(clips)
    gen = torch.Generator().manual_seed(seed)
    z = {k: v + noise * torch.randn(v.shape, generator=gen) for k, v in z.items()}
    media = adapter.decode(z)
    judgements = [world.judge(v.numpy(), a.numpy(), c.row) for v, a, c in zip(media["video"], media["audio"], clips)]
    exact = [
        j.detection.video_onset == c.onset and j.detection.audio_onset == c.onset for j, c in zip(judgements, clips)
    ]
    return {**world.summarize(judgements), "onset_exact": sum(exact) / n}


def train_transformer(adapter, codes: Codes, cfg: ToyAVConfig, say: Callable[[str], None]) -> dict[str, float]:
    transformer = adapter.transformer
    transformer.train().requires_grad_(True)
    params = list(transformer.parameters())
    ema = {k: v.detach().clone() for k, v in transformer.state_dict().items()}
    opt = torch.optim.AdamW(params, lr=cfg.learning_rate, betas=(0.9, 0.99), weight_decay=0.0)
    rng = random.Random(f"{cfg.seed}:transformer")
    gen = torch.Generator().manual_seed(cfg.seed + 2)
    rows = _training_rows(cfg.seed)
    shift = math.exp(adapter.mu())  # the sampler's exponential time shift
    start, losses = time.perf_counter(), []
    for step in range(cfg.steps):
        clips = world.draw_clips([rng.choice(rows) for _ in range(cfg.batch_size)], rng)
        x0 = codes(clips)
        prompts = ["" if rng.random() < cfg.caption_dropout else c.row["prompt"] for c in clips]
        inputs = adapter.model_inputs(adapter.encode_prompts(prompts), 1.0)
        u = torch.sigmoid(torch.randn(len(clips), generator=gen))
        sigma = shift * u / (1 + (shift - 1) * u)
        eps = {k: torch.randn(v.shape, generator=gen) for k, v in x0.items()}
        s = sigma.view(-1, 1, 1)
        xt = {k: (1 - s) * x0[k] + s * eps[k] for k in x0}
        pred = adapter.velocity(xt, sigma, inputs, 1.0)
        loss = sum(torch.nn.functional.mse_loss(pred[k], eps[k] - x0[k]) for k in x0)
        warm = min(1.0, (step + 1) / cfg.warmup)
        for group in opt.param_groups:
            group["lr"] = cfg.learning_rate * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / cfg.steps)))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        _ema_update(ema, transformer, min(cfg.ema_decay, (1 + step) / (10 + step)))
        losses.append(loss.item())
        if (step + 1) % 25 == 0 or step + 1 == cfg.steps:
            say(f"transformer step {step + 1}/{cfg.steps}: loss {np.mean(losses[-25:]):.4f}, "
                f"{time.perf_counter() - start:.0f} s")  # fmt: skip
    transformer.load_state_dict(ema)
    transformer.eval().requires_grad_(False)
    return {"transformer_s": round(time.perf_counter() - start, 1)}


# ------------------------------------------------------------------------------------------ the cache


def cached_model(cfg: ToyAVConfig | None = None, root: str | Path | None = None) -> Path | None:
    cfg = cfg or ToyAVConfig()
    folder = Path(root or cache_root()) / cfg.folder_name()
    return folder if (folder / INFO_FILE).is_file() else None


def read_info(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / INFO_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def pretrain(
    cfg: ToyAVConfig | None = None,
    root: str | Path | None = None,
    force: bool = False,
    evaluate_fn: Callable[[Any], dict[str, Any]] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Train (or reuse) the toy audio-video model of ``cfg``; returns its pipeline folder (written under a
    temporary name, renamed when complete, ``toy_av_pretrain.json`` holding the config, timings, the decoders'
    accuracies on clean and noisy codes and, with ``evaluate_fn(adapter)``, the base evaluation)."""
    cfg = cfg or ToyAVConfig()
    say = progress or logger.info
    root = Path(root or cache_root())
    folder = root / cfg.folder_name()
    if not force and cached_model(cfg, root) is not None:
        say(f"reusing the cached toy audio-video model {folder}")
        return folder
    torch.manual_seed(cfg.seed)
    pipe = build_toy_av_pipeline(cfg)
    adapter = adapter_for(pipe)
    codes = Codes(adapter, cfg.seed)
    info: dict[str, Any] = {"config": dataclasses.asdict(cfg), "world_version": WORLD_VERSION}
    info.update(train_decoders(adapter, codes, cfg, say))
    info["decoders_clean"] = decoder_accuracy(adapter, codes)
    info["decoders_noisy"] = decoder_accuracy(adapter, codes, noise=cfg.code_noise)
    say(f"decoders on clean codes: {info['decoders_clean']}; with noise {cfg.code_noise}: {info['decoders_noisy']}")
    info.update(train_transformer(adapter, codes, cfg, say))
    adapter.clear_cache()
    if evaluate_fn is not None:
        info["base"] = evaluate_fn(adapter)
    save_folder(pipe, folder, INFO_FILE, info)
    say(f"saved the toy audio-video model to {folder}")
    return folder


def load_pipeline(folder: str | Path):
    """A cached toy audio-video model with ``LTX2Pipeline.from_pretrained``; one-line error if absent."""
    from diffusers import LTX2Pipeline

    folder = Path(folder).expanduser()
    if not (folder / "model_index.json").is_file():
        raise FileNotFoundError(
            f"{folder}: not a diffusers pipeline folder (create the toy model with `flowrl eval toy-av --pretrain`)"
        )
    pipe = LTX2Pipeline.from_pretrained(str(folder))
    pipe.set_progress_bar_config(disable=True)
    return pipe
