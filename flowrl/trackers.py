"""Experiment trackers (``log.trackers``) through accelerate's tracking API, on the main process only.

Each iteration's metrics row (the numbers of the row ``metrics.jsonl`` gets) is logged at step = the row's
``iteration``; the resolved config, flattened and with secrets redacted, is stored as hyperparameters with
the run name; every sample grid the trainer saves is logged as an image at the step of the iteration whose
rollouts it shows. Local files go under ``<run>/trackers/``: TensorBoard writes ``<run>/trackers/<project>/``
and a resumed run appends there, hiding what the stopped run logged after its checkpoint (``purge_step``).
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flowrl.config import Config, redact_secrets
from flowrl.configkit import ConfigError, flatten_config

logger = logging.getLogger(__name__)

# tracker name -> (the module its accelerate class imports, the pip package that provides it)
PACKAGES = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "swanlab": ("swanlab", "swanlab"),
    "aim": ("aim", "aim"),
    "mlflow": ("mlflow", "mlflow"),
    "comet_ml": ("comet_ml", "comet-ml"),
    "clearml": ("clearml", "clearml"),
    "dvclive": ("dvclive", "dvclive"),
    "trackio": ("trackio", "trackio"),
}
# trackers whose accelerate class logs images (``log_images``); tensorboard's writer is called directly
IMAGE_TRACKERS = ("tensorboard", "wandb", "swanlab", "aim", "clearml")


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported (tests replace this to simulate a missing package)."""
    if module == "tensorboard" and importlib.util.find_spec("tensorboardX") is not None:
        return True  # accelerate's TensorBoardTracker falls back to tensorboardX
    return importlib.util.find_spec(module) is not None


def check_trackers(cfg: Config) -> None:
    """One line for a tracker this accelerate does not know or whose package is missing (preflight)."""
    if not cfg.log.trackers:
        return
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS

    for name in cfg.log.trackers:
        if name not in LOGGER_TYPE_TO_CLASS:
            import accelerate

            raise ConfigError(
                f"log.trackers: {name!r} is not a tracker of the installed accelerate "
                f"{accelerate.__version__}; upgrade accelerate (pip install -U accelerate)"
            )
        module, package = PACKAGES[name]
        if not _installed(module):
            raise ConfigError(f"log.trackers: {name!r} needs the {package} package: pip install {package}")


def hyperparameters(cfg: Config, run_name: str) -> dict[str, int | float | str | bool]:
    """The resolved config flattened to ``section.key`` (secrets redacted), values a tracker accepts."""
    flat = flatten_config(redact_secrets(cfg.to_dict()))
    out = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in flat.items()}
    out["run_name"] = run_name
    return out


def numbers(row: dict[str, Any]) -> dict[str, float]:
    """The numeric entries of a metrics row, less ``iteration`` (it is the step)."""
    return {
        k: v for k, v in row.items() if k != "iteration" and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


class Tracking:
    """The trackers this run started on an Accelerator; a no-op without any (other processes, none set)."""

    def __init__(self, trackers: list | None = None):
        self.trackers = list(trackers or [])
        self._warned: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self.trackers)

    def log(self, row: dict[str, Any], step: int) -> None:
        values = numbers(row)
        for tracker in self.trackers:
            tracker.log(values, step=step)

    def log_image(self, path: str | Path, step: int, tag: str = "samples") -> None:
        """The PNG grid at ``path`` (as saved) as an image at ``step``."""
        if not self.trackers:
            return
        import numpy as np
        from PIL import Image

        with Image.open(path) as im:
            image = np.asarray(im.convert("RGB"))  # (H, W, 3) uint8
        for tracker in self.trackers:
            name = tracker.name
            if name == "tensorboard":
                tracker.writer.add_image(tag, image, global_step=step, dataformats="HWC")
                tracker.writer.flush()
            elif name in ("wandb", "swanlab"):
                tracker.log_images({tag: [image]}, step=step)
            elif name in ("aim", "clearml"):
                tracker.log_images({tag: image}, step=step)
            elif name not in self._warned:
                self._warned.add(name)
                logger.warning(
                    "log.trackers: %s gets no sample images (accelerate has no image logging for it); "
                    "the grids stay in the run's samples/ folder",
                    name,
                )

    def finish(self) -> None:
        """Close every tracker (flushing it); safe to call twice."""
        trackers, self.trackers = self.trackers, []
        for tracker in trackers:
            try:
                tracker.finish()
            except Exception as exc:  # noqa: BLE001 - a tracker failing to close must not hide the run's own error
                logger.warning("log.trackers: closing %s failed: %s", tracker.name, exc)


NO_TRACKING = Tracking()


def _wandb_id(folder: Path, resuming: bool) -> str:
    """The wandb run id of this run folder, kept in ``trackers/wandb-id`` so that a resumed run continues it."""
    path = folder / "wandb-id"
    if resuming and path.is_file() and path.read_text().strip():
        return path.read_text().strip()
    run_id = uuid.uuid4().hex[:16]
    path.write_text(run_id + "\n")
    return run_id


def init_kwargs(names: list[str], folder: Path, run_name: str, start_iteration: int) -> dict[str, dict]:
    """Per-tracker arguments: the run name, local folders under ``folder``, resuming at ``start_iteration``."""
    resuming = start_iteration > 0
    kwargs: dict[str, dict] = {}
    for name in names:
        if name == "tensorboard" and resuming:
            # events the stopped run logged at steps >= the checkpoint's are hidden (TensorBoard's purge)
            kwargs[name] = {"purge_step": start_iteration}
        elif name == "wandb":
            kwargs[name] = {"name": run_name, "dir": str(folder), "id": _wandb_id(folder, resuming), "resume": "allow"}
        elif name == "swanlab":
            (folder / "swanlab").mkdir(exist_ok=True)
            kwargs[name] = {"experiment_name": run_name, "logdir": str(folder / "swanlab")}
        elif name == "mlflow":
            kwargs[name] = {"run_name": run_name}
        elif name == "clearml":
            kwargs[name] = {"task_name": run_name}
        elif name == "dvclive":
            kwargs[name] = {"dir": str(folder / "dvclive")}
    return kwargs


def start(accelerator, cfg: Config, run_dir: Path, start_iteration: int) -> Tracking:
    """Start ``cfg.log.trackers`` on ``accelerator`` (main process only; others get a no-op) and store the
    config as hyperparameters. Works on a caller's Accelerator too: trackers it already runs are left alone."""
    names = list(cfg.log.trackers)
    if not names or not accelerator.is_main_process:
        return NO_TRACKING
    from accelerate.tracking import filter_trackers

    folder = run_dir / "trackers"
    project = cfg.log.tracker_project or run_dir.name
    if start_iteration == 0 and "tensorboard" in names and (folder / project).is_dir():
        shutil.rmtree(folder / project)  # a run starting over (overwrite=true): as metrics.jsonl, begin empty
    folder.mkdir(parents=True, exist_ok=True)
    wanted = filter_trackers(names, folder)
    if len(wanted) != len(names):  # preflight checked the packages; accelerate found fewer
        missing = sorted(set(names) - {str(t) for t in wanted})
        raise ConfigError(f"log.trackers: accelerate finds no installed package for {', '.join(missing)}")
    saved = accelerator.log_with, accelerator.trackers, accelerator.project_configuration.logging_dir
    accelerator.log_with, accelerator.trackers = wanted, []
    accelerator.project_configuration.logging_dir = str(folder)
    try:
        accelerator.init_trackers(
            project,
            config=hyperparameters(cfg, run_dir.name),
            init_kwargs=init_kwargs(names, folder, run_dir.name, start_iteration),
        )
        ours = accelerator.trackers
    except BaseException:
        Tracking(accelerator.trackers).finish()
        raise
    finally:
        accelerator.log_with = saved[0]  # only init_trackers reads it
        accelerator.trackers = list(saved[1]) + accelerator.trackers
        accelerator.project_configuration.logging_dir = saved[2]
    for tracker in ours:  # the hyperparameters on disk now, should the run stop early
        writer = getattr(tracker, "writer", None) if tracker.name == "tensorboard" else None
        if writer is not None:
            writer.flush()
    where = (
        f" (files under {folder})" if any(n in ("tensorboard", "swanlab", "dvclive", "wandb") for n in names) else ""
    )
    logger.warning("log.trackers: logging to %s, project %r%s", ", ".join(names), project, where)
    return Tracking(ours)


@contextmanager
def session(accelerator, cfg: Config, run_dir: Path, start_iteration: int) -> Iterator[Tracking]:
    """Trackers for one ``Trainer.train()``: started on entry, finished (flushed, closed, and then empty) on any
    exit, an interrupt or an error included. Not ``accelerator.end_training()``, which also destroys the process
    group a caller may still use; the trackers a caller's Accelerator already ran stay open."""
    tracking = start(accelerator, cfg, run_dir, start_iteration)
    try:
        yield tracking
    finally:
        started = list(tracking.trackers)
        tracking.finish()
        if started:
            accelerator.trackers = [t for t in accelerator.trackers if all(t is not s for s in started)]
