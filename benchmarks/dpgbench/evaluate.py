"""Scoring a DPG-Bench image folder with a VQA model, resumable.

Images, per prompt ``key`` (the CSV's ``item_id``): ``{key}_{k}.png`` for ``k < pic_num`` (flowrl's
``--generate``), else the official 2 x 2 grid ``{key}.png`` / ``.jpg`` cut into ``pic_num`` crops of
``resolution`` px (default: half the grid's width). Output folder::

    OUT/run.json          the VQA model, the CSV (sha256), the answer rule, crops
    OUT/progress.jsonl    one row per prompt: every crop's answers, the crop and image scores, the last
                          crop's raw verdicts (the last row of a prompt wins)
    OUT/summary.json, OUT/summary.md

The official VQA model is mPLUG-large (``damo/mplug_visual-question-answering_coco_large_en`` through
modelscope), which answers in lower case; flowrl asks a served VLM (OpenAI-compatible) or a local
transformers VLM, the question followed by ``question_suffix``, and reads the reply with ``answer_rule``
(``scoring.answer_is_yes``). The scoring itself (dependencies, crops, category tables) is the official one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from flowrl.benchmarks.progress import PROGRESS, RUN, check_resume, read_rows, read_run, write_summary

from . import scoring
from .data import describe_source, load_questions

OFFICIAL_VQA = "damo/mplug_visual-question-answering_coco_large_en"
QUESTION_SUFFIX = " Please answer yes or no."
_PINNED = ("model", "version", "backend", "base_url", "max_tokens")


def crops_of(images_dir: Path, key: str, pic_num: int, resolution: int | None) -> list[np.ndarray] | None:
    """The ``pic_num`` crops of prompt ``key`` (singles first, else the grid), or None when absent."""
    from PIL import Image

    singles = [images_dir / f"{key}_{k}.png" for k in range(pic_num)]
    if all(p.is_file() for p in singles):
        out = []
        for path in singles:
            with Image.open(path) as image:
                out.append(np.asarray(image.convert("RGB")))
        return out
    grid = next(
        (images_dir / f"{key}{ext}" for ext in (".png", ".jpg", ".jpeg") if (images_dir / f"{key}{ext}").is_file()),
        None,
    )
    if grid is None:
        return None
    with Image.open(grid) as image:
        size = resolution or image.width // 2
        return [np.asarray(image.crop(box).convert("RGB")) for box in scoring.crop_boxes(size, pic_num)]


def build_judge(options: Mapping[str, Any]) -> Any:
    """``judge`` (ready), else ``base_url`` + ``model`` (served), else ``model`` (a local transformers VLM)."""
    from flowrl.benchmarks.unigenbench.judge import openai_judge, transformers_judge

    if options.get("judge") is not None:
        return options["judge"]
    if not options.get("model"):
        raise ValueError("DPG-Bench needs --judge-model (a served VLM's name with --base-url, else a local VLM)")
    if options.get("base_url"):
        return openai_judge(options["base_url"], options["model"], version=options.get("version"),
                            api_key=options.get("api_key"), max_tokens=options.get("max_tokens", 16),
                            timeout=options.get("timeout", 120.0), retries=options.get("retries"),
                            concurrency=options.get("concurrency", 8))  # fmt: skip
    return transformers_judge(options["model"], version=options.get("version"), max_tokens=options.get("max_tokens", 16),
                              device=options.get("device"), dtype=options.get("dtype", "bf16"),
                              batch_size=options.get("batch_size") or 8)  # fmt: skip


def score_item(judge: Any, item: scoring.ItemQuestions, crops: list[np.ndarray], suffix: str, rule: str) -> dict:
    """One prompt's row: every question asked of every crop (one batch), then the official scoring."""
    from flowrl.reward_models.vlm import ChatRequest

    qids = list(item.question)
    requests = [ChatRequest([crop], item.question[q] + suffix) for crop in crops for q in qids]
    replies = judge.complete(requests)
    failed = next((r for r in replies if isinstance(r, BaseException)), None)
    if failed is not None:
        return {"status": "request_error", "error": str(failed).splitlines()[0] if str(failed) else repr(failed)}
    answers = [dict(zip(qids, replies[c * len(qids) : (c + 1) * len(qids)])) for c in range(len(crops))]
    verdicts = [{q: scoring.answer_is_yes(a[q], rule) for q in qids} for a in answers]
    try:
        result = scoring.image_result(item, verdicts)
    except scoring.MissingParent as exc:
        return {"status": "missing_parent", "error": str(exc), "answers": answers}
    return {"status": "ok", "answers": answers, **result}


def score_folder(image_dir: str | Path, out_dir: str | Path, judge_options: Mapping[str, Any] | None = None) -> dict:
    """Score every prompt's images in ``image_dir``; per-prompt rows and the summary go to ``out_dir``.

    ``judge_options``: ``prompts`` (the CSV or an ELLA checkout; default ``load_items``' lookup) or
    ``questions`` (parsed), ``pic_num`` (4), ``resolution`` (grid crops; default half the width),
    ``answer_rule`` ("first-word"), ``question_suffix``, ``limit``, ``resume``, ``show_progress``, and the
    VQA model: ``judge`` (ready) or ``base_url``/``model``/``api_key`` (served) or ``model``/``device``/``dtype``
    /``batch_size`` (local), ``max_tokens`` (16), ``version``. Returns the summary.
    """
    from tqdm.auto import tqdm

    opts = dict(judge_options or {})
    images_dir, out = Path(image_dir), Path(out_dir)
    if not images_dir.is_dir():
        raise FileNotFoundError(f"DPG-Bench image folder {images_dir} does not exist")
    pic_num = int(opts.get("pic_num") or scoring.OFFICIAL_CROPS)
    if not 1 <= pic_num <= 4:
        raise ValueError(f"--pic-num: 1 to 4 crops of the 2 x 2 grid, got {pic_num}")
    rule = opts.get("answer_rule", "first-word")
    scoring.answer_is_yes("yes", rule)  # a bad rule fails here, before the judge loads
    suffix = opts.get("question_suffix", QUESTION_SUFFIX if rule != "exact" else "")
    questions = opts.get("questions") or load_questions(opts.get("prompts"))
    prompts = opts.get("prompt_set") or (
        describe_source(opts.get("prompts")) if not opts.get("questions") else {"source": "questions", "sha256": None}
    )
    items = list(questions.values())[: opts.get("limit") or None]
    judge = build_judge(opts)
    judge_info = (
        judge.info
        if isinstance(judge.info, dict)
        else {k: getattr(judge.info, k) for k in ("model", "version", "backend", "base_url", "max_tokens")}
    )
    run = {"benchmark": "dpgbench", "judge": judge_info, "prompts": prompts, "pic_num": pic_num,
           "resolution": opts.get("resolution"), "answer_rule": rule, "question_suffix": suffix,
           "limit": opts.get("limit"), "images_dir": str(images_dir.resolve())}  # fmt: skip
    pinned_run = ("answer_rule", "question_suffix", "pic_num", "resolution")
    check_resume(out, run, bool(opts.get("resume")), "DPG-Bench", _PINNED, pinned_run)
    out.mkdir(parents=True, exist_ok=True)
    (out / RUN).write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
    rows = {k: r for k, r in read_progress(out / PROGRESS).items() if r.get("status") in ("ok", "missing_parent")}
    todo = [item for item in items if item.key not in rows]
    with open(out / PROGRESS, "a", encoding="utf-8") as progress:
        for item in tqdm(todo, desc="dpg", disable=not opts.get("show_progress", True) or not todo):
            row: dict[str, Any] = {"key": item.key}
            try:
                crops = crops_of(images_dir, item.key, pic_num, opts.get("resolution"))
            except OSError as exc:
                crops, row["error"] = None, f"{item.key}: {exc}"
                row["status"] = "image_error"
            if crops is None and "status" not in row:
                row.update(status="missing_image", error=f"no {item.key}_0..{pic_num - 1}.png or {item.key}.png")
            elif crops is not None:
                row.update(score_item(judge, item, crops, suffix, rule))
            progress.write(json.dumps(row) + "\n")
            progress.flush()
            rows[item.key] = row
    return summarize_run(out, items, rows, run)


def read_progress(path: Path) -> dict[str, dict[str, Any]]:
    return read_rows(path, lambda row: str(row["key"]))


def protocol_status(run: Mapping[str, Any], summary: Mapping[str, Any]) -> dict[str, Any]:
    deviations = []
    if run["judge"].get("model") != OFFICIAL_VQA:
        deviations.append(f"VQA model {run['judge'].get('model')} (official mPLUG-large, {OFFICIAL_VQA})")
    if run["answer_rule"] != "exact" or run["question_suffix"]:
        deviations.append(f"answers read by the {run['answer_rule']} rule after the suffix {run['question_suffix']!r}")
    if run["pic_num"] != scoring.OFFICIAL_CROPS:
        deviations.append(f"{run['pic_num']} crops (official 4)")
    if run.get("limit"):
        deviations.append(f"only the first {run['limit']} prompts")
    if summary["unscored"]["images_total"]:
        deviations.append(f"{summary['unscored']['images_total']} prompt(s) unscored")
    label = (
        "official" if not deviations else "official scoring, not the official VQA run (" + "; ".join(deviations) + ")"
    )
    return {"official": not deviations, "deviations": deviations, "label": label}


def summarize_run(out_dir: str | Path, items: list[scoring.ItemQuestions], rows: Mapping | None = None,
                  run: Mapping[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    out = Path(out_dir)
    run = read_run(out, "DPG-Bench") if run is None else run
    rows = read_progress(out / PROGRESS) if rows is None else rows
    summary = scoring.summarize(items[: run.get("limit") or None], rows)
    summary.update(
        judge=run["judge"], prompt_set=run["prompts"], answer_rule=run["answer_rule"], pic_num=run["pic_num"]
    )
    summary["protocol"] = protocol_status(run, summary)
    write_summary(out, summary, scoring.summary_markdown(summary))
    return summary
