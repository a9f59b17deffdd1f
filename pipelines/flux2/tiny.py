"""The offline tiny FLUX.2-klein: the real ``Flux2KleinPipeline`` classes at toy sizes, built in code."""

from __future__ import annotations

import torch

from flowrl.pipelines.flux2.layout import FLUX2_LATENT_CHANNELS, FLUX2_SCHEDULER_CONFIG, FLUX2_TEXT_LAYERS
from flowrl.pipelines.kit.qwen3 import qwen3_encoder, qwen3_tokenizer
from flowrl.pipelines.kit.tiny import seeded

TINY_TEXT_WIDTH = 16
TINY_PATHS = {"tiny": {"distilled": False}, "tiny-distilled": {"distilled": True}}


def build_tiny_flux2(seed: int = 0, distilled: bool = False):
    """A tiny FLUX.2-klein-like ``diffusers.Flux2KleinPipeline``, built offline (``distilled``: the step-distilled
    checkpoint's ``is_distilled=True``, which runs without CFG; else the base model's two-branch CFG).

    Components:

    * ``transformer``: ``Flux2Transformer2DModel(in_channels=128, num_layers=1, num_single_layers=1,
      attention_head_dim=16, num_attention_heads=2, joint_attention_dim=48, axes_dims_rope=(4, 4, 4, 4),
      guidance_embeds=False)``: klein has no guidance embedding.
    * ``text_encoder``: ``Qwen3ForCausalLM`` (hidden 16, 28 layers, so that the pipeline's hidden states 9, 18
      and 27 exist; stacked they are 48 wide). ``tokenizer``: word-level with Qwen's chat tokens and template.
    * ``vae``: ``AutoencoderKLFlux2`` with four levels (down-sampling 8), ``latent_channels=32``, its batch-norm
      statistics over the 128 patchified channels set from the seed (the pipeline de-normalises with them).
    * ``scheduler``: ``FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True)``; the pipeline
      sets the shift ``mu`` with ``compute_empirical_mu``.

    Latents are packed ``(B, (H/16)(W/16), 128)``; H and W must be multiples of 16.
    """
    from diffusers import (
        AutoencoderKLFlux2,
        FlowMatchEulerDiscreteScheduler,
        Flux2KleinPipeline,
        Flux2Transformer2DModel,
    )

    tokenizer = qwen3_tokenizer(512)
    text_encoder = qwen3_encoder(tokenizer, TINY_TEXT_WIDTH, max(FLUX2_TEXT_LAYERS) + 1, causal_lm=True, seed=seed)
    with seeded(seed, "transformer"):
        transformer = Flux2Transformer2DModel(
            patch_size=1,
            in_channels=FLUX2_LATENT_CHANNELS * 4,
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=TINY_TEXT_WIDTH * len(FLUX2_TEXT_LAYERS),
            axes_dims_rope=(4, 4, 4, 4),
            guidance_embeds=False,
        )
    with seeded(seed, "vae"):
        vae = AutoencoderKLFlux2(
            block_out_channels=(8, 8, 8, 8),
            layers_per_block=1,
            latent_channels=FLUX2_LATENT_CHANNELS,
            norm_num_groups=4,
            sample_size=32,
        )
        vae.bn.running_mean.copy_(0.1 * torch.randn(vae.bn.running_mean.shape))
        vae.bn.running_var.copy_(0.5 + torch.rand(vae.bn.running_var.shape))
    pipe = Flux2KleinPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**FLUX2_SCHEDULER_CONFIG),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
        is_distilled=distilled,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe
