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
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import json
import logging
import math
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowrl.config import ConfigError

logger = logging.getLogger(__name__)

REPORT_FILE = "report.html"
MAX_GRIDS = 12  # sample grids per kind (rollout, evaluation) and run; evenly spaced, first and last kept
BIG_IMAGE_BYTES = 400_000  # a grid larger than this is shrunk (longest side 1024 px, JPEG) before embedding
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
PHASES = ("rollout", "reward", "advantage", "update")  # inside timing_s/iteration; eval is timed apart

# the order of the known charts in their sections; anything else follows, sorted
POLICY_ORDER = ("loss", "pg_loss", "kl", "approx_kl", "clip_frac", "ratio_mean", "grad_norm", "onpolicy_logp_diff")
SECTION_TITLES = {
    "reward": "Training reward",
    "eval": "Evaluation reward",
    "policy": "Policy",
    "adv": "Advantages",
    "method": "Method",
    "monitor": "Monitors",
    "time": "Time and cost",
}


# ------------------------------------------------------------------------------------------ reading runs
@dataclass
class Run:
    path: Path
    name: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: int = 0
    config: dict[str, Any] | None = None
    config_error: str | None = None
    grids: dict[str, list[tuple[int, Path]]] = field(default_factory=dict)  # "iter"/"eval" -> (N, path)
    method_state: str | None = None
    checkpoints: list[str] = field(default_factory=list)


def load_run(spec: str | Path) -> Run:
    """A run folder's metrics, config and sample grids, or a one-line error naming the folder."""
    path = Path(spec).expanduser()
    if not path.exists():
        raise ConfigError(f"report: no run folder at {str(spec)!r}")
    if not path.is_dir():
        raise ConfigError(f"report: {str(spec)!r} is a file, not a run folder")
    metrics, config = path / "metrics.jsonl", path / "config.yaml"
    if not metrics.is_file() and not config.is_file():
        raise ConfigError(f"report: {str(spec)!r} holds no run (no metrics.jsonl or config.yaml)")
    run = Run(path=path, name=path.resolve().name or str(path))
    if metrics.is_file():
        run.rows, run.bad_lines = _read_rows(metrics)
    if config.is_file():
        import yaml

        from flowrl.config import redact_secrets

        try:
            data = yaml.safe_load(config.read_text())
            run.config = redact_secrets(data) if isinstance(data, dict) else None
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            run.config_error = f"config.yaml could not be read: {str(exc).splitlines()[0]}"
    for kind in ("iter", "eval"):
        found = []
        for p in (path / "samples").glob(f"{kind}-*.png") if (path / "samples").is_dir() else ():
            m = re.fullmatch(rf"{kind}-(\d+)\.png", p.name)
            if m and p.is_file():
                found.append((int(m.group(1)), p))
        run.grids[kind] = sorted(found)
    state = path / "method_state.json"
    if state.is_file():
        try:
            run.method_state = json.dumps(json.loads(state.read_text()), indent=1)
        except ValueError:
            run.method_state = None
    if (path / "checkpoints").is_dir():
        run.checkpoints = sorted(
            p.name for p in (path / "checkpoints").glob("iter-*") if p.is_dir() and not p.name.endswith(".tmp")
        )
    return run


def _read_rows(path: Path) -> tuple[list[dict[str, Any]], int]:
    """metrics.jsonl rows with an iteration; lines that do not parse (a running run's half-written last
    line) are counted and skipped."""
    rows, bad = [], 0
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(row, dict) and isinstance(row.get("iteration"), (int, float)):
            rows.append(row)
        else:
            bad += 1
    return rows, bad


def _number(v: Any) -> float | None | str:
    """A JSON-safe value: a finite float, None for NaN/inf, "skip" for non-numbers."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return "skip"
    return float(v) if math.isfinite(v) else None


def series_of(rows: list[dict[str, Any]]) -> dict[str, list[list[float | None]]]:
    """metric name -> [[iteration, value], ...] (value None where the run logged NaN or inf)."""
    out: dict[str, list[list[float | None]]] = {}
    for row in rows:
        x = row["iteration"]
        for key, v in row.items():
            if key in ("iteration", "skipped"):
                continue
            y = _number(v)
            if y != "skip":
                out.setdefault(key, []).append([x, y])
    return out


def _unique_names(runs: list[Run]) -> None:
    """Folder names, lengthened with parent folders (then numbered) until no two runs share one."""
    for depth in range(1, 4):
        names = ["/".join(r.path.resolve().parts[-depth:]) for r in runs]
        if len(set(names)) == len(names):
            break
    seen: dict[str, int] = {}
    for r, n in zip(runs, names):
        seen[n] = seen.get(n, 0) + 1
        r.name = n if seen[n] == 1 else f"{n} ({seen[n]})"


# ------------------------------------------------------------------------------------------ layout
def _chart(key: str, band: str | None = None, title: str | None = None) -> dict[str, Any]:
    return {"key": key, "band": band, "title": title or key}


def sections(all_series: list[dict[str, list]]) -> list[dict[str, Any]]:
    """The page's chart sections from the union of the runs' metric names; each metric charted once."""
    names = set().union(*[s.keys() for s in all_series]) if all_series else set()
    used: set[str] = set()

    def same_as(a: str, b: str) -> bool:  # a component identical to the total in every run says nothing new
        return all(s.get(a) == s.get(b) for s in all_series if a in s or b in s)

    def take(charts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for c in charts:
            if c.get("taken"):
                out.append(c)
            elif c["key"] in names and c["key"] not in used:
                c["taken"] = True
                used.add(c["key"])
                if c["band"] is not None:
                    if c["band"] in names:
                        used.add(c["band"])
                    else:
                        c["band"] = None
                out.append(c)
        return out

    def prefixed(prefix: str, order: tuple[str, ...] = ()) -> list[str]:
        keys = sorted(n for n in names if n.startswith(prefix) and n not in used)
        rank = {prefix + k: i for i, k in enumerate(order)}
        return sorted(keys, key=lambda k: (rank.get(k, len(rank)), k))

    out = []
    # training reward: the total, each component (unless it is the total), then the rest of reward/*
    charts = take([_chart("reward/mean", "reward/std", "reward/mean ± std")])
    components = sorted(
        {
            n[len("reward/") : -len("/mean")]
            for n in names
            if n.startswith("reward/") and n.endswith("/mean") and n.count("/") == 2
        }
    )
    for c in components:
        key = f"reward/{c}/mean"
        if same_as(key, "reward/mean") and same_as(f"reward/{c}/std", "reward/std"):
            used |= {key, f"reward/{c}/std"}
            continue
        charts.append(_chart(key, f"reward/{c}/std", f"{key} ± std"))
    charts += [_chart(k) for k in prefixed("reward/") if not k.endswith("/std")]
    out.append({"id": "reward", "title": SECTION_TITLES["reward"], "charts": take(charts)})
    # evaluation: the total, components, the trained reward on held-out prompts, the held-out gap
    charts = take([_chart("eval/reward/mean", "eval/reward/std", "eval/reward/mean ± std")])
    for k in prefixed("eval/reward/"):
        if k.endswith("/std") and k[: -len("/std")] + "/mean" in names:
            continue
        if k.endswith("/mean") and same_as(k, "eval/reward/mean"):
            used.add(k)
            continue
        std = k[: -len("/mean")] + "/std" if k.endswith("/mean") else None
        charts.append(_chart(k, std))
    charts += [_chart("eval/train_reward/mean"), _chart("monitor/heldout_gap")]
    charts += [_chart(k) for k in prefixed("eval/")]
    out.append({"id": "eval", "title": SECTION_TITLES["eval"], "charts": take(charts)})
    out.append(
        {
            "id": "policy",
            "title": SECTION_TITLES["policy"],
            "charts": take([_chart(k) for k in prefixed("policy/", POLICY_ORDER)]),
        }
    )
    out.append({"id": "adv", "title": SECTION_TITLES["adv"], "charts": take([_chart(k) for k in prefixed("adv/")])})
    out.append(
        {"id": "method", "title": SECTION_TITLES["method"], "charts": take([_chart(k) for k in prefixed("method/")])}
    )
    # monitors, one group per second-level prefix (monitor/diversity/*, monitor/colour/*, ...)
    groups: dict[str, list[str]] = {}
    for k in prefixed("monitor/"):
        parts = k.split("/")
        groups.setdefault("/".join(parts[:2]) if len(parts) > 2 else "monitor", []).append(k)
    for g in sorted(groups):
        out.append(
            {
                "id": "mon-" + g.replace("/", "-"),
                "title": f"Monitors: {g}/*" if g != "monitor" else "Monitors",
                "group": "monitor",
                "charts": take([_chart(k) for k in groups[g]]),
            }
        )
    timing = [f"timing_s/{p}" for p in ("iteration", *PHASES, "eval")]
    charts = [_chart(k) for k in timing] + [_chart(k) for k in prefixed("timing_s/")]
    charts += [_chart(k) for k in prefixed("cost/") + prefixed("throughput/") + prefixed("memory/")]
    out.append({"id": "time", "title": SECTION_TITLES["time"], "charts": take(charts), "phases": True})
    rest: dict[str, list[str]] = {}
    for k in sorted(names - used):
        if k.endswith("/std") and k[: -len("/std")] + "/mean" in names:
            continue  # drawn as a band, or the std of a component left out with its mean
        rest.setdefault(k.split("/")[0] if "/" in k else "other", []).append(k)
    for g in sorted(rest):
        out.append(
            {
                "id": "other-" + re.sub(r"[^A-Za-z0-9_-]", "-", g),
                "title": f"{g}/*" if g != "other" else "Other",
                "charts": take([_chart(k) for k in rest[g]]),
            }
        )
    for sec in out:
        for c in sec["charts"]:
            c.pop("taken", None)
    return [s for s in out if s["charts"] or s.get("phases")]


# ------------------------------------------------------------------------------------------ summaries
def _mean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _fmt(v: float | None, digits: int = 4) -> str:
    if v is None:
        return "–"
    if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e6):
        return f"{v:.{digits - 1}e}"
    return f"{v:#.{digits}g}" if abs(v) < 1 else f"{v:.{digits}g}"  # -0.003100, not -0.0031


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def _get(cfg: dict | None, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def summary(run: Run, series: dict[str, list]) -> dict[str, Any]:
    trained = [r for r in run.rows if isinstance(r.get("reward/mean"), (int, float)) and "skipped" not in r]
    total = _get(run.config, "train.iterations")
    done = int(max(r["iteration"] for r in trained)) + 1 if trained else 0
    k = max(1, len(trained) // 10)
    first = _mean([_number(r["reward/mean"]) for r in trained[:k]]) if trained else None
    last = _mean([_number(r["reward/mean"]) for r in trained[-k:]]) if trained else None
    evals = [p for p in series.get("eval/reward/mean", []) if p[1] is not None]
    wall = sum(y for k_ in ("timing_s/iteration", "timing_s/eval") for _, y in series.get(k_, []) if y is not None)
    finished = isinstance(total, int) and done >= total
    status = "finished" if finished else ("running or stopped" if run.rows else "no iterations yet")
    rewards = _get(run.config, "reward")
    return {
        "name": run.name,
        "path": str(run.path),
        "status": status,
        "iterations": f"{done} / {total}" if total is not None else str(done),
        "skipped": sum(1 for r in run.rows if "skipped" in r),
        "method": _get(run.config, "method.name"),
        "model": _get(run.config, "model.path"),
        "reward": ", ".join(f"{n} × {w}" for n, w in rewards.items()) if isinstance(rewards, dict) else None,
        "first": first,
        "last": last,
        "window": k,
        "eval_first": evals[0][1] if evals else None,
        "eval_last": evals[-1][1] if evals else None,
        "wall": wall or None,
    }


def phase_table(runs: list[Run], all_series: list[dict]) -> str:
    """Mean seconds per iteration and share of the iteration for each phase, then the cost totals."""

    def mean_of(s: dict, key: str) -> float | None:
        return _mean([y for _, y in s.get(key, [])])

    rows_html = []
    phases = [*PHASES, "other", "iteration", "eval"]
    have = [any(f"timing_s/{p}" in s for s in all_series) for p in phases]
    if not any(have):
        return ""
    head = "".join(
        f'<th colspan="2"><span class="sw" style="background:{PALETTE[i % len(PALETTE)]}"></span>'
        f"{html.escape(r.name)}</th>"
        for i, r in enumerate(runs)
    )
    sub = "<th>s / iteration</th><th>share</th>" * len(runs)
    for p in phases:
        cells = []
        for s in all_series:
            it = mean_of(s, "timing_s/iteration")
            if p == "other":  # the iteration's time outside the named phases (bookkeeping, monitors)
                parts = [mean_of(s, f"timing_s/{q}") for q in PHASES]
                v = (
                    it - sum(x for x in parts if x is not None)
                    if it is not None and any(x is not None for x in parts)
                    else None
                )
            else:
                v = mean_of(s, f"timing_s/{p}")
            share = f"{100 * v / it:.1f} %" if v is not None and it and p not in ("iteration", "eval") else ""
            cells.append(f"<td>{_fmt(v, 3)}</td><td>{share}</td>")
        if p == "other" or have[phases.index(p)]:
            label = {"other": "other (in iteration)", "iteration": "<b>iteration</b>", "eval": "eval (when due)"}.get(
                p, p
            )
            rows_html.append(f"<tr><th>{label}</th>{''.join(cells)}</tr>")
    cost_keys = sorted(
        set().union(*[s.keys() for s in all_series])
        & {
            "cost/nfe_total",
            "cost/reward_calls_total",
            "cost/nfe",
            "cost/reward_calls",
            "throughput/images_per_s",
            "throughput/nfe_per_s",
            "memory/peak_gib",
        }
    )
    labels = {
        "cost/nfe_total": "transformer forwards, total",
        "cost/reward_calls_total": "reward calls, total",
        "cost/nfe": "forwards / iteration",
        "cost/reward_calls": "reward calls / iteration",
        "throughput/images_per_s": "images / s",
        "throughput/nfe_per_s": "forwards / s",
        "memory/peak_gib": "peak memory GiB (max)",
    }
    for key in cost_keys:
        cells = []
        for s in all_series:
            ys = [y for _, y in s.get(key, []) if y is not None]
            if not ys:
                v = None
            else:  # totals: the last; memory: the peak; the rest: the mean over iterations
                v = ys[-1] if key.endswith("_total") else max(ys) if key.startswith("memory/") else _mean(ys)
            cells.append(f'<td colspan="2">{_fmt(v, 4)}</td>')
        rows_html.append(f"<tr><th>{labels[key]}</th>{''.join(cells)}</tr>")
    walls = []
    for s in all_series:
        w = sum(y for k in ("timing_s/iteration", "timing_s/eval") for _, y in s.get(k, []) if y is not None)
        walls.append(f'<td colspan="2">{_duration(w) if w else "–"}</td>')
    rows_html.append(f"<tr><th>logged wall time</th>{''.join(walls)}</tr>")
    return (
        f'<table class="phases"><thead><tr><th></th>{head}</tr><tr><th>phase</th>{sub}</tr></thead>'
        f"<tbody>{''.join(rows_html)}</tbody></table>"
    )


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
            f"<td>{_fmt(s['first'])} → {_fmt(s['last'])}{window}</td>"
            f"<td>{_fmt(s['eval_first'])} → {_fmt(s['eval_last'])}</td><td>{_duration(s['wall'])}</td></tr>"
        )
    return f'<table class="summary"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'


def render(runs: list[Run], max_grids: int = MAX_GRIDS) -> str:
    """The report page for loaded runs (names made unique first)."""
    _unique_names(runs)
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
        from flowrl.cli import refuse_overwrite

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


# ------------------------------------------------------------------------------------------ page assets
CSS = """
*{box-sizing:border-box}
body{margin:0;font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:#222;
background:#f6f7f9}
header{position:sticky;top:0;z-index:5;background:#fff;border-bottom:1px solid #ddd;padding:8px 16px}
h1{font-size:18px;margin:0 0 4px}
h2{font-size:16px;margin:18px 0 8px;border-bottom:1px solid #ddd;padding-bottom:3px}
h3{font-size:14px;margin:12px 0 6px}
main{padding:0 16px 40px}
nav a{margin-right:10px;color:#1f5fa8;text-decoration:none;font-size:13px}
.legend,.controls{display:flex;flex-wrap:wrap;gap:14px;align-items:center;margin:2px 0}
.lg{white-space:nowrap}
.sw{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:5px;vertical-align:-1px}
table{border-collapse:collapse;background:#fff;font-size:13px;margin:4px 0}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
thead th{background:#eef1f5}
.note{color:#777;font-size:12px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(380px,1fr));gap:10px}
.chart{background:#fff;border:1px solid #ddd;border-radius:4px;padding:4px}
.chart.wide{grid-column:1/-1}
.chart svg{width:100%;height:auto;display:block}
.chart .t{font-size:12px;font-weight:600}
.chart .empty{color:#999;font-size:12px;padding:20px}
.strip{display:flex;gap:8px;overflow-x:auto;padding-bottom:6px}
figure{margin:0;text-align:center;background:#fff;border:1px solid #ddd;padding:3px}
figcaption{font-size:12px;color:#555}
img.px{image-rendering:pixelated}
.tree{margin-left:14px;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
details>summary{cursor:pointer;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
details.config>summary{font-family:inherit;font-size:14px;font-weight:600;margin:6px 0}
.k{color:#6a3d9a}.v{color:#0b6e4f}
pre{background:#fff;border:1px solid #ddd;padding:6px;font-size:12px;overflow:auto}
#tip{position:fixed;display:none;pointer-events:none;background:rgba(255,255,255,.96);border:1px solid #999;
border-radius:3px;padding:4px 6px;font-size:12px;z-index:10;white-space:nowrap}
"""

# installed first in <body>: every script error is counted on <body data-errors>, its text in data-error-log
HEALTH_JS = """
(function(){var b=document.body;window.__flowrlErrors=[];
window.__flowrlError=function(msg){window.__flowrlErrors.push(String(msg));
b.dataset.errors=String(window.__flowrlErrors.length);b.dataset.errorLog=window.__flowrlErrors.join(' | ');};
window.onerror=function(msg,src,line,col){window.__flowrlError(msg+' (line '+line+':'+col+')');return false;};
window.addEventListener('unhandledrejection',function(e){window.__flowrlError('unhandled rejection: '+e.reason);});
})();
"""

CHART_JS = r"""
(function(){
'use strict';
var NS='http://www.w3.org/2000/svg';
var DATA=JSON.parse(document.getElementById('flowrl-data').textContent);
var RUNS=DATA.runs, W=420, H=230, M={l:58,r:10,t:22,b:30};
var tip=document.getElementById('tip');
var opts={smooth:0.6, band:true, raw:true};

function el(tag, attrs, parent){var e=document.createElementNS(NS,tag);
  for(var k in attrs){e.setAttribute(k,attrs[k]);} if(parent){parent.appendChild(e);} return e;}
function text(parent, x, y, s, attrs){var t=el('text', Object.assign({x:x,y:y,'font-size':10,fill:'#444'}, attrs||{}),
  parent); t.textContent=s; return t;}

// debiased EMA (as TensorBoard draws it); a null (NaN or inf logged) stays a gap and does not reset it
function ema(ys, w){var out=[], s=0, n=0;
  for(var i=0;i<ys.length;i++){var y=ys[i]; if(y===null){out.push(null);continue;}
    s=w*s+(1-w)*y; n++; out.push(w>0? s/(1-Math.pow(w,n)) : y);} return out;}

function niceStep(span, n){var raw=span/Math.max(n,1), p=Math.pow(10,Math.floor(Math.log10(raw))), f=raw/p;
  return (f<1.5?1:f<3?2:f<7?5:10)*p;}
function ticks(lo, hi, n){var st=niceStep(hi-lo,n), out=[], k0=Math.ceil(lo/st-1e-9);
  if(!(st>0)||!isFinite(st)){return {v:[lo], step:Math.abs(lo)||1};}
  for(var i=0;i<50;i++){var v=(k0+i)*st; if(v>hi+st*1e-9){break;} out.push(Math.abs(v)<st*1e-9?0:v);}
  return {v:out, step:st};}
function fmtTick(v, step){if(v===0){return '0';} var a=Math.abs(v);
  if(a>=1e5||a<1e-3){var d=Math.max(0,Math.min(6,Math.floor(Math.log10(a))-Math.floor(Math.log10(step)+1e-9)));
    return v.toExponential(d);}
  var dec=Math.max(0,Math.min(10,-Math.floor(Math.log10(step)+1e-9))); return v.toFixed(dec);}
function fmt(v){if(v===null||v===undefined){return 'NaN/inf';} var a=Math.abs(v);
  if(a!==0&&(a<1e-3||a>=1e6)){return v.toExponential(3);} return String(+v.toPrecision(5));}

// one chart: every run that logs spec.key, smoothed line over the raw values, +-std band where logged
function lineChart(box, spec){
  var lines=[];
  RUNS.forEach(function(run){
    var pts=run.series[spec.key]; if(!pts||!pts.length){return;}
    var xs=pts.map(function(p){return p[0];}), ys=pts.map(function(p){return p[1];});
    var sm=ema(ys, opts.smooth), band=null;
    if(spec.band&&run.series[spec.band]){
      var sd={}; run.series[spec.band].forEach(function(p){sd[p[0]]=p[1];});
      var sds=ema(xs.map(function(x){return sd[x]===undefined?null:sd[x];}), opts.smooth);
      band=sm.map(function(m,i){return (m===null||sds[i]===null)?null:[m-sds[i], m+sds[i]];});
    }
    lines.push({run:run, xs:xs, ys:ys, sm:sm, band:band});
  });
  var svg=el('svg',{viewBox:'0 0 '+W+' '+H,role:'img'}), n=0;
  text(svg, M.l, 14, spec.title, {'class':'t','font-size':12,fill:'#222'});
  var x0=Infinity,x1=-Infinity,y0=Infinity,y1=-Infinity;
  lines.forEach(function(L){L.xs.forEach(function(x,i){
    var vals=[L.sm[i]]; if(opts.raw){vals.push(L.ys[i]);}
    if(opts.band&&L.band&&L.band[i]){vals.push(L.band[i][0],L.band[i][1]);}
    vals.forEach(function(v){if(v!==null&&isFinite(v)){y0=Math.min(y0,v);y1=Math.max(y1,v);n++;}});
    if(L.ys[i]!==null){x0=Math.min(x0,x);x1=Math.max(x1,x);}
  });});
  box.innerHTML=''; box.appendChild(svg);
  if(!n){text(svg, W/2, H/2, 'no finite values', {'text-anchor':'middle',fill:'#999'}); return 0;}
  if(x1===x0){x0-=1;x1+=1;}
  // a flat series (to rounding: the debiased EMA of a constant wobbles in the last bits) gets a +-5 % range
  if(y1-y0<=1e-9*Math.max(Math.abs(y0),Math.abs(y1))){var mid=(y0+y1)/2, pad=Math.abs(mid)*0.05||1; y0=mid-pad; y1=mid+pad;}
  else {var pd=(y1-y0)*0.05; y0-=pd; y1+=pd;}
  var sx=function(x){return M.l+(x-x0)/(x1-x0)*(W-M.l-M.r);}, sy=function(y){return H-M.b-(y-y0)/(y1-y0)*(H-M.t-M.b);};
  var g=el('g',{},svg), yt=ticks(y0,y1,5), xt=ticks(x0,x1,6);
  yt.v.forEach(function(v){el('line',{x1:M.l,x2:W-M.r,y1:sy(v),y2:sy(v),stroke:'#eee'},g);
    text(g, M.l-4, sy(v)+3, fmtTick(v,yt.step), {'text-anchor':'end'});});
  xt.v.forEach(function(v){if(xt.step<1&&v%1){return;} el('line',{x1:sx(v),x2:sx(v),y1:M.t,y2:H-M.b,stroke:'#f2f2f2'},g);
    text(g, sx(v), H-M.b+12, fmtTick(v,Math.max(xt.step,1)), {'text-anchor':'middle'});});
  el('rect',{x:M.l,y:M.t,width:W-M.l-M.r,height:H-M.t-M.b,fill:'none',stroke:'#ccc'},g);
  text(g, W-M.r, H-4, 'iteration', {'text-anchor':'end',fill:'#888'});
  function path(xs, ys){var d='', pen=false;
    for(var i=0;i<xs.length;i++){if(ys[i]===null){pen=false;continue;}
      d+=(pen?'L':'M')+sx(xs[i]).toFixed(1)+' '+sy(ys[i]).toFixed(1); pen=true;} return d;}
  lines.forEach(function(L){
    var c=L.run.color;
    if(opts.band&&L.band){ // one polygon per unbroken stretch
      var seg=[]; var flush=function(){if(seg.length){
        var up=seg.map(function(s){return sx(s[0]).toFixed(1)+','+sy(s[2]).toFixed(1);});
        var dn=seg.slice().reverse().map(function(s){return sx(s[0]).toFixed(1)+','+sy(s[1]).toFixed(1);});
        el('polygon',{points:up.concat(dn).join(' '),fill:c,'fill-opacity':0.15,stroke:'none'},g);} seg=[];};
      L.xs.forEach(function(x,i){if(L.band[i]){seg.push([x,L.band[i][0],L.band[i][1]]);} else {flush();}}); flush();
    }
    if(opts.raw&&opts.smooth>0){el('path',{d:path(L.xs,L.ys),fill:'none',stroke:c,'stroke-opacity':0.3,'stroke-width':1},g);}
    el('path',{d:path(L.xs,L.sm),fill:'none',stroke:c,'stroke-width':1.8},g);
    if(L.xs.length<=40){L.xs.forEach(function(x,i){if(L.sm[i]!==null){
      el('circle',{cx:sx(x),cy:sy(L.sm[i]),r:2.2,fill:c},g);}});}
  });
  if(RUNS.length>1){var lx=W-M.r; lines.slice().reverse().forEach(function(L){
    var t=text(svg, lx, 14, L.run.name, {'text-anchor':'end',fill:L.run.color}); lx-=Math.min(140, 7*L.run.name.length+12);});}
  // hover: the nearest logged iteration of each run
  var cross=el('line',{y1:M.t,y2:H-M.b,stroke:'#999','stroke-dasharray':'3,3',visibility:'hidden'},svg);
  var hit=el('rect',{x:M.l,y:M.t,width:W-M.l-M.r,height:H-M.t-M.b,fill:'transparent'},svg);
  hit.addEventListener('mousemove',function(ev){
    var r=svg.getBoundingClientRect(), x=x0+((ev.clientX-r.left)*W/r.width-M.l)/(W-M.l-M.r)*(x1-x0), rows=[], bx=null;
    lines.forEach(function(L){var best=-1,bd=Infinity;
      L.xs.forEach(function(xx,i){var d=Math.abs(xx-x); if(d<bd){bd=d;best=i;}});
      if(best<0){return;} if(bx===null){bx=L.xs[best];}
      var s='<span style="color:'+L.run.color+'">&#9632;</span> '+L.run.name.replace(/</g,'&lt;')+' @'+L.xs[best]+': '+fmt(L.ys[best]);
      if(opts.smooth>0){s+=' (smoothed '+fmt(L.sm[best])+')';}
      if(L.band&&L.band[best]){s+=' ±'+fmt((L.band[best][1]-L.band[best][0])/2);}
      rows.push(s);});
    if(bx!==null){cross.setAttribute('x1',sx(bx));cross.setAttribute('x2',sx(bx));cross.setAttribute('visibility','visible');}
    tip.innerHTML=rows.join('<br>'); tip.style.display='block';
    tip.style.left=Math.min(ev.clientX+14, window.innerWidth-tip.offsetWidth-8)+'px'; tip.style.top=(ev.clientY+14)+'px';});
  hit.addEventListener('mouseleave',function(){tip.style.display='none';cross.setAttribute('visibility','hidden');});
  return n;
}

// mean seconds per phase of an iteration, one stacked bar per run
function phaseBars(box){
  var PC=['#4e79a7','#f28e2b','#59a14f','#e15759','#bab0ac'], names=DATA.phases.concat(['other']), rows=[];
  function mean(run,k){var p=run.series['timing_s/'+k]; if(!p){return null;} var s=0,c=0;
    p.forEach(function(q){if(q[1]!==null){s+=q[1];c++;}}); return c?s/c:null;}
  RUNS.forEach(function(run){var it=mean(run,'iteration'); if(it===null){return;}
    var parts=DATA.phases.map(function(k){return mean(run,k)||0;}), sum=parts.reduce(function(a,b){return a+b;},0);
    parts.push(Math.max(0,it-sum)); rows.push({run:run, parts:parts, it:Math.max(it,sum)});});
  box.innerHTML=''; if(!rows.length){box.style.display='none'; return 0;}
  var bh=22, h=34+rows.length*(bh+8)+18, w=900, l=150, r=70;
  var svg=el('svg',{viewBox:'0 0 '+w+' '+h,role:'img'}); box.appendChild(svg);
  text(svg, 6, 14, 'mean seconds per iteration, by phase', {'class':'t','font-size':12,fill:'#222'});
  var lx=l; names.forEach(function(nm,i){el('rect',{x:lx,y:20,width:10,height:10,fill:PC[i]},svg);
    text(svg, lx+13, 29, nm); lx+=13+7*nm.length+14;});
  var mx=Math.max.apply(null, rows.map(function(q){return q.it;}));
  rows.forEach(function(q,j){var y=38+j*(bh+8), x=l;
    text(svg, l-6, y+bh/2+4, q.run.name, {'text-anchor':'end',fill:q.run.color,'font-size':11});
    q.parts.forEach(function(v,i){var wd=v/mx*(w-l-r); if(wd<=0){return;}
      var rc=el('rect',{x:x,y:y,width:wd,height:bh,fill:PC[i]},svg);
      el('title',{},rc).textContent=names[i]+': '+fmt(v)+' s ('+(100*v/q.it).toFixed(1)+' %)';
      if(wd>38){text(svg, x+wd/2, y+bh/2+4, (100*v/q.it).toFixed(0)+'%', {'text-anchor':'middle',fill:'#fff'});}
      x+=wd;});
    text(svg, x+5, y+bh/2+4, fmt(q.it)+' s');});
  return rows.length;
}

function drawAll(){
  var drawn=0;
  DATA.sections.forEach(function(sec){
    var boxes=document.querySelectorAll('.chart[data-sec="'+sec.id+'"]');
    Array.prototype.forEach.call(boxes, function(box){
      var spec=sec.charts[+box.dataset.i];
      try{ if(lineChart(box, spec)>0){drawn++;} }
      catch(e){ window.__flowrlError(spec.key+': '+e); if(e&&e.stack){console.error(e.stack);} }
    });
  });
  var pb=document.getElementById('phase-bars');
  if(pb){try{ if(phaseBars(pb)>0){drawn++;} }catch(e){ window.__flowrlError('phase bars: '+e); if(e&&e.stack){console.error(e.stack);} }}
  document.body.dataset.charts=String(drawn);
  return drawn;
}

var slider=document.getElementById('smooth'), sv=document.getElementById('smooth-v');
slider.addEventListener('input',function(){opts.smooth=+slider.value; sv.textContent=(+slider.value).toFixed(2); drawAll();});
document.getElementById('band').addEventListener('change',function(e){opts.band=e.target.checked; drawAll();});
document.getElementById('raw').addEventListener('change',function(e){opts.raw=e.target.checked; drawAll();});
opts.smooth=+slider.value;
var drawn=drawAll();
document.body.dataset.rendered='1';
console.info('flowrl-report: rendered '+drawn+' charts, '+window.__flowrlErrors.length+' errors');
})();
"""
