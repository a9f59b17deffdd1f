"""Loading helpers shared by the learned rewards: one clear line when weights are missing, never a silent download.

A weight *file* is named by a local path or by ``"hub_repo::filename"`` (fetched through
``huggingface_hub`` only when the user asks for that reward; with ``HF_HUB_OFFLINE=1`` only the local
cache is read). A *model folder* is a hub id or a local folder, loaded with ``from_pretrained``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from flowrl.reward_models.base import RewardError


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def resolve_file(spec: str | os.PathLike, reward: str, what: str) -> Path:
    """A local file path, or ``"repo::filename"`` downloaded (or read from cache) with ``hf_hub_download``."""
    spec = str(spec)
    if os.path.isfile(spec):
        return Path(spec)
    if "::" not in spec:
        raise RewardError(
            f"{reward}: the {what} file {spec!r} does not exist (give a local path or 'hub_repo::filename')"
        )
    repo, _, filename = spec.partition("::")
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(repo_id=repo, filename=filename))
    except Exception as exc:
        raise RewardError(
            f"{reward}: cannot get the {what} {filename!r} from {repo!r} ({_reason(exc)}); download it where the hub "
            f"is reachable (`hf download {repo} {filename}`) or pass a local path"
        ) from exc


def load_pretrained(loader: Any, source: str, reward: str, what: str, **kwargs: Any) -> Any:
    """``loader.from_pretrained(source)`` with a one-line error naming the reward and the source."""
    try:
        return loader.from_pretrained(source, **kwargs)
    except (OSError, ValueError) as exc:
        raise RewardError(
            f"{reward}: cannot load the {what} {source!r} ({_reason(exc)}); download it first "
            f"(`hf download {source}` where the hub is reachable) or pass a local folder"
        ) from exc


def load_state_dict(path: Path, reward: str) -> dict[str, torch.Tensor]:
    """Tensors of a ``.safetensors`` or a ``torch.save`` file (``weights_only``: no pickled code runs)."""
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise RewardError(f"{reward}: cannot read weights from {str(path)!r} ({_reason(exc)})") from exc
    for key in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict):
        raise RewardError(f"{reward}: {str(path)!r} holds no state dict")
    return state


def strip_prefix(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """Drop a ``module.``-style prefix when every key has it (checkpoints saved from DDP wrappers)."""
    if state and all(k.startswith(prefix) for k in state):
        return {k[len(prefix) :]: v for k, v in state.items()}
    return state


def load_into(module: torch.nn.Module, state: dict[str, torch.Tensor], reward: str, what: str) -> None:
    """Strict ``load_state_dict`` whose failure is one line naming a few missing / unexpected keys."""
    try:
        result = module.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shape mismatches
        raise RewardError(f"{reward}: the {what} weights do not fit the model ({_reason(exc)})") from exc
    problems = []
    if result.missing_keys:
        problems.append(f"missing {len(result.missing_keys)} (e.g. {result.missing_keys[:3]})")
    if result.unexpected_keys:
        problems.append(f"unexpected {len(result.unexpected_keys)} (e.g. {result.unexpected_keys[:3]})")
    if problems:
        raise RewardError(f"{reward}: the {what} weights do not fit the model: " + "; ".join(problems))


def pick_device(device: str | torch.device | None) -> torch.device:
    return torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
