"""The offline tiny FLUX.1-dev: the real ``FluxPipeline`` classes at toy sizes, built in code."""

from __future__ import annotations

from flowrl.pipelines.flux.layout import FLUX_LATENT_CHANNELS, FLUX_SCHEDULER_CONFIG
from flowrl.pipelines.kit.tiny import make_word_tokenizer, seeded, t5_encoder

# black-forest-labs/FLUX.1-dev: vae/config.json
FLUX_VAE_SCALING_FACTOR = 0.3611
FLUX_VAE_SHIFT_FACTOR = 0.1159


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
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel

    clip_dim, t5_dim, clip_tokens = 32, 32, 77
    tokenizer = make_word_tokenizer(clip_tokens)
    tokenizer_2 = make_word_tokenizer(512)
    vocab = len(tokenizer)

    with seeded(seed, "transformer"):
        transformer = FluxTransformer2DModel(
            patch_size=1,
            in_channels=FLUX_LATENT_CHANNELS * 4,
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=t5_dim,
            pooled_projection_dim=clip_dim,
            guidance_embeds=True,
            axes_dims_rope=(4, 6, 6),
        )
    with seeded(seed, "text_encoder"):
        text_encoder = CLIPTextModel(
            CLIPTextConfig(
                vocab_size=vocab,
                hidden_size=clip_dim,
                intermediate_size=clip_dim * 2,
                num_hidden_layers=2,
                num_attention_heads=2,
                max_position_embeddings=clip_tokens,
                projection_dim=clip_dim,
                pad_token_id=0,
                bos_token_id=2,
                eos_token_id=3,
            )
        )
    with seeded(seed, "text_encoder_2"):
        text_encoder_2 = t5_encoder(vocab, t5_dim)
    with seeded(seed, "vae"):
        vae = AutoencoderKL(
            in_channels=3,
            out_channels=3,
            down_block_types=("DownEncoderBlock2D",) * 4,
            up_block_types=("UpDecoderBlock2D",) * 4,
            block_out_channels=(8, 8, 8, 8),
            layers_per_block=1,
            latent_channels=FLUX_LATENT_CHANNELS,
            norm_num_groups=4,
            sample_size=32,
            scaling_factor=FLUX_VAE_SCALING_FACTOR,
            shift_factor=FLUX_VAE_SHIFT_FACTOR,
            use_quant_conv=False,
            use_post_quant_conv=False,
        )
    scheduler = FlowMatchEulerDiscreteScheduler(**FLUX_SCHEDULER_CONFIG)
    pipe = FluxPipeline(
        scheduler=scheduler,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        text_encoder_2=text_encoder_2,
        tokenizer_2=tokenizer_2,
        transformer=transformer,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe
