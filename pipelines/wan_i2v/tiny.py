"""The offline tiny Wan image-to-video models: the real ``WanImageToVideoPipeline`` classes at toy sizes, built in
code from the Wan family's tiny pieces (``flowrl.pipelines.wan.tiny``)."""

from __future__ import annotations

from contextlib import contextmanager

import torch

from flowrl.pipelines.kit.tiny import seeded
from flowrl.pipelines.wan.layout import WAN22_LATENT_CHANNELS, WAN_LATENT_CHANNELS
from flowrl.pipelines.wan.tiny import (
    WAN22_TI2V_FLOW_SHIFT,
    tiny_wan_text,
    tiny_wan_transformer,
    tiny_wan_vae,
    wan_scheduler,
)

WAN22_I2V_BOUNDARY_RATIO = 0.9  # Wan2.2-I2V-A14B: high-noise expert for t >= 900
MASK_CHANNELS = 4  # the first-frame mask, one channel per frame of a latent frame (4x temporal)
TINY_CLIP_WIDTH = 8
IMAGE_ENCODER_SEED = 9  # past the kit's SEED_OFFSETS: its own stream


@contextmanager
def _seeded_image_encoder(seed: int):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed * 1000 + IMAGE_ENCODER_SEED)
        yield


def tiny_clip(seed: int, image_size: int = 32):
    """A tiny ``CLIPVisionModel`` (width 8, 2 layers, 8x8 patches) and its ``CLIPImageProcessor`` at
    ``image_size``: Wan 2.1 I2V's image encoder (the pipeline takes the penultimate hidden states)."""
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    config = CLIPVisionConfig(
        hidden_size=TINY_CLIP_WIDTH,
        intermediate_size=16,
        projection_dim=TINY_CLIP_WIDTH,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=image_size,
        patch_size=8,
    )
    with _seeded_image_encoder(seed):
        encoder = CLIPVisionModel(config).eval()
    processor = CLIPImageProcessor(
        size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
    )
    return encoder, processor


def build_tiny_wan_i2v(seed: int = 0, two_experts: bool = False, ti2v: bool = False):
    """A tiny ``diffusers.WanImageToVideoPipeline``:

    * default: Wan 2.1 I2V (480P / 720P): a transformer of 16 + 4 + 16 = 36 channels in (the noisy latent, the
      first-frame mask, the VAE latent of the source image followed by zeros) and 16 out, with the image
      cross-attention of the tiny CLIP's penultimate states (``image_dim=8``), ``image_encoder`` and
      ``image_processor`` (``tiny_clip``), flow shift 3.0;
    * ``two_experts``: Wan 2.2 I2V-A14B: two such transformers without an image encoder, ``boundary_ratio=0.9``;
    * ``ti2v``: Wan 2.2 TI2V-5B in image mode (``expand_timesteps=True``): the 48-channel Wan 2.2 VAE, a
      transformer of 48 in and out; the source image's latent replaces the first latent frame, whose tokens
      get timestep 0; flow shift 5.0.

    The text encoder, tokenizer and VAE are the tiny Wan T2V's (``flowrl.pipelines.wan.tiny``)."""
    from diffusers import WanImageToVideoPipeline

    image_encoder = image_processor = None
    if ti2v:
        channels_in, channels_out, extra = WAN22_LATENT_CHANNELS, WAN22_LATENT_CHANNELS, {}
    else:
        channels_in, channels_out = 2 * WAN_LATENT_CHANNELS + MASK_CHANNELS, WAN_LATENT_CHANNELS
        extra = {} if two_experts else {"image_dim": TINY_CLIP_WIDTH, "added_kv_proj_dim": 24}
        if not two_experts:
            image_encoder, image_processor = tiny_clip(seed)
    with seeded(seed, "transformer"):
        transformer = tiny_wan_transformer(channels_in, channels_out, **extra)
    transformer_2 = None
    if two_experts:
        with seeded(seed, "transformer_2"):
            transformer_2 = tiny_wan_transformer(channels_in, channels_out, **extra)
    tokenizer, text_encoder = tiny_wan_text(seed)
    with seeded(seed, "vae"):
        vae = tiny_wan_vae(wan22=ti2v)
    pipe = WanImageToVideoPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        scheduler=wan_scheduler(WAN22_TI2V_FLOW_SHIFT if ti2v else None),
        image_processor=image_processor,
        image_encoder=image_encoder,
        transformer=transformer,
        transformer_2=transformer_2,
        boundary_ratio=WAN22_I2V_BOUNDARY_RATIO if two_experts else None,
        expand_timesteps=ti2v,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe
