"""The offline tiny Wan 2.1 T2V / Wan 2.2 T2V-A14B: the real ``WanPipeline`` classes at toy sizes, built in code."""

from __future__ import annotations

from flowrl.pipelines.kit.tiny import make_word_tokenizer, seeded, t5_encoder
from flowrl.pipelines.wan.layout import WAN_LATENT_CHANNELS

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


WAN22_T2V_BOUNDARY_RATIO = 0.875  # Wan2.2-T2V-A14B: high-noise expert for t >= 875


def build_tiny_wan(seed: int = 0, two_experts: bool = False, flow_shift: float | None = None):
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

    Latent layout: ``(B, 16, 1 + (F-1)/4, H/8, W/8)`` (``output_type="latent"``), see ``wan_latent_shape``;
    no packing (the transformer patchifies 1x2x2 inside). ``output_type="pt"`` gives video
    ``(B, F, 3, H, W)`` in [0, 1]. F must be 4k + 1 and H, W multiples of 16 (the pipeline rounds otherwise).

    Sigmas: UniPC flow sigmas start at 0.99999899 (timestep 999), *not* 1.0, and end with a 0.
    """
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel

    text_dim = 32
    tokenizer = make_word_tokenizer(512)
    vocab = len(tokenizer)

    def make_transformer():
        return WanTransformer3DModel(
            patch_size=(1, 2, 2),
            num_attention_heads=2,
            attention_head_dim=12,
            in_channels=WAN_LATENT_CHANNELS,
            out_channels=WAN_LATENT_CHANNELS,
            text_dim=text_dim,
            freq_dim=256,
            ffn_dim=32,
            num_layers=2,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            rope_max_seq_len=32,
        )

    with seeded(seed, "transformer"):
        transformer = make_transformer()
    transformer_2 = None
    if two_experts:
        with seeded(seed, "transformer_2"):
            transformer_2 = make_transformer()
    with seeded(seed, "text_encoder"):
        text_encoder = t5_encoder(vocab, text_dim, umt5=True)
    with seeded(seed, "vae"):
        vae = AutoencoderKLWan(
            base_dim=3,
            z_dim=WAN_LATENT_CHANNELS,
            dim_mult=[1, 1, 1, 1],
            num_res_blocks=1,
            temperal_downsample=[False, True, True],
        )
    sched_cfg = dict(WAN_SCHEDULER_CONFIG)
    if flow_shift is not None:
        sched_cfg["flow_shift"] = float(flow_shift)
    scheduler = UniPCMultistepScheduler(**sched_cfg)
    pipe = WanPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        scheduler=scheduler,
        transformer=transformer,
        transformer_2=transformer_2,
        boundary_ratio=WAN22_T2V_BOUNDARY_RATIO if two_experts else None,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe
