"""Dataset folders of media (preference pairs, SFT targets): the layouts read and the one-line errors, before
any model loads."""

import json

import pytest
from PIL import Image

from flowrl.config import ConfigError
from flowrl.media_data import check_media_folder, row_media
from flowrl.resolve import resolve_config


def _folder(tmp_path, rows, files=("a.png", "b.png")):
    for name in files:
        Image.new("RGB", (8, 8), (10, 20, 30)).save(tmp_path / name)
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def _cfg(folder, *extra):
    return resolve_config("tiny-dpo-offline", [f"data.prompts={folder}", *extra])


def test_the_shipped_preference_folder_passes():
    check_media_folder(resolve_config("tiny-dpo-offline", []), "preference")


def test_the_layouts_read():
    assert row_media({"chosen": "a.png", "rejected": "b.png"}, "preference") == ("a.png", "b.png")
    # Pick-a-Pic: label_0 = 1 prefers jpg_0, 0 prefers jpg_1
    assert row_media({"jpg_0": "x", "jpg_1": "y", "label_0": 1}, "preference") == ("x", "y")
    assert row_media({"jpg_0": "x", "jpg_1": "y", "label_0": 0}, "preference") == ("y", "x")
    assert row_media({"image": "a.png"}, "media") == ("a.png",)
    assert row_media({"chosen": "a.png", "rejected": "b.png"}, "media") == ("a.png",)  # SFT on the chosen


@pytest.mark.parametrize(
    "row, message",
    [
        ({"prompt": "p", "chosen": "a.png"}, r"row 2: 'rejected' must be a file path"),
        ({"prompt": "p", "chosen": "a.png", "rejected": "missing.png"}, r"row 2: no such file 'missing.png'"),
        ({"prompt": "p", "chosen": "a.png", "rejected": "bad.png"}, r"row 2: 'bad.png' is not a readable image"),
        ({"prompt": "p", "jpg_0": "a.png", "jpg_1": "b.png", "label_0": 0.5}, r"row 2: 'label_0' is a tie"),
        ({"prompt": "p", "image": "a.png"}, r"row 2: needs 'chosen' and 'rejected'"),
    ],
)
def test_a_bad_row_is_one_line_naming_it(tmp_path, row, message):
    (tmp_path / "bad.png").write_bytes(b"not an image")
    folder = _folder(tmp_path, [{"prompt": "ok", "chosen": "a.png", "rejected": "b.png"}, row])
    with pytest.raises(ConfigError, match=message) as err:
        check_media_folder(_cfg(folder), "preference")
    assert "\n" not in str(err.value) and "train.jsonl" in str(err.value)


def test_a_prompt_list_is_refused_for_a_dataset_method():
    with pytest.raises(ConfigError, match="trains on preference pairs from a dataset folder"):
        check_media_folder(_cfg("builtin:tiny"), "preference")


def test_no_reward_is_allowed_only_for_a_method_that_needs_none():
    assert resolve_config("tiny-dpo-offline", []).reward == {}
    with pytest.raises(ConfigError, match="reward: no reward configured"):
        resolve_config("tiny-dpo-offline", ["method.options.pairs=online", "sample.group_size=4"])
