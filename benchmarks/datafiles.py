"""Benchmark data that flowrl does not ship: a file the user names, else a copy fetched once into a cache.

``resolve(source, spec)`` returns the path of the data file:

1. ``source`` given: a file, or a folder (a checkout of the benchmark's repository) holding ``spec.inside``;
2. else ``$<spec.env>`` (same forms);
3. else ``<cache>/<spec.cache_name>`` (``$FLOWRL_CACHE``, default ``~/.cache/flowrl/benchmarks``);
4. else a download of ``spec.url`` (a pinned commit) into that cache, refused in one line when
   ``HF_HUB_OFFLINE`` is set or the network fails, saying where to get the file by hand.

Nothing here runs at import or in tests (they pass fixture files).
"""

from __future__ import annotations

import hashlib
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DataSpec:
    name: str  # "GenEval 2 prompts"
    env: str  # environment variable naming the file or a checkout
    inside: str  # the file's path inside a checkout of the repository
    url: str  # the raw file at a pinned commit
    cache_name: str  # file name in the cache
    sha256: str | None = None  # of the official file, when known
    note: str = ""  # why it is not shipped (licence)


def cache_dir() -> Path:
    return Path(os.environ.get("FLOWRL_CACHE") or Path.home() / ".cache" / "flowrl" / "benchmarks")


def sha256_of(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _named(text: str, spec: DataSpec, what: str) -> Path:
    path = Path(text).expanduser()
    if path.is_dir():
        inner = path / spec.inside
        if not inner.is_file():
            raise FileNotFoundError(f"{what} {text}: a folder without {spec.inside}; name the {spec.name} file")
        return inner
    if not path.is_file():
        raise FileNotFoundError(f"{what} {text}: no such file ({spec.name})")
    return path


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")


def download(spec: DataSpec, dest: Path, timeout: float = 60.0) -> Path:
    """Fetch ``spec.url`` to ``dest`` (through a temporary name), checking ``spec.sha256`` when known."""
    hint = f"download {spec.url} by hand and pass its path (or set ${spec.env})"
    if _offline():
        raise RuntimeError(f"{spec.name} are not shipped ({spec.note}) and HF_HUB_OFFLINE is set: {hint}")
    try:
        with urllib.request.urlopen(spec.url, timeout=timeout) as answer:  # noqa: S310 - a fixed https URL
            data = answer.read()
    except OSError as exc:
        raise RuntimeError(f"cannot download the {spec.name} ({exc}); {hint}") from None
    if spec.sha256 and hashlib.sha256(data).hexdigest() != spec.sha256:
        raise RuntimeError(f"the downloaded {spec.name} do not match sha256 {spec.sha256[:12]}; {hint}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, dest)
    return dest


def resolve(source: str | Path | None, spec: DataSpec) -> Path:
    """The data file (see the module docstring)."""
    if source is not None and str(source).strip():
        return _named(str(source), spec, "--prompts")
    if os.environ.get(spec.env):
        return _named(os.environ[spec.env], spec, f"${spec.env}")
    cached = cache_dir() / spec.cache_name
    if cached.is_file():
        return cached
    return download(spec, cached)
