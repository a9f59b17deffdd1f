"""The GPU script's runner: its arguments, the stages it runs in order, and the Markdown tables of their rows."""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from flowrl.benchmarks.perf.gpu import __doc__ as DOC
from flowrl.benchmarks.perf.gpu.attention import ATTENTION_BACKENDS, bench_attention
from flowrl.benchmarks.perf.gpu.common import FULL, GIB, SMOKE, Clock, Scale
from flowrl.benchmarks.perf.gpu.families import bench_family
from flowrl.benchmarks.perf.gpu.methods import bench_methods
from flowrl.benchmarks.perf.gpu.sd35m import bench_sd35m
from flowrl.benchmarks.perf.gpu.wan import bench_wan


@dataclass(frozen=True)
class Run:
    """What every stage is called with: the parsed arguments, the sizes, the device and the time budget."""

    args: argparse.Namespace
    scale: Scale
    device: torch.device
    clock: Clock

    def precision(self, gpu_default: str) -> str:
        """--precision, where auto means ``gpu_default`` on a GPU and fp32 on a CPU."""
        if self.args.precision != "auto":
            return self.args.precision
        return gpu_default if self.device.type == "cuda" else "fp32"


def _sd35m(r: Run) -> list[dict]:
    return bench_sd35m(r.scale, r.device, r.args.iterations, r.clock, r.precision("fp16"), r.args.overhead_repeats)


def _methods(r: Run) -> list[dict]:
    return bench_methods(r.scale, r.device, r.clock, r.precision("fp16"))


def _attention(r: Run) -> list[dict]:
    backends = r.args.attention_backends.split(",") if r.args.attention_backends else None
    return bench_attention(r.scale, r.device, r.clock, r.precision("fp16"), backends, smoke=r.args.smoke)


def _wan(r: Run) -> list[dict]:  # the transformer alone, then an iteration
    precision = r.precision("bf16")
    rows = bench_wan(r.scale, r.device, r.args.repeats, r.clock, precision)
    return rows + bench_family("wan", r.scale, r.device, r.args.iterations, r.clock, precision)


def _family(name: str) -> Callable[[Run], list[dict]]:
    return lambda r: bench_family(name, r.scale, r.device, r.args.iterations, r.clock, r.precision("bf16"))


# --what name -> its stage, in the order they run (SD3.5-M in fp16 as its recipe, the other families in bf16)
STAGES: dict[str, Callable[[Run], list[dict]]] = {
    "sd35m": _sd35m,
    "methods": _methods,
    "attention": _attention,
    "wan": _wan,
    "flux": _family("flux"),
    "audio": _family("stable_audio"),
    "ltx2": _family("ltx2"),
}


def markdown(rows: list[dict]) -> str:
    def num(v: float, digits: int = 2) -> str:
        return "-" if math.isnan(v) else ("OOM" if math.isinf(v) else f"{v:.{digits}f}")

    lines = [
        "| model | setting | s | images/s | peak GiB | estimate s | estimate peak GiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "ratio" in r or "nfe" in r or "vs_today" in r:
            continue
        lines.append(
            f"| {r['model']} | {r['setting']} | {num(r['seconds'], 3)} | {num(r['images_per_s'])} | "
            f"{num(r['peak_gib'])} | {num(r['est_seconds'])} | {num(r['est_peak_gib'])} |"
        )
    ratios = [r for r in rows if "ratio" in r]
    if ratios:
        lines += ["", "| side by side | flowrl s | bare s | flowrl / bare |", "|---|---|---|---|"]
        lines += [
            f"| {r['model']}: {r['setting']} | {num(r['seconds'], 3)} | {num(r['bare_seconds'], 3)} | "
            f"{num(r['ratio'], 3)} |"
            for r in ratios
        ]
    methods = [r for r in rows if "nfe" in r]
    if methods:
        lines += [
            "",
            "| method iteration | setting | s | vs flow_grpo | NFE | NFE/s | reward calls | peak GiB |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['model']} | {r['setting']} | {num(r['seconds'], 3)} | {num(r.get('vs_flow_grpo', math.nan))} | "
            f"{r['nfe']:.0f} | {num(r['nfe_per_s'], 0)} | {r['reward_calls']:.0f} | {num(r['peak_gib'])} |"
            for r in methods
        ]
    attention = [r for r in rows if "vs_today" in r]
    if attention:
        header = (
            "| attention / compile | setting | s | vs today | first iteration s | on-policy log-prob gap | "
            "peak GiB | 0.8 x today, check passing |"
        )
        lines += ["", header, "|---|---|---|---|---|---|---|---|"]
        lines += [
            f"| {r['model']} | {r['setting']} | {num(r['seconds'], 3)} | {num(r['vs_today'], 3)} | "
            f"{num(r['first_seconds'])} | {r['onpolicy_logp_diff']:.3g} | {num(r['peak_gib'])} | "
            f"{'yes' if r['meets_target'] else 'no'} |"
            for r in attention
        ]
    return "\n".join(lines)


def environment(device: torch.device) -> str:
    import diffusers

    what = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    if device.type == "cuda":
        what += f", {torch.cuda.get_device_properties(device).total_memory / GIB:.0f} GiB"
    return f"{what}; torch {torch.__version__}, diffusers {diffusers.__version__}"


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(prog="python -m flowrl.benchmarks.perf.gpu", description=DOC.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="toy sizes, on a CPU in seconds (tests run this)")
    p.add_argument(
        "--what",
        default="sd35m,wan",
        help="comma-separated: sd35m, wan (the transformer alone, then an iteration), flux, audio, "
        "ltx2 (one AV-GRPO step), methods, attention",
    )
    p.add_argument(
        "--attention-backends",
        default=None,
        help=f"comma-separated, for --what attention (default: {','.join(ATTENTION_BACKENDS)})",
    )
    p.add_argument(
        "--iterations", type=int, default=2, help="flowrl iterations of SD3.5-M, Wan, FLUX and SA3 (the first warms up)"
    )
    p.add_argument("--repeats", type=int, default=3, help="timed Wan calls (median), after one warm-up")
    p.add_argument(
        "--overhead-repeats", type=int, default=3, help="side-by-side rollout and update timings of SD3.5-M (0: skip)"
    )
    p.add_argument(
        "--precision",
        choices=["auto", "fp32", "fp16", "bf16"],
        default="auto",
        help="model and autocast dtype (auto: on a GPU fp16 for SD3.5-M as its recipe, bf16 for Wan, FLUX and SA3; "
        "fp32 on a CPU)",
    )
    p.add_argument("--shallow-text-encoders", action="store_true", help="1-2 layer text encoders at real widths")
    p.add_argument("--max-seconds", type=float, default=270.0, help="skip stages that would run past this")
    p.add_argument("--json", default=None, help="also write the rows as JSON")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    scale = SMOKE if args.smoke else FULL
    if args.shallow_text_encoders and not args.smoke:
        scale = Scale(**{**scale.__dict__, "encoders": "shallow"})
    clock = Clock(args.max_seconds)
    clock.say(environment(device) + (" (smoke sizes)" if args.smoke else ""))
    if device.type != "cuda" and not args.smoke:
        clock.say("no GPU here: full sizes need one (use --smoke on a CPU)")
    rows: list[dict] = []
    what = args.what.split(",")
    unknown = set(what) - set(STAGES)
    if unknown:
        p.error(f"--what: unknown stage {sorted(unknown)[0]!r}; choose from {', '.join(STAGES)}")
    for name, stage in STAGES.items():  # in the table's order, whatever the order of --what
        if name in what:
            rows += stage(Run(args, scale, device, clock))
    print("\n" + markdown(rows) + "\n", flush=True)
    clock.say("done")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return rows
