"""The offline tiny FLUX.1-Kontext-dev: the real ``FluxKontextPipeline`` classes at toy sizes, built in code."""

from __future__ import annotations

from flowrl.pipelines.kit.flux1 import tiny_flux_components


def build_tiny_flux_kontext(seed: int = 0):
    """A tiny FLUX.1-Kontext-dev-like ``diffusers.FluxKontextPipeline``, built offline.

    FLUX.1-Kontext-dev is FLUX.1-dev's architecture (``FluxTransformer2DModel`` with a guidance embedding, CLIP and
    T5 encoders, the same VAE and scheduler) trained to take a source image's latents as extra tokens; so the
    components are the tiny FLUX.1-dev's (``flowrl.pipelines.kit.flux1.tiny_flux_components``: one double and one
    single block, 32 wide, a four-level 16-channel VAE), with no IP-adapter image encoder. The source image is
    VAE-encoded (the latent distribution's mode, shifted and scaled) and packed like the latents; its ids are the
    latent ids with the first coordinate 1.
    """
    from diffusers import FluxKontextPipeline

    pipe = FluxKontextPipeline(**tiny_flux_components(seed), image_encoder=None, feature_extractor=None)
    pipe.set_progress_bar_config(disable=True)
    return pipe
