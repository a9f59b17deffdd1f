"""Checkpoints in safetensors + JSON (no pickle): trainable weights, optimizer, EMA, RNG, iteration.

A checkpoint folder is written under a temporary name and renamed when complete, so a run killed while
saving never leaves a half-written folder that ``latest_checkpoint`` would pick up.
"""

from __future__ import annotations

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

from flowrl.sharding import is_sharded, shard_like, whole_on_main

logger = logging.getLogger(__name__)

STATE_FILE = "state.json"
_NAME = re.compile(r"^iter-(\d+)$")


class CheckpointError(RuntimeError):
    pass


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
    for idx, state in sd["state"].items():
        for key, value in state.items():
            if torch.is_tensor(value):
                tensors[f"{idx}.{key}"] = value
            else:
                scalars.setdefault(str(idx), {})[key] = value
    return whole_on_main(tensors, main), {"param_groups": sd["param_groups"], "scalars": scalars}


def optimizer_from_tensors(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    """Load what ``optimizer_to_tensors`` wrote; state of a parameter's shape is cut to the parameter's
    FSDP shard where it has one."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        idx, key = name.split(".", 1)
        param = params[int(idx)] if int(idx) < len(params) else None
        if param is not None and is_sharded(param) and value.shape == param.shape:
            value = shard_like(value.to(param.dtype), param)
        state.setdefault(int(idx), {})[key] = value
    for idx, extra in meta["scalars"].items():
        state.setdefault(int(idx), {}).update(extra)
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


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
) -> Path:
    """Write the weights, optimizer (``optimizer_to_tensors``'s pair), EMA and state into ``tmp`` and
    rename it into place (main process). Tensors are whole: see ``flowrl.sharding``."""
    tmp = Path(tmp)
    save_file({k: v.detach().cpu().contiguous() for k, v in trainable.items()}, tmp / "trainable.safetensors")
    opt_tensors, opt_meta = optimizer_state
    save_file(opt_tensors, tmp / "optimizer.safetensors")
    if ema is not None:
        save_file({k: v.detach().cpu().contiguous() for k, v in ema.items()}, tmp / "ema.safetensors")
    state = {"iteration": iteration, "optimizer": opt_meta, **(extra or {})}
    with open(tmp / STATE_FILE, "w") as f:  # written last: its presence marks a complete checkpoint
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    final = tmp.with_name(checkpoint_name(iteration))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
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
    tmp = begin_checkpoint(root, iteration)
    write_rng(tmp, 0)
    return finish_checkpoint(tmp, iteration, trainable, optimizer_to_tensors(optimizer), ema, extra)


def load_checkpoint(path: str | Path, rank: int = 0) -> dict[str, Any]:
    """Read a checkpoint folder; the RNG states are this ``rank``'s (rank 0's if it has none)."""
    path = Path(path)
    if not (path / STATE_FILE).is_file():
        raise CheckpointError(f"resume={str(path)!r}: not a complete flowrl checkpoint (no {STATE_FILE})")
    state = json.loads((path / STATE_FILE).read_text())
    state["trainable"] = load_file(path / "trainable.safetensors")
    state["optimizer_tensors"] = load_file(path / "optimizer.safetensors")
    state["ema"] = load_file(path / "ema.safetensors") if (path / "ema.safetensors").exists() else None
    rng_file = path / f"rng-rank{rank}.safetensors"
    rng_file = rng_file if rng_file.exists() else path / "rng-rank0.safetensors"
    state["rng_tensors"] = load_file(rng_file)
    with safe_open(rng_file, framework="pt") as f:
        state["rng"] = json.loads(f.metadata()["states"])
    return state


def list_checkpoints(root: str | Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest first (temporary folders are ignored)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if _NAME.match(p.name) and (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: int(_NAME.match(p.name).group(1)))


def latest_checkpoint(root: str | Path) -> Path | None:
    found = list_checkpoints(root)
    return found[-1] if found else None


def prune_checkpoints(root: str | Path, keep_last: int) -> None:
    """Delete all but the newest ``keep_last`` complete checkpoints (the newest is always kept)."""
    found = list_checkpoints(root)
    for old in found[: max(len(found) - max(keep_last, 1), 0)]:
        shutil.rmtree(old, ignore_errors=True)
