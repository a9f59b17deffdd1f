"""An exact detector for the toy world: colour segmentation, connected components, shape by template.

1. Every pixel takes the nearest palette colour or the background (RGB distance); pixels farther than
   ``max_distance`` from all of them count as background.
2. Pixels of one colour that touch (4-neighbourhood) form one component; components smaller than
   ``min_area`` pixels are dropped as specks.
3. Each component is compared with every shape's template drawn in the component's own box
   (``world.shape_mask``); the best template names the class and its IoU is the detection score.

Detections come out as GenEval's ``ClassDetections`` (box ``x1, y1, x2, y2`` with ``x2`` exclusive, the
score, and the component's colour as the colour label), so GenEval's rule engine judges them unchanged.
On a clean render every object is one component whose template IoU is exactly 1.

``TOY_RULES`` are the rule options for this world: GenEval's, except the score thresholds, which here are
template IoUs rather than detector confidences (0.5 to count as a shape at all, 0.75 for counting).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch

from flowrl.benchmarks.geneval.rules import ClassDetections, Judgement, RuleConfig, filter_detections, judge

from .world import BACKGROUND, CLASSES, COLORS, PALETTE, shape_mask

TOY_RULES = RuleConfig(threshold=0.5, counting_threshold=0.75)
_REFERENCE = np.array([BACKGROUND, *PALETTE.values()], dtype=np.float32)  # (1 + C, 3); index 0 = background


def to_uint8(images: torch.Tensor | np.ndarray | Sequence) -> np.ndarray:
    """Images as (B, H, W, 3) uint8: float tensors (B, 3, H, W) in [0, 1], uint8 arrays, or PIL images."""
    if isinstance(images, torch.Tensor):
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"expected images (B, 3, H, W), got shape {tuple(images.shape)}")
        return (images.detach().float().cpu() * 255).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()
    if isinstance(images, np.ndarray):
        arr = images
    else:
        arr = np.stack([np.asarray(im.convert("RGB") if hasattr(im, "convert") else im) for im in images])
    if arr.ndim != 4 or arr.shape[-1] != 3:
        raise ValueError(f"expected images (B, H, W, 3), got shape {arr.shape}")
    return arr.astype(np.uint8, copy=False)


def colour_labels(images: np.ndarray, max_distance: float = 110.0) -> np.ndarray:
    """(B, H, W) colour index per pixel: -1 background, else an index into ``COLORS``."""
    pixels = images.astype(np.float32)[..., None, :]  # (B, H, W, 1, 3)
    dist = np.linalg.norm(pixels - _REFERENCE, axis=-1)  # (B, H, W, 1 + C)
    nearest = dist.argmin(axis=-1) - 1
    nearest[dist.min(axis=-1) > max_distance] = -1
    return nearest


def components(labels: np.ndarray) -> np.ndarray:
    """(B, H, W) component id per pixel (-1 for background): 4-connected pixels of one colour share an id.

    Min-label propagation: every pixel starts with its own id and repeatedly takes the smallest id among
    its same-colour neighbours until nothing changes (vectorised over the batch).
    """
    b, h, w = labels.shape
    big = np.iinfo(np.int64).max
    ids = np.where(labels >= 0, np.arange(b * h * w, dtype=np.int64).reshape(b, h, w), big)
    same_down = (labels[:, 1:] == labels[:, :-1]) & (labels[:, 1:] >= 0)  # (B, H-1, W)
    same_right = (labels[:, :, 1:] == labels[:, :, :-1]) & (labels[:, :, 1:] >= 0)  # (B, H, W-1)
    while True:
        new = ids.copy()
        np.minimum(new[:, 1:], np.where(same_down, ids[:, :-1], big), out=new[:, 1:])
        np.minimum(new[:, :-1], np.where(same_down, ids[:, 1:], big), out=new[:, :-1])
        np.minimum(new[:, :, 1:], np.where(same_right, ids[:, :, :-1], big), out=new[:, :, 1:])
        np.minimum(new[:, :, :-1], np.where(same_right, ids[:, :, 1:], big), out=new[:, :, :-1])
        if np.array_equal(new, ids):
            break
        ids = new
    return np.where(ids == big, -1, ids)


@lru_cache(maxsize=4096)
def _template(name: str, w: int, h: int) -> np.ndarray:
    return shape_mask(name, w, h)


def classify_shape(mask: np.ndarray) -> tuple[str, float]:
    """(class, IoU) of the best shape template for a component's mask cropped to its box (h, w)."""
    h, w = mask.shape
    area = mask.sum()
    best, best_iou = CLASSES[0], -1.0
    for name in CLASSES:
        t = _template(name, w, h)
        inter = np.logical_and(t, mask).sum()
        iou = inter / (area + t.sum() - inter)
        if iou > best_iou:
            best, best_iou = name, float(iou)
    return best, best_iou


class ToyDetector:
    """Exact detector of the toy world; ``__call__(images)`` follows GenEval's ``Detector`` protocol."""

    def __init__(self, min_area: int = 6, max_distance: float = 110.0):
        self.min_area = min_area
        self.max_distance = max_distance

    def __call__(self, images) -> list[dict[str, ClassDetections]]:
        pixels = to_uint8(images)
        labels = colour_labels(pixels, self.max_distance)
        comp = components(labels)
        return [self._detections(labels[i], comp[i]) for i in range(len(pixels))]

    def _detections(self, labels: np.ndarray, comp: np.ndarray) -> dict[str, ClassDetections]:
        found: dict[str, tuple[list, list, list]] = {}
        ids, counts = np.unique(comp[comp >= 0], return_counts=True)
        for cid in ids[counts >= self.min_area]:
            ys, xs = np.nonzero(comp == cid)
            y1, y2, x1, x2 = ys.min(), ys.max() + 1, xs.min(), xs.max() + 1
            name, iou = classify_shape(comp[y1:y2, x1:x2] == cid)
            boxes, scores, colors = found.setdefault(name, ([], [], []))
            boxes.append([x1, y1, x2, y2])
            scores.append(iou)
            colors.append(COLORS[labels[ys[0], xs[0]]])
        return {name: ClassDetections(np.array(b), np.array(s), c) for name, (b, s, c) in found.items()}


def judge_images(
    images, rows: Sequence[dict], detector: ToyDetector | None = None, rules: RuleConfig = TOY_RULES
) -> list[Judgement]:
    """GenEval's three verdicts (official, strict, partial) for each image against its metadata row."""
    detector = detector or ToyDetector()
    raws = detector(images)
    if len(raws) != len(rows):
        raise ValueError(f"{len(raws)} images but {len(rows)} metadata rows")
    return [judge(filter_detections(raw, row["tag"], rules), row, rules) for raw, row in zip(raws, rows)]
