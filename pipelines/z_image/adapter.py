"""Z-Image and Z-Image-Turbo adapter, built from ``ZImagePipeline``'s public pieces.

What differs from SD3 (``flowrl.pipelines.sd3``), and how the adapter keeps the pipeline's own math:

* **Text** is one Qwen3 model prompted through its chat template (``encode_prompt``): the second-to-last hidden
  state of the prompt's tokens, padding dropped, so each prompt has its own length. The conditioning keeps
  them zero-padded to ``model.max_sequence_length`` with ``prompt_lengths`` (B,) rows; ``velocity`` hands the
  transformer each row cut back to its length, as the pipeline's list of embeddings.
* **Latents** are ``(B, 16, H/8, W/8)`` fp32 from ``prepare_latents`` (the transformer patchifies 2x2 itself and
  takes a list of ``(16, 1, h, w)`` frames, one per sample).
* **Sigmas** are the pipeline's: ``linspace(1, 1/T, T)`` through the scheduler with its shift (Z-Image-Turbo:
  static shift 3) and ``mu = calculate_shift(image_seq_len, ...)`` where the scheduler shifts dynamically.
* **Timesteps and sign**: the transformer is fed ``(1000 - t) / 1000`` = 1 - sigma (t = sigma x 1000, the
  scheduler's timestep) and predicts minus the velocity; ``velocity`` returns the negated output, as the pipeline
  steps the scheduler with it.
* **Guidance**: ``ZImagePipeline``'s ``guidance_scale`` g gives ``pos + g (pos - neg)``, which is two-branch CFG at
  scale ``1 + g``. flowrl's ``sample.guidance_scale`` keeps flowrl's meaning (``v_u + w (v_c - v_u)``, 1 = the
  conditional prediction alone), so w = g + 1: Z-Image base at the pipeline's 4.0 is w = 5.0, Z-Image-Turbo at
  the pipeline's 0.0 is w = 1.0 (one pass). ``generate`` hands the pipeline g = w - 1. As the pipeline, w <= 1
  runs the conditional branch alone. Both branches run in one batched call (prompt rows first, as the pipeline);
  per-row negatives as SD3's (``negative_prompt_embeds`` rows), the empty prompt by default.
  The pipeline's two CFG knobs are the adapter's: ``cfg_normalization`` (> 0: the guided prediction's norm is
  capped at that many times the conditional one's, per sample) and ``cfg_truncation`` (CFG is dropped where
  1 - sigma exceeds it; 1.0, the default, never).
* **LoRA** targets the attention projections of every block (the refiners' too); ``save_lora`` writes what
  ``ZImagePipeline.load_lora_weights`` loads.

``model.path``: ``tiny`` builds the offline tiny Z-Image (``build_tiny_z_image``), else a hub id or a local
diffusers folder (``ZImagePipeline.from_pretrained``: ``Tongyi-MAI/Z-Image``, ``Tongyi-MAI/Z-Image-Turbo``).
"""

from __future__ import annotations

from pathlib import Path

import torch

from flowrl.media import MediaKind
from flowrl.pipelines.base import Conditioning, Guidance, GuidanceKind
from flowrl.pipelines.kit.adapter import CachedPromptAdapter, cast_parts
from flowrl.pipelines.kit.attention import set_dispatcher_attention_backend
from flowrl.pipelines.kit.loading import check_folder_or_hub, load_pretrained_pipeline
from flowrl.pipelines.kit.lora import load_run_export
from flowrl.pipelines.z_image import layout

Z_IMAGE_LORA_TARGETS = ["attention.to_q", "attention.to_k", "attention.to_v", "attention.to_out.0"]
TRANSFORMER_CLASS = "ZImageTransformer2DModel"


def check_model_path(model_cfg) -> None:
    """Refuse a ``model.path`` that cannot load as a Z-Image pipeline before any model is built."""
    if model_cfg.path != "tiny":
        check_folder_or_hub(model_cfg.path, "z_image", "Z-Image")


class ZImageAdapter(CachedPromptAdapter):
    """Z-Image / Z-Image-Turbo for RL. ``pipe`` is a ``ZImagePipeline``; the transformer is the policy."""

    image_vae_latents = True  # latents are the VAE's own (C, h, w): dataset methods encode images into them
    lora_target_modules = Z_IMAGE_LORA_TARGETS
    check_model_path = staticmethod(check_model_path)
    media_kind = MediaKind.IMAGE
    tiny_recipe = "tiny-z-image"
    sequence_parallel_refusal = (  # train.sequence_parallel > 1 (flowrl.mesh)
        "diffusers ships no context-parallel plan for ZImageTransformer2DModel"
    )
    pipeline_classes = ("ZImagePipeline",)  # the model_index.json classes it loads

    default_size = 1024
    default_max_sequence_length = 512
    family_title = "Z-Image"

    def __init__(self, pipe, *args, cfg_normalization: float = 0.0, cfg_truncation: float = 1.0, **kwargs):
        """The kit's image constructor (``CachedPromptAdapter.__init__``: size, text length, device, VAE dtype,
        prompt cache, attention backend) and the pipeline's two CFG knobs."""
        self.cfg_normalization = float(cfg_normalization)
        self.cfg_truncation = float(cfg_truncation)
        super().__init__(pipe, *args, **kwargs)

    def _start(self, pipe, attention_backend: str | None) -> None:
        """Z-Image's own members: its latent channels and image tokens, the attention backend."""
        self.latent_channels = pipe.transformer.config.in_channels
        self.image_seq_len = layout.image_tokens(self.height, self.width, pipe.vae_scale_factor)
        self._set_attention(
            attention_backend,
            set_dispatcher_attention_backend,
            heads=pipe.transformer.n_heads,
            head_dim=pipe.transformer.dim // pipe.transformer.n_heads,
        )

    @classmethod
    def from_config(cls, model_cfg, device: torch.device | str = "cpu", seed: int = 0) -> ZImageAdapter:
        """``path="tiny"``: the offline tiny Z-Image (``model.tiny_size`` does not apply); else
        ``ZImagePipeline.from_pretrained`` of a hub id or local folder."""
        if model_cfg.path == "tiny":
            from flowrl.pipelines.z_image.tiny import build_tiny_z_image

            pipe = build_tiny_z_image(seed=seed)
        else:
            check_model_path(model_cfg)
            pipe = load_pretrained_pipeline("ZImagePipeline", model_cfg.path, model_cfg.dtype, model_cfg.revision)
        cast_parts(pipe, model_cfg.dtype, ("text_encoder", "transformer"))
        return cls.from_pipe(pipe, model_cfg, device)

    def guidance(self, scale: float) -> Guidance:
        """Two-branch CFG above 1 (both branches in one batched call: 2 rows a sample), else one pass."""
        return Guidance.cfg_above_one(scale)

    # ------------------------------------------------------------------ conditioning
    @torch.no_grad()
    def _encode(self, prompts: list[str]) -> Conditioning:
        """The pipeline's per-prompt Qwen3 embeddings (B, L, D), zero-padded to ``max_sequence_length``, and their
        lengths (B,)."""
        embeds, _ = self.pipe.encode_prompt(
            prompt=list(prompts),  # the pipeline rewrites the list it is given
            device=self.device,
            do_classifier_free_guidance=False,
            max_sequence_length=self.max_sequence_length,
        )
        padded = embeds[0].new_zeros(len(embeds), self.max_sequence_length, embeds[0].shape[-1])
        for i, e in enumerate(embeds):
            padded[i, : len(e)] = e
        return {"prompt_embeds": padded, "prompt_lengths": torch.tensor([len(e) for e in embeds], device=self.device)}

    # ------------------------------------------------------------------ sampling pieces
    def sigmas(self, num_steps: int) -> torch.Tensor:
        """The pipeline's schedule with ``num_steps`` transitions: (T+1,) fp32 from 1 to 0."""
        from diffusers.pipelines.z_image.pipeline_z_image import calculate_shift, get_default_z_image_sigmas

        c = self._scheduler.config
        mu = calculate_shift(
            self.image_seq_len,
            c.get("base_image_seq_len", 256),
            c.get("max_image_seq_len", 4096),
            c.get("base_shift", 0.5),
            c.get("max_shift", 1.15),
        )
        self._scheduler.set_timesteps(sigmas=get_default_z_image_sigmas(num_steps), device="cpu", mu=mu)
        return self._scheduler.sigmas.detach().float().cpu().clone()

    @property
    def latent_shape(self) -> tuple[int, int, int]:
        factor = self.pipe.vae_scale_factor
        return layout.latent_shape(self.height, self.width, vae_scale_factor=factor, channels=self.latent_channels)

    def initial_noise(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Gaussian latents at sigma = 1 through ``prepare_latents`` (fp32): (n, 16, H/8, W/8)."""
        return self.pipe.prepare_latents(
            n, self.latent_channels, self.height, self.width, torch.float32, self.device, generator
        )

    def model_inputs(self, cond: Conditioning, guidance_scale: float) -> Conditioning:
        """The embeddings in the model dtype; with CFG the negative rows stacked after the prompt rows (each
        row's own negative where ``cond`` holds them, else the empty prompt), as the pipeline batches them."""
        embeds, lengths = cond["prompt_embeds"], cond["prompt_lengths"]
        if self.guidance(guidance_scale).kind is GuidanceKind.CFG:
            neg = self._negatives(cond, ("prompt_embeds", "prompt_lengths"))
            embeds = torch.cat([embeds, neg["prompt_embeds"].to(embeds.device)])
            lengths = torch.cat([lengths, neg["prompt_lengths"].to(lengths.device)])
        return {"prompt_embeds": embeds.to(self.compute_dtype), "prompt_lengths": lengths}

    def forward(self, model, x: torch.Tensor, sigma, inputs: Conditioning, doubled: bool) -> torch.Tensor:
        """The velocity of one transformer call on x (B, 16, h, w), twice stacked when ``doubled`` (CFG's two
        branches, the prompt rows first): the negated output (the transformer predicts minus the velocity), fp32.
        The transformer takes each row's embeddings cut back to its length and the timestep ``1 - sigma``."""
        n = x.shape[0]
        embeds, lengths = inputs["prompt_embeds"], inputs["prompt_lengths"].tolist()
        t_in = self._pipeline_timestep(sigma, n)
        frames = x.to(self.compute_dtype).unsqueeze(2)  # (B, C, 1, h, w)
        out = model(
            x=list(torch.cat([frames, frames]) if doubled else frames),
            t=torch.cat([t_in, t_in]) if doubled else t_in,
            cap_feats=[embeds[i, : lengths[i]] for i in range(embeds.shape[0])],
            return_dict=False,
        )[0]
        return -torch.stack([o.float() for o in out]).squeeze(2)

    def _pipeline_timestep(self, sigma: torch.Tensor | float, n: int) -> torch.Tensor:
        """The pipeline's timestep (n,): ``(1000 - t) / 1000`` = 1 - sigma, t = sigma x the scheduler's
        ``num_train_timesteps``."""
        t = torch.as_tensor(sigma, dtype=torch.float32, device=self.device) * self._scheduler.config.num_train_timesteps
        t = t.reshape(-1).expand(n) if t.numel() == 1 else t.reshape(n)
        return (1000 - t) / 1000

    def cfg_combine(self, out: torch.Tensor, scale: float, sigma: torch.Tensor | float) -> torch.Tensor:
        """``ZImagePipeline``'s CFG at its scale ``w - 1`` (``_guided``) of a forward's velocities, the prompt half
        first. (The pipeline guides the transformer's output, minus the velocity: its combination, norm cap and
        truncation commute exactly with the sign.)"""
        n = out.shape[0] // 2
        return self._guided(out[:n], out[n:], scale - 1.0, self._pipeline_timestep(sigma, n))

    def _guided(self, pos: torch.Tensor, neg: torch.Tensor, g: float, t_in: torch.Tensor) -> torch.Tensor:
        """``ZImagePipeline``'s CFG at its scale g: ``pos + g (pos - neg)``, the norm capped at
        ``cfg_normalization`` x the conditional one's, and the conditional alone where ``t_in > cfg_truncation``."""
        pred = pos + g * (pos - neg)
        if self.cfg_normalization > 0:
            cap = pos.flatten(1).norm(dim=1) * self.cfg_normalization
            norm = pred.flatten(1).norm(dim=1)
            scale = torch.where(norm > cap, cap / norm, torch.ones_like(norm))
            pred = pred * scale.view(-1, *[1] * (pred.dim() - 1))
        if self.cfg_truncation <= 1:
            truncated = (t_in > self.cfg_truncation).view(-1, *[1] * (pred.dim() - 1))
            pred = torch.where(truncated, pos, pred)
        return pred

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Latents (B, 16, h, w) -> images (B, 3, H, W) float in [0, 1]."""
        vae = self.pipe.vae
        z = latents.to(vae.dtype) / vae.config.scaling_factor + vae.config.shift_factor
        images = vae.decode(z, return_dict=False)[0]
        return (images.float() / 2 + 0.5).clamp(0, 1)

    def call_guidance(self, prompts: list[str], guidance_scale: float, negative_prompts: list[str] | None) -> dict:
        """``generate``'s guidance: the pipeline's ``guidance_scale - 1`` (see the module docstring) with its two
        CFG knobs, the negatives as given (None: the pipeline's empty prompt)."""
        return {
            "negative_prompt": list(negative_prompts) if negative_prompts else None,
            "guidance_scale": max(guidance_scale - 1.0, 0.0),
            "cfg_normalization": self.cfg_normalization,
            "cfg_truncation": self.cfg_truncation,
        }

    # ------------------------------------------------------------------ weights
    def load_trained(self, run_dir: str | Path) -> str | None:
        """Load what a run exported (``lora/`` or ``transformer/``) into the pipeline; returns what."""
        return load_run_export(self, run_dir, TRANSFORMER_CLASS)
