"""``flowrl eval toy-av``: the toy audio-video benchmark from the shell (also ``python -m flowrl.benchmarks.toy_av``).

    flowrl eval toy-av [RECIPE] [key=value ...]  pretrain if needed, train RECIPE (default toy-av-flow-grpo),
                                                 report base and trained held-out accuracies
    flowrl eval toy-av --compare [key=value ...] train toy-av-flow-grpo and toy-av-av-grpo on the same budget,
                                                 report both beside the base
    flowrl eval toy-av --pretrain [--force]      only create (or reuse) the cached base model
    flowrl eval toy-av --run RUN_DIR             base and trained accuracies of a finished run
    flowrl eval toy-av --model FOLDER            accuracies of one pipeline folder

Accuracies (held-out prompts, ``--clips-per-prompt`` clips each, the recipe's evaluation steps, the same initial
noise for every model): ``video`` (the flash's colour and slot right), ``audio`` (the beep's pitch and slot),
``sync`` (onsets at most one frame apart) and ``all`` (the three at once).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_RECIPE = "toy-av-flow-grpo"
COMPARED = ("toy-av-flow-grpo", "toy-av-av-grpo")
COLUMNS = (("video_acc", "video"), ("audio_acc", "audio"), ("sync_acc", "sync"), ("all_acc", "all"))


def add_command(subparsers: Any) -> None:
    """Register ``toy-av`` on the subparsers of ``flowrl eval`` (sets ``fn``)."""
    p = subparsers.add_parser(
        "toy-av", help="toy audio-video (tiny LTX-2) on a CPU: pretrain, train, evaluate",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("recipe", nargs="?", default=None, help=f"recipe to train with (default {DEFAULT_RECIPE})")
    p.add_argument("overrides", nargs="*", help="key=value overrides of the recipe(s)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--pretrain", action="store_true", help="only create (or reuse) the cached base model")
    what.add_argument("--compare", action="store_true", help=f"train and compare {' and '.join(COMPARED)}")
    what.add_argument("--run", default=None, metavar="RUN_DIR", help="evaluate a finished run (base and trained)")
    what.add_argument("--model", default=None, metavar="FOLDER", help="evaluate one pipeline folder")
    p.add_argument(
        "--force", action="store_true",
        help="with --pretrain: train again even if cached; with --out: replace the results there",
    )  # fmt: skip
    p.add_argument("--clips-per-prompt", type=int, default=8, help="held-out clips per prompt (default 8)")
    p.add_argument("--steps", type=int, default=None, help="ODE steps (default: the recipe's eval_num_steps)")
    p.add_argument("--seed", type=int, default=0, help="initial-noise seed of the evaluation")
    p.add_argument("--out", default=None, help="write toy_av_eval.json (and per-clip results) here")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.set_defaults(fn=cmd_toy_av)


def cmd_toy_av(args: argparse.Namespace) -> int:
    if args.recipe and "=" in args.recipe:  # `flowrl eval toy-av key=value`: no recipe given
        args.overrides = [args.recipe, *args.overrides]
        args.recipe = None
    if args.clips_per_prompt < 1:
        raise ValueError(f"--clips-per-prompt: must be at least 1, got {args.clips_per_prompt}")
    if args.threads < 1:
        raise ValueError(f"--threads: must be at least 1, got {args.threads}")
    if args.force and not (args.pretrain or args.out):
        raise ValueError("--force applies to --pretrain (train the cached model again) or --out (replace its results)")
    if args.out and not args.pretrain:
        from flowrl.commands import refuse_overwrite

        if Path(args.out).exists() and not Path(args.out).is_dir():
            raise ValueError(f"--out: {args.out!r} is a file; expected a folder")
        refuse_overwrite([Path(args.out) / "toy_av_eval.json"], "--out", args.force)
    if (args.pretrain or args.run or args.model) and (args.recipe or args.overrides):
        raise ValueError("a recipe and key=value overrides apply to training only (not --pretrain, --run or --model)")
    if args.compare and args.recipe:
        raise ValueError(f"--compare trains {' and '.join(COMPARED)}; it takes key=value overrides, not a recipe")
    import torch

    torch.set_num_threads(args.threads)
    if args.pretrain:
        folder = ensure_model(force=args.force, args=args)
        _print_report(args, {"model": str(folder), **_info_report(folder)})
        return 0
    if args.model:
        return _evaluate_model(args)
    if args.run:
        _print_report(args, _evaluate_run(args, Path(args.run)))
        return 0
    recipes = list(COMPARED) if args.compare else [args.recipe or DEFAULT_RECIPE]
    base_cache: dict = {}
    reports = [_train(args, recipe, base_cache) for recipe in recipes]
    report = reports[0] if len(reports) == 1 else {"runs": reports}
    _write(args, report, {})
    _print_report(args, report)
    return 0


def _say(text: str) -> None:
    print(text, flush=True)


def ensure_model(force: bool = False, args: argparse.Namespace | None = None) -> Path:
    """The cached default toy audio-video model, pretrained (and its base accuracies measured) if missing."""
    from flowrl.benchmarks.toy.pretrain import link_default

    from . import evaluate as ev
    from . import pretrain as pt

    cfg = pt.ToyAVConfig()
    folder = pt.cached_model(cfg)
    if folder is not None and not force:
        _say(f"reusing the cached toy audio-video model {folder}")
        link_default(folder)
        return folder
    clips = args.clips_per_prompt if args is not None else ev.DEFAULT_CLIPS_PER_PROMPT
    steps = args.steps if args is not None and args.steps else ev.DEFAULT_EVAL_STEPS

    def base_eval(adapter) -> dict:
        _, _, summary = ev.evaluate_adapter(adapter, ev.heldout_rows(clips), steps)
        return {**summary, "steps": steps}

    folder = pt.pretrain(cfg, force=force, evaluate_fn=base_eval, progress=_say)
    link_default(folder)
    return folder


def _info_report(folder: Path) -> dict[str, Any]:
    from .pretrain import read_info

    info = read_info(folder)
    return {k: info[k] for k in ("decoder_s", "transformer_s", "decoders_clean", "decoders_noisy", "base") if k in info}


def _evaluate_model(args: argparse.Namespace) -> int:
    from . import evaluate as ev
    from .pretrain import adapter_for, load_pipeline

    folder = Path(args.model).expanduser()
    adapter = adapter_for(load_pipeline(folder))
    steps = args.steps or ev.DEFAULT_EVAL_STEPS
    _, results, summary = ev.evaluate_adapter(adapter, ev.heldout_rows(args.clips_per_prompt), steps, 1.0, args.seed)
    report = {"model": str(folder), "steps": steps, "base": summary}
    _write(args, report, {"base": results})
    _print_report(args, report)
    return 0


def _evaluate_run(args: argparse.Namespace, run: Path, base_cache: dict | None = None) -> dict[str, Any]:
    """Base and trained accuracies of a run folder (its config.yaml and exported weights)."""
    import yaml

    from flowrl.config import config_from_dict
    from flowrl.pipelines.base import adapter_class

    from . import evaluate as ev

    if not (run / "config.yaml").is_file():
        raise FileNotFoundError(f"--run {run}: no config.yaml (not a flowrl run folder)")
    data = yaml.safe_load((run / "config.yaml").read_text())
    data["resume"] = None
    cfg = config_from_dict(data)
    _check_model_path(cfg.model.path)
    steps = args.steps or cfg.sample.eval_num_steps
    guidance = cfg.sample.eval_guidance_scale
    rows = ev.heldout_rows(args.clips_per_prompt)
    adapter = adapter_class(cfg.model.pipeline).from_config(cfg.model, seed=cfg.seed)
    key = (cfg.model.path, steps, guidance, len(rows), args.seed)
    if base_cache is not None and key in base_cache:
        base_results, base = base_cache[key]
    else:
        _say(f"evaluating the base model on {len(rows)} held-out clips ({steps} steps)")
        _, base_results, base = ev.evaluate_adapter(adapter, rows, steps, guidance, args.seed)
        if base_cache is not None:
            base_cache[key] = base_results, base
    loaded = adapter.load_trained(run)
    if loaded is None:
        raise FileNotFoundError(f"--run {run}: no trained weights (lora/ or transformer/) to evaluate")
    adapter.clear_cache()
    _say(f"evaluating the trained model ({loaded} from {run})")
    _, trained_results, trained = ev.evaluate_adapter(adapter, rows, steps, guidance, args.seed)
    report = {"run": str(run), "method": cfg.method.name, "iterations": cfg.train.iterations,
              "model": cfg.model.path, "steps": steps, "base": base, "trained": trained}  # fmt: skip
    _write(args, report, {"base": base_results, f"trained_{cfg.method.name}": trained_results})
    return report


def _check_model_path(path: str) -> None:
    if path.startswith(("~", "/", ".")) and not Path(path).expanduser().exists():
        hint = " (create it with `flowrl eval toy-av --pretrain`)" if "toy_av" in path else ""
        raise FileNotFoundError(f"model.path={path!r}: no such folder{hint}")


def _train(args: argparse.Namespace, recipe: str, base_cache: dict) -> dict[str, Any]:
    from flowrl.resolve import resolve_config
    from flowrl.trainer import Trainer

    from .pretrain import cache_root

    overrides = list(args.overrides)
    cfg = resolve_config(recipe, overrides)
    default = cache_root() / "default"
    if Path(cfg.model.path).expanduser() in (default, Path("~/.cache/flowrl/toy_av/default").expanduser()):
        folder = ensure_model(args=args)
        cfg = resolve_config(recipe, [*overrides, f"model.path={folder}"])
    _check_model_path(cfg.model.path)
    _say(f"training {recipe} for {cfg.train.iterations} iterations into {cfg.output_dir}")
    start = time.perf_counter()
    Trainer(cfg).train()
    train_s = time.perf_counter() - start
    report = _evaluate_run(args, Path(cfg.output_dir), base_cache)
    report.update(recipe=recipe, train_s=round(train_s, 1))
    return report


def _write(args: argparse.Namespace, report: dict[str, Any], results: dict[str, list[dict]]) -> None:
    if not args.out:
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "toy_av_eval.json").write_text(json.dumps(report, indent=2) + "\n")
    for name, rows in results.items():
        (out / f"results_{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _row(name: str, summary: dict[str, Any], extra: str = "") -> str:
    return f"| {name} | " + " | ".join(f"{summary[k]:.3f}" for k, _ in COLUMNS) + f" |{extra}"


def _print_report(args: argparse.Namespace, report: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(report, indent=2))
        return
    runs = report.get("runs", [report])
    head = "| model | " + " | ".join(label for _, label in COLUMNS) + " | training |"
    lines = [head, "|---|" + "---:|" * (len(COLUMNS) + 1)]
    if "base" in runs[0]:
        lines.append(_row("base", runs[0]["base"], " |"))
    for run in runs:
        if "trained" in run:
            took = f" {run['train_s']:.0f} s |" if "train_s" in run else " |"
            lines.append(_row(f"{run['method']}, {run['iterations']} it", run["trained"], took))
    print("\n".join(lines))
    if "decoders_clean" in report:
        print(
            f"decoders on clean codes: {report['decoders_clean']}\ndecoders on noisy codes: {report['decoders_noisy']}"
        )
    base = runs[0].get("base", {})
    if base.get("n"):
        print(f"{base['n']} held-out clips, {runs[0].get('steps', base.get('steps'))} ODE steps")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flowrl.benchmarks.toy_av")
    add_command(parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK"))
    args = parser.parse_args(["toy-av", *(sys.argv[1:] if argv is None else argv)])
    from flowrl.commands import error_line

    try:
        return args.fn(args)
    except (ValueError, RuntimeError, FileNotFoundError) as exc:
        print(error_line(exc), file=sys.stderr)
        return 2
