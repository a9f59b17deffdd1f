"""What the benchmark commands share, below every command module (``benchmarks/cli.py`` and each benchmark's own
``cli.py`` import it; it imports none of them): printing on the main process, a required ``--out``, and the
four steps of a judged benchmark's command line."""

from __future__ import annotations

import argparse
from pathlib import Path


def print_main(text: str) -> None:
    """Print on the main process only (``accelerate launch`` runs every command once per process)."""
    from flowrl.benchmarks.generation import process_state

    if process_state().is_main_process:
        print(text)


def require_out(args: argparse.Namespace, action: str) -> Path:
    if args.out is None:
        raise ValueError(f"{action} needs --out DIR")
    return Path(args.out)


def add_judged_steps(p: argparse.ArgumentParser, check: str, generate: str, judge: str, limit: str) -> None:
    """The steps a judged benchmark's command takes, one of them required (``--check``, ``--generate``,
    ``--judge``, ``--summary``), with ``--out`` and ``--limit``; ``check``, ``generate``, ``judge`` and ``limit``
    are the benchmark's help texts."""
    act = p.add_mutually_exclusive_group(required=True)
    act.add_argument("--check", action="store_true", help=check)
    act.add_argument("--generate", metavar="RUN_OR_RECIPE", help=generate)
    act.add_argument("--judge", metavar="IMAGE_DIR", help=judge)
    act.add_argument("--summary", metavar="OUT_DIR", help="re-aggregate a results folder's progress.jsonl")
    p.add_argument("--out", default=None, help="output folder (images for --generate, results for --judge)")
    p.add_argument("--limit", type=int, default=None, help=limit)
