"""FLUX.1's mechanics, shared by the FLUX.1 families (``flux``: ``FluxPipeline``; ``flux_kontext``:
``FluxKontextPipeline``, the same transformer class with the source image's latents appended to its tokens).

How the adapter keeps the pipeline's own math:

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
* **Extra tokens** (``extra_tokens``): a family may append tokens of its own after the image tokens, with their
  own ids; the velocity is the output at the image tokens only (``FluxKontextPipeline``'s ``noise_pred[:, :N]``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from flowrl.media import MediaKind
from flowrl.pipelines.base import Conditioning, Guidance, GuidanceKind, source_images_of
from flowrl.pipelines.kit.adapter import CachedPromptAdapter, cast_parts
from flowrl.pipelines.kit.attention import set_dispatcher_attention_backend
from flowrl.pipelines.kit.images import check_count
from flowrl.pipelines.kit.layout import dynamic_shift, packed_layout, packed_tokens
from flowrl.pipelines.kit.loading import check_folder_or_hub, load_pretrained_pipeline
from flowrl.pipelines.kit.lora import TWO_STREAM_ATTENTION, load_run_export
from flowrl.pipelines.kit.prompts import cached_rows

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------- the layout
# black-forest-labs/FLUX.1-dev: vae/config.json and scheduler/scheduler_config.json
FLUX_LATENT_CHANNELS = 16
FLUX_VAE_SCALE_FACTOR = 8


FLUX_SCHEDULER_CONFIG = {
    "num_train_timesteps": 1000,
    "shift": 3.0,
    "use_dynamic_shifting": True,
    "base_shift": 0.5,
    "max_shift": 1.15,
    "base_image_seq_len": 256,
    "max_image_seq_len": 4096,
}


def flux_image_seq_len(height: int, width: int, vae_scale_factor: int = 8) -> int:
    """Number of packed FLUX latent tokens: one per 2x2 patch of the (H/8, W/8) latent."""
    return packed_tokens(height, width, vae_scale_factor)


def latent_shape(
    height: int, width: int, *, vae_scale_factor: int = FLUX_VAE_SCALE_FACTOR, channels: int = FLUX_LATENT_CHANNELS
) -> tuple[int, int]:
    """One sample's packed latent ``(tokens, 4 x latent channels)``."""
    return packed_layout(height, width, vae_scale_factor, channels).latent


def mu_of(image_seq_len: int, scheduler_config=None) -> float:
    """FLUX's shift ``mu`` for ``image_seq_len`` packed tokens, as ``FluxPipeline.__call__`` computes it
    (``dynamic_shift`` over the scheduler config's bounds; default: FLUX.1-dev's)."""
    return dynamic_shift(image_seq_len, FLUX_SCHEDULER_CONFIG if scheduler_config is None else scheduler_config)


def flux_mu(height: int, width: int, scheduler_config=None) -> float:
    """FLUX's resolution-dependent shift ``mu``, as ``FluxPipeline.__call__`` computes it."""
    return mu_of(flux_image_seq_len(height, width), scheduler_config)


# ---------------------------------------------------------------------------------------- the adapter
# the joint attention projections of the double-stream blocks (to_q/to_k/to_v also match the single blocks')
FLUX_LORA_TARGETS = list(TWO_STREAM_ATTENTION)
FLUX_TRANSFORMER_CLASS = "FluxTransformer2DModel"


def check_flux_path(model_cfg, family: str = "flux", what: str = "FLUX") -> None:
    """Refuse a ``model.path`` that cannot load as a FLUX.1 pipeline before any model is built: a missing local
    path, a folder that is not a diffusers pipeline folder, a single file (not supported for FLUX here)."""
    path = model_cfg.path
    if path == "tiny":
        return
    check_folder_or_hub(path, family, what)


class Flux1Adapter(CachedPromptAdapter):
    """The FLUX.1 mechanics every FLUX.1 family shares (packed tokens, the shifted schedule, embedded guidance,
    the VAE, LoRA in diffusers' format). A family subclasses it and names its pipeline class, its tiny builder
    and its recipe; a family whose rows add tokens (FLUX.1-Kontext's source-image latents) overrides
    ``extra_tokens``, ``model_inputs`` and ``encode_prompts``."""

    lora_target_modules = FLUX_LORA_TARGETS
    media_kind = MediaKind.IMAGE
    pipeline_class = "FluxPipeline"  # the diffusers class ``from_config`` loads and ``save_lora`` writes for
    family = "flux"  # model.pipeline, as errors name it

    frozen_parts = ("text_encoder", "text_encoder_2", "vae")
    family_title = "FLUX"

    def _start(self, pipe, attention_backend: str | None) -> None:
        """FLUX.1's own members: its guidance embedding, the packed latents' channels, tokens and ids, the
        attention backend."""
        self.guidance_embeds = bool(pipe.transformer.config.guidance_embeds)
        # the packed layout: one token per 2x2 patch of the (H/8, W/8) latent
        self.latent_channels = pipe.transformer.config.in_channels // 4
        # the unpacked latent sides, as prepare_latents has them
        h, w = (2 * (value // (pipe.vae_scale_factor * 2)) for value in (self.height, self.width))
        self.image_seq_len = flux_image_seq_len(self.height, self.width, pipe.vae_scale_factor)
        self._image_ids = pipe._prepare_latent_image_ids(1, h // 2, w // 2, self.device, self.compute_dtype)
        self._text_ids: dict[int, torch.Tensor] = {}
        self._set_attention(attention_backend, set_dispatcher_attention_backend)

    @classmethod
    def build_tiny(cls, seed: int):
        """The family's offline tiny pipeline (``model.path: tiny``)."""
        raise NotImplementedError

    @classmethod
    def from_config(cls, model_cfg, device: torch.device | str = "cpu", seed: int = 0):
        """Build from ``ModelConfig``: ``path="tiny"`` builds the family's offline tiny model (``build_tiny``;
        ``model.tiny_size`` does not apply), else ``<pipeline_class>.from_pretrained`` of a hub id or folder."""
        if model_cfg.path == "tiny":
            pipe = cls.build_tiny(seed)
        else:
            cls.check_model_path(model_cfg)
            pipe = load_pretrained_pipeline(cls.pipeline_class, model_cfg.path, model_cfg.dtype, model_cfg.revision)
        cast_parts(pipe, model_cfg.dtype, ("text_encoder", "text_encoder_2", "transformer"))
        return cls.from_pipe(pipe, model_cfg, device)

    def guidance(self, scale: float) -> Guidance:
        """FLUX.1-dev's embedded guidance: the scale is the transformer's ``guidance`` input, one pass a step
        (``NONE`` for a transformer without a guidance embedding, FLUX.1-schnell)."""
        return Guidance(GuidanceKind.EMBEDDED if self.guidance_embeds else GuidanceKind.NONE, float(scale), 1)

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

    def _rows(self, prompts: list[str], images: list | None = None) -> list[Conditioning]:
        """One-row embeddings of each prompt (and its source images) through the prompt cache
        (``kit.prompts.cached_rows``)."""
        if images is None:
            return cached_rows(self._cache, self.prompt_cache, prompts, self._encode)
        return cached_rows(self._cache, self.prompt_cache, prompts, self._encode, images)

    def encode_prompts(
        self, prompts: list[str], negative_prompts: list[str] | None = None, images: list | None = None
    ) -> Conditioning:
        """T5 embeddings (B, L, D) and CLIP pooled embeddings (B, P) of ``prompts``, cached per prompt; a family
        that takes source images adds their rows (``images``: one list per prompt, ``source_images`` of them).

        FLUX's embedded guidance has no negative branch: all-empty ``negative_prompts`` are accepted (they are
        the default), a non-empty one is refused rather than ignored."""
        check_count(images, prompts, self.family, source_images_of(self))
        if images is not None and not any(images):
            images = None  # a text-only family given empty lists
        if negative_prompts is not None:
            if len(negative_prompts) != len(prompts):
                raise ValueError(f"{len(negative_prompts)} negative prompts for {len(prompts)} prompts")
            if any(negative_prompts):
                raise ValueError(
                    f"negative prompts: the {self.family} pipeline uses FLUX.1's embedded guidance, which has "
                    "no negative branch; remove the negative prompts (data.negative_prompt, per-prompt)"
                )
        rows = self._rows(list(prompts), images)
        return {k: torch.cat([r[k] for r in rows]) for k in rows[0]}

    def negative_conditioning(self, n: int) -> Conditioning:
        raise NotImplementedError(
            f"the {self.family} pipeline has no CFG negative: FLUX.1's guidance is embedded "
            "(sample.guidance_scale is the transformer's guidance input)"
        )

    # ------------------------------------------------------------------ sampling pieces
    def mu(self) -> float:
        """FLUX's resolution-dependent shift, as ``FluxPipeline.__call__`` computes it."""
        return mu_of(self.image_seq_len, self._scheduler.config)

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
        return latent_shape(self.height, self.width, vae_scale_factor=factor, channels=self.latent_channels)

    def initial_noise(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Packed Gaussian latents at sigma = 1 through ``prepare_latents`` (fp32): (n, N, 64)."""
        latents, _ = self.pipe.prepare_latents(
            n, self.latent_channels, self.height, self.width, torch.float32, self.device, generator
        )
        return latents

    def extra_tokens(self, inputs: Conditioning) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Tokens a row appends to the image tokens, with their ids ((B, M, 64), (M, 3)); None: none (FLUX.1)."""
        return None

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
        hidden, ids, extra = x.to(self.compute_dtype), self._image_ids, self.extra_tokens(inputs)
        if extra is not None:  # appended after the image tokens, as the pipeline does; their output is dropped
            hidden, ids = torch.cat([hidden, extra[0]], dim=1), torch.cat([ids, extra[1]], dim=0)
        out = (model or self.transformer)(
            hidden_states=hidden,
            timestep=timestep,
            guidance=guidance,
            pooled_projections=inputs["pooled_prompt_embeds"],
            encoder_hidden_states=embeds,
            txt_ids=self._text_ids_for(embeds.shape[1]),
            img_ids=ids,
            return_dict=False,
        )[0]
        return (out if extra is None else out[:, : x.shape[1]]).float()

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Packed latents (B, N, 64) -> images (B, 3, H, W) float in [0, 1]."""
        vae = self.pipe.vae
        z = self.pipe._unpack_latents(latents, self.height, self.width, self.pipe.vae_scale_factor)
        z = z.to(vae.dtype) / vae.config.scaling_factor + vae.config.shift_factor
        images = vae.decode(z, return_dict=False)[0]
        return (images.float() / 2 + 0.5).clamp(0, 1)

    def call_guidance(self, prompts: list[str], guidance_scale: float, negative_prompts: list[str] | None) -> dict:
        """``generate``'s embedded guidance, as in training; ``negative_prompts`` are not used (FLUX.1 has no
        two-branch CFG here)."""
        return {"guidance_scale": guidance_scale}

    # ------------------------------------------------------------------ weights
    def load_trained(self, run_dir: str | Path) -> str | None:
        """Load what a run exported (``lora/`` or ``transformer/``) into the pipeline; returns what."""
        return load_run_export(self, run_dir, FLUX_TRANSFORMER_CLASS, set_dispatcher_attention_backend)


# ---------------------------------------------------------------------------------------- the tiny model
# black-forest-labs/FLUX.1-dev: vae/config.json
FLUX_VAE_SCALING_FACTOR = 0.3611
FLUX_VAE_SHIFT_FACTOR = 0.1159


def tiny_flux_components(seed: int = 0) -> dict:
    """The components of a tiny FLUX.1-dev, built offline (``flowrl.pipelines.flux.tiny.build_tiny_flux``
    describes them): ``transformer``, ``text_encoder`` / ``tokenizer`` (CLIP), ``text_encoder_2`` /
    ``tokenizer_2`` (T5), ``vae`` and ``scheduler``; any FLUX.1 pipeline class takes them."""
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel

    from flowrl.pipelines.kit.tiny import image_vae, make_word_tokenizer, seeded, t5_encoder

    clip_dim, t5_dim, clip_tokens = 32, 32, 77
    tokenizer = make_word_tokenizer(clip_tokens)
    tokenizer_2 = make_word_tokenizer(512)
    vocab = len(tokenizer)

    with seeded(seed, "transformer"):
        transformer = FluxTransformer2DModel(
            patch_size=1,
            in_channels=FLUX_LATENT_CHANNELS * 4,
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=t5_dim,
            pooled_projection_dim=clip_dim,
            guidance_embeds=True,
            axes_dims_rope=(4, 6, 6),
        )
    with seeded(seed, "text_encoder"):
        text_encoder = CLIPTextModel(
            CLIPTextConfig(
                vocab_size=vocab,
                hidden_size=clip_dim,
                intermediate_size=clip_dim * 2,
                num_hidden_layers=2,
                num_attention_heads=2,
                max_position_embeddings=clip_tokens,
                projection_dim=clip_dim,
                pad_token_id=0,
                bos_token_id=2,
                eos_token_id=3,
            )
        )
    with seeded(seed, "text_encoder_2"):
        text_encoder_2 = t5_encoder(vocab, t5_dim)
    with seeded(seed, "vae"):
        vae = image_vae(FLUX_LATENT_CHANNELS, FLUX_VAE_SCALING_FACTOR, FLUX_VAE_SHIFT_FACTOR)
    scheduler = FlowMatchEulerDiscreteScheduler(**FLUX_SCHEDULER_CONFIG)
    return {
        "scheduler": scheduler,
        "vae": vae,
        "text_encoder": text_encoder,
        "tokenizer": tokenizer,
        "text_encoder_2": text_encoder_2,
        "tokenizer_2": tokenizer_2,
        "transformer": transformer,
    }
