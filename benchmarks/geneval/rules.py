"""GenEval's decision rules over detections: pure numpy, no models.

Input: detections per GenEval class (``ClassDetections``: boxes ``(N, 4)`` as ``x1, y1, x2, y2`` in
pixels, scores ``(N,)``, optional colour label per box) and one metadata row (``prompts.py``).

Pipeline of one image: ``filter_detections`` (score threshold, sort, cap, optional NMS) -> colour labels
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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .constants import COLORS


@dataclass
class ClassDetections:
    """Detections of one class, in any order until filtered (then by score, descending).

    ``boxes`` (N, 4) ``x1, y1, x2, y2`` pixels; ``scores`` (N,); ``colors`` one label or ``None``
    (not classified) per box; ``masks`` (N, H, W) bool, carried for the colour classifier only.
    """

    boxes: np.ndarray
    scores: np.ndarray
    colors: list[str | None] | None = None
    masks: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.boxes = np.asarray(self.boxes, dtype=np.float64).reshape(-1, 4)
        self.scores = np.asarray(self.scores, dtype=np.float64).reshape(-1)
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


def box_iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU with GenEval's inclusive-pixel convention (width = x2 - x1 + 1)."""

    def area(box: Sequence[float]) -> float:
        return max(box[2] - box[0] + 1, 0) * max(box[3] - box[1] + 1, 0)

    inter = area([max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])])
    union = area(a) + area(b) - inter
    return inter / union if union else 0.0


def keep_detections(dets: ClassDetections, min_score: float, max_objects: int, max_overlap: float) -> ClassDetections:
    """Sort by score, keep ``score > min_score``, cap at ``max_objects``, then greedy NMS unless 1.0."""
    order = [int(i) for i in np.argsort(-dets.scores, kind="stable") if dets.scores[i] > min_score][:max_objects]
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
    is left there is no relation. Otherwise the shrunk offset is divided by the length of the original
    offset and a relation holds where that component exceeds 0.5 in size, so a diagonal placement can
    carry two relations and a small shift along a long axis carries none.
    """
    boxes = np.asarray([box_a, box_b], dtype=np.float64)[:, :4].reshape(2, 2, 2)  # (obj, corner, xy)
    centre_a, centre_b = boxes.mean(axis=1)
    size_a, size_b = np.abs(boxes[:, 1] - boxes[:, 0])
    offset = centre_a - centre_b
    revised = np.maximum(np.abs(offset) - margin * (size_a + size_b), 0.0) * np.sign(offset)
    if np.all(np.abs(revised) < 1e-3):
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
