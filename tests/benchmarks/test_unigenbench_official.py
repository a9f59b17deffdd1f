"""UniGenBench ``--protocol official``: the template and definitions read from a stand-in checkout in the
official layout (made-up wording, written here), prompts checked character by character, a table of reply
shapes with the verdicts the official rules give, the official request body over a loopback HTTP round trip,
re-asks up to 11, the summary's protocol label, one-line errors, and row counts on a real official copy
when ``$UNIGENBENCH_DIR`` points at one (skipped otherwise)."""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import ClassVar

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
from PIL import Image

from _loopback import ScriptedJudge, serve_scripted
from flowrl.benchmarks.cli import main
from flowrl.benchmarks.unigenbench import load_csv, parse_answer
from flowrl.benchmarks.unigenbench.evaluate import read_progress
from flowrl.benchmarks.unigenbench.official import (
    OfficialDirError,
    build_prompt,
    jpeg_q95,
    load_protocol,
    parse_reply,
)

# ------------------------------------------------------------------------------ a stand-in official copy

DEFS = {  # made-up wording, not the benchmark's
    "Attribute - Color": "hues",
    "Attribute - Quantity": "how many",
    "Style": "how it is painted",
    "Text Generation": "letters",
}
TEMPLATE = (
    "Judge card. Prompt 「{prompt}」; checkpoints {testpoint}.\n"
    "Meanings: {explanation}\n"
    "Where: {test_explanation}\n"
    "Answer like <analysis>[...]</analysis><score>[...]</score>; literal braces {{kept}}.\n"
    "        indented line\n"
)
SHARED_MODULE = f"""\
import pandas as pd  # never imported: the file is parsed, not run

EXPLANATION_DICT_EN = {DEFS!r}

SYSTEM_PROMPT_EN_TEMPLATE = {TEMPLATE!r}

LANG_CONFIGS = {{
    "en": {{
        "explanation_dict": EXPLANATION_DICT_EN,
        "system_prompt_template": SYSTEM_PROMPT_EN_TEMPLATE,
        "prompt_column": "prompt_en",
        "checkpoint_header": "Meaning list",
        "checkpoint_desc_header": "Where list",
    }},
}}


def build_system_prompt(*args):
    raise RuntimeError("never executed")
"""
LEGACY_SCRIPT = f"""\
import pandas as pd


def call_evaluation(args):
    index, prompt, testpoint, test_desc, img_path, api_url = args
    explanation_dict = {DEFS!r}
    explanation = "Meaning list:\\u300c"
    for point in testpoint:
        explanation += f"\\n{{point}}: {{explanation_dict[point]}}"
    explanation += "\\n\\u300d"
    test_explanation = "Where list:\\u300c"
    for idx, point in enumerate(testpoint):
        test_explanation += f"\\n{{point}}: {{test_desc[idx]}}"
    test_explanation += "\\n\\u300d"
    while True:
        system_prompt = f\'\'\'Judge card. Prompt 「{{prompt}}」; checkpoints {{testpoint}}.
Meanings: {{explanation}}
Where: {{test_explanation}}
Answer like <analysis>[...]</analysis><score>[...]</score>; literal braces {{{{kept}}}}.
        indented line
\'\'\'
        return system_prompt
"""


def sub_dims(testpoints, descriptions) -> str:
    return json.dumps({"Primary Categories": "Art", "Testpoints": testpoints, "Testpoint Description": descriptions})


ROWS = [  # index, prompt as written in the CSV, testpoints, descriptions (row 1: a repeat and an empty one)
    (0, "A red cube beside two cats.", ["Attribute - Color", "Attribute - Quantity"], ["red cube", "two cats"]),
    (1, ' Ink {ducks} in "red" ', ["Style", "Attribute - Color", "Style"], ["ink", "", "ink again"]),
]


def write_prompts(path: Path, rows=ROWS, extra=()) -> None:
    buffer = io.StringIO()
    w = csv.writer(buffer, lineterminator="\n")
    w.writerow(["index", "prompt_en", "sub_dims_en"])
    for index, prompt, points, descriptions in rows:
        w.writerow([index, prompt, sub_dims(points, descriptions)])
    for row in extra:
        w.writerow(row)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(buffer.getvalue(), encoding="utf-8")


def git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True, env=env).stdout


@pytest.fixture()
def official(tmp_path) -> Path:
    root = tmp_path / "UniGenBench"
    (root / "eval" / "src").mkdir(parents=True)
    (root / "eval" / "src" / "eval_common.py").write_text(SHARED_MODULE, encoding="utf-8")
    write_prompts(root / "data" / "test_prompts_en.csv")
    if shutil.which("git"):
        git(root, "init", "-q")
        git(root, "add", ".")
        git(root, "commit", "-q", "-m", "stand-in")
    return root


EXPECTED_ROW_1 = (
    "Judge card. Prompt 「 Ink {ducks} in \"red\" 」; checkpoints ['Style', 'Attribute - Color', 'Style'].\n"
    "Meanings: Meaning list:「\nStyle: how it is painted\nAttribute - Color: hues\nStyle: how it is painted\n」\n"
    "Where: Where list:「\nStyle: ink\nAttribute - Color: \nStyle: ink again\n」\n"
    "Answer like <analysis>[...]</analysis><score>[...]</score>; literal braces {kept}.\n"
    "        indented line\n"
)


def test_prompt_from_the_shared_module_equals_the_official_assembly(official):
    protocol = load_protocol(official, "en")
    assert protocol.source == "eval/src/eval_common.py" and protocol.layout == "shared-module"
    assert protocol.definitions == DEFS and protocol.template == TEMPLATE
    cases = load_csv(official / "data" / "test_prompts_en.csv").cases
    assert len(cases) == 2  # the empty description is valid
    built = build_prompt(cases[1], protocol)
    assert built == EXPECTED_ROW_1, "\n".join(
        f"{i}: {a!r} != {b!r}" for i, (a, b) in enumerate(zip(built, EXPECTED_ROW_1)) if a != b
    )
    assert build_prompt(cases[0], protocol).startswith(
        "Judge card. Prompt 「A red cube beside two cats.」; checkpoints ['Attribute - Color', 'Attribute - Quantity']."
    )
    assert len(protocol.version["sha256"]) == 64
    if shutil.which("git"):
        assert protocol.version["git_last_commit"] == git(official, "rev-parse", "HEAD").strip()
        assert protocol.version["git_modified"] is False


def test_prompt_from_the_legacy_script_layout_is_the_same(tmp_path):
    root = tmp_path / "old"
    (root / "eval").mkdir(parents=True)
    (root / "eval" / "qwenvl_72b_en_eval.py").write_text(LEGACY_SCRIPT, encoding="utf-8")
    protocol = load_protocol(root, "en")
    assert protocol.layout == "legacy-script" and protocol.source == "eval/qwenvl_72b_en_eval.py"
    write_prompts(tmp_path / "p.csv")
    assert build_prompt(load_csv(tmp_path / "p.csv").cases[1], protocol) == EXPECTED_ROW_1


def test_bad_official_copies_fail_in_one_line_naming_the_culprit(tmp_path, official):
    (tmp_path / "empty").mkdir()
    cases = [
        (None, "needs --official-dir"),
        (tmp_path / "nowhere", "nowhere does not exist"),
        (tmp_path / "empty", "no judge template for 'en' found"),  # no eval/: the template file is missing
    ]
    for root, why in cases:
        with pytest.raises(OfficialDirError, match=why) as info:
            load_protocol(root, "en")
        assert "\n" not in str(info.value)
    with pytest.raises(OfficialDirError, match="LANG_CONFIGS has no 'zh' entry"):
        load_protocol(official, "zh")
    module = official / "eval" / "src" / "eval_common.py"
    module.write_text(SHARED_MODULE.replace("{test_explanation}", "{test_explanation} {extra}"), encoding="utf-8")
    with pytest.raises(
        OfficialDirError, match=r"eval/src/eval_common.py: the judge template has unknown field \{extra\}"
    ):
        load_protocol(official, "en")
    module.write_text(SHARED_MODULE.replace('"checkpoint_header": "Meaning list",', ""), encoding="utf-8")
    with pytest.raises(OfficialDirError, match="lacks 'checkpoint_header'"):
        load_protocol(official, "en")


# ------------------------------------------------------------------------------ reply shapes, official rules

A = "<analysis>['a', 'b']</analysis>"
SHAPES = [  # reply, verdict, scores (2 testpoints)
    (A + "<score>[1, 0]</score>", "ok", [1, 0]),
    (A + "<score>[1, 1]</score>", "ok", [1, 1]),
    (A + "<score> [0, 1] </score>", "ok", [0, 1]),  # body stripped
    (A + "<score>\n[1,\n 0]\n</score>", "ok", [1, 0]),  # across lines
    ("<score>[1, 0]</score>", "retry", None),  # no <analysis>
    (A + "<Score>[1, 0]</Score>", "retry", None),  # case-sensitive
    ("<ANALYSIS>['a', 'b']</ANALYSIS><score>[1, 0]</score>", "retry", None),
    (A + "<score>[1, 0, 1]</score>", "retry", None),  # 3 scores for 2
    ("<analysis>['a']</analysis><score>[1, 0]</score>", "retry", None),  # 1 analysis for 2
    (A + '<score>["1", "0"]</score>', "ok", [0, 0]),  # strings are not 1
    (A + "<score>[true, false]</score>", "retry", None),  # not a Python literal
    (A + "<score>[True, False]</score>", "dropped", None),  # stored as JSON true/false: unreadable by the scorer
    (A + "<score>[1.0, 0.0]</score>", "ok", [1, 0]),  # 1.0 == 1
    (A + "<score>[0.5, 1]</score>", "ok", [0, 1]),  # 0.5 is a trial, not correct
    (A + "<score>[2, 1]</score>", "ok", [0, 1]),
    (A + "<score>1, 0</score>", "ok", [1, 0]),  # a bare tuple
    (A + "<score>(1, 0)</score>", "ok", [1, 0]),
    (A + "<score>[1 0]</score>", "retry", None),
    (A + "<score>```json\n[1, 0]\n```</score>", "retry", None),  # fences are not stripped
    (A + "<score>'10'</score>", "dropped", None),  # a 2-character string passes the length check
    (A + "<score>{1: 1, 0: 0}</score>", "dropped", None),  # a dict: not a list for the scorer
    (A + "<score>{1, 0}</score>", "dropped", None),  # a set: the official run cannot store it
    (A + "<score>[[1], [0]]</score>", "ok", [0, 0]),
    (A + "<score>1</score>", "retry", None),  # an int has no length
    (A + "<score>[1, None]</score>", "dropped", None),  # null in the stored JSON
    (A + "<score>[1e999, 1]</score>", "dropped", None),  # inf stored as Infinity
    ("<think><analysis>['x', 'y']</analysis><score>[0, 0]</score></think>" + A + "<score>[1, 1]</score>", "ok", [0, 0]),
    (A + "<score>[1, 0]</score> echo <score>[0, 1]</score>", "ok", [1, 0]),  # the first block
    (A + "<score>[1, 0]", "retry", None),  # unclosed
    ("", "retry", None),
    (None, "retry", None),
    ("<analysis>'ab'</analysis><score>[1, 1]</score>", "ok", [1, 1]),  # a 2-character analysis string passes
]


@pytest.mark.parametrize(("reply", "verdict", "scores"), SHAPES)
def test_reply_shapes_under_the_official_rules(reply, verdict, scores):
    got = parse_reply(reply, ["Style", "Attribute - Color"], "p")
    assert (got.status, got.scores) == (verdict, scores), got.reason


def test_the_lenient_parser_disagrees_where_the_issue_says():
    def lenient(reply):
        try:
            return parse_answer(reply, 2).scores
        except ValueError:
            return None

    assert lenient(A + "<Score>[1, 0]</Score>") == [1, 0]  # official: retry
    assert lenient(A + '<score>["1", "0"]</score>') == [1, 0]  # official: [0, 0]
    assert lenient(A + "<score>[1, 0]</score> echo <score>[0, 1]</score>") == [0, 1]  # official: the first
    assert lenient(A + "<score>[0.5, 1]</score>") is None  # official: a trial scored 0


# ------------------------------------------------------------------------------ the official round trip


def size(index: int, k: int) -> tuple[int, int]:
    return 16 + k, 16 + index  # (width, height): survives JPEG, so the server can tell images apart


REPLIES = {
    (0, 0): [A + "<score>[1, 0]</score>"],
    (0, 1): [A + "<Score>[1, 1]</Score>", "no tags", A + "<score>[1, 1]</score>"],  # asked 3 times
    (0, 2): [A + "<score>[true, false]</score>"],  # never parses: 11 asks, then unscored
    (0, 3): [A + "<score>'10'</score>"],  # accepted, dropped by the scorer
    (1, 0): ["<analysis>['x', 'y', 'z']</analysis><score>[1, 1.0, 2]</score>"],
    (1, 1): ["<analysis>['x', 'y', 'z']</analysis><score>(0, 1, '1')</score>"],
    (1, 2): ["<analysis>['x', 'y', 'z']</analysis><score>[1, 1, 1]</score><score>[0, 0, 0]</score>"],
    (1, 3): [500, "<analysis>['x', 'y', 'z']</analysis><score>[0, 0, 1]</score>"],  # a failed call, asked again
}


class OfficialServer(ScriptedJudge):
    calls: ClassVar[dict] = {}
    bodies: ClassVar[list] = []
    replies = REPLIES

    def do_GET(self):
        self._send(200, {"object": "list", "data": [{"id": "QwenVL", "root": "/m/eval", "owned_by": "vllm"}]})

    def key_of(self, body: dict) -> tuple[int, int]:
        image = next(c for c in body["messages"][0]["content"] if c["type"] == "image_url")
        data = base64.b64decode(image["image_url"]["url"].split(",", 1)[1])
        w, h = Image.open(io.BytesIO(data)).size
        return (h - 16, w - 16)


@pytest.fixture()
def server():
    with serve_scripted(OfficialServer) as url:
        yield url


@pytest.fixture()
def images(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    for index, k in REPLIES:
        Image.new("RGB", size(index, k), (90, 120, 200)).save(folder / f"{index}_{k}.png")
    return folder


def judge_argv(official, images, out, url, *extra):
    return ["eval", "unigenbench", "--prompts", "en", "--official-dir", str(official), "--judge", str(images),
            "--out", str(out), "--base-url", url, "--judge-model", "QwenVL", "--judge-version", "v1",
            "--retries", "0", *extra]  # fmt: skip


def test_official_round_trip_counts_requests_and_labels(official, images, server, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(judge_argv(official, images, out, server)) == 0
    printed = capsys.readouterr().out
    assert OfficialServer.calls == {(0, 0): 1, (0, 1): 3, (0, 2): 11, (0, 3): 1, (1, 0): 1, (1, 1): 1, (1, 2): 1,
                                    (1, 3): 2}  # fmt: skip
    body = OfficialServer.bodies[0]
    assert set(body) == {"model", "messages", "do_sample", "max_tokens"}  # no temperature
    assert body["do_sample"] is False and body["max_tokens"] == 4096 and body["model"] == "QwenVL"
    image, _ = body["messages"][0]["content"]
    assert image["image_url"]["url"].startswith("data:image/jpeg;base64,")
    protocol = load_protocol(official, "en")
    cases = {c.index: c for c in load_csv(official / "data" / "test_prompts_en.csv").cases}
    for sent in OfficialServer.bodies:
        picture, words = sent["messages"][0]["content"]
        data = base64.b64decode(picture["image_url"]["url"].split(",", 1)[1])
        index = Image.open(io.BytesIO(data)).size[1] - 16
        k = Image.open(io.BytesIO(data)).size[0] - 16
        assert data == jpeg_q95(images / f"{index}_{k}.png")  # JPEG quality 95 of the file
        assert words["text"] == build_prompt(cases[index], protocol)
    s = json.loads((out / "summary.json").read_text())
    sub = s["sub_dimensions"]
    # prompt 0 (Color, Quantity): [1, 0], [1, 1]; image 2 never parsed, image 3 dropped
    # prompt 1 (Style, Color, Style): [1, 1, 0], [0, 1, 0], [1, 1, 1], and image 3 after its failed call
    # was asked again (eval/src/eval_common.py call_evaluation_vllm: a failed call uses up one of the 11)
    assert (sub["Attribute - Color"]["correct"], sub["Attribute - Color"]["total"]) == (5, 6)
    assert (sub["Attribute - Quantity"]["correct"], sub["Attribute - Quantity"]["total"]) == (1, 2)
    assert (sub["Style"]["correct"], sub["Style"]["total"]) == (4, 8)
    assert s["primary_dimensions"]["Attribute"]["accuracy"] == pytest.approx(6 / 8)
    assert s["unscored"]["images"] == {"dropped": 1, "parse_error": 1}
    assert s["prompt_set"]["official_check"]["official_set"] == "en"
    records = read_progress(out / "progress.jsonl")
    assert records[(0, 2)]["attempts"] == 11 and records[(0, 3)]["raw_score"] == "'10'"
    assert s["protocol"]["official"] is True and s["protocol"]["deviations"] == []
    assert s["attempts"] == {"budget": 11, "official_budget": 11, "most_used": 11}
    assert s["judge"]["temperature"] is None and s["judge"]["request"]["image"] == "JPEG quality 95 (RGB)"
    assert s["prompt_set"]["version"]["sha256"] == s["prompt_set"]["sha256"]
    assert s["official"]["source"] == "eval/src/eval_common.py"
    assert printed.startswith("# UniGenBench (official protocol)")
    assert "Judge: QwenVL (version v1" in printed and "Attempts per image: 11 (official 11)" in printed
    if shutil.which("git"):
        head = git(official, "rev-parse", "HEAD").strip()
        assert s["official"]["version"]["git_last_commit"] == head
        assert f"CSV version: git {head[:10]}" in printed

    # resume keeps ok and dropped images; a lenient resume of an official folder is refused
    assert main([*judge_argv(official, images, out, server), "--resume"]) == 0
    assert OfficialServer.calls[(0, 3)] == 1 and OfficialServer.calls[(0, 2)] == 22
    capsys.readouterr()
    csv_path = official / "data" / "test_prompts_en.csv"
    argv = ["eval", "unigenbench", "--prompts", str(csv_path), "--judge", str(images), "--out", str(out),
            "--base-url", server, "--judge-model", "QwenVL", "--judge-version", "v1", "--protocol", "lenient",
            "--resume"]  # fmt: skip
    assert main(argv) == 2
    assert "judged under --protocol official" in capsys.readouterr().err


def test_deviations_and_lenient_runs_are_never_called_official(official, images, server, tmp_path, capsys):
    assert main([*judge_argv(official, images, tmp_path / "a", server), "--attempts", "2"]) == 0
    s = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert s["protocol"]["official"] is False and s["protocol"]["deviations"] == ["attempts 2 (official 11)"]
    assert "# UniGenBench (official rules, not comparable)" in capsys.readouterr().out

    csv_path = official / "data" / "test_prompts_en.csv"
    argv = ["eval", "unigenbench", "--prompts", str(csv_path), "--judge", str(images), "--out", str(tmp_path / "b"),
            "--base-url", server, "--judge-model", "QwenVL", "--retries", "0", "--protocol", "lenient"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    s = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert s["protocol"]["official"] is False and s["protocol"]["name"] == "lenient"
    assert printed.startswith("# UniGenBench (lenient protocol, not official)")
    assert "NOT UniGenBench's official protocol" in printed and "(official protocol)" not in printed
    assert "temperature" in OfficialServer.bodies[-1]  # the lenient request is flowrl's own


CRASHES = [  # reply (2 testpoints), why the official run would stop (None: it goes on)
    # eval/src/eval_common.py (CodeGoat24/UniGenBench 49d0bce): parse_evaluation_response catches only
    # ValueError / SyntaxError of ast.literal_eval and takes len(analysis), then len(score), unguarded;
    # run_evaluation stores each result with json.dumps in the main process
    (A + "<score>1</score>", "len(score) raises TypeError"),  # the bare score of the one-testpoint rows
    ("<analysis>1</analysis><score>[1, 0]</score>", "len(analysis) raises TypeError"),
    ("<analysis>['a']</analysis><score>1</score>", None),  # the analysis misfits first: asked again
    (A + "<score>{[1]: 0}</score>", "ast.literal_eval raises TypeError"),  # unhashable
    (A + "<score>{1, 0}</score>", "json.dumps of the result raises TypeError"),  # a set cannot be stored
    (A + "<score>[true, false]</score>", None),  # ValueError: asked again
    (A + "<score>[True, False]</score>", None),  # stored, then skipped by calculate_scores
    (A + "<score>[1, 0]</score>", None),
]


@pytest.mark.parametrize(("reply", "crash"), CRASHES)
def test_replies_that_would_stop_the_official_run(reply, crash):
    got = parse_reply(reply, ["Style", "Attribute - Color"], "p")
    assert (got.crash or "").startswith(crash or "") and (got.crash is None) == (crash is None), got.crash


def test_a_reply_that_would_stop_the_official_run_is_not_official(official, images, server, tmp_path, monkeypatch):
    monkeypatch.setitem(REPLIES, (0, 0), [A + "<score>1</score>", A + "<score>[1, 0]</score>"])
    out = tmp_path / "crash"
    assert main(judge_argv(official, images, out, server)) == 0
    record = read_progress(out / "progress.jsonl")[(0, 0)]
    assert record["status"] == "ok" and record["attempts"] == 2  # flowrl asked again
    assert record["official_crash"].startswith("len(score) raises TypeError")
    s = json.loads((out / "summary.json").read_text())
    assert s["protocol"]["official"] is False and s["official_crashes"]["replies"] == 1
    assert s["protocol"]["deviations"][0].startswith("1 image(s) got a reply that would have stopped the official run")


def test_calls_failing_on_every_attempt_are_not_official(official, images, server, tmp_path, monkeypatch):
    monkeypatch.setitem(REPLIES, (1, 3), [500])
    out = tmp_path / "flaky"
    assert main(judge_argv(official, images, out, server)) == 0
    assert OfficialServer.calls[(1, 3)] == 11  # the failed call is asked again on each of the 11 attempts
    s = json.loads((out / "summary.json").read_text())
    assert s["unscored"]["images"]["request_error"] == 1
    assert s["protocol"]["official"] is False
    assert s["protocol"]["deviations"] == ["1 image(s) unscored: their judge calls failed on every attempt"]


def test_official_judges_retry_a_call_as_the_official_client(server):
    from flowrl.benchmarks.unigenbench.judge import openai_judge

    # eval/src/vllm_request.py: VLMessageClient(max_retries=10) tries a call 10 times: 1 + 9 retries
    official = openai_judge(server, "QwenVL", official_style="vllm")
    assert official.info.retries == 9 and official.backend.retries == 9
    assert openai_judge(server, "QwenVL").info.retries == 3  # lenient
    assert openai_judge(server, "QwenVL", retries=0, official_style="vllm").backend.retries == 0


def test_a_subset_csv_is_not_comparable(official, images, server, tmp_path):
    subset = tmp_path / "first_row.csv"
    write_prompts(subset, ROWS[:1])  # an extract of the official file: one of its two rows
    argv = judge_argv(official, images, tmp_path / "sub", server)
    argv[argv.index("en")] = str(subset)
    assert main(argv) == 0
    s = json.loads((tmp_path / "sub" / "summary.json").read_text())
    assert s["protocol"]["official"] is False
    assert s["protocol"]["deviations"] == [
        f"the prompt CSV (1 rows, sha256 {s['prompt_set']['sha256'][:12]}) is not one of the official CSVs "
        "(en (2 rows))"
    ]
    copy = tmp_path / "copy.csv"  # the same bytes elsewhere are the official set
    shutil.copy(official / "data" / "test_prompts_en.csv", copy)
    argv = judge_argv(official, images, tmp_path / "copy", server)
    argv[argv.index("en")] = str(copy)
    assert main(argv) == 0
    s = json.loads((tmp_path / "copy" / "summary.json").read_text())
    assert s["protocol"]["official"] is True and s["prompt_set"]["official_check"]["official_set"] == "en"


def test_gemini_request_style_sends_text_first_and_the_file(official, images, server, tmp_path):
    argv = [*judge_argv(official, images, tmp_path / "g", server), "--request-style", "gemini", "--limit", "1"]
    assert main(argv) == 0
    body = OfficialServer.bodies[0]
    assert set(body) == {"model", "messages", "max_tokens"}
    text, image = body["messages"][0]["content"]
    assert text["type"] == "text" and image["image_url"]["url"].startswith("data:image/png;base64,")
    data = base64.b64decode(image["image_url"]["url"].split(",", 1)[1])
    w, h = Image.open(io.BytesIO(data)).size
    assert data == (images / f"{h - 16}_{w - 16}.png").read_bytes()  # the file's own bytes


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        (["--protocol", "strict"], "--protocol 'strict': choose official"),
        (["--request-style", "grpc"], "--request-style 'grpc'"),
        (["--template", "t.txt"], "--template applies to --protocol lenient"),
        (["--attempts", "0"], "--attempts: must be at least 1"),
    ],
)
def test_bad_options_fail_in_one_line(official, images, tmp_path, capsys, extra, why):
    assert main([*judge_argv(official, images, tmp_path / "o", "http://127.0.0.1:9/v1"), *extra]) == 2
    err = capsys.readouterr().err
    assert why in err and err.count("\n") == 1


def test_missing_official_dir_and_template_fail_in_one_line(tmp_path, images, capsys, monkeypatch):
    monkeypatch.delenv("UNIGENBENCH_DIR", raising=False)
    write_prompts(tmp_path / "p.csv")
    base = ["eval", "unigenbench", "--judge", str(images), "--out", str(tmp_path / "o"), "--base-url",
            "http://127.0.0.1:9/v1", "--judge-model", "QwenVL"]  # fmt: skip
    for extra, why in [
        (["--prompts", str(tmp_path / "p.csv")], "--protocol official needs --official-dir"),
        (["--prompts", "en"], "--prompts en names an official prompt set and needs --official-dir"),
        (["--prompts", str(tmp_path / "p.csv"), "--official-dir", str(tmp_path / "none")], "none does not exist"),
        (["--prompts", str(tmp_path / "p.csv"), "--official-dir", str(tmp_path)], "no judge template for 'en'"),
    ]:
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert why in err and err.count("\n") == 1, err


def test_generate_draws_every_row_the_official_scorer_reads(tmp_path, capsys):
    path = tmp_path / "p.csv"
    broken = '{"Testpoints": ["Style" "Text Generation"], "Testpoint Description": ["a", "b"]}'
    write_prompts(path, extra=[[2, "A castle at dusk.", broken], [0, "Again.", sub_dims(["Style"], ["s"])]])
    out = tmp_path / "images"
    argv = ["eval", "unigenbench", "--prompts", str(path), "--generate", "tiny-cpu", "--out", str(out),
            "--images-per-prompt", "1", "--steps", "1"]  # fmt: skip
    assert main(argv) == 0
    assert "2 invalid prompt rows (1 of them drawn anyway" in capsys.readouterr().out
    # row 1 has an empty description (like en index 383); row 2's JSON is broken (like en_long 509 at head)
    assert sorted(p.name for p in out.glob("*.png")) == ["0_0.png", "1_0.png", "2_0.png"]
    assert json.loads((out / "generation.json").read_text())["prompt_set"]["invalid_rows_drawn"] == [2]


# ------------------------------------------------------------------------------ the real official CSVs

OFFICIAL_DIR = os.environ.get("UNIGENBENCH_DIR")


@pytest.mark.skipif(not OFFICIAL_DIR, reason="set UNIGENBENCH_DIR to a checkout of CodeGoat24/UniGenBench")
@pytest.mark.parametrize("name", ["en", "en_long", "zh", "zh_long"])
def test_row_counts_on_the_official_csvs(name, capsys):
    from flowrl.benchmarks.unigenbench.official import CSV_NAMES

    path = Path(OFFICIAL_DIR) / "data" / CSV_NAMES[name]
    if not path.is_file():
        pytest.skip(f"{path} is not in this copy")
    prompts = load_csv(path)
    with capsys.disabled():
        print(f"\n{name}: {prompts.rows} rows, {len(prompts.cases)} scored")
        for row in prompts.invalid:
            print(f"  line {row.line} (index {row.index}) unscored: {row.reason}")
    assert prompts.rows == 600
    if name == "en_long" and prompts.invalid:  # the head commit's broken JSON in index 509
        assert [r.index for r in prompts.invalid] == ["509"] and "not valid JSON" in prompts.invalid[0].reason
        assert len(prompts.cases) == 599
    else:
        assert len(prompts.cases) == 600 and not prompts.invalid
    if name == "en":
        assert 383 in {c.index for c in prompts.cases}
    protocol = load_protocol(OFFICIAL_DIR, prompts.language)
    for case in prompts.cases:  # every testpoint has an official definition, every prompt assembles
        assert build_prompt(case, protocol)
