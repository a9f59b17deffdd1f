"""GenEval 2's prompt file (``geneval2_data.jsonl``: 800 prompts, 6012 questions), checked row by row.

The file is licensed CC BY-NC 4.0 (facebookresearch/GenEval2), so flowrl does not ship it: ``load_items``
reads the user's copy (a file, or a checkout of the repository), else ``$GENEVAL2_DATA``, else a copy fetched
once from the pinned commit into flowrl's cache (``benchmarks.datafiles``; one line when offline).

Row: ``{"prompt", "atom_count", "vqa_list": [[question, answer], ...], "skills": [skill per question]}``.
An item is the row plus ``key`` (its 0-based row number as text: the image files' stem) and ``index``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flowrl.benchmarks.datafiles import DataSpec, resolve, sha256_of

from .scoring import SKILLS

OFFICIAL_COMMIT = "a6e82d2289e8d418f27f0adee77908b07060eea3"  # head on 2026-01-07; the data is from b323bf4d
OFFICIAL_SHA256 = "09233adbc9f877fba205f1a20efa4a8640e7e62a91dfd55893562bed8a928e43"
OFFICIAL_PROMPTS, OFFICIAL_QUESTIONS = 800, 6012
SPEC = DataSpec(
    name="GenEval 2 prompts",
    env="GENEVAL2_DATA",
    inside="geneval2_data.jsonl",
    url=f"https://raw.githubusercontent.com/facebookresearch/GenEval2/{OFFICIAL_COMMIT}/geneval2_data.jsonl",
    cache_name=f"geneval2_data-{OFFICIAL_COMMIT[:8]}.jsonl",
    sha256=OFFICIAL_SHA256,
    note="licence CC BY-NC 4.0",
)


def check_row(row: Any, where: str) -> dict[str, Any]:
    """One row, or ValueError naming ``where`` and the problem."""
    if not isinstance(row, dict):
        raise ValueError(f"{where}: not a JSON object")
    prompt, vqa, skills = row.get("prompt"), row.get("vqa_list"), row.get("skills")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"{where}: 'prompt' must be a non-empty string")
    if not isinstance(vqa, list) or not vqa:
        raise ValueError(f"{where}: 'vqa_list' must be a non-empty list of [question, answer]")
    for pair in vqa:
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) and x for x in pair)):
            raise ValueError(f"{where}: vqa_list entry {pair!r} is not [question, answer]")
    if not isinstance(skills, list) or len(skills) != len(vqa):
        raise ValueError(f"{where}: 'skills' must list one skill per question ({len(vqa)})")
    unknown = [s for s in skills if s not in SKILLS]
    if unknown:
        raise ValueError(f"{where}: unknown skill {unknown[0]!r} (expected one of {', '.join(SKILLS)})")
    if not isinstance(row.get("atom_count"), int) or isinstance(row.get("atom_count"), bool):
        raise ValueError(f"{where}: 'atom_count' must be an integer")
    return row


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    rows = []
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
        rows.append(check_row(row, f"{path}:{lineno}"))
    if not rows:
        raise ValueError(f"{path}: no GenEval 2 rows")
    seen: dict[str, int] = {}
    for i, row in enumerate(rows):
        if row["prompt"] in seen:  # the official image map is keyed by prompt
            raise ValueError(f"{path}: row {i} repeats the prompt of row {seen[row['prompt']]}")
        seen[row["prompt"]] = i
    return rows


def load_items(source: str | Path | None = None) -> list[dict[str, Any]]:
    """Every prompt as ``{"key", "index", "prompt", "atom_count", "vqa_list", "skills"}`` in file order."""
    path = resolve(source, SPEC)
    return [{"key": str(i), "index": i, **row} for i, row in enumerate(read_rows(path))]


def describe_source(source: str | Path | None = None) -> dict[str, Any]:
    """Where the prompts came from and whether they are the official file, byte for byte."""
    path = resolve(source, SPEC)
    digest = sha256_of(path)
    return {"source": str(Path(path).resolve()), "sha256": digest, "official": digest == OFFICIAL_SHA256}
