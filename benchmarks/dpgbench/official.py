"""Parity with ELLA's ``dpg_bench/compute_dpg_bench.py``, only the VQA model faked: ``parity(ella_dir, work)``.

The official script (from the user's checkout of TencentQQGYLab/ELLA; never shipped here) is imported with
its ``MPLUG`` class replaced by a stand-in whose answer ("yes" / "no", lower case as mPLUG writes) is a
seeded function of the crop (its pixel (0, 0) encodes the prompt and the crop) and the question. Its
``main()`` scores a folder of synthetic 2 x 2 grids; flowrl's ``score_folder`` scores the same folder with the
same answers (``answer_rule="exact"``, no question suffix). The question CSV is built here
(``synthetic_csv``) from the checkout's 1065 prompt files, because ELLA keeps ``dpg_bench.csv`` as a large
file: questions in DPG-Bench's categories with dependency chains, two-parent relations and, for a few
prompts, a parent that does not exist (the official run skips those images).
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import re
from pathlib import Path
from typing import Any

import numpy as np

from flowrl.benchmarks.official_scripts import printed_by

CATEGORIES = {
    "entity": ("whole", "part", "state"),
    "attribute": ("color", "type", "texture", "shape", "size", "other"),
    "relation": ("spatial", "non-spatial"),
    "global": ("",),
    "other": ("count", "text"),
}
RESOLUTION = 4


def _rng(*parts: Any) -> np.random.Generator:
    return np.random.default_rng(int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "big"))


def _stem_order(path: Path) -> tuple[str, int]:
    match = re.match(r"(.*?)(\d*)$", path.stem)
    return match.group(1), int(match.group(2) or -1)  # type: ignore[union-attr]


def synthetic_csv(prompts_dir: Path, dest: Path, seed: int = 0) -> Path:
    """One row per question for every ``prompts/*.txt`` (see the module docstring)."""
    rows = []
    for path in sorted(prompts_dir.glob("*.txt"), key=_stem_order):
        rng = _rng(seed, path.stem)
        n = int(rng.integers(3, 13))
        for qid in range(1, n + 1):
            broad = "entity" if qid <= 2 else str(rng.choice(list(CATEGORIES)))
            detail = str(rng.choice(CATEGORIES[broad]))
            if broad == "entity" or broad == "global":
                parents = [0]
            elif broad == "relation" and qid > 2:
                parents = [1, 2]
            else:
                parents = [int(rng.integers(1, qid))]
            if rng.random() < 0.003:
                parents = [n + 5]  # a parent the prompt does not have
            label = f"{broad} - {detail}" if detail else broad
            rows.append({
                "item_id": path.stem, "text": path.read_text(encoding="utf-8").strip(), "keywords": "",
                "proposition_id": qid, "dependency": ",".join(map(str, parents)), "category_broad": broad,
                "category_detailed": detail, "tuple": f"{label} (thing{qid})",
                "question_natural_language": f"Does the image show thing {qid} ({label})?",
            })  # fmt: skip
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return dest


def fake_answer(crop: Any, question: str) -> str:
    pixel = np.asarray(crop)[0, 0]
    return "yes" if _rng(int(pixel[0]), int(pixel[1]), int(pixel[2]), question).random() < 0.75 else "no"


def write_grids(keys: list[str], folder: Path) -> None:
    """A 2 x 2 grid of ``RESOLUTION`` px crops per key; crop c of prompt i has pixel (i // 256, i % 256, 40c + 1)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    r = RESOLUTION
    for i, key in enumerate(keys):
        grid = np.zeros((2 * r, 2 * r, 3), dtype=np.uint8)
        for c, (x, y) in enumerate([(0, 0), (r, 0), (0, r), (r, r)]):
            grid[y : y + r, x : x + r] = (i // 256, i % 256, 40 * c + 1)
        Image.fromarray(grid).save(folder / f"{key}.png")


class FakeJudge:
    """flowrl's side of the fake: the same answers for ``ChatRequest`` s."""

    info = {"model": "fake-mplug", "version": None, "backend": "fake", "base_url": None, "max_tokens": None}

    def complete(self, requests: list[Any]) -> list[str]:
        return [fake_answer(r.images[0], r.text) for r in requests]


def run_official(ella_dir: Path, csv_path: Path, images: Path, work: Path) -> dict[str, Any]:
    import torch

    spec = importlib.util.spec_from_file_location("dpg_official", ella_dir / "dpg_bench" / "compute_dpg_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]

    class FakeMPLUG(torch.nn.Module):
        def __init__(self, ckpt: str = "", device: str = "cpu"):
            super().__init__()

        def vqa(self, image: Any, question: str) -> str:
            return fake_answer(image.convert("RGB"), question)

    module.MPLUG = FakeMPLUG
    res = work / "official_results.txt"
    argv = ["compute_dpg_bench.py", "--image-root-path", str(images), "--resolution", str(RESOLUTION), "--csv",
            str(csv_path), "--res-path", str(res), "--pic-num", "4", "--vqa-model", "mplug"]  # fmt: skip
    text = printed_by(module.main, argv)
    l1, l2, section = {}, {}, None
    for line in text.splitlines():
        if line.startswith("L1 category"):
            section = l1
        elif line.startswith("L2 category"):
            section = l2
        elif line.startswith("\t") and section is not None:
            name, value = line.strip().rsplit(": ", 1)
            section[name] = float(value)
        elif not line.startswith("\t"):
            section = None if not line.startswith(("L1", "L2")) else section
    score = float(re.search(r"DPG-Bench score: (\S+)", text).group(1))  # type: ignore[union-attr]
    scored = {line.split(", ")[0] for line in res.read_text().splitlines() if line.startswith(str(images))}
    detail = (work / "official_results_detail.txt").read_text().splitlines()
    answers = sum(1 for line in detail if line.split(", ")[0] in scored)  # a failed image stops after crop 0
    return {"dpg_score": score, "l1_categories": l1, "l2_categories": l2, "scored_images": len(scored),
            "failed_images": text.count("Failed filename"), "answers_of_scored_images": answers}  # fmt: skip


def parity(ella_dir: str | Path, work_dir: str | Path, csv_path: str | Path | None = None) -> dict[str, Any]:
    """Both sides on the same synthetic folder; returns their numbers and the largest difference."""
    from .data import load_questions
    from .evaluate import read_progress, score_folder

    ella_dir, work = Path(ella_dir), Path(work_dir)
    csv_path = Path(csv_path) if csv_path else synthetic_csv(ella_dir / "dpg_bench" / "prompts", work / "dpg_bench.csv")
    questions = load_questions(csv_path)
    write_grids(list(questions), work / "images")
    official = run_official(ella_dir, csv_path, work / "images", work)
    options = {"prompts": csv_path, "judge": FakeJudge(), "answer_rule": "exact", "question_suffix": "",
               "resolution": RESOLUTION, "show_progress": False}  # fmt: skip
    ours = score_folder(work / "images", work / "flowrl", options)
    rows = read_progress(work / "flowrl" / "progress.jsonl")
    answered = sum(len(crop) for r in rows.values() if r["status"] == "ok" for crop in r["answers"])
    diffs = [abs(official["dpg_score"] - ours["dpg_score"])]
    diffs += [abs(official["l1_categories"][k] - ours["l1_categories"][k]) for k in official["l1_categories"]]
    diffs += [abs(official["l2_categories"][k] - ours["l2_categories"][k]) for k in official["l2_categories"]]
    return {
        "official": official,
        "flowrl": {
            "dpg_score": ours["dpg_score"],
            "l1_categories": ours["l1_categories"],
            "l2_categories": ours["l2_categories"],
            "scored_images": ours["scored_images"],
            "failed_images": ours["unscored"]["images_total"],
            "answers_of_scored_images": answered,
            "prompts": ours["prompts"],
            "questions": ours["questions"],
        },  # fmt: skip
        "same_categories": set(official["l2_categories"]) == set(ours["l2_categories"])
        and set(official["l1_categories"]) == set(ours["l1_categories"]),
        "max_abs_diff": max(diffs),
    }
