"""Reward commands, hooked into ``flowrl`` by ``add_commands(subparsers)``:

    flowrl rewards test NAME [key=value ...] [--batch N]       conformance check on synthetic media
    flowrl serve-reward NAME [key=value ...] [--host 127.0.0.1] [--port 18080] [--token T] [--max-batch N]

``key=value`` arguments are the reward's constructor keywords; values are parsed as YAML scalars or flow
collections (``frames=8``, ``backend=tesseract``, ``reward_kwargs={formula: cos}``). Each command returns
an exit code; bad input raises ``ValueError`` with a one-line message. Also runnable alone:
``python -m flowrl.reward_models.cli ...``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

DEFAULT_HOST = "127.0.0.1"  # the same defaults as flowrl.reward_models.server, without importing it
DEFAULT_PORT = 18080


def parse_kwargs(items: list[str]) -> dict[str, Any]:
    """``["a=1", "b=x"]`` -> ``{"a": 1, "b": "x"}`` (values as YAML)."""
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"expected key=value with a Python identifier as key, got {item!r}")
        if key in out:
            raise ValueError(f"argument {key!r} given twice")
        try:
            out[key] = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError as exc:
            raise ValueError(f"{key}: cannot parse value {raw!r} ({str(exc).splitlines()[0]})") from None
    return out


def _build(name: str, items: list[str]) -> Any:
    """The reward, after its arguments are checked against its signature (one-line errors, no weights loaded)."""
    from flowrl.reward_models import build_reward, check_reward_args

    kwargs = parse_kwargs(items)
    check_reward_args(name, kwargs, where=None)
    return build_reward(name, **kwargs)


def cmd_rewards_test(args: argparse.Namespace) -> int:
    from flowrl.reward_models.conformance import run_conformance

    if args.batch < 2:
        raise ValueError(f"--batch: at least 2 samples are needed to check batch order, got {args.batch}")
    report = run_conformance(_build(args.name, args.kwargs), args.name, batch=args.batch, seed=args.seed)
    print(report.format())
    return 0 if report.ok else 1


def cmd_serve_reward(args: argparse.Namespace) -> int:
    from flowrl.reward_models.server import RewardService, make_server

    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port: must be in 0..65535, got {args.port}")
    if args.max_batch < 1:
        raise ValueError(f"--max-batch: must be at least 1, got {args.max_batch}")
    token = args.token if args.token is not None else os.environ.get("FLOWRL_REWARD_TOKEN")
    service = RewardService(args.name, _build(args.name, args.kwargs), token=token, max_batch=args.max_batch)
    try:
        server = make_server(service, args.host, args.port)
    except OSError as exc:
        raise RuntimeError(f"serve-reward: cannot bind {args.host}:{args.port} ({exc.strerror or exc})") from None
    host, port = server.server_address[:2]
    auth = "bearer token required" if token else "no token"
    print(f"serving reward {args.name!r} on http://{host}:{port} (GET /health, POST /score; {auth})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("serve-reward: stopped", flush=True)
    finally:
        server.server_close()
    return 0


def add_commands(subparsers: Any) -> None:
    """Register ``rewards test`` and ``serve-reward`` on an argparse subparsers object (``fn`` defaults)."""
    rewards = subparsers.add_parser("rewards", help="reward model tools (conformance test)")
    sub = rewards.add_subparsers(dest="rewards_command", required=True, metavar="SUBCOMMAND")
    p = sub.add_parser("test", help="run a reward on synthetic media and check its contract")
    p.add_argument("name", help="registered reward name or module:attr")
    p.add_argument("kwargs", nargs="*", help="constructor arguments key=value")
    p.add_argument("--batch", type=int, default=4, help="samples per call (default 4)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(fn=cmd_rewards_test)

    p = subparsers.add_parser("serve-reward", help="serve a reward over HTTP with JSON")
    p.add_argument("name", help="registered reward name or module:attr")
    p.add_argument("kwargs", nargs="*", help="constructor arguments key=value")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"bind address (default {DEFAULT_HOST}: loopback only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--token", default=None, help="require 'Authorization: Bearer TOKEN' (default $FLOWRL_REWARD_TOKEN)")
    p.add_argument("--max-batch", type=int, default=64, help="samples per reward call (default 64)")
    p.set_defaults(fn=cmd_serve_reward)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flowrl-rewards", description="flowrl reward commands")
    add_commands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from flowrl.commands import error_line

    try:
        return args.fn(args)
    except (ValueError, RuntimeError) as exc:
        print(error_line(exc), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
