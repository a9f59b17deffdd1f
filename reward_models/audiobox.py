"""Audiobox-Aesthetics: four no-reference audio-quality ratings (CE, CU, PC, PQ) as a reward.

Media: ``{"audio": (B, C, N) in [-1, 1], "sample_rate": int}`` (or a bare ``(B, C, N)`` / ``(B, N)`` tensor
with ``sample_rate=``).

The model (facebookresearch/audiobox-aesthetics, ``audiobox-aesthetics`` 0.0.4's ``AesMultiOutput``; weights
``checkpoint.pt`` on the hub repo ``facebook/audiobox-aesthetics``), rebuilt here in plain torch with the
checkpoint's parameter names (``load_state_dict`` is strict):

* ``wavlm_model``: WavLM Base+ on 16 kHz audio: 7 convolutions (512 channels, kernels 10, 3, 3, 3, 3, 2, 2,
  strides 5, 2, 2, 2, 2, 2, 2: 50 frames a second; a group norm after the first), layer norm, a projection to
  768, a grouped convolutional position embedding (kernel 128, 16 groups, weight-normalised), and 12
  post-norm transformer layers with WavLM's gated relative position bias (320 buckets, distance 800,
  computed in layer 0 and gated per layer);
* per axis: the softmax-weighted sum of the 13 hidden states (the input to layer 0 and each layer's output,
  ``layer_weights.<axis>``), averaged over the frames that are not padding, L2-normalised, then an MLP
  ``proj_layer.<axis>`` (the checkpoint's ``model_cfg``: number of layers, layer norm) to one number.

Axes: CE content enjoyment, CU content usefulness, PC production complexity, PQ production quality, each
predicted normalised and mapped back with the checkpoint's ``target_transform`` (``pred * std + mean``,
on the 1-10 scale of the annotations).

Preprocessing, as ``audiobox_aesthetics.infer.AesPredictor``: resample to 16 kHz with torchaudio's default
resampler (``desync.sinc_resample``), mix to mono, cut into 10 s chunks from the start (hop 10 s; the last
one zero-padded, its padding masked), score every chunk and average each axis over a clip's chunks weighted
by their real length / 10 s.

Reward: the mean of the chosen ``axes`` (default all four, as JavisBench's "Audiobox-Aesthetics (mean of
CE, CU, PC and PQ)"); details: each axis's (B,) ratings under its name and ``chunks`` (B,).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from flowrl.reward_models.base import RewardError, RewardOutput
from flowrl.reward_models.desync import sinc_resample
from flowrl.reward_models.loading import load_into, pick_device, resolve_file, strip_prefix
from flowrl.reward_models.media import unwrap_audio

AXES = ("CE", "CU", "PC", "PQ")
AXIS_NAMES = {
    "CE": "content enjoyment",
    "CU": "content usefulness",
    "PC": "production complexity",
    "PQ": "production quality",
}
MODEL_RATE = 16000
CHUNK_SECONDS = 10  # window and hop of make_inference_batch
HUB_ID = "facebook/audiobox-aesthetics"
CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_URL = "https://dl.fbaipublicfiles.com/audiobox-aesthetics/checkpoint.pt"
# model_cfg fields of the checkpoint that shape the heads (the encoder's sizes are fixed in the real code)
_HEAD_FIELDS = (
    "proj_num_layer",
    "proj_ln",
    "proj_act_fn",
    "proj_dropout",
    "nth_layer",
    "use_weighted_layer_sum",
    "normalize_embed",
    "output_dim",
)


@dataclasses.dataclass(frozen=True)
class AudioboxConfig:
    """Sizes; the defaults are the released model's (the heads' two are ``config.json``'s of the hub repo;
    the code's own defaults are ``proj_num_layer=1, proj_ln=False``: a checkpoint's ``model_cfg`` decides)."""

    conv_layers: tuple = ((512, 10, 5),) + ((512, 3, 2),) * 4 + ((512, 2, 2),) * 2  # (channels, kernel, stride)
    dim: int = 768
    ffn: int = 3072
    layers: int = 12
    heads: int = 12
    conv_pos: int = 128
    conv_pos_groups: int = 16
    num_buckets: int = 320
    max_distance: int = 800
    proj_num_layer: int = 5
    proj_ln: bool = True
    normalize_embed: bool = True


def _config(reward: str, config: AudioboxConfig | Mapping | None) -> AudioboxConfig:
    if config is None:
        return AudioboxConfig()
    if isinstance(config, AudioboxConfig):
        return config
    if not isinstance(config, Mapping):
        raise RewardError(f"{reward}: config must be a mapping of sizes, got {type(config).__name__}")
    known = {f.name for f in dataclasses.fields(AudioboxConfig)}
    values = dict(config)
    for key, value in values.items():
        if key not in known:
            raise RewardError(f"{reward}: config.{key} is not an Audiobox size; known: {', '.join(sorted(known))}")
        if key == "conv_layers":
            if (
                not isinstance(value, Sequence)
                or not value
                or any(not isinstance(c, Sequence) or len(c) != 3 for c in value)
            ):
                raise RewardError(f"{reward}: config.conv_layers must be a list of (channels, kernel, stride)")
            values[key] = tuple(tuple(int(v) for v in c) for c in value)
        elif key in ("proj_ln", "normalize_embed"):
            if not isinstance(value, bool):
                raise RewardError(f"{reward}: config.{key}={value!r}; expected a bool")
        elif isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise RewardError(f"{reward}: config.{key}={value!r}; expected a positive integer")
    return AudioboxConfig(**values)


# ------------------------------------------------------------------------------------------ the modules
class _ConvBlock(nn.Sequential):
    """conv (no bias), [dropout placeholder], [group norm in fp32 for the first], GELU: names ``0`` / ``2``."""

    def __init__(self, n_in: int, n_out: int, kernel: int, stride: int, group_norm: bool):
        layers: list[nn.Module] = [nn.Conv1d(n_in, n_out, kernel, stride=stride, bias=False), nn.Identity()]
        if group_norm:
            layers.append(nn.GroupNorm(n_out, n_out, affine=True))
        layers.append(nn.GELU())
        super().__init__(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        for layer in self:
            x = layer(x.float()).type_as(x) if isinstance(layer, nn.GroupNorm) else layer(x)
        return x


class _FeatureExtractor(nn.Module):
    def __init__(self, conv_layers: tuple):
        super().__init__()
        blocks, n_in = [], 1
        for i, (n_out, kernel, stride) in enumerate(conv_layers):
            blocks.append(_ConvBlock(n_in, n_out, kernel, stride, group_norm=i == 0))
            n_in = n_out
        self.conv_layers = nn.ModuleList(blocks)

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        x = wav.unsqueeze(1)  # (N, 1, T)
        for block in self.conv_layers:
            x = block(x)
        return x  # (N, C, frames)


class _WeightNormConv(nn.Module):
    """A grouped Conv1d whose weight is ``weight_g * weight_v / ||weight_v||`` (norm over all but the kernel
    axis: ``nn.utils.weight_norm(..., dim=2)``), with its ``weight_g`` / ``weight_v`` names."""

    def __init__(self, dim: int, kernel: int, groups: int):
        super().__init__()
        self.padding, self.groups = kernel // 2, groups
        self.weight_v = nn.Parameter(torch.randn(dim, dim // groups, kernel) * math.sqrt(4.0 / (kernel * dim)))
        self.weight_g = nn.Parameter(self.weight_v.detach().norm(dim=(0, 1), keepdim=True).clone())
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight_v * (self.weight_g / self.weight_v.norm(dim=(0, 1), keepdim=True))
        return F.conv1d(x, weight, self.bias, padding=self.padding, groups=self.groups)


class _PosConv(nn.Sequential):
    """``pos_conv``: the weight-normalised conv (``0``), SamePad (drop the last frame for an even kernel), GELU."""

    def __init__(self, dim: int, kernel: int, groups: int):
        super().__init__(_WeightNormConv(dim, kernel, groups))
        self.trim = 1 if kernel % 2 == 0 else 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        x = self[0](x)
        return F.gelu(x[..., : x.shape[-1] - self.trim])


class _GatedAttention(nn.Module):
    """WavLM's self-attention with a gated relative position bias (fairseq ``MultiheadAttention`` with
    ``gru_rel_pos``): the bias of the first layer is gated by each layer's own ``grep_linear`` / ``grep_a``
    from the layer's input."""

    def __init__(self, dim: int, heads: int, num_buckets: int, max_distance: int, has_bias: bool):
        super().__init__()
        self.heads, self.num_buckets, self.max_distance = heads, num_buckets, max_distance
        self.k_proj, self.v_proj = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.q_proj, self.out_proj = nn.Linear(dim, dim), nn.Linear(dim, dim)
        if has_bias:
            self.relative_attention_bias = nn.Embedding(num_buckets, heads)
        self.grep_linear = nn.Linear(dim // heads, 8)
        self.grep_a = nn.Parameter(torch.ones(1, heads, 1, 1))

    def buckets(self, length: int, device: torch.device) -> torch.Tensor:
        """(L, L) bucket of each (query, key) offset: exact below a quarter of the buckets, log-spaced to
        ``max_distance`` above, half the buckets for each direction."""
        pos = torch.arange(length, device=device)
        rel = pos[None, :] - pos[:, None]  # key - query
        half = self.num_buckets // 2
        out = (rel > 0).long() * half
        rel = rel.abs()
        exact = half // 2
        far = (
            exact
            + (
                torch.log(rel.clamp(min=1).float() / exact) / math.log(self.max_distance / exact) * (half - exact)
            ).long()
        )
        far = far.clamp(max=half - 1)
        return out + torch.where(rel < exact, rel, far)

    def base_bias(self, length: int, device: torch.device) -> torch.Tensor:
        return self.relative_attention_bias(self.buckets(length, device)).permute(2, 0, 1)[None]  # (1, H, L, L)

    def forward(
        self, x: torch.Tensor, pad: torch.Tensor, bias: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n, length, dim = x.shape
        h, d = self.heads, dim // self.heads
        if bias is None:
            bias = self.base_bias(length, x.device)
        heads_in = x.reshape(n, length, h, d).transpose(1, 2)  # (N, H, L, d): the gates read the layer input
        gate_a, gate_b = torch.sigmoid(self.grep_linear(heads_in).reshape(n, h, length, 2, 4).sum(-1)).chunk(2, dim=-1)
        gated = (gate_a * (gate_b * self.grep_a - 1.0) + 2.0) * bias  # (N, H, L, L)
        mask = gated.masked_fill(pad[:, None, None, :], float("-inf"))

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(n, length, h, d).transpose(1, 2)

        out = F.scaled_dot_product_attention(
            split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x)), attn_mask=mask.to(x.dtype)
        )
        return self.out_proj(out.transpose(1, 2).reshape(n, length, dim)), bias


class _EncoderLayer(nn.Module):
    """Post-norm: x = LN(x + attn(x)); x = LN(x + fc2(gelu(fc1(x))))."""

    def __init__(self, cfg: AudioboxConfig, first: bool):
        super().__init__()
        self.self_attn = _GatedAttention(cfg.dim, cfg.heads, cfg.num_buckets, cfg.max_distance, has_bias=first)
        self.self_attn_layer_norm = nn.LayerNorm(cfg.dim)
        self.fc1, self.fc2 = nn.Linear(cfg.dim, cfg.ffn), nn.Linear(cfg.ffn, cfg.dim)
        self.final_layer_norm = nn.LayerNorm(cfg.dim)

    def forward(
        self, x: torch.Tensor, pad: torch.Tensor, bias: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        attn, bias = self.self_attn(x, pad, bias)
        x = self.self_attn_layer_norm(x + attn)
        x = self.final_layer_norm(x + self.fc2(F.gelu(self.fc1(x).float()).type_as(x)))
        return x, bias


class _Encoder(nn.Module):
    def __init__(self, cfg: AudioboxConfig):
        super().__init__()
        self.pos_conv = _PosConv(cfg.dim, cfg.conv_pos, cfg.conv_pos_groups)
        self.layers = nn.ModuleList([_EncoderLayer(cfg, first=i == 0) for i in range(cfg.layers)])
        self.layer_norm = nn.LayerNorm(cfg.dim)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> list[torch.Tensor]:
        """(N, L, D) frames, (N, L) padding -> the layers' hidden states: the input to layer 0, then each output."""
        x = x.masked_fill(pad[..., None], 0.0)
        x = self.layer_norm(x + self.pos_conv(x.transpose(1, 2)).transpose(1, 2))
        states, bias = [x], None
        for layer in self.layers:
            x, bias = layer(x, pad, bias)
            states.append(x)
        return states


class WavLM(nn.Module):
    """16 kHz audio (N, T) with a padding mask (N, T) -> ``layers + 1`` hidden states (N, frames, D) and the
    frames' padding (N, frames)."""

    def __init__(self, cfg: AudioboxConfig):
        super().__init__()
        channels = cfg.conv_layers[-1][0]
        self.feature_extractor = _FeatureExtractor(cfg.conv_layers)
        self.layer_norm = nn.LayerNorm(channels)
        if channels != cfg.dim:
            self.post_extract_proj = nn.Linear(channels, cfg.dim)
        self.mask_emb = nn.Parameter(torch.zeros(cfg.dim).uniform_())  # training-time masking only
        self.encoder = _Encoder(cfg)

    def forward(self, wav: torch.Tensor, pad: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        x = self.layer_norm(self.feature_extractor(wav).transpose(1, 2))  # (N, frames, C)
        frames = x.shape[1]
        extra = pad.shape[1] % frames  # fairseq's forward_padding_mask: drop the tail, a frame is padding
        pad = pad[:, : pad.shape[1] - extra] if extra else pad  # when all of its samples are
        pad = pad.reshape(len(pad), frames, -1).all(-1)
        if hasattr(self, "post_extract_proj"):
            x = self.post_extract_proj(x)
        return self.encoder(x, pad), pad


def _mlp(dim: int, layers: int, layer_norm: bool) -> nn.Sequential:
    """``create_mlp_block``: (Linear dim->dim, [LayerNorm], GELU) x (layers - 1), then Linear dim->1."""
    parts: list[nn.Module] = []
    for _ in range(layers - 1):
        parts += [nn.Linear(dim, dim)] + ([nn.LayerNorm(dim)] if layer_norm else []) + [nn.GELU()]
    return nn.Sequential(*parts, nn.Linear(dim, 1))


class AudioboxAesthetics(nn.Module):
    """``AesMultiOutput``: ``forward(wav (N, T), valid (N, T) bool) -> {axis: (N,)}`` normalised predictions."""

    def __init__(self, config: AudioboxConfig | Mapping | None = None):
        super().__init__()
        self.config = cfg = _config("audiobox_aesthetics", config)
        if cfg.dim % cfg.heads or cfg.dim % cfg.conv_pos_groups:
            raise RewardError(
                f"audiobox_aesthetics: config.dim={cfg.dim} must be a multiple of config.heads="
                f"{cfg.heads} and config.conv_pos_groups={cfg.conv_pos_groups}"
            )
        self.wavlm_model = WavLM(cfg)
        self.proj_layer = nn.ModuleDict({a: _mlp(cfg.dim, cfg.proj_num_layer, cfg.proj_ln) for a in AXES})
        states = cfg.layers + 1  # nth_layer
        self.layer_weights = nn.ParameterDict({a: nn.Parameter(torch.ones(states) / states) for a in AXES})

    def forward(self, wav: torch.Tensor, valid: torch.Tensor) -> dict[str, torch.Tensor]:
        states, pad = self.wavlm_model(wav, ~valid)
        stacked = torch.stack(states, dim=-1)  # (N, frames, D, layers + 1)
        keep = (~pad).unsqueeze(-1).to(stacked.dtype)  # (N, frames, 1)
        preds = {}
        for axis in AXES:
            embed = stacked @ self.layer_weights[axis].softmax(dim=-1).to(stacked.dtype)  # (N, frames, D)
            embed = (embed * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1)
            if self.config.normalize_embed:
                embed = F.normalize(embed, dim=-1)
            preds[axis] = self.proj_layer[axis](embed).squeeze(-1)
        return preds


# ----------------------------------------------------------------------------------- preprocessing
def chunk_audio(
    mono: list[torch.Tensor], rate: int = MODEL_RATE, seconds: int = CHUNK_SECONDS
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``make_inference_batch``: clips (N_i,) at ``rate`` -> chunks (K, L) zero-padded to ``seconds``, their
    valid-sample masks (K, L), weights (K,) = real length / L and owners (K,) = the clip index."""
    length = seconds * rate
    chunks, masks, weights, owners = [], [], [], []
    for index, wave in enumerate(mono):
        for start in range(0, wave.shape[-1], length):
            piece = wave[start : start + length]
            mask = torch.zeros(length, dtype=torch.bool)
            mask[: len(piece)] = True
            chunks.append(F.pad(piece, (0, length - len(piece))))
            masks.append(mask)
            weights.append(len(piece) / length)
            owners.append(index)
    return torch.stack(chunks), torch.stack(masks), torch.tensor(weights, dtype=torch.float64), torch.tensor(owners)


def _axes(reward: str, axes: Any) -> tuple[str, ...]:
    """``axes``: one name, a comma-separated string or a list of CE / CU / PC / PQ."""
    if isinstance(axes, str):
        axes = [a.strip() for a in axes.split(",") if a.strip()]
    if not isinstance(axes, Sequence) or not axes or any(not isinstance(a, str) for a in axes):
        raise RewardError(f"{reward}: axes={axes!r}; expected a list of {', '.join(AXES)}")
    for axis in axes:
        if axis not in AXES:
            raise RewardError(f"{reward}: axes has {axis!r}; allowed: {', '.join(AXES)}")
    if len(set(axes)) != len(axes):
        raise RewardError(f"{reward}: axes={list(axes)!r} names an axis twice")
    return tuple(axes)


def _target_transform(reward: str, transform: Any, where: str) -> dict[str, tuple[float, float]]:
    if not isinstance(transform, Mapping):
        raise RewardError(f"{reward}: {where} holds no target_transform (per-axis mean and std)")
    out = {}
    for axis in AXES:
        entry = transform.get(axis)
        try:
            mean, std = float(entry["mean"]), float(entry["std"])
        except (TypeError, KeyError, ValueError) as exc:
            raise RewardError(f"{reward}: {where}: target_transform.{axis} needs numbers 'mean' and 'std'") from exc
        if not (math.isfinite(mean) and math.isfinite(std)) or std <= 0:
            raise RewardError(
                f"{reward}: {where}: target_transform.{axis} = mean {mean}, std {std}; expected finite, std > 0"
            )
        out[axis] = (mean, std)
    return out


def _head_config(reward: str, cfg: AudioboxConfig, model_cfg: Any, where: str) -> AudioboxConfig:
    """The sizes with the heads as a checkpoint's ``model_cfg`` (or ``config.json``) describes them."""
    if not isinstance(model_cfg, Mapping):
        return cfg
    got = {k: model_cfg[k] for k in _HEAD_FIELDS if k in model_cfg}
    if got.get("proj_act_fn", "gelu") != "gelu":
        raise RewardError(f"{reward}: {where}: proj_act_fn={got['proj_act_fn']!r}; only 'gelu' exists in the real code")
    if int(got.get("output_dim", 1)) != 1:
        raise RewardError(f"{reward}: {where}: output_dim={got['output_dim']!r}; expected 1")
    if not got.get("use_weighted_layer_sum", True):
        raise RewardError(f"{reward}: {where}: use_weighted_layer_sum=False is not supported")
    if "nth_layer" in got and int(got["nth_layer"]) != cfg.layers + 1:
        raise RewardError(
            f"{reward}: {where}: nth_layer={got['nth_layer']!r} but the encoder has {cfg.layers} layers "
            f"(expected {cfg.layers + 1})"
        )
    changes = {}
    if "proj_num_layer" in got:
        changes["proj_num_layer"] = int(got["proj_num_layer"])
    for key in ("proj_ln", "normalize_embed"):
        if key in got:
            changes[key] = bool(got[key])
    return dataclasses.replace(cfg, **changes)


def _looks_like_path(spec: str) -> bool:
    return (
        spec.startswith((".", "/", "~"))
        or spec.endswith((".pt", ".pth", ".ckpt", ".safetensors"))
        or spec.count("/") != 1
    )


def load_checkpoint(
    reward: str, spec: str, config: AudioboxConfig | Mapping | None
) -> tuple[AudioboxAesthetics, dict[str, tuple[float, float]]]:
    """A model and its target transform from ``checkpoint.pt`` (``state_dict`` with ``model.`` keys,
    ``model_cfg``, ``target_transform``), a folder or ``.safetensors`` of the hub format (``config.json`` +
    ``model.safetensors``), ``repo::filename``, or a hub id (its ``checkpoint.pt``)."""
    spec = os.path.expanduser(str(spec))
    if os.path.isdir(spec):
        if os.path.isfile(os.path.join(spec, CHECKPOINT_FILE)):
            path = Path(spec, CHECKPOINT_FILE)
        elif os.path.isfile(os.path.join(spec, "model.safetensors")):
            path = Path(spec, "model.safetensors")
        else:
            raise RewardError(f"{reward}: folder {spec!r} holds neither {CHECKPOINT_FILE} nor model.safetensors")
    elif os.path.isfile(spec) or "::" in spec:
        path = resolve_file(spec, reward, "checkpoint")
    elif _looks_like_path(spec):
        raise RewardError(
            f"{reward}: checkpoint {spec!r} does not exist; give a local checkpoint.pt "
            f"({CHECKPOINT_URL}), a folder, 'hub_repo::filename' or a hub id such as {HUB_ID!r}"
        )
    else:
        path = resolve_file(f"{spec}::{CHECKPOINT_FILE}", reward, "checkpoint")
    cfg = _config(reward, config)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        cfg_path = path.with_name("config.json")
        if not cfg_path.is_file():
            raise RewardError(f"{reward}: {str(path)!r} has no config.json next to it (the target transform is there)")
        try:
            meta = json.loads(cfg_path.read_text())
            state = load_file(str(path))
        except Exception as exc:
            raise RewardError(
                f"{reward}: cannot read {str(path)!r} ({type(exc).__name__}: {exc})".splitlines()[0]
            ) from exc
        transform, model_cfg = meta.get("target_transform") if isinstance(meta, Mapping) else None, meta
    else:
        try:
            ckpt = torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception as exc:
            raise RewardError(
                f"{reward}: cannot read {str(path)!r} ({type(exc).__name__}: {exc})".splitlines()[0]
            ) from exc
        if not isinstance(ckpt, Mapping) or not isinstance(ckpt.get("state_dict"), Mapping):
            raise RewardError(f"{reward}: {str(path)!r} holds no 'state_dict' (expected Audiobox's checkpoint.pt)")
        state = strip_prefix(dict(ckpt["state_dict"]), "model.")
        transform, model_cfg = ckpt.get("target_transform"), ckpt.get("model_cfg")
    target = _target_transform(reward, transform, repr(str(path)))
    model = AudioboxAesthetics(_head_config(reward, cfg, model_cfg, repr(str(path))))
    load_into(model, state, reward, "Audiobox-Aesthetics")
    return model, target


class AudioboxAestheticsReward:
    """Mean of the chosen Audiobox-Aesthetics axes (see the module docstring)."""

    name = "audiobox_aesthetics"
    modality = "audio"
    score_range = None  # a regressor: about 1-10, not bounded

    def __init__(
        self,
        checkpoint: str = HUB_ID,
        axes: str | list[str] = "CE,CU,PC,PQ",
        sample_rate: int | None = None,
        config: dict | None = None,
        device: str | None = None,
        chunk_batch: int = 8,
    ):
        if not isinstance(checkpoint, (str, os.PathLike)) or not str(checkpoint):
            raise RewardError(f"{self.name}: checkpoint={checkpoint!r}; expected a path, 'repo::filename' or a hub id")
        axes = _axes(self.name, axes)  # the options before any weights load
        self._check_options(sample_rate, chunk_batch)
        model, target = load_checkpoint(self.name, str(checkpoint), config)
        self._setup(model, target, axes, sample_rate, device, chunk_batch)

    @classmethod
    def from_components(
        cls,
        model: AudioboxAesthetics,
        target_transform: Mapping,
        axes: str | list[str] = AXES,
        sample_rate: int | None = None,
        device: str | None = None,
        chunk_batch: int = 8,
    ) -> AudioboxAestheticsReward:
        """A reward around a ready model and its ``{axis: {"mean", "std"}}`` (e.g. a tiny random one in tests)."""
        reward = cls.__new__(cls)
        target = _target_transform(cls.name, target_transform, "target_transform")
        reward._setup(model, target, _axes(cls.name, axes), sample_rate, device, chunk_batch)
        return reward

    def _check_options(self, sample_rate, chunk_batch) -> None:
        if isinstance(chunk_batch, bool) or not isinstance(chunk_batch, int) or chunk_batch < 1:
            raise RewardError(f"{self.name}: chunk_batch={chunk_batch!r}; expected a positive integer")
        if sample_rate is not None and (
            isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or sample_rate <= 0
        ):
            raise RewardError(f"{self.name}: sample_rate={sample_rate!r}; expected a positive integer")

    def _setup(self, model, target, axes, sample_rate, device, chunk_batch) -> None:
        self._check_options(sample_rate, chunk_batch)
        if not isinstance(model, AudioboxAesthetics):
            raise RewardError(f"{self.name}: model must be an AudioboxAesthetics, got {type(model).__name__}")
        self.device = pick_device(device)
        self.model = model.to(self.device).eval().requires_grad_(False)
        self.target, self.axes = dict(target), axes
        self.sample_rate, self.chunk_batch = sample_rate, chunk_batch

    def mono_16k(self, media: Any) -> list[torch.Tensor]:
        """Each clip resampled to 16 kHz (per channel, as the reference) and mixed to mono: (N_i,) each."""
        wave, rate = unwrap_audio(self.name, media, self.sample_rate)  # (B, C, N)
        if wave.shape[-1] == 0:
            raise RewardError(f"{self.name}: the audio is empty")
        if not torch.isfinite(wave).all():
            raise RewardError(f"{self.name}: the audio holds NaN or inf")
        return list(sinc_resample(wave, rate, MODEL_RATE).mean(dim=1))

    @torch.no_grad()
    def rate(self, media: Any) -> dict[str, torch.Tensor]:
        """Each axis's ratings (B,), float64, on the annotation scale."""
        mono = self.mono_16k(media)
        chunks, masks, weights, owners = chunk_audio(mono)
        preds: dict[str, list[torch.Tensor]] = {a: [] for a in AXES}
        for start in range(0, len(chunks), self.chunk_batch):
            stop = start + self.chunk_batch
            out = self.model(chunks[start:stop].to(self.device), masks[start:stop].to(self.device))
            for axis in AXES:
                preds[axis].append(out[axis].double().cpu())
        ratings = {}
        for axis in AXES:
            mean, std = self.target[axis]
            per_chunk = torch.cat(preds[axis]) * std + mean  # the inverse of the target normalisation
            total = torch.zeros(len(mono), dtype=torch.float64).index_add_(0, owners, per_chunk * weights)
            ratings[axis] = total / torch.zeros(len(mono), dtype=torch.float64).index_add_(0, owners, weights)
        ratings["chunks"] = torch.bincount(owners, minlength=len(mono))
        return ratings

    def __call__(self, media: Any, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        ratings = self.rate(media)
        scores = torch.stack([ratings[a] for a in self.axes]).mean(dim=0).float()
        details = {a: ratings[a].float() for a in AXES}
        details["chunks"] = ratings["chunks"]
        return RewardOutput(scores=scores, details=details)
