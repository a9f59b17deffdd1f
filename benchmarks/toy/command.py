"""What the toy benchmarks' command lines (``flowrl eval toy``, ``flowrl eval toy-av``) do alike: their common
options, the checks of them, a training run timed, a run folder's base and trained evaluations, the results
written, and the entry point; each command keeps its own model, measures and report."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def say(text: str) -> None:
    print(text, flush=True)


def add_parser(subparsers: Any, name: str, help: str, description: str, default_recipe: str):
    """The ``name`` parser with the options both toy commands take before their own: the recipe and its
    overrides, one action of ``--pretrain``, ``--run``, ``--model`` (the returned group, which a command may add
    to) and ``--force``. Returns (parser, group)."""
    p = subparsers.add_parser(
        name, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("recipe", nargs="?", default=None, help=f"recipe to train with (default {default_recipe})")
    p.add_argument("overrides", nargs="*", help="key=value overrides of the recipe(s)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--pretrain", action="store_true", help="only create (or reuse) the cached base model")
    what.add_argument("--run", default=None, metavar="RUN_DIR", help="evaluate a finished run (base and trained)")
    what.add_argument("--model", default=None, metavar="FOLDER", help="evaluate one pipeline folder")
    p.add_argument(
        "--force", action="store_true",
        help="with --pretrain: train again even if cached; with --out: replace the results there",
    )  # fmt: skip
    return p, what


def add_output_options(p: argparse.ArgumentParser, out_help: str) -> None:
    """The options both toy commands end with: ``--seed``, ``--out``, ``--json``, ``--threads``."""
    p.add_argument("--seed", type=int, default=0, help="initial-noise seed of the evaluation")
    p.add_argument("--out", default=None, help=out_help)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--threads", type=int, default=1,
        help="torch CPU threads (default 1: on a shared machine two spinning threads are several times slower)",
    )  # fmt: skip


def check_args(args: argparse.Namespace, count: str, report_name: str) -> None:
    """The checks both toy commands make: a ``key=value`` in the recipe's place is an override, ``count`` (the
    option of held-out samples) and ``--threads`` at least 1, ``--force`` with something to replace, ``--out``
    a folder without ``report_name`` (unless ``--force``), a recipe or overrides only for training."""
    if args.recipe and "=" in args.recipe:  # `flowrl eval toy key=value`: no recipe given
        args.overrides = [args.recipe, *args.overrides]
        args.recipe = None
    for option, value in ((count, getattr(args, count.lstrip("-").replace("-", "_"))), ("--threads", args.threads)):
        if value < 1:
            raise ValueError(f"{option}: must be at least 1, got {value}")
    if args.force and not (args.pretrain or args.out):
        raise ValueError("--force applies to --pretrain (train the cached model again) or --out (replace its results)")
    if args.out and not args.pretrain:
        from flowrl.commands import refuse_overwrite

        if Path(args.out).exists() and not Path(args.out).is_dir():
            raise ValueError(f"--out: {args.out!r} is a file; expected a folder")
        refuse_overwrite([Path(args.out) / report_name], "--out", args.force)
    if (args.pretrain or args.run or args.model) and (args.recipe or args.overrides):
        raise ValueError("a recipe and key=value overrides apply to training only (not --pretrain, --run or --model)")


def read_run_config(run: Path):
    """The ``Config`` of a run folder's config.yaml (not resumed); one line if it is not a flowrl run folder."""
    import yaml

    from flowrl.config import config_from_dict

    if not (run / "config.yaml").is_file():
        raise FileNotFoundError(f"--run {run}: no config.yaml (not a flowrl run folder)")
    data = yaml.safe_load((run / "config.yaml").read_text())
    data["resume"] = None
    return config_from_dict(data)


def base_and_trained(ev, adapter, run: Path, rows: list, steps: int, guidance: float, seed: int, key: tuple,
                     base_cache: dict | None, base_says: str) -> tuple[list, Any, list, Any]:  # fmt: skip
    """``ev.evaluate_adapter`` of ``rows`` by the base model, then by the run's trained weights loaded into the
    same adapter: (base results, base summary, trained results, trained summary). ``base_cache``: base
    evaluations by ``key`` (model, steps, guidance, rows, seed), shared by runs of one base model;
    ``base_says``: what the line announcing the base's evaluation names after the rows' count."""
    if base_cache is not None and key in base_cache:
        base_results, base = base_cache[key]
    else:
        say(f"evaluating the base model on {len(rows)} held-out {base_says}")
        _, base_results, base = ev.evaluate_adapter(adapter, rows, steps, guidance, seed)
        if base_cache is not None:
            base_cache[key] = base_results, base
    loaded = adapter.load_trained(run)
    if loaded is None:
        raise FileNotFoundError(f"--run {run}: no trained weights (lora/ or transformer/) to evaluate")
    adapter.clear_cache()
    say(f"evaluating the trained model ({loaded} from {run})")
    _, trained_results, trained = ev.evaluate_adapter(adapter, rows, steps, guidance, seed)
    return base_results, base, trained_results, trained


def train(cfg, recipe: str) -> float:
    """Train ``cfg`` (of ``recipe``) to the end; returns the seconds it took."""
    from flowrl.trainer import Trainer

    say(f"training {recipe} for {cfg.train.iterations} iterations into {cfg.output_dir}")
    start = time.perf_counter()
    Trainer(cfg).train()
    return time.perf_counter() - start


def write(args: argparse.Namespace, report_name: str, report: dict[str, Any], results: dict[str, list[dict]]) -> None:
    """With ``--out``: ``report_name`` (the report) and a ``results_<name>.jsonl`` of each of ``results``."""
    if not args.out:
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / report_name).write_text(json.dumps(report, indent=2) + "\n")
    for name, rows in results.items():
        (out / f"results_{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def main(add_command, name: str, prog: str, argv: list[str] | None = None) -> int:
    """``python -m <prog>``: the ``name`` command alone; a refused input is one line on stderr and exit 2."""
    parser = argparse.ArgumentParser(prog=prog)
    add_command(parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK"))
    args = parser.parse_args([name, *(sys.argv[1:] if argv is None else argv)])
    from flowrl.commands import error_line

    try:
        return args.fn(args)
    except (ValueError, RuntimeError, FileNotFoundError) as exc:
        print(error_line(exc), file=sys.stderr)
        return 2
