"""UniGenBench aggregation: every (image, testpoint) that the judge scored is one 0/1 trial.

    sub-dimension accuracy  = correct / scored trials of that testpoint name, over all images
    primary accuracy        = the same over every testpoint whose name starts with the primary's name
    overall                 = unweighted mean of the primary accuracies that have scored trials
                              (the leaderboards' convention; the official script prints no overall)

Nothing drops out silently (the official script skips failed judge calls from numerator and denominator
alike): every dimension carries ``unscored``, the trials of images the judge could not score, and the
summary counts unscored images by cause (``request_error``, ``parse_error``, ``missing_image``,
``image_error``, ``not_judged``, and under the official rules ``dropped``: a reply the official parser
accepts and its scorer skips) and the prompt rows that failed validation (``invalid_rows``, worth
``images_per_prompt`` images each). Under the official protocol, correct / total of every dimension is
what the official scorer counts on the same replies.

``protocol_status`` says whether a run may be called official: only ``--protocol official`` with the
official attempts, images per prompt, max_tokens and a remote judge, every row of a CSV that is byte for
byte one of the official copy's prompt CSVs (a subset or an edited extract is not), the CSV and protocol
files unmodified from their git commits, no image lost to failed calls, and no reply that would have
stopped the official run. A lenient run is never called official.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .data import InvalidRow, TestCase
from .dimensions import DIMENSIONS, PRIMARY, primary_of
from .official import version_label

OK = "ok"
DROPPED = "dropped"
OFFICIAL_ATTEMPTS = 11


def _cell() -> dict[str, Any]:
    return {"correct": 0, "total": 0, "unscored": 0, "accuracy": None}


def _finish(cells: dict[str, dict[str, Any]]) -> None:
    for cell in cells.values():
        cell["accuracy"] = cell["correct"] / cell["total"] if cell["total"] else None


def aggregate(
    cases: Sequence[TestCase],
    records: Mapping[tuple[int, int], Mapping[str, Any]],
    images_per_prompt: int,
    invalid: Sequence[InvalidRow] = (),
) -> dict[str, Any]:
    """The summary of judged ``records`` (keyed by (index, image)) over ``cases`` x ``images_per_prompt``."""
    sub = {name: _cell() for subs in DIMENSIONS.values() for name in subs}
    primary = {name: _cell() for name in PRIMARY}
    unscored_images: dict[str, int] = {}
    scored_images = 0
    for case in cases:
        for k in range(images_per_prompt):
            record = records.get((case.index, k))
            status = record.get("status", "not_judged") if record else "not_judged"
            if status == OK:
                scored_images += 1
                for dim, score in zip(case.dimensions, record["scores"]):
                    for cell in (sub[dim], primary[primary_of(dim)]):
                        cell["total"] += 1
                        cell["correct"] += int(score == 1)
            else:
                unscored_images[status] = unscored_images.get(status, 0) + 1
                for dim in case.dimensions:
                    sub[dim]["unscored"] += 1
                    primary[primary_of(dim)]["unscored"] += 1
    _finish(sub)
    _finish(primary)
    present = [p["accuracy"] for p in primary.values() if p["accuracy"] is not None]
    scored = sum(c["total"] for c in primary.values())
    return {
        "overall": sum(present) / len(present) if present else None,
        "overall_rule": "unweighted mean of the primary-dimension accuracies with scored trials",
        "testpoint_accuracy": sum(c["correct"] for c in primary.values()) / scored if scored else None,
        "primary_dimensions": primary,
        "sub_dimensions": sub,
        "missing_primary_dimensions": [name for name, p in primary.items() if not p["total"]],
        "prompts": len(cases),
        "images_per_prompt": images_per_prompt,
        "images": len(cases) * images_per_prompt,
        "scored_images": scored_images,
        "scored_testpoints": scored,
        "unscored": {
            "images": dict(sorted(unscored_images.items())),
            "images_total": sum(unscored_images.values()),
            "testpoints": sum(c["unscored"] for c in primary.values()),
            "invalid_rows": len(invalid),
            "invalid_row_images": len(invalid) * images_per_prompt,
            "invalid_row_details": [vars(r) for r in invalid],
        },
    }


def protocol_status(run: Mapping[str, Any], summary: Mapping[str, Any]) -> dict[str, Any]:
    """``{"name", "official", "deviations", "label"}``: ``official`` is True only for a run that follows the
    official protocol in every respect that moves the numbers (see the module docstring)."""
    name = run.get("protocol", "lenient")
    judge = run.get("judge") or {}
    deviations: list[str] = []
    if name != "official":
        return {
            "name": name,
            "official": False,
            "deviations": ["flowrl's own template and lenient parser"],
            "label": "lenient (flowrl's template and parser): NOT UniGenBench's official protocol; do not report "
            "these numbers as official or compare them with the leaderboard",
        }
    if run.get("attempts") != OFFICIAL_ATTEMPTS:
        deviations.append(f"attempts {run.get('attempts')} (official {OFFICIAL_ATTEMPTS})")
    if run.get("images_per_prompt") != 4:
        deviations.append(f"images per prompt {run.get('images_per_prompt')} (official 4)")
    if judge.get("max_tokens") != 4096:
        deviations.append(f"max_tokens {judge.get('max_tokens')} (official 4096)")
    if judge.get("backend") != "openai":
        deviations.append(f"{judge.get('backend')} back end (official: a served endpoint)")
    if run.get("limit") is not None:
        deviations.append(f"only the first {run['limit']} prompts")
    invalid = summary.get("unscored", {}).get("invalid_rows", 0)
    if invalid:
        deviations.append(f"{invalid} invalid prompt row(s) unscored (the official run aborts on them)")
    prompts_version = (run.get("prompts") or {}).get("version") or {}
    if prompts_version.get("git_modified"):
        deviations.append("the prompt CSV differs from its git commit")
    if ((run.get("official") or {}).get("version") or {}).get("git_modified"):
        deviations.append("the official protocol file differs from its git commit")
    deviations += _prompt_file_deviations(run.get("prompts") or {})
    failed = summary.get("unscored", {}).get("images", {}).get("request_error", 0)
    if failed:
        deviations.append(f"{failed} image(s) unscored: their judge calls failed on every attempt")
    crashes = summary.get("official_crashes") or {}
    if crashes.get("replies"):
        deviations.append(
            f"{crashes['replies']} image(s) got a reply that would have stopped the official run "
            f"(first: {crashes.get('first')}); flowrl asked again or dropped it"
        )
    official = not deviations
    label = (
        "official (UniGenBench's template, definitions, parse and scoring rules and requests); comparable with "
        "the leaderboard for the same judge model"
        if official
        else "official rules with deviations (" + "; ".join(deviations) + "): not comparable with the leaderboard"
    )
    return {"name": name, "official": official, "deviations": deviations, "label": label}


def _prompt_file_deviations(prompts: Mapping[str, Any]) -> list[str]:
    """The prompt CSV must be one of the official copy's CSVs, byte for byte (``official.prompt_check``)."""
    check = prompts.get("official_check")
    if check is None:
        return ["the prompt CSV was not compared with the official copy's CSVs"]
    if check.get("official_set"):
        return []
    official = check.get("official") or {}
    if not official:
        return ["the official copy has no data/test_prompts_*.csv to compare the prompt CSV with"]
    sets = ", ".join(f"{name} ({rows} rows)" for name, rows in official.items())
    return [
        f"the prompt CSV ({check.get('rows')} rows, sha256 {str(prompts.get('sha256'))[:12]}) is not one of the "
        f"official CSVs ({sets})"
    ]


# ------------------------------------------------------------------------------------------- markdown


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def _table(cells: Mapping[str, Mapping[str, Any]], title: str) -> list[str]:
    lines = [f"| {title} | accuracy (%) | correct / scored | unscored |", "|---|---:|---:|---:|"]
    for name, c in cells.items():
        if c["total"] or c["unscored"]:
            lines.append(f"| {name} | {_pct(c['accuracy'])} | {c['correct']} / {c['total']} | {c['unscored']} |")
    return lines


def summary_markdown(summary: Mapping[str, Any]) -> str:
    """The summary as Markdown: overall, primary and sub-dimension tables, unscored counts, the judge."""
    u = summary["unscored"]
    causes = ", ".join(f"{k} {v}" for k, v in u["images"].items())
    status = summary.get("protocol") or {"name": "lenient", "official": False, "label": "lenient (not official)"}
    title = "official protocol" if status["official"] else (
        "official rules, not comparable" if status["name"] == "official" else "lenient protocol, not official"
    )  # fmt: skip
    lines = [
        f"# UniGenBench ({title})",
        "",
        f"Protocol: {status['label']}.",
        "",
        (
            f"**Overall: {_pct(summary['overall'])}** (mean of the primary dimensions with scored trials); "
            f"all testpoints pooled: {_pct(summary['testpoint_accuracy'])}."
        ),
        "",
        *_table(summary["primary_dimensions"], "primary dimension"),
        "",
        *_table(summary["sub_dimensions"], "sub-dimension"),
        "",
        (
            f"Prompts: {summary['prompts']}; images: {summary['images']} ({summary['images_per_prompt']} per "
            f"prompt); scored images: {summary['scored_images']}; scored testpoints: {summary['scored_testpoints']}."
        ),
        (
            f"Unscored: {u['images_total']} images ({causes or 'none'}), {u['testpoints']} testpoints; "
            f"invalid prompt rows: {u['invalid_rows']} ({u['invalid_row_images']} images)."
        ),
    ]
    for row in u["invalid_row_details"]:
        lines.append(f"- line {row['line']} (index {row['index']}): {row['reason']}")
    if summary["missing_primary_dimensions"]:
        lines.append(f"No scored trials (left out of overall): {', '.join(summary['missing_primary_dimensions'])}.")
    judge = summary.get("judge")
    if judge:
        where = f" at {judge['base_url']}" if judge.get("base_url") else ""
        request = judge.get("request") or {}
        sent = f"; requests: {request.get('style')}, {request.get('image')}" if request else ""
        lines += [
            "",
            (
                f"Judge: {judge['model']} (version {judge.get('version') or 'not pinned'}; {judge['backend']}{where}); "
                f"template sha256 {str(judge.get('template_sha256'))[:12]}; max_tokens {judge.get('max_tokens')}{sent}."
            ),
        ]
    prompt_set = summary.get("prompt_set") or {}
    if prompt_set:
        lines.append(
            f"Prompts: {prompt_set.get('source')} (CSV version: {version_label(prompt_set.get('version'))}; "
            f"sha256 {str(prompt_set.get('sha256'))[:12]})."
        )
    official = summary.get("official")
    if official:
        lines.append(
            f"Official copy: {official.get('root')}, {official.get('source')} ({version_label(official.get('version'))})."
        )
    attempts = summary.get("attempts")
    if attempts:
        lines.append(
            f"Attempts per image: {attempts.get('budget')} (official {attempts.get('official_budget')}); "
            f"most used: {attempts.get('most_used')}."
        )
    return "\n".join(lines) + "\n"


def write_summary(summary: Mapping[str, Any], out_dir: str | Path) -> tuple[Path, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "summary.json", out / "summary.md"
    json_path.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    md_path.write_text(summary_markdown(summary), encoding="utf-8")
    return json_path, md_path
