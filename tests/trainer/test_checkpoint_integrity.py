"""Checkpoint integrity: checksums in state.json, verification on load, fallback to the newest intact one."""

import json
import logging
import shutil

import pytest
import torch

from flowrl import checkpoint as ckpt

FILES = ["trainable.safetensors", "optimizer.safetensors", "ema.safetensors", "rng-rank0.safetensors"]


def _save(root, iteration: int):
    """A real checkpoint: tiny tensors, an AdamW that has stepped once, EMA."""
    torch.manual_seed(iteration)
    params = {
        "block.lora_A.default.weight": torch.nn.Parameter(torch.randn(4, 8)),
        "block.lora_B.default.weight": torch.nn.Parameter(torch.randn(8, 4)),
    }
    opt = torch.optim.AdamW(list(params.values()), lr=1e-3)
    sum((p**2).sum() for p in params.values()).backward()
    opt.step()
    ema = {k: v.detach().clone() for k, v in params.items()}
    return ckpt.save_checkpoint(root, iteration, params, opt, ema=ema, extra={"optimizer_steps": 1})


def _flip_byte(path, at: int = -1):
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def test_state_records_size_and_sha256_of_every_file(tmp_path):
    path = _save(tmp_path, 2)
    files = json.loads((path / "state.json").read_text())["files"]
    assert sorted(files) == sorted(FILES)
    for name, rec in files.items():
        assert rec["bytes"] == (path / name).stat().st_size
        assert rec == ckpt.file_checksum(path / name)
    state = ckpt.load_checkpoint(path)
    assert state["iteration"] == 2 and set(state["trainable"]) == {
        "block.lora_A.default.weight",
        "block.lora_B.default.weight",
    }


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("damage", ["flip", "flip_header", "truncate", "delete"])
def test_damage_is_named_and_latest_falls_back(tmp_path, caplog, name, damage):
    root = tmp_path / "checkpoints"
    _save(root, 2)
    newest = _save(root, 4)
    target = newest / name
    if damage == "flip":
        _flip_byte(target)
    elif damage == "flip_header":
        _flip_byte(target, 10)
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[:-7])
    else:
        target.unlink()
    expected = {
        "flip": "is corrupt or truncated (checksum mismatch)",
        "flip_header": "checksum mismatch",
        "truncate": "is corrupt or truncated (",
        "delete": "is missing",
    }[damage]
    with pytest.raises(ckpt.CheckpointError) as info:
        ckpt.load_checkpoint(newest)
    assert str(info.value).startswith(f"checkpoint {newest}: {name} ")
    assert expected in str(info.value)
    assert len(str(info.value).splitlines()) == 1

    path, skipped = ckpt.latest_intact_checkpoint(root)
    assert path.name == "iter-000002" and len(skipped) == 1 and name in skipped[0]
    with caplog.at_level(logging.WARNING, logger="flowrl.checkpoint"):
        assert ckpt.latest_checkpoint(root).name == "iter-000002"
    assert f"iter-000004: {name}" in caplog.text


def test_invalid_state_json_is_named(tmp_path):
    root = tmp_path / "checkpoints"
    _save(root, 1)
    newest = _save(root, 2)
    (newest / "state.json").write_text('{"iteration": 2, "optim')
    with pytest.raises(ckpt.CheckpointError, match=r"iter-000002: state.json is corrupt or truncated \(not valid JSON"):
        ckpt.load_checkpoint(newest)
    assert ckpt.latest_checkpoint(root).name == "iter-000001"


def test_nothing_intact_gives_none_and_every_reason(tmp_path):
    root = tmp_path / "checkpoints"
    for it in (1, 2):
        _flip_byte(_save(root, it) / "trainable.safetensors")
    path, skipped = ckpt.latest_intact_checkpoint(root)
    assert path is None and [s.split(":")[0] for s in skipped] == [
        f"checkpoint {root / 'iter-000002'}",
        f"checkpoint {root / 'iter-000001'}",
    ]


def test_checkpoints_without_checksums_still_load(tmp_path):
    path = _save(tmp_path, 3)
    state = json.loads((path / "state.json").read_text())
    del state["files"]
    (path / "state.json").write_text(json.dumps(state))
    assert ckpt.load_checkpoint(path)["iteration"] == 3
    assert ckpt.latest_checkpoint(tmp_path) == path


def test_prune_never_deletes_the_newest_intact_checkpoint(tmp_path):
    root = tmp_path / "checkpoints"
    for it in (1, 2, 3, 4):
        _save(root, it)
    for it in (3, 4):
        _flip_byte(root / ckpt.checkpoint_name(it) / "optimizer.safetensors")
    ckpt.prune_checkpoints(root, keep_last=1)
    # iter-2 is the newest intact one: kept, with the damaged newer ones; iter-1 goes
    assert [p.name for p in ckpt.list_checkpoints(root)] == ["iter-000002", "iter-000003", "iter-000004"]
    ckpt.prune_checkpoints(root, keep_last=1)
    assert ckpt.latest_checkpoint(root).name == "iter-000002"
    # once a newer intact checkpoint is written, the old ones are pruned as usual
    _save(root, 5)
    ckpt.prune_checkpoints(root, keep_last=1)
    assert [p.name for p in ckpt.list_checkpoints(root)] == ["iter-000005"]


def test_prune_with_all_intact_is_unchanged(tmp_path):
    for it in (1, 2, 3):
        _save(tmp_path, it)
    ckpt.prune_checkpoints(tmp_path, keep_last=2)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["iter-000002", "iter-000003"]


def test_a_copied_checkpoint_verifies_in_its_new_place(tmp_path):
    path = _save(tmp_path / "a", 1)
    copy = shutil.copytree(path, tmp_path / "b" / path.name)
    assert ckpt.verify_checkpoint(copy)["iteration"] == 1


# ------------------------------------------------------------------------------------------ tensors vs model
LORA = {
    "blocks.0.attn.to_q.lora_A.default.weight": torch.zeros(4, 32),
    "blocks.0.attn.to_q.lora_B.default.weight": torch.zeros(32, 4),
}


def test_matching_tensors_pass():
    ckpt.check_trainable_against(dict(LORA), dict(LORA), "runs/x/checkpoints/iter-000004")


def test_lora_shape_mismatch_names_tensor_shapes_and_rank():
    params = {k: torch.zeros(8, 32) if "lora_A" in k else torch.zeros(32, 8) for k in LORA}
    with pytest.raises(ckpt.CheckpointError) as info:
        ckpt.check_trainable_against(LORA, params, "runs/x/checkpoints/iter-000004")
    assert str(info.value) == (
        "checkpoint runs/x/checkpoints/iter-000004: tensor 'blocks.0.attn.to_q.lora_A.default.weight' has shape "
        "(4, 32) in the checkpoint but (8, 32) in the model; check train.lora.rank"
    )


def test_missing_and_extra_lora_tensors_point_at_target_modules():
    more = {**LORA, "blocks.0.attn.to_k.lora_A.default.weight": torch.zeros(4, 32)}
    with pytest.raises(
        ckpt.CheckpointError,
        match=r"lacks 1 of the model's trainable tensors \(e.g. "
        r"'blocks.0.attn.to_k.lora_A.default.weight'\); check train.lora.target_modules",
    ):
        ckpt.check_trainable_against(LORA, more, "c")
    with pytest.raises(ckpt.CheckpointError, match=r"holds 1 tensors the model does not train .*target_modules"):
        ckpt.check_trainable_against(more, LORA, "c")


def test_full_weight_mismatches_point_at_the_model_and_lora_switch():
    full = {"proj_out.weight": torch.zeros(16, 32)}
    with pytest.raises(
        ckpt.CheckpointError,
        match=r"'proj_out.weight' has shape \(16, 32\) in the checkpoint but "
        r"\(16, 64\) in the model; check model.path",
    ):
        ckpt.check_trainable_against(full, {"proj_out.weight": torch.zeros(16, 64)}, "c")
    with pytest.raises(
        ckpt.CheckpointError, match="holds full-weight tensors but the model trains LoRA ones; check train.lora.enabled"
    ):
        ckpt.check_trainable_against(full, LORA, "c")


def test_a_failed_write_leaves_no_partial_folder_and_says_so(tmp_path, monkeypatch):
    import errno

    _save(tmp_path, 1)
    real = ckpt.save_file

    def full(tensors, path, *args, **kwargs):
        if "optimizer" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(tensors, path, *args, **kwargs)

    monkeypatch.setattr(ckpt, "save_file", full)
    with pytest.raises(ckpt.CheckpointError) as info:
        _save(tmp_path, 2)
    assert str(info.value) == (
        f"checkpoint {tmp_path}/iter-000002: could not be written (No space left on device); the partial folder "
        f"was removed and the earlier ones are intact (newest: iter-000001); free space under {tmp_path} and "
        "continue with resume=latest"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter-000001"]
    ckpt.verify_checkpoint(tmp_path / "iter-000001")
