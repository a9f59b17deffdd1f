"""Hugging Face ``datasets`` as prompt sources: ``data.prompts=hf:NAME`` or a folder saved with save_to_disk."""

import json

import pytest

from flowrl.cli import main
from flowrl.config import ConfigError, DataConfig
from flowrl.data import load_eval_prompts, load_prompts, load_train_prompts
from flowrl.resolve import resolve_config

datasets = pytest.importorskip("datasets")
datasets.disable_progress_bars()


@pytest.fixture
def saved_dict(tmp_path):
    """A DatasetDict with train and test splits, as ``save_to_disk`` writes it."""
    folder = tmp_path / "dd"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict(
                {
                    "prompt": ["a red cube", "a blue ball", "a green cone"],
                    "tag": ["colors", "colors", "shapes"],
                    "negative_prompt": ["blurry", None, ""],
                }
            ),
            "test": datasets.Dataset.from_dict({"prompt": ["a yellow star"], "tag": ["colors"]}),
        }
    ).save_to_disk(str(folder))
    return folder


def test_a_saved_dataset_dict_trains_on_train_and_holds_out_test(saved_dict):
    for spec in (f"hf:{saved_dict}", str(saved_dict)):  # the prefix is optional for a save_to_disk folder
        items = load_prompts(spec)
        assert [it.prompt for it in items] == ["a red cube", "a blue ball", "a green cone"]
        assert [it.metadata for it in items] == [{"tag": "colors"}, {"tag": "colors"}, {"tag": "shapes"}]
        held_out = load_eval_prompts(DataConfig(prompts=spec))
        assert [it.prompt for it in held_out] == ["a yellow star"] and held_out[0].metadata == {"tag": "colors"}
    # a row's negative_prompt column is its own; a missing (None) one is data.negative_prompt; "" stays ""
    items = load_train_prompts(DataConfig(prompts=f"hf:{saved_dict}", negative_prompt="low quality"))
    assert [it.negative_prompt for it in items] == ["blurry", "low quality", ""]
    assert all("negative_prompt" not in it.metadata for it in items)
    # another split trains; another held-out split, or none
    assert [it.prompt for it in load_train_prompts(DataConfig(prompts=str(saved_dict), split="test"))] == [
        "a yellow star"
    ]
    assert load_eval_prompts(DataConfig(prompts=str(saved_dict), eval_split="validation")) is None


def test_a_single_saved_dataset_is_used_whole_with_its_own_prompt_column(tmp_path):
    folder = tmp_path / "single"
    datasets.Dataset.from_dict({"caption": ["a cat", "a dog"], "id": [1, 2]}).save_to_disk(str(folder))
    data = DataConfig(prompts=f"hf:{folder}", prompt_column="caption")
    items = load_train_prompts(data)
    assert [(it.prompt, it.metadata, it.negative_prompt) for it in items] == [
        ("a cat", {"id": 1}, ""),
        ("a dog", {"id": 2}, ""),
    ]
    assert load_eval_prompts(data) is None  # a single Dataset has no test split of its own


def test_data_files_in_a_folder_load_with_load_dataset(tmp_path):
    folder = tmp_path / "csvs"
    folder.mkdir()
    (folder / "train.csv").write_text("prompt,score\na red cube,1\na blue ball,2\n")
    (folder / "test.csv").write_text("prompt,score\na green cone,3\n")
    assert [it.prompt for it in load_prompts(f"hf:{folder}")] == ["a red cube", "a blue ball"]
    assert [it.prompt for it in load_eval_prompts(DataConfig(prompts=f"hf:{folder}"))] == ["a green cone"]


def _one_line(exc_info) -> str:
    text = str(exc_info.value)
    assert "\n" not in text
    return text


def test_a_bad_dataset_is_one_line_naming_what_exists(saved_dict, tmp_path):
    with pytest.raises(ConfigError) as info:
        load_prompts(str(saved_dict), prompt_column="caption")
    assert "no column 'caption'; its columns: prompt, tag, negative_prompt" in _one_line(info)
    assert _one_line(info).startswith("data.prompt_column:")
    with pytest.raises(ConfigError) as info:
        load_prompts(str(saved_dict), split="validation")
    assert "has no split 'validation'; its splits: train, test" in _one_line(info)
    empty = tmp_path / "empty"
    datasets.Dataset.from_dict({"prompt": ["a cat"]}).filter(lambda row: False).save_to_disk(str(empty))
    with pytest.raises(ConfigError, match="holds no prompts") as info:
        load_prompts(f"hf:{empty}")
    _one_line(info)
    numbers = tmp_path / "numbers"
    datasets.Dataset.from_dict({"prompt": ["a cat", "a dog"], "negative_prompt": [None, None]}).save_to_disk(
        str(numbers)
    )
    assert [it.negative_prompt for it in load_prompts(str(numbers))] == [None, None]
    datasets.Dataset.from_dict({"prompt": [1, 2]}).save_to_disk(str(tmp_path / "ints"))
    with pytest.raises(ConfigError, match=r"row 0: column 'prompt' must be a string, got int") as info:
        load_prompts(str(tmp_path / "ints"))
    _one_line(info)
    with pytest.raises(ConfigError, match="no such dataset folder") as info:
        load_prompts(f"hf:{tmp_path / 'nope'}")
    _one_line(info)


def test_a_hub_name_offline_is_one_line_naming_the_dataset(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(ConfigError) as info:
        load_prompts("hf:flowrl-tests/no-such-dataset")
    text = _one_line(info)
    assert "'flowrl-tests/no-such-dataset'" in text and "offline" in text


def test_validate_and_the_trainer_read_a_dataset(saved_dict, tmp_path, capsys):
    assert main(["validate", f"data.prompts=hf:{saved_dict}"]) == 0
    assert main(["validate", f"data.prompts=hf:{saved_dict}", "data.prompt_column=text"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no column 'text'" in err[0]
    with pytest.raises(ConfigError, match="data.prompt_column: must not be empty"):
        DataConfig(prompt_column=" ")

    from flowrl.trainer import Trainer

    tr = Trainer(resolve_config("tiny-cpu", [f"output_dir={tmp_path / 'run'}", f"data.prompts=hf:{saved_dict}"]))
    assert [p.prompt for p in tr.prompts] == ["a red cube", "a blue ball", "a green cone"]
    assert [p.prompt for p in tr.eval_prompts] == ["a yellow star"]
    assert tr._own_negatives  # the train split has a negative prompt ("blurry")


def test_jsonl_reads_prompt_column_too(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"caption": "a cat", "tag": "x"}) + "\n")
    [item] = load_prompts(str(path), prompt_column="caption")
    assert item.prompt == "a cat" and item.metadata == {"tag": "x"}
    with pytest.raises(ConfigError, match=r"p.jsonl:1: each line needs a string field 'prompt'"):
        load_prompts(str(path))


def test_csv_reads_a_header_line_and_its_prompt_column(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text('prompt,seed,negative_prompt\n"a cat, sitting",1,blurry\n\na dog,2,\n')
    first, second = load_prompts(str(path))
    assert (first.prompt, first.metadata, first.negative_prompt) == ("a cat, sitting", {"seed": "1"}, "blurry")
    assert (second.prompt, second.negative_prompt) == ("a dog", "")
    path.write_text("caption\na red cube\n")
    assert [it.prompt for it in load_prompts(str(path), prompt_column="caption")] == ["a red cube"]
    with pytest.raises(ConfigError, match=r"p.csv:1: a .csv prompt file needs a header line naming .* 'prompt'"):
        load_prompts(str(path))


def test_an_empty_prompt_is_refused_naming_its_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "a cat"}) + "\n" + json.dumps({"prompt": "  "}) + "\n")
    with pytest.raises(ConfigError, match=r"p.jsonl:2: the prompt \('prompt'\) is empty"):
        load_prompts(str(path))
