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
import sys
from pathlib import Path
from typing import Any

DEFAULT_RECIPE = "toy-flow-grpo"


def add_command(subparsers: Any) -> None:
    """Register ``toy`` on the subparsers of ``flowrl eval`` (sets ``fn``)."""
    p = subparsers.add_parser(
        "toy", help="toy GenEval on a CPU: pretrain, train, evaluate",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("recipe", nargs="?", default=None, help=f"recipe to train with (default {DEFAULT_RECIPE})")
    p.add_argument("overrides", nargs="*", help="key=value overrides of the recipe")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--pretrain", action="store_true", help="only create (or reuse) the cached base model")
    what.add_argument("--run", default=None, metavar="RUN_DIR", help="evaluate a finished run (base and trained)")
    what.add_argument("--model", default=None, metavar="FOLDER", help="evaluate one pipeline folder")
    p.add_argument(
        "--force", action="store_true",
        help="with --pretrain: train again even if cached; with --out: replace the results there",
    )  # fmt: skip
    p.add_argument("--images-per-task", type=int, default=32, help="held-out images per task (default 32)")
    p.add_argument("--steps", type=int, default=None, help="ODE steps (default: the recipe's eval_num_steps)")
    p.add_argument("--guidance", type=float, default=None, help="CFG (default: the recipe's eval guidance)")
    p.add_argument("--seed", type=int, default=0, help="initial-noise seed of the evaluation")
    p.add_argument("--out", default=None, help="write toy_eval.json (and results) here")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--threads", type=int, default=1,
        help="torch CPU threads (default 1: on a shared machine two spinning threads are several times slower)",
    )  # fmt: skip
    p.set_defaults(fn=cmd_toy)


def cmd_toy(args: argparse.Namespace) -> int:
    if args.recipe and "=" in args.recipe:  # `flowrl eval toy key=value`: no recipe given
        args.overrides = [args.recipe, *args.overrides]
        args.recipe = None
    if args.images_per_task < 1:
        raise ValueError(f"--images-per-task: must be at least 1, got {args.images_per_task}")
    if args.threads < 1:
        raise ValueError(f"--threads: must be at least 1, got {args.threads}")
    import torch

    torch.set_num_threads(args.threads)
    if args.force and not (args.pretrain or args.out):
        raise ValueError("--force applies to --pretrain (train the cached model again) or --out (replace its results)")
    if args.out and not args.pretrain:
        from flowrl.commands import refuse_overwrite

        if Path(args.out).exists() and not Path(args.out).is_dir():
            raise ValueError(f"--out: {args.out!r} is a file; expected a folder")
        refuse_overwrite([Path(args.out) / "toy_eval.json"], "--out", args.force)
    if (args.pretrain or args.run or args.model) and (args.recipe or args.overrides):
        raise ValueError("a recipe and key=value overrides apply to training only (not --pretrain, --run or --model)")
    if args.pretrain:
        return _pretrain(args)
    if args.model:
        return _evaluate_model(args)
    if args.run:
        _print_report(args, _evaluate_run(args, Path(args.run)))
        return 0
    return _train(args)


# ------------------------------------------------------------------------------------------ actions


def _say(text: str) -> None:
    print(text, flush=True)


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
    import yaml

    from flowrl.config import config_from_dict
    from flowrl.pipelines.base import adapter_class
    from flowrl.resolve import resolve

    from . import evaluate as ev

    if not (run / "config.yaml").is_file():
        raise FileNotFoundError(f"--run {run}: no config.yaml (not a flowrl run folder)")
    data = yaml.safe_load((run / "config.yaml").read_text())
    data["resume"] = None
    cfg = resolve(config_from_dict(data))
    _check_model_path(cfg.model.path)
    steps, guidance = _settings(args, cfg)
    rows = ev.heldout_rows(args.images_per_task)
    adapter = adapter_class(cfg.model.pipeline).from_config(cfg.model, seed=cfg.seed)
    key = (cfg.model.path, steps, guidance, len(rows), args.seed)
    if base_cache is not None and key in base_cache:
        base_results, base = base_cache[key]
    else:
        _say(f"evaluating the base model on {len(rows)} held-out images ({steps} steps, guidance {guidance:g})")
        _, base_results, base = ev.evaluate_adapter(adapter, rows, steps, guidance, args.seed)
        if base_cache is not None:
            base_cache[key] = base_results, base
    loaded = adapter.load_trained(run)
    if loaded is None:
        raise FileNotFoundError(f"--run {run}: no trained weights (lora/ or transformer/) to evaluate")
    adapter.clear_cache()
    _say(f"evaluating the trained model ({loaded} from {run})")
    _, trained_results, trained = ev.evaluate_adapter(adapter, rows, steps, guidance, args.seed)
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
    import time

    from flowrl.resolve import resolve_config
    from flowrl.trainer import Trainer

    from .pretrain import DEFAULT_LINK, cache_root

    recipe = args.recipe or DEFAULT_RECIPE
    overrides = list(args.overrides)
    cfg = resolve_config(recipe, overrides)
    default = cache_root() / DEFAULT_LINK
    if Path(cfg.model.path).expanduser() in (default, Path("~/.cache/flowrl/toy") / DEFAULT_LINK):
        folder = ensure_model(args=args)
        cfg = resolve_config(recipe, [*overrides, f"model.path={folder}"])
    _check_model_path(cfg.model.path)
    _say(f"training {recipe} for {cfg.train.iterations} iterations into {cfg.output_dir}")
    start = time.perf_counter()
    Trainer(cfg).train()
    train_s = time.perf_counter() - start
    report = _evaluate_run(args, Path(cfg.output_dir))
    report["train_s"] = round(train_s, 1)
    _print_report(args, report)
    return 0


# ------------------------------------------------------------------------------------------ output


def _write(args: argparse.Namespace, report: dict[str, Any], results: dict[str, list[dict]]) -> None:
    if not args.out:
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "toy_eval.json").write_text(json.dumps(report, indent=2) + "\n")
    for name, rows in results.items():
        (out / f"results_{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


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
    parser = argparse.ArgumentParser(prog="python -m flowrl.benchmarks.toy")
    add_command(parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK"))
    args = parser.parse_args(["toy", *(sys.argv[1:] if argv is None else argv)])
    from flowrl.commands import error_line

    try:
        return args.fn(args)
    except (ValueError, RuntimeError, FileNotFoundError) as exc:
        print(error_line(exc), file=sys.stderr)
        return 2
