"""What the page shows: chart sections from the series, per-run summaries and the time-per-phase table."""

from __future__ import annotations

import html
import re
from typing import Any

from flowrl.report.runs import Run, number

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


# ------------------------------------------------------------------------------------------ layout
def _chart(key: str, band: str | None = None, title: str | None = None) -> dict[str, Any]:
    return {"key": key, "band": band, "title": title or key}


class _Charted:
    """What one ``sections`` call has seen: the union of the runs' metric names, and those already charted."""

    def __init__(self, all_series: list[dict[str, list]]):
        self.all_series = all_series
        self.names = set().union(*[s.keys() for s in all_series]) if all_series else set()
        self.used: set[str] = set()

    def same_as(self, a: str, b: str) -> bool:  # a component identical to the total in every run says nothing new
        return all(s.get(a) == s.get(b) for s in self.all_series if a in s or b in s)

    def take(self, charts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The charts whose metric exists and is not charted yet (a band that does not exist is dropped)."""
        out = []
        for c in charts:
            if c.get("taken"):
                out.append(c)
            elif c["key"] in self.names and c["key"] not in self.used:
                c["taken"] = True
                self.used.add(c["key"])
                if c["band"] is not None:
                    if c["band"] in self.names:
                        self.used.add(c["band"])
                    else:
                        c["band"] = None
                out.append(c)
        return out

    def prefixed(self, prefix: str, order: tuple[str, ...] = ()) -> list[str]:
        """The metrics under ``prefix`` not charted yet, those ``order`` names first."""
        keys = sorted(n for n in self.names if n.startswith(prefix) and n not in self.used)
        rank = {prefix + k: i for i, k in enumerate(order)}
        return sorted(keys, key=lambda k: (rank.get(k, len(rank)), k))

    def section(self, id: str, charts: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": id, "title": SECTION_TITLES[id], "charts": self.take(charts)}


def _reward_section(seen: _Charted) -> dict[str, Any]:
    """Training reward: the total, each component (unless it is the total), then the rest of reward/*."""
    names = seen.names
    charts = seen.take([_chart("reward/mean", "reward/std", "reward/mean ± std")])
    components = sorted(
        {
            n[len("reward/") : -len("/mean")]
            for n in names
            if n.startswith("reward/") and n.endswith("/mean") and n.count("/") == 2
        }
    )
    for c in components:
        key = f"reward/{c}/mean"
        if seen.same_as(key, "reward/mean") and seen.same_as(f"reward/{c}/std", "reward/std"):
            seen.used |= {key, f"reward/{c}/std"}
            continue
        charts.append(_chart(key, f"reward/{c}/std", f"{key} ± std"))
    charts += [_chart(k) for k in seen.prefixed("reward/") if not k.endswith("/std")]
    return seen.section("reward", charts)


def _eval_section(seen: _Charted) -> dict[str, Any]:
    """Evaluation: the total, components, the trained reward on held-out prompts, the held-out gap."""
    charts = seen.take([_chart("eval/reward/mean", "eval/reward/std", "eval/reward/mean ± std")])
    for k in seen.prefixed("eval/reward/"):
        if k.endswith("/std") and k[: -len("/std")] + "/mean" in seen.names:
            continue
        if k.endswith("/mean") and seen.same_as(k, "eval/reward/mean"):
            seen.used.add(k)
            continue
        std = k[: -len("/mean")] + "/std" if k.endswith("/mean") else None
        charts.append(_chart(k, std))
    charts += [_chart("eval/train_reward/mean"), _chart("monitor/heldout_gap")]
    charts += [_chart(k) for k in seen.prefixed("eval/")]
    return seen.section("eval", charts)


def _monitor_sections(seen: _Charted) -> list[dict[str, Any]]:
    """Monitors, one section per second-level prefix (monitor/diversity/*, monitor/colour/*, ...)."""
    groups: dict[str, list[str]] = {}
    for k in seen.prefixed("monitor/"):
        parts = k.split("/")
        groups.setdefault("/".join(parts[:2]) if len(parts) > 2 else "monitor", []).append(k)
    return [
        {
            "id": "mon-" + g.replace("/", "-"),
            "title": f"Monitors: {g}/*" if g != "monitor" else "Monitors",
            "group": "monitor",
            "charts": seen.take([_chart(k) for k in groups[g]]),
        }
        for g in sorted(groups)
    ]


def _time_section(seen: _Charted) -> dict[str, Any]:
    """Time and cost: the phases' timings first, then the rest of timing_s/*, cost/*, throughput/*, memory/*."""
    timing = [f"timing_s/{p}" for p in ("iteration", *PHASES, "eval")]
    charts = [_chart(k) for k in timing] + [_chart(k) for k in seen.prefixed("timing_s/")]
    charts += [_chart(k) for k in seen.prefixed("cost/") + seen.prefixed("throughput/") + seen.prefixed("memory/")]
    return {**seen.section("time", charts), "phases": True}


def _other_sections(seen: _Charted) -> list[dict[str, Any]]:
    """What no section above charted, one section per first-level prefix."""
    rest: dict[str, list[str]] = {}
    for k in sorted(seen.names - seen.used):
        if k.endswith("/std") and k[: -len("/std")] + "/mean" in seen.names:
            continue  # drawn as a band, or the std of a component left out with its mean
        rest.setdefault(k.split("/")[0] if "/" in k else "other", []).append(k)
    return [
        {
            "id": "other-" + re.sub(r"[^A-Za-z0-9_-]", "-", g),
            "title": f"{g}/*" if g != "other" else "Other",
            "charts": seen.take([_chart(k) for k in rest[g]]),
        }
        for g in sorted(rest)
    ]


def sections(all_series: list[dict[str, list]]) -> list[dict[str, Any]]:
    """The page's chart sections from the union of the runs' metric names; each metric charted once."""
    seen = _Charted(all_series)
    out = [_reward_section(seen), _eval_section(seen)]
    out.append(seen.section("policy", [_chart(k) for k in seen.prefixed("policy/", POLICY_ORDER)]))
    out.append(seen.section("adv", [_chart(k) for k in seen.prefixed("adv/")]))
    out.append(seen.section("method", [_chart(k) for k in seen.prefixed("method/")]))
    out += _monitor_sections(seen)
    out.append(_time_section(seen))
    out += _other_sections(seen)
    for sec in out:
        for c in sec["charts"]:
            c.pop("taken", None)
    return [s for s in out if s["charts"] or s.get("phases")]


# ------------------------------------------------------------------------------------------ summaries
def _mean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def fmt(v: float | None, digits: int = 4) -> str:
    if v is None:
        return "–"
    if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e6):
        return f"{v:.{digits - 1}e}"
    return f"{v:#.{digits}g}" if abs(v) < 1 else f"{v:.{digits}g}"  # -0.003100, not -0.0031


def duration(seconds: float | None) -> str:
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
    first = _mean([number(r["reward/mean"]) for r in trained[:k]]) if trained else None
    last = _mean([number(r["reward/mean"]) for r in trained[-k:]]) if trained else None
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


COST_LABELS = {
    "cost/nfe_total": "transformer forwards, total",
    "cost/reward_calls_total": "reward calls, total",
    "cost/nfe": "forwards / iteration",
    "cost/reward_calls": "reward calls / iteration",
    "throughput/images_per_s": "images / s",
    "throughput/nfe_per_s": "forwards / s",
    "memory/peak_gib": "peak memory GiB (max)",
}
PHASE_LABELS = {"other": "other (in iteration)", "iteration": "<b>iteration</b>", "eval": "eval (when due)"}


def _mean_of(s: dict, key: str) -> float | None:
    return _mean([y for _, y in s.get(key, [])])


def _phase_cells(s: dict, p: str) -> str:
    """One run's mean seconds of phase ``p`` per iteration and its share of the iteration."""
    it = _mean_of(s, "timing_s/iteration")
    if p == "other":  # the iteration's time outside the named phases (bookkeeping, monitors)
        parts = [_mean_of(s, f"timing_s/{q}") for q in PHASES]
        v = (
            it - sum(x for x in parts if x is not None)
            if it is not None and any(x is not None for x in parts)
            else None
        )
    else:
        v = _mean_of(s, f"timing_s/{p}")
    share = f"{100 * v / it:.1f} %" if v is not None and it and p not in ("iteration", "eval") else ""
    return f"<td>{fmt(v, 3)}</td><td>{share}</td>"


def _cost_rows(all_series: list[dict]) -> list[str]:
    """A row per cost figure any run logs: totals their last value, memory its peak, the rest their mean."""
    rows_html = []
    for key in sorted(set().union(*[s.keys() for s in all_series]) & set(COST_LABELS)):
        cells = []
        for s in all_series:
            ys = [y for _, y in s.get(key, []) if y is not None]
            if not ys:
                v = None
            else:  # totals: the last; memory: the peak; the rest: the mean over iterations
                v = ys[-1] if key.endswith("_total") else max(ys) if key.startswith("memory/") else _mean(ys)
            cells.append(f'<td colspan="2">{fmt(v, 4)}</td>')
        rows_html.append(f"<tr><th>{COST_LABELS[key]}</th>{''.join(cells)}</tr>")
    return rows_html


def phase_table(runs: list[Run], all_series: list[dict]) -> str:
    """Mean seconds per iteration and share of the iteration for each phase, then the cost totals."""
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
        cells = [_phase_cells(s, p) for s in all_series]
        if p == "other" or have[phases.index(p)]:
            rows_html.append(f"<tr><th>{PHASE_LABELS.get(p, p)}</th>{''.join(cells)}</tr>")
    rows_html += _cost_rows(all_series)
    walls = []
    for s in all_series:
        w = sum(y for k in ("timing_s/iteration", "timing_s/eval") for _, y in s.get(k, []) if y is not None)
        walls.append(f'<td colspan="2">{duration(w) if w else "–"}</td>')
    rows_html.append(f"<tr><th>logged wall time</th>{''.join(walls)}</tr>")
    return (
        f'<table class="phases"><thead><tr><th></th>{head}</tr><tr><th>phase</th>{sub}</tr></thead>'
        f"<tbody>{''.join(rows_html)}</tbody></table>"
    )
