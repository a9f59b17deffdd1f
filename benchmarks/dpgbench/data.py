"""DPG-Bench's prompts and questions: ELLA's ``dpg_bench/dpg_bench.csv`` (1065 prompts), read as the official
scorer reads it (``scoring.parse_questions``: its first data row is skipped).

flowrl does not ship the CSV (ELLA's repository keeps it as a large file): ``load_items`` reads the user's
copy (the file, or a checkout of TencentQQGYLab/ELLA), else ``$DPG_BENCH_CSV``, else a copy fetched once from
the pinned commit into flowrl's cache (one line when offline). An item::

    {"key": item_id (the image file's stem), "prompt": text, "questions": [{"qid", "question", "tuple",
     "category", "l1_category", "dependency": [parent qids]}, ...]}
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from flowrl.benchmarks.datafiles import DataSpec, resolve, sha256_of

from .scoring import COLUMNS, ItemQuestions, category, l1_category, parse_questions

OFFICIAL_COMMIT = "3c228f1dc6c4d3cad0a47493816151a419f14db3"
OFFICIAL_PROMPTS = 1065  # dpg_bench/prompts/*.txt at that commit
SPEC = DataSpec(
    name="DPG-Bench questions",
    env="DPG_BENCH_CSV",
    inside="dpg_bench/dpg_bench.csv",
    url=f"https://raw.githubusercontent.com/TencentQQGYLab/ELLA/{OFFICIAL_COMMIT}/dpg_bench/dpg_bench.csv",
    cache_name=f"dpg_bench-{OFFICIAL_COMMIT[:8]}.csv",
    note="kept by ELLA as a large file",
)


def read_csv(path: str | Path) -> list[dict[str, str]]:
    text = Path(path).read_bytes().decode("utf-8-sig")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise ValueError(f"{path}: not a DPG-Bench CSV (no column {missing[0]!r}; expected {', '.join(COLUMNS)})")
    rows = list(reader)
    for line, row in enumerate(rows, start=2):
        try:
            int(row["proposition_id"])
            [int(d) for d in row["dependency"].split(",")]
        except (ValueError, AttributeError):
            raise ValueError(
                f"{path}:{line}: proposition_id {row['proposition_id']!r} / dependency {row['dependency']!r} "
                "are not integers"
            ) from None
    return rows


def as_item(questions: ItemQuestions) -> dict[str, Any]:
    return {
        "key": questions.key,
        "prompt": questions.text,
        "questions": [
            {"qid": qid, "question": questions.question[qid], "tuple": questions.tuple[qid],
             "category": category(questions.tuple[qid]), "l1_category": l1_category(questions.tuple[qid]),
             "dependency": questions.dependency[qid]}
            for qid in questions.question
        ],
    }  # fmt: skip


def load_questions(source: str | Path | None = None, skip_first: bool = True) -> dict[str, ItemQuestions]:
    return parse_questions(read_csv(resolve(source, SPEC)), skip_first)


def load_items(source: str | Path | None = None) -> list[dict[str, Any]]:
    """Every prompt with its questions, in file order (see the module docstring)."""
    return [as_item(q) for q in load_questions(source).values()]


def describe_source(source: str | Path | None = None) -> dict[str, Any]:
    path = resolve(source, SPEC)
    return {"source": str(Path(path).resolve()), "sha256": sha256_of(path)}
