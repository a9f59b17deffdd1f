"""The estimate itself: memory and time of one process from a ``ModelSize`` and the Config's plan (the
formulas of the package docstring), and its report. ``model_size`` reads the model through ``MODEL_SIZES``,
the table of estimators by ``model.pipeline``: SD3 by formula, every other family by its profile."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from flowrl.config import Config
from flowrl.configkit import ConfigError
from flowrl.estimate.base import Estimate, ModelSize, compute_16bit, trained_transitions
from flowrl.estimate.families import PROFILES, family_model_size
from flowrl.estimate.sd3 import sd3_model_size

GIB = 2**30
BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}

# Resident memory of a CPU process that has built a Trainer, before the model's own tensors: Python, torch
# (2.14), diffusers, transformers, peft, accelerate and PIL, as imported by flowrl. Measured on the
# project's CI machine (Linux x86_64): 0.66 GiB after `import flowrl.trainer`, 0.98 GiB after building
# the tiny-cpu Trainer (diffusers and transformers import their model modules lazily).
CPU_RUNTIME_GIB = 0.95
# What a process of a multi-process launch adds on the CPU: torch.distributed's gloo group and its threads. Measured
# with benchmarks/perf/parallel_memory.py (2 processes, 2026-12-07): 1.04 GiB after building the tiny Trainer, against
# 0.98 for one process.
CPU_DISTRIBUTED_GIB = 0.06

# Sustained FLOP/s assumed for CUDA when no GPU is here to measure: an H100-class GPU at about 20 % of
# its dense 16-bit peak (989 TFLOP/s), as measured below, and 45 % of its 67 TFLOP/s fp32 (not measured).
CUDA_FLOPS = {"16-bit": 200e12, "fp32": 30e12}
# The share of a large matmul's measured rate that a whole diffusion transformer forward and backward
# reaches (norms, attention, elementwise ops and small matmuls run below the peak). CPU: the 70m preset's
# forward ran at 25 GFLOP/s against 21-37 GFLOP/s for 1024^2 matmuls on one thread of the CI machine.
# CUDA: an SD3.5-Medium iteration at 512 px in fp16 on an H200 (benchmarks/perf/gpu/, 2026-11-30) took
# 15.95 s where this estimate, with 0.6 of the measured 16-bit matmul rate, said 8.32 s: its 3.0 PFLOP ran
# at about 200 TFLOP/s, 0.3 of that matmul rate. The 16-bit constant above (for an absent GPU) is that
# sustained rate (an H100 computes at an H200's rate).
MATMUL_EFFICIENCY = {"cpu": 0.8, "cuda": 0.3}
# Seconds of overhead per transformer call (forward, or backward counted as one more call), as
# (fixed, per layer): Python and module dispatch on CPU, kernel launches on CUDA. CPU values measured
# on the CI machine with the tiny presets (15 ms a forward with 2 layers, 73 ms with 4 of which 52 are
# compute); the CUDA values are an assumption (about 30 kernels of 10 us per block).
OVERHEAD_S = {"cpu": (6e-3, 3.5e-3), "cuda": (2e-3, 3e-4)}
STRATEGIES = ("ddp", "zero2", "fsdp")

# model.pipeline -> its estimator (verl's ESTIMATE_FUNC shape): a new family is one entry
MODEL_SIZES: dict[str, Callable[[Config], ModelSize]] = {
    "sd3": sd3_model_size,
    **dict.fromkeys(PROFILES, family_model_size),
}


def model_size(cfg: Config) -> ModelSize:
    """Parameters, tokens, FLOPs and activation bytes of ``cfg.model`` (configs only, no weights)."""
    estimator = MODEL_SIZES.get(cfg.model.pipeline)
    if estimator is None:
        raise ConfigError(f"model.pipeline: no estimate for {cfg.model.pipeline!r} (only {', '.join(MODEL_SIZES)})")
    return estimator(cfg)


# ----------------------------------------------------------------------------------------------------
# throughput of this machine


def measure_matmul_flops(device: str, dtype: torch.dtype = torch.float32, seconds: float = 0.2) -> float:
    """FLOP/s of square matmuls on ``device`` (n = 1024 on CPU, 8192 on CUDA), timed for about ``seconds``."""
    n = 8192 if device == "cuda" else 1024
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    (a @ b).sum().item()  # warm-up
    reps, start = 0, time.perf_counter()
    while True:
        c = a @ b
        reps += 1
        if device == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
    del c
    return 2 * n**3 * reps / elapsed


def _flops(cfg: Config, device: str) -> tuple[float, str]:
    half = compute_16bit(cfg)
    if device == "cuda" and torch.cuda.is_available():
        dtype = torch.bfloat16 if half else torch.float32
        rate = measure_matmul_flops("cuda", dtype) * MATMUL_EFFICIENCY["cuda"]
        return rate, f"measured matmul on {torch.cuda.get_device_name()} x {MATMUL_EFFICIENCY['cuda']}"
    if device == "cuda":
        key = "16-bit" if half else "fp32"
        return CUDA_FLOPS[key], f"assumed H100-class GPU, {key}"
    rate = measure_matmul_flops("cpu") * MATMUL_EFFICIENCY["cpu"]
    return rate, f"measured fp32 matmul on this CPU ({torch.get_num_threads()} threads) x {MATMUL_EFFICIENCY['cpu']}"


# ----------------------------------------------------------------------------------------------------
# the estimate


def _prompt_count(cfg: Config) -> int | None:
    try:
        from flowrl.data import load_train_prompts

        items = load_train_prompts(cfg.data)  # the cache holds the negative prompts too
        return len({p.prompt for p in items} | {p.negative_prompt for p in items if p.negative_prompt})
    except (OSError, ValueError):  # a missing prompt file is `flowrl validate`'s to report, not the estimate's
        return None


def _passes(cfg: Config, m: ModelSize) -> int:
    """Transformer rows per sample and velocity (the adapter's ``guidance(scale).passes``)."""
    if m.passes is not None:
        return m.passes
    from flowrl.pipelines.base import cfg_guidance

    return cfg_guidance(cfg.sample.guidance_scale).passes


def _kept_states(cfg: Config, m: ModelSize) -> int:
    """Latent states a sample keeps until the update: ``Trajectory.trained_only`` keeps those its trained
    transitions read or write (a window of k: k + 1; the first n transitions: n + 1). SD3 keeps counting all
    T + 1, as its published figures do (docs/scaling.md, the README; trained_only would lower them by up to
    0.25 GiB, sd35m-geneval-fast's)."""
    if m.all_states:
        return cfg.sample.num_steps + 1
    return trained_transitions(cfg) + 1


def _reference(cfg: Config, m: ModelSize) -> bool:
    from flowrl.methods.options import flow_knobs

    return m.kl_reference if m.kl_reference is not None else flow_knobs(cfg).beta > 0


# the memory savers of other settings: modelled only where this version's config has the key (the estimate does
# not pretend a setting is available before it is); each key -> (section, default when absent)
SAVERS = {
    "model.text_encoders": "device",  # device | offload (on the device only while encoding) | cache (freed)
    "train.optimizer": "adamw",  # adamw | adamw_8bit (two 1-byte moments a parameter)
    "train.activation_offload": False,  # saved activations wait in host memory
    "model.base_quantization": "none",  # none | int8 | float8: the frozen base's weights in 1 byte
}
# bytes a parameter of AdamW's two moments: fp32, or bitsandbytes' 8-bit blocks (1 byte each, a small absmax per
# block of 256 neglected)
MOMENT_BYTES = {"adamw": 8, "adamw_8bit": 2}
QUANT_BYTES = {"int8": 1, "float8": 1}


def available_settings(cfg: Config) -> dict:
    """The memory savers (``SAVERS``) this version's config has, with their values in ``cfg``."""
    out = {}
    for key in SAVERS:
        section, name = key.split(".")
        holder = getattr(cfg, section)
        if hasattr(holder, name):
            out[key] = getattr(holder, name)
    return out


def _setting(cfg: Config, key: str):
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name, SAVERS[key])


@dataclass(frozen=True)
class _Shares:
    """What ``_memory``'s items share: bytes per weight (``bw``; ``qb`` a frozen base weight's), this process's
    samples (``n_local``) and training rows, the sharding (``shard``: optimizer state and gradients, ``fsdp``: every
    parameter) and the one gathered block FSDP2 holds whole."""

    bw: float
    qb: float
    full: bool
    n_local: int
    rows: int
    shard: int
    fsdp: int
    trained_weights: float
    gathered: float


def _shares(cfg: Config, m: ModelSize, world_size: int, strategy: str, seq: int) -> _Shares:
    s, t = cfg.sample, cfg.train
    bw = BYTES[cfg.model.dtype]
    qb = QUANT_BYTES.get(_setting(cfg, "model.base_quantization"), bw)  # a frozen base weight's bytes
    n_local = s.prompts_per_iteration * s.group_size // (world_size // seq)  # a data group's samples
    rows = min(s.batch_size, n_local) * _passes(cfg, m)
    shard = world_size if strategy in ("zero2", "fsdp") else 1
    fsdp = world_size if strategy == "fsdp" else 1  # FSDP2 shards every parameter of the wrapped transformer
    trained_weights = m.trained_weights if m.trained_weights is not None else m.transformer_params
    expert = m.expert_params or m.transformer_params
    gathered = 2 * expert / m.layers if strategy == "fsdp" else 0  # one gathered block (plus the next, prefetched)
    return _Shares(bw, qb, not t.lora.enabled, n_local, rows, shard, fsdp, trained_weights, gathered)


def _weight_items(cfg: Config, m: ModelSize, z: _Shares, world_size: int, mem: dict[str, float]) -> None:
    """The weights' bytes: the transformer (trainable or frozen, LoRA), a frozen expert, the KL reference copy,
    the text encoders, the VAE, the optimizer's moments and the EMA."""
    t, bw, qb, fsdp, trained_weights = cfg.train, z.bw, z.qb, z.fsdp, z.trained_weights
    moments = MOMENT_BYTES.get(_setting(cfg, "train.optimizer"), 8)
    sharded = f", 1/{world_size} each" if fsdp > 1 else ""
    # FSDP2 shards what does not train too: the frozen base, a frozen expert, the KL reference copy (flowrl.sharding)
    part = f" (1/{world_size})" if fsdp > 1 else ""
    if z.full:
        mem[f"transformer (trainable, fp32{sharded})"] = 4 * (trained_weights / fsdp + z.gathered)
        if m.transformer_params > trained_weights:
            mem[f"frozen expert{part}"] = qb * (m.transformer_params - trained_weights) / fsdp
        if _reference(cfg, m):
            mem[f"KL reference copy{part}"] = bw * trained_weights / fsdp
    else:
        base = qb * (m.transformer_params / fsdp + z.gathered)
        mem[("transformer (frozen" if m.experts == 1 else f"{m.experts} experts (frozen") + f"{sharded})"] = base
        mem[f"LoRA (fp32{sharded})"] = 4 * m.trainable_params / fsdp
    if _setting(cfg, "model.text_encoders") == "device":
        mem["text encoders"] = bw * m.text_encoder_params
    mem["VAE (fp32)"] = 4 * m.vae_params
    mem["AdamW moments" if moments == 8 else "AdamW moments (8-bit)"] = moments * m.trainable_params / z.shard
    if t.ema:
        mem[f"EMA{' (1/' + str(world_size) + ')' if fsdp > 1 else ''}"] = 4 * m.trainable_params / fsdp


def _data_items(
    cfg: Config, m: ModelSize, z: _Shares, world_size: int, device: str, mem: dict[str, float], notes: list[str]
) -> None:
    """The data's bytes: rollout buffers, anchor trajectories, the prompt-embedding cache, and on the CPU the
    decoded media and the runtime; ``notes`` for what waits in host memory."""
    s, t, bw, n_local = cfg.sample, cfg.train, z.bw, z.n_local
    states = _kept_states(cfg, m) * m.latent_elems * 4
    offload = t.offload_states and device == "cuda"
    mem["rollout buffers"] = n_local * ((0 if offload else states) + m.cond_elems * bw)
    if m.anchor_rollouts:  # each local group's anchor trajectory, every state cached (fp32), on the device
        mem["anchor trajectories"] = (n_local // s.group_size) * (s.num_steps + 1) * m.latent_elems * 4
    n_prompts = _prompt_count(cfg)
    if n_prompts and _setting(cfg, "model.text_encoders") != "cache":  # cache: the rows wait in host memory
        cached = min(n_prompts, cfg.model.prompt_cache)
        mem["prompt-embedding cache"] = cached * m.cond_elems * bw
        if cached * m.cond_elems * bw > GIB:
            notes.append(
                f"the prompt-embedding cache grows to {cached} of the {n_prompts} prompts "
                f"({cached * m.cond_elems * bw / GIB:.1f} GiB on the device; lower model.prompt_cache)"
            )
    media = _media_bytes(cfg, m)
    if device == "cpu":
        mem["decoded images" if m.media == "image" else f"decoded {m.media}"] = n_local * (
            media + (states if offload else 0)
        )
        mem["runtime (Python, torch, ...)"] = (CPU_RUNTIME_GIB + (CPU_DISTRIBUTED_GIB if world_size > 1 else 0)) * GIB
    elif m.media != "image" and n_local * media > GIB:
        notes.append(
            f"the decoded {m.media} of {n_local} samples wait for the rewards in host memory "
            f"({n_local * media / GIB:.1f} GiB)"
        )


def _media_bytes(cfg: Config, m: ModelSize) -> float:
    """One decoded sample's bytes (fp32 RGB at the resolution where the family does not say)."""
    return m.media_bytes if m.media_bytes is not None else 3 * cfg.model.resolution**2 * 4


def _peak_phase(cfg: Config, m: ModelSize, z: _Shares, world_size: int, strategy: str, seq: int) -> tuple[str, float]:
    """The largest of the phases' transient bytes: training forward+backward, rollout forward, VAE decode and the
    text encoders' visit to the device (the start-up under FSDP2: ``_startup``)."""
    s, t, rows, fsdp, trained_weights = cfg.sample, cfg.train, z.rows, z.fsdp, z.trained_weights
    grads = 4 * m.trainable_params / z.shard
    if world_size > 1 and strategy == "ddp":
        grads += 4 * m.trainable_params  # DDP's gradient buckets
    # Ulysses: each process keeps the activations of its 1/S of a row's tokens (attention's head split holds the
    # same bytes a process); activation offload keeps one block's on the device, the rest in host memory
    block = m.block_bytes_per_row * rows / seq
    if _setting(cfg, "train.activation_offload"):
        act = block
    else:
        act = (m.ckpt_bytes_per_row if t.gradient_checkpointing else m.act_bytes_per_row) * rows / seq
    train = act + 2 * block + grads
    if z.full and t.mixed_precision != "no":
        train += 2 * trained_weights / fsdp  # autocast weight cache
    batch = min(s.batch_size, z.n_local)
    # the batch being sampled holds its whole chain until trained_only drops the untrained states
    chain = batch * max(0, s.num_steps + 1 - _kept_states(cfg, m)) * m.latent_elems * 4
    rollout = m.rollout_bytes_per_row * rows / seq + chain
    if m.decode_rows is None:
        decode = m.vae_decode_bytes * batch
    else:  # one clip at a time (Wan), the decoded ones gathered on the device until the batch is done
        decode = m.vae_decode_bytes * m.decode_rows + 2 * batch * _media_bytes(cfg, m)
    phases = [
        ("training activations + gradients", train),
        ("rollout forward", rollout),
        ("VAE decode", decode),
    ]
    if _setting(cfg, "model.text_encoders") != "device":  # offload: moved in for each encoding; cache: once
        phases.append(("text encoders on the device", z.bw * m.text_encoder_params))
    return max(phases, key=lambda kv: kv[1])


def _startup(
    cfg: Config, m: ModelSize, z: _Shares, device: str, mem: dict[str, float], notes: list[str]
) -> list[tuple[str, float]]:
    """Under FSDP2, the start-up before sharding as a phase (none otherwise). A full fine-tune on a GPU makes its
    fp32 weights and reference in host memory (``flowrl.policy.builds_on_host``): the device holds the 16-bit
    pipeline as loaded, and a note gives the host bytes. Else every process builds the whole transformer from
    the same seed on its device, then shards it (fsdp.yaml)."""
    fsdp, trained_weights = z.fsdp, z.trained_weights
    if fsdp == 1:
        return []
    if z.full and device == "cuda":
        loaded = z.bw * (m.transformer_params + m.text_encoder_params) + 4 * m.vae_params
        host = 4 * trained_weights + z.bw * (m.transformer_params - trained_weights)
        host += z.bw * trained_weights if _reference(cfg, m) else 0
        notes.append(
            f"each process builds the fp32 transformer{' and its KL reference' if _reference(cfg, m) else ''} "
            f"in host memory before FSDP2 moves its shards in ({host / GIB:.1f} GiB of host memory a process)"
        )
        return [("16-bit pipeline as loaded, before sharding", loaded - sum(mem.values()))]
    width = 4 if z.full else z.qb
    whole = width * trained_weights + z.qb * (m.transformer_params - trained_weights)
    if z.full and _reference(cfg, m):  # the KL reference is copied from the whole model, then sharded
        whole += z.bw * trained_weights
    return [("whole transformer before sharding", whole * (1 - 1 / fsdp) - width * z.gathered)]


def _memory(
    cfg: Config, m: ModelSize, world_size: int, device: str, strategy: str, seq: int = 1
) -> tuple[dict, list[str]]:
    """Per-process bytes by item (see the package docstring, ``flowrl.estimate``)."""
    z = _shares(cfg, m, world_size, strategy, seq)
    mem: dict[str, float] = {}
    notes: list[str] = []
    _weight_items(cfg, m, z, world_size, mem)
    _data_items(cfg, m, z, world_size, device, mem, notes)
    phase = max(
        [_peak_phase(cfg, m, z, world_size, strategy, seq), *_startup(cfg, m, z, device, mem, notes)],
        key=lambda kv: kv[1],
    )
    mem[f"peak phase: {phase[0]}"] = phase[1]
    return mem, notes


def _time(cfg: Config, m: ModelSize, world_size: int, device: str, rate: float, seq: int = 1) -> tuple[dict, float]:
    s, t = cfg.sample, cfg.train
    n_local = s.prompts_per_iteration * s.group_size // (world_size // seq)
    passes = _passes(cfg, m)
    batches = -(-n_local // s.batch_size)
    trained = m.trained_transitions if m.trained_transitions is not None else trained_transitions(cfg)
    f_row = m.flops_per_row / seq  # Ulysses: each process computes its 1/S of the tokens (and of attention's heads)
    fwd_bwd = (3 if not t.lora.enabled else 2) + (1 if t.gradient_checkpointing else 0)
    ref = 1 if _reference(cfg, m) else 0
    groups = n_local // s.group_size if m.anchor_rollouts else 0
    flops = {
        "rollout": (n_local + groups) * s.num_steps * passes * f_row,
        "decode": n_local * m.vae_decode_flops,  # every process of a sequence group decodes the group's samples
        "update": n_local * passes * f_row * (trained * (fwd_bwd + ref) + m.forward_only_transitions * (1 + ref)),
    }
    fixed, per_layer = OVERHEAD_S[device]
    per_call = fixed + per_layer * m.layers
    calls = {
        "rollout": (batches + groups) * s.num_steps,
        "decode": batches,
        "update": batches
        * (trained * (2 + (1 if t.gradient_checkpointing else 0) + ref) + m.forward_only_transitions * (1 + ref)),
    }
    seconds = {k: flops[k] / rate + calls[k] * per_call for k in flops}
    return seconds, sum(flops.values())


def check_sequence_parallel(cfg: Config, m: ModelSize, seq: int) -> str | None:
    """Why ``seq`` processes cannot split this model's samples (None: they can): the family's refusal (its
    adapter's ``sequence_parallel_refusal``), or heads or tokens ``seq`` does not divide."""
    if seq == 1:
        return None
    from flowrl.pipelines.base import adapter_class

    try:
        reason = getattr(adapter_class(cfg.model.pipeline), "sequence_parallel_refusal", None)
    except (ValueError, ImportError):
        reason = None
    if reason:
        return f"model.pipeline={cfg.model.pipeline} cannot split a sample yet: {reason}"
    if m.heads and m.heads % seq:
        return f"{seq} does not divide the transformer's {m.heads} attention heads"
    if m.image_tokens % seq:
        return f"{seq} does not divide a row's {m.image_tokens} {m.media} tokens"
    return None


def _check_launch(cfg: Config, world_size: int, device: str, strategy: str, seq: int) -> None:
    """``estimate``'s launch, refused in one line where the run could not start so."""
    if device not in ("cuda", "cpu"):
        raise ValueError(f"device: {device!r} is not one of cuda, cpu")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy: {strategy!r} is not one of {', '.join(STRATEGIES)}")
    if world_size < 1:
        raise ValueError(f"world_size: must be >= 1, got {world_size}")
    if seq < 1 or world_size % seq:
        raise ValueError(f"sequence parallelism {seq} does not divide the {world_size} processes")
    n_total, data = cfg.sample.prompts_per_iteration * cfg.sample.group_size, world_size // seq
    if n_total % data:
        raise ValueError(
            f"{n_total} samples per iteration do not split evenly over {data} "
            + ("processes" if seq == 1 else f"data groups ({world_size} processes, sequence parallelism {seq})")
        )
    quant = _setting(cfg, "model.base_quantization")
    if strategy == "fsdp" and quant not in ("none", None):  # as the Trainer refuses it before any weight loads
        raise ValueError(f"model.base_quantization={quant}: FSDP2 cannot shard a quantized base; use ddp or none")


def estimate(
    cfg: Config,
    world_size: int = 1,
    device: str = "cuda",
    flops: float | None = None,
    strategy: str = "ddp",
    sequence_parallel: int | None = None,
    model: ModelSize | None = None,
) -> Estimate:
    """Peak memory (GiB) and seconds per iteration of one process of a run of ``cfg``, before running it.

    ``world_size``: processes (GPUs) sharing each iteration's samples. ``device``: ``cuda`` (peak =
    ``torch.cuda.max_memory_allocated``) or ``cpu`` (peak = resident set, runtime included). ``flops``:
    sustained FLOP/s of one device (default: measured here, or an H100-class constant for an absent
    GPU). ``strategy``: ``ddp`` (every process holds everything), ``zero2`` (AdamW moments and gradients
    sharded over processes), ``fsdp`` (FULL_SHARD: the transformer's weights too; needs rollouts routed
    through the wrapped model). ``sequence_parallel``: processes that split each sample's tokens (default:
    ``train.sequence_parallel``); the ``world_size / sequence_parallel`` data groups share the samples.
    ``model``: the ``model_size(cfg)`` already computed (the verdict's alternatives reuse it). Formulas: the
    package docstring (``flowrl.estimate``).
    """
    seq = cfg.train.sequence_parallel if sequence_parallel is None else sequence_parallel
    _check_launch(cfg, world_size, device, strategy, seq)
    s = cfg.sample
    n_total = s.prompts_per_iteration * s.group_size
    data = world_size // seq
    m = model or model_size(cfg)
    refusal = check_sequence_parallel(cfg, m, seq)
    if refusal:
        raise ValueError(f"sequence parallelism {seq}: {refusal}")
    rate, source = (float(flops), "given") if flops else _flops(cfg, device)
    mem, notes = _memory(cfg, m, world_size, device, strategy, seq)
    seconds, total_flops = _time(cfg, m, world_size, device, rate, seq)
    iteration = sum(seconds.values())
    if device == "cuda":
        notes.append("CUDA context (~0.5 GiB) and allocator fragmentation are not in max_memory_allocated")
    notes.append("reward models, text encoding, optimizer steps and communication are not in the time")
    return Estimate(
        peak_gib=sum(mem.values()) / GIB,
        seconds_per_iteration=iteration,
        images_per_s=n_total / iteration,
        memory_gib={k: v / GIB for k, v in mem.items()},
        time_s=seconds,
        flops_per_iteration=total_flops,
        flops_per_s=rate,
        flops_source=source,
        samples_per_process=n_total // data,
        world_size=world_size,
        device=device,
        strategy=strategy,
        model=m,
        notes=notes,
        sequence_parallel=seq,
    )


def is_tiny(model_cfg) -> bool:
    """Whether ``model_cfg`` builds one of the offline tiny models (a CPU recipe): ``tiny`` for every family,
    and the adapters' other tiny paths (Wan ``tiny-a14b``, Stable Audio ``tiny-base``)."""
    profile = PROFILES.get(model_cfg.pipeline)
    return model_cfg.path in (profile.tiny_paths if profile else {"tiny": {}})


def format_estimate(est: Estimate) -> str:
    """A short human-readable report of an ``Estimate``."""
    m = est.model
    lines = [
        (
            f"model: {m.source}; transformer {m.transformer_params / 1e6:,.1f}M, text encoders "
            f"{m.text_encoder_params / 1e6:,.1f}M, VAE {m.vae_params / 1e6:,.1f}M parameters; trainable "
            f"{m.trainable_params / 1e6:,.2f}M"
            + (f" ({m.trained_experts} of {m.experts} experts)" if m.experts > 1 else "")
        ),
        (
            f"tokens per row: {m.image_tokens} {m.media} + {m.text_tokens} text; {m.flops_per_row / 1e9:,.1f} GFLOP "
            f"per forward row; activations {m.act_bytes_per_row / 2**20:,.1f} MiB per training row"
        ),
        f"per process ({est.world_size} x {est.device}, {est.strategy}"
        + (f", sequence parallelism {est.sequence_parallel}" if est.sequence_parallel > 1 else "")
        + f"): {est.samples_per_process} samples/iteration",
        f"peak memory: {est.peak_gib:,.2f} GiB",
    ]
    lines += [f"  {k:<46s} {v:9.3f} GiB" for k, v in est.memory_gib.items()]
    lines.append(
        f"time per iteration: {est.seconds_per_iteration:,.2f} s ({est.images_per_s:,.2f} "
        f"{'images' if m.media == 'image' else 'samples'}/s over all "
        f"processes; {est.flops_per_iteration / 1e12:,.2f} TFLOP at {est.flops_per_s / 1e12:,.3g} TFLOP/s, "
        f"{est.flops_source})"
    )
    lines += [f"  {k:<46s} {v:9.3f} s" for k, v in est.time_s.items()]
    lines += [f"note: {n}" for n in est.notes]
    return "\n".join(lines)
