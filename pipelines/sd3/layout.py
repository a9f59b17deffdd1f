"""SD3's latent layout: the VAE latent ``(C, H/f, W/f)`` (f = 8 for SD3/SD3.5, 2 ** (levels - 1) for a tiny VAE),
patchified by the transformer into ``(H/f/p) (W/f/p)`` image tokens (p = 2). Pure functions of the resolution
and the model's factors, read by the adapter, the tiny builder and the estimate."""

from __future__ import annotations

from flowrl.pipelines.kit.layout import Layout

LATENT_CHANNELS = 16  # SD3 / SD3.5's VAE
VAE_SCALE_FACTOR = 8
PATCH_SIZE = 2


def latent_shape(
    height: int, width: int, *, vae_scale_factor: int = VAE_SCALE_FACTOR, channels: int = LATENT_CHANNELS
) -> tuple[int, int, int]:
    """One sample's latent ``(C, H/f, W/f)`` for an image of ``height`` x ``width`` pixels."""
    return (channels, height // vae_scale_factor, width // vae_scale_factor)


def layout(
    height: int,
    width: int,
    *,
    vae_scale_factor: int = VAE_SCALE_FACTOR,
    channels: int = LATENT_CHANNELS,
    patch_size: int = PATCH_SIZE,
) -> Layout:
    """The latent and the transformer's image tokens ``(H/f/p) (W/f/p)``; the latent sides must divide by p."""
    shape = latent_shape(height, width, vae_scale_factor=vae_scale_factor, channels=channels)
    for side in shape[1:]:
        if side % patch_size:
            raise ValueError(
                f"resolution {height}x{width} gives a latent side {side}, not divisible by patch {patch_size}"
            )
    return Layout(shape, (shape[1] // patch_size) * (shape[2] // patch_size))


def for_model(model_cfg) -> Layout:
    """The layout of a ``ModelConfig``: the tiny preset's VAE, channels and patch for ``model.path: tiny``
    (``model.tiny_size``), SD3/SD3.5's otherwise."""
    height, width = model_cfg.size
    if model_cfg.path != "tiny":
        return layout(height, width)
    from flowrl.pipelines.sd3.tiny import SIZES

    s = SIZES[model_cfg.tiny_size]
    factor = 2 ** (len(s.vae_channels) - 1)
    return layout(height, width, vae_scale_factor=factor, channels=s.latent_channels, patch_size=s.patch_size)
