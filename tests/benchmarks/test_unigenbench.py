"""UniGenBench: strict prompt loading, judge prompt, reply parsing, aggregation with unscored counts, judging
through a real HTTP round trip to a fake OpenAI-compatible server on loopback, resume, and a tiny random
Qwen2.5-VL as the local judge. Totals are worked out by hand in the comments."""

from __future__ import annotations

import base64
import csv
import io
import json
import os
from http.server import ThreadingHTTPServer
from typing import ClassVar

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
from PIL import Image

from _loopback import ScriptedJudge, serve_scripted
from flowrl.benchmarks.cli import main
from flowrl.benchmarks.unigenbench import (
    DIMENSIONS,
    PRIMARY,
    SUB_DIMENSIONS,
    ParseError,
    aggregate,
    build_judge_prompt,
    canonical_name,
    load_csv,
    load_prompts,
    parse_answer,
    primary_of,
)
from flowrl.benchmarks.unigenbench.evaluate import evaluate_folder, read_progress
from flowrl.benchmarks.unigenbench.judge import TEMPLATE_EN, TEMPLATE_ZH, load_template, openai_judge

# ---------------------------------------------------------------------------------------------- the CSV


def sub_dims(testpoints, descriptions, **extra) -> str:
    return json.dumps(
        {"Primary Categories": "Art", "Subjects": "Animal", "Testpoints": testpoints,
         "Testpoint Description": descriptions, **extra}
    )  # fmt: skip


VALID = [  # index, prompt, testpoints, descriptions
    (0, "A red cube beside two cats.", ["Attribute - Color", "Attribute - Quantity"], ["red cube", "two cats"]),
    (1, 'A watercolor poster that says "OPEN" in red.', ["Text Generation", "Style", "Attribute - Color"],
     ['"OPEN"', "watercolor", "in red"]),
    (5, "A fox leaping over a log, ukiyo-e style.", ["Action - Animal", "Style"], ["fox leaping", "ukiyo-e style"]),
]  # fmt: skip
# Like test_prompts_en_long.csv index 509: a comma missing between two testpoint names.
BROKEN_JSON = '{"Testpoints": ["Style" "World Knowledge"], "Testpoint Description": ["a", "b"]}'


def write_csv(path) -> None:
    buffer = io.StringIO()
    w = csv.writer(buffer, lineterminator="\n")
    w.writerow(["index", "prompt_en", "sub_dims_en"])
    w.writerow([0, VALID[0][1], sub_dims(VALID[0][2], VALID[0][3])])  # line 2
    w.writerow([1, VALID[1][1], sub_dims(VALID[1][2], VALID[1][3])])  # line 3
    w.writerow([2, "A castle.", BROKEN_JSON])  # line 4: invalid JSON
    w.writerow([3, "A rose.", sub_dims(["Attribute - Colour"], ["red"])])  # line 5: unknown testpoint
    w.writerow([4, "A dog.", sub_dims(["Style"], ["a", "b"])])  # line 6: lengths differ
    w.writerow([0, "Again.", sub_dims(["Style"], ["s"])])  # line 7: repeated index
    w.writerow([5, VALID[2][1], sub_dims(VALID[2][2], VALID[2][3])])  # line 8
    w.writerow(["x", "A cat.", sub_dims(["Style"], ["s"])])  # line 9: bad index
    path.write_text(buffer.getvalue(), encoding="utf-8")


@pytest.fixture()
def prompt_csv(tmp_path):
    path = tmp_path / "test_prompts_en.csv"
    write_csv(path)
    return path


def test_load_csv_keeps_valid_rows_and_reports_each_bad_one(prompt_csv):
    prompts = load_csv(prompt_csv)
    assert prompts.language == "en" and prompts.rows == 8
    assert [c.index for c in prompts.cases] == [0, 1, 5]
    assert prompts.cases[0].dimensions == ("Attribute - Color", "Attribute - Quantity")
    assert prompts.cases[0].meta == {"primary_category": "Art", "subject": "Animal"}
    bad = {row.line: (row.index, row.reason) for row in prompts.invalid}
    assert set(bad) == {4, 5, 6, 7, 9}
    assert bad[4][0] == "2" and "not valid JSON" in bad[4][1]
    assert "unknown testpoint 'Attribute - Colour'" in bad[5][1] and "'Attribute - Color'" in bad[5][1]
    assert "1 testpoints but 2" in bad[6][1]
    assert "repeats line 2" in bad[7][1]
    assert "not a non-negative integer" in bad[9][1]
    assert len(prompts.sha256) == 64


def test_chinese_rows_map_to_the_english_dimensions(tmp_path):
    path = tmp_path / "zh.csv"
    row = {
        "一级垂类": "艺术",
        "考点": ["属性-数量", "风格", "动作-人物/拟人手部动作"],
        "考点对应描述": ["两只", "水墨", "扶起"],
    }
    with open(path, "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["index", "prompt_zh", "sub_dims_zh"], [7, "两只熊猫，水墨画风格。", json.dumps(row)]])
    case = load_csv(path).cases[0]
    assert case.dimensions == ("Attribute - Quantity", "Style", "Action - Hand (Character/Anthropomorphic)")
    assert case.meta == {"primary_category": "艺术"}
    text = build_judge_prompt(case, TEMPLATE_ZH, "zh")
    assert (
        "两只熊猫" in text and "['属性-数量', '风格', '动作-人物/拟人手部动作']" in text and "属性-数量: 两只" in text
    )


def test_wrong_columns_and_dataset_names_fail_in_one_line(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("id,text\n1,a\n")
    with pytest.raises(ValueError, match="expected index, prompt_en, sub_dims_en"):
        load_csv(path)
    with pytest.raises(FileNotFoundError):
        load_prompts(tmp_path / "missing.csv")
    with pytest.raises(RuntimeError) as info:  # datasets missing, or present but the hub is offline
        load_prompts("hf:CodeGoat24/UniGenBench")
    assert "\n" not in str(info.value) and ("pip install datasets" in str(info.value) or "offline" in str(info.value))


def test_dimension_names():
    assert len(SUB_DIMENSIONS) == 27 and len(PRIMARY) == 10
    assert all(primary_of(name) == primary for primary, subs in DIMENSIONS.items() for name in subs)
    assert primary_of("Entity Layout - Two-Dimensional Space") == "Entity Layout"  # text before the first "-"
    assert canonical_name("attribute-color") == "Attribute - Color" and canonical_name("实体布局-三维空间") == (
        "Entity Layout - Three-Dimensional Space"
    )
    assert canonical_name("Attribute - Smell") is None


# ------------------------------------------------------------------------------------------ judge prompt


def test_judge_prompt_holds_prompt_checkpoints_definitions_and_descriptions(prompt_csv, tmp_path):
    case = load_csv(prompt_csv).cases[1]
    text = build_judge_prompt(case, TEMPLATE_EN, "en")
    assert '「A watercolor poster that says "OPEN" in red.」' in text
    assert "['Text Generation', 'Style', 'Attribute - Color']" in text
    assert "Style: the requested art" in text and 'Text Generation: "OPEN"' in text
    assert text.count("{") == 0 and "<score>" in text
    custom = tmp_path / "template.txt"
    custom.write_text('Judge {prompt} on {checkpoints}; reply {"score": [...]} {descriptions}')
    built = build_judge_prompt(case, load_template(custom, "en"), "en")
    assert built.startswith("Judge A watercolor poster") and '{"score": [...]}' in built and "in red" in built
    custom.write_text("no fields")
    with pytest.raises(ValueError, match="lacks"):
        load_template(custom, "en")


@pytest.mark.parametrize(
    ("text", "scores"),
    [
        ("<description><analysis>['ok', 'no']</analysis><score>[1, 0]</score></description>", [1, 0]),
        ('<score>["1", "0"]</score>', [1, 0]),
        ("<score>\n```json\n[true, false]\n```\n</score>", [1, 0]),
        ("<score>1, 1</score>", [1, 1]),
        ("<score>[1 0]</score>", [1, 0]),
        ("<think>draft <score>[0, 0]</score></think> final <score>[1.0, 0]</score>", [1, 0]),
        ("<score>[0, 1]</score> (format echo: <score>[1 or 0, ...]</score>)", [0, 1]),  # last parsable block
    ],
)
def test_parse_answer(text, scores):
    assert parse_answer(text, 2).scores == scores


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        ("The image is fine.", "no <score>"),
        ("<score>[1, 0, 1]</score>", "3 values for 2"),
        ("<score>[1, 0.5]</score>", "not 0 or 1"),
        ("<score>[yes, no]</score>", "not 0 or 1"),
    ],
)
def test_parse_answer_failures(text, why):
    with pytest.raises(ParseError, match=why):
        parse_answer(text, 2)


def test_analysis_is_kept_only_when_it_fits():
    assert parse_answer("<analysis>['a', 'b']</analysis><score>[1, 1]</score>", 2).analysis == ["a", "b"]
    assert parse_answer("<analysis>['a']</analysis><score>[1, 1]</score>", 2).analysis is None


# --------------------------------------------------------------------------------- the fake judge server


def pixel(index: int, k: int) -> int:
    return 10 * index + k  # image k of prompt `index` is a flat grey of this value: the server reads it back


REPLIES = {  # (index, image) -> replies in order of the calls (the last repeats); 500 = HTTP error
    (0, 0): ["<analysis>['red', 'one cat']</analysis><score>[1, 0]</score>"],
    (0, 1): ["I cannot help with that.", "<score>[1, 1]</score>"],  # unparsable, then fine
    (1, 0): [500],  # the endpoint fails this call every time
    (1, 1): ["<score>[1, 0]</score>"],  # 2 scores for 3 testpoints, every time
    (5, 0): ['<think>maybe <score>[0]</score></think><score>["1", "0"]</score>'],
}


class FakeJudge(ScriptedJudge):
    calls: ClassVar[dict] = {}
    bodies: ClassVar[list] = []
    replies = REPLIES

    def do_GET(self):
        assert self.path == "/v1/models"
        self._send(200, {"object": "list", "data": [{"id": "judge-x", "root": "/models/eval-72b", "owned_by": "vllm"}]})

    def key_of(self, body: dict) -> tuple[int, int]:
        image, _ = body["messages"][0]["content"]  # image first, then the text
        png = base64.b64decode(image["image_url"]["url"].split(",", 1)[1])
        value = int(np.asarray(Image.open(io.BytesIO(png)))[0, 0, 0])
        return (value // 10, value % 10)


@pytest.fixture()
def judge_url():
    with serve_scripted(FakeJudge) as url:
        yield url


@pytest.fixture()
def images(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    for index, k in REPLIES:  # (5, 1) is left out: a missing image
        Image.new("RGB", (16, 16), (pixel(index, k),) * 3).save(folder / f"{index}_{k}.png")
    return folder


def check_documented_totals(s: dict) -> None:
    sub, primary = s["sub_dimensions"], s["primary_dimensions"]
    # prompt 0 (Color, Quantity): image 0 -> [1, 0]; image 1 -> [1, 1] on the second ask
    # prompt 1 (Text Generation, Style, Color): image 0 failed call, image 1 wrong length: 3 + 3 unscored
    # prompt 5 (Action - Animal, Style): image 0 -> [1, 0]; image 1 missing: 2 unscored
    assert (sub["Attribute - Color"]["correct"], sub["Attribute - Color"]["total"]) == (2, 2)
    assert sub["Attribute - Color"]["unscored"] == 2
    assert (sub["Attribute - Quantity"]["correct"], sub["Attribute - Quantity"]["total"]) == (1, 2)
    assert sub["Text Generation"] == {"correct": 0, "total": 0, "unscored": 2, "accuracy": None}
    assert (sub["Style"]["correct"], sub["Style"]["total"], sub["Style"]["unscored"]) == (0, 1, 3)
    assert (sub["Action - Animal"]["correct"], sub["Action - Animal"]["total"]) == (1, 1)
    assert primary["Attribute"] == {"correct": 3, "total": 4, "unscored": 2, "accuracy": 0.75}
    assert primary["Action"]["accuracy"] == 1.0 and primary["Style"]["accuracy"] == 0.0
    assert primary["Text Generation"]["accuracy"] is None
    assert s["overall"] == pytest.approx((0.75 + 1.0 + 0.0) / 3)  # primaries with scored trials only
    assert s["testpoint_accuracy"] == pytest.approx(4 / 6)
    assert s["unscored"]["images"] == {"missing_image": 1, "parse_error": 1, "request_error": 1}
    assert s["unscored"]["testpoints"] == 8 and s["unscored"]["invalid_rows"] == 5
    assert s["unscored"]["invalid_row_images"] == 10  # 5 rows x 2 images
    assert (s["prompts"], s["images"], s["scored_images"], s["scored_testpoints"]) == (3, 6, 3, 6)
    assert "Text Generation" in s["missing_primary_dimensions"]


def test_judge_over_http_gives_the_documented_totals_and_resumes(prompt_csv, images, judge_url, tmp_path, capsys):
    out = tmp_path / "out"
    common = ["eval", "unigenbench", "--prompts", str(prompt_csv), "--judge", str(images), "--out", str(out),
              "--images-per-prompt", "2", "--base-url", judge_url, "--judge-model", "judge-x", "--retries", "0",
              "--max-tokens", "512", "--protocol", "lenient"]  # fmt: skip
    argv = [*common, "--judge-version", "v1-test"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    s = json.loads((out / "summary.json").read_text())
    check_documented_totals(s)
    assert s["judge"]["model"] == "judge-x" and s["judge"]["version"] == "v1-test"
    assert s["judge"]["served"] == {"id": "judge-x", "root": "/models/eval-72b", "owned_by": "vllm"}
    assert len(s["judge"]["template_sha256"]) == 64 and s["prompt_set"]["sha256"] == load_csv(prompt_csv).sha256
    assert "**Overall: 58.33**" in printed and "| Attribute | 75.00 | 3 / 4 | 2 |" in printed
    assert "line 4 (index 2): sub_dims_en is not valid JSON" in (out / "summary.md").read_text()
    assert FakeJudge.calls == {(0, 0): 1, (0, 1): 2, (1, 0): 1, (1, 1): 3, (5, 0): 1}  # parse failures re-asked
    body = FakeJudge.bodies[0]
    assert body["model"] == "judge-x" and body["temperature"] == 0.0 and body["max_tokens"] == 512
    records = read_progress(out / "progress.jsonl")
    assert records[(1, 1)]["status"] == "parse_error" and records[(1, 1)]["attempts"] == 3
    assert records[(1, 0)]["status"] == "request_error" and "HTTP 500" in records[(1, 0)]["error"]
    assert records[(0, 0)]["analysis"] == ["red", "one cat"]

    assert main(argv) == 2  # a second fresh run would mix results: refused
    assert "--resume" in capsys.readouterr().err
    assert main([*common, "--judge-version", "v2", "--resume"]) == 2  # another judge version: refused
    assert "judge version" in capsys.readouterr().err
    (images / "5_1.png").write_bytes((images / "5_0.png").read_bytes())  # the missing image appears
    assert main([*argv, "--resume"]) == 0  # only the 3 unscored images are asked again
    assert "**Overall: 58.33**" in capsys.readouterr().out  # Style 0 / 2 now, Action 2 / 2: same mean
    assert FakeJudge.calls == {(0, 0): 1, (0, 1): 2, (1, 0): 2, (1, 1): 6, (5, 0): 2}
    resumed = json.loads((out / "summary.json").read_text())
    assert resumed["unscored"]["images"] == {"parse_error": 1, "request_error": 1}
    assert resumed["primary_dimensions"]["Action"] == {"correct": 2, "total": 2, "unscored": 0, "accuracy": 1.0}

    assert main(["eval", "unigenbench", "--prompts", str(prompt_csv), "--summary", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["overall"] == pytest.approx(resumed["overall"])


def test_a_dead_endpoint_stops_the_run_with_progress_kept(prompt_csv, images, tmp_path):
    prompts = load_csv(prompt_csv)
    with ThreadingHTTPServer(("127.0.0.1", 0), FakeJudge) as probe:  # a port with nobody listening
        url = f"http://127.0.0.1:{probe.server_address[1]}/v1"
    judge = openai_judge(url, "judge-x", retries=0, timeout=5)
    with pytest.raises(RuntimeError, match="failed 2 calls in a row") as info:
        evaluate_folder(prompts, images, tmp_path / "out", judge, TEMPLATE_EN, images_per_prompt=2, chunk_size=1,
                        max_failed_calls=2, show_progress=False)  # fmt: skip
    assert "\n" not in str(info.value)
    assert [r["status"] for r in read_progress(tmp_path / "out" / "progress.jsonl").values()] == ["request_error"] * 2


def test_aggregate_by_hand():
    from flowrl.benchmarks.unigenbench.data import TestCase

    cases = [
        TestCase(0, "p", ("Attribute - Color", "Attribute - Quantity"), ("Attribute - Color", "Attribute - Quantity"),
                 ("a", "b")),
        TestCase(9, "q", ("风格",), ("Style",), ("s",)),
    ]  # fmt: skip
    s = aggregate(cases, {(0, 0): {"status": "ok", "scores": [0, 1]}}, images_per_prompt=1)
    # Color 0 / 1, Quantity 1 / 1 -> Attribute 1 / 2; prompt 9 never judged: Style 1 unscored, left out of overall
    assert s["sub_dimensions"]["Attribute - Quantity"]["accuracy"] == 1.0
    assert s["sub_dimensions"]["Attribute - Color"]["accuracy"] == 0.0
    assert s["primary_dimensions"]["Style"] == {"correct": 0, "total": 0, "unscored": 1, "accuracy": None}
    assert s["overall"] == 0.5 and s["unscored"]["images"] == {"not_judged": 1}


def test_generate_writes_the_benchmark_layout(prompt_csv, tmp_path, capsys):
    out = tmp_path / "images"
    argv = ["eval", "unigenbench", "--prompts", str(prompt_csv), "--generate", "tiny-cpu", "--out", str(out)]
    assert main([*argv, "--limit", "2", "--images-per-prompt", "1", "--steps", "1", "--seed", "7"]) == 0
    assert "5 invalid prompt rows skipped" in capsys.readouterr().out
    assert sorted(p.name for p in out.glob("*.png")) == ["0_0.png", "1_0.png"]
    record = json.loads((out / "generation.json").read_text())
    assert record["seeds"] == {"0_0.png": 7, "1_0.png": 8}  # seed + index * n + k
    assert record["prompt_set"]["sha256"] == load_csv(prompt_csv).sha256 and record["settings"]["steps"] == 1


# ------------------------------------------------------------------------------------------ local judge


def test_local_transformers_judge_on_a_tiny_qwen25vl(prompt_csv, images, tmp_path, tiny_qwen25vl):  # noqa: F811
    from flowrl.benchmarks.unigenbench.judge import transformers_judge
    from flowrl.reward_models.vlm import TransformersChat

    model, processor = tiny_qwen25vl
    chat = TransformersChat(model, processor, device="cpu", batch_size=2)
    judge = transformers_judge("tiny-qwen25vl", version="random-init", max_tokens=4, chat=chat)
    prompts = load_csv(prompt_csv)
    s = evaluate_folder(prompts, images, tmp_path / "out", judge, TEMPLATE_EN, images_per_prompt=1, attempts=1,
                        limit=2, show_progress=False)  # fmt: skip
    # random weights write no <score> block: both images judged, both unscored as parse errors
    assert s["unscored"]["images"] == {"parse_error": 2} and s["overall"] is None
    assert s["judge"]["backend"] == "transformers" and s["judge"]["version"] == "random-init"
    records = read_progress(tmp_path / "out" / "progress.jsonl")
    assert all(isinstance(r["output"], str) for r in records.values())
