"""DPG-Bench's scorer, as ELLA's ``dpg_bench/compute_dpg_bench.py`` computes it (TencentQQGYLab/ELLA at
3c228f1d, the repository's head), re-implemented here; none of its code is shipped.

**Questions** (``parse_questions``): the CSV rows (``item_id, text, keywords, proposition_id, dependency,
category_broad, category_detailed, tuple, question_natural_language``) are read in order; **the first data
row is skipped** (the official loop's ``if i == 0: continue``), rows are grouped while ``item_id`` repeats
the previous row's, and a block of an ``item_id`` seen before replaces the earlier one. ``dependency`` is a
comma-separated list of parent ``proposition_id`` s (0: none). A question's category is its ``tuple``'s
text before ``(``, stripped (``"entity - whole"``); its L1 category the category's text before ``-``.

**One image** (``image_result``): the image is cut into ``pic_num`` crops of ``resolution`` px, in the order
top-left, top-right, bottom-left, bottom-right (the official 2 x 2 grid; 4 crops). In each crop every
question is asked; its score is 1 if the answer is exactly ``"yes"`` (the official mPLUG's spelling), else
0. Then, question by question in file order, a question with a parent (other than 0) whose current score
is 0 is set to 0 (a zeroed parent zeroes the children after it). The crop's score is the mean over the
item's questions, the image's the mean over crops. A parent id that is not among the item's questions
makes the official run skip the whole image (its ``KeyError`` is caught as a failed file): ``MissingParent``.

**The benchmark** (``summarize``): DPG score = 100 x the mean image score over the scored images. Category
scores use the **last crop's answers before the dependency rule** (the official ``qid2scores_orig``):
100 x the mean over every (image, question) of that category (L2) or L1 category.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flowrl.benchmarks.progress import judge_lines, summary_head, unscored_causes

COLUMNS = ("item_id", "text", "keywords", "proposition_id", "dependency", "category_broad", "category_detailed",
           "tuple", "question_natural_language")  # fmt: skip
OFFICIAL_CROPS = 4


@dataclass
class ItemQuestions:
    """One prompt's questions, keyed by ``proposition_id`` in file order."""

    key: str
    text: str
    question: dict[int, str] = field(default_factory=dict)
    tuple: dict[int, str] = field(default_factory=dict)
    dependency: dict[int, list[int]] = field(default_factory=dict)


class MissingParent(KeyError):
    """A question depends on a ``proposition_id`` the item does not have (the official run skips the image)."""


def category(tuple_text: str) -> str:
    return tuple_text.split("(")[0].strip()


def l1_category(tuple_text: str) -> str:
    return category(tuple_text).split("-")[0].strip()


def parse_dependency(text: str) -> list[int]:
    return [int(d.strip()) for d in str(text).split(",")]


def parse_questions(rows: Iterable[Mapping[str, Any]], skip_first: bool = True) -> dict[str, ItemQuestions]:
    """The official grouping of CSV rows (see the module docstring); ``skip_first=False`` keeps row 0."""
    out: dict[str, ItemQuestions] = {}
    previous = None
    for i, row in enumerate(rows):
        if i == 0 and skip_first:
            continue
        key, qid = str(row["item_id"]), int(row["proposition_id"])
        if key != previous:
            out[key] = ItemQuestions(key, str(row["text"]))
        item = out[key]
        item.tuple[qid] = str(row["tuple"])
        item.dependency[qid] = parse_dependency(row["dependency"])
        item.question[qid] = str(row["question_natural_language"])
        previous = key
    return out


def crop_boxes(resolution: int, pic_num: int = OFFICIAL_CROPS) -> list[tuple[int, int, int, int]]:
    r = resolution
    return [(0, 0, r, r), (r, 0, 2 * r, r), (0, r, r, 2 * r), (r, r, 2 * r, 2 * r)][:pic_num]


def crop_score(raw: Mapping[int, float], dependency: Mapping[int, Sequence[int]]) -> tuple[float, dict[int, float]]:
    """One crop: the dependency rule applied in order to the raw 0/1 scores; returns (mean, scores)."""
    scores = dict(raw)
    for qid, parents in dependency.items():
        for parent in parents:
            if parent == 0:
                continue
            if parent not in scores:
                raise MissingParent(f"question {qid} depends on {parent}, which the item does not have")
            if scores[parent] == 0:
                scores[qid] = 0
                break
    return sum(scores.values()) / len(scores), scores


def image_result(item: ItemQuestions, crop_answers: Sequence[Mapping[int, bool]]) -> dict[str, Any]:
    """The image's score from each crop's yes/no verdicts (``{qid: answered yes}``), and the last crop's raw
    scores for the category tables."""
    crop_scores, raw = [], {}
    for answers in crop_answers:
        raw = {qid: float(bool(answers[qid])) for qid in item.question}
        crop_scores.append(crop_score(raw, item.dependency)[0])
    return {"score": sum(crop_scores) / len(crop_scores), "crop_scores": crop_scores, "last_crop_raw": raw}


def summarize(items: Sequence[ItemQuestions], rows: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The benchmark numbers from per-image rows keyed by item key (``status == "ok"`` with ``score`` and
    ``last_crop_raw`` as ``{qid: 0/1}``); other rows count as unscored by status."""
    scores: list[float] = []
    l2: dict[str, list[float]] = {}
    l1: dict[str, list[float]] = {}
    unscored: dict[str, int] = {}
    for item in items:
        row = rows.get(item.key)
        status = row.get("status", "not_judged") if row else "not_judged"
        if status != "ok":
            unscored[status] = unscored.get(status, 0) + 1
            continue
        scores.append(row["score"])
        raw = {int(q): v for q, v in row["last_crop_raw"].items()}
        for qid, tuple_text in item.tuple.items():
            l2.setdefault(category(tuple_text), []).append(raw[qid])
    for name, values in l2.items():
        l1.setdefault(name.split("-")[0].strip(), []).extend(values)
    mean100 = lambda v: float(np.mean(v) * 100) if v else None  # noqa: E731 - the official np.mean(...) * 100
    return {
        "dpg_score": mean100(scores),
        "l1_categories": {name: mean100(v) for name, v in sorted(l1.items())},
        "l2_categories": {name: mean100(v) for name, v in sorted(l2.items())},
        "prompts": len(items),
        "questions": sum(len(i.question) for i in items),
        "scored_images": len(scores),
        "scored_questions": sum(len(v) for v in l2.values()),
        "unscored": {"images": dict(sorted(unscored.items())), "images_total": sum(unscored.values())},
    }


def answer_is_yes(text: str | None, rule: str) -> bool:
    """``exact``: the official ``answer == "yes"``; ``first-word``: the reply's first word, lower-cased and
    stripped of punctuation, is "yes" (for chat VLMs, which write "Yes." or "Yes, there is ...")."""
    if text is None:
        return False
    if rule == "exact":
        return text == "yes"
    if rule == "first-word":
        words = text.strip().split()
        return bool(words) and words[0].strip(".,:;!?\"'*()[]").lower() == "yes"
    raise ValueError(f"--answer-rule {rule!r}: choose exact or first-word")


def summary_markdown(summary: Mapping[str, Any]) -> str:
    pct = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    u = summary["unscored"]
    causes = unscored_causes(u)
    lines = [
        *summary_head("DPG-Bench", summary),
        f"**DPG score: {pct(summary['dpg_score'])}**",
        "",
        "| L1 category | score |",
        "|---|---:|",
        *[f"| {k} | {pct(v)} |" for k, v in summary["l1_categories"].items()],
        "",
        "| L2 category | score |",
        "|---|---:|",
        *[f"| {k} | {pct(v)} |" for k, v in summary["l2_categories"].items()],
        "",
        f"Prompts: {summary['prompts']} ({summary['questions']} questions); scored images: "
        f"{summary['scored_images']}; unscored: {u['images_total']} ({causes}).",
        *judge_lines(summary.get("judge"), "VQA model"),
    ]
    return "\n".join(lines) + "\n"
