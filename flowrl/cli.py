"""``flowrl`` command line: one small function per command.

    flowrl train [RECIPE] [key=value ...]
    flowrl sample RUN_DIR_OR_RECIPE --prompt TEXT [--num N] [--out DIR]
    flowrl ls [recipes|methods|rewards|pipelines]
    flowrl validate [RECIPE] [key=value ...]
    flowrl env
    flowrl eval {geneval,unigenbench,toy} ...
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
from pathlib import Path

USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError, RuntimeError, KeyError)


def cmd_train(args: argparse.Namespace) -> int:
    from flowrl.config import resolve_config
    from flowrl.trainer import Trainer

    cfg = resolve_config(args.recipe, args.overrides)
    trainer = Trainer(cfg)
    history = trainer.train()
    if trainer.acc.is_main_process and history:
        first, last = history[0], history[-1]
        print(
            f"done: {len(history)} iterations, reward/mean {first['reward/mean']:.5f} (iteration "
            f"{first['iteration']}) -> {last['reward/mean']:.5f} (iteration {last['iteration']}); "
            f"run folder {cfg.output_dir}"
        )
    return 0


def _sample_config(target: str):
    """A run folder's resolved config, or a recipe's."""
    from flowrl.config import config_from_dict, resolve_config

    run = Path(target)
    if (run / "config.yaml").is_file():
        import yaml

        data = yaml.safe_load((run / "config.yaml").read_text())
        data["resume"] = None
        return config_from_dict(data), run
    return resolve_config(target, []), None


def cmd_sample(args: argparse.Namespace) -> int:
    import torch

    from flowrl.logs import save_grid
    from flowrl.pipelines.base import adapter_class

    cfg, run = _sample_config(args.target)
    if args.num < 1:
        raise ValueError(f"--num: must be at least 1, got {args.num}")
    adapter = adapter_class(cfg.model.pipeline).from_config(cfg.model, seed=cfg.seed)
    pipe = adapter.pipe
    loaded = adapter.load_trained(run) if run is not None else None
    if loaded:
        print(f"loaded {loaded} from {run}")
        pipe = adapter.pipe
    out = Path(args.out or (run / "samples_cli" if run is not None else "samples"))
    out.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator("cpu").manual_seed(args.seed)
    images = pipe(
        prompt=[args.prompt] * args.num,
        num_inference_steps=args.steps or cfg.sample.eval_num_steps,
        guidance_scale=cfg.sample.eval_guidance_scale,
        height=cfg.model.resolution,
        width=cfg.model.resolution,
        max_sequence_length=cfg.model.max_sequence_length,
        generator=generator,
        output_type="pt",
    ).images
    for i, img in enumerate(images):
        save_grid(img[None], out / f"{i:04d}.png")
    print(f"wrote {len(images)} images to {out}")
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
    from flowrl.config import dump_config, resolve_config
    from flowrl.data import load_prompts

    cfg = resolve_config(args.recipe, args.overrides)
    load_prompts(cfg.data.prompts)
    for name in cfg.reward:
        _check_reward_args(name, cfg.reward_args.get(name, {}))
    if args.print:
        print(dump_config(cfg), end="")
    print(f"ok: {args.recipe or 'tiny-cpu'} is valid")
    if args.estimate:
        import torch

        from flowrl.estimate import estimate, format_estimate

        # the tiny models are CPU recipes; anything else is planned for a GPU even from a machine without one
        device = args.device or ("cuda" if torch.cuda.is_available() or cfg.model.path != "tiny" else "cpu")
        print(format_estimate(estimate(cfg, world_size=args.world_size, device=device, strategy=args.strategy)))
    return 0


def _check_reward_args(name: str, kwargs: dict) -> None:
    """Refuse reward_args that the reward's constructor does not take (imports it, loads no weights)."""
    import inspect

    from flowrl.reward_models.base import _REGISTRY, _import_attr

    target = _REGISTRY.get(name, name)
    target = _import_attr(target) if isinstance(target, str) else target
    if not isinstance(target, type):
        return
    params = inspect.signature(target.__init__).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    for key in kwargs:
        if key not in params:
            known = ", ".join(k for k in params if k != "self")
            raise ValueError(f"reward_args.{name}.{key}: {name} takes no argument {key!r}; it takes {known}")


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flowrl", description="Online RL of flow-matching generators.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("train", help="train with a recipe and key=value overrides")
    p.add_argument("recipe", nargs="?", default=None, help="shipped recipe name or YAML path (default tiny-cpu)")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. train.iterations=10")
    p.set_defaults(fn=cmd_train)

    p = sub.add_parser("sample", help="generate images from a run folder (with its LoRA) or a recipe")
    p.add_argument("target", help="run folder or recipe")
    p.add_argument("--prompt", required=True)
    p.add_argument("--num", type=int, default=4)
    p.add_argument("--steps", type=int, default=None, help="default: sample.eval_num_steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    p.set_defaults(fn=cmd_sample)

    p = sub.add_parser("ls", help="list recipes, methods, rewards or pipelines")
    p.add_argument("kind", nargs="?", choices=["recipes", "methods", "rewards", "pipelines"])
    p.set_defaults(fn=cmd_ls)

    p = sub.add_parser("validate", help="check a recipe and overrides without running")
    p.add_argument("recipe", nargs="?", default=None)
    p.add_argument("overrides", nargs="*")
    p.add_argument("--print", action="store_true", help="print the resolved config")
    p.add_argument("--estimate", action="store_true", help="also print a pre-flight estimate of peak memory and time")
    p.add_argument("--world-size", type=int, default=1, help="with --estimate: processes sharing an iteration")
    p.add_argument(
        "--device", choices=["cuda", "cpu"], default=None,
        help="with --estimate (default: cpu for tiny models, else cuda)",
    )  # fmt: skip
    p.add_argument("--strategy", choices=["ddp", "zero2", "fsdp"], default="ddp", help="with --estimate: sharding")
    p.set_defaults(fn=cmd_validate)

    p = sub.add_parser("env", help="print versions and devices")
    p.set_defaults(fn=cmd_env)

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
    for name in ("diffusers", "transformers", "huggingface_hub"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        from diffusers.utils import logging as dlog
        from transformers.utils import logging as tlog

        dlog.set_verbosity_error()
        tlog.set_verbosity_error()
    except ImportError:  # pragma: no cover
        pass


def error_line(exc: BaseException) -> str:
    """What every flowrl command prints for a user error: one line, the message's first line."""
    return f"flowrl: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _split_recipe(args)
    level = logging.INFO if args.debug else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    _quiet_libraries(args.debug)
    try:
        return args.fn(args)
    except KeyboardInterrupt:
        print("flowrl: interrupted", file=sys.stderr)
        return 130
    except USER_ERRORS as exc:
        if args.debug:
            traceback.print_exc()
        print(error_line(exc), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
