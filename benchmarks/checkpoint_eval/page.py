"""The results of ``flowrl eval checkpoint`` as a Markdown table and as one self-contained HTML page (the report's
style sheet; sample images as data URIs, base beside checkpoint for the same prompt and seed)."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SAMPLES_PER_BENCHMARK = 4  # prompts shown per benchmark on the page (image 0 of each)


def _fmt(value: float) -> str:
    return f"{value:.4f}" if abs(value) < 100 else f"{value:.2f}"


def _delta(value: float) -> str:
    return ("+" if value >= 0 else "") + _fmt(value)


def _settings_line(b: dict[str, Any]) -> str:
    s = b["settings"]
    return (
        f"{b['prompts']} prompt{'s' if b['prompts'] != 1 else ''} x {s['images_per_prompt']}, {s['height']}x{s['width']} px, {s['steps']} steps, "
        f"guidance {s['guidance_scale']:g}, text length {s['max_sequence_length']}, seed {s['seed']}"
        + (f", preset {b['preset']}" if b.get("preset") else "")
    )


def results_markdown(results: dict[str, Any]) -> str:
    """metric | base | checkpoint | delta, one section row per benchmark with its settings."""
    lines = [
        f"Checkpoint: {results['checkpoint']['description']}",
        f"Base: {results['models']['base']['path']} ({results['models']['base']['pipeline']})",
        "",
        "| metric | base | checkpoint | delta |",
        "|---|---:|---:|---:|",
    ]
    for name, bench in results["benchmarks"].items():
        lines.append(f"| **{name}** ({_settings_line(bench)}) | | | |")
        for metric, v in bench["metrics"].items():
            lines.append(f"| {metric} | {_fmt(v['base'])} | {_fmt(v['checkpoint'])} | {_delta(v['delta'])} |")
    notes = [
        f"- {name}, {key}: {text}" for name, b in results["benchmarks"].items() for key, text in b["notes"].items()
    ]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def _table_html(results: dict[str, Any]) -> str:
    rows = []
    for name, bench in results["benchmarks"].items():
        rows.append(
            f'<tr><th colspan="4">{html.escape(name)} <span class="note">{html.escape(_settings_line(bench))}'
            "</span></th></tr>"
        )
        for metric, v in bench["metrics"].items():
            color = "#0b6e4f" if v["delta"] > 0 else "#b03a2e" if v["delta"] < 0 else "#555"
            rows.append(
                f"<tr><td>{html.escape(metric)}</td><td>{_fmt(v['base'])}</td><td>{_fmt(v['checkpoint'])}</td>"
                f'<td style="color:{color}">{_delta(v["delta"])}</td></tr>'
            )
    head = "<tr><th>metric</th><th>base</th><th>checkpoint</th><th>delta</th></tr>"
    return f'<table class="summary"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'


def _notes_html(results: dict[str, Any]) -> str:
    notes = [
        f"<li>{html.escape(name)}, {html.escape(key)}: {html.escape(text)}</li>"
        for name, b in results["benchmarks"].items()
        for key, text in b["notes"].items()
    ]
    return f'<ul class="note">{"".join(notes)}</ul>' if notes else ""


def _scores_by_file(folder: Path) -> dict[str, dict[str, Any]]:
    path = folder / "scores" / "scores.jsonl"
    if not path.is_file():
        return {}
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {r["file"]: r for r in rows}


def _figure(folder: Path, rel: str, label: str, metrics: Sequence[str]) -> str:
    from flowrl.report.page import _embed_image

    embedded = _embed_image(folder / "images" / rel)
    if embedded is None:
        return f"<figure><figcaption>{html.escape(label)}: missing</figcaption></figure>"
    uri, width = embedded
    shown = min(max(width, 128), 256)
    pix = ' class="px"' if width < shown else ""
    row = _scores_by_file(folder).get(rel, {})
    values = " ".join(f"{m} {_fmt(row[m])}" for m in metrics if isinstance(row.get(m), (int, float)))
    caption = html.escape(label) + (f'<br><span class="note">{html.escape(values)}</span>' if values else "")
    return f'<figure><img{pix} src="{uri}" width="{shown}" alt="{html.escape(rel)}"><figcaption>{caption}</figcaption></figure>'


def samples_html(out: Path, results: dict[str, Any], items: dict[str, list[dict[str, Any]]]) -> str:
    parts = []
    for name, bench in results["benchmarks"].items():
        prompts_file = out / "base" / name / "images" / "prompts.jsonl"
        if not prompts_file.is_file():
            continue
        rows = [json.loads(line) for line in prompts_file.read_text(encoding="utf-8").splitlines() if line.strip()]
        metrics = [m for m in bench["metrics"] if "/" not in m]
        parts.append(f"<h3>{html.escape(name)}</h3>")
        for row in rows[:SAMPLES_PER_BENCHMARK]:
            rel = row["images"][0]
            figs = "".join(_figure(out / model / name, rel, model, metrics) for model in ("base", "checkpoint"))
            parts.append(f'<p class="note">{html.escape(row["prompt"])}</p><div class="strip">{figs}</div>')
    return "".join(parts)


def write_page(out: Path, results: dict[str, Any], items: dict[str, list[dict[str, Any]]]) -> Path:
    """``OUT/report.html``: the models, the table and sample images (base beside checkpoint)."""
    from flowrl.report.assets import CSS

    ckpt, base = results["checkpoint"], results["models"]["base"]
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in ckpt.get("notes") or [])
    title = "flowrl eval checkpoint"
    body = (
        f"<p><b>base</b>: {html.escape(str(base['path']))} ({html.escape(base['pipeline'])})<br>"
        f"<b>checkpoint</b>: {html.escape(ckpt['description'])}"
        + (f" <span class='note'>loaded as {html.escape(ckpt['converted'])}</span>" if ckpt.get("converted") else "")
        + f"</p>{f'<ul>{notes}</ul>' if notes else ''}"
        f"<section id='results'><h2>Results</h2>{_table_html(results)}{_notes_html(results)}</section>"
        f"<section id='samples'><h2>Samples (same prompt and seed)</h2>{samples_html(out, results, items)}</section>"
    )
    text = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{CSS}.strip figure{{max-width:280px}}</style></head><body>"
        f"<header><h1>{title}</h1></header><main>{body}</main></body></html>\n"
    )
    path = out / "report.html"
    path.write_text(text, encoding="utf-8")
    return path
