"""Checkpoints in safetensors + JSON (no pickle): trainable weights, optimizer, EMA, RNG, iteration.

A checkpoint folder is written under a temporary name and renamed when complete, so a run killed while
saving never leaves a half-written folder that ``latest_checkpoint`` would pick up. ``state.json``, written
last, records the byte size and sha256 of every other file; loading checks them, and ``latest_checkpoint``
skips (with a warning) a checkpoint damaged after it was written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from flowrl.memory import is_8bit_state, join_8bit_state, requantize_state, split_8bit_state
from flowrl.sharding import is_sharded, shard_like, whole_on_main

logger = logging.getLogger(__name__)

STATE_FILE = "state.json"
_NAME = re.compile(r"^iter-(\d+)$")


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used: incomplete, corrupt, or not matching the model. One line."""


# ------------------------------------------------------------------------------------------ optimizer
def optimizer_to_tensors(
    optimizer: torch.optim.Optimizer, main: bool = True
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split ``optimizer.state_dict()`` into whole CPU tensors (for safetensors) and a JSON-able rest.

    Collective when the state is FSDP-sharded (every process calls it); the tensors come back on the
    ``main`` process only (``flowrl.sharding.whole_on_main``)."""
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    quantized: dict[str, dict[str, Any]] = {}  # train.optimizer=adamw_8bit: its 8-bit moments, saved as their parts
    for idx, state in sd["state"].items():
        for key, value in state.items():
            if is_8bit_state(value):
                split_8bit_state(f"{idx}.{key}", value, tensors, quantized)
            elif torch.is_tensor(value):
                tensors[f"{idx}.{key}"] = value
            else:
                scalars.setdefault(str(idx), {})[key] = value
    # torchao's optimizers hold each group's learning rate as a tensor
    groups = [
        {k: float(v) if k == "lr" and torch.is_tensor(v) else v for k, v in g.items()} for g in sd["param_groups"]
    ]
    meta = {"param_groups": groups, "scalars": scalars, **({"quantized": quantized} if quantized else {})}
    return whole_on_main(tensors, main), meta


def optimizer_from_tensors(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    """Load what ``optimizer_to_tensors`` wrote; state of a parameter's shape is cut to the parameter's
    FSDP shard where it has one."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state: dict[int, dict[str, Any]] = {}
    tensors = dict(tensors)
    for name, info in meta.get("quantized", {}).items():  # 8-bit moments, saved as their parts
        idx, key = name.split(".", 1)
        param = params[int(idx)]
        value = join_8bit_state(name, tensors, info, param)
        state.setdefault(int(idx), {})[key] = shard_like(value, param) if is_sharded(param) else value
    for name, value in tensors.items():
        idx, key = name.split(".", 1)
        param = params[int(idx)] if int(idx) < len(params) else None
        if param is not None and is_sharded(param) and value.shape == param.shape:
            value = shard_like(value.to(param.dtype), param)
        state.setdefault(int(idx), {})[key] = value
    for idx, extra in meta["scalars"].items():
        state.setdefault(int(idx), {}).update(extra)
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    requantize_state(optimizer)  # adamw_8bit: moments saved as fp32 values back in 8 bits, learning rates as tensors


# ------------------------------------------------------------------------------------------ RNG
def rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda{i}"] = s
    np_state = np.random.get_state()
    meta = {
        "python": [random.getstate()[0], list(random.getstate()[1]), random.getstate()[2]],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
    }
    return tensors, meta


def set_rng_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    torch.set_rng_state(tensors["torch"])
    cuda = [tensors[k] for k in sorted(tensors) if k.startswith("cuda")]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    version, state, gauss = meta["python"]
    random.setstate((version, tuple(state), gauss))
    name, keys, pos, has_gauss, cached = meta["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))


# ------------------------------------------------------------------------------------------ folders
def checkpoint_name(iteration: int) -> str:
    return f"iter-{iteration:06d}"


def begin_checkpoint(root: str | Path, iteration: int) -> Path:
    """Create the empty temporary folder of checkpoint ``iteration`` (main process)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / (checkpoint_name(iteration) + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


def write_rng(tmp: Path, rank: int) -> None:
    """This process's RNG states (torch, CUDA, Python, NumPy) as ``rng-rank<r>.safetensors``."""
    tensors, meta = rng_state()
    save_file(tensors, Path(tmp) / f"rng-rank{rank}.safetensors", metadata={"states": json.dumps(meta)})


def finish_checkpoint(
    tmp: Path,
    iteration: int,
    trainable: dict[str, torch.Tensor],
    optimizer_state: tuple[dict[str, torch.Tensor], dict[str, Any]],
    ema: dict[str, torch.Tensor] | None = None,
    extra: dict[str, Any] | None = None,
    averages: dict[str, dict[str, torch.Tensor]] | None = None,
) -> Path:
    """Write the weights, optimizer (``optimizer_to_tensors``'s pair), EMA, the method's parameter
    averages (``average-<name>.safetensors``) and state into ``tmp`` and rename it into place (main
    process). Tensors are whole: see ``flowrl.sharding``."""
    tmp = Path(tmp)
    save_file({k: v.detach().cpu().contiguous() for k, v in trainable.items()}, tmp / "trainable.safetensors")
    opt_tensors, opt_meta = optimizer_state
    save_file(opt_tensors, tmp / "optimizer.safetensors")
    if ema is not None:
        save_file({k: v.detach().cpu().contiguous() for k, v in ema.items()}, tmp / "ema.safetensors")
    for name, tensors in (averages or {}).items():
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, tmp / f"average-{name}.safetensors")
    state = {"iteration": iteration, "optimizer": opt_meta, **(extra or {}), "files": file_checksums(tmp, sync=True)}
    with open(tmp / STATE_FILE, "w") as f:  # written last: its presence marks a complete checkpoint
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    final = tmp.with_name(checkpoint_name(iteration))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _remember_intact(final)
    return final


def save_checkpoint(
    root: str | Path,
    iteration: int,
    trainable: dict[str, torch.Tensor],
    optimizer: torch.optim.Optimizer,
    ema: dict[str, torch.Tensor] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Single-process ``begin_checkpoint`` + ``write_rng`` + ``finish_checkpoint`` of ``root/iter-NNNNNN``."""
    try:
        tmp = begin_checkpoint(root, iteration)
        write_rng(tmp, 0)
        return finish_checkpoint(tmp, iteration, trainable, optimizer_to_tensors(optimizer), ema, extra)
    except OSError as exc:
        raise write_failed(Path(root), iteration, exc) from None


def write_failed(root: Path, iteration: int, exc: OSError) -> CheckpointError:
    """A checkpoint write that failed (a full disk, a quota, a folder gone): its temporary folder removed, so
    nothing half-written is left, and one line saying so, what is intact and how to go on."""
    tmp = root / (checkpoint_name(iteration) + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    why = exc.strerror or str(exc) or type(exc).__name__
    found = list_checkpoints(root)
    intact = f"the earlier ones are intact (newest: {found[-1].name})" if found else "no earlier checkpoint exists"
    return CheckpointError(
        f"checkpoint {root / checkpoint_name(iteration)}: could not be written ({why}); the partial folder was "
        f"removed and {intact}; free space under {root} and continue with resume=latest"
    )


def load_checkpoint(path: str | Path, rank: int = 0) -> dict[str, Any]:
    """Read a checkpoint folder after ``verify_checkpoint``; the RNG states are this ``rank``'s (rank 0's if it
    has none)."""
    path = Path(path)
    if not (path / STATE_FILE).is_file():
        raise CheckpointError(f"resume={str(path)!r}: not a complete flowrl checkpoint (no {STATE_FILE})")
    state = verify_checkpoint(path)
    state["trainable"] = load_file(path / "trainable.safetensors")
    state["optimizer_tensors"] = load_file(path / "optimizer.safetensors")
    state["ema"] = load_file(path / "ema.safetensors") if (path / "ema.safetensors").exists() else None
    state["averages"] = {
        f.name[len("average-") : -len(".safetensors")]: load_file(f) for f in sorted(path.glob("average-*.safetensors"))
    }
    rng_file = path / f"rng-rank{rank}.safetensors"
    rng_file = rng_file if rng_file.exists() else path / "rng-rank0.safetensors"
    state["rng_tensors"] = load_file(rng_file)
    with safe_open(rng_file, framework="pt") as f:
        state["rng"] = json.loads(f.metadata()["states"])
    return state


# ------------------------------------------------------------------------------------------ integrity
_CHUNK = 8 << 20
_intact: set[tuple] = set()  # stat signatures of folders verified (or written) by this process


def file_checksum(path: Path, sync: bool = False) -> dict[str, Any]:
    """``{"bytes": size, "sha256": hex}`` of one file, read in 8 MiB chunks; ``sync``: fsync it too."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
        if sync:
            os.fsync(f.fileno())
    return {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def file_checksums(folder: Path, sync: bool = False) -> dict[str, dict[str, Any]]:
    """Size and sha256 of every file in ``folder`` except ``state.json``, by file name."""
    files = [p for p in sorted(Path(folder).iterdir()) if p.is_file() and p.name != STATE_FILE]
    return {p.name: file_checksum(p, sync) for p in files}


def _signature(path: Path) -> tuple:
    """Name, size and modification time of each file: a cheap stand-in for "unchanged since verified"."""
    stats = [(p.name, p.stat()) for p in sorted(path.iterdir()) if p.is_file()]
    return (str(path.resolve()), *((n, s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns) for n, s in stats))


def _remember_intact(path: Path) -> None:
    _intact.add(_signature(path))


def read_state(path: str | Path) -> dict[str, Any]:
    """A checkpoint's ``state.json``, or a CheckpointError naming the folder and the file."""
    path = Path(path)
    if not (path / STATE_FILE).is_file():
        raise CheckpointError(f"checkpoint {path}: not a complete flowrl checkpoint (no {STATE_FILE})")
    try:
        state = json.loads((path / STATE_FILE).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        why = f"not valid JSON: {exc}"
        raise CheckpointError(f"checkpoint {path}: {STATE_FILE} is corrupt or truncated ({why})") from None
    if not isinstance(state, dict) or "iteration" not in state:
        raise CheckpointError(f"checkpoint {path}: {STATE_FILE} is corrupt (no 'iteration')")
    return state


def verify_checkpoint(path: str | Path) -> dict[str, Any]:
    """``read_state`` and check every file it lists: present, of its recorded size and sha256. Returns the
    state. A checkpoint written before checksums were recorded is only checked for its files' presence."""
    path = Path(path)
    state = read_state(path)
    files = state.get("files")
    needed = files or {"trainable.safetensors": None, "optimizer.safetensors": None, "rng-rank0.safetensors": None}
    for name in needed:
        if not (path / name).is_file():
            raise CheckpointError(f"checkpoint {path}: {name} is missing")
    if not files or _signature(path) in _intact:
        return state
    for name, want in files.items():
        size = (path / name).stat().st_size
        if size != want["bytes"]:
            raise CheckpointError(
                f"checkpoint {path}: {name} is corrupt or truncated ({size} bytes, {want['bytes']} written)"
            )
        if file_checksum(path / name)["sha256"] != want["sha256"]:
            raise CheckpointError(f"checkpoint {path}: {name} is corrupt or truncated (checksum mismatch)")
    _remember_intact(path)
    return state


def checkpoint_family(path: str | Path, state: dict[str, Any] | None = None) -> str | None:
    """The ``model.pipeline`` a checkpoint was trained with: its state's config, else its run's ``config.yaml``
    (two levels up, ``RUN/checkpoints/iter-N``); None where neither can be read."""
    path = Path(path)
    try:
        state = read_state(path) if state is None else state
    except CheckpointError:
        return None
    config = state.get("config")
    if not isinstance(config, dict) and (path.parent.parent / "config.yaml").is_file():
        import yaml

        try:
            config = yaml.safe_load((path.parent.parent / "config.yaml").read_text())
        except (OSError, yaml.YAMLError):
            return None
    model = config.get("model") if isinstance(config, dict) else None
    pipeline = model.get("pipeline", "sd3") if isinstance(model, dict) else None  # sd3: the config's default
    return pipeline if isinstance(pipeline, str) else None


def check_family(path: str | Path, pipeline: str, option: str = "resume", state: dict[str, Any] | None = None) -> None:
    """Refuse a checkpoint trained with another ``model.pipeline`` than ``pipeline``, naming both families (its
    tensors would otherwise fail to fit under a name that blames a setting such as ``train.lora.rank``)."""
    family = checkpoint_family(path, state)
    if family is not None and family != pipeline:
        raise CheckpointError(
            f"{option}: checkpoint {str(path)!r} is of family {family} (it trained model.pipeline={family}), but "
            f"this config's model.pipeline is {pipeline}; a checkpoint continues only with its own family: give the "
            f"recipe it was trained with"
        )


def check_trainable_against(
    state_trainable: dict[str, torch.Tensor], params: dict[str, torch.Tensor], path: str | Path
) -> None:
    """Refuse a checkpoint's trainable tensors that do not fit ``params`` (the model's trainable parameters by
    name): a tensor the model trains but the checkpoint lacks, one the checkpoint holds but the model does
    not train, or a shape mismatch (reported first). The message names the tensor, both shapes and the likely
    config key."""
    where = f"checkpoint {path}"
    if not state_trainable:
        raise CheckpointError(f"{where}: holds no trainable tensors")
    lora_here, lora_there = any(_is_lora(n) for n in params), any(_is_lora(n) for n in state_trainable)
    if lora_here != lora_there:
        kinds = {True: "LoRA", False: "full-weight"}
        raise CheckpointError(
            f"{where}: holds {kinds[lora_there]} tensors but the model trains {kinds[lora_here]} "
            f"ones; check train.lora.enabled"
        )
    for name, param in params.items():
        got, want = tuple(state_trainable.get(name, param).shape), tuple(param.shape)
        if got != want:
            raise CheckpointError(
                f"{where}: tensor {name!r} has shape {got} in the checkpoint but {want} in the "
                f"model; check {_likely_key(name, 'shape')}"
            )
    missing = sorted(set(params) - set(state_trainable))
    if missing:
        raise CheckpointError(
            f"{where}: lacks {len(missing)} of the model's trainable tensors (e.g. "
            f"{missing[0]!r}); check {_likely_key(missing[0], 'name')}"
        )
    extra = sorted(set(state_trainable) - set(params))
    if extra:
        raise CheckpointError(
            f"{where}: holds {len(extra)} tensors the model does not train (e.g. {extra[0]!r}); "
            f"check {_likely_key(extra[0], 'name')}"
        )


def _is_lora(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name


def _likely_key(name: str, kind: str) -> str:
    """The config key most likely behind a mismatch of tensor ``name`` (``kind``: "shape" or "name")."""
    if _is_lora(name):
        return "train.lora.rank" if kind == "shape" else "train.lora.target_modules"
    return "model.path / model.tiny_size (another base model)"


def list_checkpoints(root: str | Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest first (temporary folders are ignored)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if _NAME.match(p.name) and (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: int(_NAME.match(p.name).group(1)))


def latest_intact_checkpoint(root: str | Path) -> tuple[Path | None, list[str]]:
    """The newest complete checkpoint under ``root`` that passes ``verify_checkpoint`` (None if none does),
    and the errors of the newer ones that failed, newest first."""
    skipped: list[str] = []
    for path in reversed(list_checkpoints(root)):
        try:
            verify_checkpoint(path)
            return path, skipped
        except CheckpointError as exc:
            skipped.append(str(exc))
    return None, skipped


def latest_checkpoint(root: str | Path) -> Path | None:
    """The newest intact checkpoint under ``root``; each newer damaged one is logged as a warning."""
    path, skipped = latest_intact_checkpoint(root)
    for reason in skipped:
        logger.warning("skipping %s", reason)
    return path


def prune_checkpoints(root: str | Path, keep_last: int) -> None:
    """Delete all but the newest ``keep_last`` complete checkpoints. The newest intact one is always kept, and
    so is every damaged one newer than it (for inspection)."""
    found = list_checkpoints(root)
    keep = set(found[-max(keep_last, 1) :])
    intact, _ = latest_intact_checkpoint(root)
    if intact is not None:
        keep |= set(found[found.index(intact) :])
    for old in found:
        if old not in keep:
            shutil.rmtree(old, ignore_errors=True)


def save_run(root: Path, iterations_done: int, acc: Any, policy: Any, extra: dict[str, Any], keep_last: int) -> None:
    """Checkpoint ``iterations_done`` of a run under ``root``: every process's RNG, and the policy's weights,
    optimizer state, EMA and parameter averages as whole tensors (gathered from FSDP shards by every process,
    written by the main one) with ``extra`` (JSON: the run's counters, config and method state); then keep the
    newest ``keep_last``. Every process calls it. A write that fails (``OSError``: a full disk) leaves no partial
    folder and raises one ``CheckpointError`` line (``write_failed``)."""
    try:
        _save_run(root, iterations_done, acc, policy, extra, keep_last)
    except OSError as exc:
        raise write_failed(Path(root), iterations_done, exc) from None


def _save_run(root: Path, iterations_done: int, acc: Any, policy: Any, extra: dict[str, Any], keep_last: int) -> None:
    tmp = root / (checkpoint_name(iterations_done) + ".tmp")
    acc.wait_for_everyone()
    if acc.is_main_process:
        begin_checkpoint(root, iterations_done)
    acc.wait_for_everyone()
    write_rng(tmp, acc.process_index)  # every process's RNG
    acc.wait_for_everyone()
    main = acc.is_main_process
    trainable = whole_on_main(policy.trainable, main)
    optimizer_state = optimizer_to_tensors(policy.optimizer.optimizer, main)
    ema = whole_on_main(policy.ema.shadow, main) if policy.ema else None
    averages = {name: whole_on_main(a.shadow, main) for name, a in policy.averages.items()}
    if main:
        counts = {
            "ema_updates": policy.ema.updates if policy.ema else 0,
            "average_updates": {name: a.updates for name, a in policy.averages.items()},
            "processes": acc.num_processes,
        }
        finish_checkpoint(
            tmp, iterations_done, trainable, optimizer_state, ema=ema, averages=averages, extra={**extra, **counts}
        )
        prune_checkpoints(root, keep_last)


def restore_run(path: Path, acc: Any, policy: Any, method_name: str) -> dict[str, Any]:
    """Load the checkpoint ``path`` into ``policy`` (weights, optimizer, EMA, the averages method
    ``method_name`` keeps, sharded like the live ones) and this process's RNG; returns its state for the rest."""
    state = load_checkpoint(path, rank=acc.process_index)
    check_trainable_against(state["trainable"], policy.trainable, path)  # a DTensor's shape is the whole one
    with torch.no_grad():
        for name, p in policy.trainable.items():
            p.copy_(shard_like(state["trainable"][name], p))
    optimizer_from_tensors(policy.optimizer.optimizer, state["optimizer_tensors"], state["optimizer"])
    if policy.ema is not None and state["ema"] is not None:
        policy.ema.shadow = {k: shard_like(v, policy.ema.shadow[k]) for k, v in state["ema"].items()}
        policy.ema.updates = state.get("ema_updates", 0)
    for name, average in policy.averages.items():
        saved = state["averages"].get(name)
        if saved is None:
            raise CheckpointError(
                f"resume={str(path)!r}: the checkpoint holds no parameter average {name!r}, "
                f"which method {method_name} keeps"
            )
        average.shadow = {k: shard_like(v, average.shadow[k]) for k, v in saved.items()}
        average.updates = int(state.get("average_updates", {}).get(name, 0))
    set_rng_state(state["rng_tensors"], state["rng"])
    return state
