"""Wan 2.1 T2V, Wan 2.2 T2V-A14B (two experts) and Wan 2.2 TI2V-5B (text-to-video) adapter, built from
``WanPipeline``'s public pieces.

What differs from SD3 (``flowrl.pipelines.sd3``), and how the adapter keeps the pipeline's own math:

* **Media** is video: ``decode`` returns ``{"video": (B, F, 3, H, W) in [0, 1], "fps": model.fps or 16}``
  through the Wan VAE, with the pipeline's ``latents_mean`` / ``latents_std`` de-normalisation and its
  ``video_processor.postprocess_video(..., output_type="pt")`` (in chunks of whole clips: the causal VAE's
  memory grows with the batch; a real 81-frame clip decodes alone). ``model.num_frames`` (default 81) must be 4k + 1; ``model.height`` / ``model.width``
  (default ``model.resolution``) multiples of 16.
* **Latents** are Wan's 5-D ``(B, 16, 1 + (F - 1)/4, H/8, W/8)`` fp32 from ``prepare_latents``; no packing.
* **Sigmas** are the pipeline scheduler's own (``scheduler.set_timesteps(T)``; the Wan Diffusers checkpoints use
  UniPC with flow sigmas and ``flow_shift``): sigma_0 = 0.99999899, not 1, and the schedule ends at 0.
  flowrl steps that schedule with its own (Euler-based) SDE and ODE steps: UniPC is a multistep solver, so with
  UniPC only the schedule is shared with ``WanPipeline``, not the update rule. With a one-step
  ``FlowMatchEulerDiscreteScheduler`` on the same sigmas the pipeline's output is flowrl's ODE rollout.
* **Timesteps**: the transformer gets ``timestep = sigma * num_train_timesteps`` (fp32), as ``WanPipeline`` feeds
  ``scheduler.timesteps`` (FlowMatchEuler's are exactly these; UniPC's are the same truncated to integers).
* **TI2V-5B** (``pipe.config.expand_timesteps``): the Wan 2.2 VAE's latents ``(B, 48, F', H/16, W/16)`` and a
  timestep per video token, ``(B, F' (h/2) (w/2))`` (``layout.token_timesteps``), as ``WanPipeline`` builds them
  from its all-ones mask: in text-to-video every token has its row's sigma. Its image mode is the ``wan_i2v``
  family (``WanImageToVideoPipeline``).
* **Guidance** is two-branch CFG (``cfg_guidance``), both branches in one batched forward, negatives stacked
  first; per-row negative prompts as SD3's (``negative_prompt_embeds`` rows), the empty prompt by default.
* **Two experts** (Wan 2.2 A14B: ``pipe.transformer_2`` and ``pipe.config.boundary_ratio``): ``transformer`` is
  the high-noise expert, run where ``timestep >= boundary_ratio * num_train_timesteps``, ``transformer_2`` the
  low-noise one below, as ``WanPipeline`` chooses. ``adapter.transformer`` is then a ``WanExperts`` module holding
  both (``high_noise``, ``low_noise``) with the transformer's call signature: it picks the expert of each row
  from its timestep (a batch whose rows straddle the boundary is split), so a transition's training forward uses
  the expert that sampled it. ``model.trained_experts`` (both | high_noise | low_noise) says which train: an
  expert that does not train gets no LoRA, never requires grad (``requires_grad_`` keeps it frozen, also for full
  fine-tuning) and is shared, not copied, by a deep copy (the full fine-tuning reference).
  One ``guidance_scale`` serves both experts (``WanPipeline``'s default for ``guidance_scale_2``); ``generate``
  passes no ``guidance_scale_2`` either, so sampling and training agree.
* **LoRA** targets the self- and cross-attention projections (``attn1`` / ``attn2``: ``to_q``, ``to_k``, ``to_v``,
  ``to_out.0``); ``save_lora`` writes ``pytorch_lora_weights.safetensors`` for ``transformer`` (Wan 2.1, or the
  high-noise expert) and ``pytorch_lora_weights_transformer_2.safetensors`` for the low-noise expert, which
  ``WanPipeline.load_lora_weights(folder, weight_name=..., load_into_transformer_2=True)`` loads
  (``load_trained`` does both).

``model.path``: ``tiny`` builds the offline tiny Wan 2.1 T2V (``build_tiny_wan``), ``tiny-a14b`` the offline tiny
Wan 2.2 T2V-A14B with its two experts (``build_tiny_wan(two_experts=True)``, boundary 0.875), ``tiny-ti2v`` the
offline tiny Wan 2.2 TI2V-5B (``build_tiny_wan(ti2v=True)``); else a hub id or a
local diffusers folder (``WanPipeline.from_pretrained``). ``model.tiny_size`` does not apply.
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import torch

from flowrl.media import MediaKind
from flowrl.pipelines.base import Conditioning, Guidance, cfg_guidance
from flowrl.pipelines.kit.adapter import CachedPromptAdapter, Draw, cast_parts, sides
from flowrl.pipelines.kit.attention import set_dispatcher_attention_backend
from flowrl.pipelines.kit.loading import check_folder_or_hub, load_pretrained_pipeline
from flowrl.pipelines.kit.lora import lora_metadata
from flowrl.pipelines.wan import layout
from flowrl.pipelines.wan.experts import EXPERTS, WanExperts
from flowrl.pipelines.wan.layout import DEFAULT_NUM_FRAMES

logger = logging.getLogger(__name__)

# the self-attention (attn1) and text cross-attention (attn2) projections of every block
WAN_LORA_TARGETS = [
    "attn1.to_q",
    "attn1.to_k",
    "attn1.to_v",
    "attn1.to_out.0",
    "attn2.to_q",
    "attn2.to_k",
    "attn2.to_v",
    "attn2.to_out.0",
]
TRANSFORMER_CLASS = "WanTransformer3DModel"
# model.path -> the tiny builder's keywords (``build_tiny_wan``)
TINY_PATHS = {"tiny": {}, "tiny-a14b": {"two_experts": True}, "tiny-ti2v": {"ti2v": True}}
DEFAULT_FPS = 16.0
DECODE_CHUNK_ELEMENTS = 1 << 20  # latent elements the VAE decodes at once (whole clips, at least one)
LORA_FILES = {
    "high_noise": "pytorch_lora_weights.safetensors",
    "low_noise": "pytorch_lora_weights_transformer_2.safetensors",
}


def check_model_path(model_cfg) -> None:
    """Refuse, before any model is built, a ``model.path`` that cannot load as a Wan pipeline (a missing local
    path, a folder that is not a diffusers pipeline folder, a single file: not supported for Wan here), a
    ``model.num_frames`` that is not 4k + 1, and ``model.trained_experts`` other than both for the one-expert
    ``tiny``."""
    check_wan_model(model_cfg, TINY_PATHS, "wan", "Wan 2.2 A14B")


def check_wan_model(model_cfg, tiny_paths: dict, family: str, two_experts: str) -> None:
    """``check_model_path`` of a Wan family (``model.pipeline`` ``family``, its ``tiny_paths``; ``two_experts``:
    the model a two-expert choice needs, as the error names it)."""
    path = model_cfg.path
    num_frames = getattr(model_cfg, "num_frames", None)
    if num_frames is not None:
        check_num_frames(num_frames)
    if path in tiny_paths:
        experts = getattr(model_cfg, "trained_experts", "both")
        if not tiny_paths[path].get("two_experts") and experts != "both":
            raise ValueError(
                f"model.trained_experts: {experts!r} needs a two-expert model ({two_experts}, "
                f"model.path: tiny-a14b for the tiny one); model.path: {path} has one transformer"
            )
        return
    check_folder_or_hub(path, family, "Wan")


def load_wan_pipeline(path: str, dtype: str = "fp32", revision: str | None = None):
    """``WanPipeline.from_pretrained`` from a hub id or a local folder, with a one-line error."""
    return load_pretrained_pipeline("WanPipeline", path, dtype, revision)


def check_num_frames(num_frames: int, temporal: int = 4) -> None:
    if num_frames < 1 or (num_frames - 1) % temporal:
        raise ValueError(f"model.num_frames: Wan needs {temporal}k + 1 frames (e.g. 5, 33, 81), got {num_frames}")


class WanAdapter(CachedPromptAdapter):
    """Wan 2.1 T2V / Wan 2.2 T2V-A14B for RL. ``pipe`` is a ``WanPipeline``; the policy is its transformer, or
    (two experts) a ``WanExperts`` holding ``transformer`` and ``transformer_2``."""

    lora_target_modules = WAN_LORA_TARGETS
    check_model_path = staticmethod(check_model_path)
    media_kind = MediaKind.VIDEO
    tiny_recipe = "tiny-wan"
    pipeline_classes = ("WanPipeline",)  # the model_index.json classes it loads
    tiny_paths = tuple(TINY_PATHS)

    def __init__(
        self,
        pipe,
        resolution: int | tuple[int, int] = (480, 832),
        num_frames: int | None = None,
        fps: float | None = None,
        max_sequence_length: int = 512,
        device: torch.device | str = "cpu",
        vae_dtype: torch.dtype = torch.float32,
        prompt_cache: int = 1024,
        attention_backend: str | None = None,
        trained_experts: str = "both",
    ):
        # the VAE's down-sampling times the transformer's 2x2 patches
        self.height, self.width = sides(resolution, pipe.vae_scale_factor_spatial * 2, "Wan")
        self.num_frames = DEFAULT_NUM_FRAMES if num_frames is None else int(num_frames)
        check_num_frames(self.num_frames, pipe.vae_scale_factor_temporal)
        self.fps = DEFAULT_FPS if fps is None else float(fps)
        self.pipe = pipe
        self.device = torch.device(device)
        self.resolution = self.height if self.height == self.width else (self.height, self.width)
        self.max_sequence_length = max_sequence_length
        pipe.set_progress_bar_config(disable=True)
        for name in ("text_encoder", "image_encoder", "vae"):
            module = getattr(pipe, name, None)
            if module is not None:
                module.requires_grad_(False).eval()
                module.to(self.device)
        if pipe.vae.dtype != vae_dtype:
            pipe.vae.to(dtype=vae_dtype)
        self._scheduler = copy.deepcopy(pipe.scheduler)  # sigmas are read from it, never stepped
        self._num_train_timesteps = float(self._scheduler.config.num_train_timesteps)
        self._start_prompt_cache(prompt_cache)
        two = getattr(pipe, "transformer_2", None) is not None and pipe.config.boundary_ratio is not None
        self.two_experts = two
        if two:
            self.boundary_ratio = float(pipe.config.boundary_ratio)
            trained = EXPERTS if trained_experts == "both" else (trained_experts,)
            self._transformer = WanExperts(
                pipe.transformer, pipe.transformer_2, self.boundary_ratio * self._num_train_timesteps, trained
            )
        else:
            if trained_experts != "both":
                raise ValueError(
                    f"model.trained_experts: {trained_experts!r} needs a two-expert model (Wan 2.2 "
                    "A14B); this Wan pipeline has one transformer: leave it at 'both'"
                )
            self.boundary_ratio = None
            self._transformer = pipe.transformer
        self._transformer.to(self.device)
        self.compute_dtype = pipe.transformer.dtype  # ModelMixin.dtype walks every parameter: ask once
        self.latent_channels = int(pipe.vae.config.z_dim)
        # Wan 2.2 TI2V-5B: a timestep per video token (layout.token_timesteps)
        self.expand_timesteps = bool(pipe.config.get("expand_timesteps", False))
        self.attention_backend = attention_backend
        self.attention_backpropagates = True
        if attention_backend is not None:
            self.attention_backpropagates = all(
                set_dispatcher_attention_backend(t, attention_backend, self.device, self.compute_dtype)
                for t in self._transformers()
            )

    @classmethod
    def from_config(cls, model_cfg, device: torch.device | str = "cpu", seed: int = 0) -> WanAdapter:
        """Build from ``ModelConfig``: ``path="tiny"`` builds the offline tiny Wan 2.1 T2V, ``"tiny-a14b"`` the
        offline tiny Wan 2.2 T2V-A14B (``build_tiny_wan``), else ``WanPipeline.from_pretrained`` of a hub id or a
        local folder."""
        pipe = cls.build_pipeline(model_cfg, seed)
        cast_parts(pipe, model_cfg.dtype, ("text_encoder", "image_encoder", "transformer", "transformer_2"))
        return cls(
            pipe,
            model_cfg.size,
            model_cfg.num_frames,
            model_cfg.fps,
            model_cfg.max_sequence_length,
            device,
            prompt_cache=model_cfg.prompt_cache,
            attention_backend=getattr(model_cfg, "attention_backend", None),
            trained_experts=getattr(model_cfg, "trained_experts", "both"),
        )

    @classmethod
    def build_pipeline(cls, model_cfg, seed: int = 0):
        """The tiny ``WanPipeline`` of a tiny ``model.path`` (``TINY_PATHS``), else ``from_pretrained``."""
        if model_cfg.path in TINY_PATHS:
            from flowrl.pipelines.wan.tiny import build_tiny_wan

            return build_tiny_wan(seed=seed, **TINY_PATHS[model_cfg.path])
        check_model_path(model_cfg)
        return load_wan_pipeline(model_cfg.path, model_cfg.dtype, model_cfg.revision)

    @property
    def transformer(self) -> torch.nn.Module:
        return self._transformer

    def _transformers(self) -> list[torch.nn.Module]:
        return [self.pipe.transformer] + ([self.pipe.transformer_2] if self.two_experts else [])

    def guidance(self, scale: float) -> Guidance:
        """Two-branch CFG (both branches in one batched forward: 2 rows a sample), off at scale 1; one scale
        for both experts."""
        return cfg_guidance(scale)

    # ------------------------------------------------------------------ experts
    def expert_of(self, sigma: float | torch.Tensor) -> str | list[str]:
        """The expert that runs at ``sigma`` ("high_noise" or "low_noise"; always "high_noise" for Wan 2.1)."""
        if not self.two_experts:
            return "high_noise" if isinstance(sigma, float) else ["high_noise"] * torch.as_tensor(sigma).numel()
        t = torch.as_tensor(sigma, dtype=torch.float32) * self._num_train_timesteps
        high = self._transformer.is_high_noise(t.reshape(-1)).tolist()
        names = ["high_noise" if h else "low_noise" for h in high]
        return names[0] if isinstance(sigma, float) else names

    def trains_sigma(self, sigma: torch.Tensor | float) -> torch.Tensor:
        """(T,) bool: whether a transition from each ``sigma`` runs a trained expert (all True for Wan 2.1 and
        ``trained_experts=both``); a transition of a frozen expert has nothing to train."""
        sigma = torch.as_tensor(sigma, dtype=torch.float32).reshape(-1)
        if not self.two_experts:
            return torch.ones(len(sigma), dtype=torch.bool)
        names = self.expert_of(sigma)
        return torch.tensor([n in self._transformer.trained for n in names], dtype=torch.bool)

    # ------------------------------------------------------------------ conditioning
    @torch.no_grad()
    def _encode(self, prompts: list[str]) -> Conditioning:
        """UMT5 embeddings (B, L, D) of ``prompts``, zero-padded to ``max_sequence_length`` as the pipeline pads."""
        embeds, _ = self.pipe.encode_prompt(
            prompt=prompts,
            do_classifier_free_guidance=False,
            device=self.device,
            max_sequence_length=self.max_sequence_length,
        )
        return {"prompt_embeds": embeds}

    # ------------------------------------------------------------------ sampling pieces
    def sigmas(self, num_steps: int) -> torch.Tensor:
        """The pipeline scheduler's schedule with ``num_steps`` transitions: (T+1,) fp32 from sigma_0 (0.99999899
        with UniPC flow sigmas, not 1) to 0."""
        self._scheduler.set_timesteps(num_steps, device="cpu")
        return self._scheduler.sigmas.detach().float().cpu().clone()

    @property
    def latent_shape(self) -> tuple[int, int, int, int]:
        """One sample's latent: (16, 1 + (F - 1)/4, H/8, W/8)."""
        s, t = self.pipe.vae_scale_factor_spatial, self.pipe.vae_scale_factor_temporal
        frames, height, width = self.num_frames, self.height, self.width
        return layout.latent_shape(frames, height, width, spatial=s, temporal=t, channels=self.latent_channels)

    def initial_noise(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Gaussian latents at sigma_0 through ``prepare_latents`` (fp32): (n, 16, F', H/8, W/8)."""
        return self.pipe.prepare_latents(
            n, self.latent_channels, self.height, self.width, self.num_frames, torch.float32, self.device, generator
        )

    def model_inputs(self, cond: Conditioning, guidance_scale: float) -> Conditioning:
        """Transformer-ready conditioning: cast to the model dtype and, with CFG, the negative rows stacked
        before the prompt rows (each row's own negative where ``cond`` holds them, else the empty prompt)."""
        embeds = cond["prompt_embeds"]
        if guidance_scale != 1.0:
            embeds = torch.cat([self._negatives(cond)["prompt_embeds"].to(embeds.device), embeds])
        return {"prompt_embeds": embeds.to(self.compute_dtype)}

    def forward(self, model, x: torch.Tensor, sigma, inputs: Conditioning, doubled: bool) -> torch.Tensor:
        """One call of the trained module (for two experts, every row's expert) on x (B, 16, F', h, w), twice
        stacked when ``doubled`` (CFG's two branches), at ``timestep = sigma * num_train_timesteps``; fp32."""
        x_in = torch.cat([x, x]) if doubled else x
        return model(**self._transformer_inputs(x_in, sigma, inputs), return_dict=False)[0].float()

    def _transformer_inputs(self, x_in: torch.Tensor, sigma: torch.Tensor | float, inputs: Conditioning) -> dict:
        """The transformer's keyword inputs for the rows ``x_in`` (the CFG branches stacked, as ``inputs``)."""
        return {
            "hidden_states": x_in.to(self.compute_dtype),
            "timestep": self._timestep(sigma, x_in),
            "encoder_hidden_states": inputs["prompt_embeds"],
        }

    def _timestep(self, sigma: torch.Tensor | float, x_in: torch.Tensor, first_frame_fixed: bool = False):
        """The transformer's ``timestep`` for the ``rows`` of ``x_in`` (the CFG branches stacked): ``sigma *
        num_train_timesteps`` a row (B,), or a video token (B, tokens) with ``expand_timesteps``."""
        rows = x_in.shape[0]
        timestep = torch.as_tensor(sigma, dtype=torch.float32, device=self.device) * self._num_train_timesteps
        if timestep.numel() == 1:
            timestep = timestep.reshape(1).expand(rows)
        else:
            timestep = timestep.reshape(-1)
            timestep = timestep.repeat(rows // timestep.numel())  # the CFG branches: (negatives; prompts)
        if self.expand_timesteps:
            frames, height, width = x_in.shape[2:]
            return layout.token_timesteps(timestep, frames, height, width, first_frame_fixed=first_frame_fixed)
        return timestep

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> dict:
        """Latents (B, 16, F', h, w) -> ``{"video": (B, F, 3, H, W) float in [0, 1], "fps": float}``, as
        ``WanPipeline(output_type="pt")`` decodes: in chunks of at most ``DECODE_CHUNK_ELEMENTS`` latent elements
        (at least one clip: the causal VAE's memory grows with the batch; one 81-frame 480x832 clip is 2.1M)."""
        vae = self.pipe.vae
        per_clip = max(1, latents[0].numel())
        chunk = max(1, DECODE_CHUNK_ELEMENTS // per_clip)
        mean = torch.tensor(vae.config.latents_mean).view(1, vae.config.z_dim, 1, 1, 1).to(vae.device, vae.dtype)
        inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, vae.config.z_dim, 1, 1, 1).to(
            vae.device, vae.dtype
        )
        videos = []
        for z in latents.split(chunk):
            z = z.to(vae.device, dtype=vae.dtype)
            video = vae.decode(z / inv_std + mean, return_dict=False)[0]
            videos.append(self.pipe.video_processor.postprocess_video(video, output_type="pt"))
        return {"video": torch.cat(videos).float(), "fps": self.fps}

    @torch.no_grad()
    def draw(self, request: Draw) -> dict:
        """``WanPipeline``'s own sampling (its scheduler, UniPC for the Diffusers checkpoints): the video mapping.
        One guidance scale for both experts (no ``guidance_scale_2``), as in training."""
        frames = self.pipe(
            prompt=list(request.prompts),
            negative_prompt=list(request.negative_prompts) if request.negative_prompts is not None else None,
            num_frames=self.num_frames,
            guidance_scale=request.guidance_scale,
            generator=request.generator,
            **self.call_options(request),
        ).frames
        return {"video": frames.float(), "fps": self.fps}

    # ------------------------------------------------------------------ weights
    def load_trained(self, run_dir: str | Path) -> str | None:
        """Load what a run exported (``lora/`` or ``transformer/``) into the pipeline; returns what."""
        run_dir = Path(run_dir)
        lora = run_dir / "lora"
        found = [e for e in EXPERTS if (lora / LORA_FILES[e]).is_file()]
        if found:
            for expert in found:
                if expert == "low_noise" and not self.two_experts:
                    raise ValueError(
                        f"{lora / LORA_FILES[expert]}: a low-noise expert's LoRA (Wan 2.2 A14B), but "
                        "this Wan pipeline has one transformer"
                    )
                self.pipe.load_lora_weights(
                    str(lora), weight_name=LORA_FILES[expert], load_into_transformer_2=expert == "low_noise"
                )
            return "LoRA" if not self.two_experts else f"LoRA ({', '.join(found)})"
        folder = run_dir / "transformer"
        if (folder / "config.json").is_file():
            record = json.loads((folder / "config.json").read_text())
            if record.get("_class_name") == WanExperts.__name__:
                if not self.two_experts:
                    raise ValueError(
                        f"{folder}: two experts' weights (Wan 2.2 A14B), but this Wan pipeline has one transformer"
                    )
                from safetensors.torch import load_file

                state: dict[str, torch.Tensor] = {}
                for file in sorted(folder.glob("*.safetensors")):
                    state.update(load_file(str(file)))
                for name, expert in self._transformer.experts():
                    part = {k[len(name) + 1 :]: v for k, v in state.items() if k.startswith(f"{name}.")}
                    expert.load_state_dict(part)
                return "fine-tuned experts"
            import diffusers

            trained = getattr(diffusers, TRANSFORMER_CLASS).from_pretrained(folder, torch_dtype=self.compute_dtype)
            self.pipe.transformer = trained.to(self.device)
            if not self.two_experts:
                self._transformer = trained
            else:  # a single transformer/ export for a two-expert pipeline: the high-noise expert
                self._transformer.high_noise = trained
            if self.attention_backend is not None:
                set_dispatcher_attention_backend(trained, self.attention_backend, self.device, self.compute_dtype)
            return "fine-tuned transformer"
        return None

    def save_lora(self, directory: str | Path, state_dict: dict[str, torch.Tensor]) -> None:
        """Write a LoRA in diffusers format, loadable with ``WanPipeline.load_lora_weights(directory)``, with the
        peft config (rank, alpha, targets) as metadata. Two experts: ``state_dict`` keys ``high_noise.*`` go to
        ``pytorch_lora_weights.safetensors`` (``transformer``), ``low_noise.*`` to
        ``pytorch_lora_weights_transformer_2.safetensors`` (``load_into_transformer_2=True``)."""
        from diffusers import WanPipeline

        if not self.two_experts:
            WanPipeline.save_lora_weights(
                str(directory),
                transformer_lora_layers=state_dict,
                transformer_lora_adapter_metadata=lora_metadata(self.transformer),
            )
            return
        for name, expert in self._transformer.experts():
            part = {k[len(name) + 1 :]: v for k, v in state_dict.items() if k.startswith(f"{name}.")}
            if part:
                WanPipeline.save_lora_weights(
                    str(directory),
                    transformer_lora_layers=part,
                    weight_name=LORA_FILES[name],
                    transformer_lora_adapter_metadata=lora_metadata(expert),
                )
