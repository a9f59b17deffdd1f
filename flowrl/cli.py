"""``flowrl`` command line: one small function per command.

    flowrl train [RECIPE] [key=value ...]
    flowrl sample RUN_DIR_OR_RECIPE --prompt TEXT [--num N] [--out DIR]
    flowrl ls [recipes|methods|rewards|pipelines]
    flowrl validate [RECIPE] [key=value ...]
    flowrl env
    flowrl report RUN [RUN ...] [-o OUT.html]
    flowrl eval {geneval,unigenbench,toy,toy-av} ...
    flowrl rewards test NAME [key=value ...]
    flowrl serve-reward NAME [key=value ...] [--host 127.0.0.1] [--port N] [--token T]

Errors in user input print one line naming the culprit (``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
import traceback
import warnings

from flowrl.commands import error_line

USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError, RuntimeError, KeyError)


def cmd_train(args: argparse.Namespace) -> int:
    from flowrl.resolve import resolve_config
    from flowrl.trainer import Trainer, end_process_group

    args.phase = "start-up"  # a Ctrl-C until the trainer runs: nothing trained, nothing saved (see main)
    cfg = resolve_config(args.recipe, args.overrides)
    trainer = Trainer(cfg)
    args.phase = "training"  # from here the trainer says what a signal stopped (flowrl.interrupts.Interrupted)
    history = trainer.train()
    end_process_group()  # the command owns the process; a library caller owns its group
    if not trainer.acc.is_main_process:
        return 0
    if trainer.already_done:
        print(
            f"already done: the run in {cfg.output_dir} completed its {cfg.train.iterations} iterations; "
            f"raise train.iterations to train further"
        )
        return 0
    trained = [row for row in history if "reward/mean" in row]  # evaluation-only and skipped rows have none
    if trained:
        first, last = trained[0], trained[-1]
        print(
            f"done: {len(trained)} iterations, reward/mean {first['reward/mean']:.5f} (iteration "
            f"{first['iteration']}) -> {last['reward/mean']:.5f} (iteration {last['iteration']}); "
            f"run folder {cfg.output_dir}"
        )
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    from flowrl.config import recipe_names
    from flowrl.methods import list_methods
    from flowrl.pipelines.base import list_pipelines
    from flowrl.reward_models import list_rewards

    listings = {"recipes": recipe_names, "methods": list_methods, "rewards": list_rewards, "pipelines": list_pipelines}
    for kind in [args.kind] if args.kind else list(listings):
        names = listings[kind]()
        print(f"{kind}: " + ", ".join(names) if not args.kind else "\n".join(names))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from flowrl.config import dump_config
    from flowrl.data import check_source_images, load_eval_prompts, load_train_prompts
    from flowrl.media_data import as_targets
    from flowrl.methods import build_method
    from flowrl.pipelines.base import adapter_class, source_images_of
    from flowrl.preflight import preflight
    from flowrl.resolve import resolve_config

    cfg = resolve_config(args.recipe, args.overrides)
    takes = source_images_of(adapter_class(cfg.model.pipeline))  # each row's images: count and files
    items = load_train_prompts(cfg.data)
    if build_method(cfg).needs().dataset:  # a row's image is the method's target, not a source to edit
        items = as_targets(items)
    check_source_images(items, takes, cfg.model.pipeline)
    check_source_images(load_eval_prompts(cfg.data) or [], takes, cfg.model.pipeline, "data.eval_prompts")
    preflight(cfg)
    if args.json:  # one JSON object on stdout, nothing else
        args.estimate = True
    elif args.print:
        print(dump_config(cfg), end="")
    if not args.json:
        print(f"ok: {args.recipe or 'tiny-cpu'} is valid")
    if args.estimate:
        import json

        import torch

        from flowrl.estimate import format_estimate, is_tiny
        from flowrl.estimate.verdict import verdict, verdict_json, verdict_line

        if args.world_size is not None and args.world_size < 1:
            raise ValueError(f"--world-size: must be >= 1, got {args.world_size}")
        if args.gpu_memory <= 0:
            raise ValueError(f"--gpu-memory: must be > 0 GiB, got {args.gpu_memory:g}")
        # the tiny models are CPU recipes; anything else is planned for a GPU even from a machine without one
        device = args.device or ("cuda" if torch.cuda.is_available() or not is_tiny(cfg.model) else "cpu")
        # without --world-size / --strategy: the launch the recipe declares (launch.gpus, launch.strategy)
        v = verdict(cfg, args.gpu_memory, args.world_size, args.strategy, device)
        if args.json:
            print(json.dumps(verdict_json(v, args.recipe or "tiny-cpu")))
            return 0
        given = args.world_size is not None or args.strategy is not None
        print(f"launch: {v.launch.describe(device)}" + (" (as given)" if given else " (the recipe's launch.* keys)"))
        print(format_estimate(v.estimate))
        if v.not_available:
            print(f"note: not modelled, not settings of this version: {', '.join(v.not_available)}")
        print(verdict_line(v))
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    import importlib

    import flowrl

    print(f"flowrl {flowrl.__version__}  python {platform.python_version()}  {platform.platform()}")
    for name in ("torch", "diffusers", "transformers", "accelerate", "peft", "safetensors", "rapidocr_onnxruntime"):
        try:
            version = getattr(importlib.import_module(name), "__version__", "installed")
        except ImportError:
            version = "not installed"
        print(f"{name:22s}{version}")
    import torch

    print(f"{'cuda':22s}{torch.cuda.is_available()} ({torch.cuda.device_count()} devices)")
    print(f"{'HF_HUB_OFFLINE':22s}{os.environ.get('HF_HUB_OFFLINE', '0')}")
    return 0


class _Subparsers(argparse._SubParsersAction):
    """Every command also takes ``--debug`` (after its name), as the top level does."""

    def add_parser(self, name, **kwargs):
        p = super().add_parser(name, **kwargs)
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
        return p


class UsageError(ValueError):
    """A command line argparse refuses (an unknown option, a missing argument): one line, as every input error."""


class _Parser(argparse.ArgumentParser):
    """argparse, its errors one line (``UsageError``) instead of the usage text and an exit; an unknown ``--option``
    is answered with flowrl's form of it (``_dash_hint``)."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: {message}" if self.prog != "flowrl" else message)

    def parse_args(self, args=None, namespace=None):
        argv = list(sys.argv[1:] if args is None else args)
        parsed, extras = self.parse_known_args(argv, namespace)
        if extras:
            hint = _dash_hint(extras, parsed, argv)
            self.error(f"unrecognized arguments: {' '.join(extras)}" + (f"; {hint}" if hint else ""))
        return parsed


def _dash_hint(extras: list[str], parsed: argparse.Namespace, argv: list[str]) -> str | None:
    """flowrl's form of the first unknown ``--option`` where it is a habit of flow_grpo's command line (or another
    trainer's): ``--recipe X`` (the recipe is the first argument), ``--train.iterations=2`` or
    ``--config.sample.num_steps 10`` (key=value overrides, under flowrl's name of a flow_grpo key), ``--config
    config/grpo.py:...`` (a recipe). None for an option of no such form."""
    from flowrl.migration import FOREIGN_KEYS

    command = getattr(parsed, "command", None)
    for token in extras:
        if not token.startswith("--") or token == "--":
            continue
        name, sep, value = token[2:].partition("=")
        if not sep and token in argv:  # `--key value`: the value is the next argument
            after = argv[argv.index(token) + 1 : argv.index(token) + 2]
            value = after[0] if after and not after[0].startswith("-") else ""
        if not hasattr(parsed, "overrides"):  # a command of options only: its --help lists them
            return None
        if name == "recipe":
            return f"the recipe is the first argument, not --recipe: flowrl {command} {value or 'RECIPE'}"
        if name == "config":  # flow_grpo's --config=config/grpo.py:NAME
            return (
                f"flowrl takes a recipe (a shipped name or a .yaml file) as the first argument, not --config: "
                f"flowrl {command} RECIPE (flowrl ls recipes)"
            )
        key = name.removeprefix("config.").replace("-", "_")
        if not all(part.isidentifier() for part in key.split(".")):
            return None
        shown = value or "VALUE"
        if key in FOREIGN_KEYS:
            whose, ours = FOREIGN_KEYS[key]
            return (
                f"flowrl takes key=value overrides, not --dashes, and {whose} {key} is {ours[0]} here: "
                f"write {ours[0]}={shown}"
            )
        return f"flowrl takes key=value overrides, not --dashes: write {key}={shown}"
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="flowrl", description="Online RL of flow-matching generators.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    parser.register("action", "parsers", _Subparsers)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("train", help="train with a recipe and key=value overrides")
    p.add_argument("recipe", nargs="?", default=None, help="shipped recipe name or YAML path (default tiny-cpu)")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. train.iterations=10")
    p.set_defaults(fn=cmd_train)

    from flowrl.sample import add_commands as add_sample_commands

    add_sample_commands(sub)

    p = sub.add_parser("ls", help="list recipes, methods, rewards or pipelines")
    p.add_argument("kind", nargs="?", choices=["recipes", "methods", "rewards", "pipelines"])
    p.set_defaults(fn=cmd_ls)

    p = sub.add_parser("validate", help="check a recipe and overrides without running")
    p.add_argument("recipe", nargs="?", default=None)
    p.add_argument("overrides", nargs="*")
    p.add_argument("--print", action="store_true", help="print the resolved config")
    p.add_argument("--estimate", action="store_true", help="also print a pre-flight estimate of peak memory and time")
    p.add_argument(
        "--world-size", type=int, default=None,
        help="with --estimate: processes sharing an iteration (default: the recipe's launch.gpus)",
    )  # fmt: skip
    p.add_argument(
        "--device", choices=["cuda", "cpu"], default=None,
        help="with --estimate (default: cpu for tiny models, else cuda)",
    )  # fmt: skip
    p.add_argument(
        "--strategy", choices=["ddp", "zero2", "fsdp"], default=None,
        help="with --estimate: sharding (default: the recipe's launch.strategy)",
    )  # fmt: skip
    p.add_argument(
        "--gpu-memory", type=float, default=80.0, metavar="GIB",
        help="with --estimate: memory of one GPU, for the verdict (default 80)",
    )  # fmt: skip
    p.add_argument(
        "--json", action="store_true", help="the estimate and verdict as one JSON object (implies --estimate)"
    )
    p.set_defaults(fn=cmd_validate)

    p = sub.add_parser("env", help="print versions and devices")
    p.set_defaults(fn=cmd_env)

    from flowrl.report import add_commands as add_report_commands

    add_report_commands(sub)

    from flowrl.reward_models.cli import add_commands as add_reward_commands

    add_reward_commands(sub)
    from flowrl.benchmarks.cli import add_commands as add_eval_commands

    add_eval_commands(sub)
    return parser


def _split_recipe(args: argparse.Namespace) -> None:
    """``flowrl train key=value`` (no recipe): the first positional is an override, not a recipe."""
    if getattr(args, "recipe", None) and "=" in args.recipe:
        args.overrides = [args.recipe, *args.overrides]
        args.recipe = None


def _quiet_libraries(debug: bool) -> None:
    """diffusers/transformers chatter (hub retries, dtype notes) only with --debug."""
    if debug:
        return
    # torch.utils._pytree: torchao, which peft imports when it is installed, registers enums with a deprecation
    # warning on stderr at import
    for name in ("diffusers", "transformers", "huggingface_hub", "torch.utils._pytree"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        from diffusers.utils import logging as dlog
        from transformers.utils import logging as tlog

        dlog.set_verbosity_error()
        tlog.set_verbosity_error()
    except ImportError:  # pragma: no cover
        pass


STARTUP_INTERRUPTED = "interrupted (SIGINT) during start-up: nothing was written"


def main(argv: list[str] | None = None) -> int:
    try:  # the imports of start-up take seconds: a Ctrl-C there is one line too
        parser = build_parser()
        args = parser.parse_args(argv)
        _split_recipe(args)
        level = logging.INFO if args.debug else logging.WARNING
        logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
        _quiet_libraries(args.debug)
    except KeyboardInterrupt:
        print(f"flowrl: {STARTUP_INTERRUPTED}", file=sys.stderr)
        return 130
    except UsageError as exc:
        print(error_line(exc), file=sys.stderr)
        return 2
    if not args.debug:  # a setting's warning (a knob the method lacks) is one line, not a traceback
        warnings.formatwarning = lambda message, category, *_, **__: f"flowrl: {category.__name__}: {message}\n"
    try:
        return args.fn(args)
    except KeyboardInterrupt as exc:
        from flowrl.interrupts import Interrupted

        if isinstance(exc, Interrupted):  # the trainer's own line: what was saved and how to continue
            line = str(exc)
        elif getattr(args, "phase", None) == "start-up":
            line = "interrupted (SIGINT) during start-up, before the first iteration: no checkpoint was written"
        else:
            line = "interrupted"
        if args.debug:
            traceback.print_exc()
        print(f"flowrl: {line}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head`, which has read enough
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except USER_ERRORS as exc:
        if args.debug:
            traceback.print_exc()
        print(error_line(exc), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
