"""model.text_encoders: device | offload | cache (flowrl.pipelines.kit.text_encoders), for every family at once.

On a CPU the device is the CPU, so ``offload``'s moves are checked by the calls its hooks make (each encoder
sent to the adapter's device before its forward and home after it), not by where memory went on a GPU."""

import gc
import weakref

import pytest
import torch

from flowrl.config import ConfigError
from flowrl.pipelines.base import adapter_class
from flowrl.pipelines.kit import text_encoders
from flowrl.resolve import resolve_config
from flowrl.rollout import encode_rows

PROMPTS = ["a red apple on a table", "a photo of a cat", "a blue car in the city"]
# one tiny recipe a family: SD3 (three encoders), Wan (UMT5), FLUX.1 (CLIP and T5)
RECIPES = {"tiny-cpu": 3, "tiny-wan": 1, "tiny-flux": 2}


def _adapter(recipe):
    cfg = resolve_config(recipe, [])
    return adapter_class(cfg.model.pipeline).from_config(cfg.model, seed=cfg.seed)


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_cache_holds_the_same_rows_and_frees_the_encoders(recipe):
    adapter = _adapter(recipe)
    cfg = adapter.guidance(4.5).kind == "cfg"  # FLUX.1's embedded guidance takes no negative prompts
    negatives, all_negatives = (["", PROMPTS[2]], ["", PROMPTS[2], ""]) if cfg else (None, None)
    device_rows = encode_rows(adapter, PROMPTS[:2], negatives)
    adapter = _adapter(recipe)
    names = text_encoders.encoder_names(adapter)
    assert len(names) == RECIPES[recipe]
    alive = [weakref.ref(getattr(adapter.pipe, n)) for n in names]
    assert text_encoders.encoder_bytes(adapter) > 0
    text_encoders.cache_and_free(adapter, lambda: encode_rows(adapter, PROMPTS, all_negatives))
    gc.collect()
    assert all(getattr(adapter.pipe, n) is None for n in names)
    assert all(ref() is None for ref in alive), "an encoder is still referenced somewhere"
    assert text_encoders.encoder_bytes(adapter) == 0
    cache = adapter._cache
    assert isinstance(cache, text_encoders.HostCache) and cache.closed
    assert all(t.device.type == "cpu" for key in cache for t in dict.__getitem__(cache, key).values())
    # a batch of other rows, read back from the cache: bit for bit what the encoders gave
    rows = encode_rows(adapter, PROMPTS[:2], negatives)
    assert rows.keys() == device_rows.keys()
    for key in rows:
        assert torch.equal(rows[key], device_rows[key]), key
    if cfg:
        empty = adapter.negative_conditioning(2)  # CFG's empty negative was encoded before the encoders went
        assert all(v.shape[0] == 2 for v in empty.values())
    with pytest.raises(RuntimeError, match=r"^model.text_encoders=cache: prompt 'a green tree' was not encoded"):
        encode_rows(adapter, ["a green tree"])


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_offload_moves_each_encoder_to_the_device_for_its_forward_and_back(recipe, monkeypatch):
    reference = encode_rows(_adapter(recipe), PROMPTS)
    adapter = _adapter(recipe)
    adapter.device = torch.device("cpu", 0)  # stands for the accelerator: a device other than "cpu" itself
    moves = []
    modules = {id(getattr(adapter.pipe, n)): n for n in text_encoders.encoder_names(adapter)}
    to = torch.nn.Module.to

    def spy(self, *args, **kwargs):
        if id(self) in modules:
            moves.append((modules[id(self)], str(args[0])))
        return to(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "to", spy)
    handles = text_encoders.offload(adapter)
    assert len(handles) == 2 * len(modules)
    assert sorted(moves) == sorted((n, "cpu") for n in modules.values())  # home at once
    moves.clear()
    rows = encode_rows(adapter, PROMPTS)
    # every encoder ran (its hooks fired), each forward between a move to the device and one home
    assert {n for n, _ in moves} == set(modules.values())
    for name in modules.values():
        own = [d for n, d in moves if n == name]
        assert own[0] == "cpu:0" and own[-1] == "cpu" and len(own) % 2 == 0, (name, own)
        assert own == ["cpu:0", "cpu"] * (len(own) // 2)
    for key in rows:
        assert torch.equal(rows[key], reference[key]), key
    moves.clear()
    encode_rows(adapter, PROMPTS)  # all cached: no encoder moves
    assert moves == []


def test_the_key_is_checked_and_does_not_change_the_math():
    from flowrl.config import RESUME_FREE_KEYS

    with pytest.raises(ConfigError, match=r"^model.text_encoders: 'gpu' is not one of device, offload, cache$"):
        resolve_config("tiny-cpu", ["model.text_encoders=gpu"])
    assert "model.text_encoders" in RESUME_FREE_KEYS
    assert resolve_config("tiny-cpu", []).model.text_encoders == "device"


@pytest.mark.slow
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_each_mode_trains_as_device_bit_for_bit(tmp_path, recipe):
    """Two iterations with an evaluation before, between and after: offload and cache give device's metrics
    exactly, and a cache run's pipeline holds no encoder."""
    from flowrl.trainer import Trainer

    def run(mode):
        over = ["train.iterations=2", "sample.num_steps=3", "sample.group_size=4", "sample.prompts_per_iteration=2",
                "sample.batch_size=4", "log.eval_every=1", f"model.text_encoders={mode}", f"output_dir={tmp_path / mode}"]  # fmt: skip
        trainer = Trainer(resolve_config(recipe, over))
        rows = trainer.train()
        skip = ("timing_s/", "throughput/", "memory/")
        return trainer, [{k: v for k, v in r.items() if not k.startswith(skip)} for r in rows]

    _, device = run("device")
    _, offload = run("offload")
    trainer, cache = run("cache")
    assert len(device) >= 2 and any("reward/mean" in r for r in device)
    assert offload == device
    assert cache == device
    assert text_encoders.encoder_bytes(trainer.adapter) == 0
    assert all(getattr(trainer.adapter.pipe, n, None) is None for n in text_encoders.TEXT_ENCODERS)
    # `flowrl sample` on the cache run loads its own encoders: a prompt the run never saw
    from flowrl.cli import main

    out = tmp_path / "sampled"
    assert main(["sample", str(tmp_path / "cache"), "--prompt", "a photo of a dog", "--num", "1", "--steps", "2",
                 "--out", str(out)]) == 0  # fmt: skip
    assert (out / "0001" / "sample.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "recipe",
    ["tiny-qwen-image", "tiny-ltx2", "tiny-z-image", "tiny-flux2", "tiny-audio", "tiny-wan-i2v", "tiny-edit",
     "tiny-qwen-image-edit"],
)  # fmt: skip
def test_cache_serves_every_other_family(recipe):
    """The other tiny families (Qwen-Image's VL encoder, LTX-2's Gemma and connectors, the source-image families'
    rows keyed by their images): their first training rows come back from the cache bit for bit once the encoders
    are freed and collected."""
    from flowrl.data import item_images, load_train_prompts
    from flowrl.pipelines.kit.images import ImageCache

    cfg = resolve_config(recipe, [])
    items, read = load_train_prompts(cfg.data)[:3], ImageCache()

    def encode(adapter):
        return encode_rows(adapter, [it.prompt for it in items], None, item_images(items, read))

    reference = encode(_adapter(recipe))
    adapter = _adapter(recipe)
    names = text_encoders.encoder_names(adapter)
    assert names and ("connectors" in names) == (recipe == "tiny-ltx2")
    alive = [weakref.ref(getattr(adapter.pipe, n)) for n in names]
    text_encoders.cache_and_free(adapter, lambda: encode(adapter))
    gc.collect()
    assert all(ref() is None for ref in alive)
    rows = encode(adapter)
    assert rows.keys() == reference.keys()
    for key in rows:
        assert torch.equal(rows[key], reference[key]), key
