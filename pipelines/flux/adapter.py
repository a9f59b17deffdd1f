"""FLUX.1 adapter, built from ``FluxPipeline``'s public pieces.

What differs from SD3 (``flowrl.pipelines.sd3``), and how the adapter keeps the pipeline's own math:

* **Latents** are FLUX's packed tokens ``(B, (H/16)(W/16), 64)`` (each a 2x2 patch of the 16-channel VAE
  latent): the trainer's states, noise and velocities all have this shape. The latent image ids
  ``((H/16)(W/16), 3)`` and the text ids ``(L, 3)`` (zeros) depend only on the resolution and the text
  length, so the adapter keeps them and passes them to every transformer call; they are not conditioning rows.
* **Sigmas** are the pipeline's: ``linspace(1, 1/T, T)`` time-shifted with the resolution-dependent
  ``mu = calculate_shift(image_seq_len, ...)`` from the scheduler config (``scheduler.set_timesteps(sigmas=...,
  mu=...)``), then the scheduler's terminal 0; sigma_0 is exactly 1.
* **Guidance** is FLUX.1-dev's embedded guidance: one transformer pass a step with ``guidance =
  guidance_scale`` (the pipeline's ``guidance_scale``, 3.5 by default); there are no CFG rows. A transformer
  without a guidance embedding (FLUX.1-schnell) gets ``guidance=None`` and ignores the scale. There is no
  negative branch: ``negative_conditioning`` refuses, and ``encode_prompts`` refuses a non-empty negative prompt
  rather than ignoring it silently.
* **Timesteps**: the transformer takes t in [0, 1] and multiplies it (and the guidance) by 1000 itself, as
  ``FluxPipeline`` feeds it ``scheduler.timesteps / 1000``: ``velocity`` passes sigma itself.
"""

from __future__ import annotations

import copy
import logging
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch

from flowrl.pipelines.base import Conditioning, Guidance
from flowrl.pipelines.flux import layout
from flowrl.pipelines.kit.attention import set_dispatcher_attention_backend
from flowrl.pipelines.kit.loading import DTYPES, check_folder_or_hub, load_pretrained_pipeline
from flowrl.pipelines.kit.lora import lora_metadata
from flowrl.pipelines.kit.prompts import cached_rows

logger = logging.getLogger(__name__)

# the joint attention projections of the double-stream blocks (to_q/to_k/to_v also match the single blocks')
FLUX_LORA_TARGETS = [
    "attn.to_q",
    "attn.to_k",
    "attn.to_v",
    "attn.to_out.0",
    "attn.add_q_proj",
    "attn.add_k_proj",
    "attn.add_v_proj",
    "attn.to_add_out",
]


def check_model_path(model_cfg) -> None:
    """Refuse a ``model.path`` that cannot load as a FLUX pipeline before any model is built: a missing local
    path, a folder that is not a diffusers pipeline folder, a single file (not supported for FLUX here)."""
    path = model_cfg.path
    if path == "tiny":
        return
    check_folder_or_hub(path, "flux", "FLUX")


def load_flux_pipeline(path: str, dtype: str = "fp32", revision: str | None = None):
    """``FluxPipeline.from_pretrained`` from a hub id or a local folder, with a one-line error."""
    return load_pretrained_pipeline("FluxPipeline", path, dtype, revision)


class FluxAdapter:
    """FLUX.1 (dev-like, embedded guidance) for RL. ``pipe`` is a ``FluxPipeline``; the transformer is the policy."""

    lora_target_modules = FLUX_LORA_TARGETS
    check_model_path = staticmethod(check_model_path)
    media_kind = "image"
    tiny_recipe = "tiny-flux"

    def __init__(
        self,
        pipe,
        resolution: int | tuple[int, int] = 512,
        max_sequence_length: int = 128,
        device: torch.device | str = "cpu",
        vae_dtype: torch.dtype = torch.float32,
        prompt_cache: int = 1024,
        attention_backend: str | None = None,
    ):
        self.height, self.width = (resolution, resolution) if isinstance(resolution, int) else map(int, resolution)
        for side, value in (("height", self.height), ("width", self.width)):
            if value % (pipe.vae_scale_factor * 2):
                raise ValueError(f"model.{side}: FLUX needs a multiple of {pipe.vae_scale_factor * 2}, got {value}")
        self.pipe = pipe
        self.device = torch.device(device)
        self.resolution = self.height if self.height == self.width else (self.height, self.width)
        self.max_sequence_length = max_sequence_length
        pipe.set_progress_bar_config(disable=True)
        for name in ("text_encoder", "text_encoder_2", "vae"):
            module = getattr(pipe, name, None)
            if module is not None:
                module.requires_grad_(False).eval()
                module.to(self.device)
        if pipe.vae.dtype != vae_dtype:
            pipe.vae.to(dtype=vae_dtype)
        pipe.transformer.to(self.device)
        self._scheduler = copy.deepcopy(pipe.scheduler)  # sigmas are read from it, never stepped
        self._cache: OrderedDict[str, Conditioning] = OrderedDict()  # least recently used first
        self.prompt_cache = prompt_cache
        self.compute_dtype = pipe.transformer.dtype
        self.guidance_embeds = bool(pipe.transformer.config.guidance_embeds)
        # the packed layout: one token per 2x2 patch of the (H/8, W/8) latent
        self.latent_channels = pipe.transformer.config.in_channels // 4
        # the unpacked latent sides, as prepare_latents has them
        h, w = (2 * (value // (pipe.vae_scale_factor * 2)) for value in (self.height, self.width))
        self.image_seq_len = layout.flux_image_seq_len(self.height, self.width, pipe.vae_scale_factor)
        self._image_ids = pipe._prepare_latent_image_ids(1, h // 2, w // 2, self.device, self.compute_dtype)
        self._text_ids: dict[int, torch.Tensor] = {}
        self.attention_backend = attention_backend
        self.attention_backpropagates = True
        if attention_backend is not None:
            self.attention_backpropagates = set_dispatcher_attention_backend(
                pipe.transformer, attention_backend, self.device, self.compute_dtype
            )

    @classmethod
    def from_config(cls, model_cfg, device: torch.device | str = "cpu", seed: int = 0) -> FluxAdapter:
        """Build from ``ModelConfig``: ``path="tiny"`` builds the offline tiny FLUX.1-dev (``build_tiny_flux``;
        ``model.tiny_size`` does not apply), else ``FluxPipeline.from_pretrained`` of a hub id or local folder."""
        if model_cfg.path == "tiny":
            from flowrl.pipelines.flux.tiny import build_tiny_flux

            pipe = build_tiny_flux(seed=seed)
        else:
            check_model_path(model_cfg)
            pipe = load_flux_pipeline(model_cfg.path, model_cfg.dtype, model_cfg.revision)
        dtype = DTYPES[model_cfg.dtype]
        for name in ("text_encoder", "text_encoder_2", "transformer"):
            module = getattr(pipe, name, None)
            if module is not None and module.dtype != dtype:
                module.to(dtype=dtype)
        return cls(
            pipe,
            getattr(model_cfg, "size", model_cfg.resolution),
            model_cfg.max_sequence_length,
            device,
            prompt_cache=model_cfg.prompt_cache,
            attention_backend=getattr(model_cfg, "attention_backend", None),
        )

    @property
    def transformer(self) -> torch.nn.Module:
        return self.pipe.transformer

    def guidance(self, scale: float) -> Guidance:
        """FLUX.1-dev's embedded guidance: the scale is the transformer's ``guidance`` input, one pass a step
        (``"none"`` for a transformer without a guidance embedding, FLUX.1-schnell)."""
        return Guidance("embedded" if self.guidance_embeds else "none", float(scale), 1)

    # ------------------------------------------------------------------ conditioning
    @torch.no_grad()
    def _encode(self, prompts: list[str]) -> Conditioning:
        embeds, pooled, _ = self.pipe.encode_prompt(
            prompt=prompts,
            prompt_2=None,
            device=self.device,
            num_images_per_prompt=1,
            max_sequence_length=self.max_sequence_length,
        )
        return {"prompt_embeds": embeds, "pooled_prompt_embeds": pooled}

    def _rows(self, prompts: list[str]) -> list[Conditioning]:
        """One-row embeddings of each prompt through the prompt cache (``kit.prompts.cached_rows``)."""
        return cached_rows(self._cache, self.prompt_cache, prompts, self._encode)

    def encode_prompts(self, prompts: list[str], negative_prompts: list[str] | None = None) -> Conditioning:
        """T5 embeddings (B, L, D) and CLIP pooled embeddings (B, P) of ``prompts``, cached per prompt.

        FLUX's embedded guidance has no negative branch: all-empty ``negative_prompts`` are accepted (they are
        the default), a non-empty one is refused rather than ignored."""
        if negative_prompts is not None:
            if len(negative_prompts) != len(prompts):
                raise ValueError(f"{len(negative_prompts)} negative prompts for {len(prompts)} prompts")
            if any(negative_prompts):
                raise ValueError(
                    "negative prompts: the flux pipeline uses FLUX.1-dev's embedded guidance, which has "
                    "no negative branch; remove the negative prompts (data.negative_prompt, per-prompt)"
                )
        rows = self._rows(list(prompts))
        return {k: torch.cat([r[k] for r in rows]) for k in rows[0]}

    def negative_conditioning(self, n: int) -> Conditioning:
        raise NotImplementedError(
            "the flux pipeline has no CFG negative: FLUX.1-dev's guidance is embedded "
            "(sample.guidance_scale is the transformer's guidance input)"
        )

    def clear_cache(self) -> None:
        self._cache.clear()

    # ------------------------------------------------------------------ sampling pieces
    def mu(self) -> float:
        """FLUX's resolution-dependent shift, as ``FluxPipeline.__call__`` computes it."""
        return layout.mu_of(self.image_seq_len, self._scheduler.config)

    def sigmas(self, num_steps: int) -> torch.Tensor:
        """The pipeline's schedule with ``num_steps`` transitions: (T+1,) fp32 from 1 to 0."""
        sigmas = np.linspace(1.0, 1 / num_steps, num_steps)
        if getattr(self._scheduler.config, "use_flow_sigmas", False):
            self._scheduler.set_timesteps(num_steps, device="cpu", mu=self.mu())
        else:
            self._scheduler.set_timesteps(sigmas=sigmas, device="cpu", mu=self.mu())
        return self._scheduler.sigmas.detach().float().cpu().clone()

    @property
    def latent_shape(self) -> tuple[int, int]:
        """One sample's packed latent: (tokens, 4 x latent channels)."""
        factor = self.pipe.vae_scale_factor
        return layout.latent_shape(self.height, self.width, vae_scale_factor=factor, channels=self.latent_channels)

    def initial_noise(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Packed Gaussian latents at sigma = 1 through ``prepare_latents`` (fp32): (n, N, 64)."""
        latents, _ = self.pipe.prepare_latents(
            n, self.latent_channels, self.height, self.width, torch.float32, self.device, generator
        )
        return latents

    def model_inputs(self, cond: Conditioning, guidance_scale: float) -> Conditioning:
        """The conditioning cast to the model dtype; no CFG rows (the guidance is embedded)."""
        dtype = self.compute_dtype
        return {
            "prompt_embeds": cond["prompt_embeds"].to(dtype),
            "pooled_prompt_embeds": cond["pooled_prompt_embeds"].to(dtype),
        }

    def _text_ids_for(self, length: int) -> torch.Tensor:
        if length not in self._text_ids:
            self._text_ids[length] = torch.zeros(length, 3, device=self.device, dtype=self.compute_dtype)
        return self._text_ids[length]

    def velocity(
        self,
        x: torch.Tensor,
        sigma: torch.Tensor | float,
        inputs: Conditioning,
        guidance_scale: float,
        model: torch.nn.Module | None = None,
    ) -> torch.Tensor:
        """v(x, sigma | c, guidance) in one forward. x: (B, N, 64); sigma: a float or (B,); returns fp32.

        The transformer gets ``timestep = sigma`` (it scales by 1000 itself) and, with a guidance embedding,
        ``guidance = guidance_scale`` for every row."""
        n = x.shape[0]
        embeds = inputs["prompt_embeds"]
        if embeds.shape[0] != n:
            raise ValueError(
                f"conditioning has {embeds.shape[0]} rows for {n} latents; "
                "build it with model_inputs(cond, guidance_scale)"
            )
        timestep = torch.as_tensor(sigma, dtype=torch.float32, device=self.device)
        timestep = timestep.expand(n) if timestep.numel() == 1 else timestep.reshape(n)
        guidance = (
            torch.full((n,), float(guidance_scale), dtype=torch.float32, device=self.device)
            if self.guidance_embeds
            else None
        )
        return (model or self.transformer)(
            hidden_states=x.to(self.compute_dtype),
            timestep=timestep,
            guidance=guidance,
            pooled_projections=inputs["pooled_prompt_embeds"],
            encoder_hidden_states=embeds,
            txt_ids=self._text_ids_for(embeds.shape[1]),
            img_ids=self._image_ids,
            return_dict=False,
        )[0].float()

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Packed latents (B, N, 64) -> images (B, 3, H, W) float in [0, 1]."""
        vae = self.pipe.vae
        z = self.pipe._unpack_latents(latents, self.height, self.width, self.pipe.vae_scale_factor)
        z = z.to(vae.dtype) / vae.config.scaling_factor + vae.config.shift_factor
        images = vae.decode(z, return_dict=False)[0]
        return (images.float() / 2 + 0.5).clamp(0, 1)

    # ------------------------------------------------------------------ weights
    def load_trained(self, run_dir: str | Path) -> str | None:
        """Load what a run exported (``lora/`` or ``transformer/``) into the pipeline; returns what."""
        run_dir = Path(run_dir)
        if (run_dir / "lora" / "pytorch_lora_weights.safetensors").is_file():
            self.pipe.load_lora_weights(str(run_dir / "lora"))
            return "LoRA"
        if (run_dir / "transformer" / "config.json").is_file():
            from diffusers import FluxTransformer2DModel

            trained = FluxTransformer2DModel.from_pretrained(run_dir / "transformer", torch_dtype=self.compute_dtype)
            self.pipe.transformer = trained.to(self.device)
            if self.attention_backend is not None:
                set_dispatcher_attention_backend(trained, self.attention_backend, self.device, self.compute_dtype)
            return "fine-tuned transformer"
        return None

    def save_lora(self, directory: str | Path, state_dict: dict[str, torch.Tensor]) -> None:
        """Write a LoRA in diffusers format, loadable with ``FluxPipeline.load_lora_weights(directory)``, with the
        transformer's peft config (rank, alpha, targets) as metadata (else diffusers assumes alpha = rank)."""
        from diffusers import FluxPipeline

        FluxPipeline.save_lora_weights(
            str(directory),
            transformer_lora_layers=state_dict,
            transformer_lora_adapter_metadata=lora_metadata(self.transformer),
        )

    def generate(
        self,
        prompts: list[str],
        num_steps: int,
        guidance_scale: float,
        generator: torch.Generator,
        negative_prompts: list[str] | None = None,
    ) -> torch.Tensor:
        """Images (B, 3, H, W) in [0, 1] from the pipeline's own call (``flowrl sample``): ``guidance_scale`` is the
        embedded guidance, as in training; ``negative_prompts`` are not used (FLUX.1 has no two-branch CFG here)."""
        return self.pipe(
            prompt=list(prompts),
            num_inference_steps=num_steps,
            guidance_scale=guidance_scale,
            height=self.height,
            width=self.width,
            max_sequence_length=self.max_sequence_length,
            generator=generator,
            output_type="pt",
        ).images
