"""Prompt sources and the group sampler."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from flowrl.config import ConfigError


@dataclass(frozen=True)
class PromptItem:
    prompt: str
    metadata: dict[str, Any] = field(default_factory=dict)


def _parse_jsonl(text: str, where: str) -> list[PromptItem]:
    items = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise ConfigError(f"{where}:{n}: not valid JSON") from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise ConfigError(f"{where}:{n}: each line needs a string field 'prompt'")
        items.append(PromptItem(row["prompt"], {k: v for k, v in row.items() if k != "prompt"}))
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


def load_eval_prompts(data: Any) -> list[PromptItem] | None:
    """``data.eval_prompts``; unset, the ``test`` split of a ``data.prompts`` dataset folder; else None."""
    if data.eval_prompts:
        return load_prompts(data.eval_prompts, split="test")
    folder = Path(data.prompts).expanduser()
    if not data.prompts.startswith("builtin:") and folder.is_dir() and split_file(folder, "test") is not None:
        return load_prompts(data.prompts, split="test")
    return None


def load_prompts(spec: str, split: str = "train") -> list[PromptItem]:
    """Prompts from a ``.txt`` file (one a line), a ``.jsonl`` file (``{"prompt": ..., **metadata}``),
    ``builtin:NAME`` (a set shipped in ``flowrl/prompts``) or a dataset folder laid out as flow_grpo and
    Flow-Factory lay theirs (``train.jsonl``, ``train_metadata.jsonl`` with GenEval's tags, or
    ``train.txt``; ``test.*`` alike, the held-out prompts). Empty sources are an error."""
    folder = Path(spec).expanduser()
    if not spec.startswith("builtin:") and folder.is_dir():
        found = split_file(folder, split)
        if found is None:
            names = ", ".join(pattern.format(split=split) for pattern in SPLIT_FILES)
            raise ConfigError(f"data.prompts: the folder {spec!r} holds none of {names}")
        spec = str(found)
    if spec.startswith("builtin:"):
        name = spec.split(":", 1)[1]
        folder = resources.files("flowrl") / "prompts"
        matches = [p for p in folder.iterdir() if p.name in (f"{name}.txt", f"{name}.jsonl")]
        if not matches:
            known = sorted(p.name.rsplit(".", 1)[0] for p in folder.iterdir() if p.name.endswith((".txt", ".jsonl")))
            raise ConfigError(f"data.prompts: unknown builtin prompt set {name!r}; shipped: {', '.join(known)}")
        text, where, is_jsonl = matches[0].read_text(), spec, matches[0].name.endswith(".jsonl")
    else:
        path = Path(spec).expanduser()
        if not path.is_file():
            raise ConfigError(f"data.prompts: no such file {spec!r}")
        text, where, is_jsonl = path.read_text(encoding="utf-8"), spec, path.suffix == ".jsonl"
    items = _parse_jsonl(text, where) if is_jsonl else [PromptItem(s.strip()) for s in text.splitlines() if s.strip()]
    if not items:
        raise ConfigError(f"data.prompts: {where!r} holds no prompts")
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

    def __init__(self, num_prompts: int, prompts_per_iteration: int, group_size: int, seed: int,
                 world_size: int = 1, rank: int = 0):
        total = prompts_per_iteration * group_size
        if total % world_size:
            raise ConfigError(
                f"sample.prompts_per_iteration * sample.group_size = {total} must divide by the "
                f"{world_size} processes"
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
