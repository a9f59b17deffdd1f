"""Pretrain a small SD3 text-to-image model on rendered toy pairs, and cache it as a diffusers pipeline.

The pipeline is a real ``StableDiffusion3Pipeline``:

* **VAE**: an ``AutoencoderKL`` whose weights are set by hand so that it is the identity map on images
  (``identity_vae``; reconstruction error under 1e-4 on renders, measured by ``vae_error``). Each RGB
  channel is carried as the pair ``(x, -x)`` next to a pair of large constants ``(K, -K)`` in its own
  GroupNorm group, so that the group's mean is exactly 0 and its variance ``(mean x^2 + K^2) / 2`` is K^2 / 2
  to a relative 1 / (2 K^2); every resnet's last convolution is zero (the block is then its skip path), and
  ``silu(x) - silu(-x) = x`` undoes the activation exactly. Diffusion therefore happens in pixel space
  (like pixel-space DiTs), which spares training a VAE on two CPU cores; the latents are the pixels
  normalised by ``shift_factor`` and ``scaling_factor`` measured on renders.
* **Text encoders**: the offline tiny builder's CLIP x2 and T5 (``flowrl.pipelines.sd3.tiny``, ``flowrl.pipelines.kit.tiny``) over the toy words,
  random and frozen (their token features carry the prompt; the transformer learns to read them).
* **Transformer**: ``SD3Transformer2DModel`` with large patches (8 px: 16 image tokens at 32 px), trained
  by rectified flow (``v = noise - x0``, logit-normal sigmas, 10% empty captions for CFG), EMA weights
  saved.

``pretrain(cfg)`` writes the pipeline to ``cache_root() / cfg.folder_name()`` (the name holds a hash of
the config) and returns that folder; an existing folder is reused. ``flowrl eval toy --pretrain`` runs it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flowrl.benchmarks.geneval.constants import TASKS

from . import world

logger = logging.getLogger(__name__)

WORLD_VERSION = 1  # bump when renders or prompts change: cached models are keyed on it
_K = 256.0  # the identity VAE's constant channel (relative error 1 / (2 K^2))
INFO_FILE = "toy_pretrain.json"
DEFAULT_LINK = "default"  # cache_root() / "default" -> the default config's folder (what the recipes load)


@dataclass(frozen=True)
class ToyModelConfig:
    """Architecture and pretraining schedule of the toy model (all of it goes into the cache key)."""

    resolution: int = 32
    patch_size: int = 8  # pixels per token side: 16 image tokens at 32 px
    layers: int = 3
    heads: int = 3
    head_dim: int = 64
    text_size: str = "small"  # the tiny builder's preset for the text encoders (CLIP 32 x2, T5 64)
    text_tokens: int = 12  # CLIP and T5 token length: the longest toy prompt plus BOS and EOS
    shift: float = 3.0  # sigma shift of the sampler and of the training sigmas (more weight on layout)
    steps: int = 1200
    batch_size: int = 64
    learning_rate: float = 2e-3
    warmup: int = 20
    caption_dropout: float = 0.1  # share of empty prompts, for classifier-free guidance
    ema_decay: float = 0.99
    train_text: bool = True  # train the text encoders too (random features carry no word order)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.resolution % self.patch_size:
            raise ValueError(f"resolution {self.resolution} is not a multiple of patch_size {self.patch_size}")
        for name in ("layers", "heads", "head_dim", "text_tokens", "steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"ToyModelConfig.{name} must be >= 1, got {getattr(self, name)}")

    def key(self) -> str:
        blob = json.dumps({"world": WORLD_VERSION, **dataclasses.asdict(self)}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def folder_name(self) -> str:
        return f"sd3-toy-{self.key()}"


def cache_root() -> Path:
    """``$FLOWRL_CACHE/toy``, else ``~/.cache/flowrl/toy`` (the path the toy recipes name)."""
    if os.environ.get("FLOWRL_CACHE"):
        return Path(os.environ["FLOWRL_CACHE"]).expanduser() / "toy"
    return Path.home() / ".cache" / "flowrl" / "toy"


# ------------------------------------------------------------------------------------------ components


def identity_vae(resolution: int = 32, shift: float = 0.0, scale: float = 1.0):
    """An ``AutoencoderKL`` (1 level, 12 channels, no attention) whose encoder and decoder are the identity."""
    from diffusers import AutoencoderKL

    vae = AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=3,
        down_block_types=("DownEncoderBlock2D",), up_block_types=("UpDecoderBlock2D",),
        block_out_channels=(12,), layers_per_block=1, norm_num_groups=3, sample_size=resolution,
        mid_block_add_attention=False, use_quant_conv=False, use_post_quant_conv=False,
        shift_factor=shift, scaling_factor=scale,
    )  # fmt: skip
    with torch.no_grad():
        for p in vae.parameters():
            p.zero_()
        for m in vae.modules():
            if isinstance(m, torch.nn.GroupNorm):
                m.weight.fill_(1.0)  # only the resnets' norms, whose branches end in a zero conv
        for coder in (vae.encoder, vae.decoder):
            _lift(coder.conv_in)
            _lower(coder.conv_norm_out, coder.conv_out)
        vae.encoder.conv_out.bias[3:] = -20.0  # log-variance: std 4.5e-5, the posterior is a point
    return vae


def _lift(conv: torch.nn.Conv2d) -> None:
    """3 channels -> per channel c the group ``(c, -c, K, -K)`` (centre tap and biases)."""
    for i in range(3):
        conv.weight[4 * i, i, 1, 1] = 1.0
        conv.weight[4 * i + 1, i, 1, 1] = -1.0
        conv.bias[4 * i + 2] = _K
        conv.bias[4 * i + 3] = -_K


def _lower(norm: torch.nn.GroupNorm, conv: torch.nn.Conv2d) -> None:
    """GroupNorm divides by about K / sqrt(2): undo it on ``(c, -c)``, drop the constants, then
    ``silu(c) - silu(-c) = c``."""
    weight = torch.zeros_like(norm.weight)
    for i in range(3):
        weight[4 * i] = weight[4 * i + 1] = _K / math.sqrt(2)
        conv.weight[i, 4 * i, 1, 1] = 1.0
        conv.weight[i, 4 * i + 1, 1, 1] = -1.0
    norm.weight.copy_(weight)


def build_toy_pipeline(cfg: ToyModelConfig, shift: float = 0.0, scale: float = 1.0):
    """The untrained toy ``StableDiffusion3Pipeline`` (random transformer, identity VAE, toy tokenizers)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline

    from flowrl.pipelines.kit.tiny import make_word_tokenizer
    from flowrl.pipelines.sd3.tiny import SIZES, build_tiny_sd3_pipeline

    words = list(world.WORDS)
    text = build_tiny_sd3_pipeline(cfg.resolution, cfg.text_size, seed=cfg.seed, vocabulary=words)
    preset = SIZES[cfg.text_size]
    torch.manual_seed(cfg.seed)
    tokens = cfg.resolution // cfg.patch_size
    transformer = SD3Transformer2DModel(
        sample_size=cfg.resolution, patch_size=cfg.patch_size, in_channels=3, out_channels=3,
        num_layers=cfg.layers, attention_head_dim=cfg.head_dim, num_attention_heads=cfg.heads,
        joint_attention_dim=preset.t5_dim, caption_projection_dim=cfg.heads * cfg.head_dim,
        pooled_projection_dim=2 * preset.clip_dim, pos_embed_max_size=tokens,
    )  # fmt: skip
    pipe = StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=cfg.shift),
        vae=identity_vae(cfg.resolution, shift, scale),
        text_encoder=text.text_encoder,
        tokenizer=make_word_tokenizer(cfg.text_tokens, words),
        text_encoder_2=text.text_encoder_2,
        tokenizer_2=make_word_tokenizer(cfg.text_tokens, words),
        text_encoder_3=text.text_encoder_3,
        tokenizer_3=make_word_tokenizer(cfg.text_tokens, words),
    )
    pipe.set_progress_bar_config(disable=True)
    for module in (pipe.text_encoder, pipe.text_encoder_2, pipe.text_encoder_3, pipe.vae):
        module.requires_grad_(False).eval()
    return pipe


def images_to_tensor(images: np.ndarray) -> torch.Tensor:
    """(B, H, W, 3) uint8 -> (B, 3, H, W) float in [-1, 1] (the VAE's input range)."""
    return torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float() / 127.5 - 1.0


@torch.no_grad()
def vae_error(vae, images: np.ndarray) -> float:
    """Largest absolute reconstruction error of ``images`` through the VAE, in [0, 1] pixel units."""
    x = images_to_tensor(images)
    rec = vae.decode(vae.encode(x).latent_dist.mean, return_dict=False)[0]
    return float((rec - x).abs().max()) / 2


def latent_stats(rows: list[dict], seed: int, resolution: int) -> tuple[float, float]:
    """``(shift_factor, scaling_factor)`` that make the latents of renders zero-mean, unit-variance."""
    x = images_to_tensor(world.render_batch(rows, seed, resolution))
    return float(x.mean()), float(1.0 / x.std())


# ------------------------------------------------------------------------------------------ training


def sample_rows(rng: random.Random, n: int) -> list[dict]:
    """``n`` rows of the whole world: half drawn task-uniform (then prompt-uniform within the task), half
    prompt-uniform over all rows, which gives colour prompts more weight (colour binding is learnt last)."""
    rows = world.all_rows()
    flat = [r for task in rows.values() for r in task]
    return [rng.choice(rows[rng.choice(TASKS)]) if rng.random() < 0.5 else rng.choice(flat) for _ in range(n)]


def _lr(cfg: ToyModelConfig, step: int) -> float:
    """Linear warm-up, then cosine decay to a tenth."""
    if step < cfg.warmup:
        return cfg.learning_rate * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.learning_rate * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _trained_modules(pipe, cfg: ToyModelConfig) -> torch.nn.ModuleDict:
    names = ["transformer"] + (["text_encoder", "text_encoder_2", "text_encoder_3"] if cfg.train_text else [])
    return torch.nn.ModuleDict({name: getattr(pipe, name) for name in names})


def train_model(
    pipe, cfg: ToyModelConfig, callback: Callable[[int, dict[str, float]], None] | None = None
) -> dict[str, torch.Tensor]:
    """Rectified-flow training of the transformer (and the text encoders if ``cfg.train_text``) on fresh
    renders; returns the EMA weights of the trained modules (``_trained_modules`` state-dict keys).

    Per step: ``batch_size`` renders -> latents ``z0`` (normalised pixels); ``sigma = shift(sigmoid(N(0, 1)))``;
    ``z = (1 - sigma) z0 + sigma eps``; loss ``|v(z, sigma, c) - (eps - z0)|^2``, the prompt embedded by the
    pipeline's own ``encode_prompt``. ``callback(step, stats)`` runs every 25 steps (and after the last).
    """
    modules = _trained_modules(pipe, cfg)
    transformer, vae = pipe.transformer, pipe.vae
    rng = random.Random(f"{cfg.seed}:pretrain")
    gen = torch.Generator().manual_seed(cfg.seed)
    modules.train().requires_grad_(True)
    params = [p for p in modules.parameters() if p.requires_grad]
    ema = {k: v.detach().clone() for k, v in modules.state_dict().items()}
    opt = torch.optim.AdamW(params, lr=cfg.learning_rate, betas=(0.9, 0.99), weight_decay=0.0)
    shift, scale = vae.config.shift_factor, vae.config.scaling_factor
    start, losses = time.perf_counter(), []
    for step in range(cfg.steps):
        rows = sample_rows(rng, cfg.batch_size)
        images = world.render_batch(rows, seed=rng.getrandbits(32), size=cfg.resolution)
        # the VAE encoder is the identity (``vae_error``), so the latents are the normalised pixels
        z0 = (images_to_tensor(images) - shift) * scale  # (B, 3, H, W)
        prompts = [("" if rng.random() < cfg.caption_dropout else r["prompt"]) for r in rows]
        embeds, pooled = _embed(pipe, prompts, cfg.text_tokens)
        u = torch.sigmoid(torch.randn(len(rows), generator=gen))  # logit-normal, shifted like the sampler's
        sigma = cfg.shift * u / (1 + (cfg.shift - 1) * u)
        eps = torch.randn(z0.shape, generator=gen)
        s = sigma.view(-1, 1, 1, 1)
        pred = transformer(
            hidden_states=(1 - s) * z0 + s * eps, timestep=sigma * 1000, encoder_hidden_states=embeds,
            pooled_projections=pooled, return_dict=False,
        )[0]  # fmt: skip
        loss = torch.nn.functional.mse_loss(pred, eps - z0)
        for group in opt.param_groups:
            group["lr"] = _lr(cfg, step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        _ema_update(ema, modules, min(cfg.ema_decay, (1 + step) / (10 + step)))
        losses.append(loss.item())
        if callback is not None and ((step + 1) % 25 == 0 or step + 1 == cfg.steps):
            callback(step + 1, {"loss": float(np.mean(losses[-25:])), "time_s": time.perf_counter() - start})
    modules.eval().requires_grad_(False)
    return ema


def _embed(pipe, prompts: list[str], max_sequence_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L, D) and (B, P) embeddings of ``prompts`` (each distinct prompt encoded once, with grad)."""
    unique = sorted(set(prompts))
    embeds, _, pooled, _ = pipe.encode_prompt(
        prompt=unique, prompt_2=None, prompt_3=None, device=torch.device("cpu"),
        do_classifier_free_guidance=False, max_sequence_length=max_sequence_length,
    )  # fmt: skip
    index = torch.tensor([unique.index(p) for p in prompts])
    return embeds[index], pooled[index]


@torch.no_grad()
def _ema_update(ema: dict[str, torch.Tensor], module: torch.nn.Module, decay: float) -> None:
    for k, v in module.state_dict().items():
        if v.dtype.is_floating_point:
            ema[k].mul_(decay).add_(v.detach(), alpha=1 - decay)
        else:
            ema[k].copy_(v)


# ------------------------------------------------------------------------------------------ the cache


def cached_model(cfg: ToyModelConfig | None = None, root: str | Path | None = None) -> Path | None:
    """The cached pipeline folder of ``cfg`` if a complete one exists."""
    cfg = cfg or ToyModelConfig()
    folder = Path(root or cache_root()) / cfg.folder_name()
    return folder if (folder / INFO_FILE).is_file() else None


def read_info(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / INFO_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def pretrain(
    cfg: ToyModelConfig | None = None,
    root: str | Path | None = None,
    force: bool = False,
    evaluate_fn: Callable[[Any], dict[str, Any]] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Train (or reuse) the toy model of ``cfg``; returns its pipeline folder.

    The folder is written under a temporary name and renamed when complete, with ``toy_pretrain.json``
    holding the config, timings and (if ``evaluate_fn(pipe)`` is given) the base evaluation.
    """
    cfg = cfg or ToyModelConfig()
    say = progress or logger.info
    root = Path(root or cache_root())
    folder = root / cfg.folder_name()
    if not force and cached_model(cfg, root) is not None:
        say(f"reusing the cached toy model {folder}")
        return folder
    start = time.perf_counter()
    torch.manual_seed(cfg.seed)
    shift, scale = latent_stats(sample_rows(random.Random(f"{cfg.seed}:stats"), 512), cfg.seed, cfg.resolution)
    pipe = build_toy_pipeline(cfg, shift, scale)
    probe = world.render_batch(sample_rows(random.Random(f"{cfg.seed}:probe"), 256), cfg.seed + 1, cfg.resolution)
    error = vae_error(pipe.vae, probe)
    say(f"identity VAE: max reconstruction error {error:.2e} on 256 renders (pixel range [0, 1])")

    def report(step: int, stats: dict[str, float]) -> None:
        say(f"pretrain step {step}/{cfg.steps}: loss {stats['loss']:.4f}, {stats['time_s']:.0f} s")

    ema = train_model(pipe, cfg, report)
    _trained_modules(pipe, cfg).load_state_dict(ema)
    train_s = time.perf_counter() - start
    info: dict[str, Any] = {"config": dataclasses.asdict(cfg), "world_version": WORLD_VERSION,
                            "vae_max_error": error, "pretrain_s": round(train_s, 1)}  # fmt: skip
    if evaluate_fn is not None:
        info["base"] = evaluate_fn(pipe)
        info["eval_s"] = round(time.perf_counter() - start - train_s, 1)
    save_folder(pipe, folder, INFO_FILE, info)
    say(f"saved the toy model to {folder} ({train_s:.0f} s of pretraining)")
    return folder


def save_folder(pipe, folder: Path, info_file: str, info: dict[str, Any]) -> None:
    """Write ``pipe`` and its ``info_file`` JSON under a temporary name beside ``folder``, then rename it to
    ``folder`` (replacing an older one), so that a complete folder is the only kind that exists."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{folder.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    pipe.save_pretrained(tmp)
    (tmp / info_file).write_text(json.dumps(info, indent=2) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


def link_default(folder: str | Path, root: str | Path | None = None) -> Path:
    """Point ``root / "default"`` (a relative symlink) at ``folder``; returns the link."""
    folder = Path(folder)
    link = Path(root or folder.parent) / DEFAULT_LINK
    if link.is_symlink() and os.readlink(link) == folder.name:
        return link
    tmp = link.with_name(f".{DEFAULT_LINK}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(folder.name)
    os.replace(tmp, link)
    return link


def load_pipeline(folder: str | Path):
    """A cached toy model (or any SD3 pipeline folder) with ``from_pretrained``; one-line error if absent."""
    from diffusers import StableDiffusion3Pipeline

    folder = Path(folder).expanduser()
    if not (folder / "model_index.json").is_file():
        raise FileNotFoundError(
            f"{folder}: not a diffusers pipeline folder (create the toy model with `flowrl eval toy --pretrain`)"
        )
    pipe = StableDiffusion3Pipeline.from_pretrained(str(folder))
    pipe.set_progress_bar_config(disable=True)
    return pipe
