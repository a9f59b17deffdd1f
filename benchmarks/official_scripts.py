"""The parity checks' way to run a benchmark's official script (GenEval 2, DPG-Bench) in-process: its ``main()``
under a given ``sys.argv``, what it prints captured and its stderr dropped."""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Callable


def printed_by(main: Callable[[], object], argv: list[str]) -> str:
    """What ``main()`` prints to stdout, run with ``sys.argv`` = ``argv`` (restored after), stderr dropped."""
    printed = io.StringIO()
    old_argv, sys.argv = sys.argv, argv
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
            main()
    finally:
        sys.argv = old_argv
    return printed.getvalue()
