"""Reading run folders: ``config.yaml``, the ``metrics.jsonl`` rows as series, sample grids, checkpoints."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowrl.configkit import ConfigError


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


def number(v: Any) -> float | None | str:
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
            y = number(v)
            if y != "skip":
                out.setdefault(key, []).append([x, y])
    return out


def unique_names(runs: list[Run]) -> None:
    """Folder names, lengthened with parent folders (then numbered) until no two runs share one."""
    for depth in range(1, 4):
        names = ["/".join(r.path.resolve().parts[-depth:]) for r in runs]
        if len(set(names)) == len(names):
            break
    seen: dict[str, int] = {}
    for r, n in zip(runs, names):
        seen[n] = seen.get(n, 0) + 1
        r.name = n if seen[n] == 1 else f"{n} ({seen[n]})"
