"""Judging a UniGenBench image folder, with a progress file to resume from.

Images: ``IMAGES/{index}_{k}.png`` for ``k < images_per_prompt`` (the benchmark's layout). Output folder::

    OUT/run.json          the protocol, the judge (name, version, endpoint, template hash, request format), the
                          prompt source with its version, the official copy's version, attempts, settings
    OUT/progress.jsonl    one line per judged image, appended as results arrive (the last line of an image wins)
    OUT/summary.json      aggregate (``scoring.aggregate``) plus the judge, the prompt set and the protocol
    OUT/summary.md

``template`` picks the protocol: a template string is ``lenient`` (``judge.py``), an
``official.OfficialProtocol`` is ``official`` (the official prompt, parse and scoring rules, 11 attempts by
default; a failed call is asked again within them, as the official ``call_evaluation_vllm`` does; the
prompt CSV is compared with the official copy's CSVs; replies that would have stopped the official run are
marked ``official_crash``). ``resume=True`` keeps the images already final (``ok``, and under the
official rules ``dropped``) and judges the rest again; it refuses a folder made by another protocol, judge, template, prompt file or
image count. A fresh run refuses a folder that already has progress.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import official as off
from .data import PromptSet, TestCase
from .judge import Judge, ParseError, build_judge_prompt, image_array, parse_answer, template_sha256
from .scoring import DROPPED, OK, aggregate, protocol_status, write_summary

logger = logging.getLogger(__name__)

PROGRESS = "progress.jsonl"
RUN = "run.json"
# what must match for a resumed run to continue the same measurement
_PINNED = ("model", "version", "backend", "base_url", "max_tokens", "temperature", "template_sha256", "language",
           "protocol", "request")  # fmt: skip
FINAL = (OK, DROPPED)  # statuses a resumed run keeps
PROTOCOLS = ("official", "lenient")
LENIENT_ATTEMPTS = 3


def image_name(index: int, k: int) -> str:
    return f"{index}_{k}.png"


def read_progress(path: Path) -> dict[tuple[int, int], dict[str, Any]]:
    """The last record of every (index, image) in a progress file; a torn last line is skipped."""
    records: dict[tuple[int, int], dict[str, Any]] = {}
    if not path.is_file():
        return records
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            records[(int(record["index"]), int(record["image"]))] = record
        except (ValueError, KeyError, TypeError):
            logger.warning("%s:%d is not a progress record; skipped", path, lineno)
    return records


def prompt_version(prompts: PromptSet) -> dict[str, Any] | None:
    """The prompt CSV's sha256 and git commit (when it lies in a checkout); None for a dataset."""
    path = Path(prompts.source)
    return off.file_version(path) if path.is_file() else None


def _run_record(
    prompts: PromptSet, judge: Judge, images_dir: Path, images_per_prompt: int, limit: int | None,
    protocol: off.OfficialProtocol | None, attempts: int,
) -> dict:  # fmt: skip
    described = {k: v for k, v in prompts.describe().items() if k != "invalid_rows"}
    described["version"] = prompt_version(prompts)
    if protocol is not None:
        described["official_check"] = off.prompt_check(protocol.root, prompts.sha256, prompts.rows)
    return {
        "benchmark": "unigenbench",
        "protocol": "official" if protocol is not None else "lenient",
        "official": protocol.describe() if protocol is not None else None,
        "attempts": attempts,
        "judge": asdict(judge.info),
        "prompts": described,
        "images_dir": str(images_dir.resolve()),
        "images_per_prompt": images_per_prompt,
        "limit": limit,
    }


def _check_resume(out: Path, run: dict, resume: bool) -> None:
    progress, previous = out / PROGRESS, out / RUN
    if not progress.is_file():
        return
    if not resume:
        raise ValueError(f"{out} already holds judge results ({progress}); pass --resume to continue or a new --out")
    if not previous.is_file():
        raise ValueError(f"{out} has {PROGRESS} but no {RUN}; cannot tell which judge made it")
    old = json.loads(previous.read_text(encoding="utf-8"))
    if old.get("protocol", "lenient") != run["protocol"]:
        raise ValueError(f"cannot resume {out}: it was judged under --protocol {old.get('protocol', 'lenient')}")
    if (old.get("official") or {}).get("sha256") != (run.get("official") or {}).get("sha256"):
        raise ValueError(f"cannot resume {out}: the official template or definitions differ from that run's")
    for key in _PINNED:
        if old["judge"].get(key) != run["judge"].get(key):
            raise ValueError(
                f"cannot resume {out}: judge {key} was {old['judge'].get(key)!r}, now {run['judge'].get(key)!r}"
            )
    if old["prompts"].get("sha256") != run["prompts"].get("sha256"):
        raise ValueError(f"cannot resume {out}: it was judged against another prompt file")
    if old.get("images_per_prompt") != run["images_per_prompt"]:
        raise ValueError(f"cannot resume {out}: images_per_prompt was {old.get('images_per_prompt')}")


def _record(case: TestCase, k: int, status: str, **fields: Any) -> dict[str, Any]:
    base = {
        "index": case.index,
        "image": k,
        "file": image_name(case.index, k),
        "status": status,
        "testpoints": list(case.testpoints),
        "dimensions": list(case.dimensions),
        "scores": None,
        "analysis": None,
        "attempts": 0,
        "error": None,
        "output": None,
    }
    return {**base, **fields}


def _official_requests(tasks: Sequence[tuple[TestCase, int, Any]], judge: Judge, protocol: off.OfficialProtocol):
    from flowrl.reward_models.vlm import ChatRequest

    requests = []
    for case, _, path in tasks:
        text = off.build_prompt(case, protocol)
        if judge.remote:
            requests.append(off.OfficialRequest(str(path), text))
        else:  # a local model sees what the official vLLM server would decode: the JPEG q95 of the file
            import io

            import numpy as np
            from PIL import Image

            with Image.open(io.BytesIO(off.jpeg_q95(path))) as image:
                requests.append(ChatRequest([np.asarray(image.convert("RGB"))], text))
    return requests


def _ask_until_read(tasks, requests, judge: Judge, attempts: int, read, reask_failed: bool = False):
    """Ask ``judge`` for every task, and again for those whose reply ``read`` refuses, up to ``attempts``
    asks in all. ``read(case, k, reply, attempt) -> (record, ask_again)``. A failed call (the client has
    already retried it with backoff) is asked again only with ``reask_failed`` (the official code's rule)."""
    results: list[dict[str, Any] | None] = [None] * len(tasks)
    pending = list(range(len(tasks)))
    for attempt in range(1, attempts + 1):
        replies = judge.complete([requests[i] for i in pending])
        still = []
        for i, reply in zip(pending, replies):
            case, k, _ = tasks[i]
            if isinstance(reply, BaseException):
                reason = str(reply).strip().splitlines()[0] if str(reply).strip() else type(reply).__name__
                results[i] = _record(case, k, "request_error", attempts=attempt, error=reason)
                if reask_failed:
                    still.append(i)
                continue
            results[i], again = read(case, k, reply, attempt)
            if again:
                still.append(i)
        pending = still
        if not pending:
            break
        logger.info("UniGenBench: %d of %d replies unusable after attempt %d", len(pending), len(tasks), attempt)
    return [r for r in results if r is not None]


def judge_official(
    tasks: Sequence[tuple[TestCase, int, Any]], judge: Judge, protocol: off.OfficialProtocol, attempts: int
) -> list[dict[str, Any]]:
    """Judge (case, k, image path) tasks under the official rules: ask again while a reply does not parse
    or a call fails; a record whose replies include one that would have stopped the official run carries
    ``official_crash`` (the first such reason)."""
    crashes: dict[tuple[int, int], str] = {}

    def read(case, k, reply, attempt):
        verdict = off.parse_reply(reply, case.testpoints, getattr(case, "source_prompt", "") or case.prompt)
        if verdict.crash is not None:
            crashes.setdefault((case.index, k), verdict.crash)
        if verdict.status == "retry":
            return _record(case, k, "parse_error", attempts=attempt, error=verdict.reason, output=reply), True
        status = OK if verdict.status == "ok" else DROPPED
        analysis = verdict.analysis if isinstance(verdict.analysis, list) else None
        return _record(
            case, k, status, attempts=attempt, scores=verdict.scores, analysis=analysis, output=reply,
            raw_score=verdict.raw_score, error=verdict.reason,
        ), False  # fmt: skip

    records = _ask_until_read(tasks, _official_requests(tasks, judge, protocol), judge, attempts, read, True)
    for record in records:
        crash = crashes.get((record["index"], record["image"]))
        if crash is not None:
            record["official_crash"] = crash
    return records


def judge_images(
    tasks: Sequence[tuple[TestCase, int, Any]],
    judge: Judge,
    template: str,
    language: str,
    attempts: int,
) -> list[dict[str, Any]]:
    """Judge (case, k, image array) tasks; an unparsable reply is asked again, up to ``attempts`` times in all.

    A failed call is not asked again here: the client has already retried it with backoff.
    """
    from flowrl.reward_models.vlm import ChatRequest

    def read(case, k, reply, attempt):
        try:
            answer = parse_answer(reply, len(case.testpoints))
        except ParseError as exc:
            return _record(case, k, "parse_error", attempts=attempt, error=str(exc), output=reply), True
        return _record(
            case, k, OK, attempts=attempt, scores=answer.scores, analysis=answer.analysis, output=reply
        ), False

    requests = [ChatRequest([image], build_judge_prompt(case, template, language)) for case, _, image in tasks]
    return _ask_until_read(tasks, requests, judge, attempts, read)


def evaluate_folder(
    prompts: PromptSet,
    images_dir: str | Path,
    out_dir: str | Path,
    judge: Judge,
    template: str | off.OfficialProtocol,
    images_per_prompt: int = 4,
    attempts: int | None = None,
    resume: bool = False,
    limit: int | None = None,
    chunk_size: int = 32,
    show_progress: bool = True,
    max_failed_calls: int = 32,
) -> dict[str, Any]:
    """Judge every image of the prompt set, append progress, and write the summary; returns it.

    A failed call leaves its image unscored; ``max_failed_calls`` failures in a row (whole chunks) stop
    the run with a RuntimeError instead, since the endpoint is then down rather than one image odd.
    """
    from tqdm.auto import tqdm

    protocol = template if isinstance(template, off.OfficialProtocol) else None
    if attempts is None:
        attempts = off.OFFICIAL_ATTEMPTS if protocol is not None else LENIENT_ATTEMPTS
    if images_per_prompt < 1 or attempts < 1 or chunk_size < 1:
        raise ValueError("images_per_prompt, attempts and chunk_size must all be at least 1")
    images_dir, out = Path(images_dir), Path(out_dir)
    if not images_dir.is_dir():
        raise FileNotFoundError(f"UniGenBench image folder {images_dir} does not exist")
    cases = prompts.cases[:limit] if limit is not None else prompts.cases
    if protocol is not None:
        if protocol.language != prompts.language:
            raise ValueError(
                f"the official template is for {protocol.language!r}, the prompts are {prompts.language!r}"
            )
        off.check_testpoints(protocol, cases)
        judge.info.template_sha256 = protocol.sha256
        judge.info.protocol, judge.info.temperature = "official", None
        if judge.info.request is None:
            judge.info.request = {"style": judge.info.backend, "order": "image, text",
                                  "image": "JPEG quality 95 (RGB), decoded for the local model"}  # fmt: skip
    else:
        if not isinstance(template, str):
            raise TypeError("template must be a template string (lenient) or an OfficialProtocol (official)")
        if judge.info.protocol == "official":
            raise ValueError("this judge sends official requests; pass the OfficialProtocol, not a lenient template")
        judge.info.template_sha256 = template_sha256(template)
    judge.info.language = prompts.language
    run = _run_record(prompts, judge, images_dir, images_per_prompt, limit, protocol, attempts)
    _check_resume(out, run, resume)
    out.mkdir(parents=True, exist_ok=True)
    (out / RUN).write_text(json.dumps(run, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if judge.info.version is None:
        logger.warning("judge %s has no version pinned (pass --judge-version)", judge.info.model)

    records = {key: r for key, r in read_progress(out / PROGRESS).items() if r.get("status") in FINAL}
    todo = [(case, k) for case in cases for k in range(images_per_prompt) if (case.index, k) not in records]
    logger.info("UniGenBench: %d images to judge (%d already scored)", len(todo), len(records))
    with open(out / PROGRESS, "a", encoding="utf-8") as progress:
        bar = tqdm(total=len(todo), desc="judge", disable=not show_progress or not todo)
        failed_calls = 0
        for start in range(0, len(todo), chunk_size):
            fresh, tasks = [], []
            for case, k in todo[start : start + chunk_size]:
                path = images_dir / image_name(case.index, k)
                if not path.is_file():
                    fresh.append(_record(case, k, "missing_image", error=f"{path} does not exist"))
                    continue
                if protocol is not None:  # encoded from the file, as the official client does
                    tasks.append((case, k, path))
                    continue
                try:
                    tasks.append((case, k, image_array(path)))
                except OSError as exc:
                    fresh.append(_record(case, k, "image_error", error=f"{path}: {exc}"))
            if protocol is not None:
                judged = judge_official(tasks, judge, protocol, attempts)
            else:
                judged = judge_images(tasks, judge, template, prompts.language, attempts)
            failed_calls = failed_calls + len(judged) if all(r["status"] == "request_error" for r in judged) else 0
            fresh += judged
            for record in fresh:
                progress.write(json.dumps(record, ensure_ascii=False) + "\n")
                records[(record["index"], record["image"])] = record
            progress.flush()
            bar.update(len(fresh))
            if failed_calls >= max_failed_calls:
                raise RuntimeError(
                    f"the judge failed {failed_calls} calls in a row (last: {judged[-1]['error']}); progress is in "
                    f"{out / PROGRESS}: fix the endpoint and rerun with --resume"
                )
        bar.close()
    return summarize_run(out, prompts, records, run)


def summarize_run(
    out_dir: str | Path,
    prompts: PromptSet,
    records: dict[tuple[int, int], dict[str, Any]] | None = None,
    run: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Aggregate the progress file of ``out_dir`` (or given records) and write summary.json / summary.md."""
    out = Path(out_dir)
    if run is None:
        if not (out / RUN).is_file():
            raise FileNotFoundError(f"{out / RUN} does not exist; is {out} a UniGenBench results folder?")
        run = json.loads((out / RUN).read_text(encoding="utf-8"))
    if records is None:
        records = read_progress(out / PROGRESS)
    limit = run.get("limit")
    cases = prompts.cases[:limit] if limit is not None else prompts.cases
    summary = aggregate(cases, records, run["images_per_prompt"], prompts.invalid)
    summary["judge"] = run["judge"]
    summary["prompt_set"] = run["prompts"]
    summary["limit"] = limit
    used = [int(r.get("attempts") or 0) for r in records.values()]
    summary["attempts"] = {"budget": run.get("attempts"), "official_budget": off.OFFICIAL_ATTEMPTS,
                           "most_used": max(used, default=0)}  # fmt: skip
    summary["official"] = run.get("official")
    scope = {(case.index, k) for case in cases for k in range(run["images_per_prompt"])}
    crashed = [r for key, r in records.items() if key in scope and r.get("official_crash")]
    summary["official_crashes"] = {"replies": len(crashed), "first": crashed[0]["official_crash"] if crashed else None}
    summary["protocol"] = protocol_status(run, summary)
    summary["written"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    write_summary(summary, out)
    return summary
