"""The offline tiny Qwen-Image: the real ``QwenImagePipeline`` classes at toy sizes, built in code."""

from __future__ import annotations

from flowrl.pipelines.kit.qwen_vl import make_qwen_tokenizer, tiny_qwen_vl
from flowrl.pipelines.kit.tiny import seeded
from flowrl.pipelines.qwen_image.layout import QWEN_LATENT_CHANNELS, QWEN_SCHEDULER_CONFIG

TINY_TEXT_WIDTH = 32  # the tiny Qwen2.5-VL's hidden size: the transformer's joint_attention_dim


def tiny_components(seed: int = 0) -> dict:
    """The components every tiny Qwen-Image pipeline shares (text-to-image and edit):

    * ``transformer``: ``QwenImageTransformer2DModel(patch_size=2, in_channels=64, out_channels=16, num_layers=1,
      attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32, axes_dims_rope=(4, 6, 6))``: the
      real model's channels (16 latent channels packed 2x2), one block 32 wide.
    * ``text_encoder``: ``Qwen2_5_VLForConditionalGeneration`` (``kit.qwen_vl.tiny_qwen_vl``: 2 layers, 32 wide,
      a 1-block vision tower); ``tokenizer``: word-level with Qwen's special tokens, so the templates drop the
      same prefix as Qwen's BPE (34 tokens; 64 for the edit template).
    * ``vae``: ``AutoencoderKLQwenImage(base_dim=8, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=1)`` with
      the real 3 down-samplings (8x) and Qwen-Image's published ``latents_mean`` / ``latents_std`` (the class
      defaults).
    * ``scheduler``: ``FlowMatchEulerDiscreteScheduler(**QWEN_SCHEDULER_CONFIG)`` (dynamic exponential shift,
      base/max shift 0.5/0.9 over 256..8192 tokens, terminal sigma 0.02).
    """
    from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImageTransformer2DModel

    tokenizer = make_qwen_tokenizer()
    with seeded(seed, "transformer"):
        transformer = QwenImageTransformer2DModel(
            patch_size=2,
            in_channels=QWEN_LATENT_CHANNELS * 4,
            out_channels=QWEN_LATENT_CHANNELS,
            num_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=TINY_TEXT_WIDTH,
            guidance_embeds=False,
            axes_dims_rope=(4, 6, 6),
        )
    text_encoder = tiny_qwen_vl(tokenizer, hidden=TINY_TEXT_WIDTH, seed=seed)
    with seeded(seed, "vae"):
        vae = AutoencoderKLQwenImage(base_dim=8, z_dim=QWEN_LATENT_CHANNELS, dim_mult=[1, 2, 4, 4], num_res_blocks=1)
    scheduler = FlowMatchEulerDiscreteScheduler(**QWEN_SCHEDULER_CONFIG)
    return {
        "transformer": transformer,
        "text_encoder": text_encoder,
        "tokenizer": tokenizer,
        "vae": vae,
        "scheduler": scheduler,
    }


def build_tiny_qwen_image(seed: int = 0):
    """A tiny ``diffusers.QwenImagePipeline`` (``tiny_components``), built offline.

    Latent layout: the VAE latent ``(B, 16, 1, H/8, W/8)`` is packed into 2x2 patches: ``latents`` is
    ``(B, (H/16)(W/16), 64)``, the transformer's ``img_shapes`` ``[(1, H/16, W/16)]``; H and W multiples of 16.
    Images (``output_type="pt"``) are ``(B, 3, H, W)`` in [0, 1]. True CFG (``true_cfg_scale`` with a negative
    prompt) rescales the guided velocity to the conditional one's norm per token."""
    from diffusers import QwenImagePipeline

    pipe = QwenImagePipeline(**tiny_components(seed))
    pipe.set_progress_bar_config(disable=True)
    return pipe
