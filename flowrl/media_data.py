"""Dataset folders of media with prompts, for the methods whose experience is a dataset instead of rollouts
(offline Diffusion-DPO, SFT; ``Needs.dataset``).

A folder is laid out as a prompt folder is (``flowrl.data``: ``train.jsonl``, or ``train_metadata.jsonl``), one
JSON object a line, the media paths relative to the folder (or absolute):

* **preference** pairs: ``{"prompt": ..., "chosen": "a.png", "rejected": "b.png"}``, the layout of Flow-Factory's
  and verl-omni's offline DPO; or Pick-a-Pic's, which the diffusers Diffusion-DPO script reads:
  ``{"caption": ..., "jpg_0": ..., "jpg_1": ..., "label_0": 1}`` (``label_0`` 1: ``jpg_0`` preferred, 0:
  ``jpg_1``; a tie, 0.5, is refused; set ``data.prompt_column=caption``);
* **media** targets (SFT): ``{"prompt": ..., "image": "a.png"}``; a preference folder serves too (its ``chosen``).

``check_media_folder`` reads every row and opens every file before any weight loads: the first bad row or file is
one line naming the folder's file, the row and the field. ``row_media`` gives a training row's files;
``load_images`` / ``encode_images`` turn them into the model's clean latents.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from flowrl.configkit import ConfigError, NamedEnum


class DatasetKind(NamedEnum):
    """What a dataset row's media are (``Needs.dataset``): preference pairs (chosen, rejected) or a target."""

    PREFERENCE = "preference"
    MEDIA = "media"


KINDS = tuple(kind.value for kind in DatasetKind)
PICKAPIC = ("jpg_0", "jpg_1", "label_0")


def as_targets(items: list) -> list:
    """Rows whose ``image`` the prompt loader read as a source image (``PromptItem.images``, the editing families'
    convention): for a method that trains on a dataset that image is the row's target, so it goes back into the
    row's metadata as ``image`` (an absolute path), and the row has no source image."""
    import dataclasses

    out = []
    for item in items:
        if len(item.images) == 1 and "image" not in item.metadata:
            item = dataclasses.replace(item, metadata={**item.metadata, "image": item.images[0]}, images=())
        out.append(item)
    return out


def data_root(spec: str) -> Path:
    """The folder that a row's relative paths start from: ``data.prompts`` itself (``builtin:NAME``: the folder
    shipped in ``flowrl/prompts``), or a ``.jsonl`` file's folder."""
    from flowrl.data import builtin_folder

    path = Path(builtin_folder(spec) or spec).expanduser()
    return path if path.is_dir() else path.parent


def row_media(metadata: dict[str, Any], kind: DatasetKind | str) -> tuple[str, ...]:
    """A row's media paths as written: preference (chosen, rejected), media (the target). ``metadata`` is the row
    without its prompt (``PromptItem.metadata``); raises ``ValueError`` saying what the row lacks."""
    if DatasetKind(kind) is DatasetKind.PREFERENCE:
        if "chosen" in metadata or "rejected" in metadata:
            return _fields(metadata, ("chosen", "rejected"))
        if any(k in metadata for k in PICKAPIC):
            first, second = _fields(metadata, PICKAPIC[:2])
            label = metadata.get("label_0")
            if label not in (0, 1, 0.0, 1.0) or isinstance(label, bool):
                why = "a tie (0.5); drop tied rows" if label == 0.5 else f"{label!r}; it must be 1 or 0"
                raise ValueError(f"'label_0' is {why}")
            return (first, second) if label == 1 else (second, first)
        raise ValueError("needs 'chosen' and 'rejected' (or Pick-a-Pic's 'jpg_0', 'jpg_1', 'label_0')")
    if "image" in metadata:
        return _fields(metadata, ("image",))
    if "chosen" in metadata:
        return _fields(metadata, ("chosen",))
    if "video" in metadata or "audio" in metadata:
        raise ValueError("a video or audio target: only image targets are read so far")
    raise ValueError("needs 'image' (or a preference row's 'chosen')")


def _fields(metadata: dict[str, Any], names: tuple[str, ...]) -> tuple[str, ...]:
    for name in names:
        if not isinstance(metadata.get(name), str) or not metadata[name]:
            raise ValueError(f"{name!r} must be a file path, got {metadata.get(name)!r:.60}")
    return tuple(metadata[n] for n in names)


def check_media_folder(cfg: Any, kind: DatasetKind | str) -> None:
    """Every training row of ``data.prompts`` names readable media of ``kind``: else one ``ConfigError`` line
    naming the split file, the row (1-based line) and the field or file."""
    from PIL import Image

    from flowrl.data import load_prompts, split_file

    if kind not in KINDS:
        raise ValueError(f"unknown dataset kind {kind!r}; known: {', '.join(KINDS)}")
    kind = DatasetKind(kind)
    from flowrl.data import builtin_folder

    spec = cfg.data.prompts
    folder = Path(builtin_folder(spec) or spec).expanduser()
    what = "preference pairs" if kind is DatasetKind.PREFERENCE else "target images"
    if spec.startswith("hf:") or not (folder.is_dir() or folder.suffix == ".jsonl"):
        raise ConfigError(
            f"data.prompts: method {cfg.method.name} trains on {what} from a dataset folder (train.jsonl rows with "
            f"media paths, docs/methods.md), got {spec!r}"
        )
    where = split_file(folder, cfg.data.split) if folder.is_dir() else folder
    items = as_targets(load_prompts(spec, cfg.data.split, prompt_column=cfg.data.prompt_column))
    root = data_root(spec)
    for n, item in enumerate(items, 1):
        try:
            paths = row_media(item.metadata, kind)
        except ValueError as exc:
            raise ConfigError(f"data.prompts: {where} row {n}: {exc}") from None
        for path in paths:
            full = root / path
            if not full.is_file():
                raise ConfigError(f"data.prompts: {where} row {n}: no such file {path!r} (under {root})")
            try:
                with Image.open(full) as im:
                    im.verify()
            except Exception as exc:  # noqa: BLE001 -- any unreadable image: one line
                raise ConfigError(f"data.prompts: {where} row {n}: {path!r} is not a readable image ({exc})") from None


def load_images(paths: list[Path], resolution: int) -> torch.Tensor:
    """Images (B, 3, R, R) float in [0, 1]: each resized so its short side is R, centre-cropped (the usual
    preparation of a text-to-image training set; the peers' offline loaders do the same)."""
    from PIL import Image

    out = []
    for path in paths:
        with Image.open(path) as im:
            im = im.convert("RGB")
            w, h = im.size
            scale = resolution / min(w, h)
            im = im.resize((max(resolution, round(w * scale)), max(resolution, round(h * scale))), Image.BICUBIC)
            w, h = im.size
            left, top = (w - resolution) // 2, (h - resolution) // 2
            im = im.crop((left, top, left + resolution, top + resolution))
            data = torch.frombuffer(bytearray(im.tobytes()), dtype=torch.uint8)
            out.append(data.view(resolution, resolution, 3).permute(2, 0, 1).float() / 255.0)
    return torch.stack(out)


@torch.no_grad()
def check_family_encodes(cfg: Any, method: str) -> None:
    """Refuse, before any weight loads, a family whose media a dataset method cannot encode: it needs the
    adapter's ``encode_media``, or latents that are an image VAE's own ``(C, h, w)`` (``image_vae_latents``)."""
    from flowrl.pipelines.base import adapter_class

    cls = adapter_class(cfg.model.pipeline)
    if getattr(cls, "encode_media", None) is None and not getattr(cls, "image_vae_latents", False):
        raise ConfigError(
            f"method {method} encodes its dataset's media into latents, and model.pipeline={cfg.model.pipeline} "
            "has no encode_media (its latents are not an image VAE's (C, h, w)); use model.pipeline=sd3 or z_image"
        )


def encode_images(adapter: Any, images: torch.Tensor) -> torch.Tensor:
    """Clean latents of images (B, 3, H, W) in [0, 1]: the family's own ``encode_media`` where it has one, else
    the inverse of an SD3-form ``decode`` (``(mean of the VAE posterior - shift) x scaling``, the latents the
    transformer sees; the posterior mean, so a row's latent is the same on every process and on resume)."""
    own = getattr(adapter, "encode_media", None)
    if own is not None:
        return own(images)
    vae = getattr(getattr(adapter, "pipe", None), "vae", None)
    shape = getattr(adapter, "latent_shape", None)
    shape = shape() if callable(shape) else shape
    if vae is None or shape is None or len(shape) != 3:
        raise ValueError(
            f"{type(adapter).__name__} has no encode_media and its latents are not an image VAE's (C, h, w): "
            "dataset methods cannot encode its media"
        )
    x = images.to(device=vae.device, dtype=vae.dtype) * 2 - 1
    z = vae.encode(x).latent_dist.mode()
    shift = getattr(vae.config, "shift_factor", None) or 0.0
    return ((z.float() - shift) * vae.config.scaling_factor).float()
