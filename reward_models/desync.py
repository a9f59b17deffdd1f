"""DeSync: Synchformer's audio-visual offset classifier as a reward (``-DeSync`` or P(offset 0)).

Media: ``{"video": (B, F, 3, H, W) in [0, 1], "audio": (B, C, N) in [-1, 1], "fps": float, "sample_rate": int}``
(missing rates come from the ``fps`` / ``sample_rate`` arguments).

Synchformer (v-iashin/Synchformer, the checkpoint MMAudio releases as ``synchformer_state_dict.pth``; the
evaluation code of av-benchmark and JavisBench) has four parts, all rebuilt here in plain torch with the
checkpoint's parameter names (``load_state_dict`` is strict):

* ``vfeat_extractor``: Motionformer, a ViT-B/16 with divided space-time attention over 16-frame segments of
  224 px frames (a 2 x 16 x 16 tubelet embedding: 8 x 14 x 14 tokens), whose per-frame tokens are pooled by
  a transformer-encoder layer with a CLS token: (segment, 8, 768);
* ``afeat_extractor``: AST over the 128-bin log-mel spectrogram of 0.64 s of 16 kHz audio (66 frames,
  16 x 16 patches at stride 10: 12 x 6 tokens), frequency pooled the same way: (segment, 6, 768);
* ``vproj`` / ``aproj`` (linear) and ``transformer``: 3 blocks over ``[OFF, 14 x 8 video, MOD, 14 x 6
  audio]`` tokens with a learned position embedding of 198, and ``off_head``: 21 classes, offsets
  -2.0 .. +2.0 s in 0.2 s steps.

Preprocessing, as the reference pipelines (MMAudio ``eval_utils.load_video``, av-benchmark, JavisBench):

* video: frames picked at 25 fps (the source frame nearest to each 1/25 s, as ffmpeg's fps filter), rounded
  to uint8, resized (shorter side 224, bicubic, antialiased) and centre-cropped to 224 with torchvision,
  scaled to [0, 1] and normalised with mean = std = 0.5;
* audio: mono mix, resampled to 16 kHz with torchaudio's windowed-sinc resampler (``sinc_resample``), cut to
  the video's duration;
* segments: 16 frames every 8 (0.64 s every 0.32 s) and 10240 samples every 5120; each audio segment's
  mel spectrogram (n_fft 1024, window 400, hop 160, power 2, HTK mel scale, no filter normalisation, as
  ``torchaudio.transforms.MelSpectrogram``), ``log(x + 1e-6)``, padded to 66 frames with 0, then
  ``(x + 4.2677393) / (2 * 4.5689974)``;
* windows of 14 segments (4.8 s). ``windows="first_last"`` (av-benchmark, default): the first and the last
  14 segments of the clip (the same window twice for a 4.8 s clip); ``windows="all"`` (JavisBench):
  consecutive windows of 14, the last one moved back to end with the clip. A clip shorter than 4.8 s has
  fewer than 14 segments: its segments are repeated from the first one to fill the window (JavisBench's
  padding; av-benchmark cannot score such clips). A clip shorter than one segment (0.64 s) is an error.

Score: per window the predicted class is the argmax of the 21 logits; ``DeSync`` = the mean over the
clip's windows of ``|offset|`` in seconds and the reward is ``-DeSync`` in [-2, 0] (``score="neg_desync"``,
0 for a clip predicted in sync). ``score="prob_zero"``: the mean over windows of the softmax probability of
the zero-offset class, in [0, 1]. Details: ``desync`` (B,), ``prob_zero`` (B,) and ``windows`` (B,).

``synchformer_sync`` is the same scorer as a plain function for ``av_sync``'s ``scorer`` slot.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from flowrl.reward_models.base import RewardError, RewardOutput, check_choice
from flowrl.reward_models.loading import load_into, load_state_dict, pick_device, resolve_file, strip_prefix

# --------------------------------------------------------------------------------------------- constants
SYNC_FPS = 25.0  # video frame rate of every Synchformer input
SYNC_RATE = 16000  # audio sample rate
SYNC_SIZE = 224  # frame side after resize + centre crop
SEGMENT_FRAMES, SEGMENT_FRAME_STEP = 16, 8  # 0.64 s of video every 0.32 s
SEGMENT_SAMPLES, SEGMENT_SAMPLE_STEP = 10240, 5120  # 0.64 s of audio every 0.32 s
WINDOW_SEGMENTS = 14  # segments per classified window: 4.8 s
VIDEO_MEAN, VIDEO_STD = 0.5, 0.5  # Motionformer's normalisation (all three channels)
MEL_N_FFT, MEL_WIN, MEL_HOP, MEL_BINS = 1024, 400, 160, 128
SPEC_FRAMES = 66  # AST's max_spec_t: 65 mel frames of a segment padded to 66
LOG_EPS = 1e-6
AST_MEAN, AST_STD = -4.2677393, 4.5689974  # AST's AudioSet statistics; Synchformer divides by 2 * std
TEMPORAL_PATCH = 2  # Motionformer's tubelet depth: 16 frames -> 8 time tokens
AST_PATCH, AST_STRIDE = 16, 10
NUM_OFFSETS, MAX_OFFSET = 21, 2.0
# the class grid of av-benchmark's make_class_grid(-2, 2, 21): np.linspace in float64, then float32
OFFSET_GRID = torch.from_numpy(np.linspace(-MAX_OFFSET, MAX_OFFSET, NUM_OFFSETS)).float()  # class 10 is exactly 0
ZERO_CLASS = NUM_OFFSETS // 2
CHECKPOINT_URL = "https://github.com/hkchengrex/MMAudio/releases/download/v0.1/synchformer_state_dict.pth"


@dataclasses.dataclass(frozen=True)
class SynchformerConfig:
    """Sizes of the three parts; the defaults are the released checkpoint's. The timing (16-frame
    segments, 66 mel frames, 14-segment windows, 21 classes) is fixed: the position embeddings depend on it."""

    image_size: int = SYNC_SIZE
    patch_size: int = 16
    video_dim: int = 768
    video_depth: int = 12
    video_heads: int = 12
    video_mlp_ratio: int = 4
    audio_dim: int = 768
    audio_depth: int = 12
    audio_heads: int = 12
    audio_ffn: int = 3072
    dim: int = 768  # the sync transformer
    depth: int = 3
    heads: int = 8

    @property
    def time_tokens(self) -> int:
        return SEGMENT_FRAMES // TEMPORAL_PATCH  # 8 per video segment

    @property
    def freq_tokens(self) -> int:
        return (MEL_BINS - AST_PATCH) // AST_STRIDE + 1  # 12

    @property
    def audio_time_tokens(self) -> int:
        return (SPEC_FRAMES - AST_PATCH) // AST_STRIDE + 1  # 6 per audio segment

    @property
    def sequence(self) -> int:
        """Tokens of the sync transformer: OFF + 14 x 8 video + MOD + 14 x 6 audio = 198."""
        return 2 + WINDOW_SEGMENTS * (self.time_tokens + self.audio_time_tokens)


def _config(reward: str, config: SynchformerConfig | Mapping | None) -> SynchformerConfig:
    if config is None:
        return SynchformerConfig()
    if isinstance(config, SynchformerConfig):
        return config
    if not isinstance(config, Mapping):
        raise RewardError(f"{reward}: config must be a mapping of sizes, got {type(config).__name__}")
    known = {f.name for f in dataclasses.fields(SynchformerConfig)}
    for key, value in config.items():
        if key not in known:
            raise RewardError(f"{reward}: config.{key} is not a Synchformer size; known: {', '.join(sorted(known))}")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise RewardError(f"{reward}: config.{key}={value!r}; expected a positive integer")
    return SynchformerConfig(**config)


# ------------------------------------------------------------------------------------------ the modules
class _CLSPooling(nn.TransformerEncoderLayer):
    """A pre-norm encoder layer that prepends a learned CLS token and returns its output (Synchformer's
    ``BaseEncoderLayer``): (N, L, D) -> (N, D). Parameter names are torch's (``self_attn.in_proj_weight``,
    ``linear1``, ``norm1`` ...) plus ``cls_token``."""

    def __init__(self, dim: int, heads: int, ffn: int):
        super().__init__(
            d_model=dim,
            nhead=heads,
            dim_feedforward=ffn,
            dropout=0.0,
            activation=nn.GELU(),
            layer_norm_eps=1e-6,
            batch_first=True,
            norm_first=True,
        )
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        nn.init.trunc_normal_(self.cls_token, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        x = torch.cat([self.cls_token.expand(len(x), -1, -1), x], dim=1)
        return super().forward(x)[:, 0]


class _Patch2d(nn.Module):
    """Motionformer's 2-D patch embedding: in the checkpoint, unused in the forward (the 3-D one is used)."""

    def __init__(self, patch: int, dim: int):
        super().__init__()
        self.proj = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)


class _Patch3d(nn.Module):
    """Tubelets of TEMPORAL_PATCH frames x patch x patch pixels: (N, 3, T, H, W) -> (N, T/2 * h * w, D)."""

    def __init__(self, patch: int, dim: int):
        super().__init__()
        self.proj = nn.Conv3d(3, dim, kernel_size=(TEMPORAL_PATCH, patch, patch), stride=(TEMPORAL_PATCH, patch, patch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class _Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class _DividedAttention(nn.Module):
    """Attention within groups of tokens (one frame's patches, or one patch's frames), as Motionformer's
    ``DividedAttention``: the CLS query attends to every token; each group's queries attend to the group
    and the CLS key/value. ``x``: (N, 1 + frames * patches, D)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv, self.proj = nn.Linear(dim, dim * 3), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, frames: int, patches: int, over: Literal["time", "space"]) -> torch.Tensor:
        n, length, dim = x.shape
        h, d = self.heads, dim // self.heads
        q, k, v = (
            t.reshape(n, length, h, d).transpose(1, 2).reshape(n * h, length, d) for t in self.qkv(x).chunk(3, dim=-1)
        )
        q = q * self.scale  # scaled once, before the CLS split (as the reference)
        cls_out = F.scaled_dot_product_attention(q[:, :1], k, v, scale=1.0)  # (nh, 1, d)

        def grouped(t: torch.Tensor) -> torch.Tensor:  # (nh, f * p, d) -> (nh * groups, group, d)
            t = t[:, 1:].reshape(n * h, frames, patches, d)
            if over == "time":  # groups: one patch position across the frames
                t = t.transpose(1, 2)
            return t.reshape(-1, t.shape[2], d)

        groups = patches if over == "time" else frames
        cls_k = k[:, :1].repeat_interleave(groups, dim=0)
        cls_v = v[:, :1].repeat_interleave(groups, dim=0)
        out = F.scaled_dot_product_attention(
            grouped(q), torch.cat([cls_k, grouped(k)], dim=1), torch.cat([cls_v, grouped(v)], dim=1), scale=1.0
        )
        if over == "time":
            out = out.reshape(n * h, patches, frames, d).transpose(1, 2)
        out = out.reshape(n * h, frames * patches, d)
        out = torch.cat([cls_out, out], dim=1).reshape(n, h, length, d).transpose(1, 2).reshape(n, length, dim)
        return self.proj(out)


class _DividedBlock(nn.Module):
    """Time attention (``timeattn``, ``norm3``), then space attention (``attn``, ``norm1``), then the MLP."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int):
        super().__init__()
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(dim, eps=1e-6) for _ in range(3))
        self.attn, self.timeattn = _DividedAttention(dim, heads), _DividedAttention(dim, heads)
        self.mlp = _Mlp(dim, dim * mlp_ratio)

    def forward(self, x: torch.Tensor, frames: int, patches: int) -> torch.Tensor:
        x = x + self.timeattn(self.norm3(x), frames, patches, "time")
        x = x + self.attn(self.norm1(x), frames, patches, "space")
        return x + self.mlp(self.norm2(x))


class MotionFormer(nn.Module):
    """Video segments (N, 3, 16, S, S) in Motionformer's normalisation -> (N, 8, D) per-frame-pair features."""

    def __init__(self, cfg: SynchformerConfig):
        super().__init__()
        dim, side = cfg.video_dim, cfg.image_size // cfg.patch_size
        self.side, self.frames = side, cfg.time_tokens
        self.patch_embed = _Patch2d(cfg.patch_size, dim)
        self.patch_embed_3d = _Patch3d(cfg.patch_size, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, side * side + 1, dim))  # spatial, shared by the frames
        self.temp_embed = nn.Parameter(torch.zeros(1, self.frames, dim))  # one per time token
        for p in (self.cls_token, self.pos_embed, self.temp_embed):
            nn.init.trunc_normal_(p, std=0.02)
        self.blocks = nn.ModuleList(
            [_DividedBlock(dim, cfg.video_heads, cfg.video_mlp_ratio) for _ in range(cfg.video_depth)]
        )
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.spatial_attn_agg = _CLSPooling(dim, cfg.video_heads, dim * cfg.video_mlp_ratio)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = len(x)
        patches = self.side * self.side
        x = self.patch_embed_3d(x)  # (N, 8 * p, D), time-major
        pos = self.pos_embed[:, 1:].repeat(1, self.frames, 1) + self.temp_embed.repeat_interleave(patches, dim=1)
        x = torch.cat([self.cls_token.expand(n, -1, -1), x], dim=1) + torch.cat([self.pos_embed[:, :1], pos], dim=1)
        for block in self.blocks:
            x = block(x, self.frames, patches)
        x = self.norm(x[:, 1:])  # (N, 8 * p, D) without the CLS token
        x = self.spatial_attn_agg(x.reshape(n * self.frames, patches, -1))  # pool each time step's patches
        return x.reshape(n, self.frames, -1)


class _ASTSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, length, dim = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(n, length, self.heads, dim // self.heads).transpose(1, 2)

        out = F.scaled_dot_product_attention(split(self.query(x)), split(self.key(x)), split(self.value(x)))
        return out.transpose(1, 2).reshape(n, length, dim)


class _Dense(nn.Module):
    def __init__(self, dim_in: int, dim_out: int):
        super().__init__()
        self.dense = nn.Linear(dim_in, dim_out)


class _ASTAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.attention, self.output = _ASTSelfAttention(dim, heads), _Dense(dim, dim)


class _ASTLayer(nn.Module):
    """The ViT layer of transformers' AST (names ``attention.attention.query`` ... ``layernorm_after``)."""

    def __init__(self, dim: int, heads: int, ffn: int):
        super().__init__()
        self.attention = _ASTAttention(dim, heads)
        self.intermediate, self.output = _Dense(dim, ffn), _Dense(ffn, dim)
        self.layernorm_before = nn.LayerNorm(dim, eps=1e-12)
        self.layernorm_after = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention.output.dense(self.attention.attention(self.layernorm_before(x)))
        return x + self.output.dense(F.gelu(self.intermediate.dense(self.layernorm_after(x))))


class _ASTPatches(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.projection = nn.Conv2d(1, dim, kernel_size=AST_PATCH, stride=AST_STRIDE)


class _ASTEmbeddings(nn.Module):
    def __init__(self, dim: int, tokens: int):
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.distillation_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.patch_embeddings = _ASTPatches(dim)
        self.position_embeddings = nn.Parameter(torch.zeros(1, tokens + 2, dim))
        for p in (self.cls_token, self.distillation_token, self.position_embeddings):
            nn.init.trunc_normal_(p, std=0.02)

    def forward(self, spec: torch.Tensor) -> torch.Tensor:
        """(N, T=66, F=128) -> (N, 2 + 12 * 6, D): patches over (frequency, time), frequency-major."""
        x = self.patch_embeddings.projection(spec.unsqueeze(1).transpose(2, 3)).flatten(2).transpose(1, 2)
        n = len(x)
        x = torch.cat([self.cls_token.expand(n, -1, -1), self.distillation_token.expand(n, -1, -1), x], dim=1)
        return x + self.position_embeddings


class _ASTEncoder(nn.Module):
    def __init__(self, dim: int, heads: int, ffn: int, depth: int):
        super().__init__()
        self.layer = nn.ModuleList([_ASTLayer(dim, heads, ffn) for _ in range(depth)])


class _ASTModel(nn.Module):
    """transformers' ``ASTModel`` (its parameter names), position embeddings cut to 66 frames."""

    def __init__(self, cfg: SynchformerConfig):
        super().__init__()
        self.embeddings = _ASTEmbeddings(cfg.audio_dim, cfg.freq_tokens * cfg.audio_time_tokens)
        self.encoder = _ASTEncoder(cfg.audio_dim, cfg.audio_heads, cfg.audio_ffn, cfg.audio_depth)
        self.layernorm = nn.LayerNorm(cfg.audio_dim, eps=1e-12)

    def forward(self, spec: torch.Tensor) -> torch.Tensor:
        x = self.embeddings(spec)
        for layer in self.encoder.layer:
            x = layer(x)
        return self.layernorm(x)


class AST(nn.Module):
    """Audio segments (N, 66, 128) log-mel -> (N, 6, D): AST tokens pooled over frequency per time step."""

    def __init__(self, cfg: SynchformerConfig):
        super().__init__()
        self.freq, self.time = cfg.freq_tokens, cfg.audio_time_tokens
        self.ast = _ASTModel(cfg)
        self.freq_attn_agg = _CLSPooling(cfg.audio_dim, cfg.audio_heads, cfg.audio_ffn)

    def forward(self, spec: torch.Tensor) -> torch.Tensor:
        n = len(spec)
        x = self.ast(spec)[:, 2:]  # (N, 12 * 6, D) without the CLS and distillation tokens
        x = x.reshape(n, self.freq, self.time, -1).transpose(1, 2)  # (N, t, f, D)
        return self.freq_attn_agg(x.reshape(n * self.time, self.freq, -1)).reshape(n, self.time, -1)


class _SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.key, self.query, self.value = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, length, dim = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(n, length, self.heads, dim // self.heads).transpose(1, 2)

        out = F.scaled_dot_product_attention(split(self.query(x)), split(self.key(x)), split(self.value(x)))
        return self.proj(out.transpose(1, 2).reshape(n, length, dim))


class _Block(nn.Module):
    """minGPT's pre-norm block (``ln1``, ``attn``, ``ln2``, ``mlp.0`` / ``mlp.2``)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = _SelfAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(0.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class _PosEmb(nn.Module):
    def __init__(self, length: int, dim: int):
        super().__init__()
        self.pos_emb = nn.Parameter(torch.randn(1, length, dim) * 0.02)


class GlobalTransformer(nn.Module):
    """``[OFF, video..., MOD, audio...]`` -> 21 offset logits from the OFF token."""

    def __init__(self, cfg: SynchformerConfig):
        super().__init__()
        dim = cfg.dim
        self.vis_in_lnorm, self.aud_in_lnorm = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.OFF_tok = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.MOD_tok = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_emb_cfg = _PosEmb(cfg.sequence, dim)  # the checkpoint's (odd) name
        self.blocks = nn.Sequential(*[_Block(dim, cfg.heads) for _ in range(cfg.depth)])
        self.ln_f = nn.LayerNorm(dim)
        self.off_head = nn.Linear(dim, NUM_OFFSETS)

    def forward(self, video: torch.Tensor, audio: torch.Tensor) -> torch.Tensor:
        n = len(video)
        x = torch.cat(
            [
                self.OFF_tok.expand(n, -1, -1),
                self.vis_in_lnorm(video),
                self.MOD_tok.expand(n, -1, -1),
                self.aud_in_lnorm(audio),
            ],
            dim=1,
        )
        if x.shape[1] != self.pos_emb_cfg.pos_emb.shape[1]:
            raise RewardError(
                f"desync: {x.shape[1]} tokens for a position embedding of "
                f"{self.pos_emb_cfg.pos_emb.shape[1]} (a window must be {WINDOW_SEGMENTS} segments)"
            )
        x = self.ln_f(self.blocks(x + self.pos_emb_cfg.pos_emb))
        return self.off_head(x[:, 0])


class Synchformer(nn.Module):
    """The whole model; ``state_dict()`` keys are those of ``synchformer_state_dict.pth``."""

    def __init__(self, config: SynchformerConfig | Mapping | None = None):
        super().__init__()
        self.config = cfg = _config("desync", config)
        if cfg.image_size % cfg.patch_size:
            raise RewardError(
                f"desync: config.image_size={cfg.image_size} is not a multiple of config.patch_size={cfg.patch_size}"
            )
        for dim, heads, what in (
            (cfg.video_dim, cfg.video_heads, "video"),
            (cfg.audio_dim, cfg.audio_heads, "audio"),
            (cfg.dim, cfg.heads, ""),
        ):
            if dim % heads:
                prefix = f"{what}_" if what else ""
                raise RewardError(f"desync: config.{prefix}dim={dim} is not a multiple of config.{prefix}heads={heads}")
        self.vfeat_extractor = MotionFormer(cfg)
        self.afeat_extractor = AST(cfg)
        self.vproj = nn.Linear(cfg.video_dim, cfg.dim)
        self.aproj = nn.Linear(cfg.audio_dim, cfg.dim)
        self.transformer = GlobalTransformer(cfg)

    def video_features(self, segments: torch.Tensor) -> torch.Tensor:
        """(N, 16, 3, S, S) normalised frames -> (N, 8, Dv)."""
        return self.vfeat_extractor(segments.permute(0, 2, 1, 3, 4))

    def audio_features(self, spec: torch.Tensor) -> torch.Tensor:
        """(N, 128, 66) normalised log-mel -> (N, 6, Da)."""
        return self.afeat_extractor(spec.transpose(1, 2))

    def compare(self, video: torch.Tensor, audio: torch.Tensor) -> torch.Tensor:
        """Windows of segment features (W, 14, 8, Dv) and (W, 14, 6, Da) -> (W, 21) offset logits."""
        v = self.vproj(video).flatten(1, 2)
        a = self.aproj(audio).flatten(1, 2)
        return self.transformer(v, a)


# ----------------------------------------------------------------------------------- preprocessing
def sinc_resample(wave: torch.Tensor, rate: int, target: int, width: int = 6, rolloff: float = 0.99) -> torch.Tensor:
    """(..., N) at ``rate`` -> (..., ceil(N * target / rate)) at ``target``: torchaudio's default
    ``functional.resample`` (a windowed-sinc filter with a squared-cosine (Hann) window of ``width`` zero
    crossings, cut-off ``rolloff`` x the lower Nyquist), which Synchformer's and Audiobox's pipelines use."""
    if rate == target:
        return wave
    gcd = math.gcd(int(rate), int(target))
    up, down = int(target) // gcd, int(rate) // gcd  # output / input samples per period
    cutoff = min(up, down) * rolloff
    half = math.ceil(width * down / cutoff)  # filter half-length in input samples
    dtype = wave.dtype if wave.is_floating_point() else torch.float32
    # output phase j sits at j / up input periods; tap i of a phase at input sample i - half (in periods: / down)
    taps = torch.arange(-half, half + down, dtype=dtype, device=wave.device)[None, None] / down
    t = (torch.arange(0, -up, -1, dtype=dtype, device=wave.device)[:, None, None] / up + taps) * cutoff
    t = t.clamp(-width, width)
    window = torch.cos(t * math.pi / width / 2) ** 2
    t = t * math.pi
    kernel = torch.where(t == 0, torch.ones_like(t), torch.sin(t) / t) * window * (cutoff / down)  # (up, 1, taps)
    shape = wave.shape
    flat = F.pad(wave.reshape(-1, 1, shape[-1]).to(dtype), (half, half + down))
    out = F.conv1d(flat, kernel, stride=down).transpose(1, 2).reshape(flat.shape[0], -1)
    length = math.ceil(up * shape[-1] / down)
    return out[:, :length].reshape(*shape[:-1], -1)


def mel_filterbank(n_freqs: int = MEL_N_FFT // 2 + 1, n_mels: int = MEL_BINS, rate: int = SYNC_RATE) -> torch.Tensor:
    """(n_freqs, n_mels) triangular filters, HTK mel scale, 0 Hz to Nyquist, no normalisation (the
    defaults of ``torchaudio.transforms.MelSpectrogram``)."""
    freqs = torch.linspace(0, rate // 2, n_freqs)

    def to_mel(hz: float) -> float:
        return 2595.0 * math.log10(1.0 + hz / 700.0)

    mels = torch.linspace(to_mel(0.0), to_mel(rate / 2), n_mels + 2)
    edges = 700.0 * (10 ** (mels / 2595.0) - 1.0)  # (n_mels + 2,) filter edges in Hz
    gaps = edges[1:] - edges[:-1]
    slopes = edges[None, :] - freqs[:, None]  # (n_freqs, n_mels + 2)
    rising = -slopes[:, :-2] / gaps[:-1]
    falling = slopes[:, 2:] / gaps[1:]
    return torch.clamp(torch.minimum(rising, falling), min=0.0)


def log_mel(segments: torch.Tensor) -> torch.Tensor:
    """(N, 10240) audio segments at 16 kHz -> (N, 128, 66) normalised log-mel, as Synchformer's input."""
    window = torch.hann_window(MEL_WIN, device=segments.device)
    spec = (
        torch.stft(
            segments.float(),
            n_fft=MEL_N_FFT,
            hop_length=MEL_HOP,
            win_length=MEL_WIN,
            window=window,
            center=True,
            pad_mode="reflect",
            return_complex=True,
        )
        .abs()
        .pow(2)
    )  # (N, 513, 65)
    mel = torch.matmul(spec.transpose(1, 2), mel_filterbank().to(spec.device)).transpose(1, 2)
    mel = torch.log(mel + LOG_EPS)
    mel = F.pad(mel, (0, SPEC_FRAMES - mel.shape[-1])) if mel.shape[-1] < SPEC_FRAMES else mel[..., :SPEC_FRAMES]
    return (mel - AST_MEAN) / (2 * AST_STD)


def frame_indices(
    num_frames: int, fps: float, target_fps: float = SYNC_FPS, seconds: float | None = None
) -> torch.Tensor:
    """Source frame per output frame at ``target_fps``: the one nearest to each ``k / target_fps`` (ffmpeg's
    fps filter rounds to the nearest; MMAudio's PyAV reader takes the first at or after, at most one apart)."""
    duration = num_frames / fps if seconds is None else seconds
    count = math.floor(duration * target_fps + 1e-6)
    index = torch.floor(torch.arange(count, dtype=torch.float64) * fps / target_fps + 0.5).long()
    return index.clamp(max=num_frames - 1)


def prepare_frames(frames: torch.Tensor, size: int = SYNC_SIZE) -> torch.Tensor:
    """(T, 3, H, W) float in [0, 1] -> (T, 3, size, size) float, Synchformer-normalised: uint8 rounding,
    torchvision's ``Resize(size)`` (shorter side, bicubic, antialiased) and ``CenterCrop(size)`` on uint8."""
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.v2 import functional as TF

    pixels = (frames.detach().float() * 255).round().clamp(0, 255).to(torch.uint8)
    pixels = TF.resize(pixels, [size], interpolation=InterpolationMode.BICUBIC, antialias=True)
    pixels = TF.center_crop(pixels, [size, size])
    return (pixels.float() / 255 - VIDEO_MEAN) / VIDEO_STD


def segment_count(frames: int, samples: int) -> int:
    """Segments both streams hold (the shorter one's count; 0 when under one segment)."""
    video = (frames - SEGMENT_FRAMES) // SEGMENT_FRAME_STEP + 1 if frames >= SEGMENT_FRAMES else 0
    audio = (samples - SEGMENT_SAMPLES) // SEGMENT_SAMPLE_STEP + 1 if samples >= SEGMENT_SAMPLES else 0
    return min(video, audio)


def window_indices(num_segments: int, windows: str = "first_last") -> list[list[int]]:
    """The segment indices of each 14-segment window of a clip of ``num_segments`` (see the module docstring)."""
    if num_segments < 1:
        raise RewardError("desync: a clip needs at least one segment (0.64 s) to be scored")
    if num_segments < WINDOW_SEGMENTS:  # too short: repeat the segments from the first (JavisBench)
        return [[i % num_segments for i in range(WINDOW_SEGMENTS)]]
    last = num_segments - WINDOW_SEGMENTS
    if windows == "first_last":
        starts = [0, last]
    elif windows == "all":
        starts = list(range(0, last + 1, WINDOW_SEGMENTS))
        if starts[-1] != last:
            starts.append(last)
    else:
        raise RewardError(f"desync: windows={windows!r}; allowed: first_last, all")
    return [list(range(s, s + WINDOW_SEGMENTS)) for s in starts]


# --------------------------------------------------------------------------------------------- the reward
Score = Literal["neg_desync", "prob_zero"]
Windows = Literal["first_last", "all"]


class DeSyncReward:
    """``-DeSync`` (or P(offset 0)) from Synchformer; see the module docstring."""

    name = "desync"
    modality = "audio_video"
    reads_prompt = False  # pure audio-visual sync: AV-GRPO refuses it as a phase's only reward

    def __init__(
        self,
        checkpoint: str | None = None,
        score: Score = "neg_desync",
        windows: Windows = "first_last",
        max_seconds: float | None = None,
        fps: float | None = None,
        sample_rate: int | None = None,
        config: dict | None = None,
        device: str | None = None,
        segment_batch: int = 16,
    ):
        self._check_options(score, windows, max_seconds, fps, sample_rate, segment_batch)  # before any weights load
        if checkpoint is None:
            raise RewardError(
                f"{self.name}: needs checkpoint=PATH to synchformer_state_dict.pth (MMAudio's release: "
                f"{CHECKPOINT_URL})"
            )
        if not isinstance(checkpoint, (str, os.PathLike)):
            raise RewardError(f"{self.name}: checkpoint={checkpoint!r}; expected a path to synchformer_state_dict.pth")
        if "::" not in str(checkpoint) and not os.path.isfile(checkpoint):
            raise RewardError(
                f"{self.name}: checkpoint {str(checkpoint)!r} does not exist; download "
                f"synchformer_state_dict.pth from {CHECKPOINT_URL}"
            )
        model = Synchformer(config)
        path = resolve_file(checkpoint, self.name, "Synchformer checkpoint")
        state = strip_prefix(load_state_dict(path, self.name), "module.")
        load_into(model, state, self.name, "Synchformer")
        self._setup(model, score, windows, max_seconds, fps, sample_rate, device, segment_batch)

    @classmethod
    def from_components(
        cls,
        model: Synchformer,
        score: Score = "neg_desync",
        windows: Windows = "first_last",
        max_seconds: float | None = None,
        fps: float | None = None,
        sample_rate: int | None = None,
        device: str | None = None,
        segment_batch: int = 16,
    ) -> DeSyncReward:
        """A reward around a ready ``Synchformer`` (e.g. a tiny random one in tests)."""
        reward = cls.__new__(cls)
        reward._setup(model, score, windows, max_seconds, fps, sample_rate, device, segment_batch)
        return reward

    def _check_options(self, score, windows, max_seconds, fps, sample_rate, segment_batch) -> None:
        check_choice(self.name, "score", score, ("neg_desync", "prob_zero"))
        check_choice(self.name, "windows", windows, ("first_last", "all"))
        if max_seconds is not None and (
            isinstance(max_seconds, bool)
            or not isinstance(max_seconds, (int, float))
            or not math.isfinite(max_seconds)
            or max_seconds <= 0
        ):
            raise RewardError(f"{self.name}: max_seconds={max_seconds!r}; expected a positive number of seconds")
        if isinstance(segment_batch, bool) or not isinstance(segment_batch, int) or segment_batch < 1:
            raise RewardError(f"{self.name}: segment_batch={segment_batch!r}; expected a positive integer")
        for arg, value in (("fps", fps), ("sample_rate", sample_rate)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0
            ):
                raise RewardError(f"{self.name}: {arg}={value!r}; expected a positive number")

    def _setup(self, model, score, windows, max_seconds, fps, sample_rate, device, segment_batch) -> None:
        self._check_options(score, windows, max_seconds, fps, sample_rate, segment_batch)
        if not isinstance(model, Synchformer):
            raise RewardError(f"{self.name}: model must be a Synchformer, got {type(model).__name__}")
        self.device = pick_device(device)
        self.model = model.to(self.device).eval().requires_grad_(False)
        self.score, self.windows, self.max_seconds = score, windows, max_seconds
        self.fps, self.sample_rate, self.segment_batch = fps, sample_rate, segment_batch
        self.score_range = (-MAX_OFFSET, 0.0) if score == "neg_desync" else (0.0, 1.0)

    # ------------------------------------------------------------------------------------ inputs
    def _unpack(self, media: Any) -> tuple[torch.Tensor, torch.Tensor, float, int]:
        if not isinstance(media, Mapping) or "video" not in media or "audio" not in media:
            raise RewardError(
                f"{self.name}: expects media {{'video': (B, F, 3, H, W), 'audio': (B, C, N), 'fps', 'sample_rate'}}"
            )
        video, audio = media["video"], media["audio"]
        if not isinstance(video, torch.Tensor) or video.ndim != 5 or video.shape[2] != 3:
            shape = tuple(video.shape) if isinstance(video, torch.Tensor) else type(video).__name__
            raise RewardError(f"{self.name}: video must be (B, F, 3, H, W), got {shape}")
        if not isinstance(audio, torch.Tensor) or audio.ndim not in (2, 3):
            shape = tuple(audio.shape) if isinstance(audio, torch.Tensor) else type(audio).__name__
            raise RewardError(f"{self.name}: audio must be (B, C, N) or (B, N), got {shape}")
        audio = audio if audio.ndim == 3 else audio[:, None]
        if len(video) != len(audio):
            raise RewardError(f"{self.name}: {len(video)} videos but {len(audio)} audio clips")
        fps, rate = media.get("fps", self.fps), media.get("sample_rate", self.sample_rate)
        for arg, value in (("fps", fps), ("sample_rate", rate)):
            if value is None:
                raise RewardError(f"{self.name}: {arg} is unknown; put it in the media mapping or pass {arg}=")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise RewardError(f"{self.name}: {arg}={value!r}; expected a positive number")
        if int(rate) != rate:
            raise RewardError(f"{self.name}: sample_rate={rate!r}; expected a whole number of Hz")
        for what, x in (("video", video), ("audio", audio)):
            if not x.is_floating_point() or not torch.isfinite(x).all():
                raise RewardError(f"{self.name}: the {what} must be finite floats")
        return video, audio, float(fps), int(rate)

    def clip_inputs(
        self, video: torch.Tensor, audio: torch.Tensor, fps: float, rate: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One clip, (F, 3, H, W) and (C, N) -> segments (S, 16, 3, s, s) and log-mels (S, 128, 66)."""
        seconds = min(video.shape[0] / fps, audio.shape[-1] / rate)
        if self.max_seconds is not None:
            seconds = min(seconds, float(self.max_seconds))
        frames = prepare_frames(
            video[frame_indices(video.shape[0], fps, seconds=seconds)], self.model.config.image_size
        )
        mono = sinc_resample(audio.float().mean(dim=0), rate, SYNC_RATE)
        mono = mono[: math.floor(seconds * SYNC_RATE + 1e-6)]
        count = segment_count(len(frames), len(mono))
        if count < 1:
            raise RewardError(
                f"{self.name}: a clip of {seconds:.2f} s is shorter than one Synchformer segment "
                f"({SEGMENT_FRAMES / SYNC_FPS:.2f} s)"
            )
        starts = torch.arange(count)
        vid = torch.stack([frames[s * SEGMENT_FRAME_STEP : s * SEGMENT_FRAME_STEP + SEGMENT_FRAMES] for s in starts])
        aud = torch.stack([mono[s * SEGMENT_SAMPLE_STEP : s * SEGMENT_SAMPLE_STEP + SEGMENT_SAMPLES] for s in starts])
        return vid, log_mel(aud)

    @torch.no_grad()
    def features(self, segments: torch.Tensor, mels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-segment features, ``segment_batch`` segments a call: (S, 8, Dv) and (S, 6, Da)."""
        vf, af = [], []
        for start in range(0, len(segments), self.segment_batch):
            stop = start + self.segment_batch
            vf.append(self.model.video_features(segments[start:stop].to(self.device)))
            af.append(self.model.audio_features(mels[start:stop].to(self.device)))
        return torch.cat(vf), torch.cat(af)

    @torch.no_grad()
    def window_logits(self, media: Any) -> list[torch.Tensor]:
        """Each clip's (windows, 21) offset logits."""
        video, audio, fps, rate = self._unpack(media)
        out = []
        for clip, sound in zip(video, audio):
            vf, af = self.features(*self.clip_inputs(clip, sound, fps, rate))
            index = torch.tensor(window_indices(len(vf), self.windows), device=vf.device)  # (W, 14)
            out.append(self.model.compare(vf[index], af[index]).float().cpu())
        return out

    def __call__(self, media: Any, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        logits = self.window_logits(media)
        desync = torch.stack([OFFSET_GRID[w.argmax(dim=-1)].abs().mean() for w in logits])
        prob_zero = torch.stack([w.softmax(dim=-1)[:, ZERO_CLASS].mean() for w in logits])
        scores = -desync if self.score == "neg_desync" else prob_zero
        details = {"desync": desync, "prob_zero": prob_zero, "windows": torch.tensor([len(w) for w in logits])}
        return RewardOutput(scores=scores.float(), details=details)


_SCORERS: dict[tuple, DeSyncReward] = {}


def synchformer_sync(
    video: torch.Tensor,
    audio: torch.Tensor,
    fps: float,
    sample_rate: int,
    checkpoint: str | None = None,
    score: Score = "neg_desync",
    windows: Windows = "first_last",
    config: dict | None = None,
    device: str | None = None,
) -> torch.Tensor:
    """``av_sync``'s scorer slot: ``scorer: flowrl.reward_models.desync:synchformer_sync`` with ``checkpoint``
    among its arguments. The model is loaded once per (checkpoint, score, windows, config, device)."""
    key = (str(checkpoint), score, windows, repr(sorted((config or {}).items())), device)
    if key not in _SCORERS:
        _SCORERS[key] = DeSyncReward(checkpoint=checkpoint, score=score, windows=windows, config=config, device=device)
    media = {"video": video, "audio": audio, "fps": fps, "sample_rate": sample_rate}
    return _SCORERS[key](media, [""] * len(video), [{} for _ in range(len(video))]).scores
