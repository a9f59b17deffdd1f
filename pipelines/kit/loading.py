"""Loading a family's diffusers pipeline: dtypes, hub id / local folder / single-file checks, and one-line
errors naming the folder that did not load or the offline hub. Shared by every family."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class HubUnavailableError(RuntimeError):
    """The model is neither a local folder nor reachable on the hub."""


SINGLE_FILE_SUFFIXES = (".safetensors", ".ckpt")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt")


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` of an exception, for one-line errors."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def offline() -> bool:
    """True under ``HF_HUB_OFFLINE=1``."""
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")


def local_or_hub(path: str) -> str:
    """``model.path`` as diffusers should read it: the local folder (``~`` expanded) when one exists, else
    the hub id unchanged."""
    local = Path(path).expanduser()
    return str(local) if local.exists() else path


def is_single_file(path: str) -> bool:
    """A ``.safetensors`` / ``.ckpt`` checkpoint (loaded with ``from_single_file``), not a folder or hub id."""
    return Path(path).suffix.lower() in SINGLE_FILE_SUFFIXES


def looks_local(path: str) -> bool:
    """True when ``path`` can only mean a local file or folder: absolute, ``./``, ``../`` or ``~``, more
    than one ``/`` (a hub id is ``name`` or ``owner/name``), a single-file name, or a relative path whose
    first part exists here."""
    if path.startswith(("./", "../", "~", ".\\", "..\\")) or path in (".", "..") or os.path.isabs(path):
        return True
    if path.count("/") > 1 or is_single_file(path):
        return True
    return "/" in path and Path(Path(path).parts[0]).exists()


def check_folder(name: str, path: str, folder: Path) -> None:
    """A diffusers pipeline folder: not empty, a ``model_index.json``, and every component it lists."""
    if not any(folder.iterdir()):
        raise ValueError(
            f"{name}: folder {path!r} is empty; expected a diffusers pipeline folder "
            "(model_index.json, transformer/, vae/, ...)"
        )
    index = folder / "model_index.json"
    if not index.is_file():
        raise ValueError(
            f"{name}: folder {path!r} has no model_index.json: not a diffusers pipeline folder "
            "(save one with pipe.save_pretrained, or give a .safetensors single file)"
        )
    try:
        listed = json.loads(index.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name}: {path}/model_index.json is not valid JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(listed, dict) or "_class_name" not in listed:
        raise ValueError(f"{name}: {path}/model_index.json has no _class_name: not a diffusers pipeline index")
    for part, spec in listed.items():
        if part.startswith("_") or not isinstance(spec, list) or spec[0] is None:
            continue
        if not (folder / part).is_dir():
            raise ValueError(f"{name}: folder {path!r} lacks {part}/, which its model_index.json lists")
        if (folder / part / "config.json").is_file() and not has_weights(folder / part):
            raise ValueError(f"{name}: {path}/{part}/ has a config.json but no weights (*.safetensors or *.bin)")


def has_weights(folder: Path) -> bool:
    return any(p.suffix in WEIGHT_SUFFIXES or p.name.endswith(".index.json") for p in folder.iterdir())


def single_file_keys(path: str | Path) -> list[str]:
    """The tensor names of a single-file checkpoint (the safetensors header; a ``.ckpt`` is memory-mapped)."""
    path = Path(path)
    try:
        if path.suffix.lower() == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as f:
                return list(f.keys())
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        while isinstance(state, dict) and "state_dict" in state:
            state = state["state_dict"]
        return list(state)
    except Exception as exc:  # noqa: BLE001 -- safetensors and torch raise their own types for a damaged file
        raise ValueError(
            f"model.path: {str(path)!r} is not a readable {path.suffix} checkpoint "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        ) from None


def check_folder_or_hub(path: str, family: str, label: str) -> None:
    """``model.path`` of a family loaded only from a diffusers folder or a hub id: a folder must be a complete
    pipeline folder, a file is refused (``label``: the family's checkpoints in the message), a path that can
    only be local must exist. A hub id passes (loading it says whether it can be fetched)."""
    local = Path(path).expanduser()
    if local.is_dir():
        check_folder("model.path", path, local)
    elif local.is_file() or is_single_file(path):
        raise ValueError(
            f"model.path: {path!r} is a file; the {family} pipeline loads a diffusers folder or a hub id "
            f"(single-file {label} checkpoints are not supported)"
        )
    elif looks_local(path) and not path.startswith(("http://", "https://")):
        raise FileNotFoundError(f"model.path: no such file or folder {path!r}")


def load_pretrained_pipeline(class_name: str, path: str, dtype: str = "fp32", revision: str | None = None):
    """``diffusers.<class_name>.from_pretrained`` of a hub id or a local folder, with a one-line error naming
    the folder that did not load, or the offline hub."""
    import diffusers

    try:
        return getattr(diffusers, class_name).from_pretrained(
            local_or_hub(path), torch_dtype=DTYPES[dtype], revision=revision
        )
    except (OSError, ValueError, KeyError) as exc:
        if Path(path).expanduser().is_dir():
            raise HubUnavailableError(
                f"model.path={path!r}: the diffusers folder could not be loaded ({first_line(exc)})"
            ) from exc
        why = "the hub is offline (HF_HUB_OFFLINE=1)" if offline() else "it could not be fetched"
        raise HubUnavailableError(
            f"model.path={path!r}: not a local folder and {why}; download it first "
            f"(hf download {path}) or set model.path to a local folder"
        ) from exc
