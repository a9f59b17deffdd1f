"""``flowrl report RUN [RUN ...]``: one self-contained HTML page for finished or running run folders.

The page holds everything it shows: the metrics rows as embedded JSON, the sample grids as base64 data
URIs, and its own small SVG chart code (no CDN, no fonts, nothing fetched when it is viewed). It draws

- the training reward (``reward/mean``, per-reward components) and the evaluation reward
  (``eval/reward/*``) with EMA smoothing (a slider) and a +-std band where the run logs the std,
- every other logged metric, one chart each, grouped by prefix: ``policy/*``, ``adv/*``, ``method/*``,
  ``monitor/<group>/*``, ``timing_s/*``, ``cost/*``, ``throughput/*``, ``memory/*``, and whatever else,
- time per phase (a table and a stacked bar per run) and cost totals,
- the sample grids through training (``samples/iter-N.png``, ``samples/eval-N.png``),
- the resolved ``config.yaml`` as a collapsible tree (with several runs, the keys that differ first).

With several runs every chart overlays them, one colour per run. A metric a run does not log is left out
of its charts. The page records its health on ``<body>``: ``data-charts`` (charts drawn with data),
``data-errors`` (the number of script errors; their text in ``data-error-log``) and ``data-rendered``.

The package: ``runs`` reads run folders, ``layout`` chooses the sections and tables, ``page`` writes the
HTML, ``assets`` holds its style sheet and scripts.
"""

from __future__ import annotations

import argparse
from typing import Any

from flowrl.report.layout import PALETTE, PHASES, POLICY_ORDER, SECTION_TITLES, phase_table, sections, summary
from flowrl.report.page import (
    BIG_IMAGE_BYTES,
    MAX_GRIDS,
    REPORT_FILE,
    config_html,
    grids_html,
    render,
    summary_html,
    write_report,
)
from flowrl.report.runs import Run, load_run, series_of


# ------------------------------------------------------------------------------------------ CLI
def cmd_report(args: argparse.Namespace) -> int:
    out = write_report(args.runs, args.output, max_grids=args.max_grids, force=args.force)
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} kB)")
    return 0


def add_commands(sub: Any) -> None:
    """Register ``flowrl report`` on an argparse subparsers object."""
    p = sub.add_parser("report", help="write one self-contained HTML page of one or more run folders")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run folders (several: every chart overlays them)")
    p.add_argument(
        "-o",
        "--output",
        default=None,
        help=f"the HTML file (default RUN/{REPORT_FILE} for one run, ./{REPORT_FILE} for several)",
    )
    p.add_argument(
        "--max-grids",
        type=int,
        default=MAX_GRIDS,
        help=f"sample grids shown per kind and run, evenly spaced (default {MAX_GRIDS})",
    )
    p.add_argument("--force", action="store_true", help="replace the HTML file if it exists")
    p.set_defaults(fn=cmd_report)


__all__ = [
    "BIG_IMAGE_BYTES",
    "MAX_GRIDS",
    "PALETTE",
    "PHASES",
    "POLICY_ORDER",
    "REPORT_FILE",
    "Run",
    "SECTION_TITLES",
    "add_commands",
    "cmd_report",
    "config_html",
    "grids_html",
    "load_run",
    "phase_table",
    "render",
    "sections",
    "series_of",
    "summary",
    "summary_html",
    "write_report",
]
