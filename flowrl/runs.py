"""The run folder: where a run writes, and the rules that keep it and its neighbours safe.

* **The marker.** flowrl claims a folder by writing ``.flowrl-run`` into it before anything else. A folder
  holds a run once it has a ``config.yaml``, a ``metrics.jsonl`` or checkpoints; training into such a folder
  is refused unless the run continues it (``resume=``) or removes it first (``overwrite=true``);
  ``run_name=auto`` picks a new timestamped folder under ``output_dir`` instead.
* **overwrite=true removes only what flowrl wrote**: the names of ``FLOWRL_OUTPUTS`` in a folder carrying the
  marker. A folder holding anything else (``samples/holiday.png``, ``checkpoints/my_model.ckpt``), or run-like
  files without the marker (a user's own ``config.yaml``), is refused in one line naming a file; nothing is
  deleted. Runs in subfolders (``run_name=auto``) carry their own marker and are left alone.
* **The lock.** ``.flowrl.lock`` is held (``fcntl.flock``) by the main process of the run writing the folder, so
  a second launch into it is refused at once, before anything is read or removed. The kernel drops the lock when
  its process dies, so a lock left by a killed run is taken over, with a line naming the dead process.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import time
import weakref
from pathlib import Path

from flowrl.config import Config
from flowrl.configkit import ConfigError

logger = logging.getLogger(__name__)

MARKER = ".flowrl-run"  # written first into a folder flowrl trains into
LOCK = ".flowrl.lock"  # held by the main process of the run that writes the folder

# what a run (and the benchmarks that evaluate it in place) writes into its folder, by top-level name: a
# pattern of the paths below it that are flowrl's (None: everything below it); overwrite=true removes these
FLOWRL_OUTPUTS: dict[str, re.Pattern | None] = {
    "config.yaml": None,
    "metrics.jsonl": None,
    "reward_curve.png": None,
    "method_state.json": None,
    "report.html": None,
    "compare_result.json": None,
    "toy_eval": None,
    "toy_eval.json": None,
    "lora": None,
    "transformer": None,
    "trackers": None,
    "checkpoints": re.compile(r"^iter-\d+(\.tmp)?(/.*)?$"),
    "samples": re.compile(r"^(iter|eval)-\d+(\.(png|gif|mp4|wav))?(/.*)?$"),
    # `flowrl sample RUN`: numbered folders of numbered media, a contact sheet and sample.json (flowrl.sample)
    "samples_cli": re.compile(r"^\d{4,}(/(\d{4,}\.(png|mp4|wav)|frames\.png|waveforms\.png|sample\.json))?$"),
}


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
    return (
        (path / "config.yaml").exists()
        or (path / "metrics.jsonl").exists()
        or (checkpoints.is_dir() and any(checkpoints.iterdir()))
    )


def is_flowrl_output(relative: str) -> bool:
    """Whether the path ``relative`` (to the run folder, '/'-separated) is one flowrl writes."""
    top, _, rest = relative.partition("/")
    if top in (MARKER, LOCK):
        return not rest
    if top not in FLOWRL_OUTPUTS:
        return False
    pattern = FLOWRL_OUTPUTS[top]
    return not rest or pattern is None or bool(pattern.match(rest))


def foreign_file(path: Path) -> str | None:
    """The first path (relative, in sorted walk order) in ``path`` that flowrl did not write, or None."""
    for root, dirs, files in os.walk(path):
        dirs.sort()
        base = Path(root).relative_to(path)
        for name in sorted(files):
            rel = (base / name).as_posix()
            if not is_flowrl_output(rel):
                return rel
        for name in list(dirs):
            rel = (base / name).as_posix()
            if base == Path(".") and (Path(root) / name / MARKER).is_file():
                dirs.remove(name)  # a run of its own (run_name=auto): kept, and not this run's to judge
            elif not is_flowrl_output(rel) or (Path(root) / name).is_symlink():
                return rel + "/"
    return None


def make_folder(path: Path) -> None:
    """Create ``path`` or refuse, in one line, a path under a file or a folder that cannot be written."""
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


def check_run_dir(path: Path, cfg: Config) -> None:
    """Refuse a folder that cannot be written, that holds another run, or whose files flowrl would remove but
    did not write (one line naming the ways on)."""
    make_folder(path)
    if cfg.resume or not holds_run(path):
        return
    marked = (path / MARKER).is_file()
    if not marked:
        found = next(n for n in ("config.yaml", "metrics.jsonl", "checkpoints") if (path / n).exists())
        raise ConfigError(
            f"output_dir {str(path)!r} holds {found!r}, which flowrl did not write there (no {MARKER} marker): "
            f"train into another output_dir or run_name=auto, or move it away yourself"
        )
    if not cfg.overwrite:
        raise ConfigError(
            f"output_dir {str(path)!r} already holds a run ({_describe(path)}): continue it with resume=latest, "
            f"train into a new folder with run_name=auto or another output_dir, or delete it with overwrite=true"
        )
    foreign = foreign_file(path)
    if foreign is not None:
        raise ConfigError(
            f"overwrite=true: output_dir {str(path)!r} holds {foreign!r}, which flowrl did not write; nothing was "
            f"removed: move it away, or train into another output_dir"
        )


def claim(path: Path) -> None:
    """Mark ``path`` as a flowrl run folder (first thing written; kept by overwrite=true)."""
    marker = path / MARKER
    if not marker.exists():
        marker.write_text(json.dumps({"written_by": "flowrl", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}) + "\n")


def clear_run(path: Path) -> None:
    """``overwrite=true``: remove the old run's checkpoints and outputs, only the paths flowrl writes (main
    process only; ``check_run_dir`` has refused a folder holding anything else)."""
    logger.warning("overwrite=true: removing the run in %s (%s)", path, _describe(path))
    for name, pattern in FLOWRL_OUTPUTS.items():
        target = path / name
        if pattern is not None and target.is_dir() and not target.is_symlink():
            for child in sorted(target.iterdir()):
                if is_flowrl_output(f"{name}/{child.name}"):
                    _remove(child)
            if not any(target.iterdir()):
                target.rmdir()
        elif target.exists() or target.is_symlink():
            _remove(target)


def _remove(target: Path) -> None:
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    else:
        os.remove(target)


_HELD: "weakref.WeakValueDictionary[str, RunLock]" = (
    weakref.WeakValueDictionary()
)  # folders whose lock this process holds (a second Trainer in it reuses it)


class RunLock:
    """The run folder's lock (``LOCK``), held by one process at a time: ``acquire`` refuses a folder whose lock
    another live process holds, in one line naming it."""

    def __init__(self, path: Path):
        self.path = path / LOCK
        self._file = None

    @classmethod
    def acquire(cls, folder: Path) -> "RunLock":
        key = str(folder.resolve())
        if key in _HELD and _HELD[key]._file is not None:
            return _HELD[key]
        lock = cls(folder)
        lock._take()
        _HELD[key] = lock
        return lock

    def _take(self) -> None:
        import fcntl

        f = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = _describe_holder(f.read())
            f.close()
            raise ConfigError(
                f"output_dir {str(self.path.parent)!r} is in use by another flowrl run ({holder}): wait for it to "
                f"finish, or train into another output_dir or run_name=auto"
            ) from None
        except OSError as exc:  # a file system without flock: go on unguarded, and say so
            logger.warning(
                "output_dir %s: cannot lock %s (%s); a second launch into this folder is not refused",
                self.path.parent,
                LOCK,
                exc.strerror or exc,
            )
        f.seek(0)
        previous = f.read().strip()
        if previous:
            logger.warning(
                "output_dir %s: taking over the lock left by %s, which is no longer running",
                self.path.parent,
                _describe_holder(previous),
            )
        f.seek(0)
        f.truncate()
        f.write(
            json.dumps(
                {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            )
            + "\n"
        )
        f.flush()
        self._file = f

    def __del__(self):
        self.release()

    def release(self) -> None:
        """Clear and unlock (a clean exit leaves an empty lock file; the kernel unlocks a dead process's)."""
        if self._file is None:
            return
        try:
            self._file.seek(0)
            self._file.truncate()
            self._file.close()
        finally:
            self._file = None
            # at interpreter exit (``__del__``) the module's globals may already be gone
            if _HELD is not None and _HELD.get(str(self.path.parent.resolve())) is self:
                del _HELD[str(self.path.parent.resolve())]


def _describe_holder(text: str) -> str:
    try:
        info = json.loads(text)
        return f"pid {info['pid']} on {info['host']} since {info['since']}"
    except (ValueError, KeyError, TypeError):
        return "a process that left no details"


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


def broadcast(acc, obj):
    """``obj`` as the main process has it, on every process."""
    if acc.num_processes == 1:
        return obj
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([obj])[0]


def prepare_run_dir(cfg: Config, acc) -> tuple[Path, RunLock | None]:
    """Resolve the run folder and make it this run's (refuse to mix runs, ``overwrite``), before any weights
    load; the main process decides and holds the lock (returned; None on the others). ``cfg`` then records the
    resolved folder."""
    out = run_dir(cfg, broadcast=lambda obj: broadcast(acc, obj))
    # the main process decides (another process checking later could see the main one's new run)
    error, lock = None, None
    if acc.is_main_process:
        try:  # the lock first: a second launch into the folder is refused before anything is read or removed
            make_folder(out)
            lock = RunLock.acquire(out)
            check_run_dir(out, cfg)
            if cfg.overwrite and holds_run(out):
                clear_run(out)
            claim(out)
        except ConfigError as exc:
            error = str(exc)
    error = broadcast(acc, error)
    if error is not None:
        raise ConfigError(error)
    cfg.output_dir = str(out)  # the resolved folder, as config.yaml records it
    cfg.run_name = None
    return out, lock


def resolve_resume(cfg: Config, out: Path) -> Path | None:
    """The checkpoint ``cfg.resume`` names (``latest``: the newest intact one under ``out``; None: the run in
    ``out`` had completed no iteration), refusing one whose run differs from ``cfg`` in a setting that changes
    the math (unless ``resume_allow_changes``)."""
    from flowrl import checkpoint as ckpt
    from flowrl.logs import read_metrics
    from flowrl.resolve import math_changes

    spec, root = cfg.resume, out / "checkpoints"
    if spec == "latest":
        path, corrupt = ckpt.latest_intact_checkpoint(root)
        for line in corrupt if path is not None else ():  # with none intact, the error names the first
            logger.warning("resume=latest: skipping %s", line)
        if path is None and not corrupt and (out / "config.yaml").is_file():
            rows = read_metrics(out / "metrics.jsonl") if (out / "metrics.jsonl").is_file() else []
            if rows:  # iterations ran (then the process was killed) but none was saved
                raise ckpt.CheckpointError(
                    f"resume=latest: the run in {out} logged {len(rows)} iteration(s) but saved no checkpoint; "
                    f"start it again with overwrite=true"
                )
            logger.warning("resume=latest: the run in %s had completed no iteration; starting at iteration 0", out)
            return None
        if path is None:
            why = f" ({len(corrupt)} corrupt: {corrupt[0]})" if corrupt else ""
            raise ckpt.CheckpointError(f"resume=latest: no complete checkpoint under {root}{why}")
    else:
        path = Path(spec).expanduser()
    ckpt.verify_checkpoint(path)
    old = ckpt.read_state(path).get("config")
    if old is None and (path.parent.parent / "config.yaml").is_file():  # checkpoints from before v0.1.1
        import yaml

        old = yaml.safe_load((path.parent.parent / "config.yaml").read_text())
    changes = math_changes(old, cfg.to_dict()) if isinstance(old, dict) else []
    if changes and not cfg.resume_allow_changes:
        shown = ", ".join(changes[:4]) + (f" and {len(changes) - 4} more" if len(changes) > 4 else "")
        raise ConfigError(
            f"resume={spec}: this config differs from the checkpoint's run in {shown}; these change what "
            f"is trained: keep them, or set resume_allow_changes=true"
        )
    for change in changes:
        logger.warning("resume_allow_changes: %s differs from the checkpoint's run", change)
    return path
