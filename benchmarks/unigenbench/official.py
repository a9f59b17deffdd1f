"""UniGenBench's official protocol, read from the user's copy of the official repository (never retyped here).

**Where the text comes from.** ``load_protocol(root, language)`` reads the judge prompt template, the
sub-dimension definitions and the two block headers from the Python source of a checkout of
``CodeGoat24/UniGenBench``, by parsing it with ``ast`` (nothing in it is executed). Two layouts are known:

* the shared module (``eval/src/eval_common.py`` in current checkouts; any ``*.py`` under ``eval/`` is
  searched): a module-level ``LANG_CONFIGS`` dict whose ``"en"`` / ``"zh"`` entry names the definitions dict,
  the template string (``str.format`` fields ``{prompt}``, ``{testpoint}``, ``{explanation}``,
  ``{test_explanation}``) and the headers ``checkpoint_header`` / ``checkpoint_desc_header``;
* the older per-language scripts (``eval/qwenvl_72b_en_eval.py``, ``eval/gemini_zh_eval.py``, ...): inside the
  evaluation function, an ``explanation_dict = {...}`` literal, the two opening strings
  (``explanation = "..."``, ``test_explanation = "..."``) and the template as an f-string ``system_prompt``.

The project ships none of that text: without ``--official-dir`` the official protocol does not run.

**Prompt** (``build_prompt``), as the official code assembles it: ``{testpoint}`` is the row's testpoint list
as Python prints it; ``{explanation}`` is ``HEADER:「`` followed by one ``\\nNAME: DEFINITION`` line per
testpoint of the row, in order and repeats kept, then ``\\n」``; ``{test_explanation}`` likewise with each
testpoint's description (an empty description gives ``NAME: ``). The prompt text is the CSV field unstripped.

**Parsing** (``parse_reply``), the official rules (``parse_evaluation_response`` in
``eval/src/eval_common.py``): the first ``<analysis>...</analysis>`` and the first ``<score>...</score>``
(case-sensitive, across lines), each body stripped and read with ``ast.literal_eval``; both must have as
many elements as the row has testpoints. Anything else asks again, up to ``OFFICIAL_ATTEMPTS`` (11: the
first ask and 10 retries). A reply that passes is then scored as the official scorer does after its CSV
round trip (``json.dumps`` of the result, then ``ast.literal_eval`` of that text): the score must come back
as a list, else ``calculate_scores`` skips the row (its ``except Exception: continue``), i.e. the image
leaves numerator and denominator alike (``status = "dropped"``; e.g. ``[true, false]`` in the reply's own
JSON spelling fails to read, ``"10"`` is a 2-character string, not a list). A test point is correct only if
its value ``== 1``.

**Replies that stop the official run.** Only ``ValueError`` and ``SyntaxError`` of ``ast.literal_eval``
are caught there, and the lengths are taken in the order ``len(analysis)`` then ``len(score)`` unguarded;
the result is stored with ``json.dumps`` in the main process. So a reply whose body raises anything else
(``{[1]: 0}``: TypeError), whose analysis (or, the analysis fitting, whose score) has no length (a bare
``<score>1</score>``), or whose literal JSON cannot store (a set) raises out of the worker pool and ends the
whole official run. flowrl asks again (or drops the unstorable one) and goes on, but marks the verdict
``crash`` with the reason: such a run is not what the official code produces.

**Requests** (``OfficialChat``): the vLLM path sends the image first, as base64 JPEG at quality 95 of the
file converted to RGB, then the text, with the fields ``model``, ``messages``, ``do_sample: false`` and
``max_tokens: 4096`` and no temperature; the Gemini path sends the text first, then the file's own bytes
as a data URL, with ``model``, ``messages`` and ``max_tokens``.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import io
import json
import logging
import mimetypes
import re
import string
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

OFFICIAL_ATTEMPTS = 11  # the official max_retries = 10, tried as range(max_retries + 1)
# the official vLLM client (eval/src/vllm_request.py, VLMessageClient(max_retries=10)) tries a failed call
# 10 times (``while attempt < max_retries``): flowrl's retries after the first try
OFFICIAL_CALL_RETRIES = 9
OFFICIAL_MAX_TOKENS = 4096
OFFICIAL_IMAGES_PER_PROMPT = 4
REQUEST_STYLES = ("vllm", "gemini")
TEMPLATE_FIELDS = ("prompt", "testpoint", "explanation", "test_explanation")
SHARED_MODULE = Path("eval") / "src" / "eval_common.py"
LEGACY_SCRIPTS = {
    "en": ("eval/qwenvl_72b_en_eval.py", "eval/gemini_en_eval.py"),
    "zh": ("eval/qwenvl_72b_zh_eval.py", "eval/gemini_zh_eval.py"),
}
CSV_NAMES = {
    "en": "test_prompts_en.csv",
    "en_long": "test_prompts_en_long.csv",
    "zh": "test_prompts_zh.csv",
    "zh_long": "test_prompts_zh_long.csv",
}
OPEN, CLOSE = "\u300c", "\u300d"  # 「 」 around the definition and description blocks


class OfficialDirError(ValueError):
    """The official copy is missing, or lacks the template / definitions; the message names what and where."""


# ---------------------------------------------------------------------------------------------- versions


def _git(cwd: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=20, check=False
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def sha256_file(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def file_version(path: str | Path) -> dict[str, Any]:
    """A file's sha256 and, inside a git checkout, the repository's HEAD, the file's last commit and whether
    the working copy of the file differs from it."""
    path = Path(path).resolve()
    version: dict[str, Any] = {"path": str(path), "sha256": sha256_file(path)}
    head = _git(path.parent, "rev-parse", "HEAD")
    if head:
        version["git_head"] = head
        version["git_last_commit"] = _git(path.parent, "log", "-1", "--format=%H", "--", path.name) or None
        status = _git(path.parent, "status", "--porcelain", "--", path.name)
        version["git_modified"] = bool(status)
    return version


def version_label(version: dict[str, Any] | None) -> str:
    """``git 1a2b3c4d`` (``+modified`` when the file differs from its commit) or ``sha256 1a2b3c4d5e6f``."""
    if not version:
        return "unknown"
    commit = version.get("git_last_commit") or version.get("git_head")
    if commit:
        return f"git {commit[:10]}" + (" +modified" if version.get("git_modified") else "")
    return f"sha256 {str(version.get('sha256'))[:12]}"


# ---------------------------------------------------------------------------------------------- protocol


@dataclass(frozen=True)
class OfficialProtocol:
    """The official judge prompt of one language, as read from ``source``."""

    root: str
    source: str  # the file it was read from, relative to root
    layout: str  # "shared-module" | "legacy-script"
    language: str
    template: str
    definitions: dict[str, str] = field(hash=False)
    explanation_open: str = ""  # e.g. "HEADER:「" (the text before the first definition line)
    description_open: str = ""
    version: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def sha256(self) -> str:
        """Hash of everything that shapes the prompt (template, definitions, block openings)."""
        blob = json.dumps(
            [self.template, self.definitions, self.explanation_open, self.description_open], ensure_ascii=False
        )  # fmt: skip
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def describe(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "source": self.source,
            "layout": self.layout,
            "language": self.language,
            "sha256": self.sha256,
            "definitions": len(self.definitions),
            "version": self.version,
        }


def _assignments(body: list[ast.stmt]) -> dict[str, ast.expr]:
    out: dict[str, ast.expr] = {}
    for node in body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out.setdefault(node.targets[0].id, node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out.setdefault(node.target.id, node.value)
    return out


def _resolve(node: ast.expr, names: dict[str, ast.expr], depth: int = 0) -> Any:
    """A literal value, following module-level names (``EXPLANATION_DICT_EN``) a few steps."""
    if isinstance(node, ast.Name) and node.id in names and depth < 5:
        return _resolve(names[node.id], names, depth + 1)
    if isinstance(node, ast.Dict):
        return {_resolve(k, names, depth + 1): _resolve(v, names, depth + 1) for k, v in zip(node.keys, node.values)}
    return ast.literal_eval(node)


def _check_definitions(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not value:
        raise OfficialDirError(f"{where}: the sub-dimension definitions are not a non-empty dict")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise OfficialDirError(f"{where}: the sub-dimension definitions must map names to strings")
    return dict(value)


def _check_template(template: Any, where: str) -> str:
    if not isinstance(template, str):
        raise OfficialDirError(f"{where}: the judge template is not a string")
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise OfficialDirError(f"{where}: the judge template is not a format string ({exc})") from None
    missing = [f for f in ("prompt", "testpoint") if f not in fields]
    unknown = sorted(fields - set(TEMPLATE_FIELDS))
    if missing or unknown:
        what = f"lacks {{{missing[0]}}}" if missing else f"has unknown field {{{unknown[0]}}}"
        raise OfficialDirError(f"{where}: the judge template {what}; expected {', '.join(TEMPLATE_FIELDS)}")
    return template


def _from_shared_module(tree: ast.Module, language: str, where: str) -> tuple[str, dict[str, str], str, str] | None:
    names = _assignments(tree.body)
    if "LANG_CONFIGS" not in names:
        return None
    try:
        configs = _resolve(names["LANG_CONFIGS"], names)
    except (ValueError, TypeError, SyntaxError) as exc:
        raise OfficialDirError(f"{where}: LANG_CONFIGS is not a literal ({exc})") from None
    if not isinstance(configs, dict) or language not in configs:
        have = ", ".join(map(repr, configs)) if isinstance(configs, dict) else "nothing"
        raise OfficialDirError(f"{where}: LANG_CONFIGS has no {language!r} entry (it has {have})")
    config = configs[language]
    keys = ("system_prompt_template", "explanation_dict", "checkpoint_header", "checkpoint_desc_header")
    absent = [k for k in keys if not isinstance(config, dict) or k not in config]
    if absent:
        raise OfficialDirError(f"{where}: LANG_CONFIGS[{language!r}] lacks {absent[0]!r}")
    template = _check_template(config["system_prompt_template"], where)
    definitions = _check_definitions(config["explanation_dict"], where)
    headers = (config["checkpoint_header"], config["checkpoint_desc_header"])
    if not all(isinstance(h, str) for h in headers):
        raise OfficialDirError(f"{where}: LANG_CONFIGS[{language!r}] headers are not strings")
    return template, definitions, headers[0] + ":" + OPEN, headers[1] + ":" + OPEN


def _fstring_template(node: ast.JoinedStr, where: str) -> str:
    """An f-string whose fields are the four template names, written back as a ``str.format`` template."""
    parts = []
    for value in node.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            parts.append(value.value.replace("{", "{{").replace("}", "}}"))
        elif (
            isinstance(value, ast.FormattedValue)
            and isinstance(value.value, ast.Name)
            and value.value.id in TEMPLATE_FIELDS
            and value.conversion == -1
            and value.format_spec is None
        ):
            parts.append("{" + value.value.id + "}")
        else:
            raise OfficialDirError(f"{where}: the judge template has a field other than {', '.join(TEMPLATE_FIELDS)}")
    return "".join(parts)


def _from_legacy_script(tree: ast.Module, where: str) -> tuple[str, dict[str, str], str, str] | None:
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        found: dict[str, ast.expr] = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                found.setdefault(node.targets[0].id, node.value)
        wanted = ("explanation_dict", "explanation", "test_explanation", "system_prompt")
        if not all(k in found for k in wanted) or not isinstance(found["system_prompt"], ast.JoinedStr):
            continue
        try:
            definitions = _check_definitions(ast.literal_eval(found["explanation_dict"]), where)
            opens = ast.literal_eval(found["explanation"]), ast.literal_eval(found["test_explanation"])
        except (ValueError, TypeError, SyntaxError) as exc:
            raise OfficialDirError(f"{where}: cannot read the definitions in {fn.name}() ({exc})") from None
        if not all(isinstance(o, str) for o in opens):
            raise OfficialDirError(f"{where}: the block openings in {fn.name}() are not strings")
        template = _check_template(_fstring_template(found["system_prompt"], where), where)
        return template, definitions, opens[0], opens[1]
    return None


def _parse(path: Path, where: str) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        logger.warning("%s is not readable Python (%s); skipped", where, exc)
        return None


def load_protocol(root: str | Path | None, language: str) -> OfficialProtocol:
    """The official prompt of ``language`` ("en" / "zh") from a checkout of the official repository."""
    if root is None or not str(root).strip():
        raise OfficialDirError(
            "--protocol official needs --official-dir (a checkout of github.com/CodeGoat24/UniGenBench, or "
            "$UNIGENBENCH_DIR); use --protocol lenient for flowrl's own template"
        )
    root = Path(root).expanduser()
    if not root.exists():
        raise OfficialDirError(f"--official-dir {root} does not exist")
    if language not in LEGACY_SCRIPTS:
        raise OfficialDirError(f"the official protocol knows languages en and zh, not {language!r}")
    if root.is_file():  # the protocol file itself
        files, base = [root], root.parent
    else:
        base = root
        shared = [root / SHARED_MODULE] if (root / SHARED_MODULE).is_file() else []
        others = sorted(p for p in (root / "eval").rglob("*.py") if p not in shared) if (root / "eval").is_dir() else []
        legacy = [root / p for p in LEGACY_SCRIPTS[language] if (root / p).is_file()]
        files = shared + [p for p in others if p not in legacy] + legacy
        if not files:  # the shared module moved out of eval/
            files = sorted(root.rglob("eval_common.py"))
    for path in files:
        where = str(path.relative_to(base)) if path.is_relative_to(base) else str(path)
        tree = _parse(path, where)
        if tree is None:
            continue
        found = _from_shared_module(tree, language, where)
        layout = "shared-module"
        if found is None and (root.is_file() or str(path.relative_to(base)) in LEGACY_SCRIPTS[language]):
            found, layout = _from_legacy_script(tree, where), "legacy-script"
        if found is None:
            continue
        template, definitions, explanation_open, description_open = found
        version = file_version(path)
        return OfficialProtocol(
            str(root.resolve()), where, layout, language, template, definitions, explanation_open,
            description_open, version,
        )  # fmt: skip
    raise OfficialDirError(
        f"--official-dir {root}: no judge template for {language!r} found (looked for LANG_CONFIGS in "
        f"{SHARED_MODULE} and eval/**/*.py, and {' / '.join(LEGACY_SCRIPTS[language])}); is it a checkout "
        "of CodeGoat24/UniGenBench?"
    )


def official_csv(root: str | Path | None, name: str) -> Path:
    """``data/test_prompts_{name}.csv`` of the official copy, for ``--prompts en|en_long|zh|zh_long``."""
    if root is None:
        raise OfficialDirError(f"--prompts {name} names an official prompt set and needs --official-dir")
    path = Path(root).expanduser() / "data" / CSV_NAMES[name]
    if not path.is_file():
        raise OfficialDirError(f"--prompts {name}: {path} does not exist in --official-dir")
    return path


def official_prompt_files(root: str | Path) -> dict[str, dict[str, Any]]:
    """The official prompt CSVs of the copy at ``root`` (its ``data/`` folder; for a protocol file, the
    nearest ``data/`` above it): ``{set name: {"path", "sha256", "rows"}}`` for those present."""
    root = Path(root).expanduser()
    folders = [root / "data"] if root.is_dir() else [parent / "data" for parent in list(root.parents)[:3]]
    for folder in folders:
        found = {name: folder / csv for name, csv in CSV_NAMES.items() if (folder / csv).is_file()}
        if found:
            return {
                name: {"path": str(path), "sha256": sha256_file(path), "rows": _csv_rows(path)}
                for name, path in found.items()
            }
    return {}


def _csv_rows(path: Path) -> int | None:
    import csv

    try:
        with open(path, encoding="utf-8", newline="") as handle:
            return max(sum(1 for _ in csv.reader(handle)) - 1, 0)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None


def prompt_check(root: str | Path, prompts_sha256: str | None, rows: int) -> dict[str, Any]:
    """Whether the prompt CSV is byte for byte one of the official copy's CSVs: ``{"official_set": name or
    None, "rows", "official": {name: rows}}`` (a subset or an edited CSV has no official set)."""
    files = official_prompt_files(root)
    match = next((name for name, f in files.items() if prompts_sha256 and f["sha256"] == prompts_sha256), None)
    return {"official_set": match, "rows": rows, "official": {name: f["rows"] for name, f in files.items()}}


def check_testpoints(protocol: OfficialProtocol, cases: Any) -> None:
    """Every testpoint of every valid row has an official definition (the official run aborts otherwise)."""
    for case in cases:
        for name in case.testpoints:
            if name not in protocol.definitions:
                raise OfficialDirError(
                    f"prompt index {case.index}: testpoint {name!r} has no definition in "
                    f"{protocol.source} ({protocol.language})"
                )


def build_prompt(case: Any, protocol: OfficialProtocol) -> str:
    """The official judge text for one image of ``case`` (see the module docstring)."""
    names = list(case.testpoints)
    explanation = protocol.explanation_open
    for name in names:
        if name not in protocol.definitions:
            raise OfficialDirError(f"testpoint {name!r} has no definition in {protocol.source}")
        explanation += f"\n{name}: {protocol.definitions[name]}"
    explanation += "\n" + CLOSE
    descriptions = protocol.description_open
    for name, description in zip(names, case.descriptions):
        descriptions += f"\n{name}: {description}"
    descriptions += "\n" + CLOSE
    prompt = getattr(case, "source_prompt", None) or case.prompt
    return protocol.template.format(
        prompt=prompt, testpoint=names, explanation=explanation, test_explanation=descriptions
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------- parsing


@dataclass
class Verdict:
    """``status``: "ok" (scored: ``scores`` one 0/1 per testpoint), "retry" (ask again) or "dropped"
    (accepted by the parser, skipped by the official scorer: unscored)."""

    status: str
    scores: list[int] | None = None
    analysis: Any = None
    raw_score: str | None = None  # repr of the literal read from <score>
    reason: str | None = None
    crash: str | None = None  # why this reply would have stopped the official run (see the module docstring)


_ANALYSIS = re.compile(r"<analysis>(.*?)</analysis>", re.DOTALL)
_SCORE = re.compile(r"<score>(.*?)</score>", re.DOTALL)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:120]}" if text else type(exc).__name__


def parse_reply(text: str | None, testpoints: list[str] | tuple[str, ...], prompt: str = "") -> Verdict:
    """The official verdict on one reply (see the module docstring)."""
    n = len(testpoints)
    if text is None:
        return Verdict("retry", reason="no reply")
    analysis_match, score_match = _ANALYSIS.search(text), _SCORE.search(text)
    if analysis_match is None or score_match is None:
        missing = "<analysis>" if analysis_match is None else "<score>"
        return Verdict("retry", reason=f"no {missing}...{missing.replace('<', '</')} block")
    try:
        analysis = ast.literal_eval(analysis_match.group(1).strip())
        score = ast.literal_eval(score_match.group(1).strip())
    except (ValueError, SyntaxError) as exc:  # the official code asks again on these two only
        return Verdict("retry", reason=f"not a Python literal ({_short(exc)})")
    except Exception as exc:  # noqa: BLE001 - anything else ends the official run
        why = f"ast.literal_eval raises {_short(exc)}"
        return Verdict("retry", reason=f"not a Python literal ({_short(exc)})", crash=why)
    for what, value in (("analysis", analysis), ("score", score)):  # the official order, short-circuited
        try:
            length = len(value)
        except TypeError as exc:
            return Verdict("retry", reason=f"no length ({_short(exc)})", crash=f"len({what}) raises {_short(exc)}")
        if length != n:
            return Verdict("retry", reason=f"{what} has {length} items for {n} testpoints")
    raw = repr(score)
    # the official scorer reads the score back from the JSON text it stored
    record = {"prompt": prompt, "testpoint": list(testpoints), "analysis": analysis, "score": score}
    try:
        stored = json.dumps(record, ensure_ascii=False, indent=4)
    except (TypeError, ValueError) as exc:
        why = f"json.dumps of the result raises {_short(exc)}"
        reason = f"the official run aborts storing it ({_short(exc)})"
        return Verdict("dropped", raw_score=raw, reason=reason, crash=why)
    try:
        back = ast.literal_eval(stored)["score"]
    except Exception as exc:  # noqa: BLE001
        return Verdict("dropped", raw_score=raw, reason=f"the official scorer cannot read it back ({_short(exc)})")
    if not isinstance(back, list):
        return Verdict("dropped", raw_score=raw, reason=f"the official scorer skips a non-list score ({raw[:60]})")
    return Verdict("ok", scores=[int(v == 1) for v in back], analysis=analysis, raw_score=raw)


# ---------------------------------------------------------------------------------------------- requests


@dataclass
class OfficialRequest:
    """One judge call: the image file (encoded as the official client does) and the text."""

    image_path: str
    text: str


def jpeg_q95(path: str | Path) -> bytes:
    """The file converted to RGB and saved as JPEG quality 95, as the official vLLM client sends it."""
    from PIL import Image

    with Image.open(path) as image:
        buffer = io.BytesIO()
        image.convert("RGB").save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


def request_body(request: OfficialRequest, model: str, style: str, max_tokens: int) -> dict[str, Any]:
    """The JSON body of one official call (``style`` "vllm" or "gemini")."""
    if style == "vllm":
        url = "data:image/jpeg;base64," + base64.b64encode(jpeg_q95(request.image_path)).decode()
        content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": request.text}]
        return {
            "model": model,
            "messages": [{"role": "user", "content": content}],
            "do_sample": False,
            "max_tokens": max_tokens,
        }
    if style == "gemini":
        mime = mimetypes.guess_type(request.image_path)[0] or "application/octet-stream"
        data = base64.b64encode(Path(request.image_path).read_bytes()).decode()
        content = [{"type": "text", "text": request.text},
                   {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}]  # fmt: skip
        return {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}
    raise ValueError(f"--request-style {style!r}: choose one of {', '.join(REQUEST_STYLES)}")


class OfficialChat:
    """An OpenAI-compatible ``/chat/completions`` endpoint called with the official request body."""

    def __init__(self, base_url: str, model: str, style: str = "vllm", api_key: str | None = None,
                 timeout: float = 600.0, retries: int = OFFICIAL_CALL_RETRIES, backoff: float = 2.0):  # fmt: skip
        from flowrl.reward_models.remote import check_waits

        if style not in REQUEST_STYLES:
            raise ValueError(f"--request-style {style!r}: choose one of {', '.join(REQUEST_STYLES)}")
        check_waits("judge endpoint", timeout, retries, backoff)
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.style, self.api_key = model, style, api_key
        self.timeout, self.retries, self.backoff = timeout, retries, backoff

    def generate(self, requests: list[OfficialRequest], max_new_tokens: int) -> list[str | None]:
        from flowrl.reward_models.remote import request_json

        out: list[str | None] = []
        for request in requests:
            answer = request_json(
                self.url, request_body(request, self.model, self.style, max_new_tokens), token=self.api_key,
                timeout=self.timeout, retries=self.retries, backoff=self.backoff, what="judge endpoint",
            )  # fmt: skip
            if not isinstance(answer, dict) or not answer.get("choices"):
                raise RuntimeError(f"judge endpoint {self.url}: the answer has no choices")
            content = (answer["choices"][0].get("message") or {}).get("content")
            out.append(content if isinstance(content, str) else None)
        return out


def request_description(style: str, max_tokens: int) -> dict[str, Any]:
    """What the run records about its requests (pinned on resume)."""
    if style == "vllm":
        return {"style": "vllm", "order": "image, text", "image": "JPEG quality 95 (RGB)",
                "fields": ["model", "messages", "do_sample=false", f"max_tokens={max_tokens}"]}  # fmt: skip
    return {"style": "gemini", "order": "text, image", "image": "the file's own bytes",
            "fields": ["model", "messages", f"max_tokens={max_tokens}"]}  # fmt: skip
