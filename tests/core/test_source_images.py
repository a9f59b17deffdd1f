"""Source images of prompt rows (editing, image-to-video): data folders naming them, the one-line refusals before
any model loads, the kit's loader and hash, the prompt cache keyed by the images, and the rollout batch and reward
metadata carrying each row's images."""

import json
from collections import OrderedDict

import numpy as np
import pytest
import torch
from PIL import Image

from flowrl.configkit import ConfigError
from flowrl.data import check_source_images, item_images, load_eval_prompts, load_prompts, with_source_images
from flowrl.pipelines.base import adapter_class, source_images_of
from flowrl.pipelines.kit.images import ImageCache, image_hash, load_image
from flowrl.pipelines.kit.prompts import cached_rows
from flowrl.resolve import resolve_config


def _png(path, value: int, size=(6, 4)):
    Image.fromarray(np.full((*size, 3), value, np.uint8)).save(path)


def _folder(tmp_path, rows: list[dict], images=("a.png", "b.png", "sub/c.png")):
    (tmp_path / "sub").mkdir(exist_ok=True)
    for i, name in enumerate(images):
        _png(tmp_path / name, 40 * (i + 1))
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_a_data_folder_names_images_relative_to_itself(tmp_path):
    folder = _folder(
        tmp_path,
        [
            {"prompt": "make it red", "image": "a.png", "tag": 1},
            {"prompt": "both", "images": ["b.png", "sub/c.png"]},
            {"prompt": "text only"},
        ],
    )
    items = load_prompts(str(folder))
    assert items[0].images == (str((folder / "a.png").resolve()),)
    assert items[1].images == (str((folder / "b.png").resolve()), str((folder / "sub" / "c.png").resolve()))
    assert items[2].images == ()
    assert items[0].metadata == {"tag": 1} and items[1].metadata == {}  # the paths are not metadata


def test_the_shipped_editing_folder_reads_as_a_data_folder():
    cfg = resolve_config("tiny-edit")
    items = load_prompts(cfg.data.prompts)
    assert items and all(len(it.images) == 1 for it in items)
    assert load_eval_prompts(cfg.data)  # its test split
    check_source_images(items, source_images_of(adapter_class("flux_kontext")), "flux_kontext")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"prompt": "p", "image": "missing.png"}, r"row 1 \('p'\): source image '.*missing.png' does not exist"),
        (
            {"prompt": "p", "image": "notes.png"},
            r"row 1 \('p'\): source image '.*notes.png' cannot be read as an image",
        ),
        ({"prompt": "p", "images": ["a.png", "b.png"]}, "row 1 .* names 2 source image.*flux_kontext takes 1 source"),
        ({"prompt": "p"}, "row 1 .* names 0 source image.*flux_kontext takes 1"),
    ],
)
def test_bad_edit_rows_are_one_line_naming_the_row_and_file(tmp_path, row, message):
    folder = _folder(tmp_path, [row])
    (folder / "notes.png").write_text("not an image")
    items = load_prompts(str(folder))
    with pytest.raises(ConfigError, match=message) as err:
        check_source_images(items, source_images_of(adapter_class("flux_kontext")), "flux_kontext")
    assert "\n" not in str(err.value)


def test_a_text_only_family_refuses_rows_with_images_in_one_line(tmp_path):
    items = load_prompts(str(_folder(tmp_path, [{"prompt": "p", "image": "a.png"}])))
    assert source_images_of(adapter_class("flux")) == (0, 0)
    with pytest.raises(ConfigError, match=r"model.pipeline=flux takes no source images \(a text-only family\)"):
        check_source_images(items, (0, 0), "flux")


@pytest.mark.parametrize(("field", "value"), [("image", 3), ("images", "a.png"), ("images", [""])])
def test_a_malformed_image_field_is_one_line(tmp_path, field, value):
    folder = _folder(tmp_path, [{"prompt": "p", field: value}])
    with pytest.raises(ConfigError, match=f"train.jsonl:1: '{field}' must be") as err:
        load_prompts(str(folder))
    assert "\n" not in str(err.value)


def test_validate_refuses_a_missing_image_before_any_model_loads(tmp_path, capsys):
    from flowrl.cli import main

    folder = _folder(tmp_path, [{"prompt": "make it red", "image": "gone.png"}])
    assert main(["validate", "tiny-edit", f"data.prompts={folder}"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gone.png' does not exist" in err[0] and "row 1" in err[0]


def test_a_hugging_face_dataset_names_images_relative_to_its_folder(tmp_path):
    datasets = pytest.importorskip("datasets")
    (tmp_path / "imgs").mkdir()
    _folder(tmp_path / "imgs", [])
    saved = tmp_path / "saved"
    datasets.Dataset.from_dict({"prompt": ["p", "q"], "image": ["../imgs/a.png", None]}).save_to_disk(str(saved))
    items = load_prompts(str(saved))
    assert items[0].images == (str((tmp_path / "imgs" / "a.png").resolve()),) and items[1].images == ()


def test_load_image_hash_and_cache(tmp_path):
    _png(tmp_path / "x.png", 51, size=(3, 5))
    image = load_image(tmp_path / "x.png")
    assert image.shape == (3, 3, 5) and image.dtype == torch.float32
    assert torch.allclose(image, torch.full_like(image, 51 / 255))
    assert image_hash(image) == image_hash(image.clone()) != image_hash(image + 1e-3)
    read = ImageCache(capacity=1)
    assert read([str(tmp_path / "x.png")])[0] is read([str(tmp_path / "x.png")])[0]


def test_the_prompt_cache_keys_rows_by_the_images():
    calls = []

    def encode(prompts, images):
        calls.append(list(prompts))
        return {"x": torch.stack([torch.tensor([float(len(p)), row[0].mean()]) for p, row in zip(prompts, images)])}

    one, two = torch.zeros(3, 2, 2), torch.ones(3, 2, 2)
    cache = OrderedDict()
    rows = cached_rows(cache, 8, ["p", "p", "p"], encode, [[one], [two], [one.clone()]])
    assert calls == [["p", "p"]]  # two distinct (prompt, image) rows, the equal images share one
    assert [r["x"][0, 1].item() for r in rows] == [0.0, 1.0, 0.0]
    cached_rows(cache, 8, ["p"], encode, [[two]])
    assert calls == [["p", "p"]]  # cached


def test_reward_metadata_carries_each_rows_images(tmp_path):
    items = load_prompts(str(_folder(tmp_path, [{"prompt": "a", "image": "a.png"}, {"prompt": "b", "image": "b.png"}])))
    sources = item_images(items, ImageCache())
    metadata = with_source_images([{"group": 0}, {"group": 1}], sources)
    assert [m["group"] for m in metadata] == [0, 1]
    assert torch.equal(metadata[1]["source_images"][0], load_image(tmp_path / "b.png"))
    (tmp_path / "t").mkdir()
    text_only = load_prompts(str(_folder(tmp_path / "t", [{"prompt": "t"}])))
    assert item_images(text_only, ImageCache()) is None  # a text-only batch: nothing to read, None


def test_the_trainer_refuses_bad_edit_rows_before_any_model_loads(tmp_path, monkeypatch):
    from flowrl.pipelines.flux_kontext import FluxKontextAdapter
    from flowrl.trainer import Trainer

    def never(*args, **kwargs):
        raise AssertionError("a model was built")

    monkeypatch.setattr(FluxKontextAdapter, "from_config", classmethod(never))
    (tmp_path / "data").mkdir()
    folder = _folder(tmp_path / "data", [{"prompt": "p"}])
    (folder / "test.jsonl").write_text(json.dumps({"prompt": "q", "image": "gone.png"}) + "\n")
    cfg = resolve_config("tiny-edit", [f"output_dir={tmp_path / 'run'}", f"data.prompts={folder}"])
    with pytest.raises(ConfigError, match=r"^data.prompts: row 1 \('p'\) names 0 source image"):
        Trainer(cfg)
    (folder / "train.jsonl").write_text(json.dumps({"prompt": "p", "image": "a.png"}) + "\n")
    with pytest.raises(ConfigError, match=r"^data.eval_prompts: row 1 \('q'\): source image '.*gone.png' does not"):
        Trainer(cfg)
