"""GenEval's decision rules over detections: pure numpy, no models.

Input: detections per GenEval class (``ClassDetections``: boxes ``(N, 4)`` as ``x1, y1, x2, y2`` in
pixels, scores ``(N,)``, optional colour label per box) and one metadata row (``prompts.py``).

Pipeline of one image: ``filter_detections`` (sort, score threshold, cap, optional NMS) -> colour labels
for the boxes ``colour_requests`` asks for (``detect.py``) -> one of the three rules below.

**Official** (``evaluate_official``, GenEval's ``evaluate``): ``include`` clauses are ANDed, ``exclude``
clauses ORed. A clause looks at the ``count`` highest-scoring kept detections of its class: fewer than
``count`` fails; with ``color``, at least ``count`` of them must carry that colour; with
``position: [rel, k]`` every (object, target) pair against the objects of include clause ``k`` must
show ``rel`` (and clause ``k`` must have passed, else "no target"). An ``exclude`` clause fails the
image when the class has ``count`` or more kept detections; for counting (``exclude = N + 1`` at the
0.9 threshold) this makes the rule "exactly N".

**Strict** (``evaluate_strict``, Flow-GRPO's ``strict_accuracy``): every include clause needs exactly
``count`` kept detections (all of them, not the first ``count``), all of that colour, and the position
for every pair; ``exclude`` clauses are not read (exact counts already imply them).

**Partial** (``evaluate_partial``, the training reward): the mean of per-clause terms

* count term ``clip(1 - |count - found| / count, 0, 1)`` over all kept detections of the class;
* with ``color``: ``matching / count`` when ``found == count``, else 0;
* with ``position``: 1 when ``found == count``, the target clause passed (strictly) and every pair
  shows the relation, else 0.

It follows Flow-GRPO's reward-server ``evaluate_reward`` except for its quirks:
(1) the authors' count term is not clamped and goes negative once ``found > 2 * count``; here it stops
at 0, so the reward lies in ``[0, 1]``; (2) on a failed position pair the authors append 0 *and then
also 1* (the loop's ``break`` falls through to the success line), so a wrong placement still earns half
credit; here it earns 0; (3) the authors add a single 0 when the count is off and the clause has colour
*or* position, and skip the position term when the clause's colour failed; here each attribute always
gives its own term. (3) changes nothing on GenEval's six tasks, where no clause has both attributes.
``correct`` of a partial verdict is the strict flag.

**Numerics, as GenEval computes them.** GenEval runs on mmdet's float32 detector output under its pinned
numpy 1.23, and its verdicts on values at a boundary depend on that, so the rules do the same:

* boxes and scores are held as float32 (``ClassDetections`` casts whatever it is given);
* per class, detections are ordered by ``np.argsort(scores)[::-1]`` of numpy 1.23 (``descending_order``):
  the ascending introsort reversed, so among equal scores of up to 16 detections the *later* one comes
  first (numpy 1.23 insertion-sorts such short arrays, which is stable; longer arrays go through its
  quicksort partitions, reproduced step by step here). numpy 2's own ``argsort`` is no substitute: on
  AVX2 / AVX-512 machines it dispatches to a vectorised sort that orders ties differently;
* the score threshold, the position margin and the ``1e-3`` "no relation" test compare float32 with the
  option rounded to float32 (a float32 array against a Python float is computed in float32 under both
  numpy 1.23's value-based casting and numpy 2's NEP 50): a score stored as float32 ``0.3`` does *not*
  pass ``threshold=0.3``;
* relative position is GenEval's float32 array arithmetic (centres, sizes, margin, offset norm);
* the NMS IoU (off by default) takes float32 coordinate differences and continues in float64, because
  numpy 1.23 promotes a float32 scalar plus a Python int to float64.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .constants import COLORS


@dataclass
class ClassDetections:
    """Detections of one class, in the detector's order until filtered (then by score, descending).

    ``boxes`` (N, 4) ``x1, y1, x2, y2`` pixels; ``scores`` (N,); both are stored as float32, the dtype of
    GenEval's detector output, whatever they are given as. ``colors`` one label or ``None`` (not
    classified) per box; ``masks`` (N, H, W) bool, carried for the colour classifier only. The order
    of equal scores is kept as given, and it matters: see ``descending_order``.
    """

    boxes: np.ndarray
    scores: np.ndarray
    colors: list[str | None] | None = None
    masks: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.boxes = np.asarray(self.boxes, dtype=np.float32).reshape(-1, 4)
        self.scores = np.asarray(self.scores, dtype=np.float32).reshape(-1)
        n = len(self.boxes)
        if len(self.scores) != n:
            raise ValueError(f"{n} boxes but {len(self.scores)} scores")
        if self.colors is not None and len(self.colors) != n:
            raise ValueError(f"{n} boxes but {len(self.colors)} colour labels")
        if self.masks is not None and len(self.masks) != n:
            raise ValueError(f"{n} boxes but {len(self.masks)} masks")

    def __len__(self) -> int:
        return len(self.boxes)

    def take(self, index: Sequence[int]) -> ClassDetections:
        """The detections at ``index``, in that order."""
        index = np.asarray(index, dtype=np.int64).reshape(-1)
        colors = None if self.colors is None else [self.colors[i] for i in index]
        masks = None if self.masks is None else self.masks[index]
        return ClassDetections(self.boxes[index], self.scores[index], colors, masks)

    def head(self, k: int) -> ClassDetections:
        """The first ``k`` detections (all of them when there are fewer)."""
        return self.take(range(min(k, len(self))))

    def color_labels(self, k: int, name: str) -> list[str]:
        """Colour labels of the first ``k`` boxes; error if one was not classified."""
        labels = (self.colors or [None] * len(self))[:k]
        if any(c is None for c in labels):
            raise ValueError(f"colour of a {name!r} detection is needed but was not classified")
        return labels  # type: ignore[return-value]


Detections = Mapping[str, ClassDetections]


@dataclass(frozen=True)
class RuleConfig:
    """GenEval's options (``--options`` of ``evaluate_images.py``) with their official defaults."""

    threshold: float = 0.3  # keep detections with score > threshold
    counting_threshold: float = 0.9  # used instead for tag == "counting"
    max_objects: int = 16  # per class, highest scores first
    max_overlap: float = 1.0  # greedy NMS IoU threshold; 1.0 disables NMS
    position_threshold: float = 0.1  # margin, in units of the summed box sizes

    def __post_init__(self) -> None:
        for name in ("threshold", "counting_threshold", "max_overlap"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"RuleConfig.{name}={getattr(self, name)} must lie in [0, 1]")
        if self.max_objects < 1:
            raise ValueError(f"RuleConfig.max_objects={self.max_objects} must be >= 1")
        if self.position_threshold < 0:
            raise ValueError(f"RuleConfig.position_threshold={self.position_threshold} must be >= 0")

    def score_threshold(self, tag: str) -> float:
        return self.counting_threshold if tag == "counting" else self.threshold

    @classmethod
    def from_options(cls, options: Sequence[str]) -> RuleConfig:
        """``key=value`` pairs (GenEval's ``--options``); an unknown key or bad value is a one-line ValueError."""
        import dataclasses

        names = [f.name for f in dataclasses.fields(cls)]
        values: dict[str, Any] = {}
        for option in options:
            key, sep, value = option.partition("=")
            if not sep or key not in names:
                raise ValueError(f"--option {option!r}: expected key=value with key in {', '.join(names)}")
            try:
                values[key] = int(value) if key == "max_objects" else float(value)
            except ValueError:
                raise ValueError(f"--option {option!r}: {value!r} is not a number") from None
        return cls(**values)


@dataclass
class Verdict:
    """One rule's decision on one image. ``score`` is 0/1 for official and strict, partial credit else."""

    correct: bool
    score: float
    reasons: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------------ filtering


def box_iou(a: Sequence[float], b: Sequence[float]) -> float:
    """IoU with GenEval's inclusive-pixel convention (width = x2 - x1 + 1), in GenEval's precision.

    Coordinates are float32 and so is each difference ``x2 - x1``; the ``+ 1`` and everything after it
    is float64, as numpy 1.23 evaluates GenEval's ``compute_iou`` on float32 scalars.
    """
    a32 = np.asarray(a, dtype=np.float32).reshape(-1)
    b32 = np.asarray(b, dtype=np.float32).reshape(-1)

    def area(x1: np.float32, y1: np.float32, x2: np.float32, y2: np.float32) -> float:
        return max(float(x2 - x1) + 1, 0.0) * max(float(y2 - y1) + 1, 0.0)

    inter = area(max(a32[0], b32[0]), max(a32[1], b32[1]), min(a32[2], b32[2]), min(a32[3], b32[3]))
    union = area(*a32[:4]) + area(*b32[:4]) - inter
    return inter / union if union else 0.0


# numpy 1.23's introsort (npysort/quicksort.cpp, aquicksort and aheapsort) over the score values, the
# sort behind GenEval's ``np.argsort(scores)``: partitions of more than 16 items use a median-of-three
# quicksort, shorter ones an insertion sort; a partition nested deeper than 2 * floor(log2 n) levels is
# heapsorted instead. ``_less`` is numpy's float order (NaN after everything).
_SMALL_SORT = 15  # numpy's SMALL_QUICKSORT: insertion sort once hi - lo <= 15


def _less(x: float, y: float) -> bool:
    return x < y or (math.isnan(y) and not math.isnan(x))


def _heapsort(idx: list[int], v: Sequence[float], start: int, n: int) -> None:
    def sift(i: int, tmp: int, n: int) -> None:
        j = 2 * i
        while j <= n:
            if j < n and _less(v[idx[start + j - 1]], v[idx[start + j]]):
                j += 1
            if not _less(v[tmp], v[idx[start + j - 1]]):
                break
            idx[start + i - 1] = idx[start + j - 1]
            i, j = j, 2 * j
        idx[start + i - 1] = tmp

    for top in range(n >> 1, 0, -1):
        sift(top, idx[start + top - 1], n)
    while n > 1:
        tmp = idx[start + n - 1]
        idx[start + n - 1] = idx[start]
        n -= 1
        sift(1, tmp, n)


def numpy123_argsort(values: Sequence[float]) -> list[int]:
    """``np.argsort(values)`` (default kind) exactly as numpy 1.23 computes it, ties included."""
    v = [float(x) for x in values]
    idx = list(range(len(v)))
    if len(v) < 2:
        return idx
    stack: list[tuple[int, int, int]] = []
    lo, hi, depth = 0, len(v) - 1, 2 * (len(v).bit_length() - 1)
    while True:
        if depth < 0:
            _heapsort(idx, v, lo, hi - lo + 1)
        else:
            while hi - lo > _SMALL_SORT:
                mid = lo + ((hi - lo) >> 1)
                if _less(v[idx[mid]], v[idx[lo]]):
                    idx[mid], idx[lo] = idx[lo], idx[mid]
                if _less(v[idx[hi]], v[idx[mid]]):
                    idx[hi], idx[mid] = idx[mid], idx[hi]
                if _less(v[idx[mid]], v[idx[lo]]):
                    idx[mid], idx[lo] = idx[lo], idx[mid]
                pivot = v[idx[mid]]
                i, j = lo, hi - 1
                idx[mid], idx[j] = idx[j], idx[mid]
                while True:
                    i += 1
                    while _less(v[idx[i]], pivot):
                        i += 1
                    j -= 1
                    while _less(pivot, v[idx[j]]):
                        j -= 1
                    if i >= j:
                        break
                    idx[i], idx[j] = idx[j], idx[i]
                idx[i], idx[hi - 1] = idx[hi - 1], idx[i]
                depth -= 1
                if i - lo < hi - i:  # keep the smaller side, stack the larger
                    stack.append((i + 1, hi, depth))
                    hi = i - 1
                else:
                    stack.append((lo, i - 1, depth))
                    lo = i + 1
            for i in range(lo + 1, hi + 1):  # insertion sort of [lo, hi]
                item, key, j = idx[i], v[idx[i]], i
                while j > lo and _less(key, v[idx[j - 1]]):
                    idx[j] = idx[j - 1]
                    j -= 1
                idx[j] = item
        if not stack:
            return idx
        lo, hi, depth = stack.pop()


def descending_order(scores: np.ndarray) -> list[int]:
    """GenEval's per-class order ``np.argsort(scores)[::-1]``: highest first, equal scores later-first (n <= 16)."""
    return numpy123_argsort(np.asarray(scores, dtype=np.float32).reshape(-1))[::-1]


def keep_detections(dets: ClassDetections, min_score: float, max_objects: int, max_overlap: float) -> ClassDetections:
    """GenEval's per-class filter: order by score (``descending_order``), keep ``score > min_score`` in
    float32, cap at ``max_objects``, then greedy NMS at ``IoU >= max_overlap`` unless that is 1.0."""
    threshold = np.float32(min_score)
    order = [i for i in descending_order(dets.scores) if dets.scores[i] > threshold][:max_objects]
    kept: list[int] = []
    while order:
        best = order.pop(0)
        kept.append(best)
        if max_overlap < 1.0:
            order = [i for i in order if box_iou(dets.boxes[best], dets.boxes[i]) < max_overlap]
    return dets.take(kept)


def filter_detections(raw: Detections, tag: str, cfg: RuleConfig = RuleConfig()) -> dict[str, ClassDetections]:
    """Apply the tag's score threshold, cap and NMS to every class; classes left empty are dropped."""
    out = {}
    for name, dets in raw.items():
        kept = keep_detections(dets, cfg.score_threshold(tag), cfg.max_objects, cfg.max_overlap)
        if len(kept):
            out[name] = kept
    return out


def colour_requests(metadata: Mapping[str, Any]) -> dict[str, int]:
    """How many top detections of each class need a colour label (enough for all three rules)."""
    need: dict[str, int] = {}
    for clause in metadata.get("include", []):
        if "color" in clause:
            need[clause["class"]] = max(need.get(clause["class"], 0), clause["count"])
    return need


# ------------------------------------------------------------------------------------------ geometry


def relative_position(box_a: Sequence[float], box_b: Sequence[float], margin: float = 0.1) -> set[str]:
    """Relations of A with respect to B ("left of", "right of", "above", "below"; image y points down).

    The centre offset is shrunk per axis by ``margin * (size_a + size_b)`` (never past zero); if nothing
    is left (every component under ``1e-3``) there is no relation. Otherwise the shrunk offset is divided
    by the length of the original offset and a relation holds where that component exceeds 0.5 in size,
    so a diagonal placement can carry two relations and a small shift along a long axis carries none.
    All of it is float32 arithmetic, ``margin`` and ``1e-3`` rounded to float32, as in GenEval.
    """
    boxes = np.asarray([box_a, box_b], dtype=np.float32)[:, :4].reshape(2, 2, 2)  # (obj, corner, xy)
    centre_a, centre_b = boxes.mean(axis=1)
    size_a, size_b = np.abs(boxes[:, 1] - boxes[:, 0])
    offset = centre_a - centre_b
    revised = np.maximum(np.abs(offset) - np.float32(margin) * (size_a + size_b), np.float32(0)) * np.sign(offset)
    if np.all(np.abs(revised) < np.float32(1e-3)):
        return set()
    dx, dy = revised / np.linalg.norm(offset)
    relations = set()
    if dx < -0.5:
        relations.add("left of")
    if dx > 0.5:
        relations.add("right of")
    if dy < -0.5:
        relations.add("above")
    if dy > 0.5:
        relations.add("below")
    return relations


def _position_failure(
    name: str, found: ClassDetections, clause: Mapping[str, Any], groups: list[ClassDetections | None], margin: float
) -> str | None:
    """Reason why ``found`` breaks the clause's position, or ``None`` when every pair holds."""
    relation, target_index = clause["position"]
    targets = groups[target_index]
    if targets is None:
        return f"no target for {name} to be {relation}"
    for box in found.boxes:
        for target_box in targets.boxes:
            seen = relative_position(box, target_box, margin)
            if relation not in seen:
                return f"expected {name} {relation} target, found {' and '.join(sorted(seen)) or 'no relation'}"
    return None


def _colour_tally(labels: list[str]) -> str:
    return ", ".join(f"{labels.count(c)} {c}" for c in COLORS if c in labels)


def _of_class(dets: Detections, name: str) -> ClassDetections:
    """The kept detections of ``name`` (none when the class was not detected)."""
    return dets[name] if name in dets else ClassDetections(np.zeros((0, 4)), np.zeros(0))


# ------------------------------------------------------------------------------------------ the rules


def _official_clause(
    dets: Detections, clause: Mapping[str, Any], groups: list[ClassDetections | None], margin: float
) -> tuple[ClassDetections | None, str | None]:
    name, count = clause["class"], clause["count"]
    found = _of_class(dets, name).head(count)
    if len(found) < count:
        return None, f"expected {name}>={count}, found {len(found)}"
    if "color" in clause:
        color, labels = clause["color"], found.color_labels(count, name)
        if labels.count(color) < count:
            tally = _colour_tally(labels)
            return None, f"expected {color} {name}>={count}, found {labels.count(color)} {color}; and {tally}"
    if "position" in clause:
        failure = _position_failure(name, found, clause, groups, margin)
        if failure:
            return None, failure
    return found, None


def evaluate_official(dets: Detections, metadata: Mapping[str, Any], cfg: RuleConfig = RuleConfig()) -> Verdict:
    """GenEval's official correctness of one image (``dets`` already filtered for its tag)."""
    reasons: list[str] = []
    groups: list[ClassDetections | None] = []
    for clause in metadata["include"]:
        found, reason = _official_clause(dets, clause, groups, cfg.position_threshold)
        groups.append(found)
        if reason:
            reasons.append(reason)
    for clause in metadata.get("exclude", []):
        n = len(_of_class(dets, clause["class"]))
        if n >= clause["count"]:
            reasons.append(f"expected {clause['class']}<{clause['count']}, found {n}")
    return Verdict(correct=not reasons, score=float(not reasons), reasons=reasons)


def _exact_clause(
    dets: Detections, clause: Mapping[str, Any], groups: list[ClassDetections | None], margin: float
) -> tuple[list[float], str | None, bool]:
    """(terms, first failure, passed) of one include clause under exact counting (strict and partial)."""
    name, count = clause["class"], clause["count"]
    found = _of_class(dets, name)
    terms = [min(max(1.0 - abs(count - len(found)) / count, 0.0), 1.0)]
    count_ok = len(found) == count
    failures = [] if count_ok else [f"expected {name}=={count}, found {len(found)}"]
    if "color" in clause:
        n_ok = found.color_labels(count, name).count(clause["color"]) if count_ok else 0
        terms.append(n_ok / count)
        if count_ok and n_ok != count:
            failures.append(f"expected {clause['color']} {name}=={count}, found {n_ok} {clause['color']}")
    if "position" in clause:
        failure = _position_failure(name, found, clause, groups, margin) if count_ok else None
        terms.append(float(count_ok and failure is None))
        if failure:
            failures.append(failure)
    return terms, (failures[0] if failures else None), not failures


def _exact_rules(dets: Detections, metadata: Mapping[str, Any], margin: float) -> tuple[list[float], list[str]]:
    terms: list[float] = []
    reasons: list[str] = []
    groups: list[ClassDetections | None] = []
    for clause in metadata["include"]:
        clause_terms, reason, passed = _exact_clause(dets, clause, groups, margin)
        terms.extend(clause_terms)
        groups.append(_of_class(dets, clause["class"]) if passed else None)
        if reason:
            reasons.append(reason)
    return terms, reasons


def evaluate_strict(dets: Detections, metadata: Mapping[str, Any], cfg: RuleConfig = RuleConfig()) -> Verdict:
    """Exact counts for every include clause, colours and positions on all of them; excludes ignored."""
    _, reasons = _exact_rules(dets, metadata, cfg.position_threshold)
    return Verdict(correct=not reasons, score=float(not reasons), reasons=reasons)


def evaluate_partial(dets: Detections, metadata: Mapping[str, Any], cfg: RuleConfig = RuleConfig()) -> Verdict:
    """Partial credit in [0, 1]: mean of the per-clause terms (module docstring); ``correct`` is strict."""
    terms, reasons = _exact_rules(dets, metadata, cfg.position_threshold)
    return Verdict(correct=not reasons, score=float(np.mean(terms)), reasons=reasons)


@dataclass
class Judgement:
    """All three rules on one image; ``reasons`` are the official rule's."""

    correct: bool
    strict: bool
    partial: float
    reasons: list[str]
    strict_reasons: list[str]


def judge(dets: Detections, metadata: Mapping[str, Any], cfg: RuleConfig = RuleConfig()) -> Judgement:
    """Official, strict and partial verdicts of one image from its filtered, colour-labelled detections."""
    official = evaluate_official(dets, metadata, cfg)
    partial = evaluate_partial(dets, metadata, cfg)
    return Judgement(official.correct, partial.correct, partial.score, official.reasons, partial.reasons)
