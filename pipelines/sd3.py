"""Stable Diffusion 3 / 3.5 adapter, built from ``StableDiffusion3Pipeline``'s public pieces. The helpers every
family shares (loading, attention backends, the prompt cache, LoRA metadata) live in ``flowrl.pipelines.kit`` and
are re-exported here for code that imports them from this module."""

from __future__ import annotations

import copy
import json
import logging
from collections import OrderedDict
from pathlib import Path

import torch

from flowrl.pipelines.base import Conditioning, Guidance, cfg_guidance
from flowrl.pipelines.kit import attention
from flowrl.pipelines.kit.attention import attention_backend_names, has_xformers
from flowrl.pipelines.kit.loading import (
    DTYPES,
    SINGLE_FILE_SUFFIXES,
    HubUnavailableError,
    check_folder,
    check_folder_or_hub,
    first_line,
    is_single_file,
    load_pretrained_pipeline,
    local_or_hub,
    looks_local,
    offline,
    single_file_keys,
)
from flowrl.pipelines.kit.lora import lora_metadata
from flowrl.pipelines.kit.prompts import cached_rows

logger = logging.getLogger(__name__)


# Flow-GRPO's SD3.5 LoRA targets: joint attention projections of both streams.
SD3_LORA_TARGETS = [
    "attn.to_q",
    "attn.to_k",
    "attn.to_v",
    "attn.to_out.0",
    "attn.add_q_proj",
    "attn.add_k_proj",
    "attn.add_v_proj",
    "attn.to_add_out",
]


class DispatchedJointAttention:
    """SD3's joint attention (the math of diffusers' ``JointAttnProcessor2_0``) with the attention product
    sent through diffusers' dispatcher (``dispatch_attention_fn``), so that ``set_attention_backend`` reaches
    it: diffusers 0.42's SD3 processor calls ``scaled_dot_product_attention`` itself and has no backend to set.

    Query, key and value go to the dispatcher as (B, S, heads, head_dim), image tokens first, then text
    tokens, as the SD3 processor concatenates them; the output is split back the same way."""

    _attention_backend = None  # set by ModelMixin.set_attention_backend (None: the dispatcher's active one)
    _parallel_config = None  # no context parallelism

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, *args, **kwargs):
        from diffusers.models.attention_dispatch import dispatch_attention_fn

        image_tokens = hidden_states.shape[1]

        def heads(t: torch.Tensor) -> torch.Tensor:  # (B, S, heads * head_dim) -> (B, S, heads, head_dim)
            return t.unflatten(-1, (attn.heads, -1))

        def normed(t: torch.Tensor, norm) -> torch.Tensor:
            return t if norm is None else norm(t)

        q = normed(heads(attn.to_q(hidden_states)), attn.norm_q)
        k = normed(heads(attn.to_k(hidden_states)), attn.norm_k)
        v = heads(attn.to_v(hidden_states))
        joint = encoder_hidden_states is not None
        if joint:
            q = torch.cat([q, normed(heads(attn.add_q_proj(encoder_hidden_states)), attn.norm_added_q)], dim=1)
            k = torch.cat([k, normed(heads(attn.add_k_proj(encoder_hidden_states)), attn.norm_added_k)], dim=1)
            v = torch.cat([v, heads(attn.add_v_proj(encoder_hidden_states))], dim=1)
        out = dispatch_attention_fn(
            q,
            k,
            v,
            dropout_p=0.0,
            is_causal=False,
            backend=self._attention_backend,
            parallel_config=self._parallel_config,
        )
        out = out.flatten(2).to(q.dtype)
        image = attn.to_out[1](attn.to_out[0](out[:, :image_tokens]))
        if not joint:
            return image
        text = out[:, image_tokens:]
        if not attn.context_pre_only:
            text = attn.to_add_out(text)
        return image, text


def set_attention_backend(transformer, name: str, device: torch.device, dtype: torch.dtype) -> bool:
    """Route every attention of an SD3 ``transformer`` through diffusers' dispatcher with backend ``name``
    (``model.attention_backend``). Refused in one line (RuntimeError) when the backend cannot run here: its
    package missing (flash-attn, sageattention, kernels...), the wrong device (a CUDA-only kernel on a CPU), a
    dtype it does not take. A backend that takes only 16-bit inputs passes an fp32 model with a warning: it
    runs under 16-bit autocast (``train.mixed_precision``) only. Returns whether the backend backpropagates
    (an inference-only kernel such as SageAttention's cannot train)."""
    from diffusers.models.attention_dispatch import AttentionBackendName, _AttentionBackendRegistry

    if name not in attention_backend_names():
        raise ValueError(f"model.attention_backend: {name!r} is not one of {', '.join(attention_backend_names())}")
    backend = AttentionBackendName(name)
    heads = int(transformer.config.num_attention_heads)
    head_dim = int(transformer.config.attention_head_dim)
    where = device.type + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
    transformer.set_attn_processor(DispatchedJointAttention())
    active = _AttentionBackendRegistry._active_backend
    try:
        # diffusers checks the backend's package (and fetches a hub kernel) here, then sets it on the processors
        transformer.set_attention_backend(name)
    except Exception as exc:  # noqa: BLE001 -- diffusers raises RuntimeError/ValueError, a hub fetch its own
        raise RuntimeError(f"model.attention_backend={name!r} is not available here: {first_line(exc)}") from None
    finally:
        # set_attention_backend also makes it the process-wide default of every other diffusers model (a Wan
        # transformer, say); only this transformer's processors should change
        _AttentionBackendRegistry.set_active_backend(active)
    try:
        return attention.probe_attention(backend, device, dtype, heads, head_dim)
    except Exception as exc:  # noqa: BLE001 -- the kernels raise their own types
        why = first_line(exc)
        if dtype == torch.float32:  # perhaps a 16-bit-only kernel, which autocast would feed
            half = torch.bfloat16 if device.type != "cuda" or torch.cuda.is_bf16_supported() else torch.float16
            half_error = attention.probe_error(backend, device, half, heads, head_dim)
            if half_error is None:
                logger.warning(
                    "model.attention_backend=%s takes only 16-bit inputs (%s with fp32 weights): it "
                    "runs under train.mixed_precision=bf16/fp16 only",
                    name,
                    why,
                )
                return attention.probe_attention(backend, device, half, heads, head_dim)
            why += f"; in {str(half)[6:]}: {half_error}" if half_error != why else ""
        raise RuntimeError(
            f"model.attention_backend={name!r} cannot run on this {where} with {str(dtype)[6:]} weights: {why}"
        ) from None


# the pipeline parts a single-file checkpoint may hold, by the key prefixes diffusers' converters read
# (diffusers.loaders.single_file_utils: CHECKPOINT_KEY_NAMES["sd3"], LDM_VAE_KEYS, "text_encoders.*")
_SINGLE_FILE_PARTS = {
    "transformer": ("joint_blocks.", "model.diffusion_model.joint_blocks."),
    "vae": ("first_stage_model.", "vae."),
    "text_encoder": ("text_encoders.clip_l.",),
    "text_encoder_2": ("text_encoders.clip_g.",),
    "text_encoder_3": ("text_encoders.t5xxl.",),
}


def single_file_parts(keys: list[str]) -> set[str]:
    """Which pipeline components (``transformer``, ``vae``, ``text_encoder``...) a single file holds."""
    return {part for part, prefixes in _SINGLE_FILE_PARTS.items() if any(k.startswith(prefixes) for k in keys)}


def _check_single_file(path: str, local: Path, config: str | None) -> None:
    parts = single_file_parts(single_file_keys(local))
    if "transformer" not in parts:
        raise ValueError(
            f"model.path: {path!r} holds no SD3 transformer weights (no 'joint_blocks.*' tensors): "
            "not an SD3/SD3.5 single-file checkpoint"
        )
    missing = sorted(set(_SINGLE_FILE_PARTS) - parts)
    if missing and config is None:
        raise ValueError(
            f"model.path: {path!r} lacks {', '.join(missing)}; set model.config_path to the base model's diffusers "
            "folder or hub id (e.g. stabilityai/stable-diffusion-3.5-medium) to take them from"
        )
    if config is not None:
        _check_model_location("model.config_path", config, single_file=False)


def _check_model_location(name: str, path: str, single_file: bool = True, config: str | None = None) -> None:
    local = Path(path).expanduser()
    if local.is_dir():
        check_folder(name, path, local)
    elif local.is_file():
        if not (single_file and is_single_file(path)):
            allowed = (
                "a diffusers folder, a hub id or a .safetensors/.ckpt single file"
                if single_file
                else "a diffusers folder or a hub id"
            )
            raise ValueError(f"{name}: {path!r} is a file; expected {allowed}")
        _check_single_file(path, local, config)
    elif looks_local(path) and not path.startswith(("http://", "https://")):
        raise FileNotFoundError(f"{name}: no such file or folder {path!r}")
    # else a hub id: loading says whether it is cached or can be fetched


def check_model_path(model_cfg) -> None:
    """Refuse a ``model.path`` (and ``model.config_path``, where the config has it) that cannot load, before
    any model is built: a missing local path, an empty folder or one without ``model_index.json``, a file that
    is not a readable SD3 single-file checkpoint. A hub id passes (loading it reports an offline hub)."""
    if model_cfg.path == "tiny":
        return
    _check_model_location("model.path", model_cfg.path, config=getattr(model_cfg, "config_path", None))


def _load_error(path: str, exc: BaseException, config: str | None = None) -> HubUnavailableError:
    why = "the hub is offline (HF_HUB_OFFLINE=1)" if offline() else "it could not be fetched"
    if is_single_file(path):
        source = f"model.config_path={config!r}" if config else "the hub id diffusers guessed from its keys"
        return HubUnavailableError(
            f"model.path={path!r}: the single file's pipeline configs and tokenizers come from {source}, which "
            f"could not be loaded ({type(exc).__name__}); set model.config_path to a local diffusers folder of "
            "the base model"
        )
    if Path(path).expanduser().is_dir():
        detail = str(exc).splitlines()[0] if str(exc) else ""
        return HubUnavailableError(
            f"model.path={path!r}: the diffusers folder could not be loaded ({type(exc).__name__}: {detail})"
        )
    return HubUnavailableError(
        f"model.path={path!r}: not a local folder and {why}; download it first "
        f"(hf download {path}) or set model.path to a local folder"
    )


def _parts_from_config(config: str, names: list[str], torch_dtype: torch.dtype, revision: str | None) -> dict:
    """The pipeline components ``names`` loaded from a diffusers folder or hub id (those a single file lacks).

    diffusers 0.42 looks for a lacking text encoder under the diffusers weight names only, so it never finds
    a transformers ``model.safetensors``: flowrl loads them itself."""
    from diffusers import AutoencoderKL
    from transformers import CLIPTextModelWithProjection, T5EncoderModel

    classes = {
        "vae": AutoencoderKL,
        "text_encoder": CLIPTextModelWithProjection,
        "text_encoder_2": CLIPTextModelWithProjection,
        "text_encoder_3": T5EncoderModel,
    }
    source = local_or_hub(config)
    index = Path(source) / "model_index.json"
    listed = json.loads(index.read_text()) if index.is_file() else {}
    parts = {}
    for name in names:
        if listed.get(name, [True])[0] is None:  # a pipeline saved without it (SD3 may drop T5)
            parts[name] = None
            continue
        parts[name] = classes[name].from_pretrained(source, subfolder=name, torch_dtype=torch_dtype, revision=revision)
    return parts


def load_sd3_single_file(path: str, dtype: str = "fp32", config: str | None = None, revision: str | None = None):
    """``StableDiffusion3Pipeline.from_single_file`` of a ``.safetensors``/``.ckpt`` file. ``config`` (a
    diffusers folder or hub id) supplies the component configs and tokenizers, and every component the file
    lacks (a fine-tune often holds only the transformer); without it diffusers guesses a hub id from the keys."""
    from diffusers import StableDiffusion3Pipeline
    from diffusers.loaders.single_file_utils import SingleFileComponentError

    local = Path(path).expanduser()
    torch_dtype = DTYPES[dtype]
    missing = sorted(set(_SINGLE_FILE_PARTS) - single_file_parts(single_file_keys(local)))
    try:
        parts = _parts_from_config(config, missing, torch_dtype, revision) if config and missing else {}
        return StableDiffusion3Pipeline.from_single_file(
            str(local),
            config=local_or_hub(config) if config else None,
            torch_dtype=torch_dtype,
            local_files_only=offline(),
            **parts,
        )
    except (OSError, ValueError, KeyError, SingleFileComponentError) as exc:
        raise _load_error(path, exc, config) from exc


def load_sd3_pipeline(path: str, dtype: str = "fp32", revision: str | None = None, config: str | None = None):
    """``StableDiffusion3Pipeline.from_pretrained`` from a hub id or a local folder, or ``from_single_file``
    of a ``.safetensors``/``.ckpt`` file (``config``: see ``load_sd3_single_file``), with a clear error."""
    from diffusers import StableDiffusion3Pipeline

    if is_single_file(path) and Path(path).expanduser().is_file():
        return load_sd3_single_file(path, dtype, config, revision)
    try:
        return StableDiffusion3Pipeline.from_pretrained(
            local_or_hub(path), torch_dtype=DTYPES[dtype], revision=revision
        )
    except (OSError, ValueError, KeyError) as exc:
        raise _load_error(path, exc) from exc


class SD3Adapter:
    """SD3/SD3.5 for RL. ``pipe`` is a ``StableDiffusion3Pipeline``; the transformer is the policy."""

    lora_target_modules = SD3_LORA_TARGETS
    check_model_path = staticmethod(check_model_path)
    media_kind = "image"

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
        self.pipe = pipe
        self.device = torch.device(device)
        # (height, width) in pixels; an int is a square
        self.height, self.width = (resolution, resolution) if isinstance(resolution, int) else map(int, resolution)
        self.resolution = self.height if self.height == self.width else (self.height, self.width)
        self.max_sequence_length = max_sequence_length
        pipe.set_progress_bar_config(disable=True)
        # text encoders and VAE are frozen; the VAE decodes in fp32 (as Flow-GRPO does)
        for name in ("text_encoder", "text_encoder_2", "text_encoder_3", "vae"):
            module = getattr(pipe, name, None)
            if module is not None:
                module.requires_grad_(False).eval()
                module.to(self.device)
        if pipe.vae.dtype != vae_dtype:
            pipe.vae.to(dtype=vae_dtype)
        pipe.transformer.to(self.device)
        if self.device.type == "cuda" and has_xformers() and attention_backend is None:
            pipe.enable_xformers_memory_efficient_attention()
        # one private scheduler copy: sigmas are read from it, never stepped
        self._scheduler = copy.deepcopy(pipe.scheduler)
        self._cache: OrderedDict[str, Conditioning] = OrderedDict()  # least recently used first
        self.prompt_cache = prompt_cache
        self._negative: Conditioning | None = None
        self._num_train_timesteps = float(self._scheduler.config.num_train_timesteps)
        # ModelMixin.dtype walks every parameter: far too slow to ask once per denoising step
        self.compute_dtype = pipe.transformer.dtype
        # model.attention_backend: None keeps diffusers' default processors (xformers' where installed, above)
        self.attention_backend = attention_backend
        self.attention_backpropagates = True  # False: an inference-only attention kernel (the Trainer refuses it)
        if attention_backend is not None:
            self.attention_backpropagates = set_attention_backend(
                pipe.transformer, attention_backend, self.device, self.compute_dtype
            )

    @classmethod
    def from_config(cls, model_cfg, device: torch.device | str = "cpu", seed: int = 0) -> "SD3Adapter":
        """Build from ``ModelConfig``: ``path="tiny"`` builds the offline tiny model, else loads."""
        if model_cfg.path == "tiny":
            from flowrl.pipelines.tiny import build_tiny_sd3_pipeline

            pipe = build_tiny_sd3_pipeline(
                max(getattr(model_cfg, "size", (model_cfg.resolution,))), model_cfg.tiny_size, seed=seed
            )
        else:
            check_model_path(model_cfg)
            pipe = load_sd3_pipeline(
                model_cfg.path, model_cfg.dtype, model_cfg.revision, config=getattr(model_cfg, "config_path", None)
            )
        dtype = DTYPES[model_cfg.dtype]
        for name in ("text_encoder", "text_encoder_2", "text_encoder_3", "transformer"):
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
        """Two-branch CFG (both branches in one batched forward: 2 rows a sample), off at scale 1."""
        return cfg_guidance(scale)

    # ------------------------------------------------------------------ conditioning
    @torch.no_grad()
    def _encode(self, prompts: list[str]) -> Conditioning:
        embeds, _, pooled, _ = self.pipe.encode_prompt(
            prompt=prompts,
            prompt_2=None,
            prompt_3=None,
            device=self.device,
            do_classifier_free_guidance=False,
            max_sequence_length=self.max_sequence_length,
        )
        return {"prompt_embeds": embeds, "pooled_prompt_embeds": pooled}

    def _rows(self, prompts: list[str]) -> list[Conditioning]:
        """One-row embeddings of each of ``prompts``, through the prompt cache (``cached_rows``)."""
        return cached_rows(self._cache, self.prompt_cache, prompts, self._encode)

    def encode_prompts(self, prompts: list[str], negative_prompts: list[str] | None = None) -> Conditioning:
        """Embeddings of ``prompts`` (B, L, D) and (B, P). Each distinct prompt of the call is encoded once;
        the ``prompt_cache`` most recently used ones are kept for later calls.

        ``negative_prompts`` (one a prompt): each row's CFG negative, kept as rows of the conditioning
        (``negative_prompt_embeds``, ``negative_pooled_prompt_embeds``) so that selecting or concatenating
        rows keeps every sample with its own negative; "" is the empty prompt, exactly the embedding of
        ``negative_conditioning``. None: no negative rows, CFG uses the empty prompt (``model_inputs``)."""
        if negative_prompts is not None and len(negative_prompts) != len(prompts):
            raise ValueError(f"{len(negative_prompts)} negative prompts for {len(prompts)} prompts")
        given = [n for n in negative_prompts or [] if n]
        rows = self._rows(list(prompts) + given)
        cond = {k: torch.cat([r[k] for r in rows[: len(prompts)]]) for k in rows[0]}
        if negative_prompts is None:
            return cond
        empty = self._empty_negative()
        own = iter(rows[len(prompts) :])
        negs = [next(own) if n else empty for n in negative_prompts]
        for k in empty:
            cond[f"negative_{k}"] = torch.cat([r[k] for r in negs])
        return cond

    def _empty_negative(self) -> Conditioning:
        if self._negative is None:
            self._negative = self._encode([""])
        return self._negative

    def negative_conditioning(self, n: int) -> Conditioning:
        """The empty-prompt embedding used as the CFG negative, expanded to ``n`` rows."""
        return {k: v.expand(n, *v.shape[1:]) for k, v in self._empty_negative().items()}

    def clear_cache(self) -> None:
        self._cache.clear()

    # ------------------------------------------------------------------ sampling pieces
    def sigmas(self, num_steps: int) -> torch.Tensor:
        """The scheduler's shifted schedule with ``num_steps`` transitions: (T+1,) fp32 from 1 to 0."""
        self._scheduler.set_timesteps(num_steps, device="cpu")
        return self._scheduler.sigmas.detach().float().cpu().clone()

    @property
    def latent_shape(self) -> tuple[int, int, int]:
        factor = self.pipe.vae_scale_factor
        c = self.transformer.config.in_channels
        return (c, self.height // factor, self.width // factor)

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
            if "negative_prompt_embeds" in cond:
                neg = {
                    "prompt_embeds": cond["negative_prompt_embeds"],
                    "pooled_prompt_embeds": cond["negative_pooled_prompt_embeds"],
                }
            else:
                neg = self.negative_conditioning(embeds.shape[0])
            embeds = torch.cat([neg["prompt_embeds"], embeds])
            pooled = torch.cat([neg["pooled_prompt_embeds"], pooled])
        return {"prompt_embeds": embeds.to(dtype), "pooled_prompt_embeds": pooled.to(dtype)}

    def velocity(
        self,
        x: torch.Tensor,
        sigma: torch.Tensor | float,
        inputs: Conditioning,
        guidance_scale: float,
        model: torch.nn.Module | None = None,
    ) -> torch.Tensor:
        """v(x, sigma | c) with CFG ``v_u + w (v_c - v_u)``; both branches in one forward. Returns fp32.

        x: (B, C, H, W); sigma: a float or (B,); inputs: ``model_inputs(cond, guidance_scale)``.
        ``model`` defaults to the pipeline's transformer (pass a DDP/FSDP wrapper of it, or a frozen
        reference copy).
        """
        use_cfg = guidance_scale != 1.0
        rows = 2 * x.shape[0] if use_cfg else x.shape[0]
        if inputs["prompt_embeds"].shape[0] != rows:
            raise ValueError(
                f"conditioning has {inputs['prompt_embeds'].shape[0]} rows for {x.shape[0]} latents; "
                f"build it with model_inputs(cond, guidance_scale={guidance_scale})"
            )
        x_in = torch.cat([x, x]) if use_cfg else x
        timestep = torch.as_tensor(sigma, dtype=torch.float32, device=self.device) * self._num_train_timesteps
        timestep = (
            timestep.expand(rows) if timestep.numel() == 1 else torch.cat([timestep, timestep]) if use_cfg else timestep
        )
        out = (model or self.transformer)(
            hidden_states=x_in.to(self.compute_dtype),
            timestep=timestep,
            encoder_hidden_states=inputs["prompt_embeds"],
            pooled_projections=inputs["pooled_prompt_embeds"],
            return_dict=False,
        )[0].float()
        if use_cfg:
            v_uncond, v_cond = out.chunk(2)
            return v_uncond + guidance_scale * (v_cond - v_uncond)
        return out

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Latents (B, C, h, w) -> images (B, 3, H, W) float in [0, 1]."""
        vae = self.pipe.vae
        z = latents.to(vae.dtype) / vae.config.scaling_factor + vae.config.shift_factor
        images = vae.decode(z, return_dict=False)[0]
        return (images.float() / 2 + 0.5).clamp(0, 1)

    def load_trained(self, run_dir: str | Path) -> str | None:
        """Load what a run exported (``lora/`` or ``transformer/``) into the pipeline; returns what."""
        run_dir = Path(run_dir)
        if (run_dir / "lora" / "pytorch_lora_weights.safetensors").is_file():
            self.pipe.load_lora_weights(str(run_dir / "lora"))
            return "LoRA"
        if (run_dir / "transformer" / "config.json").is_file():
            from diffusers import SD3Transformer2DModel

            trained = SD3Transformer2DModel.from_pretrained(run_dir / "transformer", torch_dtype=self.transformer.dtype)
            self.pipe.transformer = trained.to(self.device)
            if self.attention_backend is not None:
                set_attention_backend(trained, self.attention_backend, self.device, self.compute_dtype)
            return "fine-tuned transformer"
        return None

    def save_lora(self, directory: str | Path, state_dict: dict[str, torch.Tensor]) -> None:
        """Write a LoRA in diffusers format, loadable with ``pipe.load_lora_weights(directory)``. The transformer's
        peft config (rank, alpha, targets) goes in the file's metadata: without it diffusers assumes
        alpha = rank on loading, which halves a LoRA trained with alpha = 2 x rank."""
        from diffusers import StableDiffusion3Pipeline

        StableDiffusion3Pipeline.save_lora_weights(
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
        """Images (B, 3, H, W) in [0, 1] from the pipeline's own call (``flowrl sample``); ``negative_prompts``
        None: the empty prompt."""
        return self.pipe(
            prompt=list(prompts),
            negative_prompt=negative_prompts,
            num_inference_steps=num_steps,
            guidance_scale=guidance_scale,
            height=self.height,
            width=self.width,
            max_sequence_length=self.max_sequence_length,
            generator=generator,
            output_type="pt",
        ).images


__all__ = [
    "DTYPES",
    "SD3_LORA_TARGETS",
    "SINGLE_FILE_SUFFIXES",
    "DispatchedJointAttention",
    "HubUnavailableError",
    "SD3Adapter",
    "attention_backend_names",
    "cached_rows",
    "check_folder_or_hub",
    "check_model_path",
    "is_single_file",
    "load_pretrained_pipeline",
    "load_sd3_pipeline",
    "load_sd3_single_file",
    "local_or_hub",
    "looks_local",
    "lora_metadata",
    "set_attention_backend",
    "single_file_keys",
    "single_file_parts",
]
