"""``flowrl eval toy``: the toy GenEval benchmark from the shell (also ``python -m flowrl.benchmarks.toy``).

    flowrl eval toy [RECIPE] [key=value ...]   pretrain if needed, train RECIPE (default toy-flow-grpo),
                                               report base and trained held-out accuracy
    flowrl eval toy --pretrain [--force]       only create (or reuse) the cached base model
    flowrl eval toy --run RUN_DIR              base and trained accuracy of a finished run
    flowrl eval toy --model FOLDER             accuracy of one pipeline folder

Accuracy is GenEval's overall score (mean of the six task accuracies) on held-out prompts,
``--images-per-task`` images per task, sampled with the recipe's (or run's) evaluation steps and guidance
from the same initial noise for base and trained models.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from . import command

DEFAULT_RECIPE = "toy-flow-grpo"


def add_command(subparsers: Any) -> None:
    """Register ``toy`` on the subparsers of ``flowrl eval`` (sets ``fn``)."""
    p, _ = command.add_parser(subparsers, "toy", "toy GenEval on a CPU: pretrain, train, evaluate", __doc__,
                              DEFAULT_RECIPE)  # fmt: skip
    p.add_argument("--images-per-task", type=int, default=32, help="held-out images per task (default 32)")
    p.add_argument("--steps", type=int, default=None, help="ODE steps (default: the recipe's eval_num_steps)")
    p.add_argument("--guidance", type=float, default=None, help="CFG (default: the recipe's eval guidance)")
    command.add_output_options(p, "write toy_eval.json (and results) here")
    p.set_defaults(fn=cmd_toy)


def cmd_toy(args: argparse.Namespace) -> int:
    command.check_args(args, "--images-per-task", "toy_eval.json")
    import torch

    torch.set_num_threads(args.threads)
    if args.pretrain:
        return _pretrain(args)
    if args.model:
        return _evaluate_model(args)
    if args.run:
        _print_report(args, _evaluate_run(args, Path(args.run)))
        return 0
    return _train(args)


# ------------------------------------------------------------------------------------------ actions
_say = command.say


def _pretrain(args: argparse.Namespace) -> int:
    from . import pretrain as pt

    cfg = pt.ToyModelConfig()
    folder = ensure_model(cfg, force=args.force, args=args)
    info = pt.read_info(folder)
    base = info.get("base", {})
    _say(
        f"toy model: {folder}\npretraining {info.get('pretrain_s', float('nan')):.0f} s; base held-out accuracy "
        f"{base.get('accuracy', float('nan')):.3f} (partial credit {base.get('partial', float('nan')):.3f}, "
        f"{base.get('images', 0)} images)"
    )
    return 0


def ensure_model(cfg=None, force: bool = False, args: argparse.Namespace | None = None) -> Path:
    """The cached default toy model, pretrained (and its base accuracy measured) if missing."""
    from . import evaluate as ev
    from . import pretrain as pt
    from .sft_data import ensure_sft_renders

    cfg = cfg or pt.ToyModelConfig()
    folder = pt.cached_model(cfg)
    if folder is not None and not force:
        _say(f"reusing the cached toy model {folder}")
        pt.link_default(folder)
        ensure_sft_renders()  # toy-sft's images (made once; older caches lack them)
        return folder
    per_task = args.images_per_task if args is not None else 32
    steps = args.steps if args is not None and args.steps else ev.DEFAULT_EVAL_STEPS
    guidance = args.guidance if args is not None and args.guidance is not None else ev.DEFAULT_EVAL_GUIDANCE

    def base_eval(pipe) -> dict:
        adapter = ev.adapter_for(pipe, cfg.text_tokens)
        _, _, summary = ev.evaluate_adapter(adapter, ev.heldout_rows(per_task), steps, guidance)
        return {**ev.brief(summary), "steps": steps, "guidance": guidance}

    folder = pt.pretrain(cfg, force=force, evaluate_fn=base_eval, progress=_say)
    pt.link_default(folder)
    ensure_sft_renders()
    return folder


def _settings(args: argparse.Namespace, cfg) -> tuple[int, float]:
    steps = args.steps or cfg.sample.eval_num_steps
    guidance = args.guidance if args.guidance is not None else cfg.sample.eval_guidance_scale
    return steps, guidance


def _evaluate_model(args: argparse.Namespace) -> int:
    from . import evaluate as ev
    from .pretrain import load_pipeline, read_info

    folder = Path(args.model).expanduser()
    pipe = load_pipeline(folder)
    info = read_info(folder)
    steps = args.steps or ev.DEFAULT_EVAL_STEPS
    guidance = args.guidance if args.guidance is not None else ev.DEFAULT_EVAL_GUIDANCE
    text_tokens = info.get("config", {}).get("text_tokens", pipe.tokenizer.model_max_length)
    adapter = ev.adapter_for(pipe, text_tokens)
    _, results, summary = ev.evaluate_adapter(
        adapter, ev.heldout_rows(args.images_per_task), steps, guidance, args.seed
    )
    report = {"model": str(folder), "steps": steps, "guidance": guidance, "base": ev.brief(summary)}
    _write(args, report, {"base": results})
    _print_report(args, report)
    return 0


def _evaluate_run(args: argparse.Namespace, run: Path, base_cache: dict | None = None) -> dict[str, Any]:
    """Base and trained accuracy of a run folder (its config.yaml and exported weights).

    ``base_cache``: base evaluations by (model, steps, guidance, images, seed), shared by runs of one
    base model (``compare`` evaluates the base once, not once per method)."""
    from flowrl.pipelines.base import adapter_class
    from flowrl.resolve import resolve

    from . import evaluate as ev

    cfg = resolve(command.read_run_config(run))
    _check_model_path(cfg.model.path)
    steps, guidance = _settings(args, cfg)
    rows = ev.heldout_rows(args.images_per_task)
    adapter = adapter_class(cfg.model.pipeline).from_config(cfg.model, seed=cfg.seed)
    key = (cfg.model.path, steps, guidance, len(rows), args.seed)
    base_says = f"images ({steps} steps, guidance {guidance:g})"
    base_results, base, trained_results, trained = command.base_and_trained(
        ev, adapter, run, rows, steps, guidance, args.seed, key, base_cache, base_says
    )
    report = {
        "run": str(run), "model": cfg.model.path, "steps": steps, "guidance": guidance,
        "base": ev.brief(base), "trained": ev.brief(trained),
        "gain": round(trained["overall"] - base["overall"], 4),
    }  # fmt: skip
    _write(args, report, {"base": base_results, "trained": trained_results})
    return report


def _check_model_path(path: str) -> None:
    from .pretrain import cache_root

    if path.startswith(("~", "/", ".")) and not Path(path).expanduser().exists():
        hint = (
            " (create it with `flowrl eval toy --pretrain`)"
            if "flowrl/toy" in path or str(cache_root()) in path
            else ""
        )
        raise FileNotFoundError(f"model.path={path!r}: no such folder{hint}")


def _train(args: argparse.Namespace) -> int:
    from flowrl.resolve import resolve_config

    from .pretrain import DEFAULT_LINK, cache_root

    recipe = args.recipe or DEFAULT_RECIPE
    overrides = list(args.overrides)
    cfg = resolve_config(recipe, overrides)
    default = cache_root() / DEFAULT_LINK
    if Path(cfg.model.path).expanduser() in (default, Path("~/.cache/flowrl/toy") / DEFAULT_LINK):
        folder = ensure_model(args=args)
        cfg = resolve_config(recipe, [*overrides, f"model.path={folder}"])
    _check_model_path(cfg.model.path)
    train_s = command.train(cfg, recipe)
    report = _evaluate_run(args, Path(cfg.output_dir))
    report["train_s"] = round(train_s, 1)
    _print_report(args, report)
    return 0


# ------------------------------------------------------------------------------------------ output


def _write(args: argparse.Namespace, report: dict[str, Any], results: dict[str, list[dict]]) -> None:
    command.write(args, "toy_eval.json", report, results)


def _print_report(args: argparse.Namespace, report: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(report, indent=2))
        return
    columns = [k for k in ("base", "trained") if k in report]
    tasks = list(report[columns[0]]["tasks"])
    lines = ["| task | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for tag in tasks:
        lines.append(f"| {tag} | " + " | ".join(f"{report[c]['tasks'][tag]:.3f}" for c in columns) + " |")
    lines.append("| **overall** | " + " | ".join(f"**{report[c]['accuracy']:.3f}**" for c in columns) + " |")
    lines.append("| partial credit | " + " | ".join(f"{report[c]['partial']:.3f}" for c in columns) + " |")
    print("\n".join(lines))
    n = report[columns[0]]["images"]
    tail = f"; held-out accuracy gain {report['gain']:+.3f}" if "gain" in report else ""
    took = f"; training {report['train_s']:.0f} s" if "train_s" in report else ""
    print(f"{n} held-out images, {report['steps']} steps, guidance {report['guidance']:g}{tail}{took}")


def main(argv: list[str] | None = None) -> int:
    return command.main(add_command, "toy", "python -m flowrl.benchmarks.toy", argv)
