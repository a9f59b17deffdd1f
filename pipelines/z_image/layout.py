"""Z-Image's latent layout: the 16-channel FLUX VAE latent ``(16, H/8, W/8)``, unpacked (the transformer
patchifies 2x2 itself), so ``(H/16)(W/16)`` image tokens. Pure functions of the resolution, read by the adapter,
the tiny builder and the estimate."""

from __future__ import annotations

from flowrl.pipelines.kit.layout import Layout

# Tongyi-MAI/Z-Image-Turbo: vae/config.json (FLUX.1's VAE) and scheduler/scheduler_config.json
Z_IMAGE_LATENT_CHANNELS = 16
Z_IMAGE_VAE_SCALE_FACTOR = 8
Z_IMAGE_PATCH = 2  # the transformer's all_patch_size
Z_IMAGE_TURBO_SCHEDULER_CONFIG = {"num_train_timesteps": 1000, "shift": 3.0, "use_dynamic_shifting": False}


def latent_shape(
    height: int,
    width: int,
    *,
    vae_scale_factor: int = Z_IMAGE_VAE_SCALE_FACTOR,
    channels: int = Z_IMAGE_LATENT_CHANNELS,
) -> tuple[int, int, int]:
    """One sample's latent ``(C, H/8, W/8)``, rounded down to whole 2x2 patches as ``prepare_latents`` does."""
    h, w = (2 * (side // (vae_scale_factor * 2)) for side in (height, width))
    return (channels, h, w)


def image_tokens(height: int, width: int, vae_scale_factor: int = Z_IMAGE_VAE_SCALE_FACTOR) -> int:
    """The transformer's image tokens: one per 2x2 patch of the latent (also the shift's ``image_seq_len``)."""
    return (height // (vae_scale_factor * 2)) * (width // (vae_scale_factor * 2))


def layout(
    height: int,
    width: int,
    *,
    vae_scale_factor: int = Z_IMAGE_VAE_SCALE_FACTOR,
    channels: int = Z_IMAGE_LATENT_CHANNELS,
) -> Layout:
    shape = latent_shape(height, width, vae_scale_factor=vae_scale_factor, channels=channels)
    return Layout(shape, image_tokens(height, width, vae_scale_factor))


def for_model(model_cfg) -> Layout:
    """The layout of a ``ModelConfig`` (the tiny Z-Image keeps the real VAE factor and channels)."""
    height, width = model_cfg.size
    return layout(height, width)
