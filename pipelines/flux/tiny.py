"""The offline tiny FLUX.1-dev: the real ``FluxPipeline`` classes at toy sizes, built in code."""

from __future__ import annotations

from flowrl.pipelines.kit.flux1 import FLUX_VAE_SCALING_FACTOR, FLUX_VAE_SHIFT_FACTOR, tiny_flux_components

__all__ = ["FLUX_VAE_SCALING_FACTOR", "FLUX_VAE_SHIFT_FACTOR", "build_tiny_flux"]


def build_tiny_flux(seed: int = 0):
    """A tiny FLUX.1-dev-like ``diffusers.FluxPipeline``, built offline.

    Components:

    * ``transformer``: ``FluxTransformer2DModel(in_channels=64, num_layers=1, num_single_layers=1,
      attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32,
      axes_dims_rope=(4, 6, 6), guidance_embeds=True)``. guidance_embeds=True as in FLUX.1-dev: the pipeline
      feeds ``guidance=guidance_scale`` (default 3.5) to the embedding, no two-branch CFG.
    * ``text_encoder``: ``CLIPTextModel`` (hidden 32, 2 layers, 77 positions); its ``pooler_output`` is the
      pooled projection. ``tokenizer``: word-level, model_max_length 77.
    * ``text_encoder_2``: ``T5EncoderModel`` (d_model 32, 1 layer). ``tokenizer_2``: word-level, 512.
    * ``vae``: ``AutoencoderKL`` with four levels (down-sampling 8, as FLUX's), ``latent_channels=16``,
      ``scaling_factor=0.3611``, ``shift_factor=0.1159``, no quant convs (FLUX's VAE config).
    * ``scheduler``: ``FlowMatchEulerDiscreteScheduler(**FLUX_SCHEDULER_CONFIG)`` (use_dynamic_shifting=True,
      base/max shift 0.5/1.15 over 256..4096 tokens).

    Latent layout: the VAE latent ``(B, 16, H/8, W/8)`` is packed into 2x2 patches:
    ``latents`` is ``(B, (H/16)(W/16), 64)`` (``output_type="latent"`` returns this), with image ids
    ``((H/16)(W/16), 3)`` = (0, row, col) and text ids ``(T, 3)`` of zeros. H and W must be multiples of 16.
    Images (``output_type="pt"``) are ``(B, 3, H, W)`` in [0, 1].

    Sigmas: ``linspace(1, 1/N, N)`` time-shifted with ``mu = flux_mu(H, W)``; sigma_0 = 1.0 exactly.
    """
    from diffusers import FluxPipeline

    pipe = FluxPipeline(**tiny_flux_components(seed))
    pipe.set_progress_bar_config(disable=True)
    return pipe
