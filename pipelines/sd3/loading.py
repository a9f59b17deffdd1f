"""Loading SD3 / SD3.5: a diffusers folder, a hub id, or a ``.safetensors``/``.ckpt`` single file (with
``model.config_path`` supplying what the file lacks), each refused in one line before any model is built."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from flowrl.pipelines.kit.loading import (
    DTYPES,
    HubUnavailableError,
    check_folder,
    is_single_file,
    local_or_hub,
    looks_local,
    offline,
    single_file_keys,
)

# the pipeline parts a single-file checkpoint may hold, by the key prefixes diffusers' converters read
# (diffusers.loaders.single_file_utils: CHECKPOINT_KEY_NAMES["sd3"], LDM_VAE_KEYS, "text_encoders.*")
_SINGLE_FILE_PARTS = {
    "transformer": ("joint_blocks.", "model.diffusion_model.joint_blocks."),
    "vae": ("first_stage_model.", "vae."),
    "text_encoder": ("text_encoders.clip_l.",),
    "text_encoder_2": ("text_encoders.clip_g.",),
    "text_encoder_3": ("text_encoders.t5xxl.",),
}


def single_file_parts(keys: list[str]) -> set[str]:
    """Which pipeline components (``transformer``, ``vae``, ``text_encoder``...) a single file holds."""
    return {part for part, prefixes in _SINGLE_FILE_PARTS.items() if any(k.startswith(prefixes) for k in keys)}


def _check_single_file(path: str, local: Path, config: str | None) -> None:
    parts = single_file_parts(single_file_keys(local))
    if "transformer" not in parts:
        raise ValueError(
            f"model.path: {path!r} holds no SD3 transformer weights (no 'joint_blocks.*' tensors): "
            "not an SD3/SD3.5 single-file checkpoint"
        )
    missing = sorted(set(_SINGLE_FILE_PARTS) - parts)
    if missing and config is None:
        raise ValueError(
            f"model.path: {path!r} lacks {', '.join(missing)}; set model.config_path to the base model's diffusers "
            "folder or hub id (e.g. stabilityai/stable-diffusion-3.5-medium) to take them from"
        )
    if config is not None:
        _check_model_location("model.config_path", config, single_file=False)


def _check_model_location(name: str, path: str, single_file: bool = True, config: str | None = None) -> None:
    local = Path(path).expanduser()
    if local.is_dir():
        check_folder(name, path, local)
    elif local.is_file():
        if not (single_file and is_single_file(path)):
            allowed = (
                "a diffusers folder, a hub id or a .safetensors/.ckpt single file"
                if single_file
                else "a diffusers folder or a hub id"
            )
            raise ValueError(f"{name}: {path!r} is a file; expected {allowed}")
        _check_single_file(path, local, config)
    elif looks_local(path) and not path.startswith(("http://", "https://")):
        raise FileNotFoundError(f"{name}: no such file or folder {path!r}")


def check_model_path(model_cfg) -> None:
    """Refuse a ``model.path`` (and ``model.config_path``, where the config has it) that cannot load, before
    any model is built: a missing local path, an empty folder or one without ``model_index.json``, a file that
    is not a readable SD3 single-file checkpoint. A hub id passes (loading it reports an offline hub)."""
    if model_cfg.path == "tiny":
        return
    _check_model_location("model.path", model_cfg.path, config=getattr(model_cfg, "config_path", None))


def _load_error(path: str, exc: BaseException, config: str | None = None) -> HubUnavailableError:
    why = "the hub is offline (HF_HUB_OFFLINE=1)" if offline() else "it could not be fetched"
    if is_single_file(path):
        source = f"model.config_path={config!r}" if config else "the hub id diffusers guessed from its keys"
        return HubUnavailableError(
            f"model.path={path!r}: the single file's pipeline configs and tokenizers come from {source}, which "
            f"could not be loaded ({type(exc).__name__}); set model.config_path to a local diffusers folder of "
            "the base model"
        )
    if Path(path).expanduser().is_dir():
        detail = str(exc).splitlines()[0] if str(exc) else ""
        return HubUnavailableError(
            f"model.path={path!r}: the diffusers folder could not be loaded ({type(exc).__name__}: {detail})"
        )
    return HubUnavailableError(
        f"model.path={path!r}: not a local folder and {why}; download it first "
        f"(hf download {path}) or set model.path to a local folder"
    )


def _parts_from_config(config: str, names: list[str], torch_dtype: torch.dtype, revision: str | None) -> dict:
    """The pipeline components ``names`` loaded from a diffusers folder or hub id (those a single file lacks).

    diffusers 0.42 looks for a lacking text encoder under the diffusers weight names only, so it never finds
    a transformers ``model.safetensors``: flowrl loads them itself."""
    from diffusers import AutoencoderKL
    from transformers import CLIPTextModelWithProjection, T5EncoderModel

    classes = {
        "vae": AutoencoderKL,
        "text_encoder": CLIPTextModelWithProjection,
        "text_encoder_2": CLIPTextModelWithProjection,
        "text_encoder_3": T5EncoderModel,
    }
    source = local_or_hub(config)
    index = Path(source) / "model_index.json"
    listed = json.loads(index.read_text()) if index.is_file() else {}
    parts = {}
    for name in names:
        if listed.get(name, [True])[0] is None:  # a pipeline saved without it (SD3 may drop T5)
            parts[name] = None
            continue
        parts[name] = classes[name].from_pretrained(source, subfolder=name, torch_dtype=torch_dtype, revision=revision)
    return parts


def load_sd3_single_file(path: str, dtype: str = "fp32", config: str | None = None, revision: str | None = None):
    """``StableDiffusion3Pipeline.from_single_file`` of a ``.safetensors``/``.ckpt`` file. ``config`` (a
    diffusers folder or hub id) supplies the component configs and tokenizers, and every component the file
    lacks (a fine-tune often holds only the transformer); without it diffusers guesses a hub id from the keys."""
    from diffusers import StableDiffusion3Pipeline
    from diffusers.loaders.single_file_utils import SingleFileComponentError

    local = Path(path).expanduser()
    torch_dtype = DTYPES[dtype]
    missing = sorted(set(_SINGLE_FILE_PARTS) - single_file_parts(single_file_keys(local)))
    try:
        parts = _parts_from_config(config, missing, torch_dtype, revision) if config and missing else {}
        return StableDiffusion3Pipeline.from_single_file(
            str(local),
            config=local_or_hub(config) if config else None,
            torch_dtype=torch_dtype,
            local_files_only=offline(),
            **parts,
        )
    except (OSError, ValueError, KeyError, SingleFileComponentError) as exc:
        raise _load_error(path, exc, config) from exc


def load_sd3_pipeline(path: str, dtype: str = "fp32", revision: str | None = None, config: str | None = None):
    """``StableDiffusion3Pipeline.from_pretrained`` from a hub id or a local folder, or ``from_single_file``
    of a ``.safetensors``/``.ckpt`` file (``config``: see ``load_sd3_single_file``), with a clear error."""
    from diffusers import StableDiffusion3Pipeline

    if is_single_file(path) and Path(path).expanduser().is_file():
        return load_sd3_single_file(path, dtype, config, revision)
    try:
        return StableDiffusion3Pipeline.from_pretrained(
            local_or_hub(path), torch_dtype=DTYPES[dtype], revision=revision
        )
    except (OSError, ValueError, KeyError) as exc:
        raise _load_error(path, exc) from exc
