"""What the benchmark commands share, below every command module (``benchmarks/cli.py`` and each benchmark's own
``cli.py`` import it; it imports none of them): printing on the main process, and a required ``--out``."""

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
