"""GenEval 2: Soft-TIFA worked by hand (answer forms, question and image scores, the benchmark and its
breakdowns), the local and the served judge with a tokenizer written here, the resumable folder scorer, the
CLI (prompts check, judge over a loopback endpoint, summary, one-line errors), UniRL's generation preset on
the tiny pipeline, and parity with the official code when ``$GENEVAL2_DIR`` names a checkout (skipped
otherwise). No weights are downloaded."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
from PIL import Image

from _loopback import JsonHandler, serve
from flowrl.benchmarks.cli import main
from flowrl.benchmarks.geneval2 import protocol, score_folder
from flowrl.benchmarks.geneval2 import scoring as sc
from flowrl.benchmarks.geneval2.evaluate import read_progress
from flowrl.benchmarks.geneval2.generate import linspace_sigmas, prompt_seed
from flowrl.benchmarks.geneval2.judge import LocalJudge, ServedJudge

ROWS = [
    {"prompt": "three red cows", "atom_count": 3,
     "vqa_list": [["How many cows are in the image?", "three"], ["Are the cows red?", "Yes"],
                  ["Are there any cows in the image?", "Yes"]],
     "skills": ["count", "attribute", "object"]},
    {"prompt": "a cat", "atom_count": 3,
     "vqa_list": [["How many cats are in the image?", "one"], ["Are there any cats in the image?", "Yes"]],
     "skills": ["count", "object"]},
]  # fmt: skip


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "geneval2_data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


# ------------------------------------------------------------------------------------------ by hand


def test_answer_forms_follow_the_official_lists():
    assert sc.answer_forms("How many cows are in the image?", "three") == [
        "three",
        "Three",
        " three",
        " Three",
        "3",
        " 3",
    ]
    assert sc.answer_forms("How many cows are in the image?", "eleven")[4:] == ["other", " other"]  # no digit
    assert sc.answer_forms("Are the cows red?", "Yes") == ["Yes", "yes", " yes", " Yes"]
    assert sc.judge_text("Are the cows red?") == "Are the cows red? Answer in one word."
    assert sc.hard_correct("Three", sc.answer_forms("How many cows?", "three"))  # lower-cased "three"
    assert not sc.hard_correct("No", list(sc.YES_FORMS))


def test_soft_tifa_summary_by_hand():
    items = [{"key": "0", **ROWS[0]}, {"key": "1", **ROWS[1]}]
    rows = {("0", 0): {"status": "ok", "scores": [0.5, 0.8, 0.2], "correct": [1, 1, 0]},
            ("1", 0): {"status": "ok", "scores": [1.0, 0.0], "correct": [1, 0]}}  # fmt: skip
    s = sc.summarize(items, rows, 1)
    gm0 = (0.5 * 0.8 * 0.2) ** (1 / 3)  # 0.430887; image 1 has a 0: GM 0
    assert s["soft_tifa_gm"] == pytest.approx(100 * gm0 / 2)  # 21.544
    assert s["soft_tifa_am"] == pytest.approx(100 * (0.5 + 0.5) / 2)  # AM 0.5 and 0.5
    assert s["tifa"] == pytest.approx(100 * (2 / 3 + 1 / 2) / 2)
    assert s["per_skill_am"] == pytest.approx({"object": 10.0, "attribute": 80.0, "count": 75.0, "position": None,
                                               "verb": None})  # fmt: skip
    assert s["per_atomicity_gm"]["3"] == pytest.approx(100 * gm0 / 2) and s["per_atomicity_gm"]["4"] is None
    assert (s["scored_images"], s["scored_questions"]) == (2, 5)
    # UniRL's padded waves, 1 x 3: images 0, 1, then 0 again -> (gm0 + 0 + gm0) / 3
    assert sc.sim_even_order(5, 2, 2) == [0, 1, 2, 3, 4, 0, 1, 2]
    s = sc.summarize(items, rows, 1, sim_even=(1, 3))
    assert s["soft_tifa_gm_sim1x3"] == pytest.approx(100 * 2 * gm0 / 3)
    assert s["soft_tifa_am_sim1x3"] == pytest.approx(100 * 1.5 / 3)
    s = sc.summarize(items, {("0", 0): rows[("0", 0)]}, 2)  # image 1 of both and prompt 1 not judged
    assert s["unscored"] == {"images": {"not_judged": 3}, "images_total": 3}
    assert s["soft_tifa_gm"] == pytest.approx(100 * gm0)


# ------------------------------------------------------------------------------------------ judges


class WordTokenizer:
    """Ids of whole words; " 3" is a space token then "3" (as Qwen's tokenizer splits it)."""

    words = ["Yes", "yes", " yes", " Yes", "three", "Three", " three", " Three", "3", " ", "No", "one", "One",
             " one", " One", "1"]  # fmt: skip

    def encode(self, text):
        if text in self.words:
            return [self.words.index(text)]
        assert text.startswith(" ") and text[1:] in self.words, text
        return [self.words.index(" "), self.words.index(text[1:])]

    def decode(self, ids):
        return "".join(self.words[i] for i in ids)


class TableChat:
    """A local 'model' whose next-token distribution is a fixed row per question text."""

    tokenizer = WordTokenizer()
    batch_size = 4

    def __init__(self, table):
        self.table = table

    def next_token_distribution(self, requests):
        import torch

        return torch.tensor([self.table[r.text] for r in requests], dtype=torch.float32)


#          Yes   yes  " yes" " Yes" three Three " three" " Three" 3   " "   No   one  One  " one" " One" 1
P_COUNT = [0.0, 0.0, 0.0, 0.0, 0.30, 0.10, 0.05, 0.05, 0.20, 0.10, 0.20, 0.0, 0.0, 0.0, 0.0, 0.0]
P_YES = [0.40, 0.20, 0.10, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.25, 0.0, 0.0, 0.0, 0.0, 0.0]
P_NO = [0.05, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.90, 0.0, 0.0, 0.0, 0.0, 0.0]


def test_local_judge_sums_first_token_probabilities_as_the_official_loop():
    judge = LocalJudge(TableChat({"q1 Answer in one word.": P_COUNT, "q2 Answer in one word.": P_YES}), {})
    forms = [sc.answer_forms("How many", "three"), sc.answer_forms("Is it?", "Yes")]
    image = np.zeros((4, 4, 3), np.uint8)
    count, yes = judge.ask([image, image], ["q1 Answer in one word.", "q2 Answer in one word."], forms)
    # three .30 + Three .10 + " three" .05 + " Three" .05 + "3" .20 + " 3" -> its first token " " .10 = 0.80
    assert sc.soft_score(count.probs) == pytest.approx(0.80) and count.argmax == "three"
    assert sc.soft_score(yes.probs) == pytest.approx(0.75) and yes.argmax == "Yes"  # .40 + .20 + .10 + .05


def test_a_repeated_first_token_counts_twice_and_is_reported(data_file, tmp_path):
    class Shared(WordTokenizer):
        def encode(self, text):
            return [4] if text == "Three" else super().encode(text)  # "Three" shares "three"'s id

    chat = TableChat({sc.judge_text(q): (P_COUNT if q.startswith("How many") else P_YES) for r in ROWS
                      for q, _ in r["vqa_list"]})  # fmt: skip
    chat.tokenizer = Shared()
    judge = LocalJudge(chat, {"model": "t", "version": None, "backend": "transformers", "base_url": None})
    images = _images(tmp_path / "images", ["0_0.png"])
    s = score_folder(
        images, tmp_path / "out", {"prompts": data_file, "judge": judge, "limit": 1, "show_progress": False}
    )
    row = read_progress(tmp_path / "out" / "progress.jsonl")[("0", 0)]
    assert row["scores"][0] == pytest.approx(0.30 + 0.30 + 0.05 + 0.05 + 0.20 + 0.10)  # "three" twice: 1.00
    assert row["shared_first_tokens"] == 1 and s["questions_with_shared_first_tokens"] == 1


def test_local_judge_on_a_tiny_qwen25vl(tiny_qwen25vl):  # noqa: F811
    from flowrl.benchmarks.geneval2.judge import local_judge
    from flowrl.reward_models.vlm import TransformersChat

    model, processor = tiny_qwen25vl
    judge = local_judge("tiny", chat=TransformersChat(model, processor, device="cpu", batch_size=2))
    texts = [sc.judge_text("Are the cows red?"), sc.judge_text("How many cows are in the image?")]
    forms = [list(sc.YES_FORMS), sc.answer_forms("How many cows are in the image?", "three")]
    image = np.random.default_rng(0).integers(0, 255, (56, 56, 3), dtype=np.uint8)
    replies = judge.ask([image, image], texts, forms)
    dist = judge.chat.next_token_distribution([])  # no request: an empty table
    assert dist.numel() == 0
    for reply, row_forms in zip(replies, forms):
        assert len(reply.probs) == len(row_forms) and all(0.0 <= p <= 1.0 for p in reply.probs)
        assert reply.ids == [judge.tokenizer.encode(f)[0] for f in row_forms]
    assert judge.info["backend"] == "transformers" and 0.0 < sc.soft_score(replies[0].probs) < 1.0


class ServedLogprobs(JsonHandler):
    bodies: list = []

    def do_GET(self):  # /models
        self._send(200, {"data": [{"id": "judge"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ServedLogprobs.bodies.append(body)
        top = [{"token": "token_id:0", "logprob": math.log(0.5)}, {"token": "token_id:10", "logprob": math.log(0.3)},
               {"token": "token_id:1", "logprob": math.log(0.1)}]  # fmt: skip
        self._send(200, {"choices": [{"message": {"content": "Yes"},
                                      "logprobs": {"content": [{"token": "token_id:0", "top_logprobs": top}]}}]})  # fmt: skip


def test_served_judge_matches_candidates_by_token_id_and_counts_the_rest_zero():
    from flowrl.reward_models.vlm import OpenAIChat

    with serve(ServedLogprobs) as url:
        judge = ServedJudge(OpenAIChat(url, "judge", top_logprobs=3), WordTokenizer(), {})
        (reply,) = judge.ask([np.zeros((4, 4, 3), np.uint8)], ["Is it? Answer in one word."], [list(sc.YES_FORMS)])
    assert reply.probs == pytest.approx([0.5, 0.1, 0.0, 0.0]) and reply.argmax == "Yes"  # " yes", " Yes": not listed
    assert reply.floor == pytest.approx(0.1)
    body = ServedLogprobs.bodies[-1]
    assert (body["max_tokens"], body["logprobs"], body["top_logprobs"]) == (1, True, 3)
    assert body["return_tokens_as_token_ids"] is True and body["messages"][0]["content"][0]["type"] == "image_url"


# ------------------------------------------------------------------------------------- folder and CLI


def _images(folder: Path, names):
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        Image.fromarray(np.full((8, 8, 3), 200, np.uint8)).save(folder / name)
    return folder


def test_score_folder_resumes_and_counts_missing_images(data_file, tmp_path):
    table = {sc.judge_text(q): (P_COUNT if q.startswith("How many") else P_YES) for r in ROWS for q, _ in r["vqa_list"]}
    judge = LocalJudge(
        TableChat(table), {"model": "table", "version": "1", "backend": "transformers", "base_url": None}
    )
    images = _images(tmp_path / "images", ["0_0.png"])  # prompt 1's image is missing
    out = tmp_path / "out"
    s = score_folder(images, out, {"prompts": data_file, "judge": judge, "show_progress": False})
    # prompt 0: count "three" 0.80, two yes questions 0.75 each
    assert s["soft_tifa_am"] == pytest.approx(100 * (0.80 + 0.75 + 0.75) / 3)
    assert s["unscored"]["images"] == {"missing_image": 1} and not s["protocol"]["official"]
    with pytest.raises(ValueError, match="pass --resume"):
        score_folder(images, out, {"prompts": data_file, "judge": judge})
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(images / "p00001_s0.png")  # UniRL's name is read too
    s = score_folder(images, out, {"prompts": data_file, "judge": judge, "resume": True, "show_progress": False})
    # prompt 1: "one" forms get only " 1"'s first token, the space: 0.10 (the official quirk); yes 0.75
    gm0, gm1 = (0.80 * 0.75 * 0.75) ** (1 / 3), (0.10 * 0.75) ** (1 / 2)  # 0.76631, 0.27386
    assert s["scored_images"] == 2 and s["soft_tifa_gm"] == pytest.approx(100 * (gm0 + gm1) / 2)  # 52.0085
    keys = [json.loads(line)["key"] for line in (out / "progress.jsonl").read_text().splitlines()]
    assert keys == ["0", "1", "1"]  # the scored image was not judged again; the missing one was
    assert read_progress(out / "progress.jsonl")[("1", 0)]["file"] == "p00001_s0.png"


class ServedYes(ServedLogprobs):
    pass


def test_cli_check_judge_summary_and_errors(data_file, tmp_path, capsys):
    from tiny_vlm import vl_tokenizer

    tokenizer_dir = tmp_path / "tokenizer"
    vl_tokenizer().save_pretrained(tokenizer_dir)
    assert main(["eval", "geneval2", "--prompts", str(data_file), "--check"]) == 0
    assert "2 prompts, 5 questions (not the official file" in capsys.readouterr().out
    images = _images(tmp_path / "images", ["0_0.png", "1_0.png"])
    with serve(ServedYes) as url:
        argv = ["eval", "geneval2", "--prompts", str(data_file), "--judge", str(images), "--out", str(tmp_path / "o"),
                "--base-url", url, "--judge-model", "judge", "--judge-tokenizer", str(tokenizer_dir)]  # fmt: skip
        assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "Soft-TIFA GM" in printed and "not official" in printed
    assert main(["eval", "geneval2", "--prompts", str(data_file), "--summary", str(tmp_path / "o"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["scored_images"] == 2
    summary = ["eval", "geneval2", "--prompts", str(data_file), "--summary", str(tmp_path / "o"), "--sim-even-batches"]
    assert main([*summary, "2x2"]) == 0 and "soft tifa gm sim2x2" in capsys.readouterr().out
    assert main([*summary, "0x2"]) == 2
    assert "--sim-even-batches '0x2': expected WxB with positive integers" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**ROWS[0], "skills": ["count"]}) + "\n")
    assert main(["eval", "geneval2", "--prompts", str(bad), "--check"]) == 2
    assert "bad.jsonl:1: 'skills' must list one skill per question" in capsys.readouterr().err
    os.environ["FLOWRL_CACHE"] = str(tmp_path / "empty-cache")
    try:
        assert main(["eval", "geneval2", "--check"]) == 2
    finally:
        del os.environ["FLOWRL_CACHE"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not shipped (licence CC BY-NC 4.0) and HF_HUB_OFFLINE is set" in err


# ------------------------------------------------------------------------------------------ generation


def test_unirl_preset_protocol_seed_and_sigmas():
    p = protocol("unirl")
    assert (p["resolution"], p["steps"], p["guidance"], p["max_sequence_length"], p["images_per_prompt"]) == (
        512, 40, 1.0, 256, 1)  # fmt: skip
    assert linspace_sigmas(4) == [1.0, 0.75, 0.5, 0.25]
    # sha256(b"a cat") begins 51 e4 67 41: h = 0x51e46741 = 1373923137; image 1 at seed 42 -> 42 + h + 1
    assert prompt_seed("a cat", 42, 1) == 1373923180
    assert prompt_seed("a cat", 2**31 - 1, 0) == 1373923136  # wraps modulo 2**31
    with pytest.raises(ValueError, match="--preset 'x'"):
        protocol("x")


def test_generate_under_the_unirl_preset_on_the_tiny_pipeline(data_file, tmp_path, capsys, monkeypatch):
    from diffusers import StableDiffusion3Pipeline

    calls = []
    original = StableDiffusion3Pipeline.__call__

    def recording(self, *args, **kwargs):
        calls.append(kwargs)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(StableDiffusion3Pipeline, "__call__", recording)
    out = tmp_path / "gen"
    argv = [
        "eval",
        "geneval2",
        "--prompts",
        str(data_file),
        "--generate",
        "tiny-cpu",
        "--out",
        str(out),
        "--steps",
        "2",
        "--limit",
        "1",
        "model.resolution=64",
    ]  # a later override wins over the preset's 512
    assert main(argv) == 0
    assert "64 px, 2 steps, guidance 1" in capsys.readouterr().out
    record = json.loads((out / "generation.json").read_text())
    assert record["seeds"] == {"0_0.png": prompt_seed("three red cows", 42, 0)}
    assert record["settings"]["max_sequence_length"] == 256 and record["preset"]["preset"] == "unirl"
    assert calls[0]["sigmas"] == [1.0, 0.5] and calls[0]["guidance_scale"] == 1.0  # linspace(1, 1/2, 2)
    assert Image.open(out / "0_0.png").size == (64, 64)
    assert json.loads((out / "images.json").read_text()) == {"three red cows": str((out / "0_0.png").resolve())}


# ------------------------------------------------------------------------------------------ parity


@pytest.mark.skipif(not os.environ.get("GENEVAL2_DIR"), reason="$GENEVAL2_DIR names no GenEval2 checkout")
def test_parity_with_the_official_scripts(tmp_path):
    from flowrl.benchmarks.geneval2.official import parity

    result = parity(os.environ["GENEVAL2_DIR"], tmp_path)
    assert result["question_scores_equal"] and result["max_abs_diff"] == 0.0
    assert result["official"]["questions"] == result["flowrl"]["scored_questions"]
