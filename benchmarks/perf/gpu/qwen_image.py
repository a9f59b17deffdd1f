"""Qwen-Image and Qwen-Image-Edit-Plus at their published size with random weights for the family stages
(``--what qwen_image``, ``--what qwen_image_edit``): the 20B ``QwenImageTransformer2DModel`` (its class defaults),
the Qwen2.5-VL-7B text encoder (``flowrl.estimate``'s table; ``shallow``: 2 text layers and 1 vision block),
``AutoencoderKLQwenImage``'s defaults, the tokenizer made in code (``kit.qwen_vl``; for the edit pipeline a
``Qwen2VLProcessor`` on it with Qwen2.5-VL's 14-pixel patches merged 2 x 2), and the run's settings."""

from __future__ import annotations

import torch

from flowrl.benchmarks.perf.gpu.common import default_dtype, fp32_kept, target_modules
from flowrl.pipelines.kit.qwen_image import QWEN_IMAGE_LORA_TARGETS

# flow_grpo's pickscore_qwenimage / verl-omni's Qwen-Image OCR settings (512 px, 10 steps with an SDE window of 2
# in the first half, noise 1.2, true CFG 4, LoRA 64/128 on the attention and both streams' MLPs, beta 0, bf16,
# gradient checkpointing), on 8 samples in batches of 4
QWEN_IMAGE_OVERRIDES = [
    "model.resolution=512",
    "model.max_sequence_length=256",
    "train.gradient_checkpointing=true",
    "sample.num_steps=10",
    "method.options.window_size=2",
    "method.options.window_range=[0,5]",
    "sample.guidance_scale=4.0",
    "method.options.noise_level=1.2",
    "sample.group_size=8",
    "sample.prompts_per_iteration=1",
    "sample.batch_size=4",
    "method.options.beta=0.0",
    "method.options.clip_range=1.0e-4",
    "train.lora.rank=64",
    "train.lora.alpha=128",
    target_modules(
        [*QWEN_IMAGE_LORA_TARGETS, "img_mlp.net.0.proj", "img_mlp.net.2", "txt_mlp.net.0.proj", "txt_mlp.net.2"]
    ),
    'reward={"jpeg_compressibility": 1.0}',
]
QWEN_IMAGE_LABEL = (
    "512px (1,024 tokens), 8 samples, batch 4, 10 steps, window 2, true CFG 4, LoRA 64 (+MLP), checkpointing"
)


# the edit stage: the same settings editing the shipped rows (builtin:tiny_edit), each source VAE-encoded at the
# pipelines' 1024 x 1024 area (4,096 packed tokens after the 1,024 generated ones) and seen by the VL encoder at
# Edit-Plus's 384 x 384; the recipe's reward (SSIM of each edit to its source)
QWEN_IMAGE_EDIT_OVERRIDES = [
    *(o for o in QWEN_IMAGE_OVERRIDES if not o.startswith("reward=")),
    "model.source_area=null",
    "log.eval_every=0",
]
QWEN_IMAGE_EDIT_LABEL = (
    "512px edit (1,024 + 4,096 source tokens), 8 samples, batch 4, 10 steps, window 2, true CFG 4, LoRA 64 (+MLP), "
    "checkpointing"
)


def build_qwen_image(shallow: bool, device: torch.device, dtype: torch.dtype, edit: bool = False):
    """``QwenImagePipeline`` (``edit``: ``QwenImageEditPlusPipeline``) at the published architecture, initialised
    on ``device`` in ``dtype`` (VAE fp32)."""
    import copy

    import diffusers

    from flowrl.estimate import component
    from flowrl.estimate.qwen_image import QWEN25_VL_7B
    from flowrl.pipelines.kit.qwen_vl import make_qwen_tokenizer
    from flowrl.pipelines.qwen_image.layout import QWEN_SCHEDULER_CONFIG

    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(**QWEN_SCHEDULER_CONFIG)
    encoder = copy.deepcopy(QWEN25_VL_7B)
    if shallow:
        encoder["text_config"]["num_hidden_layers"] = 2
        encoder["vision_config"].update(depth=1, fullatt_block_indexes=[0])
    encoder_dtype = torch.bfloat16 if dtype == torch.float16 else dtype
    torch.manual_seed(0)
    with torch.device(device):
        with default_dtype(dtype):
            transformer = diffusers.QwenImageTransformer2DModel()  # Qwen-Image's 20B: the class defaults
        with default_dtype(encoder_dtype):
            text_encoder = component("Qwen2_5_VLForConditionalGeneration", encoder)
        vae = diffusers.AutoencoderKLQwenImage()
    parts = {
        "scheduler": scheduler,
        "vae": vae,
        "text_encoder": fp32_kept(text_encoder, encoder_dtype),
        "tokenizer": make_qwen_tokenizer(),
        "transformer": fp32_kept(transformer, dtype),
    }
    if edit:
        from transformers import Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor

        vision = encoder["vision_config"]
        patch, merge = vision["patch_size"], vision["spatial_merge_size"]
        images = Qwen2VLImageProcessor(patch_size=patch, merge_size=merge, temporal_patch_size=2)
        videos = Qwen2VLVideoProcessor(patch_size=patch, merge_size=merge, temporal_patch_size=2)
        processor = Qwen2VLProcessor(image_processor=images, tokenizer=parts["tokenizer"], video_processor=videos)
        pipe = diffusers.QwenImageEditPlusPipeline(**parts, processor=processor)
    else:
        pipe = diffusers.QwenImagePipeline(**parts)
    pipe.set_progress_bar_config(disable=True)
    return pipe
