"""``flowrl eval checkpoint``: re-score a checkpoint beside its base model in one command.

    flowrl eval checkpoint --base HUB_ID_OR_FOLDER_OR_RECIPE [--lora PATH | --run RUN_OR_CHECKPOINT [--ema]]
                           --benchmarks geneval,ocr,drawbench[,geneval2,dpg] --out DIR [--preset diffusion_nft]
                           [--prompts NAME=PATH] [--option NAME.key=value] [--metrics a,b] [--limit N]
                           [--images-per-prompt N] [--steps N] [--guidance W] [--seed 42] [--batch-size N]
                           [key=value ...]

Runs under ``accelerate launch`` too (each process draws its share; the main process scores and writes).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def _pairs(values: list[str], flag: str) -> dict[str, str]:
    out = {}
    for text in values:
        name, sep, value = text.partition("=")
        if not sep or not name or not value:
            raise ValueError(f"{flag} {text!r}: expected NAME=VALUE")
        out[name] = value
    return out


def parse_options(values: list[str]) -> dict[str, dict[str, Any]]:
    """``NAME.key=value`` (``pickscore.model=DIR``, ``geneval2.base_url=URL``) -> {NAME: {key: value}}; values
    are read as YAML (numbers, true/false, {a: 1} mappings)."""
    import yaml

    out: dict[str, dict[str, Any]] = {}
    for text in values:
        key, sep, value = text.partition("=")
        name, dot, field = key.partition(".")
        if not sep or not dot or not name or not field:
            raise ValueError(f"--option {text!r}: expected NAME.key=value (e.g. pickscore.model=/path/to/model)")
        try:
            parsed = yaml.safe_load(value) if value else ""
        except yaml.YAMLError:
            parsed = value
        out.setdefault(name, {})[field] = parsed
    return out


def request_of(args: argparse.Namespace) -> Any:
    from .evaluate import Request
    from .protocols import PRESETS
    from .suites import SUITES

    if args.lora and args.run:
        raise ValueError("give --lora or --run, not both")
    if not args.lora and not args.run:
        raise ValueError("give the checkpoint: --lora PATH (a LoRA file or folder) or --run RUN_OR_CHECKPOINT")
    if args.ema and not args.run:
        raise ValueError("--ema applies to --run (a flowrl checkpoint's EMA weights)")
    for flag, value in (("--limit", args.limit), ("--images-per-prompt", args.images_per_prompt)):
        if value is not None and value < 1:
            raise ValueError(f"{flag}: must be at least 1, got {value}")
    benchmarks = [b.strip() for b in args.benchmarks.split(",") if b.strip()]
    if not benchmarks:
        raise ValueError("--benchmarks: name at least one of " + ", ".join(SUITES))
    for name in benchmarks:
        if name not in SUITES:
            raise ValueError(f"--benchmarks: unknown benchmark {name!r}; choose from {', '.join(SUITES)}")
    presets = _pairs([p for p in args.preset if "=" in p], "--preset")
    plain = [p for p in args.preset if "=" not in p]
    preset = plain[-1] if plain else "diffusion_nft"
    if preset not in PRESETS:
        raise ValueError(f"--preset {preset!r}: choose one of {', '.join(PRESETS)} (or NAME=PRESET per benchmark)")
    return Request(
        out=Path(args.out),
        benchmarks=benchmarks,
        base=args.base,
        lora=args.lora,
        run=args.run,
        ema=args.ema,
        preset=preset,
        presets=presets,
        prompts=_pairs(args.prompts, "--prompts"),
        options=parse_options(args.option),
        metrics=[m.strip() for m in args.metrics.split(",")] if args.metrics else None,
        limit=args.limit,
        images_per_prompt=args.images_per_prompt,
        steps=args.steps,
        guidance=args.guidance,
        seed=args.seed,
        batch_size=args.batch_size,
        overrides=list(args.overrides),
    )


def cmd_checkpoint(args: argparse.Namespace) -> int:
    from .evaluate import RESULTS_MD, evaluate_checkpoint

    req = request_of(args)
    if req.out.exists() and not req.out.is_dir():
        raise ValueError(f"--out: {str(req.out)!r} is a file; expected a folder")
    results = evaluate_checkpoint(req)
    if results is not None:
        print((req.out / RESULTS_MD).read_text(encoding="utf-8"), end="")
        print(f"wrote {req.out / 'results.md'}, {req.out / 'results.json'} and {req.out / 'report.html'}")
    return 0


def add_command(sub: Any) -> None:
    """Register ``checkpoint`` under ``flowrl eval``."""
    from .protocols import DEFAULT_PRESET, PRESETS
    from .suites import SUITES

    p = sub.add_parser(
        "checkpoint",
        help="re-score a checkpoint (any LoRA format, or a flowrl run) beside its base on several benchmarks",
        description="Draw and score a base model and a checkpoint (a flow_grpo / DiffusionNFT PEFT folder, a "
        "Flow-Factory export, a diffusers pytorch_lora_weights.safetensors, or a flowrl run or checkpoint) on "
        "the same prompts and seeds; write a Markdown table (base | checkpoint | delta) and an HTML page. "
        "Resumable: images already drawn are kept.",
    )
    p.add_argument("--base", default=None, help="hub id, diffusers folder, recipe, or run folder (default: --run's)")
    w = p.add_mutually_exclusive_group()
    w.add_argument("--lora", default=None, help="a LoRA file or folder (format detected)")
    w.add_argument("--run", default=None, help="a flowrl run folder (its export) or RUN/checkpoints/iter-N")
    p.add_argument("--ema", action="store_true", help="with a --run checkpoint: its EMA weights")
    p.add_argument(
        "--benchmarks", required=True, help=f"comma-separated: {', '.join(SUITES)} (geneval2, dpg: when installed)"
    )
    p.add_argument("--out", required=True, help="output folder (images, scores, results.md, report.html)")
    p.add_argument(
        "--preset",
        action="append",
        default=[],
        help=f"protocol: {' | '.join(PRESETS)} (default {DEFAULT_PRESET}); NAME=PRESET for one benchmark "
        "(geneval2=unirl)",
    )
    p.add_argument(
        "--prompts", action="append", default=[], metavar="NAME=PATH",
        help="a benchmark's prompt file or checkout (drawbench=~/DiffusionNFT/dataset/drawbench/test.txt)",
    )  # fmt: skip
    p.add_argument(
        "--option", action="append", default=[], metavar="NAME.key=value",
        help="a scorer's or benchmark's option (pickscore.model=DIR, unifiedreward.base_url=URL, "
        "geneval.detector=DIR, geneval2.base_url=URL)",
    )  # fmt: skip
    p.add_argument("--metrics", default=None, help="only these reward columns (e.g. pickscore,clipscore)")
    p.add_argument("--limit", type=int, default=None, help="only the first N prompts of each benchmark (smoke runs)")
    p.add_argument("--images-per-prompt", type=int, default=None, help="default: the protocol's")
    p.add_argument("--steps", type=int, default=None, help="default: the protocol's")
    p.add_argument("--guidance", type=float, default=None, help="default: the protocol's")
    p.add_argument(
        "--seed", type=int, default=None,
        help="image k of prompt i uses seed + i * n + k (default: the benchmark protocol's, else 42)",
    )  # fmt: skip
    p.add_argument("--batch-size", type=int, default=None, help="images per pipeline call per process")
    p.add_argument("overrides", nargs="*", help="key=value config overrides (model.dtype=bf16, model.resolution=...)")
    p.set_defaults(fn=cmd_checkpoint)
