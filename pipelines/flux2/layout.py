"""FLUX.2's latent layout: the 32-channel VAE latent ``(32, H/8, W/8)`` patchified 2x2 to ``(128, H/16, W/16)``
and packed into ``((H/16)(W/16), 128)`` tokens, with the empirical shift ``mu`` of its schedule. Pure functions
of the resolution (and the model's factors), read by the adapter, the tiny builder and the estimate."""

from __future__ import annotations

from flowrl.pipelines.kit.layout import Layout

# black-forest-labs/FLUX.2-klein-4B: vae/config.json (latent_channels 32, four levels) and its scheduler
FLUX2_LATENT_CHANNELS = 32
FLUX2_VAE_SCALE_FACTOR = 8
FLUX2_SCHEDULER_CONFIG = {"num_train_timesteps": 1000, "shift": 3.0, "use_dynamic_shifting": True}
FLUX2_TEXT_LAYERS = (9, 18, 27)  # the Qwen3 hidden states the pipeline stacks (its text_encoder_out_layers)


def image_seq_len(height: int, width: int, vae_scale_factor: int = FLUX2_VAE_SCALE_FACTOR) -> int:
    """Packed tokens: one per 2x2 patch of the (H/8, W/8) latent."""
    return (height // (vae_scale_factor * 2)) * (width // (vae_scale_factor * 2))


def latent_shape(
    height: int, width: int, *, vae_scale_factor: int = FLUX2_VAE_SCALE_FACTOR, channels: int = FLUX2_LATENT_CHANNELS
) -> tuple[int, int]:
    """One sample's packed latent ``(tokens, 4 x latent channels)``."""
    return (image_seq_len(height, width, vae_scale_factor), channels * 4)


def layout(
    height: int, width: int, *, vae_scale_factor: int = FLUX2_VAE_SCALE_FACTOR, channels: int = FLUX2_LATENT_CHANNELS
) -> Layout:
    shape = latent_shape(height, width, vae_scale_factor=vae_scale_factor, channels=channels)
    return Layout(shape, shape[0])


def mu_of(seq_len: int, num_steps: int) -> float:
    """FLUX.2's shift for ``seq_len`` packed tokens and ``num_steps`` steps, as ``Flux2KleinPipeline`` computes it
    (``compute_empirical_mu``: it depends on the step count too)."""
    from diffusers.pipelines.flux2.pipeline_flux2_klein import compute_empirical_mu

    return compute_empirical_mu(image_seq_len=seq_len, num_steps=num_steps)


def for_model(model_cfg) -> Layout:
    """The layout of a ``ModelConfig`` (the tiny FLUX.2-klein keeps the real VAE factor and channels)."""
    height, width = model_cfg.size
    return layout(height, width)
