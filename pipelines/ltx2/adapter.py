"""LTX-2 (joint text-to-audio+video) adapter, built from ``LTX2Pipeline``'s public pieces.

What differs from the one-tensor families (``flowrl.pipelines.sd3``, ``wan``), and how the adapter keeps the
pipeline's own math:

* **Latents are a mapping of two named tensors**, ``{"video": (B, N_v, C_v), "audio": (B, L, C_a)}``, batch
  first, fp32: exactly the packed token sequences ``LTX2Pipeline``'s denoising loop steps and its transformer
  takes (LTX-2: ``C_v = 128`` channels per token, ``N_v = F' H' W'`` with ``F' = 1 + (F - 1)/8``,
  ``H' = H/32``, ``W' = W/32``, patch 1, frame-major; ``C_a = 8 x 16 = 128``, ``L = round(25 F / fps)``
  audio latent frames). They are in the loop's *normalised* space (the space the transformer's inputs live
  in): fresh noise from ``prepare_latents`` / ``prepare_audio_latents`` is used as it is (the pipeline does
  not normalise it); ``to_pipeline_latents`` unpacks and denormalises to what ``output_type="latent"``
  returns (``(B, 128, F', H', W')`` and ``(B, 8, L, 16)``, VAE space), ``from_pipeline_latents`` is its
  inverse (what the pipeline does to ``latents=`` / ``audio_latents=`` passed in 5-D / 4-D). The packed layout
  is chosen because it is the loop's own: every state, noise and velocity is the transformer's input/output
  without a reshape, and the ODE / SDE steps are elementwise anyway. Keys are ``MODALITIES = ("video",
  "audio")``; ``velocity`` returns the same keys.
* **Media** is ``"audio_video"``: ``decode`` returns ``{"video": (B, F, 3, H, W) in [0, 1], "fps": float,
  "audio": (B, 2, N) in [-1, 1], "sample_rate": int}`` as the pipeline decodes (video: unpack,
  ``decode_timestep`` / ``decode_noise_scale`` where the VAE is timestep-conditioned, denormalise, VAE,
  ``postprocess_video(output_type="pt")``; audio: denormalise, unpack, audio VAE -> mel -> vocoder, 24 kHz
  stereo for LTX-2, ``N = 240 (4L - 3)``).
* **Sigmas** are the pipeline's: ``linspace(1, 1/T, T)``, exponential time shift with the dynamic ``mu =
  calculate_shift(N_v, ...)`` of the packed *video* token count and the scheduler config's bounds, then
  ``shift_terminal`` (the last non-zero sigma 0.1) and a final 0: sigma_0 is exactly 1. One schedule for both
  modalities (the pipeline steps the audio with a deep copy of the same scheduler). ``timestep = 1000 sigma``
  goes to both towers, ``sigma = timestep`` (the pipeline's LTX-2.3 prompt/cross modulation input) and
  ``use_cross_timestep=True``, as the pipeline calls it. ``velocity`` also takes per-modality sigmas ``{"video":
  s_v, "audio": s_a}``: the audio tower then gets ``audio_timestep = audio_sigma = 1000 s_a``.
* **Conditioning**: Gemma-3 through ``encode_prompt`` (all hidden states stacked), then the text connectors;
  what a row needs, and what the prompt cache holds per prompt, is the connectors' output: ``prompt_embeds``
  (video context ``(B, T, D)``), ``audio_prompt_embeds`` ``(B, T, D_a)`` and ``prompt_attention_mask`` ``(B, T)``
  (int64; all ones with the registers). Per-row negatives as SD3: ``negative_`` + each key. The connectors are
  row-independent, so caching rows equals the pipeline's batched ``[negatives, prompts]`` call.
* **Guidance** (``guidance(scale)``, ``Guidance.passes`` transformer rows a sample and velocity): guidance is on
  when ``sample.guidance_scale != 1``; at 1 the velocity is the conditional one alone (one pass), as
  ``LTX2Pipeline(**LTX2_UNGUIDED_CALL_KWARGS)`` samples. The pipeline combines its terms in x0 space (x0 = x -
  sigma v) at the same x and sigma; a linear combination of x0 predictions there is the same combination of
  velocities, so the velocity reproduces these exactly (up to float rounding) in velocity space:

  - CFG: ``guidance_scale`` for the video, ``audio_guidance_scale`` (constructor, default: the same scale) for
    the audio: ``v = v_c + (w - 1)(v_c - v_u)``; both branches in one batched forward (negatives first), 2 rows;
  - STG (constructor ``stg_scale`` > 0, ``audio_stg_scale`` default the same, ``stg_blocks`` the block indices):
    ``+ s (v_c - v_stg)``, the perturbed rows joined to the same forward (``perturbation_mask`` 0 on them),
    +1 row;
  - modality guidance (constructor ``modality_scale`` > 1, ``audio_modality_scale`` default the same):
    ``+ (m - 1)(v_c - v_iso)``, a second call of the model with ``isolate_modalities=True`` (it is per call,
    not per row), +1 row;
  - not reproduced: ``guidance_rescale`` / ``audio_guidance_rescale`` (they rescale by the std of the guided
    prediction: not linear), so ``generate`` passes 0 for them. Scales below 1 run CFG here but not in the
    pipeline (which guides only above 1); a 0 audio STG scale beside a non-zero video one is refused (the
    pipeline's ``audio_stg_scale or stg_scale`` cannot express it).
* **Towers**: ``tower_of(parameter_name)`` -> ``"video"``, ``"audio"``, ``"audio_to_video"``,
  ``"video_to_audio"`` or ``"shared"`` by module name (AV-GRPO's per-phase split): the a2v / v2a attentions with
  their gate embeddings are the two cross-modal groups; the cross-attention scale-shift tables and embeddings
  hold both directions' parameters, so they are ``"shared"``; ``audio_*`` modules are the audio tower; the rest
  the video tower.
* **LoRA** targets the attention projections (``to_q``, ``to_k``, ``to_v``, ``to_out.0``) of both towers'
  self-attention (``attn1``, ``audio_attn1``), text cross-attention (``attn2``, ``audio_attn2``) and the two
  cross-modal attentions (``audio_to_video_attn``, ``video_to_audio_attn``). ``save_lora`` writes
  ``pytorch_lora_weights.safetensors`` (``LTX2LoraLoaderMixin.save_lora_weights`` with the peft metadata), which
  ``LTX2Pipeline.load_lora_weights(folder)`` loads into the transformer.

``model.path``: ``tiny`` builds the offline tiny LTX-2 (``build_tiny_ltx2``); else a hub id or a local diffusers
folder (``LTX2Pipeline.from_pretrained``). ``model.height`` / ``model.width`` must be multiples of 32,
``model.num_frames`` 8k + 1 (default 121), ``model.fps`` defaults to 24, ``model.max_sequence_length`` a multiple
of the connectors' registers (128). ``model.tiny_size`` does not apply.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from flowrl.media import MediaKind
from flowrl.mesh import sequence_degree
from flowrl.pipelines.base import Conditioning, Guidance, GuidanceKind
from flowrl.pipelines.kit.adapter import CachedPromptAdapter, Draw, cast_parts, freeze_on
from flowrl.pipelines.kit.attention import set_dispatcher_attention_backend
from flowrl.pipelines.kit.loading import check_folder_or_hub, load_pretrained_pipeline
from flowrl.pipelines.kit.lora import load_run_export
from flowrl.pipelines.ltx2 import layout
from flowrl.pipelines.ltx2.layout import DEFAULT_FPS, DEFAULT_NUM_FRAMES

logger = logging.getLogger(__name__)

MODALITIES = ("video", "audio")
ATTENTIONS = ("attn1", "attn2", "audio_attn1", "audio_attn2", "audio_to_video_attn", "video_to_audio_attn")
# self-attention, text cross-attention (both towers) and the two cross-modal attentions of every block
LTX2_LORA_TARGETS = [f"{attn}.{proj}" for attn in ATTENTIONS for proj in ("to_q", "to_k", "to_v", "to_out.0")]
TRANSFORMER_CLASS = "LTX2VideoTransformer3DModel"
SPATIAL_MULTIPLE = 32  # LTX-2's video VAE: 32x spatial
TEMPORAL_MULTIPLE = 8  # and 8x temporal compression (causal first frame)
DECODE_CHUNK_ELEMENTS = 1 << 20  # video latent elements the VAEs decode at once (whole clips, at least one)
CONDITION_KEYS = ("prompt_embeds", "audio_prompt_embeds", "prompt_attention_mask")
TOWERS = ("video", "audio", "audio_to_video", "video_to_audio", "shared")

# Keyword arguments that make an ``LTX2Pipeline`` call a plain, single-pass sampler (no CFG, no STG, no
# modality guidance, no rescale). The pipeline's own defaults are the LTX-2.3 recipe: guidance_scale 3.0,
# audio_guidance_scale 7.0, stg_scale = audio_stg_scale = 1.0 on block 28, modality_scale 3.0 and
# guidance_rescale 0.7, i.e. three transformer calls per step (one of them on a doubled batch). Each audio_*
# value falls back to the video one when it is falsy (``audio_stg_scale or stg_scale``), so 0.0 for audio
# alone does not switch audio STG / rescale off.
LTX2_UNGUIDED_CALL_KWARGS = {
    "guidance_scale": 1.0,
    "audio_guidance_scale": 1.0,
    "stg_scale": 0.0,
    "audio_stg_scale": 0.0,
    "modality_scale": 1.0,
    "audio_modality_scale": 1.0,
    "guidance_rescale": 0.0,
    "audio_guidance_rescale": 0.0,
    "spatio_temporal_guidance_blocks": None,
}

# module names (top level, or within a transformer block) by group; everything else is by its "audio_" prefix
_CROSS_GROUPS = {
    "audio_to_video_attn": "audio_to_video",
    "av_cross_attn_video_a2v_gate": "audio_to_video",
    "video_to_audio_attn": "video_to_audio",
    "av_cross_attn_audio_v2a_gate": "video_to_audio",
    # the cross-attention modulation emits / holds both directions' scale and shift
    "av_cross_attn_video_scale_shift": "shared",
    "av_cross_attn_audio_scale_shift": "shared",
    "video_a2v_cross_attn_scale_shift_table": "shared",
    "audio_a2v_cross_attn_scale_shift_table": "shared",
}
_WRAPPER_PARTS = {"module", "_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module"}


def tower_of(parameter_name: str) -> str:
    """The group of a transformer parameter (or module) by its name: ``"video"``, ``"audio"``,
    ``"audio_to_video"``, ``"video_to_audio"`` or ``"shared"`` (the a2v / v2a scale-shift tables and embeddings,
    which hold both directions). DDP / FSDP / compile / checkpoint wrapper parts of the name are skipped; LoRA
    weights belong to the module they adapt."""
    parts = [p for p in parameter_name.split(".") if p not in _WRAPPER_PARTS]
    if not parts:
        raise ValueError(f"tower_of: empty parameter name {parameter_name!r}")
    local = parts[0]
    if local == "transformer_blocks":
        if len(parts) < 3:
            raise ValueError(f"tower_of: {parameter_name!r} names no module inside a transformer block")
        local = parts[2]
    if local in _CROSS_GROUPS:
        return _CROSS_GROUPS[local]
    return "audio" if local.startswith("audio_") else "video"


# ---------------------------------------------------------------------------------------------- checks, loading
def check_size(height: int, width: int, multiple: int = SPATIAL_MULTIPLE) -> None:
    for side, value in (("height", height), ("width", width)):
        if value % multiple:
            raise ValueError(f"model.{side}: LTX-2 needs a multiple of {multiple}, got {value}")


def check_num_frames(num_frames: int, temporal: int = TEMPORAL_MULTIPLE) -> None:
    if num_frames < 1 or (num_frames - 1) % temporal:
        raise ValueError(f"model.num_frames: LTX-2 needs {temporal}k + 1 frames (e.g. 9, 97, 121), got {num_frames}")


def check_model_path(model_cfg) -> None:
    """Refuse, before any model is built, a ``model.path`` that cannot load as an LTX-2 pipeline (a missing local
    path, a folder that is not a diffusers pipeline folder, a single file: not supported here), a size that is
    not a multiple of 32 and a ``model.num_frames`` that is not 8k + 1."""
    size = getattr(model_cfg, "size", None)
    if size is not None:
        check_size(*size)
    num_frames = getattr(model_cfg, "num_frames", None)
    if num_frames is not None:
        check_num_frames(num_frames)
    path = model_cfg.path
    if path == "tiny":
        return
    check_folder_or_hub(path, "ltx2", "LTX-2")


def load_ltx2_pipeline(path: str, dtype: str = "fp32", revision: str | None = None):
    """``LTX2Pipeline.from_pretrained`` from a hub id or a local folder, with a one-line error."""
    return load_pretrained_pipeline("LTX2Pipeline", path, dtype, revision)


# ---------------------------------------------------------------------------------------------- guidance plan
@dataclass(frozen=True)
class _Plan:
    """What one guided velocity runs: per-modality scales ``(video, audio)`` of each term (None: term off)."""

    cfg: tuple[float, float] | None
    stg: tuple[float, float] | None
    modality: tuple[float, float] | None

    @property
    def main_rows(self) -> int:  # rows per sample of the one batched forward
        return (2 if self.cfg else 1) + (1 if self.stg else 0)

    @property
    def passes(self) -> int:
        return self.main_rows + (1 if self.modality else 0)


def _plan_of(adapter, scale: float) -> _Plan:
    """The guidance terms at ``sample.guidance_scale = scale`` (all off at 1). Reads the adapter's options with
    defaults, so it also answers for a stand-in without them (``flowrl.estimate``)."""
    scale = float(scale)
    if scale == 1.0:
        return _Plan(None, None, None)
    audio_g = getattr(adapter, "audio_guidance_scale", None)
    stg = float(getattr(adapter, "stg_scale", 0.0))
    audio_stg = getattr(adapter, "audio_stg_scale", None)
    mod = float(getattr(adapter, "modality_scale", 1.0))
    audio_mod = getattr(adapter, "audio_modality_scale", None)
    stg_pair = (stg, stg if audio_stg is None else float(audio_stg))
    mod_pair = (mod, mod if audio_mod is None else float(audio_mod))
    return _Plan(
        cfg=(scale, scale if audio_g is None else float(audio_g)),
        stg=stg_pair if any(s != 0.0 for s in stg_pair) else None,
        modality=mod_pair if any(m != 1.0 for m in mod_pair) else None,
    )


class LTX2Adapter(CachedPromptAdapter):
    """LTX-2 for RL: latents ``{"video": (B, N_v, 128), "audio": (B, L, 128)}``. ``pipe`` is an ``LTX2Pipeline``;
    its transformer (both towers) is the policy."""

    lora_target_modules = LTX2_LORA_TARGETS
    check_model_path = staticmethod(check_model_path)
    tower_of = staticmethod(tower_of)
    media_kind = MediaKind.AUDIO_VIDEO
    tiny_recipe = "tiny-ltx2"
    pipeline_classes = ("LTX2Pipeline",)  # the model_index.json classes it loads
    modalities = MODALITIES

    def __init__(
        self,
        pipe,
        resolution: int | tuple[int, int] = (512, 768),
        num_frames: int | None = None,
        fps: float | None = None,
        max_sequence_length: int = 1024,
        device: torch.device | str = "cpu",
        vae_dtype: torch.dtype = torch.float32,
        prompt_cache: int = 1024,
        attention_backend: str | None = None,
        audio_guidance_scale: float | None = None,
        stg_scale: float = 0.0,
        audio_stg_scale: float | None = None,
        stg_blocks: list[int] | None = None,
        modality_scale: float = 1.0,
        audio_modality_scale: float | None = None,
        decode_timestep: float = 0.0,
        decode_noise_scale: float | None = None,
    ):
        from diffusers.pipelines.ltx2.utils import conditioning_frame_rate

        self.height, self.width = (resolution, resolution) if isinstance(resolution, int) else map(int, resolution)
        self.patch = int(pipe.transformer_spatial_patch_size)
        self.patch_t = int(pipe.transformer_temporal_patch_size)
        check_size(self.height, self.width, pipe.vae_spatial_compression_ratio * self.patch)
        self.num_frames = DEFAULT_NUM_FRAMES if num_frames is None else int(num_frames)
        check_num_frames(self.num_frames, pipe.vae_temporal_compression_ratio * self.patch_t)
        self.fps = DEFAULT_FPS if fps is None else float(fps)
        registers = getattr(pipe.connectors.config, "video_connector_num_learnable_registers", None)
        if registers and max_sequence_length % registers:
            raise ValueError(
                f"model.max_sequence_length: LTX-2's text connectors replace padding with {registers} "
                f"registers, so it must be a multiple of {registers}, got {max_sequence_length}"
            )
        self.max_sequence_length = int(max_sequence_length)
        self._set_guidance_options(
            audio_guidance_scale,
            stg_scale,
            audio_stg_scale,
            stg_blocks,
            modality_scale,
            audio_modality_scale,
            int(pipe.transformer.config.num_layers),
        )
        self.decode_timestep = float(decode_timestep)
        self.decode_noise_scale = self.decode_timestep if decode_noise_scale is None else float(decode_noise_scale)
        self.pipe = pipe
        self.device = torch.device(device)
        self.resolution = self.height if self.height == self.width else (self.height, self.width)
        decoders = ("vae", "audio_vae", "vocoder")
        freeze_on(pipe, self.device, vae_dtype, ("text_encoder", "connectors", *decoders), vaes=decoders)
        self._scheduler = copy.deepcopy(pipe.scheduler)  # sigmas are read from it, never stepped
        self._num_train_timesteps = float(self._scheduler.config.num_train_timesteps)
        self._start_prompt_cache(prompt_cache)
        self.compute_dtype = pipe.transformer.dtype  # ModelMixin.dtype walks every parameter: ask once
        self.text_dtype = pipe.text_encoder.dtype
        # the video latent grid and its packed tokens, as LTX2Pipeline.__call__ computes them
        self.video_channels = int(pipe.transformer.config.in_channels)
        grid = {"spatial": pipe.vae_spatial_compression_ratio, "temporal": pipe.vae_temporal_compression_ratio}
        self.latent_frames, self.latent_height, self.latent_width = layout.video_grid(
            self.num_frames, self.height, self.width, **grid
        )
        self.video_seq_len = layout.video_seq_len(
            self.num_frames, self.height, self.width, **grid, patch=self.patch, patch_t=self.patch_t
        )
        # the audio latents: L frames of (channels, mel bins / 4), packed (B, L, channels x mel bins / 4)
        self.audio_frames = layout.audio_latent_length(
            self.num_frames,
            self.fps,
            sample_rate=pipe.audio_sampling_rate,
            hop_length=pipe.audio_hop_length,
            compression=pipe.audio_vae_temporal_compression_ratio,
        )
        self.audio_channels = int(pipe.audio_vae.config.latent_channels)
        self.mel_bins = int(pipe.audio_vae.config.mel_bins)
        self.latent_mel_bins = self.mel_bins // pipe.audio_vae_mel_compression_ratio
        self.sample_rate = int(pipe.vocoder.config.output_sampling_rate)
        self.conditioning_fps = float(conditioning_frame_rate(self.fps, 1.0))
        self._set_attention(attention_backend, set_dispatcher_attention_backend)

    def _set_guidance_options(
        self,
        audio_guidance_scale,
        stg_scale,
        audio_stg_scale,
        stg_blocks,
        modality_scale,
        audio_modality_scale,
        num_layers: int,
    ) -> None:
        for name, video, audio in (
            ("audio_guidance_scale", 1.0, audio_guidance_scale),
            ("audio_stg_scale", stg_scale, audio_stg_scale),
            ("audio_modality_scale", modality_scale, audio_modality_scale),
        ):
            if audio is not None and audio == 0 and video != 0:  # LTX2Pipeline reads `audio_x or x`
                raise ValueError(
                    f"{name}=0: LTX2Pipeline falls back to the video value for a 0 audio scale; "
                    "leave it unset (the video's) or give a non-zero value"
                )
        self.audio_guidance_scale = None if audio_guidance_scale is None else float(audio_guidance_scale)
        self.stg_scale = float(stg_scale)
        self.audio_stg_scale = None if audio_stg_scale is None else float(audio_stg_scale)
        self.modality_scale = float(modality_scale)
        self.audio_modality_scale = None if audio_modality_scale is None else float(audio_modality_scale)
        self.stg_blocks = list(stg_blocks) if stg_blocks else None
        stg_on = self.stg_scale != 0.0 or (self.audio_stg_scale or 0.0) != 0.0
        if stg_on and not self.stg_blocks:
            raise ValueError(
                "stg_scale: spatio-temporal guidance needs stg_blocks, the transformer block indices "
                "whose self-attention it perturbs"
            )
        bad = [b for b in self.stg_blocks or [] if not 0 <= b < num_layers]
        if bad:
            raise ValueError(f"stg_blocks: {bad} are not blocks of this {num_layers}-block transformer")

    @classmethod
    def from_config(cls, model_cfg, device: torch.device | str = "cpu", seed: int = 0, **options) -> LTX2Adapter:
        """Build from ``ModelConfig``: ``path="tiny"`` builds the offline tiny LTX-2 (``build_tiny_ltx2``), else
        ``LTX2Pipeline.from_pretrained`` of a hub id or a local folder. ``options``: the constructor's guidance
        and decode options (STG, modality guidance, the audio CFG scale; all off by default)."""
        check_model_path(model_cfg)
        if model_cfg.path == "tiny":
            from flowrl.pipelines.ltx2.tiny import build_tiny_ltx2

            pipe = build_tiny_ltx2(seed=seed)
        else:
            pipe = load_ltx2_pipeline(model_cfg.path, model_cfg.dtype, model_cfg.revision)
        cast_parts(pipe, model_cfg.dtype, ("text_encoder", "connectors", "transformer"))
        return cls(
            pipe,
            model_cfg.size,
            model_cfg.num_frames,
            model_cfg.fps,
            model_cfg.max_sequence_length,
            device,
            prompt_cache=model_cfg.prompt_cache,
            attention_backend=getattr(model_cfg, "attention_backend", None),
            **options,
        )

    @property
    def sequence_parallel_plan(self) -> dict:
        """The context-parallel plan that splits both towers' tokens (``ltx2.parallel``; diffusers' own splits
        the video tokens only)."""
        from flowrl.pipelines.ltx2.parallel import av_plan

        return av_plan(self.transformer.config.rope_type)

    def _split_inputs(self, model: torch.nn.Module, xv: torch.Tensor, xa: torch.Tensor, inputs: Conditioning) -> None:
        """Under sequence parallelism (``train.sequence_parallel`` = S): check that S divides every token count
        the plan splits, and give ``model``'s cross-attentions their gathered keys (``ltx2.parallel``), once.
        Nothing to do when the transformer runs whole."""
        seq = sequence_degree(self.transformer)
        if seq == 1:
            return
        counts = {
            "video tokens (model.resolution, model.num_frames)": xv.shape[1],
            "audio latent frames (model.num_frames, model.fps)": xa.shape[1],
            "prompt tokens (model.max_sequence_length)": inputs["prompt_embeds"].shape[1],
        }
        for what, count in counts.items():
            if count % seq:
                raise ValueError(f"train.sequence_parallel={seq} does not divide LTX-2's {count} {what}")
        from flowrl.pipelines.ltx2.parallel import gather_cross_attention_keys

        gather_cross_attention_keys(model)

    def guidance(self, scale: float) -> Guidance:
        """Two-branch CFG (one batched forward) when ``scale != 1``, plus the STG rows and the modality pass the
        adapter was built with (each +1 row a sample); one pass, the conditional velocity, at 1."""
        plan = _plan_of(self, scale)
        return Guidance(GuidanceKind.CFG if plan.cfg else GuidanceKind.NONE, float(scale), plan.passes)

    # ------------------------------------------------------------------ conditioning
    @torch.no_grad()
    def _encode(self, prompts: list[str]) -> Conditioning:
        """The connectors' video and audio text contexts ``prompt_embeds`` / ``audio_prompt_embeds`` (B, T, D) and
        ``prompt_attention_mask`` (B, T) of ``prompts`` (``CONDITION_KEYS``)."""
        embeds, mask, _, _ = self.pipe.encode_prompt(
            prompt=prompts,
            do_classifier_free_guidance=False,
            max_sequence_length=self.max_sequence_length,
            device=self.device,
        )
        side = getattr(self.pipe.tokenizer, "padding_side", "left")
        video, audio, mask = self.pipe.connectors(embeds, mask, padding_side=side)
        return {"prompt_embeds": video, "audio_prompt_embeds": audio, "prompt_attention_mask": mask}

    # ------------------------------------------------------------------ sampling pieces
    def mu(self) -> float:
        """The dynamic shift of ``LTX2Pipeline.__call__``: ``calculate_shift`` of the packed video token count."""
        return layout.mu_of(self.video_seq_len, self._scheduler.config)

    def sigmas(self, num_steps: int) -> torch.Tensor:
        """The pipeline's schedule with ``num_steps`` transitions, for both modalities: (T+1,) fp32 from exactly 1
        (shifted by ``mu``, the last non-zero one stretched to ``shift_terminal``) to 0."""
        self._scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / num_steps, num_steps), device="cpu", mu=self.mu())
        return self._scheduler.sigmas.detach().float().cpu().clone()

    @property
    def latent_shapes(self) -> dict[str, tuple[int, int]]:
        """One sample's packed latents: video (N_v, 128), audio (L, 128)."""
        return {
            "video": (self.video_seq_len, self.video_channels * self.patch_t * self.patch**2),
            "audio": (self.audio_frames, self.audio_channels * self.latent_mel_bins),
        }

    def initial_noise(self, n: int, generator: torch.Generator | None) -> dict[str, torch.Tensor]:
        """Gaussian latents at sigma_0 = 1 through ``prepare_latents`` then ``prepare_audio_latents`` (the
        pipeline's order of draws from ``generator``), packed, fp32, not normalised (as the pipeline's fresh noise):
        ``{"video": (n, N_v, 128), "audio": (n, L, 128)}``."""
        video = self.pipe.prepare_latents(
            n, self.video_channels, self.height, self.width, self.num_frames, 0.0, torch.float32, self.device, generator
        )
        audio = self.pipe.prepare_audio_latents(
            n,
            num_channels_latents=self.audio_channels,
            audio_latent_length=self.audio_frames,
            num_mel_bins=self.mel_bins,
            noise_scale=0.0,
            dtype=torch.float32,
            device=self.device,
            generator=generator,
        )
        return {"video": video, "audio": audio}

    def to_pipeline_latents(self, latents: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Packed, normalised latents -> the pipeline's ``output_type="latent"`` (VAE space): ``{"video": (B, 128,
        F', H', W'), "audio": (B, 8, L, 16)}``, which ``LTX2Pipeline`` takes back as ``latents`` / ``audio_latents``."""
        p = self.pipe
        video = p._unpack_latents(
            latents["video"], self.latent_frames, self.latent_height, self.latent_width, self.patch, self.patch_t
        )
        video = p._denormalize_latents(video, p.vae.latents_mean, p.vae.latents_std, p.vae.config.scaling_factor)
        audio = p._denormalize_audio_latents(latents["audio"], p.audio_vae.latents_mean, p.audio_vae.latents_std)
        audio = p._unpack_audio_latents(audio, self.audio_frames, num_mel_bins=self.latent_mel_bins)
        return {"video": video, "audio": audio}

    def from_pipeline_latents(self, latents: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The inverse of ``to_pipeline_latents``: what the pipeline does to 5-D ``latents`` / 4-D ``audio_latents``."""
        p = self.pipe
        video = p._normalize_latents(
            latents["video"], p.vae.latents_mean, p.vae.latents_std, p.vae.config.scaling_factor
        )
        audio = p._normalize_audio_latents(
            p._pack_audio_latents(latents["audio"]), p.audio_vae.latents_mean, p.audio_vae.latents_std
        )
        return {"video": p._pack_latents(video, self.patch, self.patch_t).float(), "audio": audio.float()}

    def model_inputs(self, cond: Conditioning, guidance_scale: float) -> Conditioning:
        """Transformer-ready conditioning of the one batched forward: the contexts cast to the model dtype, with
        CFG the negative rows stacked before the prompt rows (each row's own negative where ``cond`` holds them,
        else the empty prompt), with STG the prompt rows once more (the perturbed rows)."""
        plan = _plan_of(self, guidance_scale)
        pos = {k: cond[k] for k in CONDITION_KEYS}
        n = pos["prompt_embeds"].shape[0]
        parts = [pos]
        if plan.cfg:
            if "negative_prompt_embeds" in cond:
                neg = {k: cond[f"negative_{k}"] for k in CONDITION_KEYS}
            else:
                neg = self.negative_conditioning(n)
            parts.insert(0, {k: v.to(pos[k].device) for k, v in neg.items()})
        if plan.stg:
            parts.append(pos)
        inputs = {k: torch.cat([p[k] for p in parts]) for k in CONDITION_KEYS}
        for k in ("prompt_embeds", "audio_prompt_embeds"):
            inputs[k] = inputs[k].to(self.compute_dtype)
        return inputs

    def _sigma_rows(self, sigma, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(n,) fp32 video and audio sigmas of a float, a (n,) tensor or ``{"video": ..., "audio": ...}``."""

        def rows(value):
            s = torch.as_tensor(value, dtype=torch.float32, device=self.device)
            return s.reshape(1).expand(n) if s.numel() == 1 else s.reshape(n)

        if isinstance(sigma, Mapping):
            return rows(sigma["video"]), rows(sigma["audio"])
        s = rows(sigma)
        return s, s

    def _forward(self, model, xv, xa, inputs, t_video, t_audio, isolate=False, perturbation_mask=None):
        stg = perturbation_mask is not None
        self._split_inputs(model, xv, xa, inputs)
        out = model(
            hidden_states=xv.to(self.compute_dtype),
            audio_hidden_states=xa.to(self.compute_dtype),
            encoder_hidden_states=inputs["prompt_embeds"],
            audio_encoder_hidden_states=inputs["audio_prompt_embeds"],
            timestep=t_video,
            audio_timestep=t_audio,
            sigma=t_video,  # LTX2Pipeline passes sigma = timestep (LTX-2.3 modulation)
            audio_sigma=t_audio,
            encoder_attention_mask=inputs["prompt_attention_mask"],
            audio_encoder_attention_mask=inputs["prompt_attention_mask"],
            num_frames=self.latent_frames,
            height=self.latent_height,
            width=self.latent_width,
            fps=self.conditioning_fps,
            audio_num_frames=self.audio_frames,
            isolate_modalities=isolate,
            spatio_temporal_guidance_blocks=self.stg_blocks if stg else None,
            perturbation_mask=perturbation_mask,
            use_cross_timestep=True,
            return_dict=False,
        )
        return out[0].float(), out[1].float()

    def velocity(
        self,
        x: Mapping[str, torch.Tensor],
        sigma: torch.Tensor | float | Mapping[str, torch.Tensor | float],
        inputs: Conditioning,
        guidance_scale: float,
        model: torch.nn.Module | None = None,
        isolate_modalities: bool = False,
        unguided: bool = False,
    ) -> dict[str, torch.Tensor]:
        """v(x, sigma | c) of both modalities (``isolate_modalities``: each tower without the other's
        cross-modal attention, as if the other modality were left out of the forward; ``unguided``: the
        conditional velocity alone, one pass, whatever ``guidance_scale`` says, with ``inputs`` from
        ``model_inputs(cond, 1.0)``, as AV-GRPO's code trains): ``x`` ``{"video": (B, N_v, 128), "audio":
        (B, L, 128)}``; ``sigma`` a float or (B,) (both modalities) or ``{"video": ..., "audio": ...}`` (each its
        own; the audio tower gets ``audio_timestep = audio_sigma = 1000 s_a``); returns the same keys, fp32.

        CFG branches (and STG's perturbed rows) in one call of ``model`` (default ``adapter.transformer``; pass its
        DDP/FSDP wrapper or a frozen reference copy); modality guidance adds a second call
        (``isolate_modalities=True``). Terms are combined in velocity space: ``v_c + (w - 1)(v_c - v_u) + s (v_c -
        v_stg) + (m - 1)(v_c - v_iso)`` per modality, exactly the pipeline's x0-space combination."""
        model = model or self.transformer
        xv, xa = x["video"], x["audio"]
        n = xv.shape[0]
        plan = _plan_of(self, 1.0 if unguided else guidance_scale)
        rows = plan.main_rows * n
        if inputs["prompt_embeds"].shape[0] != rows:
            raise ValueError(
                f"conditioning has {inputs['prompt_embeds'].shape[0]} rows for {n} latents; "
                f"build it with model_inputs(cond, guidance_scale={guidance_scale})"
            )
        sv, sa = self._sigma_rows(sigma, n)
        tv, ta = sv * self._num_train_timesteps, sa * self._num_train_timesteps
        k = plan.main_rows
        mask = None
        if plan.stg:
            mask = torch.ones(rows, dtype=self.compute_dtype, device=xv.device)
            mask[-n:] = 0.0  # the STG rows are the last n
        vv, va = self._forward(
            model,
            torch.cat([xv] * k) if k > 1 else xv,
            torch.cat([xa] * k) if k > 1 else xa,
            inputs,
            tv.repeat(k),
            ta.repeat(k),
            isolate=isolate_modalities,
            perturbation_mask=mask,
        )
        if plan.cfg is None:
            return {"video": vv, "audio": va}
        chunks_v, chunks_a = vv.split(n), va.split(n)
        cond_v, cond_a = chunks_v[1], chunks_a[1]
        out_v = cond_v + (plan.cfg[0] - 1.0) * (cond_v - chunks_v[0])
        out_a = cond_a + (plan.cfg[1] - 1.0) * (cond_a - chunks_a[0])
        if plan.stg:
            out_v = out_v + plan.stg[0] * (cond_v - chunks_v[2])
            out_a = out_a + plan.stg[1] * (cond_a - chunks_a[2])
        if plan.modality:
            pos = {key: value[n : 2 * n] for key, value in inputs.items()}
            iso_v, iso_a = self._forward(model, xv, xa, pos, tv, ta, isolate=True)
            out_v = out_v + (plan.modality[0] - 1.0) * (cond_v - iso_v)
            out_a = out_a + (plan.modality[1] - 1.0) * (cond_a - iso_a)
        return {"video": out_v, "audio": out_a}

    @torch.no_grad()
    def decode(self, latents: Mapping[str, torch.Tensor], generator: torch.Generator | None = None) -> dict:
        """Packed latents -> ``{"video": (B, F, 3, H, W) in [0, 1], "fps": float, "audio": (B, 2, N) in [-1, 1],
        "sample_rate": int}`` as ``LTX2Pipeline(output_type="pt")`` decodes, in chunks of whole clips of at most
        ``DECODE_CHUNK_ELEMENTS`` video latent elements. ``generator``: the decode noise of a timestep-conditioned
        VAE with ``decode_noise_scale > 0`` (not drawn otherwise)."""
        p = self.pipe
        vae, audio_vae = p.vae, p.audio_vae
        chunk = max(1, DECODE_CHUNK_ELEMENTS // max(1, latents["video"][0].numel()))
        videos, waves = [], []
        for zv, za in zip(latents["video"].split(chunk), latents["audio"].split(chunk)):
            z = p._unpack_latents(
                zv, self.latent_frames, self.latent_height, self.latent_width, self.patch, self.patch_t
            ).to(self.text_dtype)  # the pipeline: latents.to(prompt_embeds.dtype)
            timestep = None
            if vae.config.timestep_conditioning:
                m = z.shape[0]
                timestep = torch.full((m,), self.decode_timestep, device=z.device, dtype=z.dtype)
                if self.decode_noise_scale:
                    noise = torch.randn(z.shape, generator=generator, device=z.device, dtype=z.dtype)
                    z = (1 - self.decode_noise_scale) * z + self.decode_noise_scale * noise
            z = p._denormalize_latents(z, vae.latents_mean, vae.latents_std, vae.config.scaling_factor)
            video = vae.decode(z.to(vae.dtype), timestep, return_dict=False)[0]
            videos.append(p.video_processor.postprocess_video(video, output_type="pt").float())
            a = p._denormalize_audio_latents(za, audio_vae.latents_mean, audio_vae.latents_std)
            a = p._unpack_audio_latents(a, self.audio_frames, num_mel_bins=self.latent_mel_bins)
            mel = audio_vae.decode(a.to(audio_vae.dtype), return_dict=False)[0]
            waves.append(p.vocoder(mel).float())
        return {"video": torch.cat(videos), "fps": self.fps, "audio": torch.cat(waves), "sample_rate": self.sample_rate}

    # ------------------------------------------------------------------ the pipeline's own sampling
    def call_guidance_kwargs(self, guidance_scale: float) -> dict:
        """The ``LTX2Pipeline`` guidance arguments that sample what ``velocity`` computes at ``guidance_scale``:
        ``LTX2_UNGUIDED_CALL_KWARGS`` at 1, else CFG and the adapter's STG / modality scales, no rescale."""
        kwargs = dict(LTX2_UNGUIDED_CALL_KWARGS)
        plan = _plan_of(self, guidance_scale)
        if plan.cfg:
            kwargs.update(guidance_scale=plan.cfg[0], audio_guidance_scale=plan.cfg[1])
        if plan.stg:
            kwargs.update(
                stg_scale=plan.stg[0],
                audio_stg_scale=plan.stg[1],
                spatio_temporal_guidance_blocks=list(self.stg_blocks),
            )
        if plan.modality:
            kwargs.update(modality_scale=plan.modality[0], audio_modality_scale=plan.modality[1])
        return kwargs

    @torch.no_grad()
    def draw(self, request: Draw) -> dict:
        """``LTX2Pipeline``'s own sampling (``flowrl sample``) with the guidance ``velocity`` uses
        (``call_guidance_kwargs``; no rescale): the audio_video mapping."""
        out = self.pipe(
            prompt=list(request.prompts),
            negative_prompt=list(request.negative_prompts) if request.negative_prompts is not None else None,
            num_frames=self.num_frames,
            frame_rate=self.fps,
            generator=request.generator,
            **self.call_options(request),
            **self.call_guidance_kwargs(request.guidance_scale),
        )
        return {
            "video": out.frames.float(),
            "fps": self.fps,
            "audio": out.audio.float(),
            "sample_rate": self.sample_rate,
        }

    # ------------------------------------------------------------------ weights
    def load_trained(self, run_dir: str | Path) -> str | None:
        """Load what a run exported (``lora/`` or ``transformer/``) into the pipeline; returns what."""
        return load_run_export(self, run_dir, TRANSFORMER_CLASS, set_dispatcher_attention_backend)
