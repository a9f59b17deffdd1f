"""SD3's latent layout: the VAE latent ``(C, H/f, W/f)`` (f = 8 for SD3/SD3.5, 2 ** (levels - 1) for a tiny VAE),
patchified by the transformer into ``(H/f/p) (W/f/p)`` image tokens (p = 2). Pure functions of the resolution
and the model's factors, read by the adapter, the tiny builder and the estimate."""

from __future__ import annotations

from dataclasses import dataclass

from flowrl.pipelines.kit.layout import Layout


# the tiny presets' sizes (``model.path: tiny``, ``model.tiny_size``): the tiny builder reads them, and so does
# the layout of a tiny model
@dataclass(frozen=True)
class TinySize:
    layers: int
    heads: int
    head_dim: int
    clip_dim: int  # hidden size of each of the two CLIP text encoders
    t5_dim: int  # = joint attention dim
    vae_channels: tuple[int, ...]
    latent_channels: int = 4
    patch_size: int = 2
    text_tokens: int = 16  # CLIP tokenizer length (SD3 uses 77)


SIZES = {
    "tiny": TinySize(layers=2, heads=2, head_dim=16, clip_dim=16, t5_dim=32, vae_channels=(8, 16)),
    "small": TinySize(layers=4, heads=4, head_dim=32, clip_dim=32, t5_dim=64, vae_channels=(16, 32)),
    # about 70M transformer parameters, the size the perf benchmark reports
    "70m": TinySize(layers=8, heads=8, head_dim=64, clip_dim=64, t5_dim=128, vae_channels=(32, 64)),
}

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
    s = SIZES[model_cfg.tiny_size]
    factor = 2 ** (len(s.vae_channels) - 1)
    return layout(height, width, vae_scale_factor=factor, channels=s.latent_channels, patch_size=s.patch_size)
