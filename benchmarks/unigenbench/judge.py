"""The UniGenBench judge: one request per image, the reply parsed into one 0/1 per testpoint.

This module is ``--protocol lenient``: flowrl's own template and a forgiving parser, for judges that need
it; its numbers are not comparable with the leaderboards. ``--protocol official`` (``official.py``) reads
the benchmark's own template and definitions from a checkout of its repository and applies its parse,
scoring, re-ask and request rules; the back ends below serve both.

**Request.** The image, then a text built from a template with four fields: ``{prompt}``,
``{checkpoints}`` (the testpoint names as a Python list, as the benchmark shows them), ``{definitions}``
(one line per distinct testpoint: what it checks) and ``{descriptions}`` (one line per testpoint: where it
shows in this prompt). The built-in English and Chinese templates are flowrl's own wording of the
benchmark's protocol: analyse each checkpoint from what is visible, score it 1 or 0, and answer as

    <description><prompt>..</prompt><checkpoint>..</checkpoint>
    <analysis>[one string per checkpoint]</analysis><score>[one 0/1 per checkpoint]</score></description>

The official evaluation model was fine-tuned on the benchmark's own prompt; for parity pass that text
with ``--template FILE`` (the same four fields in braces). Fields are filled by plain replacement, so a
template may hold other braces.

**Parsing** (``parse_answer``): ``<think>..</think>`` is dropped; the last ``<score>`` block whose body
reads as a list of exactly ``n`` values each 0 or 1 (``[1, 0]``, ``["1", "0"]``, ``1, 0``, ``[true,
false]``, inside code fences or not) wins. Anything else is a parse failure, retried and finally
reported as unscored; a value such as 0.5 is a failure, not a 0. ``<analysis>`` is kept when it parses
to ``n`` strings and is not required (the official script re-asks until it is).

**Back ends.** ``OpenAIChat`` (vLLM or SGLang serving the evaluation model, or a hosted API; each request
on its own with timeout and retries, so one failed call fails one image) and ``TransformersChat`` (a
local Qwen-VL class model through ``AutoModelForImageTextToText``), both from
``flowrl.reward_models.vlm``; lenient requests are PNG at temperature 0. With ``official_style`` the
endpoint is called through ``official.OfficialChat`` instead (JPEG q95, the official fields, no
temperature).
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .data import TestCase
from .dimensions import DEFINITIONS_EN, DEFINITIONS_ZH

logger = logging.getLogger(__name__)

TEMPLATE_EN = """You are a careful and impartial judge of text-to-image results. You receive an image made from a \
text prompt and a list of checkpoints taken from that prompt. For every checkpoint, decide whether the image \
satisfies it.

Prompt: 「{prompt}」
Checkpoints: {checkpoints}

What each kind of checkpoint examines:
{definitions}

How each checkpoint appears in this prompt:
{descriptions}

Work in two steps.
1. Go through the checkpoints in order and, for each, describe what the image shows that bears on it.
2. Score each checkpoint 1 if the image meets it and 0 if it does not.

Base every judgement on what can be seen in the image. Do not invent a backstory or guess at hidden intent; \
leave out details you cannot make out, and do not describe abstract ideas or emotions beyond what is visible.

Reply in exactly this format, the two lists holding one element per checkpoint in the given order:
<description>
<prompt>{prompt}</prompt>
<checkpoint>{checkpoints}</checkpoint>
<analysis>["analysis of the first checkpoint", "analysis of the second checkpoint", ...]</analysis>
<score>[1 or 0 for the first checkpoint, 1 or 0 for the second checkpoint, ...]</score>
</description>"""

TEMPLATE_ZH = """你是一名严谨、公正的文生图结果评审。你会看到一张根据文本提示词生成的图像，以及从该提示词中提取的一组考点。\
请逐个判断图像是否满足每个考点。

提示词：「{prompt}」
考点：{checkpoints}

各类考点考察的内容：
{definitions}

各考点在本提示词中对应的描述：
{descriptions}

请分两步完成：
1. 按顺序逐个考点，说明图像中与该考点相关的可见内容。
2. 图像满足该考点记 1 分，不满足记 0 分。

所有判断只依据图像中能看到的内容；不要编造背景故事或猜测意图，看不清的细节不要描述，也不要描述画面之外的抽象概念或情绪。

请严格按以下格式回答，两个列表都按给定顺序、每个考点对应一个元素：
<description>
<prompt>{prompt}</prompt>
<checkpoint>{checkpoints}</checkpoint>
<analysis>["第一个考点的分析", "第二个考点的分析", ...]</analysis>
<score>[第一个考点的 1 或 0, 第二个考点的 1 或 0, ...]</score>
</description>"""

TEMPLATES = {"en": TEMPLATE_EN, "zh": TEMPLATE_ZH}
FIELDS = ("{prompt}", "{checkpoints}", "{definitions}", "{descriptions}")


def load_template(path: str | Path | None, language: str) -> str:
    """The built-in template of ``language``, or a file that uses the same four fields."""
    if path is None:
        return TEMPLATES[language]
    text = Path(path).read_text(encoding="utf-8")
    missing = [f for f in ("{prompt}", "{checkpoints}") if f not in text]
    if missing:
        raise ValueError(f"judge template {path} lacks {', '.join(missing)}; fields: {', '.join(FIELDS)}")
    return text


def template_sha256(template: str) -> str:
    return hashlib.sha256(template.encode("utf-8")).hexdigest()


def build_judge_prompt(case: TestCase, template: str, language: str) -> str:
    """The judge's text for one image of ``case`` (see the module docstring for the fields)."""
    definitions = DEFINITIONS_ZH if language == "zh" else DEFINITIONS_EN
    distinct = list(dict.fromkeys(zip(case.testpoints, case.dimensions)))
    values = {
        "{prompt}": case.prompt,
        "{checkpoints}": repr(list(case.testpoints)),
        "{definitions}": "\n".join(f"{name}: {definitions[dim]}" for name, dim in distinct),
        "{descriptions}": "\n".join(f"{n}: {d}" for n, d in zip(case.testpoints, case.descriptions)),
    }
    # one pass over the template, so that a prompt containing "{checkpoints}" is not expanded again
    pattern = re.compile("|".join(re.escape(k) for k in values))
    return pattern.sub(lambda m: values[m.group(0)], template)


# ---------------------------------------------------------------------------------------------- parsing


class ParseError(ValueError):
    """The judge's reply holds no usable score list; the message says why."""


@dataclass
class Answer:
    scores: list[int]
    analysis: list[str] | None


_THINK = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_SCORE = re.compile(r"<score>(.*?)</score>", re.IGNORECASE | re.DOTALL)
_ANALYSIS = re.compile(r"<analysis>(.*?)</analysis>", re.IGNORECASE | re.DOTALL)
_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
_BINARY = {"0": 0, "1": 1, "0.0": 0, "1.0": 1, "true": 1, "false": 0}


def _literal(body: str) -> Any:
    body = _FENCE.sub("", body.strip()).strip()
    for reader in (json.loads, ast.literal_eval):
        try:
            return reader(body)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return None


def _scores(body: str, n: int) -> list[int]:
    value = _literal(body)
    if isinstance(value, (list, tuple)):
        items = list(value)
    elif isinstance(value, (int, float)) and n == 1:
        items = [value]
    else:  # bare "1, 0" or "[1 0]" style: tokens between brackets, commas and quotes
        items = re.findall(r"[^\s,\[\]()'\"]+", _FENCE.sub("", body.strip()))
    if len(items) != n:
        raise ParseError(f"<score> holds {len(items)} values for {n} checkpoints")
    out = []
    for item in items:
        key = str(item).strip().lower()
        if isinstance(item, bool):
            key = "true" if item else "false"
        if key not in _BINARY:
            raise ParseError(f"score value {item!r} is not 0 or 1")
        out.append(_BINARY[key])
    return out


def parse_answer(text: str | None, n: int) -> Answer:
    """One 0/1 per checkpoint from the judge's reply, or ``ParseError`` (see the module docstring)."""
    if not text or not text.strip():
        raise ParseError("empty reply")
    text = _THINK.sub("", text)
    blocks = _SCORE.findall(text)
    if not blocks:
        raise ParseError("no <score>...</score> block")
    error: ParseError | None = None
    for body in reversed(blocks):
        try:
            scores = _scores(body, n)
            break
        except ParseError as exc:
            error = error or exc
    else:
        raise error  # type: ignore[misc]
    analysis = None
    found = _ANALYSIS.findall(text)
    if found:
        value = _literal(found[-1])
        if isinstance(value, list) and len(value) == n and all(isinstance(v, str) for v in value):
            analysis = value
    return Answer(scores, analysis)


# ---------------------------------------------------------------------------------------------- back ends


@dataclass
class JudgeInfo:
    """Who judged: recorded in the results so that numbers from different judges are never mixed."""

    model: str
    version: str | None
    backend: str  # "openai" | "transformers"
    base_url: str | None = None
    served: dict[str, Any] | None = None  # the endpoint's /models entry for ``model``
    max_tokens: int = 4096
    temperature: float | None = 0.0  # None: the request sends no temperature (official)
    template_sha256: str | None = None
    language: str = "en"
    protocol: str = "lenient"  # "lenient" | "official"
    request: dict[str, Any] | None = None  # how requests are built (official.request_description)
    retries: int | None = None  # retries of a failed call after its first try (remote judges)
    extra: dict[str, Any] = field(default_factory=dict)


class Judge:
    """Sends chat requests through a ``ChatBackend``; a failed request yields its exception, not a crash."""

    def __init__(self, backend: Any, info: JudgeInfo, concurrency: int = 8):
        self.backend, self.info = backend, info
        self.concurrency = max(1, concurrency)
        self.remote = info.backend == "openai"

    def _one(self, request: Any) -> str | BaseException:
        try:
            return self.backend.generate([request], self.info.max_tokens)[0]
        except Exception as exc:  # noqa: BLE001 - every failure is recorded per image
            return exc

    def complete(self, requests: list[Any]) -> list[str | BaseException]:
        """One reply (or the exception that stopped it) per request, in order."""
        if not requests:
            return []
        if self.remote:
            if self.concurrency == 1 or len(requests) == 1:
                return [self._one(r) for r in requests]
            with ThreadPoolExecutor(max_workers=min(self.concurrency, len(requests))) as pool:
                return list(pool.map(self._one, requests))
        try:  # a local model batches; on failure retry one by one to find the culprit
            return list(self.backend.generate(requests, self.info.max_tokens))
        except Exception:  # noqa: BLE001
            logger.warning("local judge batch failed; retrying its %d requests one by one", len(requests))
            return [self._one(r) for r in requests]


def _served_models(base_url: str, api_key: str | None, timeout: float) -> list[dict[str, Any]]:
    from flowrl.reward_models.remote import request_json

    try:
        answer = request_json(
            base_url.rstrip("/") + "/models", None, token=api_key, timeout=timeout, retries=1, backoff=0.5,
            what="judge endpoint",
        )  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the listing is informative only
        logger.warning("could not list the judge endpoint's models (%s)", str(exc).splitlines()[0])
        return []
    data = answer.get("data") if isinstance(answer, dict) else None
    return [m for m in data or [] if isinstance(m, dict)]


def openai_judge(
    base_url: str,
    model: str,
    version: str | None = None,
    api_key: str | None = None,
    max_tokens: int = 4096,
    timeout: float = 600.0,
    retries: int | None = None,
    backoff: float = 2.0,
    concurrency: int = 8,
    official_style: str | None = None,
) -> Judge:
    """A judge behind an OpenAI-compatible endpoint; the endpoint's model listing is recorded when it has one.

    ``official_style`` ("vllm" / "gemini"): requests as the official client builds them (``official.py``).
    ``retries`` of a failed call after its first try: by default 9 with ``official_style`` (the official
    vLLM client's 10 tries a call), else 3.
    """
    import os

    from flowrl.reward_models.vlm import OpenAIChat

    from .official import OFFICIAL_CALL_RETRIES, OfficialChat, request_description

    if retries is None:
        retries = OFFICIAL_CALL_RETRIES if official_style is not None else 3
    api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
    if official_style is not None:
        chat: Any = OfficialChat(base_url, model, official_style, api_key, timeout=timeout, retries=retries,
                                 backoff=backoff)  # fmt: skip
    else:
        chat = OpenAIChat(base_url, model, api_key, timeout=timeout, retries=retries, backoff=backoff, concurrency=1)
    listing = _served_models(base_url, api_key, min(timeout, 30.0))
    served = next((m for m in listing if m.get("id") == model), None)
    if listing and served is None:
        names = ", ".join(str(m.get("id")) for m in listing)
        raise ValueError(f"--judge-model {model!r} is not served at {base_url} (it serves: {names})")
    keep = ("id", "root", "owned_by", "max_model_len")  # not "created": vLLM stamps it per request
    info = JudgeInfo(
        model=model,
        version=version,
        backend="openai",
        base_url=base_url,
        served={k: served[k] for k in keep if k in served} if served else None,
        max_tokens=max_tokens,
        retries=retries,
    )
    if official_style is not None:
        info.temperature, info.protocol = None, "official"
        info.request = request_description(official_style, max_tokens)
    return Judge(chat, info, concurrency)


def transformers_judge(
    model: str,
    version: str | None = None,
    max_tokens: int = 4096,
    device: str | None = None,
    dtype: str = "bf16",
    batch_size: int = 4,
    chat: Any = None,
) -> Judge:
    """A local image-text-to-text model (Qwen2.5-VL / Qwen3-VL class), or a ready ``TransformersChat``."""
    import torch

    from flowrl.reward_models.vlm import TransformersChat

    dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    if dtype not in dtypes:
        raise ValueError(f"--judge-dtype {dtype!r}: choose one of {', '.join(dtypes)}")
    if chat is None:
        chat = TransformersChat.from_pretrained(model, device, dtypes[dtype], batch_size, reward="unigenbench judge")
    commit = getattr(getattr(chat.model, "config", None), "_commit_hash", None)
    info = JudgeInfo(
        model=model,
        version=version or commit,
        backend="transformers",
        max_tokens=max_tokens,
        extra={"dtype": dtype, "device": str(chat.device), "hub_commit": commit},
    )
    return Judge(chat, info)


def image_array(path: str | Path) -> np.ndarray:
    """An image file as uint8 (H, W, 3), EXIF orientation applied."""
    from PIL import Image, ImageOps

    with Image.open(path) as image:
        return np.asarray(ImageOps.exif_transpose(image).convert("RGB"))
