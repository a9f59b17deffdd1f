"""Qwen-Image's latent layout: the 16-channel VAE latent ``(16, H/8, W/8)`` packed into 2x2 patches, i.e.
``((H/16)(W/16), 64)`` tokens (as FLUX packs them), with the resolution-dependent shift ``mu`` of its schedule
(exponential time shift, ``max_image_seq_len`` 8192, terminal sigma stretched to 0.02). Pure functions of the
resolution (and the model's factors), read by the adapter, the tiny builder and the estimate."""

from __future__ import annotations

from flowrl.pipelines.kit.layout import Layout

# Qwen/Qwen-Image: vae/config.json (z_dim 16, 3 down-samplings) and scheduler/scheduler_config.json
QWEN_LATENT_CHANNELS = 16
QWEN_VAE_SCALE_FACTOR = 8
QWEN_SCHEDULER_CONFIG = {
    "num_train_timesteps": 1000,
    "shift": 1.0,
    "use_dynamic_shifting": True,
    "base_shift": 0.5,
    "max_shift": 0.9,
    "base_image_seq_len": 256,
    "max_image_seq_len": 8192,
    "shift_terminal": 0.02,
    "time_shift_type": "exponential",
}


def image_seq_len(height: int, width: int, vae_scale_factor: int = QWEN_VAE_SCALE_FACTOR) -> int:
    """Packed latent tokens: one per 2x2 patch of the (H/8, W/8) latent."""
    return (height // (vae_scale_factor * 2)) * (width // (vae_scale_factor * 2))


def img_shape(height: int, width: int, vae_scale_factor: int = QWEN_VAE_SCALE_FACTOR) -> tuple[int, int, int]:
    """One image's (frames, rows, columns) of packed tokens: the transformer's ``img_shapes`` entry (its RoPE)."""
    return (1, height // vae_scale_factor // 2, width // vae_scale_factor // 2)


def latent_shape(
    height: int, width: int, *, vae_scale_factor: int = QWEN_VAE_SCALE_FACTOR, channels: int = QWEN_LATENT_CHANNELS
) -> tuple[int, int]:
    """One sample's packed latent ``(tokens, 4 x latent channels)``."""
    return (image_seq_len(height, width, vae_scale_factor), channels * 4)


def layout(
    height: int, width: int, *, vae_scale_factor: int = QWEN_VAE_SCALE_FACTOR, channels: int = QWEN_LATENT_CHANNELS
) -> Layout:
    """The packed latent; its tokens are the transformer's image tokens."""
    shape = latent_shape(height, width, vae_scale_factor=vae_scale_factor, channels=channels)
    return Layout(shape, shape[0])


def mu_of(seq_len: int, scheduler_config=None) -> float:
    """The shift ``mu`` for ``seq_len`` packed tokens, as ``QwenImagePipeline.__call__`` computes it
    (``calculate_shift`` over the scheduler config's bounds; default: Qwen-Image's)."""
    from diffusers.pipelines.qwenimage.pipeline_qwenimage import calculate_shift

    cfg = QWEN_SCHEDULER_CONFIG if scheduler_config is None else scheduler_config
    return calculate_shift(
        seq_len,
        cfg.get("base_image_seq_len", 256),
        cfg.get("max_image_seq_len", 4096),
        cfg.get("base_shift", 0.5),
        cfg.get("max_shift", 1.15),
    )


def for_model(model_cfg) -> Layout:
    """The layout of a ``ModelConfig`` (the tiny Qwen-Image keeps the real VAE factor and channels)."""
    height, width = model_cfg.size
    return layout(height, width)
