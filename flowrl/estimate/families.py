"""The families beyond SD3, by profile: their parts (the tiny models as built, a folder's configs, or the
published table), then what every family shares, measured rather than written out per architecture:
parameters and LoRA counted on the modules, FLOPs and the no-grad working set of one forward and of one
decode on the meta device, the width-64 activation probe, and the experts a plan's transitions take.

``PROFILES`` is the table of families (``flowrl.estimate.profile.FamilyProfile``, one module each); a new
family adds its module and one entry here.
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import warnings
from typing import Any

import torch

from flowrl.config import Config
from flowrl.configkit import ConfigError
from flowrl.estimate import (
    flux,
    flux2,
    flux_kontext,
    ltx2,
    qwen_image,
    qwen_image_edit,
    stable_audio,
    wan,
    wan_i2v,
    z_image,
)
from flowrl.estimate.base import ModelSize, compute_16bit, is_av_grpo, kl_reference, trained_transitions
from flowrl.estimate.meta import (
    LTX2_DIFFUSERS_EXTRA,
    PROBE_WIDTH,
    AttrDict,
    component,
    count_parameters,
    lora_parameter_count,
    meta_cost,
    plain,
    probe_dtypes,
    saved_bytes,
    solve_probe,
)
from flowrl.estimate.profile import FamilyParts, FamilyProfile, Layout
from flowrl.estimate.published import PUBLISHED, WAN22_BOUNDARY_RATIO
from flowrl.methods.options import flow_knobs

PROFILES: dict[str, FamilyProfile] = {
    p.pipeline: p
    for p in (
        flux.PROFILE,
        flux_kontext.PROFILE,
        wan.PROFILE,
        wan_i2v.PROFILE,
        stable_audio.PROFILE,
        ltx2.PROFILE,
        z_image.PROFILE,
        flux2.PROFILE,
        qwen_image.PROFILE,
        qwen_image_edit.PROFILE,
    )
}
FAMILIES = tuple(PROFILES)
# model.path values that build an offline tiny pipeline, as the adapters name them: path -> builder keywords
TINY_FAMILY_PATHS = {name: p.tiny_paths for name, p in PROFILES.items()}
FALLBACK_LORA_TARGETS = {name: p.lora_targets for name, p in PROFILES.items()}
TRANSFORMER_CLASSES = {name: p.transformer_class for name, p in PROFILES.items()}
_DECODERS = ("vae", "audio_vae", "vocoder")  # LTX-2's decoders: the video VAE, the audio VAE, the vocoder
_EXPERT_NAMES = ("transformer", "transformer_2")


# ----------------------------------------------------------------------------------------------------
# parts


def _parts_from_modules(pipeline: str, modules: dict, boundary_ratio, scheduler, text_tokens, source) -> FamilyParts:
    experts = [modules[n] for n in _EXPERT_NAMES if modules.get(n) is not None]
    encoders = [m for n, m in modules.items() if m is not None and n not in (*_EXPERT_NAMES, *_DECODERS)]
    decoders = [modules[n] for n in _DECODERS[1:] if modules.get(n) is not None]
    return FamilyParts(
        pipeline, experts, modules["vae"], encoders, boundary_ratio, scheduler, text_tokens, source, decoders
    )


@functools.lru_cache(maxsize=8)
def family_parts(pipeline: str, path: str, revision: str | None) -> FamilyParts:
    """The model's modules: on the meta device (they hold no memory), the tiny ones as built (cached)."""
    profile = PROFILES[pipeline]
    if path in profile.tiny_paths:
        return _family_parts_tiny(profile, path)
    try:
        return _family_parts_from_path(pipeline, path, revision)
    except (OSError, ValueError, KeyError) as exc:
        key = path.rstrip("/")
        match = PUBLISHED.get(key) or next(
            (v for k, v in PUBLISHED.items() if key.endswith("/" + k.split("/")[1])), None
        )
        known = [k for k, v in PUBLISHED.items() if v["pipeline"] == pipeline]
        if match is None or match["pipeline"] != pipeline:
            raise ConfigError(
                f"model.path={path!r}: cannot read its configs ({type(exc).__name__}) and it is not one of the "
                f"built-in {pipeline} architectures ({', '.join(known)})"
            ) from None
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # weight_norm's deprecation (SAME)
            modules = {name: component(cls, dict(c)) for name, (cls, c) in match["components"].items()}
        scheduler = profile.default_scheduler() if profile.default_scheduler else None
        return _parts_from_modules(
            pipeline,
            modules,
            match.get("boundary_ratio"),
            scheduler,
            None,
            "built-in table (configs unreadable offline)",
        )


def _family_parts_tiny(profile: FamilyProfile, path: str) -> FamilyParts:
    """The offline tiny pipeline (the family's ``flowrl.pipelines.<family>.tiny``, as the adapter builds
    ``model.path``), built for real: it is small, and only its configs and parameter counts are read."""
    tiny = importlib.import_module(f"flowrl.pipelines.{profile.pipeline}.tiny")
    pipe = getattr(tiny, profile.tiny_builder)(**profile.tiny_paths[path])
    # kept where they were built (they are tiny): moving them to meta would untie T5's shared embedding
    modules = {name: m for name, m in pipe.components.items() if isinstance(m, torch.nn.Module)}
    tokenizer = getattr(pipe, "tokenizer", None)
    text_tokens = getattr(tokenizer, "model_max_length", None) if profile.text_tokens_from_tokenizer else None
    scheduler = dict(pipe.scheduler.config) if profile.reads_scheduler else None
    boundary = pipe.config.get("boundary_ratio") if profile.reads_scheduler else None
    return _parts_from_modules(profile.pipeline, modules, boundary, scheduler, text_tokens, f"tiny preset {path!r}")


def _family_parts_from_path(pipeline: str, path: str, revision: str | None) -> FamilyParts:
    """Every model component of ``model_index.json`` from its config (a local folder, or the hub's cache)."""
    from diffusers import DiffusionPipeline
    from transformers import AutoConfig

    from flowrl.pipelines.kit.loading import local_or_hub

    kw = {"revision": revision} if revision else {}
    path = local_or_hub(path)
    modules: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        index = dict(DiffusionPipeline.load_config(path, **kw))
        scheduler = None
        for name, spec in index.items():
            if name.startswith("_") or not isinstance(spec, (list, tuple)) or len(spec) != 2 or spec[0] is None:
                continue
            library, class_name = spec
            if name == "scheduler":
                import diffusers

                scheduler = dict(getattr(diffusers, class_name).load_config(path, subfolder=name, **kw))
                continue
            if "token" in name.lower() or "processor" in name.lower() or class_name is None:  # no weights
                continue
            if library == "transformers":
                config = AutoConfig.from_pretrained(path, subfolder=name, **kw).to_dict()
            else:
                import diffusers

                cls = getattr(diffusers, class_name, None)
                if cls is None and class_name in LTX2_DIFFUSERS_EXTRA:
                    from diffusers.pipelines import ltx2 as _ltx2

                    cls = getattr(_ltx2, class_name)
                if cls is None and class_name == "StableAudio3DurationEmbedder":
                    from diffusers.pipelines.stable_audio_3.modeling_stable_audio_3 import (
                        StableAudio3DurationEmbedder as cls,
                    )
                if cls is None or not hasattr(cls, "load_config"):
                    continue
                config = dict(cls.load_config(path, subfolder=name, **kw))
            with torch.device("meta"):
                modules[name] = component(class_name, config)
    if "vae" not in modules or "transformer" not in modules:
        raise ValueError(f"{path}: model_index.json names no transformer or vae")
    return _parts_from_modules(pipeline, modules, index.get("boundary_ratio"), scheduler, None, f"configs of {path}")


# ----------------------------------------------------------------------------------------------------
# by profile: width, inputs, tokens (the table's rules under the names the tests and benchmarks call)


def family_width(pipeline: str, tc) -> tuple[int, int]:
    """(hidden width D, transformer blocks) of one expert."""
    return PROFILES[pipeline].width(tc)


def family_inputs(pipeline: str, tc, grid: tuple[int, ...], n_txt: int, device, dtype) -> dict:
    """One row of transformer inputs at ``grid`` (see ``Layout.grid``) with ``n_txt`` text tokens."""
    return PROFILES[pipeline].inputs(tc, grid, n_txt, device, dtype)


def grid_tokens(pipeline: str, tc, grid: tuple[int, ...]) -> int:
    """The transformer's own tokens at ``grid``."""
    return sum(PROFILES[pipeline].probe_tokens(tc, grid))


# ----------------------------------------------------------------------------------------------------
# measuring on the meta device


@functools.lru_cache(maxsize=32)
def meta_forward_cost(pipeline: str, tcfg_json: str, grid: tuple[int, ...], n_txt: int) -> tuple[float, float]:
    """One row's forward of the full-size transformer on meta: (FLOPs, fp32 working-set bytes)."""
    tcfg = json.loads(tcfg_json)
    with torch.device("meta"):
        model = component(TRANSFORMER_CLASSES[pipeline], tcfg)
    inputs = family_inputs(pipeline, model.config, grid, n_txt, torch.device("meta"), torch.float32)
    return meta_cost(model, lambda **kw: model(**kw, return_dict=False), inputs)


@functools.lru_cache(maxsize=16)
def meta_decode_cost(pipeline: str, vcfg_json: str, latent: tuple[int, ...]) -> tuple[float, float]:
    """Decoding one sample's latent with the full-size VAE on meta, in fp32: (FLOPs, working-set bytes)."""
    vcfg = json.loads(vcfg_json)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vae = component(PROFILES[pipeline].vae_class, vcfg)
        z = torch.randn(1, *latent)
    return meta_cost(vae, lambda z: vae.decode(z, return_dict=False), {"z": z})


def _decode_cost(profile: FamilyProfile, parts: FamilyParts, geo: Layout, cfg: Config) -> tuple[float, float]:
    if profile.decode_cost is not None:
        return profile.decode_cost(parts, geo, cfg)
    vcfg_json = json.dumps(plain(dict(parts.vae.config)), sort_keys=True, default=list)
    return meta_decode_cost(profile.pipeline, vcfg_json, geo.latent)


# ----------------------------------------------------------------------------------------------------
# the activation probe: a width-64 copy, one forward per unknown on the CPU


def family_probe(pipeline: str, tcfg: dict, cfg: Config, targets: list[str] | None) -> tuple[float, ...]:
    """Bytes saved for backward per row at width 64: (per row, per main token of each kind, per text token)."""
    weights, autocast = probe_dtypes(cfg)
    key = json.dumps(plain(tcfg), sort_keys=True, default=list)
    return _family_probe_cached(
        pipeline, key, tuple(targets) if targets else None, cfg.train.lora.rank, weights, autocast
    )


@functools.lru_cache(maxsize=16)
def _family_probe_cached(
    pipeline: str,
    tcfg_json: str,
    targets: tuple[str, ...] | None,
    rank: int,
    weights: torch.dtype,
    autocast: torch.dtype | None,
) -> tuple[float, ...]:
    """Main tokens are the transformer's own sequence (SA3's memory tokens included)."""
    profile = PROFILES[pipeline]
    tcfg = json.loads(tcfg_json)
    narrow = profile.narrow(plain(tcfg))
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = component(profile.transformer_class, narrow)
    keep = getattr(model, "_keep_in_fp32_modules", None) or []
    for name, p in model.named_parameters():  # as from_pretrained(torch_dtype=...) leaves them
        p.data = p.data.float() if any(k in name.split(".") for k in keep) else p.data.to(weights)
    model.requires_grad_(False)
    if targets is not None:
        from peft import LoraConfig

        d_real = profile.width(AttrDict(tcfg))[0]
        r = max(1, round(rank * PROBE_WIDTH / d_real))
        config = LoraConfig(r=r, lora_alpha=r, target_modules=list(targets), init_lora_weights="gaussian")
        if hasattr(model, "add_adapter"):
            model.add_adapter(config)
        else:  # the SA3 DiT has no PeftAdapterMixin (the adapter lends it one): the same layers, by peft
            from peft import inject_adapter_in_model

            inject_adapter_in_model(config, model)
    else:
        model.requires_grad_(True)
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    rows = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for grid, n_txt in profile.probe_grids:
            inputs = profile.inputs(model.config, grid, n_txt, torch.device("cpu"), weights)
            main = profile.probe_tokens(model.config, grid)
            rows.append([1.0, *main, n_txt, float(saved_bytes(model, inputs, autocast))])
    finally:
        torch.set_num_threads(threads)
    return solve_probe(rows)


# ----------------------------------------------------------------------------------------------------
# passes, targets, experts


def family_lora_targets(pipeline: str) -> list[str]:
    """The adapter's ``lora_target_modules``, else the profile's."""
    try:
        from flowrl.pipelines.base import adapter_class

        return list(adapter_class(pipeline).lora_target_modules)
    except (ImportError, AttributeError):  # an adapter not written yet
        return list(PROFILES[pipeline].lora_targets)


def family_passes(pipeline: str, parts: FamilyParts, scale: float) -> int:
    """Transformer rows per sample and velocity: the adapter's own ``guidance(scale).passes`` (called on a
    stand-in holding what it reads: FLUX's ``guidance_embeds``), else the profile's rule."""
    from flowrl.pipelines.base import adapter_class

    embedded = bool(getattr(parts.experts[0].config, "guidance_embeds", False))
    try:
        cls = adapter_class(pipeline)
        stand_in = type("AdapterStandIn", (), {"guidance_embeds": embedded, "_cfg": getattr(cls, "_cfg", None)})()
        return int(cls.guidance(stand_in, scale).passes)
    except Exception:  # noqa: BLE001 -- an adapter not written yet, or one whose guidance reads more
        return PROFILES[pipeline].passes(embedded, scale)


def _trained_expert_indices(cfg: Config, parts: FamilyParts) -> list[int]:
    if len(parts.experts) == 1:
        return [0]
    return {"both": [0, 1], "high_noise": [0], "low_noise": [1]}[cfg.model.trained_experts]


def expert_sigmas(parts: FamilyParts, num_steps: int) -> list[float]:
    """The schedule the experts split by sigma, from the scheduler config, as the adapter reads it."""
    import diffusers

    config = dict(parts.scheduler or PROFILES[parts.pipeline].default_scheduler())
    name = config.pop("_class_name", "UniPCMultistepScheduler")
    scheduler = getattr(diffusers, name).from_config(config)
    scheduler.set_timesteps(num_steps, device="cpu")
    return [float(s) for s in scheduler.sigmas]


def _expert_transitions(cfg: Config, parts: FamilyParts) -> tuple[float, float]:
    """(transitions per sample whose update runs forward and backward, those that run a forward only).

    The plan trains its transitions (``trained_transitions``) whichever expert takes them. With two experts
    of which one trains (Wan 2.2 A14B; the high-noise expert takes sigma >= boundary_ratio), a transition of the
    frozen expert still runs its training forward, but nothing in it requires grad, so it has no backward and
    saves no activations. Under a window: the expected share of the window's range."""
    s = cfg.sample
    trained = trained_transitions(cfg)
    experts = _trained_expert_indices(cfg, parts)
    if len(parts.experts) == 1 or len(experts) == 2:
        return float(trained), 0.0
    sigmas = expert_sigmas(parts, s.num_steps)
    boundary = parts.boundary_ratio or WAN22_BOUNDARY_RATIO
    mine = [(sigmas[i] >= boundary) == (experts == [0]) for i in range(s.num_steps)]
    o = flow_knobs(cfg)
    if o.window_size:
        lo, hi = o.window_range or (0, s.num_steps)
        share = sum(mine[lo:hi]) / max(1, hi - lo)
        return o.window_size * share, o.window_size * (1 - share)
    grad = float(sum(mine[:trained]))
    return grad, trained - grad


# ----------------------------------------------------------------------------------------------------
# the model's size


def _trainable_count(parts, trained_idx: list[int], per_expert: list[int], targets, rank: int) -> int:
    """The trained experts' trainable parameters: their LoRA's with ``targets``, else all of theirs."""
    if targets:
        per_expert_lora = [lora_parameter_count(e, targets, rank) for e in parts.experts]
        trainable = sum(per_expert_lora[i] for i in trained_idx)
        if trainable == 0:
            raise ConfigError(f"train.lora.target_modules: {targets} match no module of the transformer")
        return trainable
    return sum(per_expert[i] for i in trained_idx)


def _activation_bytes(cfg: Config, profile, geo, tc, targets, d: int, layers: int) -> tuple[float, float, int]:
    """One row's training activation bytes (the probe's per-row and per-token counts scaled to width ``d``), its
    bytes under gradient checkpointing, and the tokens checkpointing keeps per block."""
    per_row, *per_token = family_probe(cfg.model.pipeline, dict(tc), cfg, targets)
    tokens = [*profile.token_split(geo), geo.text_tokens]  # per main token of each kind, per text token
    act = max(per_row, 0.0) + d / PROBE_WIDTH * sum(c * n for c, n in zip(per_token, tokens))
    el = 2 if compute_16bit(cfg) else 4
    # checkpointing keeps each block's inputs: both streams of a two-stream model, else the main stream (the
    # text context is one tensor every block shares)
    ckpt_tokens = geo.main_tokens + (geo.text_tokens if profile.checkpoint_text else 0)
    shared = 0 if profile.checkpoint_text else geo.text_tokens * d * el
    ckpt = layers * ckpt_tokens * d * el + shared + act / layers
    return act, ckpt, ckpt_tokens


def family_model_size(cfg: Config) -> ModelSize:
    """Parameters, tokens, FLOPs and activation bytes of ``cfg.model`` of a family in ``PROFILES``."""
    mc, lora = cfg.model, cfg.train.lora
    pipeline = mc.pipeline
    profile = PROFILES[pipeline]
    parts = family_parts(pipeline, mc.path, mc.revision)
    geo = profile.layout(cfg, parts)
    tc = parts.experts[0].config
    d, layers = profile.width(tc)
    targets = (lora.target_modules or family_lora_targets(pipeline)) if lora.enabled else None
    trained_idx = _trained_expert_indices(cfg, parts)
    per_expert = [count_parameters(e) for e in parts.experts]
    trainable = _trainable_count(parts, trained_idx, per_expert, targets, lora.rank)
    act, ckpt, ckpt_tokens = _activation_bytes(cfg, profile, geo, tc, targets, d, layers)
    el = 2 if compute_16bit(cfg) else 4
    tcfg_json = json.dumps(plain(dict(tc)), sort_keys=True, default=list)
    flops, rollout_bytes = meta_forward_cost(pipeline, tcfg_json, geo.grid, geo.text_tokens)
    vae_flops, vae_bytes = _decode_cost(profile, parts, geo, cfg)
    trained_transitions, forward_only = _expert_transitions(cfg, parts)
    av = is_av_grpo(cfg)
    if av:  # AV-GRPO trains every transition (the SDE at all steps)
        trained_transitions, forward_only = float(cfg.sample.num_steps), 0.0
    return ModelSize(
        source=parts.source,
        transformer_params=sum(per_expert),
        text_encoder_params=sum(count_parameters(m) for m in parts.text_encoders),
        vae_params=count_parameters(parts.vae) + sum(count_parameters(m) for m in parts.decoders),
        trainable_params=trainable,
        layers=layers,
        hidden=d,
        image_tokens=geo.main_tokens,
        text_tokens=geo.text_tokens,
        latent_elems=math.prod(geo.latent),
        cond_elems=geo.cond_elems,
        flops_per_row=flops,
        vae_decode_flops=vae_flops,
        vae_decode_bytes=vae_bytes,
        act_bytes_per_row=act,
        ckpt_bytes_per_row=ckpt,
        block_bytes_per_row=act / layers,
        rollout_bytes_per_row=rollout_bytes * el / 4,  # measured in fp32; the rollout runs at the compute width
        pipeline=pipeline,
        media=profile.media,
        passes=family_passes(pipeline, parts, cfg.sample.guidance_scale),
        experts=len(parts.experts),
        trained_experts=len(trained_idx),
        trained_weights=sum(per_expert[i] for i in trained_idx),
        expert_params=max(per_expert),
        trained_transitions=trained_transitions,
        forward_only_transitions=forward_only,
        decode_rows=profile.decode_rows,
        media_bytes=4.0 * geo.media_elems,
        ckpt_tokens=ckpt_tokens,
        all_states=av,
        anchor_rollouts=av,
        kl_reference=kl_reference(cfg),
        heads=tc.get("num_attention_heads"),
    )
