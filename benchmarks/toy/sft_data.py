"""The toy benchmark's SFT data: correct renders of the training prompts, for the ``sft`` method's toy run.

SFT learns from a folder of images with prompts instead of a reward (``flowrl.media_data``: ``{"prompt", "image"}``
rows). On the toy world a correct image of any prompt can be drawn (``world.render``: the objects GenEval's rules
ask for, placed at random), so the folder holds ``RENDERS_PER_ROW`` renders of each row of the training split
(``builtin:toy_train``), the toy metadata kept beside each. It is made once into the toy cache
(``pretrain.cache_root()``, the folder ``toy-sft`` names) by ``ensure_sft_renders``, which ``flowrl eval toy`` and
the comparison call; the evaluation's held-out prompts are never drawn.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

from .pretrain import WORLD_VERSION, cache_root
from .world import render

SFT_FOLDER = f"sft-renders-v{WORLD_VERSION}"  # under the toy cache; bump WORLD_VERSION when renders change
SFT_DATA = f"~/.cache/flowrl/toy/{SFT_FOLDER}"  # the data.prompts toy-sft names (FLOWRL_CACHE aside)
RENDERS_PER_ROW = 4  # 480 training rows x 4 = 1,920 images: 6,400 samples over 50 iterations see each 3-4 times


def sft_folder(root: str | Path | None = None) -> Path:
    return Path(root or cache_root()) / SFT_FOLDER


def training_rows() -> list[dict]:
    """The training split's rows (``builtin:toy_train``), checked as the evaluation checks its own."""
    from importlib import resources

    from .evaluate import load_rows

    return load_rows(Path(str(resources.files("flowrl") / "prompts" / "toy_train.jsonl")))


def ensure_sft_renders(root: str | Path | None = None, per_row: int = RENDERS_PER_ROW, seed: int = 0) -> Path:
    """The SFT folder (``train.jsonl`` and PNGs), rendered if missing; written to a temporary folder and moved into
    place, so an interrupted call leaves nothing half made."""
    from PIL import Image

    folder = sft_folder(root)
    if (folder / "train.jsonl").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    rng = random.Random(seed)
    lines = []
    for i, row in enumerate(training_rows()):
        for k in range(per_row):
            name = f"{i:04d}-{k}.png"
            Image.fromarray(render(row, rng)).save(tmp / name)
            lines.append(json.dumps({**row, "image": name}) + "\n")
    (tmp / "train.jsonl").write_text("".join(lines), encoding="utf-8")
    try:
        os.replace(tmp, folder)
    except OSError:  # another process made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
