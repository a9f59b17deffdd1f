"""The HTML page: sample grids as data URIs, the config tree, the run table and the page itself."""

from __future__ import annotations

import base64
import html
import io
import json
import logging
import struct
from pathlib import Path
from typing import Any

from flowrl.configkit import ConfigError
from flowrl.report.assets import CHART_JS, CSS, HEALTH_JS
from flowrl.report.layout import PALETTE, PHASES, duration, fmt, phase_table, sections, summary
from flowrl.report.runs import Run, load_run, series_of, unique_names

logger = logging.getLogger(__name__)

REPORT_FILE = "report.html"
MAX_GRIDS = 12  # sample grids per kind (rollout, evaluation) and run; evenly spaced, first and last kept
BIG_IMAGE_BYTES = 400_000  # a grid larger than this is shrunk (longest side 1024 px, JPEG) before embedding


# ------------------------------------------------------------------------------------------ images
def _png_size(data: bytes) -> tuple[int, int] | None:
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        return struct.unpack(">II", data[16:24])
    return None


def _embed_image(path: Path) -> tuple[str, int] | None:
    """A data URI for a grid and its width in px; a large grid is shrunk to keep the page small."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    mime, size = "image/png", _png_size(data)
    if len(data) > BIG_IMAGE_BYTES:
        try:
            from PIL import Image

            with Image.open(io.BytesIO(data)) as im:
                im = im.convert("RGB")
                im.thumbnail((1024, 1024))
                buf = io.BytesIO()
                im.save(buf, format="JPEG", quality=85)
                data, mime, size = buf.getvalue(), "image/jpeg", im.size
        except Exception as exc:  # noqa: BLE001 - an unreadable image is embedded as it is (the browser may show it)
            logger.warning("report: %s not shrunk (%s); embedded as it is", path, exc)
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}", (size[0] if size else 256)


def _spread(items: list, n: int) -> list:
    """At most n items, evenly spaced, the first and the last kept."""
    if len(items) <= n:
        return items
    if n <= 1:
        return items[-1:]
    idx = sorted({round(i * (len(items) - 1) / (n - 1)) for i in range(n)})
    return [items[i] for i in idx]


def grids_html(runs: list[Run], max_grids: int) -> str:
    parts = []
    for i, run in enumerate(runs):
        for kind, label in (("iter", "rollouts after iteration"), ("eval", "evaluation after iteration")):
            grids = run.grids.get(kind, [])
            if not grids:
                continue
            shown = _spread(grids, max_grids)
            figs = []
            for n, p in shown:
                embedded = _embed_image(p)
                if embedded is None:
                    continue
                uri, width = embedded
                disp = min(max(width, 200), 360)
                pix = ' class="px"' if width < disp else ""
                figs.append(
                    f'<figure><img{pix} src="{uri}" width="{disp}" alt="{html.escape(p.name)}">'
                    f"<figcaption>{n}</figcaption></figure>"
                )
            more = f" ({len(shown)} of {len(grids)} shown)" if len(shown) < len(grids) else ""
            parts.append(
                f'<h3><span class="sw" style="background:{PALETTE[i % len(PALETTE)]}"></span>'
                f"{html.escape(run.name)}: {label}{more}</h3>"
                f'<div class="strip">{"".join(figs)}</div>'
            )
    return "".join(parts)


# ------------------------------------------------------------------------------------------ config
def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict) and tree:
        out: dict[str, Any] = {}
        for k, v in tree.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: tree}


def _value(v: Any) -> str:
    return html.escape(json.dumps(v) if not isinstance(v, str) else v)


def _tree(node: Any, depth: int = 0) -> str:
    if isinstance(node, dict) and node:
        items = []
        for k, v in node.items():
            if isinstance(v, dict) and v:
                items.append(
                    f"<details{' open' if depth == 0 else ''}><summary>{html.escape(str(k))}</summary>"
                    f"{_tree(v, depth + 1)}</details>"
                )
            else:
                items.append(
                    f'<div class="kv"><span class="k">{html.escape(str(k))}</span>: '
                    f'<span class="v">{_value(v)}</span></div>'
                )
        return f'<div class="tree">{"".join(items)}</div>'
    return f'<div class="kv"><span class="v">{_value(node)}</span></div>'


def config_html(runs: list[Run]) -> str:
    parts = []
    configs = [r.config for r in runs]
    if len(runs) > 1 and any(c is not None for c in configs):
        flats = [_flat(c) if c is not None else {} for c in configs]
        keys = sorted(set().union(*flats))
        diff = [k for k in keys if len({json.dumps(f.get(k, "<absent>"), sort_keys=True) for f in flats}) > 1]
        head = "".join(f"<th>{html.escape(r.name)}</th>" for r in runs)
        body = "".join(
            f"<tr><th>{html.escape(k)}</th>"
            + "".join(f"<td>{_value(f[k]) if k in f else '<i>absent</i>'}</td>" for f in flats)
            + "</tr>"
            for k in diff
        )
        parts.append(
            f"<h3>Keys that differ ({len(diff)})</h3>"
            f'<table class="diff"><thead><tr><th>key</th>{head}</tr></thead><tbody>{body}</tbody></table>'
        )
    for i, run in enumerate(runs):
        sw = f'<span class="sw" style="background:{PALETTE[i % len(PALETTE)]}"></span>'
        if run.config is None:
            parts.append(f"<p>{sw}{html.escape(run.name)}: {html.escape(run.config_error or 'no config.yaml')}</p>")
            continue
        extra = ""
        if run.method_state:
            extra = f"<details><summary>method_state.json</summary><pre>{html.escape(run.method_state)}</pre></details>"
        parts.append(
            f'<details class="config"{" open" if len(runs) == 1 else ""}><summary>{sw}'
            f"{html.escape(run.name)}: config.yaml</summary>{_tree(run.config)}{extra}</details>"
        )
    return "".join(parts)


# ------------------------------------------------------------------------------------------ page
def summary_html(runs: list[Run], sums: list[dict[str, Any]]) -> str:
    head = (
        "<tr><th>run</th><th>status</th><th>iterations</th><th>method</th><th>reward</th><th>model</th>"
        "<th>reward/mean first → last</th><th>eval/reward/mean first → last</th><th>logged wall time</th></tr>"
    )
    rows = []
    for i, (run, s) in enumerate(zip(runs, sums)):
        notes = []
        if s["skipped"]:
            notes.append(f"{s['skipped']} skipped")
        if run.bad_lines:
            notes.append(f"{run.bad_lines} unreadable metrics line(s) left out")
        note = f' <span class="note">({"; ".join(notes)})</span>' if notes else ""
        window = f' <span class="note">(means of {s["window"]})</span>' if s["window"] > 1 else ""
        rows.append(
            f'<tr><td><span class="sw" style="background:{PALETTE[i % len(PALETTE)]}"></span>'
            f'<b>{html.escape(s["name"])}</b><br><span class="note">{html.escape(s["path"])}</span></td>'
            f"<td>{s['status']}{note}</td><td>{s['iterations']}</td><td>{html.escape(str(s['method'] or '–'))}</td>"
            f"<td>{html.escape(s['reward'] or '–')}</td><td>{html.escape(str(s['model'] or '–'))}</td>"
            f"<td>{fmt(s['first'])} → {fmt(s['last'])}{window}</td>"
            f"<td>{fmt(s['eval_first'])} → {fmt(s['eval_last'])}</td><td>{duration(s['wall'])}</td></tr>"
        )
    return f'<table class="summary"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'


def render(runs: list[Run], max_grids: int = MAX_GRIDS) -> str:
    """The report page for loaded runs (names made unique first)."""
    unique_names(runs)
    all_series = [series_of(r.rows) for r in runs]
    layout = sections(all_series)
    sums = [summary(r, s) for r, s in zip(runs, all_series)]
    data = {
        "runs": [
            {"name": r.name, "color": PALETTE[i % len(PALETTE)], "series": s}
            for i, (r, s) in enumerate(zip(runs, all_series))
        ],
        "sections": layout,
        "phases": list(PHASES),
    }
    payload = json.dumps(data, allow_nan=False, separators=(",", ":")).replace("<", "\\u003c")
    nav, body = [], []
    for sec in layout:
        nav.append(f'<a href="#{sec["id"]}">{html.escape(sec["title"])}</a>')
        extra = ""
        if sec.get("phases"):
            bars = '<div class="grid"><div class="chart wide" id="phase-bars"></div></div>'
            extra = phase_table(runs, all_series) + bars
        charts = "".join(
            f'<div class="chart" data-sec="{sec["id"]}" data-i="{j}"></div>' for j in range(len(sec["charts"]))
        )
        body.append(
            f'<section id="{sec["id"]}"><h2>{html.escape(sec["title"])}</h2>{extra}'
            f'<div class="grid">{charts}</div></section>'
        )
    grids = grids_html(runs, max_grids)
    if grids:
        nav.append('<a href="#samples">Samples</a>')
        body.append(f'<section id="samples"><h2>Sample grids through training</h2>{grids}</section>')
    nav.append('<a href="#config">Config</a>')
    body.append(f'<section id="config"><h2>Config</h2>{config_html(runs)}</section>')
    legend = "".join(
        f'<span class="lg"><span class="sw" style="background:{PALETTE[i % len(PALETTE)]}"></span>'
        f"{html.escape(r.name)}</span>"
        for i, r in enumerate(runs)
    )
    title = "flowrl report: " + " vs ".join(r.name for r in runs)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{html.escape(title)}</title>'
        f'<style>{CSS}</style></head><body data-charts="0" data-errors="0" data-rendered="0">'
        f"<script>{HEALTH_JS}</script>"
        f'<header><h1>{html.escape(title)}</h1><div class="legend">{legend}</div>'
        '<div class="controls"><label>smoothing (EMA) <input type="range" id="smooth" min="0" max="0.99" '
        'step="0.01" value="0.6"> <span id="smooth-v">0.60</span></label>'
        '<label><input type="checkbox" id="band" checked> ±std band</label>'
        '<label><input type="checkbox" id="raw" checked> raw values</label></div>'
        f"<nav>{''.join(nav)}</nav></header><main>"
        f'<section id="summary"><h2>Runs</h2>{summary_html(runs, sums)}</section>{"".join(body)}</main>'
        '<div id="tip"></div>'
        f'<script type="application/json" id="flowrl-data">{payload}</script>'
        f"<script>{CHART_JS}</script></body></html>\n"
    )


def write_report(
    specs: list[str | Path], output: str | Path | None = None, max_grids: int = MAX_GRIDS, force: bool = False
) -> Path:
    """Read the run folders and write the page; returns its path (default RUN/report.html for one run,
    ./report.html for several; an existing folder as ``output`` gets report.html inside it). A file there
    already is replaced only inside the run folder or with ``force``."""
    if not specs:
        raise ConfigError("report: give at least one run folder")
    runs = [load_run(s) for s in specs]
    if output is None:
        out = runs[0].path / REPORT_FILE if len(runs) == 1 else Path(REPORT_FILE)
    else:
        out = Path(output).expanduser()
        if out.is_dir():
            out = out / REPORT_FILE
    if not out.parent.is_dir():
        raise ConfigError(f"report: -o: no folder {str(out.parent)!r} to write {out.name!r} in")
    if not (output is None and len(runs) == 1):  # a run's own report.html is the report's to rewrite
        from flowrl.commands import refuse_overwrite

        try:
            refuse_overwrite([out], "-o", force)
        except ValueError as exc:
            raise ConfigError(f"report: {exc}") from None
    text = render(runs, max_grids=max_grids)
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"report: cannot write {str(out)!r} ({exc.strerror or exc})") from None
    return out
