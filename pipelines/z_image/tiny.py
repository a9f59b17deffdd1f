"""The offline tiny Z-Image: the real ``ZImagePipeline`` classes at toy sizes, built in code."""

from __future__ import annotations

from flowrl.pipelines.kit.qwen3 import qwen3_encoder, qwen3_tokenizer
from flowrl.pipelines.kit.tiny import image_vae, seeded
from flowrl.pipelines.z_image.layout import Z_IMAGE_LATENT_CHANNELS, Z_IMAGE_TURBO_SCHEDULER_CONFIG

# Tongyi-MAI/Z-Image-Turbo: vae/config.json (FLUX.1's VAE)
Z_IMAGE_VAE_SCALING_FACTOR = 0.3611
Z_IMAGE_VAE_SHIFT_FACTOR = 0.1159
TINY_TEXT_WIDTH = 16


def build_tiny_z_image(seed: int = 0):
    """A tiny Z-Image(-Turbo)-like ``diffusers.ZImagePipeline``, built offline.

    Components:

    * ``transformer``: ``ZImageTransformer2DModel(all_patch_size=(2,), in_channels=16, dim=32, n_layers=2,
      n_refiner_layers=1, n_heads=2, n_kv_heads=2, cap_feat_dim=16, axes_dims=(8, 4, 4),
      axes_lens=(256, 32, 32))``: Z-Image's single-stream DiT with its noise and caption refiners.
    * ``text_encoder``: ``Qwen3Model`` (hidden 16, 3 layers; ``kit.qwen3``); the pipeline takes its
      second-to-last hidden state of the prompt's tokens (padding dropped). ``tokenizer``: word-level with
      Qwen's chat tokens and template (``kit.qwen3.qwen3_tokenizer``).
    * ``vae``: ``AutoencoderKL`` with four levels (down-sampling 8), ``latent_channels=16``, FLUX.1's scaling
      0.3611 and shift 0.1159, no quant convs (Z-Image uses FLUX.1's VAE).
    * ``scheduler``: ``FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=False)``, Z-Image-Turbo's.

    Latents are ``(B, 16, H/8, W/8)``; H and W must be multiples of 16.
    """
    from diffusers import FlowMatchEulerDiscreteScheduler, ZImagePipeline, ZImageTransformer2DModel

    tokenizer = qwen3_tokenizer(512)
    text_encoder = qwen3_encoder(tokenizer, TINY_TEXT_WIDTH, 3, seed=seed)
    with seeded(seed, "transformer"):
        transformer = ZImageTransformer2DModel(
            all_patch_size=(2,),
            all_f_patch_size=(1,),
            in_channels=Z_IMAGE_LATENT_CHANNELS,
            dim=32,
            n_layers=2,
            n_refiner_layers=1,
            n_heads=2,
            n_kv_heads=2,
            cap_feat_dim=TINY_TEXT_WIDTH,
            axes_dims=[8, 4, 4],
            axes_lens=[256, 32, 32],
        )
    with seeded(seed, "vae"):
        vae = image_vae(Z_IMAGE_LATENT_CHANNELS, Z_IMAGE_VAE_SCALING_FACTOR, Z_IMAGE_VAE_SHIFT_FACTOR)
    scheduler = FlowMatchEulerDiscreteScheduler(**Z_IMAGE_TURBO_SCHEDULER_CONFIG)
    pipe = ZImagePipeline(
        scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, transformer=transformer
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe
