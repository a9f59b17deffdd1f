"""Pre-flight estimate of peak memory and time per iteration, from a Config, before any weight loads.

    est = estimate(resolve_config("sd35m-ocr"), world_size=8)
    print(format_estimate(est))

The architecture is read, never loaded. The transformer, text encoders and VAE are built from their
configs on the ``meta`` device: the ``tiny`` presets through ``pipelines/tiny.py``, a hub id or local folder
through ``load_config`` (``transformer/config.json`` and so on), with a built-in table of the SD3/SD3.5
configs as the offline fallback (FLUX, Wan and Stable Audio 3: "Other families" below). Parameters are
counted there.

**Memory** (bytes, per process; P = parameters, b(dtype) = 4 for fp32, 2 for fp16/bf16):

* frozen weights: text encoders and transformer at ``model.dtype``, the VAE in fp32 (it decodes in fp32);
* trainable weights (the LoRA, or the whole transformer) are upcast to fp32: 4 P_train;
* gradients 4 P_train, AdamW's two moments 8 P_train, EMA 4 P_train, a DDP gradient bucket 4 P_train
  with several processes; full fine-tuning with ``train.beta > 0`` also keeps a frozen reference copy,
  and under autocast the fp16 copies of the fp32 weights (2 P) are cached during each training forward;
* rollout buffers: every local sample keeps its (T+1) latents in fp32 (the other families: only those its
  trained transitions read or write, as ``Trajectory.trained_only`` keeps them: a window of k keeps k + 1,
  the first n transitions n + 1; none on the device with ``train.offload_states``) and its prompt embedding
  until the update; the batch being sampled holds its whole chain meanwhile; the prompt-embedding cache keeps one embedding per distinct
  prompt seen, up to ``model.prompt_cache``;
* training activations, per row of one training forward (a row is one sample and one CFG branch):
  ``act = D * sum_layers(a_img * N_img + a_txt * N_txt)`` bytes, where D is the hidden width and a the
  bytes saved for backward per token, per layer and per unit of width. The a's are measured, not
  guessed: a copy of the transformer at width 64 (all layers, the same LoRA targets, precision and
  autocast) runs one forward on the CPU while ``saved_tensors_hooks`` add up what autograd keeps. Every
  saved tensor of a block is (tokens x a multiple of D), so the total scales with D. Measured values,
  in floats per token, layer and unit of D: full fine-tuning in fp32 about 21 in an MMDiT block, plus
  16 on image tokens in SD3.5's dual-attention layers; LoRA on the attention projections about 12
  (plus 6.5). sd35m-ocr (LoRA, fp16 autocast, which keeps some tensors in fp32) averages 49 bytes.
  Gradient checkpointing keeps each block's two input streams (``b * D * L * N`` bytes) plus one
  block's activations;
* sharding (``strategy``): ``zero2`` divides the AdamW moments and gradients by the number of
  processes, ``fsdp`` also the transformer's weights (plus two gathered blocks); DDP divides nothing;
* transients: the backward of one block, a no-grad forward of one block during the rollout, and the VAE
  decode of a batch (about 5 tensors of C0 x H x W floats alive per image at full resolution).

peak = static + max(training activations + gradients, rollout forward, VAE decode). On CPU the peak is a
resident-set size and includes the runtime (Python, torch, diffusers, transformers, peft, accelerate,
about ``CPU_RUNTIME_GIB``); on CUDA it is ``torch.cuda.max_memory_allocated``, which leaves out the CUDA
context (about 0.5 GiB) and allocator fragmentation (reserved memory is often 5-20 % above allocated).

**Time** (per iteration, per process, compute only):

* a transformer forward costs ``2 * P * tokens`` FLOPs per row, where P counts only the weights that act
  per token (the adaLN modulation layers act once per sample), image-stream weights times image tokens
  and text-stream weights times text tokens, plus attention: ``4 * N^2 * D`` per joint layer
  (QK^T and AV) and ``4 * N_img^2 * D`` per SD3.5 dual-attention layer;
* rollout: T forwards per sample (x the guidance's passes: 2 rows with CFG); update: per trained transition one forward and
  backward, 3x a forward for full fine-tuning (input and weight gradients) and 2x with LoRA (the frozen
  weights need only input gradients), +1 forward with gradient checkpointing and +1 reference forward
  when ``train.beta > 0``; decode: ``2 * P * positions`` of each VAE decoder stage;
* seconds = FLOPs / (sustained FLOP/s) + forward calls x a per-forward overhead (kernel launches and
  Python, ``OVERHEAD_S``). The FLOP/s is ``flops`` if given, else a short matmul measured on this machine
  times ``MATMUL_EFFICIENCY`` (the share of a matmul's rate a whole model reaches), else a constant for
  an H100-class GPU. Not modelled: reward models (OCR, PickScore and VLM judges can dominate), the text
  encoders (prompts are cached), the optimizer step, evaluation and checkpointing, and communication.

**Other families** (``model.pipeline`` flux, wan, stable_audio; the module's second half). The same items,
with what differs measured rather than written out per architecture:

* parts: the tiny models through ``pipelines/tiny_families.py`` (built for real, they are small; the paths
  each adapter knows: Wan ``tiny`` / ``tiny-a14b``, Stable Audio ``tiny`` / ``tiny-base``), a hub id or
  local folder through ``model_index.json`` and each component's ``load_config``, else the built-in
  ``PUBLISHED`` table (FLUX.1-dev, Wan2.1-T2V-1.3B / 14B, Wan2.2-T2V-A14B, stable-audio-3-medium[-base];
  where each number comes from is written above the table);
* tokens per row: FLUX (H/16)(W/16) image tokens + ``model.max_sequence_length`` T5 tokens (CLIP gives only
  the pooled vector); Wan F' (H/16)(W/16) video tokens (F' = 1 + (F-1)/4, patch 1x2x2) + the padded UMT5
  tokens, which enter only the cross-attention; Stable Audio 3 ceil(duration x rate / 4096) latent frames +
  the DiT's 64 memory tokens, and 256 T5Gemma tokens + 1 duration token of context;
* rows: ``adapter.guidance(scale).passes`` per sample and velocity (FLUX.1-dev's embedded guidance 1; Wan's
  CFG 2, 1 at scale 1; Stable Audio 3's CFG 2 only above scale 1);
* FLOPs per row and the no-grad working set of a rollout forward: one forward of the full-size transformer
  on the meta device under torch's FLOP counter, with a dispatch mode tracking the bytes that live tensors
  hold (each storage once, freed when its last tensor dies); attention goes through the fused kernel's
  meta function (a GPU keeps no N x N scores) and its ``4 N_q N_k d`` FLOPs are added from the shapes. The
  same for the decode of one sample (Wan's video VAE over all F frames, the SAME audio decoder); FLUX's
  VAE is SD3's, costed by SD3's decode formula. Wan decodes one clip at a time and gathers the clips;
* activations: the same width-64 probe on a narrow copy of the family's transformer (all its blocks, its
  FFN ratio, the same LoRA targets and precision), three forwards solved for per row, per main token and
  per text token, scaled by D; checkpointing keeps each block's input (FLUX both streams, Wan and SA3 the
  main one: their text context is one tensor all blocks share);
* two experts (Wan 2.2 A14B): both experts' weights resident at ``model.dtype``; LoRA (or fp32 weights),
  gradients, AdamW and EMA of the ``model.trained_experts`` only; a plan's trained transition that the frozen
  expert takes (sigma below or above ``boundary_ratio``) runs its training forward with nothing requiring
  grad: no backward, no saved activations.

Checked on the tiny models (``tests/test_estimate.py``): parameter counts equal the modules the adapters
build, LoRA counts equal what the trainer adds, meta FLOPs equal torch's counter on a real CPU forward,
meta decode FLOPs and working sets equal the CPU's, and each probe predicts the bytes a 4x wider copy saves
at other token counts within 5 %. Against the one GPU measurement there is (docs/scaling.md, Wan2.1-1.3B
at 81 x 480 x 832, LoRA 32, bf16, one row, the transformer alone): a forward+backward peak of 94 GiB
predicted for 80 measured, 14 GiB with gradient checkpointing for 9.5 (the probe runs the CPU's bf16
autocast, which may keep more in fp32 than CUDA's; the two-block backward transient is generous with
checkpointing); the no-grad forward's working set 1.5 GiB for 1.7. The estimate errs high there.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import re
import time
import warnings
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch
import torch.utils._python_dispatch

from flowrl.config import Config, ConfigError

GIB = 2**30
BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}

# Resident memory of a CPU process that has built a Trainer, before the model's own tensors: Python, torch
# (2.14), diffusers, transformers, peft, accelerate and PIL, as imported by flowrl. Measured on the
# project's CI machine (Linux x86_64): 0.66 GiB after `import flowrl.trainer`, 0.98 GiB after building
# the tiny-cpu Trainer (diffusers and transformers import their model modules lazily).
CPU_RUNTIME_GIB = 0.95

# Sustained FLOP/s assumed for CUDA when no GPU is here to measure: an H100-class GPU at about 20 % of
# its dense 16-bit peak (989 TFLOP/s), as measured below, and 45 % of its 67 TFLOP/s fp32 (not measured).
CUDA_FLOPS = {"16-bit": 200e12, "fp32": 30e12}
# The share of a large matmul's measured rate that a whole diffusion transformer forward and backward
# reaches (norms, attention, elementwise ops and small matmuls run below the peak). CPU: the 70m preset's
# forward ran at 25 GFLOP/s against 21-37 GFLOP/s for 1024^2 matmuls on one thread of the CI machine.
# CUDA: an SD3.5-Medium iteration at 512 px in fp16 on an H200 (benchmarks/perf/gpu.py, 2026-11-30) took
# 15.95 s where this estimate, with 0.6 of the measured 16-bit matmul rate, said 8.32 s: its 3.0 PFLOP ran
# at about 200 TFLOP/s, 0.3 of that matmul rate. The 16-bit constant above (for an absent GPU) is that
# sustained rate (an H100 computes at an H200's rate).
MATMUL_EFFICIENCY = {"cpu": 0.8, "cuda": 0.3}
# Seconds of overhead per transformer call (forward, or backward counted as one more call), as
# (fixed, per layer): Python and module dispatch on CPU, kernel launches on CUDA. CPU values measured
# on the CI machine with the tiny presets (15 ms a forward with 2 layers, 73 ms with 4 of which 52 are
# compute); the CUDA values are an assumption (about 30 kernels of 10 us per block).
OVERHEAD_S = {"cpu": (6e-3, 3.5e-3), "cuda": (2e-3, 3e-4)}

# VAE decode working set, in tensors of (C0, H, W) floats alive per image at the full-resolution stage
# (block input, normalised, activated and convolved copies, plus the upsampled input of the stage).
VAE_DECODE_TENSORS = 5
# A no-grad transformer block's working set, in units of D per token and row (residual streams, q/k/v,
# attention output, the MLP's 4D hidden before and after its activation).
ROLLOUT_BLOCK_UNITS = 12
STRATEGIES = ("ddp", "zero2", "fsdp")


# ----------------------------------------------------------------------------------------------------
# results


@dataclass
class ModelSize:
    """What the estimate needs to know about an architecture (from its configs, no weights)."""

    source: str  # where the configs came from
    transformer_params: int
    text_encoder_params: int
    vae_params: int
    trainable_params: int  # LoRA parameters, or the transformer's
    layers: int
    hidden: int  # D
    image_tokens: int  # N_img per row
    text_tokens: int  # N_txt per row
    latent_elems: int  # C * h * w of one latent
    cond_elems: int  # prompt embedding + pooled embedding of one sample
    flops_per_row: float  # one transformer forward, one row
    vae_decode_flops: float  # one image
    vae_decode_bytes: float  # working set of decoding one image
    act_bytes_per_row: float  # saved for backward by one training forward, one row
    ckpt_bytes_per_row: float  # the same with gradient checkpointing
    block_bytes_per_row: float  # one block's share of act_bytes_per_row (backward transient)
    rollout_bytes_per_row: float  # a no-grad block's working set
    # families beyond SD3 (the defaults are SD3's)
    pipeline: str = "sd3"
    media: str = "image"  # what a sample decodes to: image | video | audio
    passes: int | None = None  # transformer rows per sample and velocity; None: SD3's CFG (2 unless scale 1)
    experts: int = 1  # transformers resident (Wan 2.2 A14B: 2)
    trained_experts: int = 1  # of which train
    trained_weights: int | None = None  # weights of the trained experts; None: transformer_params
    expert_params: int | None = None  # one expert's weights; None: transformer_params
    trained_transitions: float | None = None  # per sample, with a backward; None: the plan's
    forward_only_transitions: float = 0.0  # per sample: trained by the plan, taken by a frozen expert
    decode_rows: int | None = None  # samples a decode call holds at once; None: the rollout batch
    media_bytes: float | None = None  # one decoded sample (fp32, on the CPU); None: an RGB image
    ckpt_tokens: int | None = None  # tokens of each checkpointed block's input; None: image + text
    all_states: bool = False  # every sample keeps all T + 1 states (AV-GRPO trains every transition)
    anchor_rollouts: bool = False  # AV-GRPO: one extra deterministic joint rollout per prompt group, states cached
    kl_reference: bool | None = None  # the update's KL reference (forward, and a frozen copy for full FT); None: beta


@dataclass
class Estimate:
    """Per process. ``memory_gib`` and ``time_s`` break the totals down (see the module docstring)."""

    peak_gib: float
    seconds_per_iteration: float
    images_per_s: float  # over all processes
    memory_gib: dict[str, float]
    time_s: dict[str, float]
    flops_per_iteration: float  # per process
    flops_per_s: float  # the sustained rate assumed
    flops_source: str
    samples_per_process: int
    world_size: int
    device: str
    strategy: str
    model: ModelSize
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------------
# SD3 / SD3.5 configs: the offline table (diffusers config.json values of the published checkpoints)

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
CLIP_TOKENS = 77  # SD3's CLIP tokenizers pad to 77


@dataclass
class _SD3Parts:
    transformer: Any  # SD3Transformer2DModel on meta
    vae: Any  # AutoencoderKL on meta
    text_encoders: list  # on meta
    clip_tokens: int
    source: str


@functools.lru_cache(maxsize=4)
def _sd3_parts(path: str, revision: str | None, tiny_size: str, resolution: int) -> _SD3Parts:
    """The model's modules on the meta device (cached: they hold no memory)."""
    return _sd3_parts_tiny(tiny_size, resolution) if path == "tiny" else _sd3_parts_from_path(path, revision)


def _sd3_parts_tiny(size: str, resolution: int) -> _SD3Parts:
    from flowrl.pipelines.tiny import SIZES, build_tiny_sd3_pipeline

    with torch.device("meta"):
        pipe = build_tiny_sd3_pipeline(resolution, size)
    encoders = [pipe.text_encoder, pipe.text_encoder_2, pipe.text_encoder_3]
    return _SD3Parts(pipe.transformer, pipe.vae, encoders, SIZES[size].text_tokens, f"tiny preset {size!r}")


def _read_configs(path: str, revision: str | None) -> tuple[dict, dict, list, str]:
    """transformer, vae and text-encoder configs from a local folder or the hub (cache or download)."""
    from diffusers import AutoencoderKL, SD3Transformer2DModel
    from transformers import CLIPTextConfig, T5Config

    from flowrl.pipelines.sd3 import local_or_hub

    kw = {"revision": revision} if revision else {}
    path = local_or_hub(path)
    with warnings.catch_warnings():  # huggingface_hub's deprecation chatter when offline
        warnings.simplefilter("ignore")
        transformer = dict(SD3Transformer2DModel.load_config(path, subfolder="transformer", **kw))
        vae = dict(AutoencoderKL.load_config(path, subfolder="vae", **kw))
        encoders = []
        for sub, cls in (
            ("text_encoder", CLIPTextConfig),
            ("text_encoder_2", CLIPTextConfig),
            ("text_encoder_3", T5Config),
        ):
            try:
                encoders.append(cls.from_pretrained(path, subfolder=sub, **kw).to_dict())
            except (OSError, ValueError):  # a pipeline saved without that encoder (SD3 allows dropping T5)
                pass
    return transformer, vae, encoders, f"configs of {path}"


def _sd3_parts_from_path(path: str, revision: str | None) -> _SD3Parts:
    from diffusers import AutoencoderKL, SD3Transformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    try:
        tcfg, vcfg, ecfgs, source = _read_configs(path, revision)
    except (OSError, ValueError) as exc:
        key = path.rstrip("/")
        match = SD3_TRANSFORMERS.get(key) or next(
            (v for k, v in SD3_TRANSFORMERS.items() if key.endswith("/" + k.split("/")[1])), None
        )
        if match is None:
            raise ConfigError(
                f"model.path={path!r}: cannot read its configs ({type(exc).__name__}) and it is not one of the "
                f"built-in architectures ({', '.join(SD3_TRANSFORMERS)})"
            ) from None
        tcfg, vcfg, source = dict(match), dict(SD3_VAE), "built-in table (configs unreadable offline)"
        ecfgs = [
            dict(CLIP_L, model_type="clip_text_model"),
            dict(CLIP_G, model_type="clip_text_model"),
            dict(T5_XXL, model_type="t5"),
        ]
    encoders = []
    with torch.device("meta"):
        transformer = SD3Transformer2DModel.from_config(tcfg)
        vae = AutoencoderKL.from_config(vcfg)
        for ec in ecfgs:
            if ec.get("model_type") == "t5" or "d_model" in ec:
                encoders.append(T5EncoderModel(T5Config(**_plain(ec))))
            else:
                encoders.append(CLIPTextModelWithProjection(CLIPTextConfig(**_plain(ec))))
    return _SD3Parts(transformer, vae, encoders, _clip_tokens(path), source)


def _clip_tokens(path: str) -> int:
    """The CLIP tokenizer's padded length of a local pipeline folder (SD3's 77 otherwise)."""
    from pathlib import Path

    tok = Path(path).expanduser() / "tokenizer" / "tokenizer_config.json"
    try:
        length = json.loads(tok.read_text()).get("model_max_length", CLIP_TOKENS)
    except (OSError, ValueError):
        return CLIP_TOKENS
    return int(length) if isinstance(length, int) and 0 < length < 100_000 else CLIP_TOKENS


def _plain(config: dict) -> dict:
    return {
        k: v for k, v in config.items() if not k.startswith("_") and k not in ("architectures", "transformers_version")
    }


# ----------------------------------------------------------------------------------------------------
# counting


def _count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _matches(name: str, targets: list[str]) -> bool:
    """peft's rule for a list of target names: the module's full name equals one or ends with '.' + one."""
    return any(name == t or name.endswith("." + t) for t in targets)


def lora_parameter_count(module: torch.nn.Module, targets: list[str], rank: int) -> int:
    """r * (in + out) for every Linear (r * (in * k * k) + r * out for a Conv2d) whose name matches."""
    total = 0
    for name, m in module.named_modules():
        if not _matches(name, targets):
            continue
        if isinstance(m, torch.nn.Linear):
            total += rank * (m.in_features + m.out_features)
        elif isinstance(m, torch.nn.Conv2d):
            total += rank * (m.in_channels * m.kernel_size[0] * m.kernel_size[1] + m.out_channels)
    return total


_PER_SAMPLE = re.compile(r"(^time_text_embed\.|norm1\.linear|norm1_context\.linear|norm_out\.linear)")
_TEXT_STREAM = re.compile(r"(^context_embedder\.|_context\.|\.attn\.add_[qkv]_proj\.|\.attn\.to_add_out\.)")


def _sd3_flops_per_row(transformer, n_img: int, n_txt: int) -> float:
    """One forward, one row: 2 * (weights x the tokens they act on) + attention.

    adaLN modulation (``norm*.linear``, the time/pooled embedding) acts once per sample; the context
    stream (``*_context``, ``attn.add_*``, ``to_add_out``, ``context_embedder``) on the text tokens;
    everything else on the image tokens. Attention: ``4 N^2 D`` per joint layer (QK^T and AV, 2 FLOPs a
    multiply-add), ``4 N_img^2 D`` more for a dual-attention layer's image self-attention.
    """
    flops = 0.0
    for name, p in transformer.named_parameters():
        if p.dim() < 2:  # biases and norm scales: elementwise, not matmul work
            continue
        tokens = 1 if _PER_SAMPLE.search(name) else n_txt if _TEXT_STREAM.search(name) else n_img
        flops += 2 * p.numel() * tokens
    c = transformer.config
    d = c.num_attention_heads * c.attention_head_dim
    n = n_img + n_txt
    flops += c.num_layers * 4 * n * n * d
    flops += len(c.dual_attention_layers or ()) * 4 * n_img * n_img * d
    return flops


def _vae_decode_cost(vae, resolution: int, width: int | None = None) -> tuple[float, float]:
    """(FLOPs, bytes of working set) to decode one image of ``resolution`` x ``width`` (default square):
    ``2 * P * positions`` per decoder stage.

    ``up_blocks.i`` runs at the latent size x 2^i and its upsampler at twice that; ``conv_in`` and
    ``mid_block`` at the latent size; ``conv_norm_out``/``conv_out`` at full resolution.
    """
    height, width = resolution, width or resolution
    factor = 2 ** (len(vae.config.block_out_channels) - 1)
    latent = (height // factor) * (width // factor)  # positions
    flops = 0.0
    for name, p in vae.decoder.named_parameters():
        m = re.match(r"up_blocks\.(\d+)\.(resnets|upsamplers)", name)
        if m:
            positions = latent * 4 ** (int(m.group(1)) + (m.group(2) == "upsamplers"))
        elif name.startswith(("conv_norm_out", "conv_out")):
            positions = height * width
        else:
            positions = latent
        if p.dim() >= 2:
            flops += 2 * p.numel() * positions
    c0 = vae.config.block_out_channels[0]
    return flops, VAE_DECODE_TENSORS * c0 * height * width * 4


# ----------------------------------------------------------------------------------------------------
# the activation probe

_PROBE_HEADS, _PROBE_HEAD_DIM = 2, 32  # width 64
# (image latent side, text tokens) of the three probe forwards; solved for (per row, per image token, per text token)
_PROBES = ((8, 8), (16, 8), (8, 24))


def _probe_dtypes(cfg: Config) -> tuple[torch.dtype, torch.dtype | None]:
    """(weight dtype, autocast dtype) of the CPU probe: 16-bit runs as bf16 there (same bytes as fp16)."""
    weights = torch.float32 if cfg.model.dtype == "fp32" else torch.bfloat16
    autocast = None if cfg.train.mixed_precision == "no" else torch.bfloat16
    return weights, autocast


def _saved_bytes(model: torch.nn.Module, inputs: dict, autocast: torch.dtype | None) -> int:
    """Bytes autograd keeps for backward in one forward of ``model`` (parameters and repeats excluded)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    ctx = torch.autocast("cpu", dtype=autocast) if autocast is not None else torch.autocast("cpu", enabled=False)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), ctx:
        out = model(**inputs, return_dict=False)[0]
    del out
    return sum(seen.values())


def _sd3_probe(tcfg: dict, cfg: Config, targets: list[str] | None) -> tuple[float, float, float]:
    """Bytes saved for backward per row at width ``_PROBE_HEADS * _PROBE_HEAD_DIM``, split into
    (per row, per image token, per text token) by three forwards at different token counts."""
    weights, autocast = _probe_dtypes(cfg)
    key = json.dumps(_plain(tcfg), sort_keys=True, default=list)
    return _sd3_probe_cached(key, tuple(targets) if targets else None, cfg.train.lora.rank, weights, autocast)


@functools.lru_cache(maxsize=16)
def _sd3_probe_cached(
    tcfg_json: str, targets: tuple[str, ...] | None, rank: int, weights: torch.dtype, autocast: torch.dtype | None
) -> tuple[float, float, float]:
    from diffusers import SD3Transformer2DModel

    tcfg = json.loads(tcfg_json)
    width = _PROBE_HEADS * _PROBE_HEAD_DIM
    patch = tcfg.get("patch_size", 2)
    side = max(s for s, _ in _PROBES)
    narrow = dict(
        _plain(tcfg),
        num_attention_heads=_PROBE_HEADS,
        attention_head_dim=_PROBE_HEAD_DIM,
        caption_projection_dim=width,
        joint_attention_dim=16,
        pooled_projection_dim=16,
        sample_size=side,
        pos_embed_max_size=side // patch,
    )
    torch.manual_seed(0)
    model = SD3Transformer2DModel.from_config(narrow)
    torch.nn.Module.to(model, weights)  # ModelMixin.to warns about fp32-kept modules (SD3 has none)
    model.requires_grad_(False)
    if targets is not None:
        from peft import LoraConfig

        d_real = tcfg["num_attention_heads"] * tcfg["attention_head_dim"]
        r = max(1, round(rank * width / d_real))  # the LoRA's share of the width
        model.add_adapter(LoraConfig(r=r, lora_alpha=r, target_modules=list(targets), init_lora_weights="gaussian"))
    else:
        model.requires_grad_(True)
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    rows = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops: extra threads only wait on each other (10 ms a op on busy cores)
    try:
        for s, n_txt in _PROBES:
            inputs = {
                "hidden_states": torch.randn(1, narrow["in_channels"], s, s, dtype=weights),
                "encoder_hidden_states": torch.randn(1, n_txt, 16, dtype=weights),
                "pooled_projections": torch.randn(1, 16, dtype=weights),
                "timestep": torch.full((1,), 500.0),
            }
            rows.append([1.0, (s // patch) ** 2, n_txt, float(_saved_bytes(model, inputs, autocast))])
    finally:
        torch.set_num_threads(threads)
    a = torch.tensor([r[:3] for r in rows], dtype=torch.float64)
    b = torch.tensor([r[3] for r in rows], dtype=torch.float64)
    per_row, per_img, per_txt = torch.linalg.solve(a, b).tolist()
    return per_row, per_img, per_txt


# ----------------------------------------------------------------------------------------------------
# FLUX.1, Wan 2.1 / 2.2, Stable Audio 3: the offline table
#
# Where each number comes from (no hub access here):
# * FLUX.1-dev: FluxTransformer2DModel's defaults, which are FLUX.1-dev's transformer/config.json except
#   guidance_embeds (true in FLUX.1-dev: its guidance embedding); 11.90B. The VAE is SD3's architecture with
#   FLUX's scaling 0.3611 / shift 0.1159 (vae/config.json, as pipelines/tiny_families.py records them);
#   text encoders CLIP-L (CLIPTextModel, no projection) and the T5-XXL encoder, as SD3's table.
# * Wan2.1-T2V-1.3B: transformer/config.json of Wan-AI/Wan2.1-T2V-1.3B-Diffusers (1.42B; the table the GPU
#   benchmark already used). Wan2.1-T2V-14B: WanTransformer3DModel's defaults (40 heads of 128 = 5120 wide,
#   FFN 13824, 40 layers), which are the 14B model's published dimensions; Wan2.2-T2V-A14B: two experts of
#   that size, boundary_ratio 0.875 (model_index.json, as pipelines/tiny_families.py records it). VAE:
#   AutoencoderKLWan's defaults (the Wan2.1 VAE, 127M, which A14B reuses). Text encoder: the UMT5-XXL
#   encoder (google/umt5-xxl: d_model 4096, 24 layers, 64 heads, d_ff 10240, vocabulary 256,384).
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
# family defaults where the config leaves them open (model.num_frames / model.duration_s null)
WAN_NUM_FRAMES = 81  # WanPipeline's default: 81 frames at 16 fps
SA3_DURATION_S = 10.0  # StableAudio3Pipeline's default duration
SA3_TEXT_TOKENS = 256  # the pipeline caps T5Gemma at 256 tokens; one duration token follows

_SA3 = {
    "transformer": ("StableAudio3DiTModel", {}),
    "vae": ("AutoencoderSAME", {}),
    "text_encoder": ("T5GemmaEncoderModel", T5GEMMA_B_ENCODER),
    "duration_embedder": ("StableAudio3DurationEmbedder", {}),
}
_WAN_14B_PARTS = {
    "transformer": ("WanTransformer3DModel", WAN_14B),
    "vae": ("AutoencoderKLWan", {}),
    "text_encoder": ("UMT5EncoderModel", UMT5_XXL),
}
# ----------------------------------------------------------------------------------------------------
# LTX-2 (joint audio + video): parts, geometry, forward inputs, decode
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
LTX2_NUM_FRAMES, LTX2_FPS = 121, 24.0  # the adapter's defaults
_LTX2_DIFFUSERS_EXTRA = ("LTX2TextConnectors", "LTX2Vocoder")

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
}
# LoRA targets where the family's adapter cannot be imported (it names its own: ``lora_target_modules``)
FALLBACK_LORA_TARGETS = {
    "flux": [
        "attn.to_q",
        "attn.to_k",
        "attn.to_v",
        "attn.to_out.0",
        "attn.add_q_proj",
        "attn.add_k_proj",
        "attn.add_v_proj",
        "attn.to_add_out",
    ],
    "wan": [
        "attn1.to_q",
        "attn1.to_k",
        "attn1.to_v",
        "attn1.to_out.0",
        "attn2.to_q",
        "attn2.to_k",
        "attn2.to_v",
        "attn2.to_out.0",
    ],
    "stable_audio": [
        "self_attn.to_qkv",
        "self_attn.to_out",
        "cross_attn.to_q",
        "cross_attn.to_kv",
        "cross_attn.to_out",
    ],
    "ltx2": [
        f"{a}.{p}"
        for a in ("attn1", "attn2", "audio_attn1", "audio_attn2", "audio_to_video_attn", "video_to_audio_attn")
        for p in ("to_q", "to_k", "to_v", "to_out.0")
    ],
}
FAMILIES = ("flux", "wan", "stable_audio", "ltx2")
_DECODERS = ("vae", "audio_vae", "vocoder")  # LTX-2's decoders: the video VAE, the audio VAE, the vocoder
_EXPERT_NAMES = ("transformer", "transformer_2")


@dataclass
class _FamilyParts:
    pipeline: str
    experts: list  # transformer(s) on meta: Wan 2.2's high-noise expert first
    vae: Any
    text_encoders: list  # and conditioning modules (SA3's duration embedder)
    boundary_ratio: float | None
    scheduler: dict | None  # scheduler config (Wan: which transitions each expert takes)
    text_tokens: int | None  # the text tokenizer's padded length, where it caps the model's
    source: str
    decoders: list = field(default_factory=list)  # LTX-2: the audio VAE and the vocoder (after ``vae``)


def _component(class_name: str, config: dict):
    """A diffusers or transformers module named ``class_name`` built from ``config`` (on the current device)."""
    import diffusers
    import transformers

    if class_name in _LTX2_DIFFUSERS_EXTRA:
        from diffusers.pipelines import ltx2

        return getattr(ltx2, class_name).from_config(_plain(config))
    if class_name == "StableAudio3DurationEmbedder":
        from diffusers.pipelines.stable_audio_3.modeling_stable_audio_3 import StableAudio3DurationEmbedder

        return StableAudio3DurationEmbedder.from_config(config)
    if hasattr(diffusers, class_name) and hasattr(getattr(diffusers, class_name), "from_config"):
        return getattr(diffusers, class_name).from_config(_plain(config))
    cls = getattr(transformers, class_name)
    if class_name == "T5GemmaEncoderModel" and "encoder" not in config:  # the encoder's own config only
        module = dict(_plain(config), is_decoder=False)
        return cls(
            transformers.T5GemmaConfig(
                encoder=module,
                decoder=dict(module),
                is_encoder_decoder=False,
                vocab_size=config.get("vocab_size", 256000),
            )
        )
    if class_name == "T5GemmaEncoderModel":
        return cls(transformers.T5GemmaConfig(**dict(_plain(config), is_encoder_decoder=False)))
    return cls(cls.config_class(**_plain(config)))


def _parts_from_modules(pipeline: str, modules: dict, boundary_ratio, scheduler, text_tokens, source) -> _FamilyParts:
    experts = [modules[n] for n in _EXPERT_NAMES if modules.get(n) is not None]
    encoders = [m for n, m in modules.items() if m is not None and n not in (*_EXPERT_NAMES, *_DECODERS)]
    decoders = [modules[n] for n in _DECODERS[1:] if modules.get(n) is not None]
    return _FamilyParts(
        pipeline, experts, modules["vae"], encoders, boundary_ratio, scheduler, text_tokens, source, decoders
    )


# model.path values that build an offline tiny pipeline, as the adapters name them: path -> builder keywords
TINY_FAMILY_PATHS = {
    "flux": {"tiny": {}},
    "wan": {"tiny": {"two_experts": False}, "tiny-a14b": {"two_experts": True}},
    "stable_audio": {"tiny": {"distilled": True}, "tiny-base": {"distilled": False}},
    "ltx2": {"tiny": {}},
}


@functools.lru_cache(maxsize=8)
def _family_parts(pipeline: str, path: str, revision: str | None) -> _FamilyParts:
    """The model's modules: on the meta device (they hold no memory), the tiny ones as built (cached)."""
    if path in TINY_FAMILY_PATHS[pipeline]:
        return _family_parts_tiny(pipeline, path)
    try:
        return _family_parts_from_path(pipeline, path, revision)
    except (OSError, ValueError, KeyError) as exc:
        key = path.rstrip("/")
        match = PUBLISHED.get(key) or next(
            (v for k, v in PUBLISHED.items() if key.endswith("/" + k.split("/")[1])), None
        )
        known = [k for k, v in PUBLISHED.items() if v["pipeline"] == pipeline]
        if match is None or match["pipeline"] != pipeline:
            raise ConfigError(
                f"model.path={path!r}: cannot read its configs ({type(exc).__name__}) and it is not one of the "
                f"built-in {pipeline} architectures ({', '.join(known)})"
            ) from None
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # weight_norm's deprecation (SAME)
            modules = {name: _component(cls, dict(c)) for name, (cls, c) in match["components"].items()}
        scheduler = _wan_scheduler_default() if pipeline == "wan" else None
        return _parts_from_modules(
            pipeline,
            modules,
            match.get("boundary_ratio"),
            scheduler,
            None,
            "built-in table (configs unreadable offline)",
        )


def _wan_scheduler_default() -> dict:
    from flowrl.pipelines.tiny_families import WAN_SCHEDULER_CONFIG

    return dict(WAN_SCHEDULER_CONFIG)


def _family_parts_tiny(pipeline: str, path: str) -> _FamilyParts:
    """The offline tiny pipeline (``pipelines/tiny_families.py``, as the adapter builds ``model.path``), built
    for real: it is small, and only its configs and parameter counts are read."""
    from flowrl.pipelines import tiny_families as tf

    builders = {
        "flux": tf.build_tiny_flux,
        "wan": tf.build_tiny_wan,
        "stable_audio": tf.build_tiny_stable_audio,
        "ltx2": tf.build_tiny_ltx2,
    }
    pipe = builders[pipeline](**TINY_FAMILY_PATHS[pipeline][path])
    return _parts_from_pipe(pipeline, pipe, f"tiny preset {path!r}")


def _parts_from_pipe(pipeline: str, pipe, source: str) -> _FamilyParts:
    # kept where they were built (they are tiny): moving them to meta would untie T5's shared embedding
    modules = {name: m for name, m in pipe.components.items() if isinstance(m, torch.nn.Module)}
    tokenizer = getattr(pipe, "tokenizer", None)
    text_tokens = getattr(tokenizer, "model_max_length", None) if pipeline == "stable_audio" else None
    scheduler = dict(pipe.scheduler.config) if pipeline == "wan" else None
    boundary = pipe.config.get("boundary_ratio") if pipeline == "wan" else None
    return _parts_from_modules(pipeline, modules, boundary, scheduler, text_tokens, source)


def _family_parts_from_path(pipeline: str, path: str, revision: str | None) -> _FamilyParts:
    """Every model component of ``model_index.json`` from its config (a local folder, or the hub's cache)."""
    from diffusers import DiffusionPipeline
    from transformers import AutoConfig

    from flowrl.pipelines.sd3 import local_or_hub

    kw = {"revision": revision} if revision else {}
    path = local_or_hub(path)
    modules: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        index = dict(DiffusionPipeline.load_config(path, **kw))
        scheduler = None
        for name, spec in index.items():
            if name.startswith("_") or not isinstance(spec, (list, tuple)) or len(spec) != 2 or spec[0] is None:
                continue
            library, class_name = spec
            if name == "scheduler":
                import diffusers

                scheduler = dict(getattr(diffusers, class_name).load_config(path, subfolder=name, **kw))
                continue
            if "token" in name.lower() or class_name is None:
                continue
            if library == "transformers":
                config = AutoConfig.from_pretrained(path, subfolder=name, **kw).to_dict()
            else:
                import diffusers

                cls = getattr(diffusers, class_name, None)
                if cls is None and class_name in _LTX2_DIFFUSERS_EXTRA:
                    from diffusers.pipelines import ltx2 as _ltx2

                    cls = getattr(_ltx2, class_name)
                if cls is None and class_name == "StableAudio3DurationEmbedder":
                    from diffusers.pipelines.stable_audio_3.modeling_stable_audio_3 import (
                        StableAudio3DurationEmbedder as cls,
                    )
                if cls is None or not hasattr(cls, "load_config"):
                    continue
                config = dict(cls.load_config(path, subfolder=name, **kw))
            with torch.device("meta"):
                modules[name] = _component(class_name, config)
    if "vae" not in modules or "transformer" not in modules:
        raise ValueError(f"{path}: model_index.json names no transformer or vae")
    return _parts_from_modules(pipeline, modules, index.get("boundary_ratio"), scheduler, None, f"configs of {path}")


# ----------------------------------------------------------------------------------------------------
# geometry: tokens, latents and media of one sample


@dataclass(frozen=True)
class _Geometry:
    latent: tuple[int, ...]  # one sample's latent (the adapter's layout, batch dimension left out)
    grid: tuple[int, ...]  # FLUX (h, w) token grid; Wan (f', h/8, w/8) latent; audio (L,)
    main_tokens: int  # the tokens of the transformer's own sequence (image / video / audio + memory)
    text_tokens: int
    cond_elems: int
    media_elems: int  # one decoded sample, in floats


def _geometry(cfg: Config, parts: _FamilyParts) -> _Geometry:
    mc = cfg.model
    tc = parts.experts[0].config
    if parts.pipeline == "flux":
        height, width = mc.size
        factor = 2 ** (len(parts.vae.config.block_out_channels) - 1)
        gh, gw = height // (2 * factor), width // (2 * factor)
        n_txt = mc.max_sequence_length
        return _Geometry(
            (gh * gw, tc.in_channels),
            (gh, gw),
            gh * gw,
            n_txt,
            n_txt * tc.joint_attention_dim + tc.pooled_projection_dim,
            3 * height * width,
        )
    if parts.pipeline == "wan":
        height, width = mc.size
        frames = mc.num_frames or WAN_NUM_FRAMES
        vc = parts.vae.config
        t_factor = vc.get("scale_factor_temporal") or 2 ** sum(vc.temperal_downsample)
        s_factor = vc.get("scale_factor_spatial") or 2 ** len(vc.temperal_downsample)
        f, h, w = (frames - 1) // t_factor + 1, height // s_factor, width // s_factor
        pt, ph, pw = tc.patch_size
        n_txt = mc.max_sequence_length
        return _Geometry(
            (tc.in_channels, f, h, w),
            (f, h, w),
            (f // pt) * (h // ph) * (w // pw),
            n_txt,
            n_txt * tc.text_dim,
            frames * 3 * height * width,
        )
    if parts.pipeline == "stable_audio":
        vc = parts.vae.config
        duration = mc.duration_s or SA3_DURATION_S
        ratio = getattr(parts.vae, "downsampling_ratio", None) or vc.patch_size * math.prod(vc.encoder_strides)
        length = math.ceil(duration * vc.sampling_rate / ratio)
        text = min(parts.text_tokens or SA3_TEXT_TOKENS, SA3_TEXT_TOKENS)
        return _Geometry(
            (tc.io_channels, length),
            (length,),
            length // tc.patch_size + tc.num_memory_tokens,
            text + 1,
            text * tc.cond_token_dim + text + tc.global_cond_dim,
            vc.audio_channels * int(duration * vc.sampling_rate),
        )
    if parts.pipeline == "ltx2":
        return _ltx2_geometry(cfg, parts)
    raise ConfigError(f"model.pipeline: no estimate for {parts.pipeline!r}")


def _ltx2_geometry(cfg: Config, parts: _FamilyParts) -> _Geometry:
    """Packed video tokens F' H' W' (F' = 1 + (F-1)/8, H' = H/32, patch 1) and L = round(F / fps x sr / hop / 4)
    audio latent frames, both of 128 channels; both towers run every forward, so the main tokens are N_v + L.
    Text: ``model.max_sequence_length`` connector tokens, a video and an audio context and the mask cached."""
    mc = cfg.model
    tc, vc, ac = parts.experts[0].config, parts.vae.config, parts.decoders[0].config
    height, width = mc.size
    frames = mc.num_frames or LTX2_NUM_FRAMES
    fps = mc.fps or LTX2_FPS
    s_factor = vc.get("spatial_compression_ratio") or parts.vae.spatial_compression_ratio
    t_factor = vc.get("temporal_compression_ratio") or parts.vae.temporal_compression_ratio
    pt, p = tc.patch_size_t, tc.patch_size
    f, h, w = (frames - 1) // t_factor + 1, height // s_factor, width // s_factor
    n_video = (f // pt) * (h // p) * (w // p)
    audio_vae = parts.decoders[0]
    length = round(frames / fps * ac.sample_rate / ac.mel_hop_length / float(audio_vae.temporal_compression_ratio))
    latent_mel = ac.mel_bins // audio_vae.mel_compression_ratio
    n_txt = mc.max_sequence_length
    channels_v = tc.in_channels * pt * p * p
    channels_a = ac.latent_channels * latent_mel
    vocoder = parts.decoders[1].config
    samples = int(round(frames / fps * vocoder.output_sampling_rate))
    return _Geometry(
        (n_video * channels_v + length * channels_a,),
        (f, h, w, length),
        n_video + length,
        n_txt,
        n_txt * 2 * tc.caption_channels + n_txt,
        frames * 3 * height * width + vocoder.out_channels * samples,
    )


def _family_width(pipeline: str, tc) -> tuple[int, int]:
    """(hidden width D, transformer blocks) of one expert."""
    if pipeline == "flux":
        return tc.num_attention_heads * tc.attention_head_dim, tc.num_layers + tc.num_single_layers
    if pipeline in ("wan", "ltx2"):  # LTX-2: the video tower's width (the audio tower's is its own)
        return tc.num_attention_heads * tc.attention_head_dim, tc.num_layers
    return tc.embed_dim, tc.depth


def _family_inputs(pipeline: str, tc, grid: tuple[int, ...], n_txt: int, device, dtype) -> dict:
    """One row of transformer inputs at ``grid`` (see ``_Geometry.grid``) with ``n_txt`` text tokens."""
    kw = {"device": device, "dtype": dtype}
    t = torch.full((1,), 0.5, device=device)
    if pipeline == "flux":
        gh, gw = grid
        ids = torch.zeros(gh * gw, 3, **kw)
        if torch.device(device).type != "meta":
            rows, cols = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")
            ids[:, 1], ids[:, 2] = rows.flatten().to(dtype), cols.flatten().to(dtype)
        inputs = {
            "hidden_states": torch.randn(1, gh * gw, tc.in_channels, **kw),
            "encoder_hidden_states": torch.randn(1, n_txt, tc.joint_attention_dim, **kw),
            "pooled_projections": torch.randn(1, tc.pooled_projection_dim, **kw),
            "timestep": t,
            "img_ids": ids,
            "txt_ids": torch.zeros(n_txt, 3, **kw),
        }
        if tc.guidance_embeds:
            inputs["guidance"] = torch.full((1,), 3.5, device=device)
        return inputs
    if pipeline == "wan":
        return {
            "hidden_states": torch.randn(1, tc.in_channels, *grid, **kw),
            "timestep": t * 1000,
            "encoder_hidden_states": torch.randn(1, n_txt, tc.text_dim, **kw),
        }
    if pipeline == "ltx2":  # as the adapter calls it: grid (F', H', W', L), use_cross_timestep
        f, h, w, length = grid
        ts = t * 1000
        ones = torch.ones(1, n_txt, device=device, dtype=torch.int64)
        return {
            "hidden_states": torch.randn(1, f * h * w, tc.in_channels * tc.patch_size_t * tc.patch_size**2, **kw),
            "audio_hidden_states": torch.randn(1, length, tc.audio_in_channels, **kw),
            "encoder_hidden_states": torch.randn(1, n_txt, tc.caption_channels, **kw),
            "audio_encoder_hidden_states": torch.randn(1, n_txt, tc.caption_channels, **kw),
            "timestep": ts,
            "audio_timestep": ts,
            "sigma": ts,
            "audio_sigma": ts,
            "encoder_attention_mask": ones,
            "audio_encoder_attention_mask": ones,
            "num_frames": f,
            "height": h,
            "width": w,
            "fps": LTX2_FPS,
            "audio_num_frames": length,
            "use_cross_timestep": True,
        }
    (length,) = grid
    return {
        "hidden_states": torch.randn(1, tc.io_channels, length, **kw),
        "timestep": t,
        "encoder_hidden_states": torch.randn(1, n_txt, tc.cond_token_dim, **kw),
        "global_hidden_states": torch.randn(1, tc.global_cond_dim, **kw),
    }


# ----------------------------------------------------------------------------------------------------
# measuring on the meta device: FLOPs and the live bytes of a no-grad forward or a decode


class _LiveBytes(torch.utils._python_dispatch.TorchDispatchMode):
    """The peak of the bytes held by tensors that ops create (each storage once, freed when its last tensor
    dies), leaving out the ``external`` tensors (weights, inputs). Works on meta tensors, which hold none."""

    def __init__(self, external=()):
        super().__init__()
        self.refs: dict[int, list[int]] = {}
        self.live = self.peak = 0
        self.external = {t.untyped_storage()._cdata for t in external}

    def _release(self, key: int) -> None:
        entry = self.refs.get(key)
        if entry is not None:
            entry[0] -= 1
            if entry[0] == 0:
                self.live -= entry[1]
                del self.refs[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        import weakref

        from torch.utils._pytree import tree_flatten

        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            key = t.untyped_storage()._cdata
            if key in self.external:
                continue
            entry = self.refs.get(key)
            if entry is None:
                entry = self.refs[key] = [0, t.untyped_storage().nbytes()]
                self.live += entry[1]
                self.peak = max(self.peak, self.live)
            entry[0] += 1
            weakref.finalize(t, self._release, key)
        return out


@contextlib.contextmanager
def _fused_attention_on_meta(counter: list[float]):
    """On meta tensors, ``scaled_dot_product_attention`` runs its decomposed math path (an N x N score
    matrix); a GPU runs a fused kernel that keeps only the output and one log-sum-exp per query. Route meta
    calls through the fused CPU kernel's meta function instead, adding its ``4 B H N_q N_k d`` FLOPs (QK^T
    and AV) to ``counter`` (torch's FLOP counter has no formula for that kernel)."""
    original = torch.nn.functional.scaled_dot_product_attention

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if query.device.type != "meta" or query.dim() != 4:
            return original(
                query,
                key,
                value,
                attn_mask=attn_mask,
                dropout_p=dropout_p,
                is_causal=is_causal,
                scale=scale,
                enable_gqa=enable_gqa,
            )
        if key.shape[1] != query.shape[1]:
            repeat = query.shape[1] // key.shape[1]
            key, value = key.repeat_interleave(repeat, 1), value.repeat_interleave(repeat, 1)
        b, h, n_q, d = query.shape
        counter[0] += 2 * b * h * n_q * key.shape[2] * (d + value.shape[-1])
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
        )[0]

    with mock.patch.object(torch.nn.functional, "scaled_dot_product_attention", sdpa):
        yield


def _meta_cost(module: torch.nn.Module, call, inputs: dict) -> tuple[float, float]:
    """(FLOPs, peak live bytes) of ``call(**inputs)`` with no grad, ``module`` and ``inputs`` on meta."""
    from torch.utils.flop_counter import FlopCounterMode

    external = [*module.parameters(), *module.buffers(), *(v for v in inputs.values() if torch.is_tensor(v))]
    attention = [0.0]
    with warnings.catch_warnings(), torch.no_grad(), _fused_attention_on_meta(attention):
        warnings.simplefilter("ignore")
        with FlopCounterMode(display=False) as counter, _LiveBytes(external) as live:
            out = call(**inputs)
            del out
    return float(counter.get_total_flops()) + attention[0], float(live.peak)


@functools.lru_cache(maxsize=32)
def _meta_forward_cost(pipeline: str, tcfg_json: str, grid: tuple[int, ...], n_txt: int) -> tuple[float, float]:
    """One row's forward of the full-size transformer on meta: (FLOPs, fp32 working-set bytes)."""
    tcfg = json.loads(tcfg_json)
    with torch.device("meta"):
        model = _component(_TRANSFORMER_CLASSES[pipeline], tcfg)
    inputs = _family_inputs(pipeline, model.config, grid, n_txt, torch.device("meta"), torch.float32)
    return _meta_cost(model, lambda **kw: model(**kw, return_dict=False), inputs)


_TRANSFORMER_CLASSES = {
    "flux": "FluxTransformer2DModel",
    "wan": "WanTransformer3DModel",
    "stable_audio": "StableAudio3DiTModel",
    "ltx2": "LTX2VideoTransformer3DModel",
}
_VAE_CLASSES = {"flux": "AutoencoderKL", "wan": "AutoencoderKLWan", "stable_audio": "AutoencoderSAME"}


@functools.lru_cache(maxsize=16)
def _meta_decode_cost(pipeline: str, vcfg_json: str, latent: tuple[int, ...]) -> tuple[float, float]:
    """Decoding one sample's latent with the full-size VAE on meta, in fp32: (FLOPs, working-set bytes)."""
    vcfg = json.loads(vcfg_json)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vae = _component(_VAE_CLASSES[pipeline], vcfg)
        z = torch.randn(1, *latent)
    return _meta_cost(vae, lambda z: vae.decode(z, return_dict=False), {"z": z})


def _ltx2_decode_cost(parts: _FamilyParts, geo: _Geometry) -> tuple[float, float]:
    """LTX-2's decode of one sample on meta, in fp32: the video VAE over the whole clip, then the audio VAE to
    a mel spectrogram and the vocoder to the waveform. FLOPs add up; the working set is the larger of the two
    (they run one after the other; the decoded video waits in the output, counted in the media bytes)."""
    f, h, w, length = geo.grid
    tc = parts.experts[0].config
    vae, audio_vae, vocoder = parts.vae, *parts.decoders
    latent_mel = audio_vae.config.mel_bins // audio_vae.mel_compression_ratio
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zv = torch.randn(1, tc.in_channels, f, h, w)
        za = torch.randn(1, audio_vae.config.latent_channels, length, latent_mel)
        temb = torch.zeros(1) if vae.config.timestep_conditioning else None
    fv, bv = _meta_cost(vae, lambda z: vae.decode(z, temb, return_dict=False), {"z": zv})
    fa, ba = _meta_cost(audio_vae, lambda z: audio_vae.decode(z, return_dict=False), {"z": za})
    with torch.no_grad(), torch.device("meta"):
        mel = audio_vae.decode(za, return_dict=False)[0]
    fo, bo = _meta_cost(vocoder, lambda x: vocoder(x), {"x": mel})
    return fv + fa + fo, max(bv, ba + 4 * mel.numel(), bo)


# ----------------------------------------------------------------------------------------------------
# the activation probe of the other families: a width-64 copy, three forwards on the CPU

# (grid, text tokens) of the three probe forwards, solved for (per row, per main token, per text token)
_FAMILY_PROBES = {
    "flux": (((4, 4), 8), ((8, 8), 8), ((4, 4), 24)),
    "wan": (((1, 8, 8), 8), ((1, 16, 16), 8), ((1, 8, 8), 24)),
    "stable_audio": (((16,), 8), ((64,), 8), ((16,), 24)),
    # LTX-2: (F', H', W', L); solved for (per row, per video token, per audio token, per text token)
    "ltx2": (((1, 2, 2, 4), 8), ((1, 4, 4, 4), 8), ((1, 2, 2, 16), 8), ((1, 2, 2, 4), 24)),
}


def _narrow_config(pipeline: str, tcfg: dict) -> dict:
    """The transformer's config at width ``_PROBE_HEADS * _PROBE_HEAD_DIM`` (all blocks, the same FFN ratio)
    with 16-wide text inputs."""
    width = _PROBE_HEADS * _PROBE_HEAD_DIM
    c = _plain(tcfg)
    if pipeline == "flux":
        return dict(
            c,
            num_attention_heads=_PROBE_HEADS,
            attention_head_dim=_PROBE_HEAD_DIM,
            joint_attention_dim=16,
            pooled_projection_dim=16,
            axes_dims_rope=(8, 12, 12),
        )
    if pipeline == "wan":
        d = c["num_attention_heads"] * c["attention_head_dim"]
        return dict(
            c,
            num_attention_heads=_PROBE_HEADS,
            attention_head_dim=_PROBE_HEAD_DIM,
            text_dim=16,
            ffn_dim=max(8, round(c["ffn_dim"] * width / d)),
        )
    if pipeline == "ltx2":  # the audio tower narrowed by the same factor (its width over the video's kept)
        d = c["num_attention_heads"] * c["attention_head_dim"]
        d_a = c["audio_num_attention_heads"] * c["audio_attention_head_dim"]
        audio_head = max(2, round(_PROBE_HEAD_DIM * d_a / d))
        return dict(
            c,
            num_attention_heads=_PROBE_HEADS,
            attention_head_dim=_PROBE_HEAD_DIM,
            cross_attention_dim=width,
            audio_num_attention_heads=_PROBE_HEADS,
            audio_attention_head_dim=audio_head,
            audio_cross_attention_dim=_PROBE_HEADS * audio_head,
            caption_channels=16,
        )
    return dict(c, embed_dim=width, num_heads=_PROBE_HEADS, cond_token_dim=16, global_cond_dim=16)


def _family_probe(pipeline: str, tcfg: dict, cfg: Config, targets: list[str] | None) -> tuple[float, float, float]:
    weights, autocast = _probe_dtypes(cfg)
    key = json.dumps(_plain(tcfg), sort_keys=True, default=list)
    return _family_probe_cached(
        pipeline, key, tuple(targets) if targets else None, cfg.train.lora.rank, weights, autocast
    )


@functools.lru_cache(maxsize=16)
def _family_probe_cached(
    pipeline: str,
    tcfg_json: str,
    targets: tuple[str, ...] | None,
    rank: int,
    weights: torch.dtype,
    autocast: torch.dtype | None,
) -> tuple[float, float, float]:
    """Bytes saved for backward per row at width 64, split into (per row, per main token, per text token).
    Main tokens are the transformer's own sequence (SA3's memory tokens included)."""
    tcfg = json.loads(tcfg_json)
    width = _PROBE_HEADS * _PROBE_HEAD_DIM
    narrow = _narrow_config(pipeline, tcfg)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _component(_TRANSFORMER_CLASSES[pipeline], narrow)
    keep = getattr(model, "_keep_in_fp32_modules", None) or []
    for name, p in model.named_parameters():  # as from_pretrained(torch_dtype=...) leaves them
        p.data = p.data.float() if any(k in name.split(".") for k in keep) else p.data.to(weights)
    model.requires_grad_(False)
    if targets is not None:
        from peft import LoraConfig

        d_real = _family_width(pipeline, _Cfg(tcfg))[0]
        r = max(1, round(rank * width / d_real))
        config = LoraConfig(r=r, lora_alpha=r, target_modules=list(targets), init_lora_weights="gaussian")
        if hasattr(model, "add_adapter"):
            model.add_adapter(config)
        else:  # the SA3 DiT has no PeftAdapterMixin (the adapter lends it one): the same layers, by peft
            from peft import inject_adapter_in_model

            inject_adapter_in_model(config, model)
    else:
        model.requires_grad_(True)
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    rows = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for grid, n_txt in _FAMILY_PROBES[pipeline]:
            inputs = _family_inputs(pipeline, model.config, grid, n_txt, torch.device("cpu"), weights)
            if pipeline == "ltx2":
                main = [grid[0] * grid[1] * grid[2], grid[3]]
            else:
                main = [_grid_tokens(pipeline, model.config, grid)]
            rows.append([1.0, *main, n_txt, float(_saved_bytes(model, inputs, autocast))])
    finally:
        torch.set_num_threads(threads)
    a = torch.tensor([r[:-1] for r in rows], dtype=torch.float64)
    b = torch.tensor([r[-1] for r in rows], dtype=torch.float64)
    return tuple(torch.linalg.solve(a, b).tolist())


class _Cfg(dict):
    """Attribute access to a config dict (``_family_width`` reads ``config.x``)."""

    __getattr__ = dict.__getitem__


def _grid_tokens(pipeline: str, tc, grid: tuple[int, ...]) -> int:
    if pipeline == "flux":
        return grid[0] * grid[1]
    if pipeline == "wan":
        pt, ph, pw = tc.patch_size
        return (grid[0] // pt) * (grid[1] // ph) * (grid[2] // pw)
    return grid[0] // tc.patch_size + tc.num_memory_tokens


# ----------------------------------------------------------------------------------------------------
# passes, targets, experts


def _family_lora_targets(pipeline: str) -> list[str]:
    try:
        from flowrl.pipelines.base import adapter_class

        return list(adapter_class(pipeline).lora_target_modules)
    except (ImportError, AttributeError):  # an adapter not written yet
        return list(FALLBACK_LORA_TARGETS[pipeline])


def _family_passes(pipeline: str, parts: _FamilyParts, scale: float) -> int:
    """Transformer rows per sample and velocity: the adapter's own ``guidance(scale).passes`` (called on a
    stand-in holding what it reads: FLUX's ``guidance_embeds``), else the family's rule (FLUX.1's embedded
    guidance one pass; Wan two-branch CFG unless the scale is 1; Stable Audio 3 CFG only above 1)."""
    from flowrl.pipelines.base import Guidance, adapter_class, cfg_guidance

    embedded = bool(getattr(parts.experts[0].config, "guidance_embeds", False))
    try:
        cls = adapter_class(pipeline)
        stand_in = type("AdapterStandIn", (), {"guidance_embeds": embedded, "_cfg": getattr(cls, "_cfg", None)})()
        return int(cls.guidance(stand_in, scale).passes)
    except Exception:  # noqa: BLE001 -- an adapter not written yet, or one whose guidance reads more
        if pipeline == "flux":
            return Guidance("embedded" if embedded else "none", float(scale), 1).passes
        if pipeline == "stable_audio" and scale <= 1.0:
            return 1
        return cfg_guidance(scale).passes


def _trained_expert_indices(cfg: Config, parts: _FamilyParts) -> list[int]:
    if len(parts.experts) == 1:
        return [0]
    return {"both": [0, 1], "high_noise": [0], "low_noise": [1]}[cfg.model.trained_experts]


def _wan_sigmas(parts: _FamilyParts, num_steps: int) -> list[float]:
    """Wan's schedule from its scheduler config (UniPC flow sigmas), as the adapter reads it."""
    import diffusers

    config = dict(parts.scheduler or _wan_scheduler_default())
    name = config.pop("_class_name", "UniPCMultistepScheduler")
    scheduler = getattr(diffusers, name).from_config(config)
    scheduler.set_timesteps(num_steps, device="cpu")
    return [float(s) for s in scheduler.sigmas]


def _expert_transitions(cfg: Config, parts: _FamilyParts) -> tuple[float, float]:
    """(transitions per sample whose update runs forward and backward, those that run a forward only).

    The plan trains its transitions (``_trained_transitions``) whichever expert takes them. With two experts
    of which one trains (Wan 2.2 A14B; the high-noise expert takes sigma >= boundary_ratio), a transition of the
    frozen expert still runs its training forward, but nothing in it requires grad, so it has no backward and
    saves no activations. Under a window: the expected share of the window's range."""
    s = cfg.sample
    trained = _trained_transitions(cfg)
    experts = _trained_expert_indices(cfg, parts)
    if len(parts.experts) == 1 or len(experts) == 2:
        return float(trained), 0.0
    sigmas = _wan_sigmas(parts, s.num_steps)
    boundary = parts.boundary_ratio or WAN22_BOUNDARY_RATIO
    mine = [(sigmas[i] >= boundary) == (experts == [0]) for i in range(s.num_steps)]
    if s.window_size:
        lo, hi = s.window_range or (0, s.num_steps)
        share = sum(mine[lo:hi]) / max(1, hi - lo)
        return s.window_size * share, s.window_size * (1 - share)
    grad = float(sum(mine[:trained]))
    return grad, trained - grad


# ----------------------------------------------------------------------------------------------------
# the model's size, other families


def _family_model_size(cfg: Config) -> ModelSize:
    mc, lora = cfg.model, cfg.train.lora
    pipeline = mc.pipeline
    parts = _family_parts(pipeline, mc.path, mc.revision)
    geo = _geometry(cfg, parts)
    expert = parts.experts[0]
    tc = expert.config
    d, layers = _family_width(pipeline, tc)
    targets = (lora.target_modules or _family_lora_targets(pipeline)) if lora.enabled else None
    trained_idx = _trained_expert_indices(cfg, parts)
    per_expert = [_count(e) for e in parts.experts]
    if targets:
        per_expert_lora = [lora_parameter_count(e, targets, lora.rank) for e in parts.experts]
        trainable = sum(per_expert_lora[i] for i in trained_idx)
        if trainable == 0:
            raise ConfigError(f"train.lora.target_modules: {targets} match no module of the transformer")
    else:
        trainable = sum(per_expert[i] for i in trained_idx)
    coefficients = _family_probe(pipeline, dict(tc), cfg, targets)
    scale = d / (_PROBE_HEADS * _PROBE_HEAD_DIM)
    if pipeline == "ltx2":  # per row, per video token, per audio token, per text token
        per_row, per_video, per_audio, per_txt = coefficients
        n_audio = geo.grid[3]
        act = max(per_row, 0.0) + scale * (
            per_video * (geo.main_tokens - n_audio) + per_audio * n_audio + per_txt * geo.text_tokens
        )
    else:
        per_row, per_main, per_txt = coefficients
        act = max(per_row, 0.0) + scale * (per_main * geo.main_tokens + per_txt * geo.text_tokens)
    el = 2 if _compute_16bit(cfg) else 4
    # checkpointing keeps each block's inputs: FLUX both streams, Wan and SA3 the main stream (the text
    # context is one tensor every block shares)
    ckpt_tokens = geo.main_tokens + (geo.text_tokens if pipeline == "flux" else 0)
    shared = 0 if pipeline == "flux" else geo.text_tokens * d * el
    ckpt = layers * ckpt_tokens * d * el + shared + act / layers
    tcfg_json = json.dumps(_plain(dict(tc)), sort_keys=True, default=list)
    flops, rollout_bytes = _meta_forward_cost(pipeline, tcfg_json, geo.grid, geo.text_tokens)
    if pipeline == "flux":
        height, width = mc.size
        vae_flops, vae_bytes = _vae_decode_cost(parts.vae, height, width)
    elif pipeline == "ltx2":
        vae_flops, vae_bytes = _ltx2_decode_cost(parts, geo)
    else:
        vcfg_json = json.dumps(_plain(dict(parts.vae.config)), sort_keys=True, default=list)
        vae_flops, vae_bytes = _meta_decode_cost(pipeline, vcfg_json, geo.latent)
    trained_transitions, forward_only = _expert_transitions(cfg, parts)
    av = _is_av_grpo(cfg)
    if av:  # AV-GRPO trains every transition (the SDE at all steps)
        trained_transitions, forward_only = float(cfg.sample.num_steps), 0.0
    media = {"flux": "image", "wan": "video", "stable_audio": "audio", "ltx2": "audio+video"}[pipeline]
    return ModelSize(
        source=parts.source,
        transformer_params=sum(per_expert),
        text_encoder_params=sum(_count(m) for m in parts.text_encoders),
        vae_params=_count(parts.vae) + sum(_count(m) for m in parts.decoders),
        trainable_params=trainable,
        layers=layers,
        hidden=d,
        image_tokens=geo.main_tokens,
        text_tokens=geo.text_tokens,
        latent_elems=math.prod(geo.latent),
        cond_elems=geo.cond_elems,
        flops_per_row=flops,
        vae_decode_flops=vae_flops,
        vae_decode_bytes=vae_bytes,
        act_bytes_per_row=act,
        ckpt_bytes_per_row=ckpt,
        block_bytes_per_row=act / layers,
        rollout_bytes_per_row=rollout_bytes * el / 4,  # measured in fp32; the rollout runs at the compute width
        pipeline=pipeline,
        media=media,
        passes=_family_passes(pipeline, parts, cfg.sample.guidance_scale),
        experts=len(parts.experts),
        trained_experts=len(trained_idx),
        trained_weights=sum(per_expert[i] for i in trained_idx),
        expert_params=max(per_expert),
        trained_transitions=trained_transitions,
        forward_only_transitions=forward_only,
        decode_rows=1 if pipeline == "wan" else None,
        media_bytes=4.0 * geo.media_elems,
        ckpt_tokens=ckpt_tokens,
        all_states=av,
        anchor_rollouts=av,
        kl_reference=_kl_reference(cfg),
    )


def _is_av_grpo(cfg: Config) -> bool:
    return getattr(getattr(cfg, "method", None), "name", "flow_grpo") == "av_grpo"


def _kl_reference(cfg: Config) -> bool:
    """Whether the update runs a reference forward (and full fine-tuning keeps a frozen copy): ``train.beta > 0``,
    or AV-GRPO's own KL weights (``method.options.beta_video`` / ``beta_audio``, defaults 0.01 / 0.002)."""
    if cfg.train.beta > 0:
        return True
    if _is_av_grpo(cfg):
        from flowrl.credit.av_grpo import BETA

        options = cfg.method.options or {}
        return max(float(options.get("beta_video", BETA["video"])), float(options.get("beta_audio", BETA["audio"]))) > 0
    return False


# ----------------------------------------------------------------------------------------------------
# the model's size


def model_size(cfg: Config) -> ModelSize:
    """Parameters, tokens, FLOPs and activation bytes of ``cfg.model`` (configs only, no weights)."""
    if cfg.model.pipeline in FAMILIES:
        return _family_model_size(cfg)
    if cfg.model.pipeline != "sd3":
        raise ConfigError(
            f"model.pipeline: no estimate for {cfg.model.pipeline!r} (only {', '.join(('sd3', *FAMILIES))})"
        )
    from flowrl.pipelines.sd3 import SD3_LORA_TARGETS

    mc = cfg.model
    parts = _sd3_parts(mc.path, mc.revision, mc.tiny_size, mc.resolution if mc.path == "tiny" else 0)
    tr, vae = parts.transformer, parts.vae
    tc = tr.config
    vae_factor = 2 ** (len(vae.config.block_out_channels) - 1)
    side = cfg.model.resolution // vae_factor
    n_img = (side // tc.patch_size) ** 2
    n_txt = parts.clip_tokens + cfg.model.max_sequence_length
    d = tc.num_attention_heads * tc.attention_head_dim
    lora = cfg.train.lora
    targets = (lora.target_modules or SD3_LORA_TARGETS) if lora.enabled else None
    p_tr = _count(tr)
    trainable = lora_parameter_count(tr, targets, lora.rank) if targets else p_tr
    if targets and trainable == 0:
        raise ConfigError(f"train.lora.target_modules: {targets} match no module of the transformer")
    per_row, per_img, per_txt = _sd3_probe(dict(tc), cfg, targets)
    scale = d / (_PROBE_HEADS * _PROBE_HEAD_DIM)
    act = max(per_row, 0.0) + scale * (per_img * n_img + per_txt * n_txt)
    layers = tc.num_layers
    # checkpointing keeps each block's two input streams (at the compute width) plus one block's activations
    el = 2 if cfg.train.mixed_precision != "no" or (cfg.model.dtype != "fp32" and lora.enabled) else 4
    ckpt = layers * (n_img + n_txt) * d * el + act / layers
    vae_flops, vae_bytes = _vae_decode_cost(vae, cfg.model.resolution)
    joint = tc.joint_attention_dim
    return ModelSize(
        source=parts.source,
        transformer_params=p_tr,
        text_encoder_params=sum(_count(m) for m in parts.text_encoders if m is not None),
        vae_params=_count(vae),
        trainable_params=trainable,
        layers=layers,
        hidden=d,
        image_tokens=n_img,
        text_tokens=n_txt,
        latent_elems=tc.in_channels * side * side,
        cond_elems=n_txt * joint + tc.pooled_projection_dim,
        flops_per_row=_sd3_flops_per_row(tr, n_img, n_txt),
        vae_decode_flops=vae_flops,
        vae_decode_bytes=vae_bytes,
        act_bytes_per_row=act,
        ckpt_bytes_per_row=ckpt,
        block_bytes_per_row=act / layers,
        rollout_bytes_per_row=ROLLOUT_BLOCK_UNITS * d * (n_img + n_txt) * el,
    )


# ----------------------------------------------------------------------------------------------------
# throughput of this machine


def measure_matmul_flops(device: str, dtype: torch.dtype = torch.float32, seconds: float = 0.2) -> float:
    """FLOP/s of square matmuls on ``device`` (n = 1024 on CPU, 8192 on CUDA), timed for about ``seconds``."""
    n = 8192 if device == "cuda" else 1024
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    (a @ b).sum().item()  # warm-up
    reps, start = 0, time.perf_counter()
    while True:
        c = a @ b
        reps += 1
        if device == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
    del c
    return 2 * n**3 * reps / elapsed


def _compute_16bit(cfg: Config) -> bool:
    """Whether the transformer's matmuls run in 16-bit."""
    if cfg.train.mixed_precision != "no":
        return True
    return cfg.model.dtype != "fp32" and cfg.train.lora.enabled  # full fine-tuning upcasts to fp32


def _flops(cfg: Config, device: str) -> tuple[float, str]:
    half = _compute_16bit(cfg)
    if device == "cuda" and torch.cuda.is_available():
        dtype = torch.bfloat16 if half else torch.float32
        rate = measure_matmul_flops("cuda", dtype) * MATMUL_EFFICIENCY["cuda"]
        return rate, f"measured matmul on {torch.cuda.get_device_name()} x {MATMUL_EFFICIENCY['cuda']}"
    if device == "cuda":
        key = "16-bit" if half else "fp32"
        return CUDA_FLOPS[key], f"assumed H100-class GPU, {key}"
    rate = measure_matmul_flops("cpu") * MATMUL_EFFICIENCY["cpu"]
    return rate, f"measured fp32 matmul on this CPU ({torch.get_num_threads()} threads) x {MATMUL_EFFICIENCY['cpu']}"


# ----------------------------------------------------------------------------------------------------
# the estimate


def _trained_transitions(cfg: Config) -> int:
    s = cfg.sample
    return s.window_size if s.window_size else int(s.num_steps * s.timestep_fraction)


def _prompt_count(cfg: Config) -> int | None:
    try:
        from flowrl.data import load_train_prompts

        items = load_train_prompts(cfg.data)  # the cache holds the negative prompts too
        return len({p.prompt for p in items} | {p.negative_prompt for p in items if p.negative_prompt})
    except (OSError, ValueError):  # a missing prompt file is `flowrl validate`'s to report, not the estimate's
        return None


def _passes(cfg: Config, m: ModelSize) -> int:
    """Transformer rows per sample and velocity (the adapter's ``guidance(scale).passes``)."""
    if m.passes is not None:
        return m.passes
    from flowrl.pipelines.base import cfg_guidance

    return cfg_guidance(cfg.sample.guidance_scale).passes


def _kept_states(cfg: Config, m: ModelSize) -> int:
    """Latent states a sample keeps until the update: ``Trajectory.trained_only`` keeps those its trained
    transitions read or write (a window of k: k + 1; the first n transitions: n + 1). SD3 keeps counting all
    T + 1, as its published figures do (docs/scaling.md, the README; trained_only would lower them by up to
    0.25 GiB, sd35m-geneval-fast's)."""
    if m.pipeline == "sd3" or m.all_states:
        return cfg.sample.num_steps + 1
    return _trained_transitions(cfg) + 1


def _reference(cfg: Config, m: ModelSize) -> bool:
    return m.kl_reference if m.kl_reference is not None else cfg.train.beta > 0


def _memory(cfg: Config, m: ModelSize, world_size: int, device: str, strategy: str) -> tuple[dict, list[str]]:
    """Per-process bytes by item (see the module docstring)."""
    s, t = cfg.sample, cfg.train
    notes = []
    bw = BYTES[cfg.model.dtype]
    full = not t.lora.enabled
    n_local = s.prompts_per_iteration * s.group_size // world_size
    rows = min(s.batch_size, n_local) * _passes(cfg, m)
    shard = world_size if strategy in ("zero2", "fsdp") else 1
    trained_weights = m.trained_weights if m.trained_weights is not None else m.transformer_params
    expert = m.expert_params or m.transformer_params
    mem: dict[str, float] = {}
    if full:
        weights = 4 * trained_weights / (world_size if strategy == "fsdp" else 1)
        if strategy == "fsdp":  # one gathered block at a time (plus the next one prefetched)
            weights += 2 * 4 * expert / m.layers
        mem["transformer (trainable, fp32)"] = weights
        if m.transformer_params > trained_weights:
            mem["frozen expert"] = bw * (m.transformer_params - trained_weights)
        if _reference(cfg, m):
            mem["KL reference copy"] = bw * trained_weights
    else:
        mem["transformer (frozen)" if m.experts == 1 else f"{m.experts} experts (frozen)"] = bw * m.transformer_params
        mem["LoRA (fp32)"] = 4 * m.trainable_params
    mem["text encoders"] = bw * m.text_encoder_params
    mem["VAE (fp32)"] = 4 * m.vae_params
    mem["AdamW moments"] = 8 * m.trainable_params / shard
    if t.ema:
        mem["EMA"] = 4 * m.trainable_params
    states = _kept_states(cfg, m) * m.latent_elems * 4
    offload = t.offload_states and device == "cuda"
    mem["rollout buffers"] = n_local * ((0 if offload else states) + m.cond_elems * bw)
    if m.anchor_rollouts:  # each local group's anchor trajectory, every state cached (fp32), on the device
        mem["anchor trajectories"] = (n_local // s.group_size) * (s.num_steps + 1) * m.latent_elems * 4
    n_prompts = _prompt_count(cfg)
    if n_prompts:
        cached = min(n_prompts, cfg.model.prompt_cache)
        mem["prompt-embedding cache"] = cached * m.cond_elems * bw
        if cached * m.cond_elems * bw > GIB:
            notes.append(
                f"the prompt-embedding cache grows to {cached} of the {n_prompts} prompts "
                f"({cached * m.cond_elems * bw / GIB:.1f} GiB on the device; lower model.prompt_cache)"
            )
    media = m.media_bytes if m.media_bytes is not None else 3 * cfg.model.resolution**2 * 4
    if device == "cpu":
        mem["decoded images" if m.media == "image" else f"decoded {m.media}"] = n_local * (
            media + (states if offload else 0)
        )
        mem["runtime (Python, torch, ...)"] = CPU_RUNTIME_GIB * GIB
    elif m.media != "image" and n_local * media > GIB:
        notes.append(
            f"the decoded {m.media} of {n_local} samples wait for the rewards in host memory "
            f"({n_local * media / GIB:.1f} GiB)"
        )
    # phases: training forward+backward, rollout forward, VAE decode
    grads = 4 * m.trainable_params / shard
    if world_size > 1 and strategy == "ddp":
        grads += 4 * m.trainable_params  # DDP's gradient buckets
    act = (m.ckpt_bytes_per_row if t.gradient_checkpointing else m.act_bytes_per_row) * rows
    train = act + 2 * m.block_bytes_per_row * rows + grads
    if full and t.mixed_precision != "no":
        train += 2 * trained_weights / (world_size if strategy == "fsdp" else 1)  # autocast weight cache
    batch = min(s.batch_size, n_local)
    # the batch being sampled holds its whole chain until trained_only drops the untrained states
    chain = batch * max(0, s.num_steps + 1 - _kept_states(cfg, m)) * m.latent_elems * 4
    rollout = m.rollout_bytes_per_row * rows + chain
    if m.decode_rows is None:
        decode = m.vae_decode_bytes * batch
    else:  # one clip at a time (Wan), the decoded ones gathered on the device until the batch is done
        decode = m.vae_decode_bytes * m.decode_rows + 2 * batch * media
    phase = max(
        ("training activations + gradients", train),
        ("rollout forward", rollout),
        ("VAE decode", decode),
        key=lambda kv: kv[1],
    )
    mem[f"peak phase: {phase[0]}"] = phase[1]
    return mem, notes


def _time(cfg: Config, m: ModelSize, world_size: int, device: str, rate: float) -> tuple[dict, float]:
    s, t = cfg.sample, cfg.train
    n_local = s.prompts_per_iteration * s.group_size // world_size
    passes = _passes(cfg, m)
    batches = -(-n_local // s.batch_size)
    trained = m.trained_transitions if m.trained_transitions is not None else _trained_transitions(cfg)
    f_row = m.flops_per_row
    fwd_bwd = (3 if not t.lora.enabled else 2) + (1 if t.gradient_checkpointing else 0)
    ref = 1 if _reference(cfg, m) else 0
    groups = n_local // s.group_size if m.anchor_rollouts else 0
    flops = {
        "rollout": (n_local + groups) * s.num_steps * passes * f_row,
        "decode": n_local * m.vae_decode_flops,
        "update": n_local * passes * f_row * (trained * (fwd_bwd + ref) + m.forward_only_transitions * (1 + ref)),
    }
    fixed, per_layer = OVERHEAD_S[device]
    per_call = fixed + per_layer * m.layers
    calls = {
        "rollout": (batches + groups) * s.num_steps,
        "decode": batches,
        "update": batches
        * (trained * (2 + (1 if t.gradient_checkpointing else 0) + ref) + m.forward_only_transitions * (1 + ref)),
    }
    seconds = {k: flops[k] / rate + calls[k] * per_call for k in flops}
    return seconds, sum(flops.values())


def estimate(
    cfg: Config,
    world_size: int = 1,
    device: str = "cuda",
    flops: float | None = None,
    strategy: str = "ddp",
) -> Estimate:
    """Peak memory (GiB) and seconds per iteration of one process of a run of ``cfg``, before running it.

    ``world_size``: processes (GPUs) sharing each iteration's samples. ``device``: ``cuda`` (peak =
    ``torch.cuda.max_memory_allocated``) or ``cpu`` (peak = resident set, runtime included). ``flops``:
    sustained FLOP/s of one device (default: measured here, or an H100-class constant for an absent
    GPU). ``strategy``: ``ddp`` (every process holds everything), ``zero2`` (AdamW moments and gradients
    sharded over processes), ``fsdp`` (FULL_SHARD: the transformer's weights too; needs rollouts routed
    through the wrapped model). Formulas: the module docstring.
    """
    if device not in ("cuda", "cpu"):
        raise ValueError(f"device: {device!r} is not one of cuda, cpu")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy: {strategy!r} is not one of {', '.join(STRATEGIES)}")
    if world_size < 1:
        raise ValueError(f"world_size: must be >= 1, got {world_size}")
    s = cfg.sample
    n_total = s.prompts_per_iteration * s.group_size
    if n_total % world_size:
        raise ValueError(f"{n_total} samples per iteration do not split evenly over {world_size} processes")
    m = model_size(cfg)
    rate, source = (float(flops), "given") if flops else _flops(cfg, device)
    mem, notes = _memory(cfg, m, world_size, device, strategy)
    seconds, total_flops = _time(cfg, m, world_size, device, rate)
    iteration = sum(seconds.values())
    if device == "cuda":
        notes.append("CUDA context (~0.5 GiB) and allocator fragmentation are not in max_memory_allocated")
    notes.append("reward models, text encoding, optimizer steps and communication are not in the time")
    return Estimate(
        peak_gib=sum(mem.values()) / GIB,
        seconds_per_iteration=iteration,
        images_per_s=n_total / iteration,
        memory_gib={k: v / GIB for k, v in mem.items()},
        time_s=seconds,
        flops_per_iteration=total_flops,
        flops_per_s=rate,
        flops_source=source,
        samples_per_process=n_total // world_size,
        world_size=world_size,
        device=device,
        strategy=strategy,
        model=m,
        notes=notes,
    )


def is_tiny(model_cfg) -> bool:
    """Whether ``model_cfg`` builds one of the offline tiny models (a CPU recipe): ``tiny`` for every family,
    and the adapters' other tiny paths (Wan ``tiny-a14b``, Stable Audio ``tiny-base``)."""
    paths = TINY_FAMILY_PATHS.get(model_cfg.pipeline, {"tiny": {}})
    return model_cfg.path in paths


def format_estimate(est: Estimate) -> str:
    """A short human-readable report of an ``Estimate``."""
    m = est.model
    lines = [
        (
            f"model: {m.source}; transformer {m.transformer_params / 1e6:,.1f}M, text encoders "
            f"{m.text_encoder_params / 1e6:,.1f}M, VAE {m.vae_params / 1e6:,.1f}M parameters; trainable "
            f"{m.trainable_params / 1e6:,.2f}M"
            + (f" ({m.trained_experts} of {m.experts} experts)" if m.experts > 1 else "")
        ),
        (
            f"tokens per row: {m.image_tokens} {m.media} + {m.text_tokens} text; {m.flops_per_row / 1e9:,.1f} GFLOP "
            f"per forward row; activations {m.act_bytes_per_row / 2**20:,.1f} MiB per training row"
        ),
        f"per process ({est.world_size} x {est.device}, {est.strategy}): {est.samples_per_process} samples/iteration",
        f"peak memory: {est.peak_gib:,.2f} GiB",
    ]
    lines += [f"  {k:<46s} {v:9.3f} GiB" for k, v in est.memory_gib.items()]
    lines.append(
        f"time per iteration: {est.seconds_per_iteration:,.2f} s ({est.images_per_s:,.2f} "
        f"{'images' if m.media == 'image' else 'samples'}/s over all "
        f"processes; {est.flops_per_iteration / 1e12:,.2f} TFLOP at {est.flops_per_s / 1e12:,.3g} TFLOP/s, "
        f"{est.flops_source})"
    )
    lines += [f"  {k:<46s} {v:9.3f} s" for k, v in est.time_s.items()]
    lines += [f"note: {n}" for n in est.notes]
    return "\n".join(lines)


__all__ = [
    "Estimate",
    "ModelSize",
    "estimate",
    "format_estimate",
    "is_tiny",
    "lora_parameter_count",
    "measure_matmul_flops",
    "model_size",
]
