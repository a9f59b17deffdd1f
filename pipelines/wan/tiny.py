"""The offline tiny Wan 2.1 T2V / Wan 2.2 T2V-A14B / Wan 2.2 TI2V-5B: the real ``WanPipeline`` classes at toy sizes,
built in code; the pieces (transformer, VAE, text encoder, scheduler) are shared with the image-to-video builders."""

from __future__ import annotations

from flowrl.pipelines.kit.tiny import make_word_tokenizer, seeded, t5_encoder
from flowrl.pipelines.wan.layout import WAN22_LATENT_CHANNELS, WAN22_VAE_LAYOUT, WAN_LATENT_CHANNELS

# Wan-AI/Wan2.1-T2V-*-Diffusers: scheduler/scheduler_config.json (UniPC with flow sigmas)
WAN_SCHEDULER_CONFIG = {
    "num_train_timesteps": 1000,
    "prediction_type": "flow_prediction",
    "use_flow_sigmas": True,
    "flow_shift": 3.0,
    "solver_order": 2,
    "solver_type": "bh2",
    "predict_x0": True,
    "lower_order_final": True,
    "final_sigmas_type": "zero",
    "timestep_spacing": "linspace",
}


TINY_TEXT_DIM = 32
WAN22_T2V_BOUNDARY_RATIO = 0.875  # Wan2.2-T2V-A14B: high-noise expert for t >= 875
WAN22_TI2V_FLOW_SHIFT = 5.0  # Wan-AI/Wan2.2-TI2V-5B-Diffusers: scheduler/scheduler_config.json

# the tiny Wan 2.2 VAE: the real one's compression (layout.WAN22_VAE_LAYOUT) and per-channel statistics
WAN22_VAE_CONFIG = {
    **WAN22_VAE_LAYOUT,
    "latents_mean": [
        -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557, -0.1382, 0.0542, 0.2813, 0.0891,
        0.1570, -0.0098, 0.0375, -0.1825, -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
        -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230, -0.0313, -0.1649, 0.0117, 0.0723,
        -0.2839, -0.2083, -0.0520, 0.3748, 0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667,
    ],
    "latents_std": [
        0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013, 0.8158, 1.0344, 0.5894, 1.0901,
        0.6885, 0.6165, 0.8454, 0.4978, 0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
        0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093, 0.5709, 0.6065, 0.6415, 0.4944,
        0.5726, 1.2042, 0.5458, 1.6887, 0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
    ],
}  # fmt: skip


def tiny_wan_transformer(in_channels: int = WAN_LATENT_CHANNELS, out_channels: int = WAN_LATENT_CHANNELS, **extra):
    """The tiny ``WanTransformer3DModel``: 2 blocks, 2 heads of 12, text width 32 (``extra``: the image
    cross-attention of Wan 2.1 I2V, ``image_dim`` / ``added_kv_proj_dim``)."""
    from diffusers import WanTransformer3DModel

    return WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=12,
        in_channels=in_channels,
        out_channels=out_channels,
        text_dim=TINY_TEXT_DIM,
        freq_dim=256,
        ffn_dim=32,
        num_layers=2,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        rope_max_seq_len=32,
        **extra,
    )


def tiny_wan_vae(wan22: bool = False):
    """The tiny ``AutoencoderKLWan`` (base width 3, one res block a stage): Wan 2.1's 16 channels at 8x, or
    (``wan22``) the Wan 2.2 VAE's 48 channels at 16x (``WAN22_VAE_CONFIG``)."""
    from diffusers import AutoencoderKLWan

    extra = WAN22_VAE_CONFIG if wan22 else {"z_dim": WAN_LATENT_CHANNELS}
    return AutoencoderKLWan(
        base_dim=3, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True], **extra
    )


def tiny_wan_text(seed: int):
    """The word tokenizer (512 tokens, Wan's ``max_sequence_length``) and a 1-layer UMT5 of width 32."""
    tokenizer = make_word_tokenizer(512)
    with seeded(seed, "text_encoder"):
        text_encoder = t5_encoder(len(tokenizer), TINY_TEXT_DIM, umt5=True)
    return tokenizer, text_encoder


def wan_scheduler(flow_shift: float | None = None):
    """``UniPCMultistepScheduler(**WAN_SCHEDULER_CONFIG)``, ``flow_shift`` replacing the shift where given."""
    from diffusers import UniPCMultistepScheduler

    config = dict(WAN_SCHEDULER_CONFIG)
    if flow_shift is not None:
        config["flow_shift"] = float(flow_shift)
    return UniPCMultistepScheduler(**config)


def build_tiny_wan(seed: int = 0, two_experts: bool = False, flow_shift: float | None = None, ti2v: bool = False):
    """A tiny Wan 2.1 T2V ``diffusers.WanPipeline`` (or, with ``two_experts``, a Wan 2.2 T2V-A14B-like one).

    Components:

    * ``transformer``: ``WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2,
      attention_head_dim=12, in_channels=16, out_channels=16, text_dim=32, freq_dim=256, ffn_dim=32,
      num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads", rope_max_seq_len=32)``.
    * ``text_encoder``: ``UMT5EncoderModel`` (d_model 32, 1 layer); ``tokenizer``: word-level, 512 tokens
      (Wan's ``max_sequence_length``).
    * ``vae``: ``AutoencoderKLWan(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
      temperal_downsample=[False, True, True])``: 8x spatial, 4x temporal (causal first frame), with the
      real ``latents_mean`` / ``latents_std`` defaults (16 channels).
    * ``scheduler``: ``UniPCMultistepScheduler(**WAN_SCHEDULER_CONFIG)`` (flow_prediction, use_flow_sigmas,
      flow_shift 3.0: the Wan 2.1 Diffusers config). ``flow_shift`` overrides the shift (the original Wan 2.2
      T2V-A14B code samples with shift 12.0; diffusers' own Wan 2.2 test keeps 3.0).
    * ``two_experts=True``: a second, independently initialised ``transformer_2`` and
      ``boundary_ratio=0.875`` (Wan2.2-T2V-A14B): ``transformer`` (high noise) runs for t >= 875,
      ``transformer_2`` (low noise) for t < 875; ``guidance_scale_2`` sets the low-noise CFG.
    * ``ti2v=True``: Wan 2.2 TI2V-5B's text-to-video: ``WanPipeline(expand_timesteps=True)`` (a timestep per
      video token), the Wan 2.2 VAE (``WAN22_VAE_CONFIG``: 48 channels, 16x spatial) and a transformer of 48
      channels in and out, flow shift 5.0.

    Latent layout: ``(B, 16, 1 + (F-1)/4, H/8, W/8)`` (``output_type="latent"``), see ``wan_latent_shape``;
    no packing (the transformer patchifies 1x2x2 inside). ``output_type="pt"`` gives video
    ``(B, F, 3, H, W)`` in [0, 1]. F must be 4k + 1 and H, W multiples of 16 (the pipeline rounds otherwise).

    Sigmas: UniPC flow sigmas start at 0.99999899 (timestep 999), *not* 1.0, and end with a 0.
    """
    from diffusers import WanPipeline

    channels = WAN22_LATENT_CHANNELS if ti2v else WAN_LATENT_CHANNELS
    with seeded(seed, "transformer"):
        transformer = tiny_wan_transformer(channels, channels)
    transformer_2 = None
    if two_experts:
        with seeded(seed, "transformer_2"):
            transformer_2 = tiny_wan_transformer(channels, channels)
    tokenizer, text_encoder = tiny_wan_text(seed)
    with seeded(seed, "vae"):
        vae = tiny_wan_vae(wan22=ti2v)
    if ti2v and flow_shift is None:
        flow_shift = WAN22_TI2V_FLOW_SHIFT
    pipe = WanPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        scheduler=wan_scheduler(flow_shift),
        transformer=transformer,
        transformer_2=transformer_2,
        boundary_ratio=WAN22_T2V_BOUNDARY_RATIO if two_experts else None,
        expand_timesteps=ti2v,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe
