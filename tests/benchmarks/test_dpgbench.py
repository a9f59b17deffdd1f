"""DPG-Bench: the official question parsing (its first data row skipped), the dependency rule, crops and
category tables worked by hand, the answer rules, the resumable folder scorer on grids and single images, the
CLI over a loopback VLM endpoint, generation with grids on the tiny pipeline, and parity with ELLA's script
when ``$ELLA_DIR`` names a checkout (skipped otherwise). No weights are downloaded."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
from PIL import Image

from _loopback import JsonHandler, serve
from flowrl.benchmarks.cli import main
from flowrl.benchmarks.dpgbench import load_items, protocol, score_folder
from flowrl.benchmarks.dpgbench import scoring as sc
from flowrl.benchmarks.dpgbench.data import load_questions

#        item, qid, dependency, tuple (category), question
QUESTIONS = [
    ("a", 1, "0", "entity - whole (dog)", "Is there a dog?"),  # the official parser skips this first row ...
    ("a", 2, "1", "attribute - color (dog, brown)", "Is the dog brown?"),  # ... so this parent is missing
    ("b", 1, "0", "entity - whole (cat)", "Is there a cat?"),
    ("b", 2, "1", "attribute - color (cat, black)", "Is the cat black?"),
    ("b", 3, "1,2", "relation - spatial (cat, mat, on)", "Is the black cat on the mat?"),
    ("b", 4, "0", "global (photo)", "Is this a photo?"),
]


@pytest.fixture
def csv_file(tmp_path):
    path = tmp_path / "dpg_bench.csv"
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(sc.COLUMNS)
        for key, qid, dep, tup, question in QUESTIONS:
            writer.writerow([key, f"prompt {key}", "", qid, dep, tup.split(" ")[0], "", tup, question])
    return path


# ------------------------------------------------------------------------------------------ by hand


def test_parsing_skips_the_first_row_as_the_official_loop(csv_file):
    questions = load_questions(csv_file)
    assert list(questions) == ["a", "b"] and list(questions["a"].question) == [2]  # a's question 1 is gone
    assert questions["b"].dependency == {1: [0], 2: [1], 3: [1, 2], 4: [0]}
    assert list(load_questions(csv_file, skip_first=False)["a"].question) == [1, 2]
    items = load_items(csv_file)
    assert items[1]["questions"][2]["category"] == "relation - spatial"
    assert items[1]["questions"][3]["l1_category"] == "global" and items[1]["prompt"] == "prompt b"


def test_dependency_rule_crops_and_image_score_by_hand(csv_file):
    b = load_questions(csv_file)["b"]
    crops = [
        {1: True, 2: True, 3: True, 4: False},  # nothing zeroed: 3/4
        {1: False, 2: True, 3: True, 4: True},  # 2 and 3 lose parent 1: [0, 0, 0, 1] -> 1/4
        {1: True, 2: False, 3: True, 4: True},  # 3 loses parent 2: [1, 0, 0, 1] -> 2/4
        {1: True, 2: True, 3: True, 4: True},  # 4/4
    ]
    result = sc.image_result(b, crops)
    assert result["crop_scores"] == [0.75, 0.25, 0.5, 1.0] and result["score"] == 0.625
    assert result["last_crop_raw"] == {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0}
    # a zeroed parent zeroes the children after it: 1 no -> 2 zeroed -> 3 (parent 2) zeroed too
    assert sc.crop_score({1: 0.0, 2: 1.0, 3: 1.0}, {1: [0], 2: [1], 3: [2]}) == (0.0, {1: 0.0, 2: 0, 3: 0})
    with pytest.raises(sc.MissingParent):
        sc.image_result(load_questions(csv_file)["a"], [{2: True}])
    assert sc.crop_boxes(512, 4) == [(0, 0, 512, 512), (512, 0, 1024, 512), (0, 512, 512, 1024),
                                     (512, 512, 1024, 1024)]  # fmt: skip


def test_summary_uses_the_last_crops_raw_answers_for_categories(csv_file):
    questions = load_questions(csv_file)
    rows = {"b": {"status": "ok", "score": 0.625, "last_crop_raw": {"1": 1.0, "2": 0.0, "3": 1.0, "4": 1.0}},
            "a": {"status": "missing_parent"}}  # fmt: skip
    s = sc.summarize(list(questions.values()), rows)
    assert s["dpg_score"] == 62.5 and s["unscored"]["images"] == {"missing_parent": 1}
    assert s["l2_categories"] == {"attribute - color": 0.0, "entity - whole": 100.0, "global": 100.0,
                                  "relation - spatial": 100.0}  # fmt: skip
    assert s["l1_categories"]["attribute"] == 0.0 and (s["prompts"], s["questions"]) == (2, 5)


@pytest.mark.parametrize(
    "text, exact, first_word",
    [("yes", True, True), ("Yes.", False, True), ("Yes, there is a cat.", False, True), ("no", False, False),
     ("yesterday", False, False), ("", False, False), ("**Yes**", False, True)],
)  # fmt: skip
def test_answer_rules(text, exact, first_word):
    assert sc.answer_is_yes(text, "exact") is exact and sc.answer_is_yes(text, "first-word") is first_word


# ------------------------------------------------------------------------------------------ folder


class Scripted:
    """A judge answering from the crop's colour: red crops see everything, blue crops nothing."""

    info = {"model": "scripted", "version": "1", "backend": "fake", "base_url": None, "max_tokens": 16}

    def __init__(self):
        self.asked = []

    def complete(self, requests):
        self.asked += [r.text for r in requests]
        return ["Yes." if r.images[0][0, 0, 0] > 128 else "No." for r in requests]


def _grid(path, colours, r=4):
    grid = np.zeros((2 * r, 2 * r, 3), np.uint8)
    for c, (x, y) in enumerate([(0, 0), (r, 0), (0, r), (r, r)]):
        grid[y : y + r, x : x + r] = colours[c]
    Image.fromarray(grid).save(path)


RED, BLUE = (255, 0, 0), (0, 0, 255)


def test_score_folder_on_a_grid_then_resumes_with_single_images(csv_file, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    _grid(images / "b.png", [RED, BLUE, RED, RED])  # crop scores 1, 0, 1, 1 -> 0.75
    judge = Scripted()
    out = tmp_path / "out"
    s = score_folder(images, out, {"prompts": csv_file, "judge": judge, "show_progress": False})
    assert s["dpg_score"] == 75.0 and s["unscored"]["images"] == {"missing_image": 1}
    assert judge.asked[0] == "Is there a cat? Please answer yes or no." and len(judge.asked) == 16
    assert "not the official VQA run" in s["protocol"]["label"]
    for k, colour in enumerate([RED, RED, BLUE, BLUE]):  # prompt a as singles: a missing parent, skipped
        Image.fromarray(np.full((4, 4, 3), colour, np.uint8)).save(images / f"a_{k}.png")
    s = score_folder(images, out, {"prompts": csv_file, "judge": judge, "resume": True, "show_progress": False})
    assert s["unscored"]["images"] == {"missing_parent": 1} and s["dpg_score"] == 75.0
    assert len(judge.asked) == 16 + 4  # b was not asked again; a's one question on 4 crops
    with pytest.raises(ValueError, match="answer_rule was 'first-word', now 'exact'"):
        score_folder(images, out, {"prompts": csv_file, "judge": judge, "resume": True, "answer_rule": "exact"})


class ServedVlm(JsonHandler):
    def do_GET(self):
        self._send(200, {"data": [{"id": "vlm"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = body["messages"][0]["content"][-1]["text"]
        self._send(200, {"choices": [{"message": {"content": "No" if "black" in text else "Yes, it is."}}]})


def test_cli_check_judge_summary_and_errors(csv_file, tmp_path, capsys):
    assert main(["eval", "dpg", "--prompts", str(csv_file), "--check"]) == 0
    assert "2 prompts (the official set has 1065), 5 questions" in capsys.readouterr().out
    images = tmp_path / "images"
    images.mkdir()
    _grid(images / "b.png", [RED] * 4)
    with serve(ServedVlm) as url:
        argv = ["eval", "dpg", "--prompts", str(csv_file), "--judge", str(images), "--out", str(tmp_path / "o"),
                "--base-url", url, "--judge-model", "vlm"]  # fmt: skip
        assert main(argv) == 0
    printed = capsys.readouterr().out
    # b: "black" questions answered No: 2 -> 0, 3 (parents 1, 2) -> 0; crops [1, 0, 0, 1] -> 0.5
    assert "**DPG score: 50.00**" in printed
    assert main(["eval", "dpg", "--prompts", str(csv_file), "--summary", str(tmp_path / "o"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["scored_images"] == 1
    assert (
        main(["eval", "dpg", "--prompts", str(csv_file), "--judge", str(images), "--out", "x", "--pic-num", "0"]) == 2
    )
    assert "--pic-num: must be at least 1, got 0" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("item_id,text\n1,a\n")
    assert main(["eval", "dpg", "--prompts", str(bad), "--check"]) == 2
    assert "not a DPG-Bench CSV (no column 'keywords'" in capsys.readouterr().err


def test_generate_draws_four_images_and_the_grid(csv_file, tmp_path, capsys):
    assert protocol()["images_per_prompt"] == 4
    out = tmp_path / "gen"
    argv = ["eval", "dpg", "--prompts", str(csv_file), "--generate", "tiny-cpu", "--out", str(out), "--steps", "1",
            "--limit", "1", "--seed", "3"]  # fmt: skip
    assert main(argv) == 0
    record = json.loads((out / "generation.json").read_text())
    assert record["seeds"] == {"a_0.png": 3, "a_1.png": 4, "a_2.png": 5, "a_3.png": 6}
    size = Image.open(out / "a_0.png").size
    grid = Image.open(out / "grids" / "a.png")
    assert grid.size == (2 * size[0], 2 * size[1])
    assert np.array_equal(
        np.asarray(grid)[size[1] :, size[0] :], np.asarray(Image.open(out / "a_3.png").convert("RGB"))
    )


@pytest.mark.skipif(not os.environ.get("ELLA_DIR"), reason="$ELLA_DIR names no ELLA checkout")
def test_parity_with_the_official_script(tmp_path):
    from flowrl.benchmarks.dpgbench.official import parity

    result = parity(os.environ["ELLA_DIR"], tmp_path)
    assert result["max_abs_diff"] == 0.0 and result["same_categories"]
    for key in ("scored_images", "failed_images", "answers_of_scored_images"):
        assert result["official"][key] == result["flowrl"][key]


def test_the_one_line_error_when_the_csv_is_absent_offline(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FLOWRL_CACHE", str(tmp_path))
    monkeypatch.delenv("DPG_BENCH_CSV", raising=False)
    assert main(["eval", "dpg", "--check"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "DPG-Bench questions are not shipped" in err and "$DPG_BENCH_CSV" in err
    assert Path(tmp_path).is_dir()
