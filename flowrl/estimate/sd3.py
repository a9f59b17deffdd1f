"""SD3 / SD3.5 by formula: the parts from the tiny presets, a folder's configs or the published table; FLOPs
per row from the weights and the tokens they act on; the VAE decode by stage; the width-64 activation probe."""

from __future__ import annotations

import functools
import json
import re
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from flowrl.config import Config
from flowrl.configkit import ConfigError
from flowrl.estimate.base import ModelSize
from flowrl.estimate.meta import (
    PROBE_HEAD_DIM,
    PROBE_HEADS,
    PROBE_WIDTH,
    count_parameters,
    lora_parameter_count,
    plain,
    probe_dtypes,
    saved_bytes,
    solve_probe,
)
from flowrl.estimate.published import CLIP_G, CLIP_L, SD3_TRANSFORMERS, SD3_VAE, T5_XXL

CLIP_TOKENS = 77  # SD3's CLIP tokenizers pad to 77
# VAE decode working set, in tensors of (C0, H, W) floats alive per image at the full-resolution stage
# (block input, normalised, activated and convolved copies, plus the upsampled input of the stage).
VAE_DECODE_TENSORS = 5
# A no-grad transformer block's working set, in units of D per token and row (residual streams, q/k/v,
# attention output, the MLP's 4D hidden before and after its activation).
ROLLOUT_BLOCK_UNITS = 12


@dataclass
class SD3Parts:
    transformer: Any  # SD3Transformer2DModel on meta
    vae: Any  # AutoencoderKL on meta
    text_encoders: list  # on meta
    clip_tokens: int
    source: str


@functools.lru_cache(maxsize=4)
def sd3_parts(path: str, revision: str | None, tiny_size: str, resolution: int) -> SD3Parts:
    """The model's modules on the meta device (cached: they hold no memory)."""
    return _sd3_parts_tiny(tiny_size, resolution) if path == "tiny" else _sd3_parts_from_path(path, revision)


def _sd3_parts_tiny(size: str, resolution: int) -> SD3Parts:
    from flowrl.pipelines.sd3.tiny import SIZES, build_tiny_sd3_pipeline

    with torch.device("meta"):
        pipe = build_tiny_sd3_pipeline(resolution, size)
    encoders = [pipe.text_encoder, pipe.text_encoder_2, pipe.text_encoder_3]
    return SD3Parts(pipe.transformer, pipe.vae, encoders, SIZES[size].text_tokens, f"tiny preset {size!r}")


def _read_configs(path: str, revision: str | None) -> tuple[dict, dict, list, str]:
    """transformer, vae and text-encoder configs from a local folder or the hub (cache or download)."""
    from diffusers import AutoencoderKL, SD3Transformer2DModel
    from transformers import CLIPTextConfig, T5Config

    from flowrl.pipelines.kit.loading import local_or_hub

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


def _sd3_parts_from_path(path: str, revision: str | None) -> SD3Parts:
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
                encoders.append(T5EncoderModel(T5Config(**plain(ec))))
            else:
                encoders.append(CLIPTextModelWithProjection(CLIPTextConfig(**plain(ec))))
    return SD3Parts(transformer, vae, encoders, _clip_tokens(path), source)


def _clip_tokens(path: str) -> int:
    """The CLIP tokenizer's padded length of a local pipeline folder (SD3's 77 otherwise)."""
    from pathlib import Path

    tok = Path(path).expanduser() / "tokenizer" / "tokenizer_config.json"
    try:
        length = json.loads(tok.read_text()).get("model_max_length", CLIP_TOKENS)
    except (OSError, ValueError):
        return CLIP_TOKENS
    return int(length) if isinstance(length, int) and 0 < length < 100_000 else CLIP_TOKENS


# ----------------------------------------------------------------------------------------------------
# FLOPs


_PER_SAMPLE = re.compile(r"(^time_text_embed\.|norm1\.linear|norm1_context\.linear|norm_out\.linear)")
_TEXT_STREAM = re.compile(r"(^context_embedder\.|_context\.|\.attn\.add_[qkv]_proj\.|\.attn\.to_add_out\.)")


def sd3_flops_per_row(transformer, n_img: int, n_txt: int) -> float:
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


def vae_decode_cost(vae, resolution: int, width: int | None = None) -> tuple[float, float]:
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

# (image latent side, text tokens) of the three probe forwards; solved for (per row, per image token, per text token)
_SD3_PROBES = ((8, 8), (16, 8), (8, 24))


def sd3_probe(tcfg: dict, cfg: Config, targets: list[str] | None) -> tuple[float, float, float]:
    """Bytes saved for backward per row at width ``PROBE_HEADS * PROBE_HEAD_DIM``, split into
    (per row, per image token, per text token) by three forwards at different token counts."""
    weights, autocast = probe_dtypes(cfg)
    key = json.dumps(plain(tcfg), sort_keys=True, default=list)
    return _sd3_probe_cached(key, tuple(targets) if targets else None, cfg.train.lora.rank, weights, autocast)


@functools.lru_cache(maxsize=16)
def _sd3_probe_cached(
    tcfg_json: str, targets: tuple[str, ...] | None, rank: int, weights: torch.dtype, autocast: torch.dtype | None
) -> tuple[float, float, float]:
    from diffusers import SD3Transformer2DModel

    tcfg = json.loads(tcfg_json)
    width = PROBE_WIDTH
    patch = tcfg.get("patch_size", 2)
    side = max(s for s, _ in _SD3_PROBES)
    narrow = dict(
        plain(tcfg),
        num_attention_heads=PROBE_HEADS,
        attention_head_dim=PROBE_HEAD_DIM,
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
        for s, n_txt in _SD3_PROBES:
            inputs = {
                "hidden_states": torch.randn(1, narrow["in_channels"], s, s, dtype=weights),
                "encoder_hidden_states": torch.randn(1, n_txt, 16, dtype=weights),
                "pooled_projections": torch.randn(1, 16, dtype=weights),
                "timestep": torch.full((1,), 500.0),
            }
            rows.append([1.0, (s // patch) ** 2, n_txt, float(saved_bytes(model, inputs, autocast))])
    finally:
        torch.set_num_threads(threads)
    per_row, per_img, per_txt = solve_probe(rows)
    return per_row, per_img, per_txt


# ----------------------------------------------------------------------------------------------------
# the model's size


def sd3_model_size(cfg: Config) -> ModelSize:
    """SD3 / SD3.5 by formula: parameters, tokens, FLOPs and activation bytes of ``cfg.model`` (configs only)."""
    from flowrl.pipelines.sd3.adapter import SD3_LORA_TARGETS

    mc = cfg.model
    parts = sd3_parts(mc.path, mc.revision, mc.tiny_size, mc.resolution if mc.path == "tiny" else 0)
    tr, vae = parts.transformer, parts.vae
    tc = tr.config
    vae_factor = 2 ** (len(vae.config.block_out_channels) - 1)
    side = cfg.model.resolution // vae_factor
    n_img = (side // tc.patch_size) ** 2
    n_txt = parts.clip_tokens + cfg.model.max_sequence_length
    d = tc.num_attention_heads * tc.attention_head_dim
    lora = cfg.train.lora
    targets = (lora.target_modules or SD3_LORA_TARGETS) if lora.enabled else None
    p_tr = count_parameters(tr)
    trainable = lora_parameter_count(tr, targets, lora.rank) if targets else p_tr
    if targets and trainable == 0:
        raise ConfigError(f"train.lora.target_modules: {targets} match no module of the transformer")
    per_row, per_img, per_txt = sd3_probe(dict(tc), cfg, targets)
    scale = d / PROBE_WIDTH
    act = max(per_row, 0.0) + scale * (per_img * n_img + per_txt * n_txt)
    layers = tc.num_layers
    # checkpointing keeps each block's two input streams (at the compute width) plus one block's activations
    el = 2 if cfg.train.mixed_precision != "no" or (cfg.model.dtype != "fp32" and lora.enabled) else 4
    ckpt = layers * (n_img + n_txt) * d * el + act / layers
    vae_flops, vae_bytes = vae_decode_cost(vae, cfg.model.resolution)
    joint = tc.joint_attention_dim
    return ModelSize(
        source=parts.source,
        transformer_params=p_tr,
        text_encoder_params=sum(count_parameters(m) for m in parts.text_encoders if m is not None),
        vae_params=count_parameters(vae),
        trainable_params=trainable,
        layers=layers,
        hidden=d,
        image_tokens=n_img,
        text_tokens=n_txt,
        latent_elems=tc.in_channels * side * side,
        cond_elems=n_txt * joint + tc.pooled_projection_dim,
        flops_per_row=sd3_flops_per_row(tr, n_img, n_txt),
        vae_decode_flops=vae_flops,
        vae_decode_bytes=vae_bytes,
        act_bytes_per_row=act,
        ckpt_bytes_per_row=ckpt,
        block_bytes_per_row=act / layers,
        rollout_bytes_per_row=ROLLOUT_BLOCK_UNITS * d * (n_img + n_txt) * el,
        all_states=True,  # SD3 counts all T + 1 states kept, as its published figures do
        heads=tc.num_attention_heads,
    )
