"""FLUX.2-klein (4B / 9B, base and step-distilled) adapter, built from ``Flux2KleinPipeline``'s public pieces.

What differs from FLUX.1 (``flowrl.pipelines.flux``), and how the adapter keeps the pipeline's own math:

* **Text** is one Qwen3 model prompted through its chat template (thinking off): hidden states 9, 18 and 27
  stacked per token, every one of the ``model.max_sequence_length`` padded tokens kept (the pipeline passes no
  mask), with text ids ``(L, 4)`` = (0, 0, 0, l). No pooled vector.
* **Latents** are packed tokens ``(B, (H/16)(W/16), 128)``: the 32-channel VAE latent patchified 2x2, from
  ``prepare_latents``; the image ids ``(N, 4)`` = (0, row, col, 0) depend on the resolution only.
* **Sigmas** are the pipeline's: ``linspace(1, 1/T, T)`` shifted with ``mu = compute_empirical_mu(N, T)`` (the
  shift depends on the step count as well as the resolution); sigma_0 is exactly 1.
* **Timesteps**: the transformer takes sigma itself (the pipeline feeds ``t / 1000``); no guidance input.
* **Guidance** follows the checkpoint (``pipe.config.is_distilled``). The base models (``FLUX.2-klein-base-*``)
  use two-branch CFG ``v_u + w (v_c - v_u)`` above 1 (both branches in one batched forward here, two calls in
  the pipeline), the negative the empty prompt unless a row gives its own (``negative_prompt_embeds`` rows,
  which ``generate`` hands the pipeline). The step-distilled models (``FLUX.2-klein-4B`` / ``-9B``) run the
  conditional branch alone at any scale, as the pipeline ignores ``guidance_scale`` for them.
* **Decode** scatters the tokens back by their ids, undoes the VAE's batch-norm statistics and the 2x2
  patchify, then decodes (``AutoencoderKLFlux2``).
* **LoRA** targets the double blocks' joint attention projections and the single blocks' fused QKV+MLP input
  projection; ``save_lora`` writes what ``Flux2KleinPipeline.load_lora_weights`` loads.

``model.path``: ``tiny`` builds the offline tiny klein base, ``tiny-distilled`` the distilled one
(``build_tiny_flux2``); else a hub id or a local diffusers folder (``Flux2KleinPipeline.from_pretrained``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from flowrl.media import MediaKind
from flowrl.pipelines.base import Conditioning, Guidance, GuidanceKind
from flowrl.pipelines.flux2 import layout
from flowrl.pipelines.flux2.tiny import TINY_PATHS
from flowrl.pipelines.kit.adapter import CachedPromptAdapter, cast_parts
from flowrl.pipelines.kit.attention import set_dispatcher_attention_backend
from flowrl.pipelines.kit.loading import check_folder_or_hub, load_pretrained_pipeline
from flowrl.pipelines.kit.lora import TWO_STREAM_ATTENTION, load_run_export

FLUX2_LORA_TARGETS = [*TWO_STREAM_ATTENTION, "attn.to_qkv_mlp_proj"]
TRANSFORMER_CLASS = "Flux2Transformer2DModel"


def check_model_path(model_cfg) -> None:
    """Refuse a ``model.path`` that cannot load as a FLUX.2-klein pipeline before any model is built."""
    if model_cfg.path not in TINY_PATHS:
        check_folder_or_hub(model_cfg.path, "flux2", "FLUX.2")


class Flux2Adapter(CachedPromptAdapter):
    """FLUX.2-klein for RL. ``pipe`` is a ``Flux2KleinPipeline``; the transformer is the policy."""

    lora_target_modules = FLUX2_LORA_TARGETS
    check_model_path = staticmethod(check_model_path)
    media_kind = MediaKind.IMAGE
    tiny_recipe = "tiny-flux2"
    pipeline_classes = ("Flux2KleinPipeline",)  # the model_index.json classes it loads
    tiny_paths = tuple(TINY_PATHS)

    default_size = 1024
    default_max_sequence_length = 512
    family_title = "FLUX.2"

    def _start(self, pipe, attention_backend: str | None) -> None:
        """FLUX.2's own members: distilled or base, the packed latents' channels, tokens and ids, the attention
        backend."""
        self.is_distilled = bool(pipe.config.get("is_distilled", False))
        self.latent_channels = pipe.transformer.config.in_channels // 4
        self.image_seq_len = layout.image_seq_len(self.height, self.width, pipe.vae_scale_factor)
        h, w = (value // (pipe.vae_scale_factor * 2) for value in (self.height, self.width))
        self._grid = (h, w)
        self._image_ids = pipe._prepare_latent_ids(torch.zeros(1, 1, h, w)).to(self.device)  # (1, N, 4)
        self._set_attention(attention_backend, set_dispatcher_attention_backend)

    @classmethod
    def from_config(cls, model_cfg, device: torch.device | str = "cpu", seed: int = 0) -> Flux2Adapter:
        """``path="tiny"`` / ``"tiny-distilled"``: the offline tiny klein (``model.tiny_size`` does not apply);
        else ``Flux2KleinPipeline.from_pretrained`` of a hub id or local folder."""
        if model_cfg.path in TINY_PATHS:
            from flowrl.pipelines.flux2.tiny import build_tiny_flux2

            pipe = build_tiny_flux2(seed=seed, **TINY_PATHS[model_cfg.path])
        else:
            check_model_path(model_cfg)
            pipe = load_pretrained_pipeline("Flux2KleinPipeline", model_cfg.path, model_cfg.dtype, model_cfg.revision)
        cast_parts(pipe, model_cfg.dtype, ("text_encoder", "transformer"))
        return cls.from_pipe(pipe, model_cfg, device)

    def guidance(self, scale: float) -> Guidance:
        """Base models: two-branch CFG above 1 (2 rows a sample); distilled models: one pass at any scale."""
        if scale > 1.0 and not self.is_distilled:
            return Guidance(GuidanceKind.CFG, float(scale), 2)
        return Guidance(GuidanceKind.NONE, float(scale), 1)

    # ------------------------------------------------------------------ conditioning
    @torch.no_grad()
    def _encode(self, prompts: list[str]) -> Conditioning:
        """Stacked Qwen3 hidden states (B, L, 3D) of ``prompts`` (the pipeline's own negative is the empty prompt)."""
        embeds, _ = self.pipe.encode_prompt(
            prompt=list(prompts), device=self.device, max_sequence_length=self.max_sequence_length
        )
        return {"prompt_embeds": embeds}

    # ------------------------------------------------------------------ sampling pieces
    def sigmas(self, num_steps: int) -> torch.Tensor:
        """The pipeline's schedule with ``num_steps`` transitions: (T+1,) fp32 from 1 to 0."""
        mu = layout.mu_of(self.image_seq_len, num_steps)
        if getattr(self._scheduler.config, "use_flow_sigmas", False):
            self._scheduler.set_timesteps(num_steps, device="cpu", mu=mu)
        else:
            sigmas = np.linspace(1.0, 1 / num_steps, num_steps)
            self._scheduler.set_timesteps(sigmas=sigmas, device="cpu", mu=mu)
        return self._scheduler.sigmas.detach().float().cpu().clone()

    @property
    def latent_shape(self) -> tuple[int, int]:
        factor = self.pipe.vae_scale_factor
        return layout.latent_shape(self.height, self.width, vae_scale_factor=factor, channels=self.latent_channels)

    def initial_noise(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Packed Gaussian latents at sigma = 1 through ``prepare_latents`` (fp32): (n, N, 128)."""
        latents, _ = self.pipe.prepare_latents(
            n, self.latent_channels, self.height, self.width, torch.float32, self.device, generator
        )
        return latents

    def model_inputs(self, cond: Conditioning, guidance_scale: float) -> Conditioning:
        """The embeddings in the model dtype; with CFG the negative rows stacked before the prompt rows."""
        embeds = cond["prompt_embeds"]
        if self.guidance(guidance_scale).kind is GuidanceKind.CFG:
            embeds = torch.cat([self._negatives(cond)["prompt_embeds"].to(embeds.device), embeds])
        return {"prompt_embeds": embeds.to(self.compute_dtype)}

    def forward(self, model, x: torch.Tensor, sigma, inputs: Conditioning, doubled: bool) -> torch.Tensor:
        """One transformer call on x (B, N, 128), twice stacked when ``doubled`` (CFG's two branches, for a base
        model above 1), at ``timestep = sigma``; fp32."""
        n = x.shape[0]
        rows = 2 * n if doubled else n
        embeds = inputs["prompt_embeds"]
        t = torch.as_tensor(sigma, dtype=torch.float32, device=self.device)
        t = t.reshape(-1).expand(n) if t.numel() == 1 else t.reshape(n)
        x_in = x.to(self.compute_dtype)
        return model(
            hidden_states=torch.cat([x_in, x_in]) if doubled else x_in,
            encoder_hidden_states=embeds,
            timestep=torch.cat([t, t]) if doubled else t,
            img_ids=self._image_ids.expand(rows, -1, -1),
            txt_ids=self.pipe._prepare_text_ids(embeds).to(self.device),
            guidance=None,
            return_dict=False,
        )[0].float()

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Packed latents (B, N, 128) -> images (B, 3, H, W) float in [0, 1], as the pipeline's tail."""
        pipe, vae = self.pipe, self.pipe.vae
        ids = self._image_ids.expand(latents.shape[0], -1, -1)
        z = pipe._unpack_latents_with_ids(latents.to(vae.dtype), ids, *self._grid)
        mean = vae.bn.running_mean.view(1, -1, 1, 1).to(z)
        std = torch.sqrt(vae.bn.running_var.view(1, -1, 1, 1) + vae.config.batch_norm_eps).to(z)
        z = pipe._unpatchify_latents(z * std + mean)
        images = vae.decode(z, return_dict=False)[0]
        return (images.float() / 2 + 0.5).clamp(0, 1)

    def call_guidance(self, prompts: list[str], guidance_scale: float, negative_prompts: list[str] | None) -> dict:
        """``generate``'s guidance: the pipeline's scale, a row's own negative as its embeddings."""
        negative = None
        if negative_prompts and any(negative_prompts) and self.guidance(guidance_scale).kind is GuidanceKind.CFG:
            negative = self.encode_prompts(prompts, list(negative_prompts))["negative_prompt_embeds"]
        return {"negative_prompt_embeds": negative, "guidance_scale": guidance_scale}

    # ------------------------------------------------------------------ weights
    def load_trained(self, run_dir: str | Path) -> str | None:
        """Load what a run exported (``lora/`` or ``transformer/``) into the pipeline; returns what."""
        return load_run_export(self, run_dir, TRANSFORMER_CLASS)
