"""The run folder: where a run writes, and the rule that two runs never mix in one folder.

A folder holds a run once it has a ``config.yaml``, a ``metrics.jsonl`` or checkpoints. Training into
such a folder is refused unless the run continues it (``resume=``) or removes it first (``overwrite=true``);
``run_name=auto`` picks a new timestamped folder under ``output_dir`` instead.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

from flowrl.config import Config, ConfigError

logger = logging.getLogger(__name__)

# what a run writes into its folder; overwrite=true removes exactly these
RUN_OUTPUTS = ("checkpoints", "metrics.jsonl", "config.yaml", "samples", "lora", "transformer", "reward_curve.png",
               "method_state.json")


def run_dir(cfg: Config, broadcast=None) -> Path:
    """``output_dir``, or ``output_dir/run_name``; ``run_name=auto`` is the launch time, which
    ``broadcast`` (an object -> object function) makes the same on every process."""
    out = Path(cfg.output_dir).expanduser()
    if cfg.run_name is None:
        return out
    name = cfg.run_name
    if name == "auto":
        base = name = time.strftime("%Y%m%d-%H%M%S")
        n = 1
        while (out / name).exists():  # two launches in the same second
            n += 1
            name = f"{base}-{n}"
        name = broadcast(name) if broadcast is not None else name  # the main process's choice
    return out / name


def holds_run(path: Path) -> bool:
    """A config.yaml, a metrics.jsonl, or a non-empty checkpoints/ folder."""
    checkpoints = path / "checkpoints"
    return (path / "config.yaml").exists() or (path / "metrics.jsonl").exists() or (
        checkpoints.is_dir() and any(checkpoints.iterdir()))


def check_run_dir(path: Path, cfg: Config) -> None:
    """Refuse a folder that cannot be written or that holds another run (one line naming the ways on)."""
    for parent in (path, *path.parents):
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"output_dir: {str(parent)!r} is a file, not a folder")
            break
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".flowrl-write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"output_dir: cannot write to {str(path)!r} ({exc.strerror or exc})") from None
    if cfg.resume or not holds_run(path):
        return
    if not cfg.overwrite:
        raise ConfigError(
            f"output_dir {str(path)!r} already holds a run ({_describe(path)}): continue it with resume=latest, "
            f"train into a new folder with run_name=auto or another output_dir, or delete it with overwrite=true"
        )


def clear_run(path: Path) -> None:
    """``overwrite=true``: remove the old run's checkpoints and outputs (main process only)."""
    logger.warning("overwrite=true: removing the run in %s (%s)", path, _describe(path))
    for name in RUN_OUTPUTS:
        target = path / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            os.remove(target)


def _describe(path: Path) -> str:
    ckpts = [p for p in (path / "checkpoints").glob("iter-*") if p.is_dir()] if (path / "checkpoints").is_dir() else []
    rows = 0
    if (path / "metrics.jsonl").is_file():
        with open(path / "metrics.jsonl", "rb") as f:
            rows = sum(1 for line in f if line.strip())
    return f"{len(ckpts)} checkpoint(s), {rows} metrics row(s)"


def share_with_group(path: Path) -> None:
    """Give the run's files the permissions of the umask (safetensors writes them owner-only), so that a
    group sharing the run folder can read its checkpoints and exports."""
    umask = os.umask(0)
    os.umask(umask)
    mode = 0o666 & ~umask
    for name in ("checkpoints", "lora", "transformer"):
        for f in (path / name).rglob("*") if (path / name).is_dir() else ():
            if f.is_file() and (f.stat().st_mode & 0o777) != mode:
                f.chmod(mode)
