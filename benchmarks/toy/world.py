"""The toy world: coloured shapes on a black canvas, GenEval-style prompts about them, and a renderer.

Object classes are shapes (``circle``, ``square``, ``triangle``) and colours a few well-separated RGB
values. Prompts and metadata follow GenEval's six tasks and its row format exactly (``tag``,
``include``, ``exclude``, ``prompt``; see ``flowrl.benchmarks.geneval.prompts``), so the same rule
engine (``flowrl.benchmarks.geneval.rules``) judges them:

=============  =====================================  ===================================================
tag            prompt                                 include / exclude
=============  =====================================  ===================================================
single_object  a photo of a circle                    [circle x1]
two_object     a photo of a circle and a square       [circle x1, square x1]
counting       a photo of three circles               [circle x3] / exclude [circle x4]
colors         a photo of a red circle                [circle x1 red]
position       a photo of a circle left of a square   [square x1, circle x1 position ["left of", 0]]
color_attr     a photo of a red circle and a blue...  [circle x1 red, square x1 blue]
=============  =====================================  ===================================================

The world is small enough to enumerate every prompt (``all_rows``); ``split_rows`` deals each task's
prompts into disjoint train and held-out sets. ``render`` draws an image that satisfies a row: exactly
the objects it names (unnamed colours drawn at random), each in its own cell of an 8-pixel grid, no
two touching, positions placed by rejection with GenEval's own ``relative_position``. Shapes are drawn from ``shape_mask`` templates that fill their
box tightly, which is what lets the detector (``detect.py``) be exact on clean renders.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import permutations
from pathlib import Path
from typing import Any

import numpy as np

from flowrl.benchmarks.geneval.constants import NUMBER_WORDS, RELATIONS, TASKS
from flowrl.benchmarks.geneval.prompts import check_metadata, plural, with_article
from flowrl.benchmarks.geneval.rules import relative_position

CLASSES: tuple[str, ...] = ("circle", "square", "triangle")
# Well separated in RGB (pairwise distances >= 150 of 255); the background is black.
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (230, 40, 40),
    "yellow": (235, 215, 40),
    "green": (40, 190, 70),
    "blue": (50, 90, 240),
    "white": (240, 240, 240),
}
COLORS: tuple[str, ...] = tuple(PALETTE)
BACKGROUND: tuple[int, int, int] = (0, 0, 0)
COUNTS: tuple[int, ...] = (2, 3, 4)
CELL = 8  # one object per cell of an 8-pixel grid (the toy model's patch size): a 4 x 4 grid at 32 px
SIDES: tuple[int, ...] = (6, 7)  # object sides in pixels
# Every word a toy prompt can use (the tokenizer's vocabulary).
WORDS: tuple[str, ...] = (
    "a", "an", "photo", "of", "and", "left", "right", "above", "below",
    *CLASSES, *(plural(c) for c in CLASSES), *COLORS, *(NUMBER_WORDS[n] for n in COUNTS),
)  # fmt: skip

Row = dict[str, Any]


class RenderError(ValueError):
    """A row cannot be drawn in this world (unknown class or colour, or no layout fits)."""


# ------------------------------------------------------------------------------------------ prompts


def _clause(name: str, count: int = 1, **extra: Any) -> dict[str, Any]:
    return {"class": name, "count": count, **extra}


def task_rows(tag: str) -> list[Row]:
    """Every row of one task, in a fixed order (GenEval's templates over the toy vocabulary)."""
    pairs = list(permutations(CLASSES, 2))
    if tag == "single_object":
        return [{"tag": tag, "include": [_clause(a)], "prompt": f"a photo of {with_article(a)}"} for a in CLASSES]
    if tag == "two_object":
        return [
            {
                "tag": tag,
                "include": [_clause(a), _clause(b)],
                "prompt": f"a photo of {with_article(a)} and {with_article(b)}",
            }
            for a, b in pairs
        ]
    if tag == "counting":
        return [
            {"tag": tag, "include": [_clause(a, n)], "exclude": [_clause(a, n + 1)],
             "prompt": f"a photo of {NUMBER_WORDS[n]} {plural(a)}"}
            for a in CLASSES for n in COUNTS
        ]  # fmt: skip
    if tag == "colors":
        return [
            {"tag": tag, "include": [_clause(a, color=c)], "prompt": f"a photo of {with_article(c)} {a}"}
            for a in CLASSES for c in COLORS
        ]  # fmt: skip
    if tag == "position":
        return [
            {"tag": tag, "include": [_clause(b), _clause(a, position=[rel, 0])],
             "prompt": f"a photo of {with_article(a)} {rel} {with_article(b)}"}
            for a, b in pairs for rel in RELATIONS
        ]  # fmt: skip
    if tag == "color_attr":
        return [
            {"tag": tag, "include": [_clause(a, color=ca), _clause(b, color=cb)],
             "prompt": f"a photo of {with_article(ca)} {a} and {with_article(cb)} {b}"}
            for a, b in pairs for ca, cb in permutations(COLORS, 2)
        ]  # fmt: skip
    raise ValueError(f"unknown task {tag!r}; tasks: {', '.join(TASKS)}")


def all_rows() -> dict[str, list[Row]]:
    """Every prompt of the world, by task in GenEval's task order."""
    return {tag: task_rows(tag) for tag in TASKS}


@dataclass(frozen=True)
class Split:
    """Disjoint prompts per task: ``train`` for RL, ``heldout`` for evaluation."""

    train: dict[str, list[Row]]
    heldout: dict[str, list[Row]]


def split_rows(seed: int = 0, heldout_fraction: float = 1 / 3) -> Split:
    """Shuffle each task's prompts (seeded) and hold out ``ceil(fraction * n)`` of them (at least 1)."""
    if not 0 < heldout_fraction < 1:
        raise ValueError(f"heldout_fraction must lie in (0, 1), got {heldout_fraction}")
    train, heldout = {}, {}
    for tag, rows in all_rows().items():
        order = list(rows)
        random.Random(f"{seed}:{tag}").shuffle(order)
        k = min(max(1, math.ceil(len(order) * heldout_fraction)), len(order) - 1)
        heldout[tag], train[tag] = order[:k], order[k:]
    return Split(train, heldout)


def balanced_rows(pools: dict[str, list[Row]], per_task: int) -> list[Row]:
    """``per_task`` rows of every task, cycling through each pool, interleaved task by task.

    GenEval's overall score is the mean of task accuracies; with equal rows per task the image mean of a
    file equals that mean, and any prefix of the file stays (nearly) balanced.
    """
    out = []
    for i in range(per_task):
        for tag in TASKS:
            pool = pools[tag]
            out.append(pool[i % len(pool)])
    return out


def write_rows(rows: Sequence[Row], path: str | Path) -> Path:
    """One JSON object per line, GenEval's key order (tag, include, exclude, prompt)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(dict(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def check_row(row: Any, where: str = "toy metadata") -> Row:
    """Validate a toy row: GenEval's schema and checks over the toy shapes and colours (a one-line
    ``MetadataError``, a ``ValueError``, otherwise)."""
    return check_metadata(row, where, classes=CLASSES, colors=COLORS)


# ------------------------------------------------------------------------------------------ rendering


def shape_mask(name: str, w: int, h: int) -> np.ndarray:
    """The (h, w) bool mask of a shape that touches all four sides of its box (so the box is tight).

    Pixel centres are at ``+0.5``. circle: the inscribed ellipse; square: the full box; triangle: apex
    up, the half-width of row ``y`` growing linearly from ``w / (2h)`` at the top to ``w / 2`` at the base.
    """
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64) + 0.5
    if name == "square":
        return np.ones((h, w), dtype=bool)
    if name == "circle":
        return ((xs - w / 2) / (w / 2)) ** 2 + ((ys - h / 2) / (h / 2)) ** 2 <= 1.0 + 1e-9
    if name == "triangle":
        return np.abs(xs - w / 2) <= (ys + 0.5) / h * (w / 2) + 1e-9
    raise RenderError(f"unknown shape {name!r}; shapes: {', '.join(CLASSES)}")


@dataclass(frozen=True)
class PlacedObject:
    name: str
    color: str
    box: tuple[int, int, int, int]  # x1, y1, x2, y2 with x2 = x1 + width (exclusive), as the detector reports


def _objects(row: Row, rng: random.Random) -> list[tuple[str, str, int]]:
    """(class, colour, clause index) of every object the row asks for; unnamed colours at random."""
    out = []
    for k, clause in enumerate(row["include"]):
        for _ in range(clause["count"]):
            out.append((clause["class"], clause.get("color") or rng.choice(COLORS), k))
    return out


def _relations_hold(row: Row, placed: list[PlacedObject], clause_of: list[int], margin: float) -> bool:
    for k, clause in enumerate(row["include"]):
        if "position" not in clause:
            continue
        relation, target = clause["position"]
        for a, ka in zip(placed, clause_of):
            for b, kb in zip(placed, clause_of):
                if ka == k and kb == target and relation not in relative_position(a.box, b.box, margin):
                    return False
    return True


def layout(row: Row, rng: random.Random, size: int = 32, cell: int = CELL, tries: int = 2000) -> list[PlacedObject]:
    """Boxes for the row's objects: each inside its own ``cell`` x ``cell`` square of a grid (so that an
    object never straddles two of the toy model's 8-pixel tokens), sides ``SIDES`` at a random offset, at
    least one pixel apart, the row's relations satisfied."""
    objects = _objects(row, rng)
    grid = size // cell
    if len(objects) > grid * grid:
        raise RenderError(f"{row.get('prompt')!r}: {len(objects)} objects do not fit {grid * grid} cells")
    for _ in range(tries):
        cells = rng.sample(range(grid * grid), len(objects))
        placed: list[PlacedObject] = []
        for (name, color, _k), c in zip(objects, cells):
            s = rng.choice(SIDES)
            x = (c % grid) * cell + rng.randint(0, cell - s)
            y = (c // grid) * cell + rng.randint(0, cell - s)
            placed.append(PlacedObject(name, color, (x, y, x + s, y + s)))
        apart = all(not _too_close(a.box, b.box, 1) for i, a in enumerate(placed) for b in placed[i + 1 :])
        if apart and _relations_hold(row, placed, [k for *_, k in objects], 0.1):
            return placed
    raise RenderError(f"no layout of {row.get('prompt')!r} fits a {size}px canvas in {tries} tries")


def _too_close(a: tuple[int, ...], b: tuple[int, ...], gap: int) -> bool:
    return a[0] < b[2] + gap and b[0] < a[2] + gap and a[1] < b[3] + gap and b[1] < a[3] + gap


def draw(objects: Sequence[PlacedObject], size: int = 32) -> np.ndarray:
    """(size, size, 3) uint8 image of the objects on the background."""
    image = np.empty((size, size, 3), dtype=np.uint8)
    image[:] = BACKGROUND
    for obj in objects:
        x1, y1, x2, y2 = obj.box
        mask = shape_mask(obj.name, x2 - x1, y2 - y1)
        image[y1:y2, x1:x2][mask] = PALETTE[obj.color]
    return image


def render(row: Row, rng: random.Random, size: int = 32) -> np.ndarray:
    """A (size, size, 3) uint8 image that satisfies ``row`` under GenEval's rules."""
    return draw(layout(row, rng, size), size)


def render_batch(rows: Sequence[Row], seed: int, size: int = 32) -> np.ndarray:
    """(B, size, size, 3) uint8 renders of ``rows``, reproducible from ``seed``."""
    rng = random.Random(seed)
    return np.stack([render(r, rng, size) for r in rows]) if rows else np.zeros((0, size, size, 3), np.uint8)
