"""What the GPU stages share: the sizes (``FULL``, ``SMOKE``), the time budget, device peaks and syncs, dtype
helpers, and the loop that times a Trainer's iterations."""

from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import dataclass

import torch

GIB = 2**30


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


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_gib(device: torch.device) -> float:
    return torch.cuda.max_memory_allocated(device) / GIB if device.type == "cuda" else float("nan")


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        gc.collect()  # what a finished stage left in reference cycles
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def token_ids() -> dict:
    """The special token ids of ``make_word_tokenizer``."""
    return {"pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3}  # make_word_tokenizer's


def fp32_kept(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """As ``from_pretrained(torch_dtype=...)``: the model in ``dtype`` but its ``_keep_in_fp32_modules`` in fp32."""
    keep = getattr(model, "_keep_in_fp32_modules", None) or []
    for name, p in model.named_parameters():
        p.data = p.data.float() if any(k in name.split(".") for k in keep) else p.data.to(dtype)
    for name, b in model.named_buffers():
        if b.is_floating_point() and not any(k in name.split(".") for k in keep):
            b.data = b.data.to(dtype)
    return model


def timed(fn, device: torch.device, repeats: int) -> float:
    """The median seconds of ``repeats`` calls of ``fn`` after one warm-up."""
    fn()  # warm-up
    sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def iterate(
    trainer,
    iterations: int,
    clock: Clock,
    device: torch.device,
    prefix: str = "",
    unit: str = "images/s",
    digits: int = 2,
) -> tuple[dict, float]:
    """``iterations`` Trainer steps within the time budget, each said as it ends: (the last step's metrics, the
    first update's on-policy log-prob gap)."""
    metrics = None
    for i in range(iterations):
        if i and clock.left() < 1.5 * metrics["timing_s/iteration"]:
            clock.say("skipping further iterations: time budget")
            break
        reset_peak(device)
        metrics = trainer.step(i)
        if i == 0:
            first_gap = metrics.get("policy/onpolicy_logp_diff", float("nan"))
        clock.say(
            f"{prefix}iteration {i}: {metrics['timing_s/iteration']:.2f} s, "
            f"{metrics['throughput/images_per_s']:.{digits}f} {unit}, peak {metrics['memory/peak_gib']:.2f} GiB, "
            + ", ".join(f"{k.split('/')[1]} {v:.2f}" for k, v in metrics.items() if k.startswith("timing_s/"))
        )
    return metrics, first_gap


def target_modules(names: list[str]) -> str:
    """The ``train.lora.target_modules`` override naming ``names`` (a family's LoRA targets and what a run adds)."""
    return f"train.lora.target_modules=[{','.join(names)}]"
