"""FLUX.1-dev, Wan2.1-1.3B, Stable Audio 3 medium, LTX-2, Z-Image-Turbo and FLUX.2-klein-base-4B through flowrl's Trainer: each family's pipeline
at its published architecture with random weights (``flowrl.estimate``'s table), through its own adapter, one
iteration next to ``estimate(cfg)``."""

from __future__ import annotations

import importlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import torch

from flowrl.benchmarks.perf.gpu.common import (
    Clock,
    Scale,
    default_dtype,
    fp32_kept,
    iterate,
    reset_peak,
    target_modules,
    token_ids,
)
from flowrl.benchmarks.perf.gpu.qwen_image import (
    QWEN_IMAGE_EDIT_LABEL,
    QWEN_IMAGE_EDIT_OVERRIDES,
    QWEN_IMAGE_LABEL,
    QWEN_IMAGE_OVERRIDES,
    build_qwen_image,
)
from flowrl.pipelines.kit.flux1 import FLUX_LORA_TARGETS


@dataclass
class FamilyRun:
    """One family's iteration: its tiny recipe with these overrides (what ``--smoke`` shrinks too)."""

    recipe: str
    overrides: list[str]
    label: str  # the row's setting, in words
    data: str = "builtin:tiny"  # the prompts (an image-conditioned family's rows name their source images)


# Flow-GRPO's FLUX LoRA targets: the attention projections of both streams and their feed-forward layers
FLUX_FF_LORA_TARGETS = target_modules(
    [*FLUX_LORA_TARGETS, "ff.net.0.proj", "ff.net.2", "ff_context.net.0.proj", "ff_context.net.2"]
)
FAMILY_RUNS = {
    # Flow-GRPO's pickscore_flux settings (512 px, 6 steps with 5 trained, guidance embedding 3.5, noise 0.9,
    # LoRA 64/128 on the attention and feed-forward projections, beta 0, bf16), on 12 samples in batches of 3
    "flux": FamilyRun(
        "tiny-flux",
        [
            "model.resolution=512",
            "model.max_sequence_length=512",
            "sample.num_steps=6",
            "method.options.timestep_fraction=0.99",
            "sample.guidance_scale=3.5",
            "method.options.noise_level=0.9",
            "sample.group_size=6",
            "sample.prompts_per_iteration=2",
            "sample.batch_size=3",
            "method.options.beta=0.0",
            "method.options.clip_range=1.0e-4",
            "train.lora.rank=64",
            "train.lora.alpha=128",
            FLUX_FF_LORA_TARGETS,
            'reward={"jpeg_compressibility": 1.0}',
        ],
        "512px, 12 samples, batch 3, 6 steps, guidance embedding 3.5, LoRA 64 (+FF)",
    ),
    # Flow-GRPO's general_ocr_wan2_1 settings (CFG 4.5, LoRA 32/64, beta 0.004, clip 1e-3, bf16) at 81 frames
    # of 480x832 with gradient checkpointing; 10 steps of which an SDE window of 2 trains (Flow-GRPO's 20 steps,
    # 19 of them trained, would take about 4x longer), 2 samples, one a batch
    "wan": FamilyRun(
        "tiny-wan",
        [
            "model.height=480",
            "model.width=832",
            "model.num_frames=81",
            "model.fps=16",
            "model.max_sequence_length=512",
            "train.gradient_checkpointing=true",
            "sample.num_steps=10",
            "method.options.window_size=2",
            "sample.guidance_scale=4.5",
            "sample.group_size=2",
            "sample.prompts_per_iteration=1",
            "sample.batch_size=1",
            "method.options.beta=0.004",
            "method.options.clip_range=1.0e-3",
            "train.lora.rank=32",
            "train.lora.alpha=64",
            "train.lora.target_modules=null",
        ],
        "81x480x832 (32,760 tokens), 2 samples, batch 1, CFG 4.5, 10 steps, window 2, LoRA 32, checkpointing",
    ),
    # Wan2.1-I2V-14B-480P (16.4B with the image cross-attention, and its CLIP ViT-H/14) from each row's source
    # image at its native 81 x 480 x 832, Flow-Factory's I2V settings otherwise (CFG 5.0, noise 0.9, one SDE step
    # among steps 1-3, clip 1e-4, beta 0), LoRA 32/64 with checkpointing, 2 samples, one a batch
    "wan_i2v": FamilyRun(
        "tiny-wan-i2v",
        [
            "model.height=480",
            "model.width=832",
            "model.num_frames=81",
            "model.fps=16",
            "model.max_sequence_length=512",
            "train.gradient_checkpointing=true",
            "sample.num_steps=10",
            "method.options.window_size=1",
            "method.options.window_range=[1,4]",
            "sample.guidance_scale=5.0",
            "method.options.noise_level=0.9",
            "sample.group_size=2",
            "sample.prompts_per_iteration=1",
            "sample.batch_size=1",
            "method.options.beta=0.0",
            "method.options.clip_range=1.0e-4",
            "train.lora.rank=32",
            "train.lora.alpha=64",
            "train.lora.target_modules=null",
        ],
        "81x480x832 I2V (32,760 tokens), 2 samples, batch 1, CFG 5, 10 steps, window 1, LoRA 32, checkpointing",
        data="builtin:tiny_i2v",
    ),
    # stable-audio-3-medium (distilled: guidance 1, 8 steps), 10 s clips, LoRA 32/64, 24 samples in batches of 12
    "ltx2": FamilyRun(
        "tiny-ltx2-av-grpo",
        [
            "model.height=512",
            "model.width=768",
            "model.num_frames=49",
            "model.fps=24",
            "model.max_sequence_length=256",
            "train.gradient_checkpointing=true",
            "sample.num_steps=8",
            "sample.guidance_scale=4.0",
            "sample.group_size=4",
            "sample.prompts_per_iteration=1",
            "sample.batch_size=4",
            "train.lora.rank=32",
            "train.lora.alpha=32",
            "train.lora.target_modules=null",
            "train.learning_rate=1.0e-6",
        ],
        "49x512x768 at 24 fps (2,739 tokens), G = 4 + anchor, 8 steps, CFG 4, LoRA 32, checkpointing",
    ),
    # Flow-Factory's Z-Image-Turbo GRPO settings (z-image-turbo-pickscore: full fine-tuning, 512 px, 6 steps with
    # one SDE step drawn from steps 1-3, noise 0.7, no CFG, clip 1e-4), on 4 samples one a batch, checkpointing
    "z_image": FamilyRun(
        "tiny-z-image",
        [
            "model.resolution=512",
            "model.max_sequence_length=512",
            "train.gradient_checkpointing=true",
            "sample.num_steps=6",
            "method.options.window_size=1",
            "method.options.window_range=[1,4]",
            "sample.guidance_scale=1.0",
            "method.options.noise_level=0.7",
            "sample.group_size=4",
            "sample.prompts_per_iteration=1",
            "sample.batch_size=1",
            "method.options.beta=0.0",
            "method.options.clip_range=1.0e-4",
            "train.learning_rate=1.0e-5",
            "train.lora.enabled=false",
        ],
        "512px, 4 samples, batch 1, 6 steps, window 1, no CFG (Turbo), full fine-tuning, checkpointing",
    ),
    # Flow-Factory's FLUX.2-klein-base GRPO LoRA settings (flux2-klein-4b-pickscore: 384 px, 8 steps with one SDE
    # step drawn from steps 1-3, noise 0.7, CFG 4.0, LoRA 64/128, clip 1e-4) on klein-base-4B, 8 samples in batches
    # of 4
    "flux2": FamilyRun(
        "tiny-flux2",
        [
            "model.resolution=384",
            "model.max_sequence_length=512",
            "sample.num_steps=8",
            "method.options.window_size=1",
            "method.options.window_range=[1,4]",
            "sample.guidance_scale=4.0",
            "method.options.noise_level=0.7",
            "sample.group_size=8",
            "sample.prompts_per_iteration=1",
            "sample.batch_size=4",
            "method.options.beta=0.0",
            "method.options.clip_range=1.0e-4",
            "train.lora.rank=64",
            "train.lora.alpha=128",
            "train.lora.target_modules=null",
        ],
        "384px, 8 samples, batch 4, 8 steps, window 1, CFG 4 (base), LoRA 64",
    ),
    "stable_audio": FamilyRun(
        "tiny-audio",
        [
            "model.duration_s=10.0",
            "sample.num_steps=8",
            "sample.guidance_scale=1.0",
            "sample.group_size=6",
            "sample.prompts_per_iteration=4",
            "sample.batch_size=12",
            "method.options.beta=0.004",
            "method.options.clip_range=1.0e-4",
            "train.lora.rank=32",
            "train.lora.alpha=64",
            "train.lora.target_modules=null",
        ],
        "10 s clips (108 latent frames), 24 samples, batch 12, 8 steps, guidance 1, LoRA 32",
    ),
    "qwen_image": FamilyRun("tiny-qwen-image", QWEN_IMAGE_OVERRIDES, QWEN_IMAGE_LABEL),
    "qwen_image_edit": FamilyRun(
        "tiny-qwen-image-edit", QWEN_IMAGE_EDIT_OVERRIDES, QWEN_IMAGE_EDIT_LABEL, data="builtin:tiny_edit"
    ),
    # flux-kontext-edit's settings (Flow-GRPO's counting_flux_kontext: 512 px, 6 steps with 5 trained, guidance
    # embedding 2.5, noise 0.9, LoRA 64/128 with the feed-forward layers, beta 0, checkpointing) on FLUX.1-Kontext-dev,
    # each row's source image's 1,024 packed tokens after the generated ones, 6 samples in batches of 3
    "flux_kontext": FamilyRun(
        "tiny-edit",
        [
            "model.resolution=512",
            "model.max_sequence_length=512",
            "train.gradient_checkpointing=true",
            "sample.num_steps=6",
            "method.options.timestep_fraction=0.99",
            "sample.guidance_scale=2.5",
            "method.options.noise_level=0.9",
            "sample.group_size=6",
            "sample.prompts_per_iteration=1",
            "sample.batch_size=3",
            "method.options.beta=0.0",
            "method.options.clip_range=1.0e-4",
            "train.lora.rank=64",
            "train.lora.alpha=128",
            FLUX_FF_LORA_TARGETS,
            "log.eval_every=0",
        ],
        "512px edit, 1,024 source tokens, 6 samples, batch 3, 6 steps, guidance embedding 2.5, LoRA 64 (+FF), checkpointing",
        data="builtin:tiny_edit",
    ),
}
# --smoke: the tiny models, two samples of a few steps
SMOKE_FAMILY_OVERRIDES = [
    "sample.num_steps=2",
    "sample.group_size=2",
    "sample.prompts_per_iteration=1",
    "sample.batch_size=2",
    "method.options.window_size=0",
]
FAMILY_NAMES = {
    "flux": "FLUX.1-dev",
    "wan": "Wan2.1-1.3B",
    "wan_i2v": "Wan2.1-I2V-14B-480P",
    "stable_audio": "SA3-medium",
    "ltx2": "LTX-2 (AV-GRPO)",
    "z_image": "Z-Image-Turbo",
    "flux2": "FLUX.2-klein-base-4B",
    "qwen_image": "Qwen-Image",
    "flux_kontext": "FLUX.1-Kontext-dev",
    "qwen_image_edit": "Qwen-Image-Edit-2509",
}
LOADERS = {
    "flux": "load_pretrained_pipeline",
    "wan": "load_wan_pipeline",
    "wan_i2v": "load_pretrained_pipeline",
    "stable_audio": "load_stable_audio_pipeline",
    "ltx2": "load_ltx2_pipeline",
    "z_image": "load_pretrained_pipeline",
    "flux2": "load_pretrained_pipeline",
    "qwen_image": "load_qwen_image_pipeline",
    "flux_kontext": "load_pretrained_pipeline",
    "qwen_image_edit": "load_qwen_image_edit_pipeline",
}


def t5_encoder(config: dict, shallow: bool, umt5: bool = False):
    from transformers import T5Config, T5EncoderModel, UMT5Config, UMT5EncoderModel

    config = dict(config, num_layers=1) if shallow else dict(config)
    config.update(pad_token_id=0, eos_token_id=3, dropout_rate=0.0, decoder_start_token_id=0)
    return UMT5EncoderModel(UMT5Config(**config)) if umt5 else T5EncoderModel(T5Config(**config))


def build_family(name: str, scale: Scale, device: torch.device, dtype: torch.dtype):
    """The family's diffusers pipeline with random weights: the published architecture (``flowrl.estimate``'s
    table), initialised on ``device`` in ``dtype`` (the VAE in fp32), tokenizers made in code; with ``--smoke``
    (``scale.encoders == "tiny"``) the offline tiny model of the family's folder (``flowrl.pipelines.<family>.tiny``)."""
    from flowrl.pipelines.flux.layout import FLUX_SCHEDULER_CONFIG
    from flowrl.pipelines.flux2.layout import FLUX2_SCHEDULER_CONFIG
    from flowrl.pipelines.ltx2.layout import LTX2_SCHEDULER_CONFIG
    from flowrl.pipelines.stable_audio.tiny import STABLE_AUDIO3_SCHEDULER_CONFIG
    from flowrl.pipelines.wan.tiny import WAN_SCHEDULER_CONFIG
    from flowrl.pipelines.z_image.layout import Z_IMAGE_TURBO_SCHEDULER_CONFIG

    if scale.encoders == "tiny":
        tiny = importlib.import_module(f"flowrl.pipelines.{name}.tiny")
        pipe = getattr(tiny, f"build_tiny_{name}")()
        for part in ("transformer", "text_encoder", "text_encoder_2", "connectors"):
            module = getattr(pipe, part, None)
            if module is not None:
                fp32_kept(module, dtype)
        return pipe.to(device)
    if name in ("qwen_image", "qwen_image_edit"):
        return build_qwen_image(scale.encoders == "shallow", device, dtype, edit=name == "qwen_image_edit")
    import diffusers

    from flowrl.estimate import component
    from flowrl.estimate import published as e
    from flowrl.pipelines.kit.tiny import make_word_tokenizer

    shallow = scale.encoders == "shallow"
    schedulers = {  # made outside the device context: their sigma tables live on the CPU
        "flux": lambda: diffusers.FlowMatchEulerDiscreteScheduler(**FLUX_SCHEDULER_CONFIG),
        "flux_kontext": lambda: diffusers.FlowMatchEulerDiscreteScheduler(**FLUX_SCHEDULER_CONFIG),
        "wan": lambda: diffusers.UniPCMultistepScheduler(**WAN_SCHEDULER_CONFIG),
        "wan_i2v": lambda: diffusers.UniPCMultistepScheduler(**WAN_SCHEDULER_CONFIG),
        "stable_audio": lambda: diffusers.FlowMatchEulerDiscreteScheduler(
            **STABLE_AUDIO3_SCHEDULER_CONFIG, stochastic_sampling=True
        ),
        "ltx2": lambda: diffusers.FlowMatchEulerDiscreteScheduler(**LTX2_SCHEDULER_CONFIG),
        "z_image": lambda: diffusers.FlowMatchEulerDiscreteScheduler(**Z_IMAGE_TURBO_SCHEDULER_CONFIG),
        "flux2": lambda: diffusers.FlowMatchEulerDiscreteScheduler(**FLUX2_SCHEDULER_CONFIG),
    }
    if name not in schedulers:
        raise ValueError(f"no {name!r} family here; choose one of {', '.join(FAMILY_RUNS)}")
    scheduler = schedulers[name]()
    if name in ("z_image", "flux2"):  # a Qwen3 chat template: the word tokenizer with Qwen's chat tokens
        from flowrl.pipelines.kit.qwen3 import qwen3_tokenizer

        tokenizer = qwen3_tokenizer(512)
    else:
        tokenizer = make_word_tokenizer(
            {"flux": 77, "flux_kontext": 77, "wan": 512, "wan_i2v": 512, "stable_audio": 256, "ltx2": 1024}[name]
        )
    torch.manual_seed(0)
    # random T5/UMT5 weights can overflow fp16 inside the stack; bf16 has fp32's range
    encoder_dtype = torch.bfloat16 if dtype == torch.float16 else dtype
    with torch.device(device):
        if name in ("flux", "flux_kontext"):  # FLUX.1-Kontext-dev is FLUX.1-dev's architecture
            with default_dtype(dtype):
                transformer = diffusers.FluxTransformer2DModel(**e.FLUX_DEV_TRANSFORMER)
            with default_dtype(encoder_dtype):
                from transformers import CLIPTextConfig, CLIPTextModel

                clip = dict(e.CLIP_L, num_hidden_layers=2) if shallow else dict(e.CLIP_L)
                text_encoder = CLIPTextModel(CLIPTextConfig(**clip, **token_ids()))
                text_encoder_2 = t5_encoder(e.T5_XXL, shallow)
            vae = diffusers.AutoencoderKL(**e.FLUX_VAE)
            parts = {
                "scheduler": scheduler,
                "vae": vae,
                "text_encoder": fp32_kept(text_encoder, encoder_dtype),
                "tokenizer": tokenizer,
                "text_encoder_2": fp32_kept(text_encoder_2, encoder_dtype),
                "tokenizer_2": make_word_tokenizer(512),
                "transformer": fp32_kept(transformer, dtype),
            }
            if name == "flux":
                pipe = diffusers.FluxPipeline(**parts)
            else:
                pipe = diffusers.FluxKontextPipeline(**parts, image_encoder=None, feature_extractor=None)
        elif name == "wan":
            with default_dtype(dtype):
                transformer = diffusers.WanTransformer3DModel(**e.WAN21_1_3B)
            with default_dtype(encoder_dtype):
                text_encoder = t5_encoder(e.UMT5_XXL, shallow, umt5=True)
            vae = diffusers.AutoencoderKLWan()  # the Wan2.1 VAE: the class defaults
            pipe = diffusers.WanPipeline(
                tokenizer=tokenizer,
                text_encoder=fp32_kept(text_encoder, encoder_dtype),
                vae=vae,
                scheduler=scheduler,
                transformer=fp32_kept(transformer, dtype),
            )
        elif name == "wan_i2v":
            pipe = _wan_i2v_14b(tokenizer, scheduler, shallow, dtype, encoder_dtype)
        elif name == "stable_audio":
            from diffusers.pipelines.stable_audio_3.modeling_stable_audio_3 import StableAudio3DurationEmbedder

            with default_dtype(dtype):
                transformer = diffusers.StableAudio3DiTModel()  # stable-audio-3-medium: the class defaults
                duration = StableAudio3DurationEmbedder()
            with default_dtype(encoder_dtype):
                encoder = dict(e.T5GEMMA_B_ENCODER, num_hidden_layers=1) if shallow else dict(e.T5GEMMA_B_ENCODER)
                text_encoder = component("T5GemmaEncoderModel", dict(encoder, **token_ids()))
            vae = diffusers.AutoencoderSAME()  # SAME-L
            pipe = diffusers.StableAudio3Pipeline(
                vae=vae,
                text_encoder=fp32_kept(text_encoder, encoder_dtype),
                tokenizer=tokenizer,
                duration_embedder=fp32_kept(duration, dtype),
                transformer=fp32_kept(transformer, dtype),
                scheduler=scheduler,
            )
        elif name == "ltx2":
            from diffusers.pipelines.ltx2 import LTX2TextConnectors, LTX2Vocoder

            with default_dtype(dtype):
                transformer = diffusers.LTX2VideoTransformer3DModel()  # the class defaults: estimate's table
                connectors = LTX2TextConnectors()
            with default_dtype(encoder_dtype):
                gemma = dict(e.GEMMA3_12B)
                if shallow:
                    gemma["text_config"] = dict(gemma["text_config"], num_hidden_layers=2)
                text_encoder = component("Gemma3ForConditionalGeneration", gemma)
            vae = diffusers.AutoencoderKLLTX2Video(**e.LTX2_VAE)
            audio_vae = diffusers.AutoencoderKLLTX2Audio()
            vocoder = LTX2Vocoder()
            tokenizer.padding_side = "left"
            pipe = diffusers.LTX2Pipeline(
                scheduler=scheduler,
                vae=vae,
                audio_vae=audio_vae,
                text_encoder=fp32_kept(text_encoder, encoder_dtype),
                tokenizer=tokenizer,
                connectors=fp32_kept(connectors, dtype),
                transformer=fp32_kept(transformer, dtype),
                vocoder=vocoder,
            )
        elif name in ("z_image", "flux2"):
            pipe = _qwen3_family(name, tokenizer, scheduler, shallow, dtype, encoder_dtype)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _wan_i2v_14b(tokenizer, scheduler, shallow: bool, dtype: torch.dtype, encoder_dtype: torch.dtype):
    """Wan2.1-I2V-14B-480P at its published architecture (``flowrl.estimate.published``), on the current device."""
    import diffusers
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    from flowrl.estimate.published import CLIP_H_VISION, UMT5_XXL, WAN21_I2V_14B

    with default_dtype(dtype):
        transformer = diffusers.WanTransformer3DModel(**WAN21_I2V_14B)
    with default_dtype(encoder_dtype):
        text_encoder = t5_encoder(UMT5_XXL, shallow, umt5=True)
        clip = dict(CLIP_H_VISION, num_hidden_layers=2) if shallow else dict(CLIP_H_VISION)
        image_encoder = CLIPVisionModel(CLIPVisionConfig(**clip))
    return diffusers.WanImageToVideoPipeline(
        tokenizer=tokenizer,
        text_encoder=fp32_kept(text_encoder, encoder_dtype),
        vae=diffusers.AutoencoderKLWan(),  # the Wan2.1 VAE
        scheduler=scheduler,
        image_processor=CLIPImageProcessor(size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224}),
        image_encoder=fp32_kept(image_encoder, encoder_dtype),
        transformer=fp32_kept(transformer, dtype),
    )


def _qwen3_family(name: str, tokenizer, scheduler, shallow: bool, dtype, encoder_dtype):
    """Z-Image-Turbo (6.15B, Qwen3-4B, FLUX.1's VAE) or FLUX.2-klein-base-4B (3.88B, Qwen3-4B, the FLUX.2 VAE) on
    the current device; shallow text encoders keep 2 layers (Z-Image reads the second-to-last) or 28 (klein
    stacks hidden states 9, 18 and 27)."""
    import diffusers

    from flowrl.estimate import component
    from flowrl.estimate import published as e

    qwen = dict(e.QWEN3_4B, pad_token_id=tokenizer.pad_token_id)
    if shallow:
        qwen["num_hidden_layers"] = 2 if name == "z_image" else 28
    with default_dtype(encoder_dtype):
        text_encoder = component("Qwen3Model" if name == "z_image" else "Qwen3ForCausalLM", qwen)
    with default_dtype(dtype):
        if name == "z_image":
            transformer = diffusers.ZImageTransformer2DModel()  # the class defaults: estimate's table
        else:
            transformer = diffusers.Flux2Transformer2DModel(**e.FLUX2_KLEIN_4B)
    parts = {
        "scheduler": scheduler,
        "text_encoder": fp32_kept(text_encoder, encoder_dtype),
        "tokenizer": tokenizer,
        "transformer": fp32_kept(transformer, dtype),
    }
    if name == "z_image":
        return diffusers.ZImagePipeline(vae=diffusers.AutoencoderKL(**e.FLUX_VAE), **parts)
    return diffusers.Flux2KleinPipeline(vae=diffusers.AutoencoderKLFlux2(), is_distilled=False, **parts)


def save_family_configs(pipe, folder: Path) -> None:
    """``model_index.json`` and each model component's config (no weights), for ``flowrl.estimate``."""
    pipe.save_config(folder)
    for name, module in pipe.components.items():
        if module is None or "token" in name:
            continue
        if hasattr(module, "save_config"):
            module.save_config(folder / name)
        elif hasattr(module, "config") and hasattr(module.config, "save_pretrained"):
            module.config.save_pretrained(folder / name)


def family_config(name: str, scale: Scale, folder: Path, iterations: int, precision: str):
    from flowrl.resolve import resolve_config

    run = FAMILY_RUNS[name]
    overrides = list(run.overrides)
    if scale.encoders == "tiny":  # the tiny model at its own size, a few samples
        keep = ("sample.guidance_scale", "method.options.beta", "reward=", "train.gradient_checkpointing")
        overrides = [o for o in overrides if o.startswith(keep)] + SMOKE_FAMILY_OVERRIDES
        if name == "ltx2":  # the tiny LTX-2's text connectors take 128 tokens at least
            overrides.append("model.max_sequence_length=128")
    overrides += [
        f"model.dtype={precision}",
        f"train.mixed_precision={repr('no') if precision == 'fp32' else precision}",
    ]
    return resolve_config(
        run.recipe,
        [
            *overrides,
            f"output_dir={folder / 'run'}",
            f"model.path={folder}",
            f"train.iterations={iterations}",
            f"data.prompts={run.data}",
            "log.save_every=100000",
            "log.sample_every=100000",
            "train.onpolicy_check=false",  # measured and reported instead: a speed run must not stop on it
        ],
    )


def family_trainer(name: str, cfg, pipe):
    """flowrl's Trainer with the family's own adapter (``adapter_class(name).from_config``), whose pipeline
    loader returns the in-memory pipeline; the folder holds configs only, so the model.path check is skipped."""
    import sys

    from flowrl.pipelines.base import adapter_class
    from flowrl.trainer import Trainer

    cls = adapter_class(name)
    # the module that calls the loader: the adapter's own, or the kit base it builds on (FLUX.1's kit/flux1.py)
    owner = next(k for k in cls.__mro__ if "from_config" in vars(k))
    module = sys.modules[owner.__module__]

    def nothing(model_cfg) -> None:
        return None

    with (
        mock.patch.object(module, LOADERS[name], lambda *a, **k: pipe),
        mock.patch.object(module, "check_model_path", nothing, create=True),
        mock.patch.object(cls, "check_model_path", staticmethod(nothing)),
    ):
        return Trainer(cfg)


def bench_family(
    name: str, scale: Scale, device: torch.device, iterations: int, clock: Clock, precision: str
) -> list[dict]:
    """One family's flowrl iteration (the last of ``iterations``; the first warms up) next to ``estimate(cfg)``."""
    from flowrl.estimate import estimate
    from flowrl.pipelines.kit.loading import DTYPES

    gpu = device.type == "cuda"
    label = FAMILY_NAMES[name]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        # the estimate first, from the configs alone: it also says whether the stage fits the time left
        meta = build_family(name, scale, torch.device("meta"), DTYPES[precision]) if scale.encoders != "tiny" else None
        clock.say(
            f"{label}: building ({'tiny' if scale.encoders == 'tiny' else scale.encoders + ' text encoders'}, "
            f"{precision}) on {device}"
        )
        if meta is not None:
            save_family_configs(meta, folder)
            del meta
        pipe = build_family(name, scale, device, DTYPES[precision])
        if scale.encoders == "tiny":
            save_family_configs(pipe, folder)
        cfg = family_config(name, scale, folder, iterations, precision)
        est = estimate(cfg, device="cuda" if gpu else "cpu")
        clock.say(
            f"estimate: peak {est.peak_gib:.2f} GiB, {est.seconds_per_iteration:.2f} s/iteration ({est.flops_source})"
        )
        if gpu and clock.left() < 1.2 * est.seconds_per_iteration * iterations + 30:  # + building the trainer
            clock.say(f"skipping the {label} iteration: time budget ({clock.left():.0f} s left)")
            del pipe
            reset_peak(device)
            return []
        trainer = family_trainer(name, cfg, pipe)
        n = cfg.sample.prompts_per_iteration * cfg.sample.group_size
        clock.say(f"trainer ready: {n} samples/iteration, batch {cfg.sample.batch_size}, {cfg.sample.num_steps} steps")
        metrics, first_gap = iterate(trainer, iterations, clock, device, f"{label} ", "samples/s", 3)
        setting = FAMILY_RUNS[name].label if scale.encoders != "tiny" else "tiny model (--smoke)"
        row = {
            "model": f"{label} (flowrl iteration)",
            "setting": f"{setting}; {precision}",
            "seconds": metrics["timing_s/iteration"],
            "images_per_s": metrics["throughput/images_per_s"],  # samples (images, clips) per second
            "peak_gib": metrics["memory/peak_gib"],  # CUDA max allocated; on CPU the process's peak RSS
            "est_seconds": est.seconds_per_iteration,
            "est_peak_gib": est.peak_gib,
            "phases": {k.split("/")[1]: round(v, 3) for k, v in metrics.items() if k.startswith("timing_s/")},
            "est_phases": {k: round(v, 3) for k, v in est.time_s.items()},
            "onpolicy_logp_diff": first_gap,
            "samples": n,
        }
        del trainer, pipe
    reset_peak(device)
    return [row]
