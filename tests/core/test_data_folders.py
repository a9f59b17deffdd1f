"""Dataset folders laid out as flow_grpo and Flow-Factory lay theirs: train.* trains, test.* is held out."""

import json

import pytest

from flowrl.cli import main
from flowrl.config import ConfigError, DataConfig
from flowrl.data import load_eval_prompts, load_prompts


def test_a_text_folder_trains_on_train_txt_and_holds_out_test_txt(tmp_path):
    """flow_grpo's dataset/ocr: train.txt and test.txt, one prompt a line."""
    (tmp_path / "train.txt").write_text('a sign that says "open"\na mug that says "hi"\n')
    (tmp_path / "test.txt").write_text('a poster that says "sale"\n')
    assert [p.prompt for p in load_prompts(str(tmp_path))] == ['a sign that says "open"', 'a mug that says "hi"']
    held_out = load_eval_prompts(DataConfig(prompts=str(tmp_path)))
    assert [p.prompt for p in held_out] == ['a poster that says "sale"']
    # an explicit data.eval_prompts wins; a folder without test.* has no held-out split of its own
    (tmp_path / "other.txt").write_text("a red cube\n")
    explicit = load_eval_prompts(DataConfig(prompts=str(tmp_path), eval_prompts=str(tmp_path / "other.txt")))
    assert [p.prompt for p in explicit] == ["a red cube"]
    (tmp_path / "test.txt").unlink()
    assert load_eval_prompts(DataConfig(prompts=str(tmp_path))) is None


def test_a_geneval_folder_keeps_each_rows_tags(tmp_path):
    """flow_grpo's dataset/geneval: train_metadata.jsonl rows carry GenEval's tag and include clauses."""
    row = {"tag": "counting", "include": [{"class": "cat", "count": 2}], "prompt": "a photo of two cats"}
    (tmp_path / "train_metadata.jsonl").write_text(json.dumps(row) + "\n")
    (tmp_path / "test_metadata.jsonl").write_text(json.dumps({**row, "prompt": "a photo of two dogs"}) + "\n")
    [item] = load_prompts(str(tmp_path))
    assert item.prompt == "a photo of two cats" and item.metadata["tag"] == "counting"
    assert item.metadata["include"] == [{"class": "cat", "count": 2}]
    assert [p.prompt for p in load_eval_prompts(DataConfig(prompts=str(tmp_path)))] == ["a photo of two dogs"]


def test_jsonl_comes_before_txt_and_a_folder_without_a_train_file_is_one_line(tmp_path, capsys):
    (tmp_path / "train.txt").write_text("from the txt\n")
    (tmp_path / "train.jsonl").write_text(json.dumps({"prompt": "from the jsonl"}) + "\n")
    assert [p.prompt for p in load_prompts(str(tmp_path))] == ["from the jsonl"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="holds none of train.jsonl, train_metadata.jsonl, train.txt"):
        load_prompts(str(empty))
    assert main(["validate", f"data.prompts={empty}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds none of train.jsonl" in err[0]
    assert main(["validate", f"data.prompts={tmp_path}"]) == 0


def test_the_trainer_evaluates_on_the_folders_test_split(tmp_path):
    from flowrl.resolve import resolve_config
    from flowrl.trainer import Trainer

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.txt").write_text("a red cube\na blue ball\n")
    (data / "test.txt").write_text("a green cone\n")
    tr = Trainer(resolve_config("tiny-cpu", [f"output_dir={tmp_path / 'run'}", f"data.prompts={data}"]))
    assert [p.prompt for p in tr.prompts] == ["a red cube", "a blue ball"]
    assert [p.prompt for p in tr.eval_prompts] == ["a green cone"]
