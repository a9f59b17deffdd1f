"""The offline tiny Qwen-Image: the real ``QwenImagePipeline`` classes at toy sizes, built in code (the components
are the Qwen-Image kit's, ``flowrl.pipelines.kit.qwen_image.tiny_qwen_image_components``)."""

from __future__ import annotations

from flowrl.pipelines.kit.qwen_image import tiny_qwen_image_components


def build_tiny_qwen_image(seed: int = 0):
    """A tiny ``diffusers.QwenImagePipeline`` (``tiny_qwen_image_components``), built offline.

    Latent layout: the VAE latent ``(B, 16, 1, H/8, W/8)`` is packed into 2x2 patches: ``latents`` is
    ``(B, (H/16)(W/16), 64)``, the transformer's ``img_shapes`` ``[(1, H/16, W/16)]``; H and W multiples of 16.
    Images (``output_type="pt"``) are ``(B, 3, H, W)`` in [0, 1]. True CFG (``true_cfg_scale`` with a negative
    prompt) rescales the guided velocity to the conditional one's norm per token."""
    from diffusers import QwenImagePipeline

    pipe = QwenImagePipeline(**tiny_qwen_image_components(seed))
    pipe.set_progress_bar_config(disable=True)
    return pipe
