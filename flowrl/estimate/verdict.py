"""Whether a recipe fits a GPU, and what would make it fit: the estimate under the recipe's declared launch
(``launch.gpus``, ``launch.strategy``, ``train.sequence_parallel``) and under each alternative setting.

``verdict(cfg, gpu_memory_gib=80)`` returns the estimate, whether it fits, and the alternatives that fit with
their estimated peaks; ``verdict_line`` says it in one line (the last line of ``flowrl validate --estimate``)
and ``verdict_json`` as one JSON object (``--json``).

A peak fits when it is at most ``HEADROOM`` (95 %) of the card's memory: the estimate is
``max_memory_allocated``, which leaves out the CUDA context and the allocator's slack. The alternatives, each
alone from the recipe's settings: FSDP, more GPUs (8, 16, 32), sequence parallelism where the family splits a
sample (S dividing the GPUs, the heads and the tokens), gradient checkpointing, and the memory savers this
version's config has (``flowrl.estimate.model.SAVERS``: a saver whose key is not in the config is not
offered). Where none fits alone, the savers are combined, largest saving first, until the peak fits.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from flowrl.config import Config
from flowrl.estimate.base import Estimate
from flowrl.estimate.model import SAVERS, available_settings, check_sequence_parallel, estimate, model_size

HEADROOM = 0.95
DEFAULT_GPU_MEMORY_GIB = 80.0
MORE_GPUS = (8, 16, 32)
# what each saver is set to when offered (where the config has the key)
SAVER_VALUES = {
    "model.text_encoders": "cache",
    "train.optimizer": "adamw_8bit",
    "train.activation_offload": True,
    "model.base_quantization": "int8",
}


@dataclass
class Launch:
    gpus: int
    strategy: str
    sequence_parallel: int

    def describe(self, device: str = "cuda") -> str:
        sp = f", sequence parallelism {self.sequence_parallel}" if self.sequence_parallel > 1 else ""
        unit = "GPU" if device == "cuda" else "process"
        return f"{self.gpus} {unit}{'es' if unit == 'process' and self.gpus > 1 else ''}{'s' if unit == 'GPU' and self.gpus > 1 else ''}, {self.strategy}{sp}"


@dataclass
class Verdict:
    estimate: Estimate
    launch: Launch
    gpu_memory_gib: float
    fits: bool
    alternatives: list[tuple[dict, float]] = field(default_factory=list)  # (settings, peak GiB) that fit
    combined: tuple[dict, float] | None = None  # the savers together, where none fits alone
    not_available: list[str] = field(default_factory=list)  # savers this version's config does not have

    @property
    def usable_gib(self) -> float:
        return self.gpu_memory_gib * HEADROOM


def declared_launch(cfg: Config, world_size: int | None = None, strategy: str | None = None) -> Launch:
    """The launch to estimate: the arguments given, else the recipe's ``launch.gpus`` (default: its
    ``train.sequence_parallel``) and ``launch.strategy``."""
    seq = cfg.train.sequence_parallel
    launch = getattr(cfg, "launch", None)
    gpus = world_size or (launch.gpus if launch is not None and launch.gpus else seq)
    return Launch(gpus, strategy or (launch.strategy if launch is not None else "ddp"), seq)


def _with(cfg: Config, settings: dict) -> Config:
    """A copy of ``cfg`` with dotted ``settings`` of its sections changed (the launch's are the estimate's)."""
    out = copy.deepcopy(cfg)
    for key, value in settings.items():
        if key.startswith("launch.") or key == "train.sequence_parallel":
            continue
        section, name = key.split(".")
        setattr(getattr(out, section), name, value)
    return out


def _peak(cfg: Config, m, launch: Launch, settings: dict, device: str) -> float | None:
    gpus = settings.get("launch.gpus", launch.gpus)
    seq = settings.get("train.sequence_parallel", launch.sequence_parallel)
    strategy = settings.get("launch.strategy", launch.strategy)
    try:
        est = estimate(_with(cfg, settings), gpus, device, 1.0, strategy, seq, model=m)
    except ValueError:  # the samples do not split over these GPUs, or S does not divide them
        return None
    return est.peak_gib


def _options(cfg: Config, m, launch: Launch) -> list[dict]:
    """Each alternative setting alone (see the module docstring)."""
    options = []
    if launch.strategy != "fsdp":
        options.append({"launch.strategy": "fsdp"})
    for gpus in MORE_GPUS:
        if gpus > launch.gpus and gpus % launch.sequence_parallel == 0:
            options.append({"launch.gpus": gpus, "launch.strategy": "fsdp"})
    for seq in (2, 4, 8):
        if seq > launch.sequence_parallel and launch.gpus % seq == 0 and not check_sequence_parallel(cfg, m, seq):
            options.append({"train.sequence_parallel": seq})
    if not cfg.train.gradient_checkpointing:
        options.append({"train.gradient_checkpointing": True})
    have = available_settings(cfg)
    for key, value in SAVER_VALUES.items():
        if key == "model.base_quantization" and (not cfg.train.lora.enabled or launch.strategy == "fsdp"):
            continue  # full fine-tuning trains the base; FSDP2 cannot shard a quantized one
        if key in have and have[key] != value:
            options.append({key: value})
    return options


def verdict(
    cfg: Config,
    gpu_memory_gib: float = DEFAULT_GPU_MEMORY_GIB,
    world_size: int | None = None,
    strategy: str | None = None,
    device: str = "cuda",
    flops: float | None = None,
) -> Verdict:
    """The estimate of ``cfg`` under its declared launch (or the one given), whether it fits, and what would."""
    launch = declared_launch(cfg, world_size, strategy)
    m = model_size(cfg)
    est = estimate(cfg, launch.gpus, device, flops, launch.strategy, launch.sequence_parallel, model=m)
    usable = gpu_memory_gib * HEADROOM
    out = Verdict(est, launch, gpu_memory_gib, est.peak_gib <= usable)
    out.not_available = [key for key in SAVERS if key not in available_settings(cfg)]
    if out.fits:
        return out
    tried = []
    for settings in _options(cfg, m, launch):
        peak = _peak(cfg, m, launch, settings, device)
        if peak is None:
            continue
        tried.append((settings, peak))
    # more GPUs: only the fewest that fit
    gpus_fit = [(s, p) for s, p in tried if "launch.gpus" in s and p <= usable]
    out.alternatives = [(s, p) for s, p in tried if p <= usable and "launch.gpus" not in s]
    if gpus_fit:
        out.alternatives.insert(0, min(gpus_fit, key=lambda sp: sp[0]["launch.gpus"]))
    if not out.alternatives:  # together, largest saving first, at the declared GPUs
        combined: dict = {}
        for settings, _ in sorted(tried, key=lambda sp: sp[1]):
            if "launch.gpus" in settings:
                continue
            combined.update(settings)
            peak = _peak(cfg, m, launch, combined, device)
            if peak is not None and peak <= usable:
                out.combined = (dict(combined), peak)
                break
    return out


def _settings_text(settings: dict) -> str:
    def value(v):
        return str(v).lower() if isinstance(v, bool) else str(v)

    return " ".join(f"{k}={value(v)}" for k, v in settings.items())


def verdict_line(v: Verdict) -> str:
    """One line: fits or not on the card, and if not, the settings that would fit with their peaks."""
    est = v.estimate
    head = (
        f"{est.peak_gib:,.1f} GiB a process on {v.launch.describe(est.device)}, against {v.usable_gib:,.1f} usable of "
        f"{v.gpu_memory_gib:g} GiB (95 %)"
    )
    if v.fits:
        return f"verdict: fits: {head}"
    if v.alternatives:
        fixes = "; ".join(f"{_settings_text(s)} ({p:,.1f} GiB)" for s, p in v.alternatives)
        return f"verdict: does not fit: {head}; would fit: {fixes}"
    if v.combined:
        s, p = v.combined
        return f"verdict: does not fit: {head}; no one setting fits, together: {_settings_text(s)} ({p:,.1f} GiB)"
    return f"verdict: does not fit: {head}; no setting tried fits (lower sample.batch_size, or a larger card)"


def verdict_json(v: Verdict, recipe: str | None = None) -> dict:
    """One JSON-ready object: the estimate, the launch, the card and the verdict."""
    est = v.estimate
    return {
        "recipe": recipe,
        "peak_gib": round(est.peak_gib, 3),
        "seconds_per_iteration": round(est.seconds_per_iteration, 3),
        "world_size": est.world_size,
        "strategy": est.strategy,
        "sequence_parallel": est.sequence_parallel,
        "gpu_memory_gib": v.gpu_memory_gib,
        "usable_gib": round(v.usable_gib, 3),
        "fits": v.fits,
        "device": est.device,
        "samples_per_process": est.samples_per_process,
        "memory_gib": {k: round(x, 4) for k, x in est.memory_gib.items()},
        "time_s": {k: round(x, 4) for k, x in est.time_s.items()},
        "flops_per_s": est.flops_per_s,
        "would_fit": [{"settings": s, "peak_gib": round(p, 3)} for s, p in v.alternatives],
        "together": {"settings": v.combined[0], "peak_gib": round(v.combined[1], 3)} if v.combined else None,
        "not_modelled": v.not_available,
        "notes": est.notes,
    }
