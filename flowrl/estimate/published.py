"""Published architectures: the configs of the checkpoints the estimate knows offline (its fallback when a
``model.path``'s configs cannot be read) and the sizes ``benchmarks/perf`` builds with random weights."""

from flowrl.pipelines.wan.layout import WAN22_VAE_LAYOUT

# ----------------------------------------------------------------------------------------------------
# SD3 / SD3.5 (diffusers config.json values of the published checkpoints)

_SD35_MEDIUM = {
    "sample_size": 128,
    "patch_size": 2,
    "in_channels": 16,
    "out_channels": 16,
    "num_layers": 24,
    "attention_head_dim": 64,
    "num_attention_heads": 24,
    "joint_attention_dim": 4096,
    "caption_projection_dim": 1536,
    "pooled_projection_dim": 2048,
    "pos_embed_max_size": 384,
    "qk_norm": "rms_norm",
    "dual_attention_layers": list(range(13)),
}
_SD35_LARGE = dict(
    _SD35_MEDIUM,
    num_layers=38,
    num_attention_heads=38,
    caption_projection_dim=2432,
    pos_embed_max_size=192,
    dual_attention_layers=[],
)
_SD3_MEDIUM = dict(_SD35_MEDIUM, pos_embed_max_size=192, qk_norm=None, dual_attention_layers=[])
SD3_TRANSFORMERS = {
    "stabilityai/stable-diffusion-3.5-medium": _SD35_MEDIUM,
    "stabilityai/stable-diffusion-3.5-large": _SD35_LARGE,
    "stabilityai/stable-diffusion-3.5-large-turbo": _SD35_LARGE,
    "stabilityai/stable-diffusion-3-medium-diffusers": _SD3_MEDIUM,
}
SD3_VAE = {
    "in_channels": 3,
    "out_channels": 3,
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
    "block_out_channels": [128, 256, 512, 512],
    "layers_per_block": 2,
    "latent_channels": 16,
    "norm_num_groups": 32,
    "sample_size": 1024,
    "scaling_factor": 1.5305,
    "shift_factor": 0.0609,
    "use_quant_conv": False,
    "use_post_quant_conv": False,
}
CLIP_L = {
    "vocab_size": 49408,
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "projection_dim": 768,
    "max_position_embeddings": 77,
    "hidden_act": "quick_gelu",
}
CLIP_G = {
    "vocab_size": 49408,
    "hidden_size": 1280,
    "intermediate_size": 5120,
    "num_hidden_layers": 32,
    "num_attention_heads": 20,
    "projection_dim": 1280,
    "max_position_embeddings": 77,
    "hidden_act": "gelu",
}
T5_XXL = {
    "vocab_size": 32128,
    "d_model": 4096,
    "d_kv": 64,
    "d_ff": 10240,
    "num_layers": 24,
    "num_heads": 64,
    "feed_forward_proj": "gated-gelu",
    "relative_attention_num_buckets": 32,
}

# ----------------------------------------------------------------------------------------------------
# FLUX.1, Wan 2.1 / 2.2, Stable Audio 3: the offline table
#
# Where each number comes from (no hub access here):
# * FLUX.1-dev: FluxTransformer2DModel's defaults, which are FLUX.1-dev's transformer/config.json except
#   guidance_embeds (true in FLUX.1-dev: its guidance embedding); 11.90B. The VAE is SD3's architecture with
#   FLUX's scaling 0.3611 / shift 0.1159 (vae/config.json, as pipelines/flux/tiny.py records them);
#   text encoders CLIP-L (CLIPTextModel, no projection) and the T5-XXL encoder, as SD3's table.
# * Wan2.1-T2V-1.3B: transformer/config.json of Wan-AI/Wan2.1-T2V-1.3B-Diffusers (1.42B; the table the GPU
#   benchmark already used). Wan2.1-T2V-14B: WanTransformer3DModel's defaults (40 heads of 128 = 5120 wide,
#   FFN 13824, 40 layers), which are the 14B model's published dimensions; Wan2.2-T2V-A14B: two experts of
#   that size, boundary_ratio 0.875 (model_index.json, as pipelines/wan/tiny.py records it). VAE:
#   AutoencoderKLWan's defaults (the Wan2.1 VAE, 127M, which A14B reuses). Text encoder: the UMT5-XXL
#   encoder (google/umt5-xxl: d_model 4096, 24 layers, 64 heads, d_ff 10240, vocabulary 256,384).
# * Wan2.2-TI2V-5B: transformer/config.json of Wan-AI/Wan2.2-TI2V-5B-Diffusers (24 heads of 128 = 3072 wide, FFN
#   14336, 30 layers, 48 channels in and out); its Wan 2.2 VAE is vae/config.json (base width 160, decoder 256,
#   48 channels at 16x: WAN22_VAE_CONFIG in pipelines/wan/tiny.py). Wan2.1-I2V-14B-480P / -720P: the 14B with
#   36 channels in (state, first-frame mask, image latent), image_dim 1280 and added_kv_proj_dim 5120, and the
#   CLIP ViT-H/14 vision tower of laion/CLIP-ViT-H-14-laion2B-s32B-b79K (1280 wide, 32 layers, 16 heads, MLP
#   5120, 224 px, patch 14). Wan2.2-I2V-A14B: two such 14B experts without the image cross-attention,
#   boundary_ratio 0.9 (the Diffusers conversion script's value).
# * Stable Audio 3 medium: StableAudio3DiTModel's, AutoencoderSAME's and StableAudio3DurationEmbedder's
#   class defaults (diffusers 0.42; the DiT's 1.45B matches the 1.4B Stability publishes for "medium", and
#   SAME's defaults are SAME-L: patch 256 x stride 16 at 44.1 kHz); not read from the checkpoint's own
#   config.json, which is not available offline. Text encoder: the encoder of google/t5gemma-b-b-ul2
#   (hidden 768, 12 layers, 12 heads of 64, no GQA, FFN 2048, vocabulary 256,000: 0.28B), the values a
#   public port of SA3 reads from that checkpoint; T5GemmaModuleConfig's own defaults are Gemma-2-2B's.

FLUX_DEV_TRANSFORMER = {
    "patch_size": 1,
    "in_channels": 64,
    "num_layers": 19,
    "num_single_layers": 38,
    "attention_head_dim": 128,
    "num_attention_heads": 24,
    "joint_attention_dim": 4096,
    "pooled_projection_dim": 768,
    "guidance_embeds": True,
    "axes_dims_rope": (16, 56, 56),
}
FLUX_VAE = dict(SD3_VAE, scaling_factor=0.3611, shift_factor=0.1159)
WAN21_1_3B = {
    "patch_size": (1, 2, 2),
    "num_attention_heads": 12,
    "attention_head_dim": 128,
    "in_channels": 16,
    "out_channels": 16,
    "text_dim": 4096,
    "freq_dim": 256,
    "ffn_dim": 8960,
    "num_layers": 30,
    "cross_attn_norm": True,
    "qk_norm": "rms_norm_across_heads",
    "eps": 1e-6,
    "rope_max_seq_len": 1024,
}
WAN_14B = dict(WAN21_1_3B, num_attention_heads=40, ffn_dim=13824, num_layers=40)
WAN22_5B = dict(WAN21_1_3B, num_attention_heads=24, ffn_dim=14336, in_channels=48, out_channels=48)
WAN21_I2V_14B = dict(WAN_14B, in_channels=36, image_dim=1280, added_kv_proj_dim=5120)
WAN22_I2V_14B = dict(WAN_14B, in_channels=36)
CLIP_H_VISION = {
    "hidden_size": 1280,
    "intermediate_size": 5120,
    "num_hidden_layers": 32,
    "num_attention_heads": 16,
    "image_size": 224,
    "patch_size": 14,
    "projection_dim": 1024,
}
UMT5_XXL = {
    "vocab_size": 256384,
    "d_model": 4096,
    "d_kv": 64,
    "d_ff": 10240,
    "num_layers": 24,
    "num_heads": 64,
    "feed_forward_proj": "gated-gelu",
    "relative_attention_num_buckets": 32,
}
T5GEMMA_B_ENCODER = {
    "vocab_size": 256000,
    "hidden_size": 768,
    "intermediate_size": 2048,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "num_key_value_heads": 12,
    "head_dim": 64,
    "query_pre_attn_scalar": 64,
}
WAN22_BOUNDARY_RATIO = 0.875
WAN22_I2V_BOUNDARY_RATIO = 0.9

_SA3 = {
    "transformer": ("StableAudio3DiTModel", {}),
    "vae": ("AutoencoderSAME", {}),
    "text_encoder": ("T5GemmaEncoderModel", T5GEMMA_B_ENCODER),
    "duration_embedder": ("StableAudio3DurationEmbedder", {}),
}
# the Wan 2.2 VAE's architecture (its 48 per-channel statistics change no size or FLOP: left at the class's)
WAN22_VAE = {"base_dim": 160, "decoder_base_dim": 256, **WAN22_VAE_LAYOUT}
_WAN_14B_PARTS = {
    "transformer": ("WanTransformer3DModel", WAN_14B),
    "vae": ("AutoencoderKLWan", {}),
    "text_encoder": ("UMT5EncoderModel", UMT5_XXL),
}

# ----------------------------------------------------------------------------------------------------
# LTX-2 (joint audio + video): the offline table
#
# Where the numbers come from (no hub access here): the transformer is LTX2VideoTransformer3DModel's class
# defaults (diffusers 0.42: 48 blocks, video 32 heads x 128 = 4096 wide, audio 32 x 64 = 2048, caption 3840;
# 18.88B), taken as LTX-2's published size (the checkpoint's own config.json is not available offline); the
# text connectors LTX2TextConnectors' defaults (caption 3840, 49 = 48 + 1 stacked Gemma layers), the audio VAE
# and the vocoder their class defaults; the video VAE AutoencoderKLLTX2Video's defaults with the compression
# LTX-2 publishes (32x spatial, 8x temporal: what the adapter and the pipeline assume). The text encoder is
# Gemma-3-12B at its published dimensions (hidden 3840, 48 layers, 16 heads with 8 KV heads of 256, MLP
# 15360, vocabulary 262,208) with its SigLIP-So400m vision tower (1152 wide, 27 layers, MLP 4304, 896 px,
# patch 14), which text-to-video never calls but which is resident.
GEMMA3_12B = {
    "text_config": {
        "vocab_size": 262208,
        "hidden_size": 3840,
        "intermediate_size": 15360,
        "num_hidden_layers": 48,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 256,
        "query_pre_attn_scalar": 256,
        "sliding_window": 1024,
    },
    "vision_config": {
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "image_size": 896,
        "patch_size": 14,
    },
    "mm_tokens_per_image": 256,
}
LTX2_VAE = {"spatial_compression_ratio": 32, "temporal_compression_ratio": 8}

# ----------------------------------------------------------------------------------------------------
# Z-Image and FLUX.2-klein: the offline table
#
# Where the numbers come from (no hub access here): Z-Image's transformer is ZImageTransformer2DModel's class
# defaults (diffusers 0.42: 3840 wide, 30 layers, 30 heads, 2 refiner layers, caption 2560; 6.15B), which are
# Tongyi-MAI/Z-Image(-Turbo)'s published dimensions; its VAE is FLUX.1's; its text encoder Qwen3-4B (Qwen3Model:
# hidden 2560, 36 layers, 32 heads with 8 KV heads of 128, MLP 9728, vocabulary 151,936). FLUX.2-klein-4B:
# 5 double and 20 single blocks of 24 heads x 128 (3072 wide), joint_attention_dim 7680 = 3 x Qwen3-4B's 2560
# (3.88B); klein-9B: 8 double and 24 single blocks of 32 x 128, joint_attention_dim 12288 = 3 x Qwen3-8B's 4096
# (9.08B), as public ports record BFL's Klein4B/9B params; the base and the step-distilled checkpoints share the
# architecture. Text encoders Qwen3ForCausalLM 4B / 8B (Qwen3-8B: hidden 4096, 36 layers, 32 heads with 8 KV
# heads, MLP 12288, untied head); VAE: AutoencoderKLFlux2's defaults (32 latent channels).
QWEN3_4B = {
    "vocab_size": 151936,
    "hidden_size": 2560,
    "intermediate_size": 9728,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "tie_word_embeddings": True,
}
QWEN3_8B = dict(QWEN3_4B, hidden_size=4096, intermediate_size=12288, tie_word_embeddings=False)
FLUX2_KLEIN_4B = {
    "in_channels": 128,
    "num_layers": 5,
    "num_single_layers": 20,
    "attention_head_dim": 128,
    "num_attention_heads": 24,
    "joint_attention_dim": 7680,
    "guidance_embeds": False,
}
FLUX2_KLEIN_9B = dict(
    FLUX2_KLEIN_4B, num_layers=8, num_single_layers=24, num_attention_heads=32, joint_attention_dim=12288
)
_Z_IMAGE = {
    "transformer": ("ZImageTransformer2DModel", {}),
    "vae": ("AutoencoderKL", FLUX_VAE),
    "text_encoder": ("Qwen3Model", QWEN3_4B),
}
_KLEIN_4B = {
    "transformer": ("Flux2Transformer2DModel", FLUX2_KLEIN_4B),
    "vae": ("AutoencoderKLFlux2", {}),
    "text_encoder": ("Qwen3ForCausalLM", QWEN3_4B),
}
_KLEIN_9B = {
    **_KLEIN_4B,
    "transformer": ("Flux2Transformer2DModel", FLUX2_KLEIN_9B),
    "text_encoder": ("Qwen3ForCausalLM", QWEN3_8B),
}

PUBLISHED: dict[str, dict] = {
    "black-forest-labs/FLUX.1-dev": {
        "pipeline": "flux",
        "components": {
            "transformer": ("FluxTransformer2DModel", FLUX_DEV_TRANSFORMER),
            "vae": ("AutoencoderKL", FLUX_VAE),
            "text_encoder": ("CLIPTextModel", CLIP_L),
            "text_encoder_2": ("T5EncoderModel", T5_XXL),
        },
    },
    # FLUX.1-Kontext-dev is FLUX.1-dev's architecture (its transformer, VAE and encoder configs are FLUX.1-dev's)
    "black-forest-labs/FLUX.1-Kontext-dev": {
        "pipeline": "flux_kontext",
        "components": {
            "transformer": ("FluxTransformer2DModel", FLUX_DEV_TRANSFORMER),
            "vae": ("AutoencoderKL", FLUX_VAE),
            "text_encoder": ("CLIPTextModel", CLIP_L),
            "text_encoder_2": ("T5EncoderModel", T5_XXL),
        },
    },
    "Wan-AI/Wan2.1-T2V-1.3B-Diffusers": {
        "pipeline": "wan",
        "components": {**_WAN_14B_PARTS, "transformer": ("WanTransformer3DModel", WAN21_1_3B)},
    },
    "Wan-AI/Wan2.1-T2V-14B-Diffusers": {"pipeline": "wan", "components": dict(_WAN_14B_PARTS)},
    "Wan-AI/Wan2.2-T2V-A14B-Diffusers": {
        "pipeline": "wan",
        "components": {**_WAN_14B_PARTS, "transformer_2": ("WanTransformer3DModel", WAN_14B)},
        "boundary_ratio": WAN22_BOUNDARY_RATIO,
    },
    "Wan-AI/Wan2.2-TI2V-5B-Diffusers": {
        "pipeline": "wan",
        "components": {
            **_WAN_14B_PARTS,
            "transformer": ("WanTransformer3DModel", WAN22_5B),
            "vae": ("AutoencoderKLWan", WAN22_VAE),
        },
    },
    **{
        f"Wan-AI/Wan2.1-I2V-14B-{size}-Diffusers": {
            "pipeline": "wan_i2v",
            "components": {
                **_WAN_14B_PARTS,
                "transformer": ("WanTransformer3DModel", WAN21_I2V_14B),
                "image_encoder": ("CLIPVisionModel", CLIP_H_VISION),
            },
        }
        for size in ("480P", "720P")
    },
    "Wan-AI/Wan2.2-I2V-A14B-Diffusers": {
        "pipeline": "wan_i2v",
        "components": {
            **_WAN_14B_PARTS,
            "transformer": ("WanTransformer3DModel", WAN22_I2V_14B),
            "transformer_2": ("WanTransformer3DModel", WAN22_I2V_14B),
        },
        "boundary_ratio": WAN22_I2V_BOUNDARY_RATIO,
    },
    "stabilityai/stable-audio-3-medium": {"pipeline": "stable_audio", "components": dict(_SA3)},
    "stabilityai/stable-audio-3-medium-base": {"pipeline": "stable_audio", "components": dict(_SA3)},
    "Lightricks/LTX-2": {
        "pipeline": "ltx2",
        "components": {
            "transformer": ("LTX2VideoTransformer3DModel", {}),
            "vae": ("AutoencoderKLLTX2Video", LTX2_VAE),
            "audio_vae": ("AutoencoderKLLTX2Audio", {}),
            "vocoder": ("LTX2Vocoder", {}),
            "text_encoder": ("Gemma3ForConditionalGeneration", GEMMA3_12B),
            "connectors": ("LTX2TextConnectors", {}),
        },
    },
    "Tongyi-MAI/Z-Image": {"pipeline": "z_image", "components": dict(_Z_IMAGE)},
    "Tongyi-MAI/Z-Image-Turbo": {"pipeline": "z_image", "components": dict(_Z_IMAGE)},
    "black-forest-labs/FLUX.2-klein-4B": {"pipeline": "flux2", "components": dict(_KLEIN_4B)},
    "black-forest-labs/FLUX.2-klein-base-4B": {"pipeline": "flux2", "components": dict(_KLEIN_4B)},
    "black-forest-labs/FLUX.2-klein-9B": {"pipeline": "flux2", "components": dict(_KLEIN_9B)},
    "black-forest-labs/FLUX.2-klein-base-9B": {"pipeline": "flux2", "components": dict(_KLEIN_9B)},
}

# the Qwen-Image family's table lives with its profile
from flowrl.estimate.qwen_image import PUBLISHED as _QWEN_IMAGE  # noqa: E402
from flowrl.estimate.qwen_image_edit import PUBLISHED as _QWEN_IMAGE_EDIT  # noqa: E402

PUBLISHED.update(_QWEN_IMAGE)
PUBLISHED.update(_QWEN_IMAGE_EDIT)
