"""Full-size speed and memory on one GPU, with random weights and nothing from the hub.

    python -m flowrl.benchmarks.perf.gpu [--json out.json]   # on a GPU: about 3-5 minutes
    python -m flowrl.benchmarks.perf.gpu --what flux|wan|audio|ltx2 --max-seconds 500   # one family's iteration
    python -m flowrl.benchmarks.perf.gpu --smoke             # the same code at toy sizes: seconds on a CPU

Each figure is printed as it is measured, then Markdown tables (the default, ``--what sd35m,wan``: the first
three stages below):

* **SD3.5-Medium through flowrl's Trainer**: the transformer at its published config (2.24B), the SD3
  VAE, and CLIP-L, CLIP-G and the T5-XXL encoder at their real configs (``--shallow-text-encoders``: at
  their real widths but 1-2 layers; they only encode the prompts once), the encoders in bf16 because
  random T5 weights may overflow fp16. The sd35m-ocr recipe's model settings (512 px, fp16, LoRA 32, 10
  steps, CFG 4.5, EMA, beta 0.004) on 18 samples (3 prompts x 6, rollout batches of 9) and the JPEG
  reward (offline, cheap). Reports seconds per iteration (the last of ``--iterations``, the first warms
  up), images/s, peak GiB (``torch.cuda.max_memory_allocated``) and the phases, next to
  ``flowrl.estimate``'s prediction for the same configuration. The step-0 on-policy check is reported,
  not enforced. Then ``benchmarks.perf.overhead``'s side-by-side ratios at this size: the rollout with
  log-probs over a bare pipeline call, and the update over bare forwards+backwards.
* **Wan2.1-T2V-1.3B transformer** (``WanTransformer3DModel`` at its published config, 1.42B): seconds
  per no-grad forward and per forward+backward (LoRA on the attention projections, bf16 autocast) at a
  video latent of 81 frames at 480x832 (16 x 21 x 60 x 104, 32,760 tokens) and 512 text tokens, without
  and with gradient checkpointing.
* **Wan2.1-T2V-1.3B through flowrl's Trainer** (``--what wan`` runs it after the transformer alone): the
  whole ``WanPipeline`` at its published architecture (the UMT5-XXL encoder, the Wan VAE decoding all 81
  frames) through the wan adapter, Flow-GRPO's Wan settings (CFG 4.5, LoRA 32/64, beta 0.004, bf16) at 81 x
  480 x 832 with gradient checkpointing, 10 steps with an SDE window of 2, 2 samples one a batch, and the
  per-frame JPEG video reward. About 50-100 s an iteration on an H200: ``--what wan --max-seconds 500``.
* **FLUX.1-dev through flowrl's Trainer** (``--what flux``): the 11.9B transformer with its guidance
  embedding, CLIP-L and the T5-XXL encoder, FLUX's VAE, through the flux adapter; Flow-GRPO's pickscore_flux
  settings (512 px, 6 steps, guidance 3.5 embedded: one pass a step, noise 0.9, LoRA 64/128 with the
  feed-forwards, beta 0, bf16) on 12 samples in batches of 3, the JPEG reward.
* **Stable Audio 3 medium through flowrl's Trainer** (``--what audio``): the 1.45B DiT, the T5Gemma-B
  encoder, the duration embedder and SAME-L (``flowrl.estimate``'s table: the diffusers class defaults)
  through the stable_audio adapter; 10 s clips, 8 steps at guidance 1 (the distilled model), LoRA 32/64, 24
  samples in batches of 12, the band-energy reward.
* **LTX-2 through flowrl's Trainer with AV-GRPO** (``--what ltx2``): the 18.9B joint audio+video transformer
  (``LTX2VideoTransformer3DModel``'s class defaults, ``flowrl.estimate``'s table), Gemma-3-12B with its vision
  tower, the text connectors, both VAEs and the vocoder, random weights, a word tokenizer made in code,
  through the ltx2 adapter (only its loader patched) and the av_grpo method: one AV-GRPO step (the video
  phase) at 49 frames of 512 x 768 at 24 fps (7 x 16 x 24 + 51 = 2,739 tokens), 8 steps, CFG 4, G = 4 on one
  prompt (plus its anchor rollout), LoRA 32/32 on the adapter's targets, gradient checkpointing, bf16, the
  per-frame JPEG reward for both phases. One device call should run ``--what ltx2 --iterations 1
  --max-seconds 480`` (building the 33B parameters on the GPU takes most of a minute; the estimate is printed
  before the iteration).
  Each of the four reports seconds per iteration (the last of ``--iterations``), samples per second and the
  peak next to ``estimate(cfg)``'s, and is skipped when the estimate says it would overrun ``--max-seconds``.
  With ``--smoke`` they run the tiny models of ``pipelines/tiny_families.py`` (``--shallow-text-encoders``
  shrinks T5-XXL, UMT5-XXL and T5Gemma to one layer, CLIP-L to two).
* **Every method** (``--what methods``, not in the default): one iteration of each registered method on
  the same SD3.5-M (after a warm-up iteration): seconds and their ratio to Flow-GRPO's, NFE, NFE/s,
  reward calls and peak GiB. G²RPO and E-GRPO roll out one prompt group (6) per batch; DenseGRPO's
  calibration rounds are left out of its figure. ``--what methods --max-seconds 400`` fits one device
  call; methods that would overrun are skipped with a note.
* **Attention backends and torch.compile** (``--what attention``, not in the default): one iteration of the
  same SD3.5-M (after a warm-up iteration, which also pays any compilation) with today's attention, then
  ``model.attention_backend`` set to each backend of ``ATTENTION_BACKENDS`` (or ``--attention-backends``)
  that runs on this GPU, then ``train.compile=true`` with today's attention and with the fastest backend:
  seconds, the ratio to today's, and the first update's rollout-vs-update log-prob gap
  (``policy/onpolicy_logp_diff``) side by side. The target is 0.8 of today's time with the gap within
  ``train.onpolicy_tol``. ``--what attention --max-seconds 540`` fits one device call. With ``--smoke`` the
  compiled variants use torch.compile's ``aot_eager`` backend (graph capture, no kernel builds), so that
  the stage runs in seconds on a CPU: it checks the code path, not the speed.

Stages that would overrun ``--max-seconds`` are skipped with a note, so the script ends in time.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import torch

# WAN21_1_3B: diffusers config.json of Wan-AI/Wan2.1-T2V-1.3B-Diffusers, transformer/ (flowrl.estimate's table)
from flowrl.estimate import WAN21_1_3B

GIB = 2**30

WAN_LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]
WAN_VAE_STRIDE = (4, 8, 8)  # frames (after the first), height, width


@dataclass
class Scale:
    """Everything --smoke shrinks."""

    transformer: dict  # SD3Transformer2DModel overrides of the SD3.5-Medium config
    vae: dict  # AutoencoderKL overrides of the SD3 VAE config
    encoders: str  # real | shallow | tiny
    resolution: int
    max_sequence_length: int
    num_steps: int
    group_size: int
    prompts_per_iteration: int
    batch_size: int
    wan: dict  # WanTransformer3DModel overrides
    wan_video: tuple[int, int, int]  # frames, height, width (pixels)
    wan_text_tokens: int


FULL = Scale(
    transformer={},
    vae={},
    encoders="real",
    resolution=512,
    max_sequence_length=128,
    num_steps=10,
    group_size=6,
    prompts_per_iteration=3,
    batch_size=9,
    wan={},
    wan_video=(81, 480, 832),
    wan_text_tokens=512,
)
SMOKE = Scale(
    transformer={
        "num_layers": 2,
        "num_attention_heads": 2,
        "attention_head_dim": 32,
        "caption_projection_dim": 64,
        "joint_attention_dim": 64,
        "pooled_projection_dim": 32,
        "dual_attention_layers": [0],
        "sample_size": 8,
        "pos_embed_max_size": 8,
    },
    vae={
        "block_out_channels": [8, 16],
        "down_block_types": ["DownEncoderBlock2D"] * 2,
        "up_block_types": ["UpDecoderBlock2D"] * 2,
        "layers_per_block": 1,
        "norm_num_groups": 4,
        "sample_size": 32,
    },
    encoders="tiny",
    resolution=32,
    max_sequence_length=16,
    num_steps=2,
    group_size=2,
    prompts_per_iteration=2,
    batch_size=2,
    wan={
        "num_layers": 2,
        "num_attention_heads": 2,
        "attention_head_dim": 32,
        "ffn_dim": 128,
        "text_dim": 64,
        "freq_dim": 32,
    },
    wan_video=(5, 32, 32),
    wan_text_tokens=16,
)


class Clock:
    def __init__(self, budget_s: float):
        self.start, self.budget = time.perf_counter(), budget_s

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return self.budget - self.elapsed

    def say(self, text: str) -> None:
        print(f"[{self.elapsed:6.1f} s] {text}", flush=True)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _peak_gib(device: torch.device) -> float:
    return torch.cuda.max_memory_allocated(device) / GIB if device.type == "cuda" else float("nan")


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        gc.collect()  # what a finished stage left in reference cycles
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


# ----------------------------------------------------------------------------------------------------
# SD3.5-Medium, in memory


def _text_encoders(kind: str, vocab: int):
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
    from flowrl.pipelines.tiny import make_word_tokenizer

    clip_len = 16 if scale.encoders == "tiny" else 77
    tokenizer, tokenizer_2 = make_word_tokenizer(clip_len), make_word_tokenizer(clip_len)
    tokenizer_3 = make_word_tokenizer(512)
    torch.manual_seed(0)
    # initialised in the target dtype (half the memory and time); then buffers such as the positional
    # embedding, which are made in fp32 whatever the default, are cast too (as from_pretrained would)
    with torch.device(device), _default_dtype(dtype):
        transformer = SD3Transformer2DModel(
            **{**SD3_TRANSFORMERS["stabilityai/stable-diffusion-3.5-medium"], **scale.transformer}
        )
    torch.nn.Module.to(transformer, dtype)  # (ModelMixin.to would warn about fp32-kept modules: SD3 has none)
    # random T5/CLIP weights can overflow fp16 inside the stack (trained ones are tamed); bf16 has fp32's range
    encoder_dtype = torch.bfloat16 if dtype == torch.float16 else dtype
    with torch.device(device), _default_dtype(encoder_dtype):
        encoders = [m.to(encoder_dtype) for m in _text_encoders(scale.encoders, len(tokenizer))]
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


def _save_configs(pipe, folder: Path) -> None:
    """The pipeline's configs (no weights) in the hub layout, for ``flowrl.estimate``."""
    pipe.transformer.save_config(folder / "transformer")
    pipe.vae.save_config(folder / "vae")
    for name in ("text_encoder", "text_encoder_2", "text_encoder_3"):
        getattr(pipe, name).config.save_pretrained(folder / name)
    pipe.tokenizer.save_pretrained(folder / "tokenizer")


def _sd35m_config(scale: Scale, folder: Path, iterations: int, precision: str):
    """The sd35m-ocr recipe at this scale; ``precision`` is model.dtype and, unless fp32, the autocast dtype."""
    from flowrl.config import resolve_config

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


def _trainer_with(cfg, pipe, device: torch.device):
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
    from flowrl.pipelines.sd3 import DTYPES

    gpu = device.type == "cuda"
    clock.say(f"SD3.5-Medium: building ({scale.encoders} text encoders, {precision}) on {device}")
    pipe = build_sd35m(scale, device, DTYPES[precision])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _save_configs(pipe, folder)
        cfg = _sd35m_config(scale, folder, iterations, precision)
        est = estimate(cfg, device="cuda" if gpu else "cpu")
        clock.say(
            f"estimate: peak {est.peak_gib:.2f} GiB, {est.seconds_per_iteration:.2f} s/iteration ({est.flops_source})"
        )
        trainer = _trainer_with(cfg, pipe, device)
        n = cfg.sample.prompts_per_iteration * cfg.sample.group_size
        clock.say(f"trainer ready: {n} samples/iteration, batch {cfg.sample.batch_size}, {cfg.sample.num_steps} steps")
        metrics = None
        for i in range(iterations):
            if i and clock.left() < 1.5 * metrics["timing_s/iteration"]:
                clock.say("skipping further iterations: time budget")
                break
            _reset_peak(device)
            metrics = trainer.step(i)
            if i == 0:
                first_gap = metrics.get("policy/onpolicy_logp_diff", float("nan"))
            clock.say(
                f"iteration {i}: {metrics['timing_s/iteration']:.2f} s, "
                f"{metrics['throughput/images_per_s']:.2f} images/s, peak {metrics['memory/peak_gib']:.2f} GiB, "
                + ", ".join(f"{k.split('/')[1]} {v:.2f}" for k, v in metrics.items() if k.startswith("timing_s/"))
            )
        ratios = _overhead(trainer, clock, metrics["timing_s/iteration"], repeats) if repeats else []
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
    _reset_peak(device)
    return rows


# per method, what its SD3.5-M iteration changes: branch methods need whole groups in a rollout batch;
# DenseGRPO's calibration (rounds of exploration before training) is not part of an iteration's figure
METHOD_OVERRIDES: dict[str, list[str]] = {
    "dense_grpo": ["method.options.calibrate=false"],
    "g2rpo": ["sample.batch_size={group}"],
    "e_grpo": ["sample.batch_size={group}"],
}


def bench_methods(
    scale: Scale, device: torch.device, clock: Clock, precision: str, methods: list[str] | None = None
) -> list[dict]:
    """One SD3.5-M-size iteration of every registered method (after one warm-up iteration), on the same
    in-memory pipeline: seconds, NFE/s, NFE and reward calls, peak memory, beside Flow-GRPO's."""
    from flowrl.config import config_from_dict, merge_overrides
    from flowrl.methods import list_methods
    from flowrl.pipelines.sd3 import DTYPES

    clock.say(f"methods: building SD3.5-Medium ({scale.encoders} text encoders, {precision}) on {device}")
    pipe = build_sd35m(scale, device, DTYPES[precision])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _save_configs(pipe, folder)
        base = _sd35m_config(scale, folder, 2, precision).to_dict()
        names = methods or sorted(list_methods("image"), key=lambda m: m != "flow_grpo")  # Flow-GRPO first
        for name in names:
            if rows and clock.left() < 3 * max(r["seconds"] for r in rows):
                clock.say(f"skipping {name} and after: time budget")
                break
            extra = [o.format(group=scale.group_size) for o in METHOD_OVERRIDES.get(name, [])]
            data = merge_overrides(
                json.loads(json.dumps(base)), [f"method.name={name}", *extra, f"output_dir={folder / name}"]
            )
            trainer = _trainer_with(config_from_dict(data), pipe, device)
            trainer.step(0)  # warm-up
            _reset_peak(device)
            m = trainer.step(1)
            clock.say(
                f"{name}: {m['timing_s/iteration']:.2f} s, {m['throughput/nfe_per_s']:.0f} NFE/s, "
                f"{m['cost/nfe']:.0f} NFE, {m['cost/reward_calls']:.0f} reward calls, "
                f"peak {m['memory/peak_gib']:.2f} GiB"
            )
            rows.append(
                {
                    "model": f"SD3.5-M method {name}",
                    "setting": f"{scale.resolution}px, {trainer.cfg.sample.prompts_per_iteration * trainer.cfg.sample.group_size} "
                    f"samples, batch {trainer.cfg.sample.batch_size}, {scale.num_steps} steps, {precision}",
                    "seconds": m["timing_s/iteration"],
                    "images_per_s": m["throughput/images_per_s"],
                    "nfe": m["cost/nfe"],
                    "nfe_per_s": m["throughput/nfe_per_s"],
                    "reward_calls": m["cost/reward_calls"],
                    "peak_gib": m["memory/peak_gib"],
                }
            )
            del trainer
            pipe.transformer.delete_adapters("default")  # the next method starts from the base weights
    flow = next((r for r in rows if r["model"].endswith(" flow_grpo")), None)
    for r in rows:
        if flow:
            r["vs_flow_grpo"] = r["seconds"] / flow["seconds"]
    del pipe
    _reset_peak(device)
    return rows


# attention backends with a backward pass, about fastest first on a Hopper GPU: FlashAttention-3 and -2 (their
# packages), cuDNN's and PyTorch's own fused kernels, and the dispatcher's plain SDPA (SageAttention has no
# backward pass: it cannot train)
ATTENTION_BACKENDS = ("_flash_3", "flash", "_native_cudnn", "_native_flash", "_native_efficient", "native")


def _reset_transformer(transformer, processors: dict) -> None:
    """The shared transformer as built, for the next variant: its own attention processors, its class's forward
    (no compiled or autocast forward left by an earlier Trainer), no forward hooks (NFE counts) and no LoRA."""
    transformer.set_attn_processor(dict(processors))
    for attr in ("forward", "_original_forward"):
        transformer.__dict__.pop(attr, None)
    transformer._forward_pre_hooks.clear()
    transformer._forward_pre_hooks_with_kwargs.clear()
    if "default" in (getattr(transformer, "peft_config", None) or {}):
        transformer.delete_adapters("default")


def _runnable_backends(transformer, names, device: torch.device, dtype: torch.dtype, clock: Clock) -> list[str]:
    """The backends among ``names`` that run (and backpropagate) here, each said as it is checked."""
    from flowrl.pipelines.sd3 import set_attention_backend

    processors = dict(transformer.attn_processors)
    runnable = []
    for name in names:
        try:
            if set_attention_backend(transformer, name, device, dtype):
                runnable.append(name)
            else:
                clock.say(f"attention {name}: skipped (inference-only: no backward pass)")
        except (RuntimeError, ValueError) as exc:
            clock.say(f"attention {name}: skipped ({exc})")
        finally:
            transformer.set_attn_processor(dict(processors))
    return runnable


def bench_attention(
    scale: Scale,
    device: torch.device,
    clock: Clock,
    precision: str,
    backends: list[str] | None = None,
    smoke: bool = False,
) -> list[dict]:
    """One SD3.5-M-size iteration (after a warm-up iteration) for today's path, each attention backend that
    runs here, and torch.compile with today's attention and with the fastest backend: seconds, ratio to
    today's, and the first update's on-policy log-prob gap."""
    from flowrl.config import config_from_dict, merge_overrides
    from flowrl.pipelines.sd3 import DTYPES

    clock.say(f"attention: building SD3.5-Medium ({scale.encoders} text encoders, {precision}) on {device}")
    pipe = build_sd35m(scale, device, DTYPES[precision])
    transformer = pipe.transformer
    processors = dict(transformer.attn_processors)
    runnable = _runnable_backends(transformer, backends or ATTENTION_BACKENDS, device, DTYPES[precision], clock)
    clock.say(f"attention backends that run here: {', '.join(runnable) or 'none'}")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _save_configs(pipe, folder)
        base = _sd35m_config(scale, folder, 2, precision).to_dict()

        def run(label: str, backend: str | None, compiled: bool) -> None:
            # two iterations; a compiled variant's first one also builds its kernels (minutes at full size)
            need = (4 if compiled else 2.5) * rows[0]["seconds"] + (150 if compiled and not smoke else 0) if rows else 0
            if clock.left() < need:
                clock.say(f"skipping {label}: time budget")
                return
            overrides = [f"output_dir={folder / label.replace(' ', '_')}", f"train.compile={str(compiled).lower()}"]
            if backend is not None:
                overrides.append(f"model.attention_backend={backend}")
            cfg = config_from_dict(merge_overrides(json.loads(json.dumps(base)), overrides))
            _reset_transformer(transformer, processors)
            torch._dynamo.reset()
            # --smoke checks the code path: graph capture without inductor's kernel builds (minutes on a CPU)
            capture_only = mock.patch.object(torch, "compile", functools.partial(torch.compile, backend="eager"))
            with capture_only if compiled and smoke else contextlib.nullcontext():
                trainer = _trainer_with(cfg, pipe, device)
            _reset_peak(device)
            first = trainer.step(0)  # warm-up (and compilation)
            _reset_peak(device)
            m = trainer.step(1)
            gap = first.get("policy/onpolicy_logp_diff", float("nan"))
            rows.append(
                {
                    "model": f"SD3.5-M attention {label}",
                    "setting": f"{backend or 'default'} attention, compile {'on' if compiled else 'off'}; "
                    f"{scale.resolution}px, {cfg.sample.prompts_per_iteration * cfg.sample.group_size} "
                    f"samples, batch {cfg.sample.batch_size}, {scale.num_steps} steps, {precision}",
                    "attention": backend or "default",
                    "compile": compiled,
                    "seconds": m["timing_s/iteration"],
                    "first_seconds": first["timing_s/iteration"],
                    "images_per_s": m["throughput/images_per_s"],
                    "peak_gib": m["memory/peak_gib"],
                    "onpolicy_logp_diff": gap,
                    "onpolicy_tol": cfg.train.onpolicy_tol,
                    "vs_today": m["timing_s/iteration"] / rows[0]["seconds"] if rows else 1.0,
                }
            )
            clock.say(
                f"{label}: {m['timing_s/iteration']:.2f} s ({rows[-1]['vs_today']:.3f} x today's), first "
                f"iteration {first['timing_s/iteration']:.2f} s, on-policy gap {gap:.3g}, "
                f"peak {m['memory/peak_gib']:.2f} GiB"
            )
            del trainer
            _reset_transformer(transformer, processors)
            torch._dynamo.reset()

        run("today", None, False)
        for name in runnable:
            run(name, name, False)
        run("compile", None, True)
        measured = [r for r in rows if r["attention"] in runnable and not r["compile"]]
        if measured:
            best = min(measured, key=lambda r: r["seconds"])["attention"]
            run(f"{best} + compile", best, True)
    for r in rows:
        r["meets_target"] = bool(r["vs_today"] <= 0.8 and r["onpolicy_logp_diff"] <= r["onpolicy_tol"])
    pipe = transformer = processors = None  # (run() holds pipe in its closure: no del)
    _reset_peak(device)
    return rows


def _overhead(trainer, clock: Clock, iteration_s: float, repeats: int) -> list[dict]:
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
        ours, bare = fn(trainer, repeats)
        clock.say(f"{what}: flowrl {ours:.3f} s, bare {bare:.3f} s, ratio {ours / bare:.3f}")
        rows.append(
            {
                "model": f"SD3.5-M {what} overhead",
                "setting": setting,
                "seconds": ours,
                "bare_seconds": bare,
                "ratio": ours / bare,
                "images_per_s": float("nan"),
                "peak_gib": float("nan"),
                "est_seconds": float("nan"),
                "est_peak_gib": float("nan"),
            }
        )
    return rows


# ----------------------------------------------------------------------------------------------------
# Wan2.1-1.3B transformer


def _wan_latent(video: tuple[int, int, int]) -> tuple[int, int, int]:
    frames, height, width = video
    return (frames - 1) // WAN_VAE_STRIDE[0] + 1, height // WAN_VAE_STRIDE[1], width // WAN_VAE_STRIDE[2]


def _timed(fn, device: torch.device, repeats: int) -> float:
    fn()  # warm-up
    _sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def bench_wan(scale: Scale, device: torch.device, repeats: int, clock: Clock, precision: str) -> list[dict]:
    """``precision``: the weights' dtype and, unless fp32, the autocast dtype (Wan runs in bf16)."""
    from diffusers import WanTransformer3DModel
    from peft import LoraConfig

    from flowrl.pipelines.sd3 import DTYPES

    gpu = device.type == "cuda"
    dtype = DTYPES[precision]
    clock.say(f"Wan2.1-1.3B: building ({precision}) on {device}")
    torch.manual_seed(0)
    with torch.device(device), _default_dtype(dtype):
        model = WanTransformer3DModel(**{**WAN21_1_3B, **scale.wan})
    # as from_pretrained(torch_dtype=...) does: the model's fp32-kept modules (norms, time embedder) in fp32
    keep = getattr(model, "_keep_in_fp32_modules", None) or []
    for name, p in model.named_parameters():
        p.data = p.data.float() if any(k in name.split(".") for k in keep) else p.data.to(dtype)
    model.requires_grad_(False)
    model.add_adapter(LoraConfig(r=32, lora_alpha=32, target_modules=WAN_LORA_TARGETS, init_lora_weights="gaussian"))
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    params = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    size = f"{params / 1e9:.2f}B" if params > 1e8 else f"{params / 1e6:.2f}M"
    f, h, w = _wan_latent(scale.wan_video)
    cfg = model.config
    tokens = f * (h // cfg.patch_size[1]) * (w // cfg.patch_size[2])
    x = torch.randn(1, cfg.in_channels, f, h, w, device=device, dtype=dtype)
    text = torch.randn(1, scale.wan_text_tokens, cfg.text_dim, device=device, dtype=dtype)
    t = torch.full((1,), 500.0, device=device)
    autocast = torch.autocast(device.type, dtype=dtype, enabled=precision != "fp32")

    def forward():
        with torch.no_grad(), autocast:
            model(hidden_states=x, timestep=t, encoder_hidden_states=text, return_dict=False)

    def forward_backward():
        with autocast:
            out = model(hidden_states=x, timestep=t, encoder_hidden_states=text, return_dict=False)[0]
        out.float().square().mean().backward()

    video = "x".join(map(str, scale.wan_video))
    setting = f"{video} video -> latent {cfg.in_channels}x{f}x{h}x{w}, {tokens} tokens, {scale.wan_text_tokens} text"
    rows = []
    for what, fn, ckpt in (
        ("forward (no grad)", forward, False),
        ("forward+backward, LoRA", forward_backward, False),
        ("forward+backward, LoRA, checkpointing", forward_backward, True),
    ):
        if clock.left() < 30 and gpu:
            clock.say(f"skipping Wan {what}: time budget")
            continue
        if ckpt:
            model.enable_gradient_checkpointing()
        _reset_peak(device)
        try:
            seconds = _timed(fn, device, repeats)
            peak = _peak_gib(device)
        except torch.cuda.OutOfMemoryError:
            seconds, peak = float("nan"), float("inf")
            model.zero_grad(set_to_none=True)
        model.zero_grad(set_to_none=True)
        rows.append(
            {
                "model": f"Wan2.1-1.3B transformer ({size})",
                "setting": f"{what}; {setting}",
                "seconds": seconds,
                "images_per_s": float("nan"),
                "peak_gib": peak,
                "est_seconds": float("nan"),
                "est_peak_gib": float("nan"),
            }
        )
        clock.say(f"Wan {what}: {seconds:.3f} s, peak {peak:.2f} GiB")
    _reset_peak(device)
    return rows


# ----------------------------------------------------------------------------------------------------
# FLUX.1-dev, Wan2.1-1.3B and Stable Audio 3 iterations through flowrl's Trainer


@dataclass
class FamilyRun:
    """One family's iteration: its tiny recipe with these overrides (what ``--smoke`` shrinks too)."""

    recipe: str
    overrides: list[str]
    label: str  # the row's setting, in words


FAMILY_RUNS = {
    # Flow-GRPO's pickscore_flux settings (512 px, 6 steps with 5 trained, guidance embedding 3.5, noise 0.9,
    # LoRA 64/128 on the attention and feed-forward projections, beta 0, bf16), on 12 samples in batches of 3
    "flux": FamilyRun(
        "tiny-flux",
        [
            "model.resolution=512",
            "model.max_sequence_length=512",
            "sample.num_steps=6",
            "sample.timestep_fraction=0.99",
            "sample.guidance_scale=3.5",
            "sample.noise_level=0.9",
            "sample.group_size=6",
            "sample.prompts_per_iteration=2",
            "sample.batch_size=3",
            "train.beta=0.0",
            "train.clip_range=1.0e-4",
            "train.lora.rank=64",
            "train.lora.alpha=128",
            (
                "train.lora.target_modules=[attn.to_q,attn.to_k,attn.to_v,attn.to_out.0,attn.add_q_proj,attn.add_k_proj,"
                "attn.add_v_proj,attn.to_add_out,ff.net.0.proj,ff.net.2,ff_context.net.0.proj,ff_context.net.2]"
            ),
            'reward={"jpeg_compressibility": 1.0}',
        ],
        "512px, 12 samples, batch 3, 6 steps, guidance embedding 3.5, LoRA 64 (+FF)",
    ),
    # Flow-GRPO's general_ocr_wan2_1 settings (CFG 4.5, LoRA 32/64, beta 0.004, clip 1e-3, bf16) at 81 frames
    # of 480x832 with gradient checkpointing; 10 steps of which an SDE window of 2 trains (Flow-GRPO's 20 steps,
    # 19 of them trained, would take about 4x longer), 2 samples, one a batch
    "wan": FamilyRun(
        "tiny-wan",
        [
            "model.height=480",
            "model.width=832",
            "model.num_frames=81",
            "model.fps=16",
            "model.max_sequence_length=512",
            "train.gradient_checkpointing=true",
            "sample.num_steps=10",
            "sample.window_size=2",
            "sample.guidance_scale=4.5",
            "sample.group_size=2",
            "sample.prompts_per_iteration=1",
            "sample.batch_size=1",
            "train.beta=0.004",
            "train.clip_range=1.0e-3",
            "train.lora.rank=32",
            "train.lora.alpha=64",
            "train.lora.target_modules=null",
        ],
        "81x480x832 (32,760 tokens), 2 samples, batch 1, CFG 4.5, 10 steps, window 2, LoRA 32, checkpointing",
    ),
    # stable-audio-3-medium (distilled: guidance 1, 8 steps), 10 s clips, LoRA 32/64, 24 samples in batches of 12
    "ltx2": FamilyRun(
        "tiny-ltx2-av-grpo",
        [
            "model.height=512",
            "model.width=768",
            "model.num_frames=49",
            "model.fps=24",
            "model.max_sequence_length=256",
            "train.gradient_checkpointing=true",
            "sample.num_steps=8",
            "sample.guidance_scale=4.0",
            "sample.group_size=4",
            "sample.prompts_per_iteration=1",
            "sample.batch_size=4",
            "train.lora.rank=32",
            "train.lora.alpha=32",
            "train.lora.target_modules=null",
            "train.learning_rate=1.0e-6",
        ],
        "49x512x768 at 24 fps (2,739 tokens), G = 4 + anchor, 8 steps, CFG 4, LoRA 32, checkpointing",
    ),
    "stable_audio": FamilyRun(
        "tiny-audio",
        [
            "model.duration_s=10.0",
            "sample.num_steps=8",
            "sample.guidance_scale=1.0",
            "sample.group_size=6",
            "sample.prompts_per_iteration=4",
            "sample.batch_size=12",
            "train.beta=0.004",
            "train.clip_range=1.0e-4",
            "train.lora.rank=32",
            "train.lora.alpha=64",
            "train.lora.target_modules=null",
        ],
        "10 s clips (108 latent frames), 24 samples, batch 12, 8 steps, guidance 1, LoRA 32",
    ),
}
# --smoke: the tiny models, two samples of a few steps
SMOKE_FAMILY_OVERRIDES = [
    "sample.num_steps=2",
    "sample.group_size=2",
    "sample.prompts_per_iteration=1",
    "sample.batch_size=2",
    "sample.window_size=0",
]
FAMILY_NAMES = {"flux": "FLUX.1-dev", "wan": "Wan2.1-1.3B", "stable_audio": "SA3-medium", "ltx2": "LTX-2 (AV-GRPO)"}
_LOADERS = {
    "flux": "load_flux_pipeline",
    "wan": "load_wan_pipeline",
    "stable_audio": "load_stable_audio_pipeline",
    "ltx2": "load_ltx2_pipeline",
}


def _ids() -> dict:
    return {"pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3}  # make_word_tokenizer's


def _fp32_kept(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """As ``from_pretrained(torch_dtype=...)``: the model in ``dtype`` but its ``_keep_in_fp32_modules`` in fp32."""
    keep = getattr(model, "_keep_in_fp32_modules", None) or []
    for name, p in model.named_parameters():
        p.data = p.data.float() if any(k in name.split(".") for k in keep) else p.data.to(dtype)
    for name, b in model.named_buffers():
        if b.is_floating_point() and not any(k in name.split(".") for k in keep):
            b.data = b.data.to(dtype)
    return model


def _t5(config: dict, shallow: bool, umt5: bool = False):
    from transformers import T5Config, T5EncoderModel, UMT5Config, UMT5EncoderModel

    config = dict(config, num_layers=1) if shallow else dict(config)
    config.update(pad_token_id=0, eos_token_id=3, dropout_rate=0.0, decoder_start_token_id=0)
    return UMT5EncoderModel(UMT5Config(**config)) if umt5 else T5EncoderModel(T5Config(**config))


def build_family(name: str, scale: Scale, device: torch.device, dtype: torch.dtype):
    """The family's diffusers pipeline with random weights: the published architecture (``flowrl.estimate``'s
    table), initialised on ``device`` in ``dtype`` (the VAE in fp32), tokenizers made in code; with ``--smoke``
    (``scale.encoders == "tiny"``) the offline tiny model of ``pipelines/tiny_families.py``."""
    from flowrl.pipelines import tiny_families as tf

    if scale.encoders == "tiny":
        builders = {
            "flux": tf.build_tiny_flux,
            "wan": tf.build_tiny_wan,
            "stable_audio": tf.build_tiny_stable_audio,
            "ltx2": tf.build_tiny_ltx2,
        }
        pipe = builders[name]()
        for part in ("transformer", "text_encoder", "text_encoder_2", "connectors"):
            module = getattr(pipe, part, None)
            if module is not None:
                _fp32_kept(module, dtype)
        return pipe.to(device)
    import diffusers

    from flowrl import estimate as e
    from flowrl.pipelines.tiny import make_word_tokenizer

    shallow = scale.encoders == "shallow"
    schedulers = {  # made outside the device context: their sigma tables live on the CPU
        "flux": lambda: diffusers.FlowMatchEulerDiscreteScheduler(**tf.FLUX_SCHEDULER_CONFIG),
        "wan": lambda: diffusers.UniPCMultistepScheduler(**tf.WAN_SCHEDULER_CONFIG),
        "stable_audio": lambda: diffusers.FlowMatchEulerDiscreteScheduler(
            **tf.STABLE_AUDIO3_SCHEDULER_CONFIG, stochastic_sampling=True
        ),
        "ltx2": lambda: diffusers.FlowMatchEulerDiscreteScheduler(**tf.LTX2_SCHEDULER_CONFIG),
    }
    if name not in schedulers:
        raise ValueError(f"no {name!r} family here; choose one of {', '.join(FAMILY_RUNS)}")
    scheduler = schedulers[name]()
    tokenizer = make_word_tokenizer({"flux": 77, "wan": 512, "stable_audio": 256, "ltx2": 1024}[name])
    torch.manual_seed(0)
    # random T5/UMT5 weights can overflow fp16 inside the stack; bf16 has fp32's range
    encoder_dtype = torch.bfloat16 if dtype == torch.float16 else dtype
    with torch.device(device):
        if name == "flux":
            with _default_dtype(dtype):
                transformer = diffusers.FluxTransformer2DModel(**e.FLUX_DEV_TRANSFORMER)
            with _default_dtype(encoder_dtype):
                from transformers import CLIPTextConfig, CLIPTextModel

                clip = dict(e.CLIP_L, num_hidden_layers=2) if shallow else dict(e.CLIP_L)
                text_encoder = CLIPTextModel(CLIPTextConfig(**clip, **_ids()))
                text_encoder_2 = _t5(e.T5_XXL, shallow)
            vae = diffusers.AutoencoderKL(**e.FLUX_VAE)
            pipe = diffusers.FluxPipeline(
                scheduler=scheduler,
                vae=vae,
                text_encoder=_fp32_kept(text_encoder, encoder_dtype),
                tokenizer=tokenizer,
                text_encoder_2=_fp32_kept(text_encoder_2, encoder_dtype),
                tokenizer_2=make_word_tokenizer(512),
                transformer=_fp32_kept(transformer, dtype),
            )
        elif name == "wan":
            with _default_dtype(dtype):
                transformer = diffusers.WanTransformer3DModel(**e.WAN21_1_3B)
            with _default_dtype(encoder_dtype):
                text_encoder = _t5(e.UMT5_XXL, shallow, umt5=True)
            vae = diffusers.AutoencoderKLWan()  # the Wan2.1 VAE: the class defaults
            pipe = diffusers.WanPipeline(
                tokenizer=tokenizer,
                text_encoder=_fp32_kept(text_encoder, encoder_dtype),
                vae=vae,
                scheduler=scheduler,
                transformer=_fp32_kept(transformer, dtype),
            )
        elif name == "stable_audio":
            from diffusers.pipelines.stable_audio_3.modeling_stable_audio_3 import StableAudio3DurationEmbedder

            with _default_dtype(dtype):
                transformer = diffusers.StableAudio3DiTModel()  # stable-audio-3-medium: the class defaults
                duration = StableAudio3DurationEmbedder()
            with _default_dtype(encoder_dtype):
                encoder = dict(e.T5GEMMA_B_ENCODER, num_hidden_layers=1) if shallow else dict(e.T5GEMMA_B_ENCODER)
                text_encoder = e.component("T5GemmaEncoderModel", dict(encoder, **_ids()))
            vae = diffusers.AutoencoderSAME()  # SAME-L
            pipe = diffusers.StableAudio3Pipeline(
                vae=vae,
                text_encoder=_fp32_kept(text_encoder, encoder_dtype),
                tokenizer=tokenizer,
                duration_embedder=_fp32_kept(duration, dtype),
                transformer=_fp32_kept(transformer, dtype),
                scheduler=scheduler,
            )
        elif name == "ltx2":
            from diffusers.pipelines.ltx2 import LTX2TextConnectors, LTX2Vocoder

            with _default_dtype(dtype):
                transformer = diffusers.LTX2VideoTransformer3DModel()  # the class defaults: estimate's table
                connectors = LTX2TextConnectors()
            with _default_dtype(encoder_dtype):
                gemma = dict(e.GEMMA3_12B)
                if shallow:
                    gemma["text_config"] = dict(gemma["text_config"], num_hidden_layers=2)
                text_encoder = e.component("Gemma3ForConditionalGeneration", gemma)
            vae = diffusers.AutoencoderKLLTX2Video(**e.LTX2_VAE)
            audio_vae = diffusers.AutoencoderKLLTX2Audio()
            vocoder = LTX2Vocoder()
            tokenizer.padding_side = "left"
            pipe = diffusers.LTX2Pipeline(
                scheduler=scheduler,
                vae=vae,
                audio_vae=audio_vae,
                text_encoder=_fp32_kept(text_encoder, encoder_dtype),
                tokenizer=tokenizer,
                connectors=_fp32_kept(connectors, dtype),
                transformer=_fp32_kept(transformer, dtype),
                vocoder=vocoder,
            )
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _save_family_configs(pipe, folder: Path) -> None:
    """``model_index.json`` and each model component's config (no weights), for ``flowrl.estimate``."""
    pipe.save_config(folder)
    for name, module in pipe.components.items():
        if module is None or "token" in name:
            continue
        if hasattr(module, "save_config"):
            module.save_config(folder / name)
        elif hasattr(module, "config") and hasattr(module.config, "save_pretrained"):
            module.config.save_pretrained(folder / name)


def _family_config(name: str, scale: Scale, folder: Path, iterations: int, precision: str):
    from flowrl.config import resolve_config

    run = FAMILY_RUNS[name]
    overrides = list(run.overrides)
    if scale.encoders == "tiny":  # the tiny model at its own size, a few samples
        keep = ("sample.guidance_scale", "train.beta", "reward=", "train.gradient_checkpointing")
        overrides = [o for o in overrides if o.startswith(keep)] + SMOKE_FAMILY_OVERRIDES
        if name == "ltx2":  # the tiny LTX-2's text connectors take 128 tokens at least
            overrides.append("model.max_sequence_length=128")
    overrides += [
        f"model.dtype={precision}",
        f"train.mixed_precision={repr('no') if precision == 'fp32' else precision}",
    ]
    return resolve_config(
        run.recipe,
        [
            *overrides,
            f"output_dir={folder / 'run'}",
            f"model.path={folder}",
            f"train.iterations={iterations}",
            "data.prompts=builtin:tiny",
            "log.save_every=100000",
            "log.sample_every=100000",
            "train.onpolicy_check=false",  # measured and reported instead: a speed run must not stop on it
        ],
    )


def _family_trainer(name: str, cfg, pipe):
    """flowrl's Trainer with the family's own adapter (``adapter_class(name).from_config``), whose pipeline
    loader returns the in-memory pipeline; the folder holds configs only, so the model.path check is skipped."""
    import sys

    from flowrl.pipelines.base import adapter_class
    from flowrl.trainer import Trainer

    cls = adapter_class(name)
    module = sys.modules[cls.__module__]

    def nothing(model_cfg) -> None:
        return None

    with (
        mock.patch.object(module, _LOADERS[name], lambda *a, **k: pipe),
        mock.patch.object(module, "check_model_path", nothing),
        mock.patch.object(cls, "check_model_path", staticmethod(nothing)),
    ):
        return Trainer(cfg)


def bench_family(
    name: str, scale: Scale, device: torch.device, iterations: int, clock: Clock, precision: str
) -> list[dict]:
    """One family's flowrl iteration (the last of ``iterations``; the first warms up) next to ``estimate(cfg)``."""
    from flowrl.estimate import estimate
    from flowrl.pipelines.sd3 import DTYPES

    gpu = device.type == "cuda"
    label = FAMILY_NAMES[name]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        # the estimate first, from the configs alone: it also says whether the stage fits the time left
        meta = build_family(name, scale, torch.device("meta"), DTYPES[precision]) if scale.encoders != "tiny" else None
        clock.say(
            f"{label}: building ({'tiny' if scale.encoders == 'tiny' else scale.encoders + ' text encoders'}, "
            f"{precision}) on {device}"
        )
        if meta is not None:
            _save_family_configs(meta, folder)
            del meta
        pipe = build_family(name, scale, device, DTYPES[precision])
        if scale.encoders == "tiny":
            _save_family_configs(pipe, folder)
        cfg = _family_config(name, scale, folder, iterations, precision)
        est = estimate(cfg, device="cuda" if gpu else "cpu")
        clock.say(
            f"estimate: peak {est.peak_gib:.2f} GiB, {est.seconds_per_iteration:.2f} s/iteration ({est.flops_source})"
        )
        if gpu and clock.left() < 1.2 * est.seconds_per_iteration * iterations + 30:  # + building the trainer
            clock.say(f"skipping the {label} iteration: time budget ({clock.left():.0f} s left)")
            del pipe
            _reset_peak(device)
            return []
        trainer = _family_trainer(name, cfg, pipe)
        n = cfg.sample.prompts_per_iteration * cfg.sample.group_size
        clock.say(f"trainer ready: {n} samples/iteration, batch {cfg.sample.batch_size}, {cfg.sample.num_steps} steps")
        metrics = None
        for i in range(iterations):
            if i and clock.left() < 1.5 * metrics["timing_s/iteration"]:
                clock.say("skipping further iterations: time budget")
                break
            _reset_peak(device)
            metrics = trainer.step(i)
            if i == 0:
                first_gap = metrics.get("policy/onpolicy_logp_diff", float("nan"))
            clock.say(
                f"{label} iteration {i}: {metrics['timing_s/iteration']:.2f} s, "
                f"{metrics['throughput/images_per_s']:.3f} samples/s, peak {metrics['memory/peak_gib']:.2f} GiB, "
                + ", ".join(f"{k.split('/')[1]} {v:.2f}" for k, v in metrics.items() if k.startswith("timing_s/"))
            )
        setting = FAMILY_RUNS[name].label if scale.encoders != "tiny" else "tiny model (--smoke)"
        row = {
            "model": f"{label} (flowrl iteration)",
            "setting": f"{setting}; {precision}",
            "seconds": metrics["timing_s/iteration"],
            "images_per_s": metrics["throughput/images_per_s"],  # samples (images, clips) per second
            "peak_gib": metrics["memory/peak_gib"],  # CUDA max allocated; on CPU the process's peak RSS
            "est_seconds": est.seconds_per_iteration,
            "est_peak_gib": est.peak_gib,
            "phases": {k.split("/")[1]: round(v, 3) for k, v in metrics.items() if k.startswith("timing_s/")},
            "est_phases": {k: round(v, 3) for k, v in est.time_s.items()},
            "onpolicy_logp_diff": first_gap,
            "samples": n,
        }
        del trainer, pipe
    _reset_peak(device)
    return [row]


# ----------------------------------------------------------------------------------------------------


def markdown(rows: list[dict]) -> str:
    def num(v: float, digits: int = 2) -> str:
        return "-" if math.isnan(v) else ("OOM" if math.isinf(v) else f"{v:.{digits}f}")

    lines = [
        "| model | setting | s | images/s | peak GiB | estimate s | estimate peak GiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "ratio" in r or "nfe" in r or "vs_today" in r:
            continue
        lines.append(
            f"| {r['model']} | {r['setting']} | {num(r['seconds'], 3)} | {num(r['images_per_s'])} | "
            f"{num(r['peak_gib'])} | {num(r['est_seconds'])} | {num(r['est_peak_gib'])} |"
        )
    ratios = [r for r in rows if "ratio" in r]
    if ratios:
        lines += ["", "| side by side | flowrl s | bare s | flowrl / bare |", "|---|---|---|---|"]
        lines += [
            f"| {r['model']}: {r['setting']} | {num(r['seconds'], 3)} | {num(r['bare_seconds'], 3)} | "
            f"{num(r['ratio'], 3)} |"
            for r in ratios
        ]
    methods = [r for r in rows if "nfe" in r]
    if methods:
        lines += [
            "",
            "| method iteration | setting | s | vs flow_grpo | NFE | NFE/s | reward calls | peak GiB |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['model']} | {r['setting']} | {num(r['seconds'], 3)} | {num(r.get('vs_flow_grpo', math.nan))} | "
            f"{r['nfe']:.0f} | {num(r['nfe_per_s'], 0)} | {r['reward_calls']:.0f} | {num(r['peak_gib'])} |"
            for r in methods
        ]
    attention = [r for r in rows if "vs_today" in r]
    if attention:
        header = (
            "| attention / compile | setting | s | vs today | first iteration s | on-policy log-prob gap | "
            "peak GiB | 0.8 x today, check passing |"
        )
        lines += ["", header, "|---|---|---|---|---|---|---|---|"]
        lines += [
            f"| {r['model']} | {r['setting']} | {num(r['seconds'], 3)} | {num(r['vs_today'], 3)} | "
            f"{num(r['first_seconds'])} | {r['onpolicy_logp_diff']:.3g} | {num(r['peak_gib'])} | "
            f"{'yes' if r['meets_target'] else 'no'} |"
            for r in attention
        ]
    return "\n".join(lines)


def environment(device: torch.device) -> str:
    import diffusers

    what = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    if device.type == "cuda":
        what += f", {torch.cuda.get_device_properties(device).total_memory / GIB:.0f} GiB"
    return f"{what}; torch {torch.__version__}, diffusers {diffusers.__version__}"


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(prog="python -m flowrl.benchmarks.perf.gpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="toy sizes, on a CPU in seconds (tests run this)")
    p.add_argument(
        "--what",
        default="sd35m,wan",
        help="comma-separated: sd35m, wan (the transformer alone, then an iteration), flux, audio, "
        "ltx2 (one AV-GRPO step), methods, attention",
    )
    p.add_argument(
        "--attention-backends",
        default=None,
        help=f"comma-separated, for --what attention (default: {','.join(ATTENTION_BACKENDS)})",
    )
    p.add_argument(
        "--iterations", type=int, default=2, help="flowrl iterations of SD3.5-M, Wan, FLUX and SA3 (the first warms up)"
    )
    p.add_argument("--repeats", type=int, default=3, help="timed Wan calls (median), after one warm-up")
    p.add_argument(
        "--overhead-repeats", type=int, default=3, help="side-by-side rollout and update timings of SD3.5-M (0: skip)"
    )
    p.add_argument(
        "--precision",
        choices=["auto", "fp32", "fp16", "bf16"],
        default="auto",
        help="model and autocast dtype (auto: on a GPU fp16 for SD3.5-M as its recipe, bf16 for Wan, FLUX and SA3; "
        "fp32 on a CPU)",
    )
    p.add_argument("--shallow-text-encoders", action="store_true", help="1-2 layer text encoders at real widths")
    p.add_argument("--max-seconds", type=float, default=270.0, help="skip stages that would run past this")
    p.add_argument("--json", default=None, help="also write the rows as JSON")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    scale = SMOKE if args.smoke else FULL
    if args.shallow_text_encoders and not args.smoke:
        scale = Scale(**{**scale.__dict__, "encoders": "shallow"})
    clock = Clock(args.max_seconds)
    clock.say(environment(device) + (" (smoke sizes)" if args.smoke else ""))
    if device.type != "cuda" and not args.smoke:
        clock.say("no GPU here: full sizes need one (use --smoke on a CPU)")
    rows: list[dict] = []
    what = args.what.split(",")
    unknown = set(what) - {"sd35m", "wan", "flux", "audio", "ltx2", "methods", "attention"}
    if unknown:
        p.error(
            f"--what: unknown stage {sorted(unknown)[0]!r}; choose from sd35m, wan, flux, audio, ltx2, methods, "
            "attention"
        )
    if "sd35m" in what:
        precision = args.precision if args.precision != "auto" else ("fp16" if device.type == "cuda" else "fp32")
        rows += bench_sd35m(scale, device, args.iterations, clock, precision, args.overhead_repeats)
    if "methods" in what:
        precision = args.precision if args.precision != "auto" else ("fp16" if device.type == "cuda" else "fp32")
        rows += bench_methods(scale, device, clock, precision)
    if "attention" in what:
        precision = args.precision if args.precision != "auto" else ("fp16" if device.type == "cuda" else "fp32")
        backends = args.attention_backends.split(",") if args.attention_backends else None
        rows += bench_attention(scale, device, clock, precision, backends, smoke=args.smoke)
    family_precision = args.precision if args.precision != "auto" else ("bf16" if device.type == "cuda" else "fp32")
    if "wan" in what:
        rows += bench_wan(scale, device, args.repeats, clock, family_precision)
        rows += bench_family("wan", scale, device, args.iterations, clock, family_precision)
    if "flux" in what:
        rows += bench_family("flux", scale, device, args.iterations, clock, family_precision)
    if "audio" in what:
        rows += bench_family("stable_audio", scale, device, args.iterations, clock, family_precision)
    if "ltx2" in what:
        rows += bench_family("ltx2", scale, device, args.iterations, clock, family_precision)
    print("\n" + markdown(rows) + "\n", flush=True)
    clock.say("done")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
