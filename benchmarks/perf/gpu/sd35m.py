"""SD3.5-Medium through flowrl's Trainer: the pipeline at its published architecture with random weights, the
sd35m-ocr recipe at that size, the iteration next to the estimate, and the side-by-side overhead ratios."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from unittest import mock

import torch

from flowrl.benchmarks.perf.gpu.common import Clock, Scale, default_dtype, iterate, reset_peak


def text_encoders(kind: str, vocab: int):
    """CLIP-L, CLIP-G, T5-XXL at their real configs (``real``), at real widths with 1-2 layers
    (``shallow``), or at toy widths (``tiny``). Token ids follow ``make_word_tokenizer`` (PAD 0, BOS 2, EOS 3)."""
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    from flowrl.estimate import CLIP_G, CLIP_L, T5_XXL

    ids = {"pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3}
    clip_l, clip_g, t5 = dict(CLIP_L), dict(CLIP_G), dict(T5_XXL)
    if kind == "shallow":
        clip_l["num_hidden_layers"] = clip_g["num_hidden_layers"] = 2
        t5["num_layers"] = 1
    elif kind == "tiny":
        for c in (clip_l, clip_g):
            c.update(
                hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, projection_dim=16
            )
        clip_l["max_position_embeddings"] = clip_g["max_position_embeddings"] = 16
        t5.update(d_model=64, d_kv=32, d_ff=128, num_layers=1, num_heads=2, relative_attention_num_buckets=8)
    for c in (clip_l, clip_g, t5):
        c["vocab_size"] = max(c["vocab_size"], vocab) if kind != "tiny" else vocab
    return (
        CLIPTextModelWithProjection(CLIPTextConfig(**clip_l, **ids)),
        CLIPTextModelWithProjection(CLIPTextConfig(**clip_g, **ids)),
        T5EncoderModel(T5Config(**t5, pad_token_id=0, eos_token_id=3, dropout_rate=0.0)),
    )


def build_sd35m(scale: Scale, device: torch.device, dtype: torch.dtype):
    """A ``StableDiffusion3Pipeline`` at SD3.5-Medium's architecture with random weights, built on ``device``
    (initialised there: seconds on a GPU instead of minutes on its host's CPU)."""
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )

    from flowrl.estimate import SD3_TRANSFORMERS, SD3_VAE
    from flowrl.pipelines.kit.tiny import make_word_tokenizer

    clip_len = 16 if scale.encoders == "tiny" else 77
    tokenizer, tokenizer_2 = make_word_tokenizer(clip_len), make_word_tokenizer(clip_len)
    tokenizer_3 = make_word_tokenizer(512)
    torch.manual_seed(0)
    # initialised in the target dtype (half the memory and time); then buffers such as the positional
    # embedding, which are made in fp32 whatever the default, are cast too (as from_pretrained would)
    with torch.device(device), default_dtype(dtype):
        transformer = SD3Transformer2DModel(
            **{**SD3_TRANSFORMERS["stabilityai/stable-diffusion-3.5-medium"], **scale.transformer}
        )
    torch.nn.Module.to(transformer, dtype)  # (ModelMixin.to would warn about fp32-kept modules: SD3 has none)
    # random T5/CLIP weights can overflow fp16 inside the stack (trained ones are tamed); bf16 has fp32's range
    encoder_dtype = torch.bfloat16 if dtype == torch.float16 else dtype
    with torch.device(device), default_dtype(encoder_dtype):
        encoders = [m.to(encoder_dtype) for m in text_encoders(scale.encoders, len(tokenizer))]
    with torch.device(device):
        vae = AutoencoderKL(**{**SD3_VAE, **scale.vae})  # decodes in fp32, as the adapter keeps it
    pipe = StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        vae=vae,
        text_encoder=encoders[0],
        tokenizer=tokenizer,
        text_encoder_2=encoders[1],
        tokenizer_2=tokenizer_2,
        text_encoder_3=encoders[2],
        tokenizer_3=tokenizer_3,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe


def save_configs(pipe, folder: Path) -> None:
    """The pipeline's configs (no weights) in the hub layout, for ``flowrl.estimate``."""
    pipe.transformer.save_config(folder / "transformer")
    pipe.vae.save_config(folder / "vae")
    for name in ("text_encoder", "text_encoder_2", "text_encoder_3"):
        getattr(pipe, name).config.save_pretrained(folder / name)
    pipe.tokenizer.save_pretrained(folder / "tokenizer")


def sd35m_config(scale: Scale, folder: Path, iterations: int, precision: str):
    """The sd35m-ocr recipe at this scale; ``precision`` is model.dtype and, unless fp32, the autocast dtype."""
    from flowrl.resolve import resolve_config

    return resolve_config(
        "sd35m-ocr",
        [
            f"output_dir={folder / 'run'}",
            f"model.path={folder}",
            f"model.resolution={scale.resolution}",
            f"model.max_sequence_length={scale.max_sequence_length}",
            f"model.dtype={precision}",
            f"train.mixed_precision={repr('no') if precision == 'fp32' else precision}",
            f"train.iterations={iterations}",
            f"sample.num_steps={scale.num_steps}",
            f"sample.group_size={scale.group_size}",
            f"sample.prompts_per_iteration={scale.prompts_per_iteration}",
            f"sample.batch_size={scale.batch_size}",
            "data.prompts=builtin:tiny",
            'reward={"jpeg_compressibility": 1.0}',
            "log.save_every=100000",
            "log.sample_every=100000",
            "train.onpolicy_check=false",  # measured and reported instead: a speed run must not stop on it
        ],
    )


def trainer_with(cfg, pipe, device: torch.device):
    """flowrl's Trainer around the in-memory pipeline, standing in for ``SD3Adapter.from_config`` while
    the Trainer is built."""
    from flowrl.pipelines.sd3 import SD3Adapter
    from flowrl.trainer import Trainer

    def make(model_cfg, device=device, seed=0):
        return SD3Adapter(
            pipe,
            model_cfg.resolution,
            model_cfg.max_sequence_length,
            device,
            prompt_cache=model_cfg.prompt_cache,
            attention_backend=model_cfg.attention_backend,
        )

    # the folder holds configs only (the weights are in memory): skip the model.path check too
    with (
        mock.patch.object(SD3Adapter, "from_config", classmethod(lambda cls, *a, **k: make(*a, **k))),
        mock.patch.object(SD3Adapter, "check_model_path", staticmethod(lambda model_cfg: None)),
    ):
        return Trainer(cfg)


def bench_sd35m(
    scale: Scale, device: torch.device, iterations: int, clock: Clock, precision: str, repeats: int = 3
) -> list[dict]:
    from flowrl.estimate import estimate
    from flowrl.pipelines.kit.loading import DTYPES

    gpu = device.type == "cuda"
    clock.say(f"SD3.5-Medium: building ({scale.encoders} text encoders, {precision}) on {device}")
    pipe = build_sd35m(scale, device, DTYPES[precision])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        save_configs(pipe, folder)
        cfg = sd35m_config(scale, folder, iterations, precision)
        est = estimate(cfg, device="cuda" if gpu else "cpu")
        clock.say(
            f"estimate: peak {est.peak_gib:.2f} GiB, {est.seconds_per_iteration:.2f} s/iteration ({est.flops_source})"
        )
        trainer = trainer_with(cfg, pipe, device)
        n = cfg.sample.prompts_per_iteration * cfg.sample.group_size
        clock.say(f"trainer ready: {n} samples/iteration, batch {cfg.sample.batch_size}, {cfg.sample.num_steps} steps")
        metrics, first_gap = iterate(trainer, iterations, clock, device)
        ratios = overhead(trainer, clock, metrics["timing_s/iteration"], repeats) if repeats else []
    phases = {k.split("/")[1]: round(v, 3) for k, v in metrics.items() if k.startswith("timing_s/")}
    clock.say(
        f"on-policy log-prob gap at the first update: {first_gap:.3g} (train.onpolicy_tol {cfg.train.onpolicy_tol:g})"
    )
    rows.append(
        {
            "model": "SD3.5-M (flowrl iteration)",
            "setting": f"{scale.resolution}px, {n} samples, batch {cfg.sample.batch_size}, {cfg.sample.num_steps} steps, "
            f"CFG {cfg.sample.guidance_scale}, LoRA {cfg.train.lora.rank}, {cfg.model.dtype}",
            "seconds": metrics["timing_s/iteration"],
            "images_per_s": metrics["throughput/images_per_s"],
            "peak_gib": metrics["memory/peak_gib"],  # CUDA max allocated; on CPU the process's peak RSS
            "est_seconds": est.seconds_per_iteration,
            "est_peak_gib": est.peak_gib,
            "phases": phases,
            "onpolicy_logp_diff": first_gap,
        }
    )
    rows += ratios
    del trainer, pipe
    reset_peak(device)
    return rows


def overhead(trainer, clock: Clock, iteration_s: float, repeats: int) -> list[dict]:
    """``benchmarks.perf.overhead``'s side-by-side ratios at this size: flowrl's rollout with log-probs vs a
    bare pipeline call, and flowrl's update vs bare forwards+backwards of the same transformer calls."""
    from flowrl.benchmarks.perf.overhead import bench_rollout, bench_update

    rows = []
    for what, fn, setting in (
        ("rollout", bench_rollout, "SDE rollout with log-probs vs a bare StableDiffusion3Pipeline call (latents out)"),
        ("update", bench_update, "update (log-probs, clipped loss, backward, AdamW) vs bare forwards+backwards"),
    ):
        # each side runs 1 + repeats times, each a fraction of an iteration
        if clock.left() < (1 + repeats) * iteration_s:
            clock.say(f"skipping the {what} overhead: time budget")
            continue
        timing = fn(trainer, repeats)
        ours, bare = statistics.median(timing.ours), statistics.median(timing.bare)
        clock.say(f"{what}: flowrl {ours:.3f} s, bare {bare:.3f} s, ratio {timing.ratio:.3f} (median of the pairs)")
        rows.append(
            {
                "model": f"SD3.5-M {what} overhead",
                "setting": setting,
                "seconds": ours,
                "bare_seconds": bare,
                "ratio": timing.ratio,
                "images_per_s": float("nan"),
                "peak_gib": float("nan"),
                "est_seconds": float("nan"),
                "est_peak_gib": float("nan"),
            }
        )
    return rows
