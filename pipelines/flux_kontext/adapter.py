"""FLUX.1-Kontext adapter (image editing), built from ``FluxKontextPipeline``'s public pieces.

Kontext is FLUX.1's transformer (``FluxTransformer2DModel``) with one more input: the source image's VAE latents,
packed like the latents and appended after them in the token sequence, with ids whose first coordinate is 1. So
the FLUX.1 mechanics are the kit's (``flowrl.pipelines.kit.flux1.Flux1Adapter``: packed tokens, the shifted
schedule computed on the output's tokens, embedded guidance, no negative branch), and this family adds:

* **Source images**: one per row (``source_images = (1, 1)``). Each is resized to the output size
  (``kit.images.fit``: antialiased bicubic, none when it already has it) so that a batch's rows stack; the
  pipeline's own ``_auto_resize`` to Kontext's preferred resolutions is left to the data (``generate`` calls the
  pipeline with ``_auto_resize=False`` on the same resized pixels, so both see the same image).
* **Conditioning rows**: ``image_latents`` (B, N, 64), ``(mode of the VAE posterior - shift) * scaling``, packed:
  what ``FluxKontextPipeline.prepare_latents`` makes (``_encode_vae_image`` with ``sample_mode="argmax"``, which
  draws nothing). They are cached with the prompt's embeddings, keyed by the image's content hash.
* **Velocity**: ``transformer([x, image_latents], ids [latent ids, source ids])[:, :N]``, as the pipeline's loop.

Kontext's true CFG (``true_cfg_scale`` with a negative prompt) is not used: FLUX.1-Kontext-dev is guidance-distilled
and its pipeline defaults to the embedded guidance alone (2.5).
"""

from __future__ import annotations

import torch

from flowrl.pipelines.base import Conditioning
from flowrl.pipelines.kit.adapter import Draw
from flowrl.pipelines.kit.flux1 import FLUX_LORA_TARGETS, Flux1Adapter, check_flux_path
from flowrl.pipelines.kit.images import check_count, fit

__all__ = ["FLUX_LORA_TARGETS", "FluxKontextAdapter", "check_model_path"]


def check_model_path(model_cfg) -> None:
    """Refuse a ``model.path`` that cannot load as a FLUX.1-Kontext pipeline before any model is built."""
    check_flux_path(model_cfg, "flux_kontext", "FLUX.1-Kontext")


class FluxKontextAdapter(Flux1Adapter):
    """FLUX.1-Kontext (image editing, embedded guidance) for RL. ``pipe`` is a ``FluxKontextPipeline``."""

    check_model_path = staticmethod(check_model_path)
    tiny_recipe = "tiny-edit"
    pipeline_class = "FluxKontextPipeline"
    family = "flux_kontext"
    source_images = (1, 1)  # one source image per row

    def __init__(self, pipe, *args, **kwargs):
        super().__init__(pipe, *args, **kwargs)
        h, w = (2 * (value // (pipe.vae_scale_factor * 2)) for value in (self.height, self.width))
        ids = pipe._prepare_latent_image_ids(1, h // 2, w // 2, self.device, self.compute_dtype)
        ids[..., 0] = 1  # the pipeline's source ids: the latent ids with the first coordinate 1
        self._source_ids = ids

    @classmethod
    def build_tiny(cls, seed: int):
        """The offline tiny FLUX.1-Kontext-dev (``build_tiny_flux_kontext``)."""
        from flowrl.pipelines.flux_kontext.tiny import build_tiny_flux_kontext

        return build_tiny_flux_kontext(seed=seed)

    # ------------------------------------------------------------------ conditioning
    def source_pixels(self, images: list[list[torch.Tensor]]) -> torch.Tensor:
        """Each row's source image at the output size: (B, 3, H, W) in [0, 1], CPU."""
        return torch.stack([fit(row[0], self.height, self.width) for row in images])

    @torch.no_grad()
    def encode_sources(self, images: list[list[torch.Tensor]]) -> torch.Tensor:
        """Packed source latents (B, N, 64): the VAE posterior's mode, shifted and scaled, as the pipeline's
        ``_encode_vae_image`` (``sample_mode="argmax"``) and ``_pack_latents``."""
        vae = self.pipe.vae
        pixels = self.source_pixels(images).to(self.device, vae.dtype) * 2 - 1  # (B, 3, H, W) in [-1, 1]
        z = vae.encode(pixels).latent_dist.mode()  # (B, 16, H/8, W/8)
        z = (z - vae.config.shift_factor) * vae.config.scaling_factor
        return self.pipe._pack_latents(z, z.shape[0], z.shape[1], z.shape[2], z.shape[3]).float()

    @torch.no_grad()
    def _encode(self, prompts: list[str], images: list | None = None) -> Conditioning:
        if images is None:  # the cache encodes text-only rows this way; this family always has images
            raise ValueError("flux_kontext needs 1 source image per prompt; none were given")
        return {**super()._encode(prompts), "image_latents": self.encode_sources(images)}

    def encode_prompts(
        self, prompts: list[str], negative_prompts: list[str] | None = None, images: list | None = None
    ) -> Conditioning:
        """T5 and CLIP embeddings of ``prompts`` and the packed latents of each row's source image (``images``:
        one list of one (3, H, W) [0, 1] tensor per prompt), cached per (prompt, image)."""
        check_count(images, prompts, self.family, self.source_images)
        return super().encode_prompts(prompts, negative_prompts, images)

    def model_inputs(self, cond: Conditioning, guidance_scale: float) -> Conditioning:
        """The conditioning cast to the model dtype, the source latents with it; no CFG rows."""
        return {
            **super().model_inputs(cond, guidance_scale),
            "image_latents": cond["image_latents"].to(self.compute_dtype),
        }

    def extra_tokens(self, inputs: Conditioning) -> tuple[torch.Tensor, torch.Tensor]:
        """The source latents and their ids, appended after the image tokens."""
        return inputs["image_latents"], self._source_ids

    def initial_noise(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Packed Gaussian latents at sigma = 1 through Kontext's ``prepare_latents`` (no image; fp32): (n, N, 64)."""
        latents, *_ = self.pipe.prepare_latents(
            None, n, self.latent_channels, self.height, self.width, torch.float32, self.device, generator
        )
        return latents

    # ------------------------------------------------------------------ the pipeline's call
    def draw(self, request: Draw) -> torch.Tensor:
        """Edited images (B, 3, H, W) in [0, 1] from ``FluxKontextPipeline``'s own call (``flowrl sample``): each
        prompt's source image at the output size, the guidance scale the embedded guidance as in training; the
        negative prompts are not used (no true CFG here)."""
        check_count(request.images, request.prompts, self.family, self.source_images)
        return self.pipe(
            image=self.source_pixels(request.images).to(self.device),
            prompt=list(request.prompts),
            guidance_scale=request.guidance_scale,
            generator=request.generator,
            **self.call_options(request),
            max_area=self.height * self.width,  # the output size as asked (the default area is 1024^2)
            _auto_resize=False,
        ).images
