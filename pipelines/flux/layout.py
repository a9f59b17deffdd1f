"""FLUX.1's latent layout: the 16-channel VAE latent ``(16, H/8, W/8)`` packed into 2x2 patches, i.e.
``((H/16)(W/16), 64)`` tokens, with the resolution-dependent shift ``mu`` of its schedule. Pure functions of the
resolution (and the model's factors), read by the adapter, the tiny builder and the estimate."""

from __future__ import annotations

from flowrl.pipelines.kit.layout import Layout

# black-forest-labs/FLUX.1-dev: vae/config.json and scheduler/scheduler_config.json
FLUX_LATENT_CHANNELS = 16
FLUX_VAE_SCALE_FACTOR = 8


FLUX_SCHEDULER_CONFIG = {
    "num_train_timesteps": 1000,
    "shift": 3.0,
    "use_dynamic_shifting": True,
    "base_shift": 0.5,
    "max_shift": 1.15,
    "base_image_seq_len": 256,
    "max_image_seq_len": 4096,
}


def flux_image_seq_len(height: int, width: int, vae_scale_factor: int = 8) -> int:
    """Number of packed FLUX latent tokens: one per 2x2 patch of the (H/8, W/8) latent."""
    return (height // (vae_scale_factor * 2)) * (width // (vae_scale_factor * 2))


def latent_shape(
    height: int, width: int, *, vae_scale_factor: int = FLUX_VAE_SCALE_FACTOR, channels: int = FLUX_LATENT_CHANNELS
) -> tuple[int, int]:
    """One sample's packed latent ``(tokens, 4 x latent channels)``."""
    return (flux_image_seq_len(height, width, vae_scale_factor), channels * 4)


def layout(
    height: int, width: int, *, vae_scale_factor: int = FLUX_VAE_SCALE_FACTOR, channels: int = FLUX_LATENT_CHANNELS
) -> Layout:
    """The packed latent; its tokens are the transformer's image tokens (patch 1 on the packed layout)."""
    shape = latent_shape(height, width, vae_scale_factor=vae_scale_factor, channels=channels)
    return Layout(shape, shape[0])


def mu_of(image_seq_len: int, scheduler_config=None) -> float:
    """FLUX's shift ``mu`` for ``image_seq_len`` packed tokens, as ``FluxPipeline.__call__`` computes it
    (``calculate_shift`` over the scheduler config's bounds; default: FLUX.1-dev's)."""
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift

    cfg = FLUX_SCHEDULER_CONFIG if scheduler_config is None else scheduler_config
    return calculate_shift(
        image_seq_len,
        cfg.get("base_image_seq_len", 256),
        cfg.get("max_image_seq_len", 4096),
        cfg.get("base_shift", 0.5),
        cfg.get("max_shift", 1.15),
    )


def flux_mu(height: int, width: int, scheduler_config=None) -> float:
    """FLUX's resolution-dependent shift ``mu``, as ``FluxPipeline.__call__`` computes it."""
    return mu_of(flux_image_seq_len(height, width), scheduler_config)


def for_model(model_cfg) -> Layout:
    """The layout of a ``ModelConfig`` (the tiny FLUX.1-dev keeps the real VAE factor and channels)."""
    height, width = model_cfg.size
    return layout(height, width)
