"""Sequence parallelism on one GPU (``--what sp``): how much of one video sample fits one GPU for a forward and
backward, per video family with a published recipe, next to ``flowrl.estimate``.

For each family (``SP_FAMILIES``: wan21-t2v-1.3b, wan22-ti2v-5b-pickscore, wan22-a14b, wan21-i2v-pickscore,
ltx2-flow-grpo) the transformer is built at its published config (``flowrl.estimate``'s table, what
``flowrl validate RECIPE --estimate`` reads offline) with random weights in bf16 on the GPU, its fp32-kept
modules in fp32, LoRA of the recipe's rank on the recipe's targets (the adapter's, where the recipe names none)
in fp32, and gradient checkpointing as the recipe sets it. Wan 2.2 A14B's second expert is resident in a run, so
its weights are held too, as one untouched bf16 buffer. Then, for the recipe's sample shape and for the model's
native clip (``model.num_frames x model.height x model.width``; the recipes train on shorter clips), one
row (one sample, one CFG branch) runs a forward and backward under bf16 autocast for each S of ``--sp-degrees``
(1, 2, 4, 8; the largest first, the first one twice to warm up), stopping at the first S that runs out of
memory: ``torch.cuda.max_memory_allocated`` (peak GiB) and the seconds of the call.

What S emulates: a process of a ``train.sequence_parallel=S`` run holds all the weights and 1/S of a row's
tokens. One GPU cannot run Ulysses' all-to-alls, so the transformer runs on a token slice instead: the
inputs and outputs that diffusers' context-parallel plan (the transformer class's ``_cp_plan``) splits are cut
to their first 1/S by the same hooks (the rotary tables, the first block's hidden states; Wan's text context,
which the plan keeps whole, stays whole), and the output the plan gathers is padded back to the row's length
with zeros (the all-gather's result, whose backward hands each process its own slice's gradient). Inside
attention Ulysses holds all the tokens of 1/S of the heads, so the query, key, value and output a process saves
for backward have the bytes of the slice's all heads: the emulated activations are a sequence-parallel
process's. Not in the figures: the all-to-all buffers (a few tensors of one attention's q, k, v, out at a
time), and in the seconds the communication and 1 - 1/S of attention's FLOPs (the slice attends to its own
tokens, a Ulysses process to all of them with 1/S of the heads), so the seconds are a lower bound at S > 1.

The estimate beside each figure is the same setting's: the transformer's weights at ``model.dtype`` (both
experts of A14B), one expert's LoRA and its gradient in fp32, and one row's training activations at 1/S
(``ckpt_bytes_per_row`` with checkpointing, else ``act_bytes_per_row``) plus the backward transient of two
blocks, as ``flowrl.estimate``'s training phase counts them (``transformer_estimate_gib``); ``est iteration``
is the whole iteration's per-process peak of the recipe at ``world_size = sequence_parallel = S`` (its batch, its
CFG rows, text encoders, VAE, buffers), for context. An S the run would refuse (it must divide the heads and
the row's tokens; LTX-2 and the image families' refusals) is listed with the reason and not measured.

"Fits": the peak within 80 GB (74.5 GiB: an 80 GB card reports about 79 GiB, less the CUDA context and the
allocator's slack), for the measured one-row forward+backward and for the estimate; ``smallest S`` is the
smallest S that fits. On a CPU the stage refuses published sizes and runs the same code on the tiny models at
a few dozen tokens with ``--smoke`` (peaks are NaN there: no CUDA allocator).
"""

from __future__ import annotations

import gc
import math
import time
from dataclasses import dataclass, field

import torch

from flowrl.benchmarks.perf.gpu.common import GIB, Clock, default_dtype, fp32_kept, peak_gib, reset_peak, sync

SP_DEGREES = (1, 2, 4, 8)
FIT_GB = 80  # decimal gigabytes, as cards are sold
FIT_GIB = FIT_GB * 1e9 / GIB  # 74.5 GiB
NATIVE_81 = ("model.num_frames=81", "model.height=480", "model.width=832")  # Wan 2.1's clip: 21 x 60 x 104 latent


@dataclass(frozen=True)
class SpFamily:
    """One video family: its published recipe, the shapes measured (name -> overrides) and its tiny model."""

    key: str  # --sp-families name
    recipe: str
    label: str
    shapes: dict[str, tuple[str, ...]]  # a setting's name -> its overrides of the recipe ("recipe": none)
    tiny_path: str  # model.path of the tiny model (--smoke)
    smoke_shape: tuple[str, ...] = ("model.num_frames=13", "model.height=64", "model.width=64")
    max_sp: int = 8  # the largest S the stage emulates (the first note says why not more)
    notes: tuple[str, ...] = field(default=())


SP_FAMILIES = (
    SpFamily("wan21-1.3b", "wan21-t2v-1.3b", "Wan2.1-T2V-1.3B", {"recipe": (), "native": NATIVE_81}, "tiny"),
    SpFamily(
        "wan22-5b",
        "wan22-ti2v-5b-pickscore",
        "Wan2.2-TI2V-5B",
        # TI2V-5B's own clip: 121 frames of 704 x 1280 at 24 fps (the Wan 2.2 VAE: 31 x 44 x 80 latent)
        {"recipe": (), "native": ("model.num_frames=121", "model.height=704", "model.width=1280")},
        "tiny-ti2v",
    ),
    SpFamily("wan22-a14b", "wan22-a14b", "Wan2.2-T2V-A14B", {"recipe": (), "native": NATIVE_81}, "tiny-a14b"),
    SpFamily(
        "wan21-i2v-14b",
        "wan21-i2v-pickscore",
        "Wan2.1-I2V-14B-480P",
        {"recipe": (), "native": NATIVE_81},
        "tiny",
    ),
    # LTX-2's video and audio: the run refuses S > 1 while its adapter does; its S = 1 is measured
    SpFamily(
        "ltx2",
        "ltx2-flow-grpo",
        "LTX-2",
        {"recipe": ()},
        "tiny",
        smoke_shape=("model.num_frames=9", "model.height=64", "model.width=64"),
        max_sp=1,
        notes=(
            "LTX-2's split covers its audio stream too, which the class's context-parallel plan (the video tokens) "
            "does not cut",
        ),
    ),
)
SP_FAMILY_KEYS = tuple(f.key for f in SP_FAMILIES)


def sp_config(family: SpFamily, shape: str, smoke: bool, precision: str = "bf16"):
    """The recipe's Config at ``shape`` (the tiny model at a small clip with ``smoke``), in ``precision``."""
    from flowrl.resolve import resolve_config

    overrides = list(family.shapes[shape])
    if smoke:
        overrides = [f"model.path={family.tiny_path}", *family.smoke_shape]
    overrides += [
        f"model.dtype={precision}",
        f"train.mixed_precision={repr('no') if precision == 'fp32' else precision}",
    ]
    return resolve_config(family.recipe, overrides)


def _parts(cfg):
    from flowrl.estimate.families import PROFILES, family_parts

    profile = PROFILES[cfg.model.pipeline]
    parts = family_parts(cfg.model.pipeline, cfg.model.path, cfg.model.revision)
    return profile, parts, profile.layout(cfg, parts)


def refusal(family: SpFamily, cfg, parts, geo, s: int) -> str | None:
    """Why a run of ``cfg`` at ``train.sequence_parallel=s`` would be refused (``flowrl.mesh``'s checks: the
    family's adapter, the heads; the row's tokens, which diffusers checks), or why the stage does not emulate it;
    None when it runs."""
    if s == 1:
        return None
    from flowrl.mesh import check_family, check_heads
    from flowrl.pipelines.base import adapter_class

    try:
        check_family(s, cfg.model.pipeline, adapter_class(cfg.model.pipeline))
        check_heads(s, parts.experts[0])
    except ValueError as exc:
        return str(exc)
    if geo.main_tokens % s:
        return f"train.sequence_parallel={s} does not divide a row's {geo.main_tokens} tokens"
    if s > family.max_sp:
        return f"not emulated: {family.notes[0]}"
    return None


def iteration_estimate_gib(cfg, m, s: int) -> float:
    """The whole iteration's per-process peak of ``cfg`` at ``world_size = sequence_parallel = s`` (NaN where the
    estimate refuses it, or has no sequence parallelism)."""
    from flowrl.estimate import estimate
    from flowrl.estimate.model import CUDA_FLOPS

    flops = CUDA_FLOPS["16-bit"]  # the time is not reported: no matmul measured
    try:
        return estimate(cfg, world_size=s, sequence_parallel=s, flops=flops, model=m).peak_gib
    except TypeError:  # an estimate without sequence parallelism
        return estimate(cfg, flops=flops).peak_gib if s == 1 else math.nan
    except ValueError:
        return math.nan


def sp_plan(
    smoke: bool = False, families: tuple[str, ...] = SP_FAMILY_KEYS, degrees: tuple[int, ...] = SP_DEGREES
) -> list[dict]:
    """What the stage would build and run, from the configs alone (the published models on the meta device):
    per family and shape the transformer, its parameters, the row's tokens, and each S's tokens or refusal."""
    from flowrl.estimate.meta import count_parameters

    out = []
    for family in SP_FAMILIES:
        if family.key not in families:
            continue
        for shape in family.shapes if not smoke else ("recipe",):
            cfg = sp_config(family, shape, smoke)
            _, parts, geo = _parts(cfg)
            expert = parts.experts[0]
            frames, height, width = cfg.model.num_frames, *cfg.model.size
            out.append(
                {
                    "key": family.key,
                    "family": family.label,
                    "recipe": family.recipe,
                    "shape": shape,
                    "video": f"{frames}x{height}x{width}",
                    "pipeline": cfg.model.pipeline,
                    "transformer": type(expert).__name__,
                    "params": count_parameters(expert),
                    "experts": len(parts.experts),
                    "heads": expert.config.get("num_attention_heads"),
                    "grid": tuple(geo.grid),
                    "tokens": geo.main_tokens,
                    "text_tokens": geo.text_tokens,
                    "checkpointing": bool(cfg.train.gradient_checkpointing),
                    "lora_rank": cfg.train.lora.rank if cfg.train.lora.enabled else None,
                    "degrees": {s: refusal(family, cfg, parts, geo, s) or geo.main_tokens // s for s in degrees},
                }
            )
    return out


# ----------------------------------------------------------------------------------------------------
# the token slice: diffusers' context-parallel plan, applied locally


def _slice_hooks(model: torch.nn.Module, s: int, seen: list[int]):
    """Hooks on ``model`` that cut what its ``_cp_plan`` splits to the first 1/s and pad what it gathers back with
    zeros; ``seen`` gets the token count of each split hidden state. Returns a function removing them."""
    from diffusers.hooks import HookRegistry, ModelHook
    from diffusers.hooks.context_parallel import ContextParallelSplitHook, _get_submodule_by_name
    from diffusers.models._modeling_parallel import ContextParallelOutput

    class Split(ContextParallelSplitHook):
        def _prepare_cp_input(self, x, cp_input):
            if cp_input.expected_dims is not None and x.dim() != cp_input.expected_dims:
                return x  # diffusers' hook skips it too (a 1-D timestep of the plan's 2-D split)
            if x.shape[cp_input.split_dim] % s:
                raise ValueError(f"{s} does not divide dimension {cp_input.split_dim} of {tuple(x.shape)}")
            if cp_input.expected_dims == 3 and cp_input.split_dim == 1:
                seen.append(x.shape[1] // s)
            return x.chunk(s, dim=cp_input.split_dim)[0]

    class Pad(ModelHook):
        def __init__(self, plan):
            super().__init__()
            self.plan = plan

        def post_forward(self, module, output):
            one = isinstance(output, torch.Tensor)
            outs = [output] if one else list(output)
            for i, cpm in enumerate(self.plan):
                if cpm is not None:
                    x = outs[i]
                    shape = list(x.shape)
                    shape[cpm.gather_dim] *= s - 1
                    outs[i] = torch.cat([x, x.new_zeros(shape)], dim=cpm.gather_dim)
            return outs[0] if one else tuple(outs)

    plan = type(model)._cp_plan
    if plan is None:
        raise ValueError(f"{type(model).__name__} has no context-parallel plan in diffusers")
    registered = []
    for name, spec in plan.items():
        modules = _get_submodule_by_name(model, name)
        for m in modules if isinstance(modules, list) else [modules]:
            if isinstance(spec, dict):
                hook = Split(spec, None)
            else:
                hook = Pad([spec] if isinstance(spec, ContextParallelOutput) else list(spec))
            registry = HookRegistry.check_if_exists_or_initialize(m)
            registry.register_hook(hook, f"flowrl_sp_slice---{name}")
            registered.append((registry, f"flowrl_sp_slice---{name}"))

    def remove():
        for registry, hook_name in registered:
            registry.remove_hook(hook_name)

    return remove


# ----------------------------------------------------------------------------------------------------
# building and measuring


def build_sp_transformer(cfg, device: torch.device, dtype: torch.dtype):
    """The family's transformer (its first expert) at ``cfg``'s config on ``device``, with LoRA of the recipe in
    fp32 and checkpointing as the recipe, and the other experts' weights as one bf16 buffer (None if one)."""
    from peft import LoraConfig

    from flowrl.estimate.families import family_lora_targets
    from flowrl.estimate.meta import component, count_parameters

    _, parts, _ = _parts(cfg)
    expert = parts.experts[0]
    torch.manual_seed(0)
    with torch.device(device), default_dtype(dtype):
        model = component(type(expert).__name__, dict(expert.config))
    fp32_kept(model, dtype)
    model.requires_grad_(False)
    lora = cfg.train.lora
    if lora.enabled:
        targets = list(lora.target_modules or family_lora_targets(cfg.model.pipeline))
        model.add_adapter(
            LoraConfig(r=lora.rank, lora_alpha=lora.alpha, target_modules=targets, init_lora_weights="gaussian")
        )
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.float()
    else:
        model.requires_grad_(True)
        for p in model.parameters():
            p.data = p.data.float()
    if cfg.train.gradient_checkpointing:
        model.enable_gradient_checkpointing()
    others = sum(count_parameters(e) for e in parts.experts[1:])
    resident = torch.empty(others, dtype=dtype, device=device) if others else None
    return model, resident


def transformer_estimate_gib(cfg, m, s: int) -> float:
    """``flowrl.estimate``'s bytes of what the stage holds: the experts' weights, one expert's LoRA (or its fp32
    weights) and gradients, one row's training activations at 1/s and the two-block backward transient."""
    from flowrl.estimate.model import BYTES

    trained = m.trainable_params / m.trained_experts
    frozen = m.transformer_params - (0 if cfg.train.lora.enabled else trained)
    static = BYTES[cfg.model.dtype] * frozen + 4 * trained + 4 * trained  # trained weights in fp32, their gradients
    if not cfg.train.lora.enabled and cfg.train.mixed_precision != "no":
        static += 2 * trained  # autocast's 16-bit copies of the fp32 weights
    act = m.ckpt_bytes_per_row if cfg.train.gradient_checkpointing else m.act_bytes_per_row
    return (static + (act + 2 * m.block_bytes_per_row) / s) / GIB


def _forward_backward(model, inputs: dict, autocast) -> None:
    with autocast:
        out = model(**inputs, return_dict=False)
    outs = [o for o in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(o, torch.Tensor)]
    sum(o.float().square().mean() for o in outs).backward()


def _measure(model, inputs, device, autocast, s: int, warm: bool) -> tuple[float, float, int]:
    """(peak GiB, seconds, tokens of the slice) of one forward+backward at 1/s of the tokens."""
    seen: list[int] = []
    remove = _slice_hooks(model, s, seen) if s > 1 else (lambda: None)
    try:
        if warm:
            _forward_backward(model, inputs, autocast)
            model.zero_grad(set_to_none=True)
            sync(device)
        reset_peak(device)
        seen.clear()
        start = time.perf_counter()
        _forward_backward(model, inputs, autocast)
        sync(device)
        seconds = time.perf_counter() - start
        return peak_gib(device), seconds, (seen[0] if seen else -1)
    finally:
        model.zero_grad(set_to_none=True)
        remove()


def bench_sp(
    device: torch.device,
    clock: Clock,
    precision: str,
    smoke: bool,
    families: tuple[str, ...] = SP_FAMILY_KEYS,
    degrees: tuple[int, ...] = SP_DEGREES,
) -> list[dict]:
    """One row per family, shape and S (see the module docstring)."""
    from flowrl.estimate import model_size
    from flowrl.pipelines.kit.loading import DTYPES

    gpu = device.type == "cuda"
    if not gpu and not smoke:
        clock.say("sp: skipped: the published transformers need a GPU (--smoke runs the same code on the tiny models)")
        return []
    dtype = DTYPES[precision]
    rows: list[dict] = []
    for family in SP_FAMILIES:
        if family.key not in families:
            continue
        if gpu and clock.left() < 60:
            clock.say(f"skipping {family.label}: time budget ({clock.left():.0f} s left)")
            continue
        shapes = list(family.shapes) if not smoke else ["recipe"]
        configs = {shape: sp_config(family, shape, smoke, precision) for shape in shapes}
        first = configs[shapes[0]]
        clock.say(f"{family.label} ({family.recipe}): building ({precision}{', tiny' if smoke else ''}) on {device}")
        model, resident = build_sp_transformer(first, device, dtype)
        autocast = torch.autocast(device.type, dtype=dtype, enabled=precision != "fp32")
        size = sum(p.numel() for p in model.parameters() if not p.requires_grad)
        size += resident.numel() if resident is not None else 0
        clock.say(
            f"{family.label}: {size / 1e9:.2f}B frozen"
            + (" (both experts resident)" if resident is not None else "")
            + f", {sum(p.numel() for p in model.parameters() if p.requires_grad) / 1e6:.1f}M trained"
        )
        for shape, cfg in configs.items():
            profile, parts, geo = _parts(cfg)
            m = model_size(cfg)
            video = f"{cfg.model.num_frames}x{cfg.model.size[0]}x{cfg.model.size[1]}"
            inputs = profile.inputs(model.config, geo.grid, geo.text_tokens, device, dtype)
            setting = (
                f"{shape} {video} ({geo.main_tokens} tokens, {geo.text_tokens} text), one row, LoRA "
                f"{cfg.train.lora.rank if cfg.train.lora.enabled else 'off'}"
                f"{', checkpointing' if cfg.train.gradient_checkpointing else ''}, {precision}"
            )
            fam_rows, out_of_memory, warm = [], False, True
            for s in sorted(degrees, reverse=True):  # the fewest tokens first: it warms up
                why = refusal(family, cfg, parts, geo, s)
                est = transformer_estimate_gib(cfg, m, s)
                est_iter = iteration_estimate_gib(cfg, m, s)
                row = {
                    "model": f"{family.label} SP",
                    "setting": setting,
                    "recipe": family.recipe,
                    "shape": shape,
                    "sp": s,
                    "tokens": geo.main_tokens // s,
                    "peak_gib": math.nan,
                    "est_peak_gib": est,
                    "est_iteration_peak_gib": est_iter,
                    "peak_ratio": math.nan,
                    "seconds": math.nan,
                    "refused": why,
                }
                if why:
                    clock.say(f"{family.label} {shape} S={s}: refused by the run: {why}")
                elif out_of_memory:
                    row["refused"] = "not run: fewer processes ran out of memory"
                    row["peak_gib"] = math.inf
                elif gpu and clock.left() < 20:
                    row["refused"] = "not run: time budget"
                    clock.say(f"{family.label} {shape} S={s}: skipped: time budget")
                else:
                    try:
                        peak, seconds, tokens = _measure(model, inputs, device, autocast, s, warm)
                        warm = False
                        if s > 1 and tokens != geo.main_tokens // s:
                            raise RuntimeError(f"the slice held {tokens} tokens, not {geo.main_tokens // s}")
                    except torch.cuda.OutOfMemoryError:
                        peak, seconds, out_of_memory = math.inf, math.nan, True
                    if out_of_memory:  # outside the handler: its traceback no longer holds the activations
                        gc.collect()
                        torch.cuda.empty_cache()
                    row.update(peak_gib=peak, seconds=seconds, peak_ratio=peak / est)
                    clock.say(
                        f"{family.label} {shape} S={s}: {row['tokens']} tokens, peak {_gib(peak)}, estimate "
                        f"{_gib(est)} (ratio {peak / est:.2f}), {seconds:.2f} s; iteration estimate {_gib(est_iter)}"
                    )
                fam_rows.append(row)
            fam_rows.sort(key=lambda r: r["sp"])
            fit = [r["sp"] for r in fam_rows if not r["refused"] and r["peak_gib"] <= FIT_GIB]
            est_fit = [r["sp"] for r in fam_rows if not r["refused"] and r["est_peak_gib"] <= FIT_GIB]
            for r in fam_rows:
                r["smallest_sp_fit"] = min(fit) if fit else None
                r["smallest_sp_fit_estimate"] = min(est_fit) if est_fit else None
            clock.say(
                f"{family.label} {shape}: smallest S within {FIT_GB} GB: "
                f"{min(fit) if fit else 'none measured'} (estimate: {min(est_fit) if est_fit else 'none'})"
            )
            rows += fam_rows
            del inputs
        del model, resident
        reset_peak(device)
    return rows


def _gib(v: float) -> str:
    if math.isinf(v):
        return "OOM"
    if math.isnan(v):
        return "- (no CUDA allocator here)"
    return f"{v:.2f} GiB" if v >= 0.1 else f"{v:.2g} GiB"


def sp_markdown(rows: list[dict]) -> list[str]:
    """The stage's table (rows with ``sp``), for the runner's Markdown."""
    sp = [r for r in rows if "sp" in r]
    if not sp:
        return []

    def num(v: float, digits: int = 2) -> str:
        return "-" if math.isnan(v) else ("OOM" if math.isinf(v) else f"{v:.{digits}f}")

    lines = [
        "",
        f"| sequence parallelism (one row, 1/S of its tokens) | setting | S | tokens | peak GiB | estimate GiB | "
        f"ratio | s | est iteration GiB | smallest S within {FIT_GB} GB (estimate) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sp:
        refused = (r["refused"] or "").split(f"train.sequence_parallel={r['sp']} ")[-1]
        peak = f"refused: {refused}" if refused and not math.isinf(r["peak_gib"]) else num(r["peak_gib"])
        fit = f"{r['smallest_sp_fit'] or '-'} ({r['smallest_sp_fit_estimate'] or '-'})"
        lines.append(
            f"| {r['model']} | {r['setting']} | {r['sp']} | {r['tokens']} | {peak} | {num(r['est_peak_gib'])} | "
            f"{num(r['peak_ratio'])} | {num(r['seconds'], 3)} | {num(r['est_iteration_peak_gib'])} | {fit} |"
        )
    return lines
