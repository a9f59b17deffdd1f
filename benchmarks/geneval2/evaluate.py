"""Scoring a GenEval 2 image folder with Soft-TIFA, resumable.

Images: ``IMAGES/{key}_{k}.png`` (``key`` the prompt's row number in the data file; flowrl's
``--generate`` layout), or UniRL's ``p{row:05d}_s{k}.png``. Output folder::

    OUT/run.json          the judge, the prompt file (sha256, official or not), images per prompt
    OUT/progress.jsonl    one row per image: per question the forms' probabilities, the score, the argmax
                          token and TIFA's verdict (the last row of an image wins)
    OUT/summary.json      ``scoring.summarize`` plus the judge, the prompt set and the protocol label
    OUT/summary.md

``resume`` keeps the images already scored and refuses a folder made by another judge, prompt file or
image count; a fresh run refuses a folder that has progress.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flowrl.benchmarks.progress import PROGRESS, RUN, check_resume, read_rows, read_run, write_summary

from . import scoring
from .data import OFFICIAL_SHA256, describe_source, load_items
from .judge import OFFICIAL_JUDGE

_PINNED = ("model", "version", "backend", "base_url", "dtype", "top_logprobs", "token_ids")


def image_file(images_dir: Path, item: Mapping[str, Any], k: int) -> Path:
    """The image ``k`` of ``item``: ``{key}_{k}.png``, else UniRL's ``p{row:05d}_s{k}.png`` if that exists."""
    ours = images_dir / f"{item['key']}_{k}.png"
    unirl = images_dir / f"p{int(item['index']):05d}_s{k}.png"
    return unirl if not ours.is_file() and unirl.is_file() else ours


def read_progress(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    return read_rows(path, lambda row: (str(row["key"]), int(row["image"])))


def build_judge(options: Mapping[str, Any]) -> Any:
    """A judge from ``score_folder``'s options: ``judge`` (ready), else ``base_url`` + ``model`` (served), else
    ``model`` (local, default the official Qwen3-VL-8B-Instruct)."""
    from .judge import local_judge, served_judge

    if options.get("judge") is not None:
        return options["judge"]
    if options.get("base_url"):
        if not options.get("model"):
            raise ValueError("a served judge needs --judge-model (the served model's name)")
        return served_judge(
            options["base_url"], options["model"], tokenizer=options.get("tokenizer"), api_key=options.get("api_key"),
            top_logprobs=options.get("top_logprobs", 20), token_ids=options.get("token_ids", True),
            timeout=options.get("timeout", 120.0), retries=options.get("retries", 3),
            concurrency=options.get("concurrency", 8), version=options.get("version"),
        )  # fmt: skip
    return local_judge(
        options.get("model") or OFFICIAL_JUDGE, device=options.get("device"), dtype=options.get("dtype", "auto"),
        batch_size=options.get("batch_size") or 1, version=options.get("version"),
    )  # fmt: skip


def protocol_status(run: Mapping[str, Any], summary: Mapping[str, Any]) -> dict[str, Any]:
    """Whether the numbers are the official protocol's: the official judge run locally, the official file,
    one image per prompt, every image scored."""
    judge = run["judge"]
    deviations = []
    if judge.get("model") != OFFICIAL_JUDGE:
        deviations.append(f"judge {judge.get('model')} (official {OFFICIAL_JUDGE})")
    if judge.get("backend") != "transformers":
        deviations.append(f"served judge: forms outside the top {judge.get('top_logprobs')} logprobs count 0")
    elif judge.get("batch_size", 1) != 1:
        deviations.append(
            f"batches of {judge['batch_size']} questions (left padding; the official code asks one at a time)"
        )
    if not run["prompts"].get("official"):
        deviations.append("the prompt file is not the official geneval2_data.jsonl")
    if run.get("limit") is not None:
        deviations.append(f"only the first {run['limit']} prompts")
    if run["images_per_prompt"] != 1:
        deviations.append(f"{run['images_per_prompt']} images per prompt (official 1)")
    if summary["unscored"]["images_total"]:
        deviations.append(f"{summary['unscored']['images_total']} image(s) unscored")
    label = ("official (GenEval 2's questions, judge and Soft-TIFA)" if not deviations
             else "not official (" + "; ".join(deviations) + ")")  # fmt: skip
    return {"official": not deviations, "deviations": deviations, "label": label}


def score_image(judge: Any, item: Mapping[str, Any], image: Any) -> dict[str, Any]:
    """One image's row: every question asked once, its soft score and TIFA verdict."""
    questions = [q for q, _ in item["vqa_list"]]
    forms = [scoring.answer_forms(q, a) for q, a in item["vqa_list"]]
    replies = judge.ask([image] * len(questions), [scoring.judge_text(q) for q in questions], forms)
    scores = [scoring.soft_score(r.probs) for r in replies]
    return {
        "status": "ok",
        "scores": scores,
        "correct": [int(scoring.hard_correct(r.argmax, f)) for r, f in zip(replies, forms)],
        "probs": [r.probs for r in replies],
        "argmax": [r.argmax for r in replies],
        "floor": [r.floor for r in replies] if any(r.floor is not None for r in replies) else None,
        # questions two of whose forms share a first token (summed twice officially; UniRL counts it once)
        "shared_first_tokens": sum(1 for r in replies if r.ids is not None and len(set(r.ids)) < len(r.ids)),
        **scoring.image_scores(scores),
    }


def score_folder(image_dir: str | Path, out_dir: str | Path, judge_options: Mapping[str, Any] | None = None) -> dict:
    """Score every image of the prompt set in ``image_dir``; per-image rows and the summary go to ``out_dir``.

    ``judge_options``: ``prompts`` (the data file or checkout; default ``load_items``' lookup) or ``items``,
    ``images_per_prompt`` (1), ``limit``, ``resume``, ``show_progress``, and the judge: ``judge`` (ready) or
    ``base_url``/``model``/``tokenizer``/``api_key``/``top_logprobs``/``token_ids`` (served) or
    ``model``/``device``/``dtype``/``batch_size`` (local), ``version``; ``sim_even_batches`` (world, batch)
    adds UniRL's padded-wave means. Returns the summary.
    """
    from tqdm.auto import tqdm

    from flowrl.benchmarks.unigenbench.judge import image_array

    opts = dict(judge_options or {})
    images_dir, out = Path(image_dir), Path(out_dir)
    if not images_dir.is_dir():
        raise FileNotFoundError(f"GenEval 2 image folder {images_dir} does not exist")
    n = int(opts.get("images_per_prompt") or 1)
    if n < 1:
        raise ValueError(f"--images-per-prompt: must be at least 1, got {n}")
    items = opts.get("items") or load_items(opts.get("prompts"))
    prompts = opts.get("prompt_set") or (describe_source(opts.get("prompts")) if not opts.get("items") else
                                         {"source": "items", "sha256": None, "official": False})  # fmt: skip
    limit = opts.get("limit")
    items = items[:limit] if limit else items
    judge = build_judge(opts)
    run = {"benchmark": "geneval2", "judge": judge.info, "prompts": prompts, "images_per_prompt": n,
           "limit": limit, "images_dir": str(images_dir.resolve()),
           "sim_even_batches": opts.get("sim_even_batches")}  # fmt: skip
    check_resume(out, run, bool(opts.get("resume")), "GenEval 2", _PINNED, ("images_per_prompt",))
    out.mkdir(parents=True, exist_ok=True)
    (out / RUN).write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
    rows = {key: r for key, r in read_progress(out / PROGRESS).items() if r.get("status") == "ok"}
    todo = [(item, k) for item in items for k in range(n) if (item["key"], k) not in rows]
    with open(out / PROGRESS, "a", encoding="utf-8") as progress:
        for item, k in tqdm(todo, desc="geneval2", disable=not opts.get("show_progress", True) or not todo):
            path = image_file(images_dir, item, k)
            row: dict[str, Any] = {"key": item["key"], "image": k, "file": path.name}
            if not path.is_file():
                row.update(status="missing_image", error=f"{path} does not exist")
            else:
                try:
                    row.update(score_image(judge, item, image_array(path)))
                except OSError as exc:
                    row.update(status="image_error", error=f"{path}: {exc}")
                except Exception as exc:  # noqa: BLE001 - a failed judge call leaves this image unscored
                    row.update(status="request_error", error=str(exc).splitlines()[0] if str(exc) else repr(exc))
            progress.write(json.dumps(row) + "\n")
            progress.flush()
            rows[(item["key"], k)] = row
    return summarize_run(out, items, rows, run)


def summarize_run(out_dir: str | Path, items: list[dict[str, Any]], rows: Mapping | None = None,
                  run: Mapping[str, Any] | None = None, sim_even: tuple[int, int] | None = None) -> dict[str, Any]:  # fmt: skip
    """Aggregate ``out_dir``'s progress (or ``rows``) and write summary.json and summary.md; ``sim_even``
    (or the run's ``sim_even_batches``) adds UniRL's padded-wave means."""
    out = Path(out_dir)
    run = read_run(out, "GenEval 2") if run is None else run
    rows = read_progress(out / PROGRESS) if rows is None else rows
    items = items[: run["limit"]] if run.get("limit") else items
    sim_even = sim_even or run.get("sim_even_batches")
    summary = scoring.summarize(items, rows, run["images_per_prompt"], tuple(sim_even) if sim_even else None)
    summary.update(judge=run["judge"], prompt_set=run["prompts"], limit=run.get("limit"))
    summary["protocol"] = protocol_status(run, summary)
    write_summary(out, summary, scoring.summary_markdown(summary))
    return summary


__all__ = ["OFFICIAL_SHA256", "image_file", "read_progress", "score_folder", "score_image", "summarize_run"]
