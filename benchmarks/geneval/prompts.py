"""GenEval's prompt suite: a generator that reproduces the official metadata file, and a checked loader.

``generate_suite(seed=43, n=100)`` rebuilds the 553 rows of GenEval's ``evaluation_metadata.jsonl``
byte for byte (sha256 ``OFFICIAL_SHA256``) when written by ``write_prompts``. It draws from
``numpy.random.default_rng(seed)`` in the same order as GenEval's ``prompts/create_prompts.py``:
80 single-object rows (a permutation of all classes), then ``n`` draws each of two_object, counting,
colors, position and color_attr; rows whose content repeats an earlier row are dropped (GenEval
compares YAML dumps of whole rows, which amounts to comparing content).

Row schema (one JSON object per line; keys in this order)::

    {"tag": str, "include": [clause, ...], "exclude": [clause, ...] (optional), "prompt": str}
    clause = {"class": str, "count": int, "color": str (optional), "position": [relation, int] (optional)}

``position: [relation, k]`` says "this clause's objects are <relation> the objects of include clause k".
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from .constants import CLASSES, COLORS, NUMBER_WORDS, RELATIONS, TASKS

logger = logging.getLogger(__name__)

OFFICIAL_SHA256 = "5c48e0813e812e3c373fa5c8ed07a8f0a483be30272b4427b0559c8048e67c13"
OFFICIAL_NUM_ROWS = 553

Row = dict[str, Any]


class MetadataError(ValueError):
    """A GenEval metadata row is malformed; the message names where (file and line, or sample)."""


# ---------------------------------------------------------------------------------------------- text


def with_article(word: str) -> str:
    """``"an"`` before a vowel letter, else ``"a"`` (GenEval's rule: ``"an orange"``, ``"a bench"``)."""
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"


def plural(word: str) -> str:
    """GenEval's plural: ``+es`` after a final ``s`` (``"scissorses"``), else ``+s``."""
    return f"{word}es" if word.endswith("s") else f"{word}s"


def _clause(name: str, count: int = 1, **extra: Any) -> dict[str, Any]:
    return {"class": name, "count": count, **extra}


# ------------------------------------------------------------------------------------ one row per task
# Each sampler consumes the generator exactly as GenEval's script does; the call sequence is what makes
# the file reproducible, so do not reorder the draws.


def _two_object(rng: np.random.Generator) -> Row:
    a, b = (CLASSES[i] for i in rng.choice(len(CLASSES), size=2, replace=False))
    prompt = f"a photo of {with_article(a)} and {with_article(b)}"
    return {"tag": "two_object", "include": [_clause(a), _clause(b)], "prompt": prompt}


def _counting(rng: np.random.Generator, max_count: int = 4) -> Row:
    name = CLASSES[rng.choice(len(CLASSES))]
    num = int(rng.integers(2, max_count, endpoint=True))
    return {
        "tag": "counting",
        "include": [_clause(name, num)],
        "exclude": [_clause(name, num + 1)],
        "prompt": f"a photo of {NUMBER_WORDS[num]} {plural(name)}",
    }


def _non_person(offsets: np.ndarray | int) -> Any:
    """Map draws from ``range(1, 80)`` to class indices that skip ``person`` (no "a red person")."""
    return (offsets + CLASSES.index("person")) % len(CLASSES)


def _colors(rng: np.random.Generator) -> Row:
    name = CLASSES[_non_person(rng.choice(len(CLASSES) - 1) + 1)]
    color = COLORS[rng.choice(len(COLORS))]
    prompt = f"a photo of {with_article(color)} {name}"
    return {"tag": "colors", "include": [_clause(name, color=color)], "prompt": prompt}


def _position(rng: np.random.Generator) -> Row:
    a, b = (CLASSES[i] for i in rng.choice(len(CLASSES), size=2, replace=False))
    relation = RELATIONS[rng.choice(len(RELATIONS))]
    # The reference object b comes first so that a's clause can point back to clause 0.
    include = [_clause(b), _clause(a, position=[relation, 0])]
    prompt = f"a photo of {with_article(a)} {relation} {with_article(b)}"
    return {"tag": "position", "include": include, "prompt": prompt}


def _color_attr(rng: np.random.Generator) -> Row:
    idx = _non_person(rng.choice(len(CLASSES) - 1, size=2, replace=False) + 1)
    a, b = CLASSES[idx[0]], CLASSES[idx[1]]
    ca, cb = (COLORS[i] for i in rng.choice(len(COLORS), size=2, replace=False))
    prompt = f"a photo of {with_article(ca)} {a} and {with_article(cb)} {b}"
    return {"tag": "color_attr", "include": [_clause(a, color=ca), _clause(b, color=cb)], "prompt": prompt}


_SAMPLERS = (_two_object, _counting, _colors, _position, _color_attr)


# --------------------------------------------------------------------------------------------- suite


def generate_suite(seed: int = 43, n: int = 100) -> list[Row]:
    """All rows of the suite, de-duplicated by content, in generation order."""
    rng = np.random.default_rng(seed)
    rows: list[Row] = [
        {"tag": "single_object", "include": [_clause(CLASSES[i])], "prompt": f"a photo of {with_article(CLASSES[i])}"}
        for i in rng.choice(len(CLASSES), size=len(CLASSES), replace=False)
    ]
    for sampler in _SAMPLERS:
        rows.extend(sampler(rng) for _ in range(n))
    seen: set[str] = set()
    unique = []
    for row in rows:
        key = json.dumps(row, sort_keys=True)
        if key not in seen:
            seen.add(key)
            unique.append(row)
    return unique


def format_row(row: Row) -> str:
    """One metadata line exactly as GenEval writes it (``json.dumps`` defaults, no trailing newline)."""
    return json.dumps(row)


def write_prompts(path: str | Path, seed: int = 43, n: int = 100, prompts_txt: str | Path | None = None) -> Path:
    """Write the suite's ``evaluation_metadata.jsonl`` to ``path`` (and the plain prompt list if asked)."""
    rows = generate_suite(seed=seed, n=n)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(format_row(row) + "\n" for row in rows), encoding="utf-8")
    if prompts_txt is not None:
        Path(prompts_txt).write_text("".join(row["prompt"] + "\n" for row in rows), encoding="utf-8")
    logger.info("wrote %d GenEval rows (seed %d, n %d) to %s", len(rows), seed, n, path)
    return path


# ---------------------------------------------------------------------------------------- validation


def _check_clause(
    clause: Any, where: str, index: int, exclude: bool, classes: tuple[str, ...], colors: tuple[str, ...]
) -> None:
    allowed = {"class", "count"} if exclude else {"class", "count", "color", "position"}
    if not isinstance(clause, dict):
        raise MetadataError(f"{where}: clause {index} is {type(clause).__name__}, expected an object")
    if extra := sorted(set(clause) - allowed):
        raise MetadataError(f"{where}: clause {index} has unknown key(s) {extra}; allowed: {sorted(allowed)}")
    if clause.get("class") not in classes:
        vocabulary = "a GenEval (COCO) class" if classes is CLASSES else f"one of {list(classes)}"
        raise MetadataError(f"{where}: clause {index} class {clause.get('class')!r} is not {vocabulary}")
    count = clause.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise MetadataError(f"{where}: clause {index} count {count!r} must be an integer >= 1")
    if "color" in clause and clause["color"] not in colors:
        raise MetadataError(f"{where}: clause {index} color {clause['color']!r} not in {list(colors)}")
    if "position" in clause:
        _check_position(clause["position"], where, index)


def _check_position(position: Any, where: str, index: int) -> None:
    ok = isinstance(position, (list, tuple)) and len(position) == 2
    relation, target = position if ok else (None, None)
    if relation not in RELATIONS:
        raise MetadataError(
            f"{where}: clause {index} position {position!r} must be [relation, k], relation in {list(RELATIONS)}"
        )
    if isinstance(target, bool) or not isinstance(target, int) or not 0 <= target < index:
        raise MetadataError(f"{where}: clause {index} position target {target!r} must index an earlier include clause")


def check_metadata(
    row: Any, where: str = "metadata", classes: tuple[str, ...] = CLASSES, colors: tuple[str, ...] = COLORS
) -> Row:
    """Validate one metadata row; raise ``MetadataError`` with a one-line message naming ``where``.
    ``classes`` and ``colors``: the vocabulary (GenEval's; the toy world passes its own)."""
    if not isinstance(row, dict):
        raise MetadataError(f"{where}: expected a JSON object, got {type(row).__name__}")
    if row.get("tag") not in TASKS:
        raise MetadataError(f"{where}: tag {row.get('tag')!r} not in {list(TASKS)}")
    if not isinstance(row.get("prompt"), str) or not row["prompt"]:
        raise MetadataError(f"{where}: 'prompt' must be a non-empty string")
    if not isinstance(row.get("include"), list) or not row["include"]:
        raise MetadataError(f"{where}: 'include' must be a non-empty list of clauses")
    if not isinstance(row.get("exclude", []), list):
        raise MetadataError(f"{where}: 'exclude' must be a list of clauses")
    for i, clause in enumerate(row["include"]):
        _check_clause(clause, where, i, False, classes, colors)
    for i, clause in enumerate(row.get("exclude", [])):
        _check_clause(clause, f"{where} (exclude)", i, True, classes, colors)
    return row


def load_metadata(path: str | Path) -> list[Row]:
    """Read and validate a GenEval metadata JSONL file (ours or the official one); blank lines are skipped."""
    path = Path(path)
    rows = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise MetadataError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from None
        rows.append(check_metadata(row, where))
    return rows
