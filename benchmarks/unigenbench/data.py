"""UniGenBench prompt sets: the official CSVs (or a ``datasets`` dataset with the same columns), strictly checked.

Columns: ``index``, ``prompt_en``, ``sub_dims_en`` (English files) or ``index``, ``prompt_zh``,
``sub_dims_zh`` (Chinese). ``sub_dims_*`` is a JSON object; the keys read here are the testpoints
(``Testpoints`` / ``考点``: sub-dimension names) and, one per testpoint, where it shows in the prompt
(``Testpoint Description`` / ``考点对应描述``); the categories are kept as metadata.

A testpoint description may be empty (the official code accepts it: ``test_prompts_en.csv`` index 383
has an empty last description). The prompt is kept as written (``TestCase.source_prompt``, for the official
judge prompt) and stripped (``TestCase.prompt``).

A row that fails a check (bad index, empty prompt, invalid JSON, unknown testpoint, lengths that differ,
a repeated index) does not stop the run: it becomes an ``InvalidRow`` naming its CSV line and the reason,
and is reported as unscored. (The official ``test_prompts_en_long.csv`` has one: index 509, a missing
comma inside its JSON.) A file without the expected columns is an error.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .dimensions import canonical_name, closest_name

logger = logging.getLogger(__name__)

KEYS = {
    "en": {"testpoints": "Testpoints", "descriptions": "Testpoint Description"},
    "zh": {"testpoints": "考点", "descriptions": "考点对应描述"},
}
META_KEYS = {
    "en": {"Primary Categories": "primary_category", "Secondary Categories": "secondary_category",
           "Subjects": "subject", "Sentence Structure": "sentence_structure"},
    "zh": {"一级垂类": "primary_category", "二级垂类": "secondary_category", "主体": "subject", "句式": "sentence_structure"},
}  # fmt: skip


@dataclass(frozen=True)
class TestCase:
    """One valid prompt row. ``dimensions[i]`` is the English sub-dimension of ``testpoints[i]``."""

    __test__ = False  # not a pytest class

    index: int
    prompt: str
    testpoints: tuple[str, ...]
    dimensions: tuple[str, ...]
    descriptions: tuple[str, ...]
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    source_prompt: str = field(default="", compare=False)  # the CSV field as written (not stripped)


@dataclass(frozen=True)
class InvalidRow:
    """A row that failed a check: ``line`` is its 1-based line in the CSV (header = 1), or the record number."""

    line: int
    index: str | None
    reason: str


@dataclass
class PromptSet:
    source: str
    language: str
    cases: list[TestCase]
    invalid: list[InvalidRow]
    sha256: str | None = None  # of the CSV file's bytes (None for a dataset)
    # invalid rows whose index and prompt are fine: drawn by --generate so that the folder is complete for
    # the official scorer (e.g. en_long index 509, whose JSON is valid at an earlier commit)
    drawable_invalid: dict[int, str] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return len(self.cases) + len(self.invalid)

    def describe(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "language": self.language,
            "sha256": self.sha256,
            "rows": self.rows,
            "valid_rows": len(self.cases),
            "invalid_rows": [vars(r) for r in self.invalid],
            "testpoints": sum(len(c.testpoints) for c in self.cases),
        }


class RowError(ValueError):
    """A row is malformed (caught per row: it becomes an InvalidRow)."""


def detect_language(columns: Iterable[str]) -> str:
    columns = set(columns)
    for language in ("en", "zh"):
        if {"index", f"prompt_{language}", f"sub_dims_{language}"} <= columns:
            return language
    raise ValueError(
        f"prompt table has columns {sorted(c for c in columns if c)}; expected index, prompt_en, sub_dims_en "
        "(or index, prompt_zh, sub_dims_zh)"
    )


def _string_list(value: Any, what: str, allow_empty: bool = False) -> list[str]:
    if not isinstance(value, list) or not value:
        raise RowError(f"{what} must be a non-empty list, got {json.dumps(value, ensure_ascii=False)[:80]}")
    if not all(isinstance(v, str) and (allow_empty or v.strip()) for v in value):
        raise RowError(f"{what} must hold " + ("strings" if allow_empty else "non-empty strings"))
    return value


def _index(raw: Any) -> int:
    if isinstance(raw, bool):
        raise RowError(f"index {raw!r} is not an integer")
    if isinstance(raw, int):
        value = raw
    else:
        text = str(raw if raw is not None else "").strip()
        if not text.isdigit():
            raise RowError(f"index {text!r} is not a non-negative integer")
        value = int(text)
    if value < 0:
        raise RowError(f"index {value} is negative")
    return value


def parse_row(record: Mapping[str, Any], language: str) -> TestCase:
    """Check one row; raise ``RowError`` naming the first problem."""
    if None in record:  # csv.DictReader puts surplus fields under the key None
        raise RowError(f"{len(record[None])} field(s) more than the header has")  # type: ignore[index]
    index = _index(record.get("index"))
    prompt = record.get(f"prompt_{language}")
    if not isinstance(prompt, str) or not prompt.strip():
        raise RowError(f"prompt_{language} is empty")
    raw = record.get(f"sub_dims_{language}")
    if isinstance(raw, str):
        try:
            sub_dims = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise RowError(f"sub_dims_{language} is not valid JSON ({exc.msg} at char {exc.pos})") from None
    else:
        sub_dims = raw
    if not isinstance(sub_dims, dict):
        raise RowError(f"sub_dims_{language} must be a JSON object")
    keys = KEYS[language]
    testpoints = _string_list(sub_dims.get(keys["testpoints"]), repr(keys["testpoints"]))
    descriptions = _string_list(sub_dims.get(keys["descriptions"]), repr(keys["descriptions"]), allow_empty=True)
    if len(descriptions) != len(testpoints):
        raise RowError(f"{len(testpoints)} testpoints but {len(descriptions)} testpoint descriptions")
    dimensions = []
    for name in testpoints:
        canonical = canonical_name(name)
        if canonical is None:
            close = closest_name(name)
            raise RowError(f"unknown testpoint {name!r}" + (f"; did you mean {close!r}?" if close else ""))
        dimensions.append(canonical)
    meta = {ours: sub_dims[theirs] for theirs, ours in META_KEYS[language].items() if theirs in sub_dims}
    return TestCase(index, prompt.strip(), tuple(testpoints), tuple(dimensions), tuple(descriptions), meta, prompt)


def _drawable(record: Mapping[str, Any], language: str) -> tuple[int, str] | None:
    try:
        index = _index(record.get("index"))
    except RowError:
        return None
    prompt = record.get(f"prompt_{language}")
    return (index, prompt.strip()) if isinstance(prompt, str) and prompt.strip() else None


def check_rows(
    records: Iterable[tuple[int, Mapping[str, Any]]], language: str, drawable: dict[int, str] | None = None
) -> tuple[list[TestCase], list[InvalidRow]]:
    """Valid cases and invalid rows; a repeated index keeps the first row and reports the others.

    ``drawable`` (filled when given) gets the index and prompt of each invalid row that has both and whose
    index no other row uses.
    """
    cases: list[TestCase] = []
    invalid: list[InvalidRow] = []
    seen: dict[int, int] = {}
    candidates: list[tuple[int, str]] = []
    for line, record in records:
        raw_index = record.get("index")
        shown = None if raw_index is None else str(raw_index).strip()
        try:
            case = parse_row(record, language)
            if case.index in seen:
                raise RowError(f"index {case.index} repeats line {seen[case.index]}")
        except RowError as exc:
            invalid.append(InvalidRow(line, shown, str(exc)))
            logger.warning("UniGenBench prompt row at line %d (index %s) is unscored: %s", line, shown, exc)
            usable = _drawable(record, language)
            if usable is not None:
                candidates.append(usable)
            continue
        seen[case.index] = line
        cases.append(case)
    if drawable is not None:
        counts: dict[int, int] = {}
        for index, _ in candidates:
            counts[index] = counts.get(index, 0) + 1
        drawable.update((i, p) for i, p in candidates if i not in seen and counts[i] == 1)
    return cases, invalid


def _csv_records(text: str) -> tuple[list[str], Iterator[tuple[int, dict[str, Any]]]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    columns = list(reader.fieldnames or [])

    def records() -> Iterator[tuple[int, dict[str, Any]]]:
        start = 2
        for record in reader:
            yield start, record
            start = reader.line_num + 1

    return columns, records()


def load_csv(path: str | Path) -> PromptSet:
    path = Path(path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    columns, records = _csv_records(text)
    language = detect_language(columns)
    drawable: dict[int, str] = {}
    cases, invalid = check_rows(records, language, drawable)
    return PromptSet(str(path), language, cases, invalid, hashlib.sha256(data).hexdigest(), drawable)


def load_dataset_prompts(name: str, split: str = "test", config: str | None = None) -> PromptSet:
    """Rows of a Hugging Face ``datasets`` dataset with the CSV's columns (imported only here)."""
    try:
        import datasets
    except ImportError:
        raise RuntimeError(
            f"reading the dataset {name!r} needs the `datasets` package (pip install datasets); "
            "or pass the path of the prompt CSV"
        ) from None
    try:
        table = datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # noqa: BLE001 - offline hub, unknown name, missing split: one line either way
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
            reason = f"the hub is offline (HF_HUB_OFFLINE=1): {reason}"
        raise RuntimeError(
            f"cannot load dataset {name!r} (split {split!r}): {reason[:200]}; download it first or pass a CSV path"
        ) from None
    language = detect_language(table.column_names)
    cases, invalid = check_rows(((i + 1, dict(row)) for i, row in enumerate(table)), language)
    return PromptSet(f"dataset:{name}:{split}", language, cases, invalid)


def load_prompts(source: str | Path, split: str = "test", config: str | None = None) -> PromptSet:
    """A CSV file by path, or a dataset by name (``hf:owner/name`` or an ``owner/name`` that is no file)."""
    text = str(source)
    if text.startswith("hf:"):
        return load_dataset_prompts(text[3:], split, config)
    path = Path(text).expanduser()
    if path.is_file():
        return load_csv(path)
    if path.suffix.lower() in (".csv", ".tsv", ".txt") or path.is_absolute() or text.startswith("."):
        raise FileNotFoundError(f"UniGenBench prompt file {text} does not exist")
    return load_dataset_prompts(text, split, config)
