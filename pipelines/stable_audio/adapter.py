"""Stable Audio 3 (text-to-audio) adapter, built from ``StableAudio3Pipeline``'s public pieces.

What differs from SD3 (``flowrl.pipelines.sd3``), and how the adapter keeps the pipeline's own math:

* **Latents** are SAME-autoencoder frames ``(B, latent_dim, L)`` (256 x L for the real model, 8 x L for the
  tiny one) with ``L = ceil(duration * sample_rate / downsampling_ratio)``, as the pipeline rounds them; the
  noise comes from ``prepare_latents``. ``decode`` runs ``vae.decode`` (no scaling factor: SAME's bottleneck
  holds its own), trims to ``int(duration * sample_rate)`` samples and clamps to [-1, 1], exactly as the
  pipeline does, and returns ``{"audio": (B, 2, N) float32, "sample_rate": int}``.
* **Duration** is ``model.duration_s`` seconds (None: the pipeline's own default, 10 s). It conditions the
  DiT twice, as the pipeline builds it: ``encode_duration`` gives the global (AdaLN) vector
  ``global_hidden_states``, and ``prepare_cross_attention`` appends that vector to the text tokens as one more
  context token (mask 1). Every sample of a run has the same duration. The pipeline's
  ``silence_padding_duration`` is left at its default 0.
* **Text** is T5Gemma, always padded to 256 tokens (the pipeline's cap, whatever ``model.max_sequence_length``
  says): the DiT replaces pad positions with a learned padding embedding and attends to all of them, so the
  padded length is part of the function. Conditioning rows: ``prompt_embeds`` (B, 257, D) with the duration
  token, ``encoder_attention_mask`` (B, 257) and ``global_hidden_states`` (B, G); with negative prompts also
  ``negative_prompt_embeds`` and ``negative_encoder_attention_mask`` (the duration vector is shared).
* **Sigmas** are the pipeline's log-SNR schedule (``logsnr_sigma_schedule`` with its defaults
  ``logsnr_min=-6.2, logsnr_max=2.0``, sigma_0 forced to exactly 1.0) through the scheduler's
  ``set_timesteps(sigmas=...)`` and its terminal 0. The scheduler has ``num_train_timesteps=1``: the DiT takes
  ``timestep = sigma`` in [0, 1], as the pipeline feeds it ``scheduler.timesteps``.
* **Guidance** is two-branch CFG ``v_u + w (v_c - v_u)``, uncond rows first, the negative prompt or else the
  empty prompt, the same duration vector for both branches. As in the pipeline it runs only for
  ``guidance_scale > 1`` (``do_classifier_free_guidance``); any scale <= 1 is one conditional pass. The
  distilled stable-audio-3-medium has CFG baked in (use 1.0); the base model wants a scale > 1.

**Samplers.** The distilled ``stabilityai/stable-audio-3-medium`` samples with a "ping-pong" scheduler
(``stochastic_sampling=True``): each step predicts ``x0 = x - sigma v`` and re-noises it with fresh noise,
``x' = (1 - sigma') x0 + sigma' eps``. RL here does not use that sampler: rollouts walk flowrl's own steps
(ODE Euler and ``flow_sde`` / ``cps`` / ``dance_sde`` with exact log-probs) on the model's velocity. On the
distilled model that means its velocity at a few steps (8 by default) integrated by Euler, which keeps the
noise the model itself predicts where ping-pong draws a fresh one, plus Flow-GRPO's SDE noise where a step is
stochastic; the samples are not the distilled model's ping-pong samples, and the rewards measured in training
are those of flowrl's sampler. ``generate`` (``flowrl sample``) calls the pipeline itself, ping-pong
included. The base ``stable-audio-3-medium-base`` samples by deterministic Euler, which flowrl's ODE rollout
reproduces exactly (``tests/pipelines/test_stable_audio_adapter.py``).

**Offline tiny models.** ``model.path: tiny`` is the tiny distilled model (``build_tiny_stable_audio(seed,
distilled=True)``: ping-pong in ``generate``, like stable-audio-3-medium); ``model.path: tiny-base`` the tiny
base model (deterministic Euler, like stable-audio-3-medium-base). Their DiTs are the same function of the same
seed; only the pipeline's scheduler differs. Both get ``wake_tiny_same``: the toy SAME decoder's learned tokens
are redrawn at a unit-ish scale so that its audio depends on the latents (at SAME's own 1e-5 init it does not).

**LoRA.** ``StableAudio3Pipeline`` has no LoRA loader mixin and ``StableAudio3DiTModel`` no
``PeftAdapterMixin`` in diffusers 0.42, so the adapter gives the pipeline's transformer diffusers' peft methods
(``add_adapter``, ``load_lora_adapter``, ``disable_adapters``...) by switching its class to a subclass that
adds ``PeftAdapterMixin`` (same name and module, so saved configs still name ``StableAudio3DiTModel``).
``save_lora`` writes a diffusers-format ``pytorch_lora_weights.safetensors`` (keys ``transformer.*``, the peft
config as ``lora_adapter_metadata``). Outside flowrl, load it with::

    from diffusers.loaders.peft import PeftAdapterMixin
    pipe.transformer.__class__ = type("StableAudio3DiTModel", (type(pipe.transformer), PeftAdapterMixin), {})
    pipe.transformer.load_lora_adapter("RUN/lora", prefix="transformer", weight_name="pytorch_lora_weights.safetensors")

(or ``flowrl.pipelines.stable_audio.adapter.load_lora(pipe, "RUN/lora")``, which does both).
"""

from __future__ import annotations

import copy
import inspect
import json
import logging
from pathlib import Path

import torch

from flowrl.media import MediaKind
from flowrl.pipelines.base import Conditioning, Guidance
from flowrl.pipelines.kit.adapter import CachedPromptAdapter, Draw, cast_parts, freeze_on
from flowrl.pipelines.kit.attention import set_dispatcher_attention_backend
from flowrl.pipelines.kit.loading import check_folder_or_hub, load_pretrained_pipeline
from flowrl.pipelines.kit.lora import lora_metadata
from flowrl.pipelines.stable_audio import layout
from flowrl.pipelines.stable_audio.layout import TINY_PATHS
from flowrl.pipelines.stable_audio.tiny import wake_tiny_same

logger = logging.getLogger(__name__)

# the attention projections of every DiT block: fused q/k/v (differential attention: two q, two k, one v) of the
# self-attention, the query and fused key/value of the cross-attention to the text + duration context, and
# both output projections
SA3_LORA_TARGETS = [
    "self_attn.to_qkv",
    "self_attn.to_out",
    "cross_attn.to_q",
    "cross_attn.to_kv",
    "cross_attn.to_out",
]

TRANSFORMER_CLASS = "StableAudio3DiTModel"
LORA_WEIGHT_NAME = "pytorch_lora_weights.safetensors"
LORA_PREFIX = "transformer"
TEXT_TOKENS = 256  # StableAudio3Pipeline.encode_prompt pads and truncates to min(tokenizer max, 256)


def _call_default(name: str):
    """A default of ``StableAudio3Pipeline.__call__`` (duration, logsnr_min, logsnr_max), read from its signature."""
    from diffusers import StableAudio3Pipeline

    return inspect.signature(StableAudio3Pipeline.__call__).parameters[name].default


def check_model_path(model_cfg) -> None:
    """Refuse a ``model.path`` that cannot load as a Stable Audio 3 pipeline before any model is built: a
    missing local path, a folder that is not a diffusers pipeline folder, a single file (not supported)."""
    path = model_cfg.path
    if path in TINY_PATHS:
        return
    check_folder_or_hub(path, "stable_audio", "Stable Audio")


def load_stable_audio_pipeline(path: str, dtype: str = "fp32", revision: str | None = None):
    """``StableAudio3Pipeline.from_pretrained`` from a hub id or a local folder, with a one-line error."""
    return load_pretrained_pipeline("StableAudio3Pipeline", path, dtype, revision)


_PEFT_CLASSES: dict[type, type] = {}


def with_peft(transformer: torch.nn.Module) -> torch.nn.Module:
    """``transformer`` with diffusers' ``PeftAdapterMixin`` methods (``add_adapter``, ``load_lora_adapter``,
    ``disable_adapters``...): its class switched, in place, to a subclass of its own class and the mixin, named
    and placed as its own class (so ``save_pretrained`` still writes ``_class_name: StableAudio3DiTModel``).
    A transformer that already has them is returned as it is."""
    from diffusers.loaders.peft import PeftAdapterMixin

    if isinstance(transformer, PeftAdapterMixin):
        return transformer
    base = type(transformer)
    if base not in _PEFT_CLASSES:
        _PEFT_CLASSES[base] = type(
            base.__name__,
            (base, PeftAdapterMixin),
            {"__module__": base.__module__, "__qualname__": base.__qualname__, "__doc__": base.__doc__},
        )
    transformer.__class__ = _PEFT_CLASSES[base]
    return transformer


def save_lora_file(directory: str | Path, state_dict: dict[str, torch.Tensor], metadata: dict | None) -> Path:
    """Write a diffusers-format LoRA: ``directory/pytorch_lora_weights.safetensors`` with keys ``transformer.*``
    and the peft config (prefixed the same way) as ``lora_adapter_metadata``, as diffusers' pipelines save theirs."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {f"{LORA_PREFIX}.{k}": v.detach().contiguous().cpu() for k, v in state_dict.items()}
    header = {"format": "pt"}
    if metadata:
        header["lora_adapter_metadata"] = json.dumps(
            {f"{LORA_PREFIX}.{k}": v for k, v in metadata.items()}, indent=2, sort_keys=True
        )
    path = directory / LORA_WEIGHT_NAME
    save_file(tensors, str(path), metadata=header)
    return path


def load_lora(pipe, directory: str | Path, adapter_name: str | None = None) -> None:
    """Load a LoRA written by ``save_lora`` into ``pipe.transformer`` (made peft-capable, ``with_peft``)."""
    transformer = with_peft(pipe.transformer)
    transformer.load_lora_adapter(
        str(directory), prefix=LORA_PREFIX, weight_name=LORA_WEIGHT_NAME, adapter_name=adapter_name
    )


def set_sa3_attention_backend(transformer, name: str, device: torch.device, dtype: torch.dtype) -> bool:
    """The SA3 DiT's attention through dispatcher backend ``name`` (``flux.set_dispatcher_attention_backend``,
    its probe sized by the DiT's ``num_heads`` and ``embed_dim``)."""
    heads = int(transformer.config.num_heads)
    return set_dispatcher_attention_backend(
        transformer, name, device, dtype, heads=heads, head_dim=int(transformer.config.embed_dim) // heads
    )


class StableAudioAdapter(CachedPromptAdapter):
    """Stable Audio 3 for RL. ``pipe`` is a ``StableAudio3Pipeline``; the DiT transformer is the policy."""

    lora_target_modules = SA3_LORA_TARGETS
    negative_keys = ("prompt_embeds", "encoder_attention_mask")  # a row's own negative: its text, not its duration
    check_model_path = staticmethod(check_model_path)
    media_kind = MediaKind.AUDIO
    tiny_recipe = "tiny-audio"
    sequence_parallel_refusal = (  # train.sequence_parallel > 1 (flowrl.mesh)
        "diffusers ships no context-parallel plan for StableAudioDiTModel"
    )
    pipeline_classes = ("StableAudio3Pipeline",)  # the model_index.json classes it loads
    tiny_paths = tuple(TINY_PATHS)

    def __init__(
        self,
        pipe,
        duration_s: float | None = None,
        device: torch.device | str = "cpu",
        vae_dtype: torch.dtype = torch.float32,
        prompt_cache: int = 1024,
        attention_backend: str | None = None,
    ):
        self.pipe = pipe
        self.device = torch.device(device)
        self.duration = float(_call_default("duration") if duration_s is None else duration_s)
        self.logsnr_min = float(_call_default("logsnr_min"))
        self.logsnr_max = float(_call_default("logsnr_max"))
        vae = pipe.vae
        self.sample_rate = int(vae.config.sampling_rate)
        self.downsampling_ratio = int(vae.downsampling_ratio)
        self.latent_dim = int(vae.config.latent_dim)
        # as StableAudio3Pipeline.__call__ rounds them (silence_padding_duration = 0)
        self.latent_length = layout.stable_audio_latent_length(self.duration, self.sample_rate, self.downsampling_ratio)
        self.num_samples = int(self.duration * self.sample_rate)
        if self.duration <= 0 or self.num_samples < 1:
            raise ValueError(f"model.duration_s: {self.duration} s is less than one sample at {self.sample_rate} Hz")
        longest = float(pipe.duration_embedder.config.max_val)
        if self.duration > longest:
            raise ValueError(
                f"model.duration_s: {self.duration} s exceeds the duration conditioning's range (at most {longest:g} s)"
            )
        freeze_on(pipe, self.device, vae_dtype, ("text_encoder", "duration_embedder", "vae"))
        with_peft(pipe.transformer)
        self._scheduler = copy.deepcopy(pipe.scheduler)  # sigmas are read from it, never stepped
        self._num_train_timesteps = float(self._scheduler.config.num_train_timesteps)
        self._start_prompt_cache(prompt_cache)
        self._global: torch.Tensor | None = None
        self.compute_dtype = pipe.transformer.dtype
        self._set_attention(attention_backend, set_sa3_attention_backend)

    @classmethod
    def from_config(cls, model_cfg, device: torch.device | str = "cpu", seed: int = 0) -> StableAudioAdapter:
        """Build from ``ModelConfig``: ``path="tiny"`` / ``"tiny-base"`` build the offline tiny distilled / base
        model (``build_tiny_stable_audio``, its decoder woken by ``wake_tiny_same``; ``model.tiny_size`` does not
        apply), else
        ``StableAudio3Pipeline.from_pretrained`` of a hub id or local folder. ``model.duration_s`` sets the clip
        length (None: the pipeline's default)."""
        if model_cfg.path in TINY_PATHS:
            from flowrl.pipelines.stable_audio.tiny import build_tiny_stable_audio

            pipe = build_tiny_stable_audio(seed=seed, **TINY_PATHS[model_cfg.path])
            wake_tiny_same(pipe.vae, seed)
        else:
            check_model_path(model_cfg)
            pipe = load_stable_audio_pipeline(model_cfg.path, model_cfg.dtype, model_cfg.revision)
        cast_parts(pipe, model_cfg.dtype, ("text_encoder", "duration_embedder", "transformer"))
        return cls(
            pipe,
            getattr(model_cfg, "duration_s", None),
            device,
            prompt_cache=model_cfg.prompt_cache,
            attention_backend=getattr(model_cfg, "attention_backend", None),
        )

    def guidance(self, scale: float) -> Guidance:
        """Two-branch CFG (both branches in one batched forward: 2 rows a sample) for scales above 1, as the
        pipeline's ``do_classifier_free_guidance``; one conditional pass otherwise."""
        return Guidance.cfg_above_one(scale)

    @staticmethod
    def _cfg(guidance_scale: float) -> bool:
        return guidance_scale > 1.0

    # ------------------------------------------------------------------ conditioning
    def duration_embedding(self) -> torch.Tensor:
        """The duration's global conditioning vector (1, G), ``encode_duration`` of ``self.duration``."""
        if self._global is None:
            with torch.no_grad():
                self._global = self.pipe.encode_duration(self.duration, self.device, 1, 1)
        return self._global

    @torch.no_grad()
    def _encode(self, prompts: list[str]) -> Conditioning:
        """T5Gemma embeddings with the duration token (B, 257, D), their mask (B, 257) and the duration vector (B, G)
        of ``prompts``; the default negative is the empty prompt, the pipeline's."""
        embeds, mask = self.pipe.encode_prompt(prompts, self.device, 1)
        g = self.duration_embedding().expand(len(prompts), -1)
        embeds, mask = self.pipe.prepare_cross_attention(embeds, mask, g)
        return {"prompt_embeds": embeds, "encoder_attention_mask": mask, "global_hidden_states": g.clone()}

    # ------------------------------------------------------------------ sampling pieces
    def sigmas(self, num_steps: int) -> torch.Tensor:
        """The pipeline's log-SNR schedule with ``num_steps`` transitions: (T+1,) fp32 from exactly 1 to 0."""
        from diffusers.pipelines.stable_audio_3.pipeline_stable_audio_3 import logsnr_sigma_schedule

        sigmas = logsnr_sigma_schedule(num_steps, self.logsnr_min, self.logsnr_max)
        self._scheduler.set_timesteps(sigmas=sigmas, device="cpu")
        return self._scheduler.sigmas.detach().float().cpu().clone()

    @property
    def latent_shape(self) -> tuple[int, int]:
        """One sample's latent: (latent_dim, latent frames)."""
        return (self.latent_dim, self.latent_length)

    def initial_noise(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Gaussian latents at sigma = 1 through ``prepare_latents`` (fp32): (n, latent_dim, L)."""
        return self.pipe.prepare_latents(n, self.latent_dim, self.latent_length, torch.float32, self.device, generator)

    def model_inputs(self, cond: Conditioning, guidance_scale: float) -> Conditioning:
        """Transformer-ready conditioning for ``velocity``: embeddings cast to the model dtype and, with CFG, the
        negative rows stacked before the prompt rows (uncond first, as the pipeline does): each row's own
        negative where ``cond`` holds them, else the empty prompt; the duration vector for both branches."""
        dtype = self.compute_dtype
        embeds, mask, g = cond["prompt_embeds"], cond["encoder_attention_mask"], cond["global_hidden_states"]
        if self._cfg(guidance_scale):
            neg = self._negatives(cond, self.negative_keys)
            embeds = torch.cat([neg["prompt_embeds"].to(embeds.device), embeds])
            mask = torch.cat([neg["encoder_attention_mask"].to(mask.device), mask])
            g = torch.cat([g, g])
        return {"prompt_embeds": embeds.to(dtype), "encoder_attention_mask": mask, "global_hidden_states": g.to(dtype)}

    def forward(self, model, x: torch.Tensor, sigma, inputs: Conditioning, doubled: bool) -> torch.Tensor:
        """One DiT call on x (B, D, L), twice stacked when ``doubled`` (CFG's two branches, for scales above 1),
        at ``timestep = sigma`` (``num_train_timesteps`` is 1, as the pipeline's timesteps); fp32."""
        n = x.shape[0]
        rows = 2 * n if doubled else n
        x_in = torch.cat([x, x]) if doubled else x
        timestep = torch.as_tensor(sigma, dtype=torch.float32, device=self.device) * self._num_train_timesteps
        if timestep.numel() == 1:
            timestep = timestep.reshape(()).expand(rows)
        else:
            timestep = timestep.reshape(n)
            timestep = torch.cat([timestep, timestep]) if doubled else timestep
        return model(
            hidden_states=x_in.to(self.compute_dtype),
            timestep=timestep,
            encoder_hidden_states=inputs["prompt_embeds"],
            global_hidden_states=inputs["global_hidden_states"],
            encoder_attention_mask=inputs["encoder_attention_mask"],
            return_dict=False,
        )[0].float()

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> dict:
        """Latents (B, D, L) -> ``{"audio": (B, C, N) float32 in [-1, 1], "sample_rate": int}``: the pipeline's
        decode, trimmed to ``int(duration * sample_rate)`` samples."""
        vae = self.pipe.vae
        audio = vae.decode(latents.to(device=self.device, dtype=vae.dtype)).sample
        audio = audio[:, :, : self.num_samples].clamp(-1.0, 1.0).float()
        return {"audio": audio, "sample_rate": self.sample_rate}

    @torch.no_grad()
    def draw(self, request: Draw) -> dict:
        """``StableAudio3Pipeline.__call__`` itself (its scheduler: ping-pong for the distilled model, Euler for
        the base one) at this adapter's duration; returns the ``decode`` mapping."""
        negative = None
        if request.negative_prompts is not None and any(request.negative_prompts):
            negative = [n or "" for n in request.negative_prompts]
        audio = self.pipe(
            prompt=list(request.prompts),
            duration=self.duration,
            num_inference_steps=request.num_steps,
            logsnr_min=self.logsnr_min,
            logsnr_max=self.logsnr_max,
            guidance_scale=request.guidance_scale,
            negative_prompt=negative,
            generator=request.generator,
            output_type="pt",
        ).audios
        return {"audio": audio.float(), "sample_rate": self.sample_rate}

    # ------------------------------------------------------------------ weights
    def load_trained(self, run_dir: str | Path) -> str | None:
        """Load what a run exported (``lora/`` or ``transformer/``) into the pipeline; returns what."""
        run_dir = Path(run_dir)
        if (run_dir / "lora" / LORA_WEIGHT_NAME).is_file():
            load_lora(self.pipe, run_dir / "lora")
            return "LoRA"
        if (run_dir / "transformer" / "config.json").is_file():
            import diffusers

            trained = getattr(diffusers, TRANSFORMER_CLASS).from_pretrained(
                run_dir / "transformer", torch_dtype=self.compute_dtype
            )
            self.pipe.transformer = with_peft(trained).to(self.device)
            if self.attention_backend is not None:
                set_sa3_attention_backend(trained, self.attention_backend, self.device, self.compute_dtype)
            return "fine-tuned transformer"
        return None

    def save_lora(self, directory: str | Path, state_dict: dict[str, torch.Tensor]) -> None:
        """Write a diffusers-format LoRA (``save_lora_file``) with the transformer's peft config (rank, alpha,
        targets) as metadata; ``StableAudio3Pipeline`` has no ``load_lora_weights``: load it with ``load_lora``
        (``transformer.load_lora_adapter(directory, prefix="transformer")``, see the module docstring)."""
        save_lora_file(directory, state_dict, lora_metadata(self.transformer))
