"""What the Qwen-Image families share (text-to-image ``qwen_image``, editing ``qwen_image_edit``): the packed latent
layout and the shift ``mu``, and ``QwenImageCore``, the adapter every Qwen-Image family subclasses, built from the
pipelines' public pieces (the family modules add their loader, ``from_config`` and what their pipeline adds).

What differs from SD3 and FLUX, and how the core keeps the pipelines' own math:

* **Text** is the last hidden state of Qwen2.5-VL over the pipeline's chat template with the template's prefix
  dropped (``encode_prompt``: ``prompt_template_encode``, ``prompt_template_encode_start_idx``), one row per
  prompt of its own length. Rows are cached per prompt and padded with zeros to the longest of a call, with
  ``prompt_embeds_mask`` (B, L) marking the real tokens: the mask goes to the transformer (its attention and
  RoPE ignore the padding), dropped where every token is real, as the pipeline drops it.
* **Latents** are packed 2x2 patches ``(B, (H/16)(W/16), 64)`` of the 16-channel VAE latent, as FLUX's; the
  transformer's ``img_shapes`` ``[(1, H/16, W/16)]`` place them in its RoPE.
* **Sigmas** are the pipeline's: ``linspace(1, 1/T, T)`` shifted with the resolution-dependent ``mu``
  (``calculate_shift`` over the scheduler config; Qwen-Image's shift is exponential with a terminal sigma of
  0.02), then the scheduler's terminal 0.
* **Guidance** is Qwen-Image's "true CFG" (``true_cfg_scale``): two branches (the negative prompt's, default
  ``" "`` as Qwen-Image's examples use, or a row's own), combined ``v_u + w (v_c - v_u)`` and then rescaled per
  token to the conditional velocity's norm (``v * |v_c| / |v|`` over the channels). The pipeline applies it
  only when ``true_cfg_scale > 1``; at 1 (or below) one pass gives the conditional velocity.
* **Timesteps**: the transformer takes sigma in [0, 1] (it scales by 1000 itself), as the pipeline feeds it
  ``scheduler.timesteps / 1000``.
* **Decode** un-packs to ``(B, 16, 1, H/8, W/8)``, undoes the VAE's per-channel ``latents_mean`` /
  ``latents_std`` and keeps the single frame of the 3-D causal VAE.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from flowrl.media import MediaKind
from flowrl.mesh import sequence_degree
from flowrl.pipelines.base import Conditioning, Guidance
from flowrl.pipelines.kit.adapter import CachedPromptAdapter
from flowrl.pipelines.kit.attention import set_dispatcher_attention_backend
from flowrl.pipelines.kit.layout import dynamic_shift, packed_layout, packed_tokens
from flowrl.pipelines.kit.lora import TWO_STREAM_ATTENTION, load_run_export

logger = logging.getLogger(__name__)

# Qwen/Qwen-Image: vae/config.json (z_dim 16, 3 down-samplings) and scheduler/scheduler_config.json
QWEN_LATENT_CHANNELS = 16
QWEN_VAE_SCALE_FACTOR = 8
QWEN_SCHEDULER_CONFIG = {
    "num_train_timesteps": 1000,
    "shift": 1.0,
    "use_dynamic_shifting": True,
    "base_shift": 0.5,
    "max_shift": 0.9,
    "base_image_seq_len": 256,
    "max_image_seq_len": 8192,
    "shift_terminal": 0.02,
    "time_shift_type": "exponential",
}


def image_seq_len(height: int, width: int, vae_scale_factor: int = QWEN_VAE_SCALE_FACTOR) -> int:
    """Packed latent tokens: one per 2x2 patch of the (H/8, W/8) latent."""
    return packed_tokens(height, width, vae_scale_factor)


def img_shape(height: int, width: int, vae_scale_factor: int = QWEN_VAE_SCALE_FACTOR) -> tuple[int, int, int]:
    """One image's (frames, rows, columns) of packed tokens: the transformer's ``img_shapes`` entry (its RoPE)."""
    return (1, height // vae_scale_factor // 2, width // vae_scale_factor // 2)


def latent_shape(
    height: int, width: int, *, vae_scale_factor: int = QWEN_VAE_SCALE_FACTOR, channels: int = QWEN_LATENT_CHANNELS
) -> tuple[int, int]:
    """One sample's packed latent ``(tokens, 4 x latent channels)``."""
    return packed_layout(height, width, vae_scale_factor, channels).latent


def mu_of(seq_len: int, scheduler_config=None) -> float:
    """The shift ``mu`` for ``seq_len`` packed tokens, as ``QwenImagePipeline.__call__`` computes it
    (``dynamic_shift`` over the scheduler config's bounds, FLUX's fallbacks; default: Qwen-Image's)."""
    return dynamic_shift(seq_len, QWEN_SCHEDULER_CONFIG if scheduler_config is None else scheduler_config)


# the joint attention projections of both streams (flow_grpo's and verl-omni's Qwen-Image LoRA targets add the
# image and text MLPs: img_mlp.net.0.proj, img_mlp.net.2, txt_mlp.net.0.proj, txt_mlp.net.2)
QWEN_IMAGE_LORA_TARGETS = list(TWO_STREAM_ATTENTION)
QWEN_IMAGE_TRANSFORMER_CLASS = "QwenImageTransformer2DModel"
DEFAULT_NEGATIVE = " "  # Qwen-Image's examples' negative prompt (an empty row of the data means this one)


def pad_rows(rows: list[Conditioning], key: str = "prompt_embeds") -> Conditioning:
    """One-row embeddings ``{key: (1, L_i, D), key_mask: (1, L_i)}`` (each possibly padded) -> ``(B, L, D)`` and
    ``(B, L)`` with L the longest real length, zeros and mask 0 after each row's real tokens (the pipeline's
    padding)."""
    lengths = [int(r[f"{key}_mask"].sum()) for r in rows]
    longest = max(lengths)
    embeds = rows[0][key].new_zeros(len(rows), longest, rows[0][key].shape[-1])
    mask = torch.zeros(len(rows), longest, dtype=torch.long, device=embeds.device)
    for i, (r, n) in enumerate(zip(rows, lengths)):
        embeds[i, :n] = r[key][0, :n]
        mask[i, :n] = 1
    return {key: embeds, f"{key}_mask": mask}


def pad_to(embeds: torch.Tensor, mask: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero-pad (B, L, D) embeddings and their (B, L) mask to ``length`` tokens."""
    extra = length - embeds.shape[1]
    if extra <= 0:
        return embeds, mask
    return (
        torch.cat([embeds, embeds.new_zeros(embeds.shape[0], extra, embeds.shape[2])], 1),
        torch.cat([mask, mask.new_zeros(mask.shape[0], extra)], 1),
    )


@contextmanager
def _last_text_stream(model: torch.nn.Module) -> Iterator[list[torch.Tensor]]:
    """Under DDP with gradients on, the text stream the transformer's last block computes and the model drops
    (a list holding it after the forward; empty otherwise). DDP, without ``find_unused_parameters``, waits in
    every backward for a gradient of each parameter it wraps: a LoRA on the last block's text-only projections
    (``attn.add_q_proj``, ``attn.to_add_out``, ``txt_mlp``, some of them default targets) gets one only if that
    stream joins the output, at weight 0. One process, FSDP and sampling are left as they were."""
    text: list[torch.Tensor] = []
    if not (isinstance(model, torch.nn.parallel.DistributedDataParallel) and torch.is_grad_enabled()):
        yield text
        return
    inner = getattr(model.module, "_orig_mod", model.module)
    handle = inner.transformer_blocks[-1].register_forward_hook(lambda module, args, out: text.append(out[0]))
    try:
        yield text
    finally:
        handle.remove()


class QwenImageCore(CachedPromptAdapter):
    """A Qwen-Image pipeline (true CFG) for RL; the transformer is the policy. A family subclass names its
    ``pipeline_class``, ``tiny_recipe``, ``build_tiny`` and ``from_config``."""

    lora_target_modules = QWEN_IMAGE_LORA_TARGETS
    media_kind = MediaKind.IMAGE
    pipeline_class = "QwenImagePipeline"
    negative_text = DEFAULT_NEGATIVE  # CFG's default negative

    default_max_sequence_length = 512
    family_title = "Qwen-Image"

    def _start(self, pipe, attention_backend: str | None) -> None:
        """Qwen-Image's own members: the text length checked, the packed latents' channels and tokens, the
        attention backend."""
        if self.max_sequence_length > 1024:
            raise ValueError(
                f"model.max_sequence_length: Qwen-Image takes at most 1024 tokens, got {self.max_sequence_length}"
            )
        self.latent_channels = pipe.transformer.config.in_channels // 4
        self.image_seq_len = image_seq_len(self.height, self.width, pipe.vae_scale_factor)
        self._set_attention(attention_backend, set_dispatcher_attention_backend)

    @classmethod
    def from_pipeline(cls, pipe, model_cfg, device: torch.device | str = "cpu"):
        """The adapter of a loaded pipeline: its text encoder and transformer in ``model.dtype``, the sizes and
        options of ``ModelConfig``."""
        from flowrl.pipelines.kit.loading import DTYPES

        dtype = DTYPES[model_cfg.dtype]
        for name in ("text_encoder", "transformer"):
            module = getattr(pipe, name)
            if module.dtype != dtype:
                module.to(dtype=dtype)
        return cls.from_pipe(pipe, model_cfg, device, **cls.options(model_cfg))

    @classmethod
    def options(cls, model_cfg) -> dict:
        """The constructor's family-specific keywords from ``ModelConfig`` (none for Qwen-Image)."""
        return {}

    def guidance(self, scale: float) -> Guidance:
        """True CFG (two rows a sample, norm-rescaled) above 1, as the pipeline's ``true_cfg_scale``; else one pass."""
        return Guidance.cfg_above_one(scale)

    # ------------------------------------------------------------------ conditioning
    @torch.no_grad()
    def _encode(self, prompts: list[str]) -> Conditioning:
        embeds, mask = self.pipe.encode_prompt(
            prompt=prompts, device=self.device, num_images_per_prompt=1, max_sequence_length=self.max_sequence_length
        )
        if mask is None:  # every token real: the pipeline drops the mask
            mask = torch.ones(embeds.shape[:2], dtype=torch.long, device=embeds.device)
        return {"prompt_embeds": embeds, "prompt_embeds_mask": mask.long()}

    def encode_prompts(self, prompts: list[str], negative_prompts: list[str] | None = None) -> Conditioning:
        """Qwen2.5-VL embeddings (B, L, D) of ``prompts`` with their mask (B, L), cached per prompt and padded to
        the longest of the call. ``negative_prompts``: each row's true-CFG negative (``negative_prompt_embeds``
        and its mask, padded on their own); "" is the default negative (``" "``)."""
        if negative_prompts is not None and len(negative_prompts) != len(prompts):
            raise ValueError(f"{len(negative_prompts)} negative prompts for {len(prompts)} prompts")
        cond = pad_rows(self._rows(list(prompts)))
        if negative_prompts is None:
            return cond
        rows = self._rows([n or DEFAULT_NEGATIVE for n in negative_prompts])
        negative = pad_rows(rows)
        cond["negative_prompt_embeds"] = negative["prompt_embeds"]
        cond["negative_prompt_embeds_mask"] = negative["prompt_embeds_mask"]
        return cond

    # ------------------------------------------------------------------ sampling pieces
    def mu(self) -> float:
        """The resolution-dependent shift, as ``QwenImagePipeline.__call__`` computes it."""
        return mu_of(self.image_seq_len, self._scheduler.config)

    def sigmas(self, num_steps: int) -> torch.Tensor:
        """The pipeline's schedule with ``num_steps`` transitions: (T+1,) fp32 from 1 to 0."""
        sigmas = np.linspace(1.0, 1 / num_steps, num_steps)
        self._scheduler.set_timesteps(sigmas=sigmas, device="cpu", mu=self.mu())
        return self._scheduler.sigmas.detach().float().cpu().clone()

    @property
    def latent_shape(self) -> tuple[int, int]:
        """One sample's packed latent: (tokens, 4 x latent channels)."""
        factor = self.pipe.vae_scale_factor
        return latent_shape(self.height, self.width, vae_scale_factor=factor, channels=self.latent_channels)

    def initial_noise(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Packed Gaussian latents at sigma = 1 through ``prepare_latents`` (fp32): (n, N, 64)."""
        return self.pipe.prepare_latents(
            n, self.latent_channels, self.height, self.width, torch.float32, self.device, generator
        )

    def model_inputs(self, cond: Conditioning, guidance_scale: float) -> Conditioning:
        """Transformer-ready conditioning: the model dtype, and with true CFG the negative rows stacked after the
        prompt rows (each row's own negative, else the default), both padded to one length. The mask is dropped
        where every token is real (the pipeline passes none then)."""
        embeds, mask = cond["prompt_embeds"], cond["prompt_embeds_mask"]
        if guidance_scale > 1.0:
            negative = self._negatives(cond, ("prompt_embeds", "prompt_embeds_mask"))
            neg, neg_mask = negative["prompt_embeds"], negative["prompt_embeds_mask"]
            length = max(embeds.shape[1], neg.shape[1])
            embeds, mask = pad_to(embeds, mask, length)
            neg, neg_mask = pad_to(neg.to(embeds.device), neg_mask.to(mask.device), length)
            embeds, mask = torch.cat([embeds, neg]), torch.cat([mask, neg_mask])
        inputs = {"prompt_embeds": embeds.to(self.compute_dtype)}
        if "image_latents" in cond:  # an edit family's source latents, the same for both CFG branches
            latents = cond["image_latents"].to(self.compute_dtype)
            inputs["image_latents"] = torch.cat([latents, latents]) if guidance_scale > 1.0 else latents
        if not bool(mask.all()):
            inputs["prompt_embeds_mask"] = mask
        return inputs

    def img_shapes(self, n: int) -> list[list[tuple[int, int, int]]]:
        """The transformer's ``img_shapes``: each row's packed image grid (its RoPE)."""
        return [[img_shape(self.height, self.width, self.pipe.vae_scale_factor)]] * n

    def cfg_combine(self, out: torch.Tensor, scale: float, sigma: torch.Tensor | float) -> torch.Tensor:
        """True CFG of a forward's rows (the prompt half first, as ``model_inputs`` stacks them), rescaled to the
        conditional prediction's norm, as the pipeline's ``true_cfg_scale``."""
        v_cond, v_uncond = out.chunk(2)
        guided = v_uncond + scale * (v_cond - v_uncond)
        return guided * (v_cond.norm(dim=-1, keepdim=True) / guided.norm(dim=-1, keepdim=True))

    def forward(self, model, x: torch.Tensor, sigma, inputs: Conditioning, doubled: bool) -> torch.Tensor:
        """One transformer call on ``x`` (twice stacked when ``doubled``), source tokens appended where the inputs
        hold them: the velocity of ``x``'s tokens, fp32."""
        x_in = torch.cat([x, x]) if doubled else x
        n = x_in.shape[0]
        tokens = x_in.to(self.compute_dtype)
        if "image_latents" in inputs:  # an edit family's source tokens follow the noisy ones
            tokens = torch.cat([tokens, inputs["image_latents"]], dim=1)
        timestep = torch.as_tensor(sigma, dtype=torch.float32, device=self.device)
        timestep = (
            timestep.expand(n) if timestep.numel() == 1 else torch.cat([timestep.reshape(-1)] * (n // x.shape[0]))
        )
        embeds, mask = self._split_text(inputs["prompt_embeds"], inputs.get("prompt_embeds_mask"), tokens.shape[1])
        with _last_text_stream(model) as text:
            out = model(
                hidden_states=tokens,
                timestep=timestep,
                encoder_hidden_states=embeds,
                encoder_hidden_states_mask=mask,
                img_shapes=self.img_shapes(n),
                return_dict=False,
            )[0]
        if text:  # weight 0: DDP's gradient for the parameters only the dropped text stream reaches
            out = out + 0.0 * text[0].sum().to(out.dtype)
        return out[:, : x.shape[1]].float()

    def _split_text(
        self, embeds: torch.Tensor, mask: torch.Tensor | None, image_tokens: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Under sequence parallelism (``train.sequence_parallel`` = S), the prompt and its mask padded with masked
        tokens to a multiple of S: diffusers' plan splits the image tokens and the prompt tokens over the S
        processes, each joint attention all-gathers the (B, 1, 1, T) mask along its keys, and a masked key weighs
        exactly 0, so the padding changes nothing but the rounding. The image tokens (``model.resolution``, and
        an edit's source tokens) cannot be padded: S must divide them. Unchanged when the transformer runs whole."""
        seq = sequence_degree(self.transformer)
        if seq == 1:
            return embeds, mask
        if image_tokens % seq:
            raise ValueError(
                f"train.sequence_parallel={seq} does not divide the transformer's {image_tokens} image tokens "
                f"(model.resolution {self.height}x{self.width})"
            )
        length = -(-embeds.shape[1] // seq) * seq
        if length == embeds.shape[1]:
            return embeds, mask
        if mask is None:
            mask = torch.ones(embeds.shape[:2], dtype=torch.long, device=embeds.device)
        return pad_to(embeds, mask, length)

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Packed latents (B, N, 64) -> images (B, 3, H, W) float in [0, 1]."""
        vae = self.pipe.vae
        z = self.pipe._unpack_latents(latents, self.height, self.width, self.pipe.vae_scale_factor).to(vae.dtype)
        shape = (1, vae.config.z_dim, 1, 1, 1)
        mean = torch.tensor(vae.config.latents_mean, device=z.device, dtype=z.dtype).view(shape)
        std = torch.tensor(vae.config.latents_std, device=z.device, dtype=z.dtype).view(shape)
        images = vae.decode(z * std + mean, return_dict=False)[0][:, :, 0]
        return (images.float() / 2 + 0.5).clamp(0, 1)

    def call_guidance(self, prompts: list[str], guidance_scale: float, negative_prompts: list[str] | None) -> dict:
        """``generate``'s true CFG: ``guidance_scale`` is the pipeline's ``true_cfg_scale``; negatives as in
        training ("" or None: ``" "``)."""
        negatives = [n or DEFAULT_NEGATIVE for n in negative_prompts or [""] * len(prompts)]
        return {"negative_prompt": negatives if guidance_scale > 1.0 else None, "true_cfg_scale": guidance_scale}

    # ------------------------------------------------------------------ weights
    def load_trained(self, run_dir: str | Path) -> str | None:
        """Load what a run exported (``lora/`` or ``transformer/``) into the pipeline; returns what."""
        return load_run_export(self, run_dir, QWEN_IMAGE_TRANSFORMER_CLASS, set_dispatcher_attention_backend)


# ----------------------------------------------------------------------------------------------------
# the tiny offline model every Qwen-Image family builds on

TINY_TEXT_WIDTH = 32  # the tiny Qwen2.5-VL's hidden size: the transformer's joint_attention_dim


def tiny_qwen_image_components(seed: int = 0) -> dict:
    """The components every tiny Qwen-Image pipeline shares (text-to-image and edit):

    * ``transformer``: ``QwenImageTransformer2DModel(patch_size=2, in_channels=64, out_channels=16, num_layers=1,
      attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32, axes_dims_rope=(4, 6, 6))``: the
      real model's channels (16 latent channels packed 2x2), one block 32 wide.
    * ``text_encoder``: ``Qwen2_5_VLForConditionalGeneration`` (``kit.qwen_vl.tiny_qwen_vl``: 2 layers, 32 wide,
      a 1-block vision tower); ``tokenizer``: word-level with Qwen's special tokens, so the templates drop the
      same prefix as Qwen's BPE (34 tokens; 64 for the edit template).
    * ``vae``: ``AutoencoderKLQwenImage(base_dim=8, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=1)`` with
      the real 3 down-samplings (8x) and Qwen-Image's published ``latents_mean`` / ``latents_std`` (the class
      defaults).
    * ``scheduler``: ``FlowMatchEulerDiscreteScheduler(**QWEN_SCHEDULER_CONFIG)`` (dynamic exponential shift,
      base/max shift 0.5/0.9 over 256..8192 tokens, terminal sigma 0.02).
    """
    from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImageTransformer2DModel

    from flowrl.pipelines.kit.qwen_vl import make_qwen_tokenizer, tiny_qwen_vl
    from flowrl.pipelines.kit.tiny import seeded

    tokenizer = make_qwen_tokenizer()
    with seeded(seed, "transformer"):
        transformer = QwenImageTransformer2DModel(
            patch_size=2,
            in_channels=QWEN_LATENT_CHANNELS * 4,
            out_channels=QWEN_LATENT_CHANNELS,
            num_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=TINY_TEXT_WIDTH,
            guidance_embeds=False,
            axes_dims_rope=(4, 6, 6),
        )
    text_encoder = tiny_qwen_vl(tokenizer, hidden=TINY_TEXT_WIDTH, seed=seed)
    with seeded(seed, "vae"):
        vae = AutoencoderKLQwenImage(base_dim=8, z_dim=QWEN_LATENT_CHANNELS, dim_mult=[1, 2, 4, 4], num_res_blocks=1)
    scheduler = FlowMatchEulerDiscreteScheduler(**QWEN_SCHEDULER_CONFIG)
    return {
        "transformer": transformer,
        "text_encoder": text_encoder,
        "tokenizer": tokenizer,
        "vae": vae,
        "scheduler": scheduler,
    }
