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
from pathlib import Path
from typing import Any

from flowrl.benchmarks.toy import command

DEFAULT_RECIPE = "toy-av-flow-grpo"
COMPARED = ("toy-av-flow-grpo", "toy-av-av-grpo")
COLUMNS = (("video_acc", "video"), ("audio_acc", "audio"), ("sync_acc", "sync"), ("all_acc", "all"))


def add_command(subparsers: Any) -> None:
    """Register ``toy-av`` on the subparsers of ``flowrl eval`` (sets ``fn``)."""
    p, what = command.add_parser(subparsers, "toy-av", "toy audio-video (tiny LTX-2) on a CPU: pretrain, train, "
                                 "evaluate", __doc__, DEFAULT_RECIPE)  # fmt: skip
    what.add_argument("--compare", action="store_true", help=f"train and compare {' and '.join(COMPARED)}")
    p.add_argument("--clips-per-prompt", type=int, default=8, help="held-out clips per prompt (default 8)")
    p.add_argument("--steps", type=int, default=None, help="ODE steps (default: the recipe's eval_num_steps)")
    command.add_output_options(p, "write toy_av_eval.json (and per-clip results) here")
    p.set_defaults(fn=cmd_toy_av)


def cmd_toy_av(args: argparse.Namespace) -> int:
    command.check_args(args, "--clips-per-prompt", "toy_av_eval.json")
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


_say = command.say


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
    from flowrl.pipelines.base import adapter_class

    from . import evaluate as ev

    cfg = command.read_run_config(run)
    _check_model_path(cfg.model.path)
    steps = args.steps or cfg.sample.eval_num_steps
    guidance = cfg.sample.eval_guidance_scale
    rows = ev.heldout_rows(args.clips_per_prompt)
    adapter = adapter_class(cfg.model.pipeline).from_config(cfg.model, seed=cfg.seed)
    key = (cfg.model.path, steps, guidance, len(rows), args.seed)
    base_results, base, trained_results, trained = command.base_and_trained(
        ev, adapter, run, rows, steps, guidance, args.seed, key, base_cache, f"clips ({steps} steps)"
    )
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

    from .pretrain import cache_root

    overrides = list(args.overrides)
    cfg = resolve_config(recipe, overrides)
    default = cache_root() / "default"
    if Path(cfg.model.path).expanduser() in (default, Path("~/.cache/flowrl/toy_av/default").expanduser()):
        folder = ensure_model(args=args)
        cfg = resolve_config(recipe, [*overrides, f"model.path={folder}"])
    _check_model_path(cfg.model.path)
    train_s = command.train(cfg, recipe)
    report = _evaluate_run(args, Path(cfg.output_dir), base_cache)
    report.update(recipe=recipe, train_s=round(train_s, 1))
    return report


def _write(args: argparse.Namespace, report: dict[str, Any], results: dict[str, list[dict]]) -> None:
    command.write(args, "toy_av_eval.json", report, results)


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
    return command.main(add_command, "toy-av", "python -m flowrl.benchmarks.toy_av", argv)
