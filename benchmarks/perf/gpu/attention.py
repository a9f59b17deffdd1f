"""Attention backends and torch.compile on an SD3.5-M-size iteration: seconds and the on-policy gap."""

from __future__ import annotations

import contextlib
import functools
import json
import tempfile
from pathlib import Path
from unittest import mock

import torch

from flowrl.benchmarks.perf.gpu.common import Clock, Scale, reset_peak
from flowrl.benchmarks.perf.gpu.sd35m import build_sd35m, save_configs, sd35m_config, trainer_with

# attention backends with a backward pass, about fastest first on a Hopper GPU: FlashAttention-3 and -2 (their
# packages), cuDNN's and PyTorch's own fused kernels, and the dispatcher's plain SDPA (SageAttention has no
# backward pass: it cannot train)
ATTENTION_BACKENDS = ("_flash_3", "flash", "_native_cudnn", "_native_flash", "_native_efficient", "native")


def reset_transformer(transformer, processors: dict) -> None:
    """The shared transformer as built, for the next variant: its own attention processors, its class's forward
    (no compiled or autocast forward left by an earlier Trainer), no forward hooks (NFE counts) and no LoRA."""
    transformer.set_attn_processor(dict(processors))
    for attr in ("forward", "_original_forward"):
        transformer.__dict__.pop(attr, None)
    transformer._forward_pre_hooks.clear()
    transformer._forward_pre_hooks_with_kwargs.clear()
    if "default" in (getattr(transformer, "peft_config", None) or {}):
        transformer.delete_adapters("default")


def runnable_backends(transformer, names, device: torch.device, dtype: torch.dtype, clock: Clock) -> list[str]:
    """The backends among ``names`` that run (and backpropagate) here, each said as it is checked."""
    from flowrl.pipelines.sd3.attention import set_attention_backend

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
    from flowrl.config import config_from_dict
    from flowrl.pipelines.kit.loading import DTYPES
    from flowrl.resolve import merge_overrides, resolve

    clock.say(f"attention: building SD3.5-Medium ({scale.encoders} text encoders, {precision}) on {device}")
    pipe = build_sd35m(scale, device, DTYPES[precision])
    transformer = pipe.transformer
    processors = dict(transformer.attn_processors)
    runnable = runnable_backends(transformer, backends or ATTENTION_BACKENDS, device, DTYPES[precision], clock)
    clock.say(f"attention backends that run here: {', '.join(runnable) or 'none'}")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        save_configs(pipe, folder)
        base = sd35m_config(scale, folder, 2, precision).to_dict()

        def run(label: str, backend: str | None, compiled: bool) -> None:
            # two iterations; a compiled variant's first one also builds its kernels (minutes at full size)
            need = (4 if compiled else 2.5) * rows[0]["seconds"] + (150 if compiled and not smoke else 0) if rows else 0
            if clock.left() < need:
                clock.say(f"skipping {label}: time budget")
                return
            overrides = [f"output_dir={folder / label.replace(' ', '_')}", f"train.compile={str(compiled).lower()}"]
            if backend is not None:
                overrides.append(f"model.attention_backend={backend}")
            cfg = resolve(config_from_dict(merge_overrides(json.loads(json.dumps(base)), overrides)))
            reset_transformer(transformer, processors)
            torch._dynamo.reset()
            # --smoke checks the code path: graph capture without inductor's kernel builds (minutes on a CPU)
            capture_only = mock.patch.object(torch, "compile", functools.partial(torch.compile, backend="eager"))
            with capture_only if compiled and smoke else contextlib.nullcontext():
                trainer = trainer_with(cfg, pipe, device)
            reset_peak(device)
            first = trainer.step(0)  # warm-up (and compilation)
            reset_peak(device)
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
            reset_transformer(transformer, processors)
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
    reset_peak(device)
    return rows
