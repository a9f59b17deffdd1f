"""GenEval 2's Soft-TIFA, as the official ``evaluation.py`` and ``soft_tifa_analysis.py`` compute it.

Source: facebookresearch/GenEval2 (commit b323bf4d, unchanged at a6e82d22, the repository's head on
2026-01-07), re-implemented here; none of its code is shipped.

**One question.** The judge sees the image and ``"{question} Answer in one word."`` and produces one token.
The question's soft score is the sum, over the answer's surface forms, of the probability of each form's
first token id (``tokenizer.encode(form)[0]``; a repeated id counts again, as in the official loop):

    "How many ..." questions:  answer, Answer, " answer", " Answer", digit, " digit"
                               (digit: one..ten -> 1..10, any other word -> "other")
    every other question:      "Yes", "yes", " yes", " Yes"

TIFA (the hard variant) counts a question correct when the argmax token, lower-cased, is one of the forms.

**One image.** Soft-TIFA AM = the mean of its question scores; Soft-TIFA GM = their geometric mean (0 when
one is 0). **The benchmark** = 100 x the mean over images (the official run has one image per prompt, 800
prompts, 6012 questions): GM is the headline number (``--method soft_tifa_gm``). The analysis script's
breakdowns: per skill (object, attribute, count, position, verb) 100 x the pooled mean of that skill's
question scores (AM), and per atomicity (3..10) 100 x the mean GM of the prompts with that ``atom_count``.
Sums run in the official order (prompts in file order, questions in order) with the official operand
order, so that equal judge probabilities give bit-equal numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from flowrl.benchmarks.progress import judge_lines, summary_head, unscored_causes

SKILLS = ("object", "attribute", "count", "position", "verb")
ATOMICITIES = tuple(range(3, 11))
QUESTION_SUFFIX = " Answer in one word."
YES_FORMS = ("Yes", "yes", " yes", " Yes")
_DIGITS = {"one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7",
           "eight": "8", "nine": "9", "ten": "10"}  # fmt: skip


def numeric_string(word: str) -> str:
    """The official ``return_numeric_string``: "four" -> "4" (lower-case one..ten only), else "other"."""
    return _DIGITS.get(word, "other")


def answer_forms(question: str, answer: str) -> list[str]:
    """The surface forms whose first tokens are summed (see the module docstring)."""
    if question.startswith("How many"):
        digit = numeric_string(answer)
        return [answer, answer.capitalize(), " " + answer, " " + answer.capitalize(), digit, " " + digit]
    return list(YES_FORMS)


def judge_text(question: str) -> str:
    return question + QUESTION_SUFFIX


def soft_score(form_probs: Sequence[float]) -> float:
    """The question's score: the forms' first-token probabilities summed in order."""
    total = 0.0
    for p in form_probs:
        total += p
    return total


def hard_correct(argmax_token: str, forms: Sequence[str]) -> bool:
    """TIFA: the argmax token, lower-cased, is one of the forms."""
    return argmax_token.lower() in forms


def gmean(values: Sequence[float]) -> float:
    """exp(mean(log v)); 0 when a value is 0 (as ``scipy.stats.gmean``)."""
    with np.errstate(divide="ignore"):
        return float(np.exp(np.mean(np.log(np.asarray(values, dtype=np.float64)))))


def image_scores(scores: Sequence[float]) -> dict[str, float]:
    """Soft-TIFA AM and GM of one image's question scores."""
    return {"am": sum(scores) / len(scores), "gm": gmean(scores)}


def _mean100(values: Sequence[float]) -> float | None:
    return 100 * sum(values) / len(values) if values else None


def sim_even_order(n: int, world: int, batch: int) -> list[int]:
    """UniRL's ``--sim-even-batches WxB`` order: the rows, then the first ones again until whole waves of
    ``world * batch`` are filled (a distributed evaluation that pads its last wave by repeating the data)."""
    if n <= 0:
        return []
    wave = world * batch
    target = -(-n // wave) * wave
    return list(range(n)) + [i % n for i in range(target - n)]


def summarize(items: Sequence[Mapping[str, Any]], rows: Mapping[tuple[str, int], Mapping[str, Any]],
              images_per_prompt: int, sim_even: tuple[int, int] | None = None) -> dict[str, Any]:  # fmt: skip
    """The benchmark numbers from scored rows keyed by (item key, image) (``status == "ok"`` with ``scores``
    one per question, and ``correct`` for TIFA); every other image is counted as unscored by its status.
    ``sim_even`` (world, batch) adds UniRL's padded-wave means of the per-image GM and AM."""
    gm, am, tifa = [], [], []
    per_image: list[tuple[float, float] | None] = []  # (gm, am) in image order, None when unscored
    shared = 0
    skill_sum = dict.fromkeys(SKILLS, 0.0)
    skill_n = dict.fromkeys(SKILLS, 0)
    atom: dict[int, dict[str, float]] = {}
    unscored: dict[str, int] = {}
    questions = 0
    for item in items:
        for k in range(images_per_prompt):
            row = rows.get((item["key"], k))
            status = row.get("status", "not_judged") if row else "not_judged"
            if status != "ok":
                unscored[status] = unscored.get(status, 0) + 1
                per_image.append(None)
                continue
            scores = list(row["scores"])
            questions += len(scores)
            shared += int(row.get("shared_first_tokens") or 0)
            gm.append(gmean(scores))
            am.append(sum(scores) / len(scores))
            per_image.append((gm[-1], am[-1]))
            if row.get("correct") is not None:
                tifa.append(sum(row["correct"]) / len(row["correct"]))
            for score, skill in zip(scores, item["skills"]):
                if skill not in skill_sum:
                    raise ValueError(f"GenEval 2 item {item['key']}: unrecognized skill {skill!r}")
                skill_sum[skill] += score
                skill_n[skill] += 1
            cell = atom.setdefault(int(item["atom_count"]), {"correct": 0.0, "total": 0})
            cell["correct"] += gm[-1]
            cell["total"] += 1
    sim: dict[str, float | None] = {}
    if sim_even is not None:
        order = [per_image[i] for i in sim_even_order(len(per_image), *sim_even) if per_image[i] is not None]
        tag = f"sim{sim_even[0]}x{sim_even[1]}"
        sim = {
            f"soft_tifa_gm_{tag}": _mean100([v[0] for v in order]),
            f"soft_tifa_am_{tag}": _mean100([v[1] for v in order]),
        }
    return {
        **sim,
        "soft_tifa_gm": _mean100(gm),
        "soft_tifa_am": _mean100(am),
        "tifa": _mean100(tifa) if len(tifa) == len(gm) else None,
        "per_skill_am": {s: (100 * skill_sum[s] / skill_n[s] if skill_n[s] else None) for s in SKILLS},
        "per_atomicity_gm": {
            str(a): (atom[a]["correct"] * 100 / atom[a]["total"] if a in atom else None)
            for a in sorted(set(ATOMICITIES) | set(atom))
        },
        "prompts": len(items),
        "images_per_prompt": images_per_prompt,
        "images": len(items) * images_per_prompt,
        "scored_images": len(gm),
        "scored_questions": questions,
        "questions_with_shared_first_tokens": shared,
        "unscored": {"images": dict(sorted(unscored.items())), "images_total": sum(unscored.values())},
    }


def _pct(value: float | None) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"


def summary_markdown(summary: Mapping[str, Any]) -> str:
    u = summary["unscored"]
    causes = unscored_causes(u)
    lines = [
        *summary_head("GenEval 2 (Soft-TIFA)", summary),
        f"**Soft-TIFA GM: {_pct(summary['soft_tifa_gm'])}**; Soft-TIFA AM: {_pct(summary['soft_tifa_am'])}; "
        f"TIFA: {_pct(summary['tifa'])}.",
        *[
            f"{name.replace('_', ' ')}: {_pct(v)} (UniRL's padded waves)."
            for name, v in summary.items()
            if "_sim" in name
        ],
        "",
        "| skill (Soft-TIFA AM) | score |",
        "|---|---:|",
        *[f"| {s} | {_pct(v)} |" for s, v in summary["per_skill_am"].items()],
        "",
        "| atomicity (Soft-TIFA GM) | score |",
        "|---|---:|",
        *[f"| {a} | {_pct(v)} |" for a, v in summary["per_atomicity_gm"].items()],
        "",
        f"Prompts: {summary['prompts']}; images: {summary['images']} ({summary['images_per_prompt']} per prompt); "
        f"scored images: {summary['scored_images']}; scored questions: {summary['scored_questions']}.",
        f"Unscored images: {u['images_total']} ({causes}).",
        f"Questions two of whose answer forms share a first token: {summary['questions_with_shared_first_tokens']}.",
        *judge_lines(summary.get("judge"), "Judge"),
    ]
    source = summary.get("prompt_set")
    if source:
        lines.append(f"Prompts: {source.get('source')} (sha256 {str(source.get('sha256'))[:12]}).")
    return "\n".join(lines) + "\n"
