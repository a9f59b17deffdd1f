"""Prompt sources and the group sampler."""

from __future__ import annotations

import csv
import io
import json
import os
import random
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from flowrl.configkit import ConfigError


@dataclass(frozen=True)
class PromptItem:
    prompt: str
    metadata: dict[str, Any] = field(default_factory=dict)
    # the row's own CFG negative prompt (a ``negative_prompt`` field or column); None: ``data.negative_prompt``
    negative_prompt: str | None = None
    # absolute paths of the row's source images (an ``image`` or ``images`` field, relative to its data folder)
    images: tuple[str, ...] = ()


NEGATIVE_FIELD = "negative_prompt"
IMAGE_FIELDS = ("image", "images")  # a row's source image (one path) or images (a list of paths)


def _images_of(row: dict, base: Path | None, where: str) -> tuple[str, ...]:
    """A row's source images as absolute paths: ``image`` (a path) or ``images`` (a list of paths), each relative
    to ``base`` (the data folder) unless absolute; () for a row that names none."""
    if "image" in row and "images" in row:
        raise ConfigError(f"{where}: give 'image' or 'images', not both")
    value = row.get("image", row.get("images"))
    if value is None:
        return ()
    paths = [value] if "image" in row else value
    if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
        field_name = "image" if "image" in row else "images"
        want = "a path" if field_name == "image" else "a list of paths"
        raise ConfigError(f"{where}: '{field_name}' must be {want} (relative to the data folder), got {value!r:.60}")
    root = base if base is not None else Path.cwd()
    return tuple(str((root / Path(p).expanduser()).resolve()) for p in paths)


def _negative_of(value: Any, where: str) -> str | None:
    """A row's ``negative_prompt``: a string, or None (absent, null) for the run's default."""
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"{where}: '{NEGATIVE_FIELD}' must be a string, got {type(value).__name__} {value!r:.60}")


def _item_of_row(row: dict, at: str, prompt_column: str, base: Path | None) -> PromptItem:
    """One row of a .jsonl or .csv prompt file (``at``: its file:line): its prompt, which must not be empty, its
    own negative prompt and source images, and the other fields as metadata."""
    if not row[prompt_column].strip():
        raise ConfigError(f"{at}: the prompt ({prompt_column!r}) is empty; give every row a prompt or remove it")
    negative = _negative_of(row.get(NEGATIVE_FIELD), at)
    images = _images_of(row, base, at)
    metadata = {k: v for k, v in row.items() if k not in (prompt_column, NEGATIVE_FIELD, *IMAGE_FIELDS)}
    return PromptItem(row[prompt_column], metadata, negative, images)


def _parse_jsonl(text: str, where: str, prompt_column: str = "prompt", base: Path | None = None) -> list[PromptItem]:
    items = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise ConfigError(f"{where}:{n}: not valid JSON") from None
        if not isinstance(row, dict) or not isinstance(row.get(prompt_column), str):
            raise ConfigError(f"{where}:{n}: each line needs a string field {prompt_column!r}")
        items.append(_item_of_row(row, f"{where}:{n}", prompt_column, base))
    return items


def _parse_csv(text: str, where: str, prompt_column: str = "prompt", base: Path | None = None) -> list[PromptItem]:
    """A .csv prompt file: a header line naming the columns, one of them ``prompt_column``; each row's other
    columns are its metadata (text), ``negative_prompt`` and ``image`` as in a .jsonl row."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    columns = reader.fieldnames or []
    if prompt_column not in columns:
        shown = ", ".join(repr(c) for c in columns[:6]) or "none"
        raise ConfigError(
            f"{where}:1: a .csv prompt file needs a header line naming the prompt's column {prompt_column!r} "
            f"(its first line's columns: {shown}); add one, or set data.prompt_column"
        )
    items = []
    for row in reader:
        at = f"{where}:{reader.line_num}"
        if None in row or None in row.values():
            raise ConfigError(f"{at}: {len(columns)} columns in the header line, another number in this row")
        if any(value.strip() for value in row.values()):  # a blank line is no row
            items.append(_item_of_row(row, at, prompt_column, base))
    return items


# a dataset folder as flow_grpo and Flow-Factory lay it out: the first of these files for each split
SPLIT_FILES = ("{split}.jsonl", "{split}_metadata.jsonl", "{split}.txt")


def split_file(folder: Path, split: str) -> Path | None:
    """The file of ``split`` ("train" or "test") in a dataset folder, or None."""
    for pattern in SPLIT_FILES:
        path = folder / pattern.format(split=split)
        if path.is_file():
            return path
    return None


# ----------------------------------------------------------------------------------------------------
# Hugging Face ``datasets`` (an optional dependency, imported only here)

HF_PREFIX = "hf:"
# what ``save_to_disk`` writes: a DatasetDict's index, or a single Dataset's state
_SAVED_DATASET_FILES = ("dataset_dict.json", "state.json")


def is_saved_dataset(folder: Path) -> bool:
    """A folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``."""
    return folder.is_dir() and any((folder / name).is_file() for name in _SAVED_DATASET_FILES)


def _is_hf(spec: str) -> bool:
    return spec.startswith(HF_PREFIX) or (not spec.startswith("builtin:") and is_saved_dataset(Path(spec).expanduser()))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0][:200] if text else "") or type(exc).__name__


def open_hf_dataset(spec: str, dataset_config: str | None = None, key: str = "data.prompts") -> Any:
    """The ``datasets.Dataset`` or ``DatasetDict`` that ``spec`` names: ``hf:NAME`` (a hub id, or a local
    folder: one saved with ``save_to_disk`` is read with ``load_from_disk``, any other with ``load_dataset``)
    or a folder saved with ``save_to_disk``. Every failure is one ``ConfigError`` line naming the dataset."""
    name = spec.removeprefix(HF_PREFIX)
    if not name:
        raise ConfigError(f"{key}: {spec!r} names no dataset; write hf:NAME (a hub id or a local folder)")
    try:
        import datasets
    except ImportError:
        raise ConfigError(
            f"{key}: reading the dataset {name!r} needs the `datasets` package (pip install datasets)"
        ) from None
    local = Path(name).expanduser()
    if not local.exists() and (name.startswith(("/", "./", "../", "~")) or name in (".", "..")):
        raise ConfigError(f"{key}: no such dataset folder {name!r}")
    try:
        if is_saved_dataset(local):
            return datasets.load_from_disk(str(local))
        return datasets.load_dataset(str(local) if local.exists() else name, dataset_config)
    except Exception as exc:  # noqa: BLE001 -- offline hub, unknown name, unreadable files: one line each way
        if local.exists():
            raise ConfigError(f"{key}: the dataset folder {name!r} could not be read ({_first_line(exc)})") from None
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
        why = "the hub is offline (HF_HUB_OFFLINE=1)" if offline else _first_line(exc)
        raise ConfigError(
            f"{key}: the Hugging Face dataset {name!r} could not be loaded: {why}; load it once online "
            "(datasets caches it) or give a folder saved with save_to_disk"
        ) from None


def _dataset_splits(table: Any) -> list[str] | None:
    """The split names of a DatasetDict; None for a single Dataset (it is one split, used whole)."""
    import datasets

    return list(table) if isinstance(table, (datasets.DatasetDict, datasets.IterableDatasetDict)) else None


def _hf_items(spec: str, split: str, prompt_column: str, dataset_config: str | None, key: str) -> list[PromptItem]:
    table = open_hf_dataset(spec, dataset_config, key)
    splits = _dataset_splits(table)
    where = repr(spec)
    if splits is not None:
        if split not in splits:
            raise ConfigError(
                f"{key}: the dataset {spec!r} has no split {split!r}; its splits: "
                f"{', '.join(splits) or '(none)'} (set data.split / data.eval_split)"
            )
        table, where = table[split], f"{spec!r} (split {split!r})"
    columns = list(table.column_names)
    if prompt_column not in columns:
        raise ConfigError(
            f"data.prompt_column: the dataset {where} has no column {prompt_column!r}; "
            f"its columns: {', '.join(columns) or '(none)'}"
        )
    if len(table) == 0:
        raise ConfigError(f"{key}: the dataset {where} holds no prompts")
    prompts = list(table[prompt_column])
    negatives = list(table[NEGATIVE_FIELD]) if NEGATIVE_FIELD in columns else [None] * len(prompts)
    others = [c for c in columns if c not in (prompt_column, NEGATIVE_FIELD, *IMAGE_FIELDS)]
    metadata = table.select_columns(others).to_list() if others else [{} for _ in prompts]
    image_columns = [c for c in IMAGE_FIELDS if c in columns]
    image_rows = table.select_columns(image_columns).to_list() if image_columns else [{} for _ in prompts]
    local = Path(spec.removeprefix(HF_PREFIX)).expanduser()
    base = local if local.is_dir() else None
    items = []
    for i, (prompt, negative, meta, row) in enumerate(zip(prompts, negatives, metadata, image_rows)):
        if not isinstance(prompt, str):
            raise ConfigError(
                f"{key}: the dataset {where}, row {i}: column {prompt_column!r} must be a string, "
                f"got {type(prompt).__name__} {prompt!r:.60}"
            )
        at = f"{key}: the dataset {where}, row {i}"
        if not prompt.strip():
            raise ConfigError(f"{at}: the prompt ({prompt_column!r}) is empty; give every row a prompt or remove it")
        items.append(PromptItem(prompt, meta, _negative_of(negative, at), _images_of(row, base, at)))
    return items


def builtin_folder(spec: str) -> Path | None:
    """The shipped data folder ``builtin:NAME`` names (``flowrl/prompts/NAME/``, e.g. ``tiny_edit`` with its source
    images), or None (a shipped prompt file, or not a builtin)."""
    if not spec.startswith("builtin:"):
        return None
    folder = Path(str(resources.files("flowrl") / "prompts" / spec.split(":", 1)[1]))
    return folder if folder.is_dir() else None


def _has_split(spec: str, split: str, dataset_config: str | None) -> bool:
    """Whether a dataset folder or a Hugging Face dataset ``spec`` has the split ``split``."""
    spec = str(builtin_folder(spec) or spec)
    if spec.startswith("builtin:"):
        return False
    if _is_hf(spec):
        splits = _dataset_splits(open_hf_dataset(spec, dataset_config))
        return splits is not None and split in splits
    folder = Path(spec).expanduser()
    return folder.is_dir() and split_file(folder, split) is not None


# ----------------------------------------------------------------------------------------------------
# the prompt sources of a run


def with_negatives(items: list[PromptItem], default: str) -> list[PromptItem]:
    """``items`` with every negative prompt filled in: the row's own, else ``default`` (``data.negative_prompt``)."""
    return [it if it.negative_prompt is not None else replace(it, negative_prompt=default) for it in items]


def uses_negatives(items: list[PromptItem]) -> bool:
    """Whether any item has a non-empty negative prompt (else CFG's negative is the empty prompt for all)."""
    return any(it.negative_prompt for it in items)


def check_source_images(
    items: list[PromptItem], allowed: tuple[int, int], family: str, key: str = "data.prompts"
) -> None:
    """Refuse, in one line naming the row and file, before any model loads: a row whose number of source images
    the family does not take (``allowed`` = (min, max), a text-only family's (0, 0)), and an image file that is
    missing or unreadable. Each distinct file is opened once (its header, not its pixels)."""
    from flowrl.pipelines.kit.images import SourceImageError, check_image

    low, high = allowed
    checked: set[str] = set()
    for n, item in enumerate(items, 1):
        row = f"{key}: row {n} ({item.prompt!r:.40})"
        count = len(item.images)
        if not low <= count <= high:
            if high == 0:
                takes = "takes no source images (a text-only family)"
            else:
                takes = f"takes {low} source image(s)" if low == high else f"takes {low} to {high} source images"
            raise ConfigError(f"{row} names {count} source image(s), but model.pipeline={family} {takes}")
        for path in item.images:
            if path in checked:
                continue
            try:
                check_image(path)
            except SourceImageError as exc:
                raise ConfigError(f"{row}: {exc}") from None
            checked.add(path)


SOURCE_IMAGES_KEY = "source_images"  # the reward metadata key of a sample's source images


def item_images(items: list[PromptItem], read) -> list[list[torch.Tensor]] | None:
    """Each item's source images read by ``read`` (paths -> (3, H, W) [0, 1] tensors, e.g. a
    ``kit.images.ImageCache``), one list per item; None when no item names any (a text-only batch)."""
    if not any(it.images for it in items):
        return None
    return [read(it.images) if it.images else [] for it in items]


def with_source_images(metadata: list[dict], images: list[list[torch.Tensor]] | None) -> list[dict]:
    """Each sample's reward metadata with its row's source images under ``source_images`` (unchanged: None)."""
    if images is None:
        return metadata
    return [{**m, SOURCE_IMAGES_KEY: list(row)} for m, row in zip(metadata, images)]


def load_train_prompts(data: Any) -> list[PromptItem]:
    """The training prompts of ``data`` (a ``DataConfig``): ``data.split`` of ``data.prompts``, each with its
    negative prompt filled in."""
    items = load_prompts(
        data.prompts, split=data.split, prompt_column=data.prompt_column, dataset_config=data.dataset_config
    )
    return with_negatives(items, data.negative_prompt)


def load_eval_prompts(data: Any) -> list[PromptItem] | None:
    """``data.eval_prompts``; unset, the ``data.eval_split`` ("test") split of a ``data.prompts`` dataset
    folder or Hugging Face dataset; else None. Each with its negative prompt filled in."""
    options = {"prompt_column": data.prompt_column, "dataset_config": data.dataset_config}
    if data.eval_prompts:
        items = load_prompts(data.eval_prompts, split=data.eval_split, key="data.eval_prompts", **options)
    elif _has_split(data.prompts, data.eval_split, data.dataset_config):
        items = load_prompts(data.prompts, split=data.eval_split, **options)
    else:
        return None
    return with_negatives(items, data.negative_prompt)


def read_prompt_text(path: Path, spec: str, key: str = "data.prompts") -> str:
    """A prompt file's text as UTF-8 (a leading byte-order mark dropped); a binary or otherwise encoded file,
    or one that cannot be read, is one ``ConfigError`` line naming ``key``, the file and the first bad byte."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {spec!r} ({exc.strerror or exc})") from None
    if b"\0" in data:
        offset = data.index(b"\0")
        raise ConfigError(
            f"{key}: {spec!r} is a binary file, not prompt text (a NUL byte at offset {offset}); "
            "give a .txt (one prompt a line), .jsonl or .csv file"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{key}: {spec!r} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}, "
            f"line {line}); save it as UTF-8"
        ) from None


def load_prompts(
    spec: str,
    split: str = "train",
    *,
    prompt_column: str = "prompt",
    dataset_config: str | None = None,
    key: str = "data.prompts",
) -> list[PromptItem]:
    """Prompts from a ``.txt`` file (one a line), a ``.jsonl`` file (``{"prompt": ..., **metadata}``), a ``.csv``
    file (a header line naming its columns, one of them ``prompt_column``; the others metadata),
    ``builtin:NAME`` (a set shipped in ``flowrl/prompts``), a dataset folder laid out as flow_grpo and
    Flow-Factory lay theirs (``train.jsonl``, ``train_metadata.jsonl`` with GenEval's tags, or
    ``train.txt``; ``test.*`` alike, the held-out prompts), or a Hugging Face ``datasets`` dataset
    (``hf:NAME``, or a folder saved with ``save_to_disk``): the ``prompt_column`` of its ``split``, the other
    columns as metadata. A row's ``negative_prompt`` field or column is its own CFG negative, its ``image``
    (a path) or ``images`` (a list of paths) field or column its source images, relative to the data folder
    (``PromptItem.images``: absolute paths; ``check_source_images`` checks them). Empty sources are an error."""
    if _is_hf(spec):
        return _hf_items(spec, split, prompt_column, dataset_config, key)
    spec = str(builtin_folder(spec) or spec)  # a shipped data folder reads as any other
    folder = Path(spec).expanduser()
    if not spec.startswith("builtin:") and folder.is_dir():
        found = split_file(folder, split)
        if found is None:
            names = ", ".join(pattern.format(split=split) for pattern in SPLIT_FILES)
            raise ConfigError(f"{key}: the folder {spec!r} holds none of {names}")
        spec = str(found)
    if spec.startswith("builtin:"):
        name = spec.split(":", 1)[1]
        folder = resources.files("flowrl") / "prompts"
        matches = [p for p in folder.iterdir() if p.name in (f"{name}.txt", f"{name}.jsonl")]
        if not matches:
            known = sorted(p.name.rsplit(".", 1)[0] for p in folder.iterdir() if p.name.endswith((".txt", ".jsonl")))
            raise ConfigError(f"{key}: unknown builtin prompt set {name!r}; shipped: {', '.join(known)}")
        text, where, is_jsonl = matches[0].read_text(), spec, matches[0].name.endswith(".jsonl")
    else:
        path = Path(spec).expanduser()
        if not path.is_file():
            from flowrl.benchmarks.models import missing_cache_hint  # a toy benchmark's data names its command

            hint = missing_cache_hint(spec, key)
            raise ConfigError(f"{key}: no such file {spec!r}" + (f"; {hint}" if hint else ""))
        text, where, is_jsonl = read_prompt_text(path, spec, key), spec, path.suffix == ".jsonl"
    base = None if spec.startswith("builtin:") else Path(spec).expanduser().resolve().parent
    if is_jsonl:
        items = _parse_jsonl(text, where, prompt_column, base)
    elif Path(spec).suffix.lower() == ".csv":
        items = _parse_csv(text, where, prompt_column, base)
    else:
        items = [PromptItem(s.strip()) for s in text.splitlines() if s.strip()]
    if not items:
        raise ConfigError(f"{key}: {where!r} holds no prompts")
    return items


@dataclass(frozen=True)
class IterationSamples:
    """The samples of one iteration, over all processes, and this process's share.

    prompt_index: (N,) index into the prompt list for every global sample, groups contiguous
    group_ids:    (N,) group number 0..P-1 of every global sample
    local:        slice of the global samples this process generates
    """

    prompt_index: torch.Tensor
    group_ids: torch.Tensor
    local: slice


class GroupSampler:
    """Each iteration draws P prompts and repeats each G times (N = P*G samples), then deals contiguous
    equal shares to the processes. The draw depends only on (seed, iteration), so every process agrees
    and a resumed run draws the same prompts; gathering the shares in rank order restores whole groups."""

    def __init__(
        self,
        num_prompts: int,
        prompts_per_iteration: int,
        group_size: int,
        seed: int,
        world_size: int = 1,
        rank: int = 0,
    ):
        total = prompts_per_iteration * group_size
        if total % world_size:
            raise ConfigError(
                f"sample.prompts_per_iteration * sample.group_size = {total} must divide by the {world_size} processes"
            )
        self.num_prompts, self.p, self.g, self.seed = num_prompts, prompts_per_iteration, group_size, seed
        self.world_size, self.rank = world_size, rank

    def iteration(self, k: int) -> IterationSamples:
        rng = random.Random(f"{self.seed}:{k}")
        if self.num_prompts >= self.p:
            chosen = rng.sample(range(self.num_prompts), self.p)
        else:
            chosen = [rng.randrange(self.num_prompts) for _ in range(self.p)]
        prompt_index = torch.tensor(chosen).repeat_interleave(self.g)
        group_ids = torch.arange(self.p).repeat_interleave(self.g)
        share = len(prompt_index) // self.world_size
        return IterationSamples(prompt_index, group_ids, slice(self.rank * share, (self.rank + 1) * share))
