"""The Wan2.1-T2V-1.3B transformer alone: a no-grad forward and LoRA forward+backward at a full video latent."""

from __future__ import annotations

import torch

from flowrl.benchmarks.perf.gpu.common import Clock, Scale, default_dtype, peak_gib, reset_peak, timed

# WAN21_1_3B: diffusers config.json of Wan-AI/Wan2.1-T2V-1.3B-Diffusers, transformer/ (flowrl.estimate's table)
from flowrl.estimate import WAN21_1_3B

WAN_LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]
WAN_VAE_STRIDE = (4, 8, 8)  # frames (after the first), height, width


def wan_latent(video: tuple[int, int, int]) -> tuple[int, int, int]:
    """(F', H/8, W/8) of a video of (frames, height, width) pixels."""
    frames, height, width = video
    return (frames - 1) // WAN_VAE_STRIDE[0] + 1, height // WAN_VAE_STRIDE[1], width // WAN_VAE_STRIDE[2]


def bench_wan(scale: Scale, device: torch.device, repeats: int, clock: Clock, precision: str) -> list[dict]:
    """``precision``: the weights' dtype and, unless fp32, the autocast dtype (Wan runs in bf16)."""
    from diffusers import WanTransformer3DModel
    from peft import LoraConfig

    from flowrl.pipelines.kit.loading import DTYPES

    gpu = device.type == "cuda"
    dtype = DTYPES[precision]
    clock.say(f"Wan2.1-1.3B: building ({precision}) on {device}")
    torch.manual_seed(0)
    with torch.device(device), default_dtype(dtype):
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
    f, h, w = wan_latent(scale.wan_video)
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
        reset_peak(device)
        try:
            seconds = timed(fn, device, repeats)
            peak = peak_gib(device)
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
    reset_peak(device)
    return rows
