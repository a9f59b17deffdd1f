"""Stable Diffusion 3 / 3.5 adapter, built from ``StableDiffusion3Pipeline``'s public pieces."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from flowrl.media import MediaKind
from flowrl.pipelines.base import Conditioning, Guidance, cfg_guidance
from flowrl.pipelines.kit.adapter import CachedPromptAdapter, cast_parts
from flowrl.pipelines.kit.attention import has_xformers
from flowrl.pipelines.kit.lora import TWO_STREAM_ATTENTION, load_run_export
from flowrl.pipelines.sd3 import layout
from flowrl.pipelines.sd3.attention import set_attention_backend
from flowrl.pipelines.sd3.loading import check_model_path, load_sd3_pipeline

logger = logging.getLogger(__name__)


# Flow-GRPO's SD3.5 LoRA targets: joint attention projections of both streams.
SD3_LORA_TARGETS = list(TWO_STREAM_ATTENTION)
TRANSFORMER_CLASS = "SD3Transformer2DModel"


class SD3Adapter(CachedPromptAdapter):
    """SD3/SD3.5 for RL. ``pipe`` is a ``StableDiffusion3Pipeline``; the transformer is the policy."""

    image_vae_latents = True  # latents are the VAE's own (C, h, w): dataset methods encode images into them
    lora_target_modules = SD3_LORA_TARGETS
    check_model_path = staticmethod(check_model_path)
    media_kind = MediaKind.IMAGE
    tiny_recipe = "tiny-cpu"
    sequence_parallel_refusal = (  # train.sequence_parallel > 1 (flowrl.mesh)
        "diffusers ships no context-parallel plan for SD3Transformer2DModel"
    )
    pipeline_classes = ("StableDiffusion3Pipeline",)  # the model_index.json classes it loads

    frozen_parts = ("text_encoder", "text_encoder_2", "text_encoder_3", "vae")
    side_multiple = "any"

    def _start(self, pipe, attention_backend: str | None) -> None:
        """SD3's own members (the kit's ``__init__`` sets the shared ones): xformers' attention on a GPU where
        installed and no backend is named, the scheduler's ``num_train_timesteps``, the attention backend."""
        if self.device.type == "cuda" and has_xformers() and attention_backend is None:
            pipe.enable_xformers_memory_efficient_attention()
        self._num_train_timesteps = float(self._scheduler.config.num_train_timesteps)
        # model.attention_backend: None keeps diffusers' default processors (xformers' where installed, above)
        self._set_attention(attention_backend, set_attention_backend)

    @classmethod
    def from_config(cls, model_cfg, device: torch.device | str = "cpu", seed: int = 0) -> "SD3Adapter":
        """Build from ``ModelConfig``: ``path="tiny"`` builds the offline tiny model, else loads."""
        if model_cfg.path == "tiny":
            from flowrl.pipelines.sd3.tiny import build_tiny_sd3_pipeline

            pipe = build_tiny_sd3_pipeline(
                max(getattr(model_cfg, "size", (model_cfg.resolution,))), model_cfg.tiny_size, seed=seed
            )
        else:
            check_model_path(model_cfg)
            pipe = load_sd3_pipeline(
                model_cfg.path, model_cfg.dtype, model_cfg.revision, config=getattr(model_cfg, "config_path", None)
            )
        cast_parts(pipe, model_cfg.dtype, ("text_encoder", "text_encoder_2", "text_encoder_3", "transformer"))
        return cls.from_pipe(pipe, model_cfg, device)

    def guidance(self, scale: float) -> Guidance:
        """Two-branch CFG (both branches in one batched forward: 2 rows a sample), off at scale 1."""
        return cfg_guidance(scale)

    # ------------------------------------------------------------------ conditioning
    @torch.no_grad()
    def _encode(self, prompts: list[str]) -> Conditioning:
        """T5 and CLIP embeddings (B, L, D) and the pooled CLIP ones (B, P) of ``prompts``."""
        embeds, _, pooled, _ = self.pipe.encode_prompt(
            prompt=prompts,
            prompt_2=None,
            prompt_3=None,
            device=self.device,
            do_classifier_free_guidance=False,
            max_sequence_length=self.max_sequence_length,
        )
        return {"prompt_embeds": embeds, "pooled_prompt_embeds": pooled}

    # ------------------------------------------------------------------ sampling pieces
    def sigmas(self, num_steps: int) -> torch.Tensor:
        """The scheduler's shifted schedule with ``num_steps`` transitions: (T+1,) fp32 from 1 to 0."""
        self._scheduler.set_timesteps(num_steps, device="cpu")
        return self._scheduler.sigmas.detach().float().cpu().clone()

    @property
    def latent_shape(self) -> tuple[int, int, int]:
        channels = self.transformer.config.in_channels
        return layout.latent_shape(
            self.height, self.width, vae_scale_factor=self.pipe.vae_scale_factor, channels=channels
        )

    def initial_noise(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Gaussian latents at sigma = 1 through ``prepare_latents`` (fp32)."""
        c, h, w = self.latent_shape
        f = self.pipe.vae_scale_factor
        return self.pipe.prepare_latents(n, c, h * f, w * f, torch.float32, self.device, generator)

    def model_inputs(self, cond: Conditioning, guidance_scale: float) -> Conditioning:
        """Transformer-ready conditioning for ``velocity``: cast to the model dtype and, with CFG, the
        negative rows stacked before the prompt rows (uncond first, as the pipeline does): each row's own
        negative where ``cond`` holds them (``encode_prompts(prompts, negative_prompts)``), else the empty
        prompt. Built once per batch, not once per step."""
        dtype = self.compute_dtype
        embeds, pooled = cond["prompt_embeds"], cond["pooled_prompt_embeds"]
        if guidance_scale != 1.0:
            neg = self._negatives(cond, ("prompt_embeds", "pooled_prompt_embeds"))
            embeds = torch.cat([neg["prompt_embeds"], embeds])
            pooled = torch.cat([neg["pooled_prompt_embeds"], pooled])
        return {"prompt_embeds": embeds.to(dtype), "pooled_prompt_embeds": pooled.to(dtype)}

    def forward(self, model, x: torch.Tensor, sigma, inputs: Conditioning, doubled: bool) -> torch.Tensor:
        """One transformer call on x (B, C, H, W), twice stacked when ``doubled`` (CFG's two branches), at
        ``timestep = sigma * num_train_timesteps``; fp32."""
        x_in = torch.cat([x, x]) if doubled else x
        rows = x_in.shape[0]
        timestep = torch.as_tensor(sigma, dtype=torch.float32, device=self.device) * self._num_train_timesteps
        timestep = (
            timestep.expand(rows) if timestep.numel() == 1 else torch.cat([timestep, timestep]) if doubled else timestep
        )
        return model(
            hidden_states=x_in.to(self.compute_dtype),
            timestep=timestep,
            encoder_hidden_states=inputs["prompt_embeds"],
            pooled_projections=inputs["pooled_prompt_embeds"],
            return_dict=False,
        )[0].float()

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Latents (B, C, h, w) -> images (B, 3, H, W) float in [0, 1]."""
        vae = self.pipe.vae
        z = latents.to(vae.dtype) / vae.config.scaling_factor + vae.config.shift_factor
        images = vae.decode(z, return_dict=False)[0]
        return (images.float() / 2 + 0.5).clamp(0, 1)

    def call_guidance(self, prompts: list[str], guidance_scale: float, negative_prompts: list[str] | None) -> dict:
        """``generate``'s two-branch CFG: the pipeline's own scale and negatives (None: the empty prompt)."""
        return {"negative_prompt": negative_prompts, "guidance_scale": guidance_scale}

    def load_trained(self, run_dir: str | Path) -> str | None:
        """Load what a run exported (``lora/`` or ``transformer/``) into the pipeline; returns what."""
        return load_run_export(self, run_dir, TRANSFORMER_CLASS, set_attention_backend)
