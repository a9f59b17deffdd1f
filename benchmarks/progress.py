"""The results folder of a judged benchmark (GenEval 2, DPG-Bench): ``run.json`` says who judged what,
``progress.jsonl`` holds one row per judged unit, appended as results arrive (the last row of a unit wins).

``read_rows`` reads the progress file (a torn or foreign line is skipped with a warning); ``check_resume``
refuses a folder that has progress unless ``resume`` is given, and then one whose ``run.json`` differs
from the new run in a pinned judge field or run field.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Hashable, Iterable, Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

PROGRESS, RUN = "progress.jsonl", "run.json"


def read_rows(path: Path, key: Callable[[dict[str, Any]], Hashable]) -> dict[Any, dict[str, Any]]:
    """The last row of every unit (``key(row)``) in a progress file; absent file: no rows."""
    rows: dict[Any, dict[str, Any]] = {}
    if not path.is_file():
        return rows
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            rows[key(row)] = row
        except (ValueError, KeyError, TypeError):
            logger.warning("%s:%d is not a progress row; skipped", path, lineno)
    return rows


def check_resume(out: Path, run: Mapping[str, Any], resume: bool, what: str, judge_keys: Iterable[str],
                 run_keys: Iterable[str]) -> None:  # fmt: skip
    """One-line refusals of a results folder the new run cannot continue (see the module docstring)."""
    if not (out / PROGRESS).is_file():
        return
    if not resume:
        raise ValueError(f"{out} already holds {what} results ({out / PROGRESS}); pass --resume or a new --out")
    if not (out / RUN).is_file():
        raise ValueError(f"{out} has {PROGRESS} but no {RUN}; cannot tell which judge made it")
    old = json.loads((out / RUN).read_text(encoding="utf-8"))
    for key in judge_keys:
        before, now = old["judge"].get(key), run["judge"].get(key)
        if before != now:
            raise ValueError(f"cannot resume {out}: judge {key} was {before!r}, now {now!r}")
    for key in run_keys:
        if old.get(key) != run.get(key):
            raise ValueError(f"cannot resume {out}: {key} was {old.get(key)!r}, now {run.get(key)!r}")
    if (old.get("prompts") or {}).get("sha256") != (run.get("prompts") or {}).get("sha256"):
        raise ValueError(f"cannot resume {out}: it was judged against another prompt file")


def read_run(out: Path, what: str) -> dict[str, Any]:
    """A results folder's ``run.json``; a folder without one is refused in one line naming ``what``."""
    if not (out / RUN).is_file():
        raise FileNotFoundError(f"{out / RUN} does not exist; is {out} a {what} results folder?")
    return json.loads((out / RUN).read_text(encoding="utf-8"))


def write_summary(out: Path, summary: Mapping[str, Any], markdown: str) -> None:
    """A results folder's ``summary.json`` (``summary``) and ``summary.md`` (``markdown``)."""
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out / "summary.md").write_text(markdown, encoding="utf-8")


def judge_lines(judge: Mapping[str, Any] | None, label: str) -> list[str]:
    """A summary's closing lines naming the judge of ``run.json`` (``label``: what the benchmark calls it: "Judge",
    "VQA model"); none without a judge."""
    if not judge:
        return []
    where = f" at {judge['base_url']}" if judge.get("base_url") else ""
    version = judge.get("version") or "not pinned"
    return ["", f"{label}: {judge['model']} ({judge['backend']}{where}; version {version})."]


def summary_head(title: str, summary: Mapping[str, Any]) -> list[str]:
    """A summary's first lines: its title and the protocol's label (official, or not and why)."""
    return [f"# {title}", "", f"Protocol: {summary.get('protocol', {}).get('label', 'unknown')}.", ""]


def unscored_causes(unscored: Mapping[str, Any]) -> str:
    """The unscored images by cause, ``"parse_error 2, no_image 1"`` (``"none"``)."""
    return ", ".join(f"{k} {v}" for k, v in unscored["images"].items()) or "none"
