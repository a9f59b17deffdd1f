"""Pre-flight estimate of peak memory and time per iteration, from a Config, before any weight loads.

    est = estimate(resolve_config("sd35m-ocr"), world_size=8)
    print(format_estimate(est))

The architecture is read, never loaded. The transformer, text encoders and VAE are built from their
configs on the ``meta`` device: the ``tiny`` presets through ``pipelines/tiny.py``, a hub id or local folder
through ``load_config`` (``transformer/config.json`` and so on), with a built-in table of the SD3/SD3.5
configs as the offline fallback. Parameters are counted there.

**Memory** (bytes, per process; P = parameters, b(dtype) = 4 for fp32, 2 for fp16/bf16):

* frozen weights: text encoders and transformer at ``model.dtype``, the VAE in fp32 (it decodes in fp32);
* trainable weights (the LoRA, or the whole transformer) are upcast to fp32: 4 P_train;
* gradients 4 P_train, AdamW's two moments 8 P_train, EMA 4 P_train, a DDP gradient bucket 4 P_train
  with several processes; full fine-tuning with ``train.beta > 0`` also keeps a frozen reference copy,
  and under autocast the fp16 copies of the fp32 weights (2 P) are cached during each training forward;
* rollout buffers: every local sample keeps its (T+1) latents in fp32 and its prompt embedding until the
  update; the prompt-embedding cache keeps one embedding per distinct prompt seen, up to
  ``model.prompt_cache``;
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
* rollout: T forwards per sample (x2 rows with CFG); update: per trained transition one forward and
  backward, 3x a forward for full fine-tuning (input and weight gradients) and 2x with LoRA (the frozen
  weights need only input gradients), +1 forward with gradient checkpointing and +1 reference forward
  when ``train.beta > 0``; decode: ``2 * P * positions`` of each VAE decoder stage;
* seconds = FLOPs / (sustained FLOP/s) + forward calls x a per-forward overhead (kernel launches and
  Python, ``OVERHEAD_S``). The FLOP/s is ``flops`` if given, else a short matmul measured on this machine
  times ``MATMUL_EFFICIENCY`` (the share of a matmul's rate a whole model reaches), else a constant for
  an H100-class GPU. Not modelled: reward models (OCR, PickScore and VLM judges can dominate), the text
  encoders (prompts are cached), the optimizer step, evaluation and checkpointing, and communication.
"""

from __future__ import annotations

import functools
import json
import re
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

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

_SD35_MEDIUM = dict(
    sample_size=128,
    patch_size=2,
    in_channels=16,
    out_channels=16,
    num_layers=24,
    attention_head_dim=64,
    num_attention_heads=24,
    joint_attention_dim=4096,
    caption_projection_dim=1536,
    pooled_projection_dim=2048,
    pos_embed_max_size=384,
    qk_norm="rms_norm",
    dual_attention_layers=list(range(13)),
)
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
SD3_VAE = dict(
    in_channels=3,
    out_channels=3,
    down_block_types=["DownEncoderBlock2D"] * 4,
    up_block_types=["UpDecoderBlock2D"] * 4,
    block_out_channels=[128, 256, 512, 512],
    layers_per_block=2,
    latent_channels=16,
    norm_num_groups=32,
    sample_size=1024,
    scaling_factor=1.5305,
    shift_factor=0.0609,
    use_quant_conv=False,
    use_post_quant_conv=False,
)
CLIP_L = dict(
    vocab_size=49408,
    hidden_size=768,
    intermediate_size=3072,
    num_hidden_layers=12,
    num_attention_heads=12,
    projection_dim=768,
    max_position_embeddings=77,
    hidden_act="quick_gelu",
)
CLIP_G = dict(
    vocab_size=49408,
    hidden_size=1280,
    intermediate_size=5120,
    num_hidden_layers=32,
    num_attention_heads=20,
    projection_dim=1280,
    max_position_embeddings=77,
    hidden_act="gelu",
)
T5_XXL = dict(
    vocab_size=32128,
    d_model=4096,
    d_kv=64,
    d_ff=10240,
    num_layers=24,
    num_heads=64,
    feed_forward_proj="gated-gelu",
    relative_attention_num_buckets=32,
)
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


def _vae_decode_cost(vae, resolution: int) -> tuple[float, float]:
    """(FLOPs, bytes of working set) to decode one image: ``2 * P * positions`` per decoder stage.

    ``up_blocks.i`` runs at the latent size x 2^i and its upsampler at twice that; ``conv_in`` and
    ``mid_block`` at the latent size; ``conv_norm_out``/``conv_out`` at full resolution.
    """
    levels = len(vae.config.block_out_channels)
    latent = resolution // 2 ** (levels - 1)
    flops = 0.0
    for name, p in vae.decoder.named_parameters():
        m = re.match(r"up_blocks\.(\d+)\.(resnets|upsamplers)", name)
        if m:
            side = latent * 2 ** (int(m.group(1)) + (m.group(2) == "upsamplers"))
        elif name.startswith(("conv_norm_out", "conv_out")):
            side = resolution
        else:
            side = latent
        if p.dim() >= 2:
            flops += 2 * p.numel() * side * side
    c0 = vae.config.block_out_channels[0]
    return flops, VAE_DECODE_TENSORS * c0 * resolution * resolution * 4


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
            inputs = dict(
                hidden_states=torch.randn(1, narrow["in_channels"], s, s, dtype=weights),
                encoder_hidden_states=torch.randn(1, n_txt, 16, dtype=weights),
                pooled_projections=torch.randn(1, 16, dtype=weights),
                timestep=torch.full((1,), 500.0),
            )
            rows.append([1.0, (s // patch) ** 2, n_txt, float(_saved_bytes(model, inputs, autocast))])
    finally:
        torch.set_num_threads(threads)
    a = torch.tensor([r[:3] for r in rows], dtype=torch.float64)
    b = torch.tensor([r[3] for r in rows], dtype=torch.float64)
    per_row, per_img, per_txt = torch.linalg.solve(a, b).tolist()
    return per_row, per_img, per_txt


# ----------------------------------------------------------------------------------------------------
# the model's size


def model_size(cfg: Config) -> ModelSize:
    """Parameters, tokens, FLOPs and activation bytes of ``cfg.model`` (configs only, no weights)."""
    if cfg.model.pipeline != "sd3":
        raise ConfigError(f"model.pipeline: no estimate for {cfg.model.pipeline!r} yet (only sd3)")
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


def _memory(cfg: Config, m: ModelSize, world_size: int, device: str, strategy: str) -> tuple[dict, list[str]]:
    """Per-process bytes by item (see the module docstring)."""
    s, t = cfg.sample, cfg.train
    notes = []
    bw = BYTES[cfg.model.dtype]
    full = not t.lora.enabled
    n_local = s.prompts_per_iteration * s.group_size // world_size
    cfg_rows = 2 if s.guidance_scale != 1.0 else 1
    rows = min(s.batch_size, n_local) * cfg_rows
    shard = world_size if strategy in ("zero2", "fsdp") else 1
    mem: dict[str, float] = {}
    if full:
        weights = 4 * m.transformer_params / (world_size if strategy == "fsdp" else 1)
        if strategy == "fsdp":  # one gathered block at a time (plus the next one prefetched)
            weights += 2 * 4 * m.transformer_params / m.layers
        mem["transformer (trainable, fp32)"] = weights
        if t.beta > 0:
            mem["KL reference copy"] = bw * m.transformer_params
    else:
        mem["transformer (frozen)"] = bw * m.transformer_params
        mem["LoRA (fp32)"] = 4 * m.trainable_params
    mem["text encoders"] = bw * m.text_encoder_params
    mem["VAE (fp32)"] = 4 * m.vae_params
    mem["AdamW moments"] = 8 * m.trainable_params / shard
    if t.ema:
        mem["EMA"] = 4 * m.trainable_params
    mem["rollout buffers"] = n_local * ((s.num_steps + 1) * m.latent_elems * 4 + m.cond_elems * bw)
    n_prompts = _prompt_count(cfg)
    if n_prompts:
        cached = min(n_prompts, cfg.model.prompt_cache)
        mem["prompt-embedding cache"] = cached * m.cond_elems * bw
        if cached * m.cond_elems * bw > GIB:
            notes.append(
                f"the prompt-embedding cache grows to {cached} of the {n_prompts} prompts "
                f"({cached * m.cond_elems * bw / GIB:.1f} GiB on the device; lower model.prompt_cache)"
            )
    if device == "cpu":
        mem["decoded images"] = n_local * 3 * cfg.model.resolution**2 * 4
        mem["runtime (Python, torch, ...)"] = CPU_RUNTIME_GIB * GIB
    # phases: training forward+backward, rollout forward, VAE decode
    grads = 4 * m.trainable_params / shard
    if world_size > 1 and strategy == "ddp":
        grads += 4 * m.trainable_params  # DDP's gradient buckets
    act = (m.ckpt_bytes_per_row if t.gradient_checkpointing else m.act_bytes_per_row) * rows
    train = act + 2 * m.block_bytes_per_row * rows + grads
    if full and t.mixed_precision != "no":
        train += 2 * m.transformer_params / (world_size if strategy == "fsdp" else 1)  # autocast weight cache
    rollout = m.rollout_bytes_per_row * rows
    decode = m.vae_decode_bytes * min(s.batch_size, n_local)
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
    cfg_rows = 2 if s.guidance_scale != 1.0 else 1
    batches = -(-n_local // s.batch_size)
    trained = _trained_transitions(cfg)
    f_row = m.flops_per_row
    fwd_bwd = (3 if not t.lora.enabled else 2) + (1 if t.gradient_checkpointing else 0)
    ref = 1 if t.beta > 0 else 0
    flops = {
        "rollout": n_local * s.num_steps * cfg_rows * f_row,
        "decode": n_local * m.vae_decode_flops,
        "update": n_local * trained * cfg_rows * f_row * (fwd_bwd + ref),
    }
    fixed, per_layer = OVERHEAD_S[device]
    per_call = fixed + per_layer * m.layers
    calls = {
        "rollout": batches * s.num_steps,
        "decode": batches,
        "update": batches * trained * (2 + (1 if t.gradient_checkpointing else 0) + ref),
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


def format_estimate(est: Estimate) -> str:
    """A short human-readable report of an ``Estimate``."""
    m = est.model
    lines = [
        (
            f"model: {m.source}; transformer {m.transformer_params / 1e6:,.1f}M, text encoders "
            f"{m.text_encoder_params / 1e6:,.1f}M, VAE {m.vae_params / 1e6:,.1f}M parameters; trainable "
            f"{m.trainable_params / 1e6:,.2f}M"
        ),
        (
            f"tokens per row: {m.image_tokens} image + {m.text_tokens} text; {m.flops_per_row / 1e9:,.1f} GFLOP "
            f"per forward row; activations {m.act_bytes_per_row / 2**20:,.1f} MiB per training row"
        ),
        f"per process ({est.world_size} x {est.device}, {est.strategy}): {est.samples_per_process} samples/iteration",
        f"peak memory: {est.peak_gib:,.2f} GiB",
    ]
    lines += [f"  {k:<46s} {v:9.3f} GiB" for k, v in est.memory_gib.items()]
    lines.append(
        f"time per iteration: {est.seconds_per_iteration:,.2f} s ({est.images_per_s:,.2f} images/s over all "
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
    "lora_parameter_count",
    "measure_matmul_flops",
    "model_size",
]
