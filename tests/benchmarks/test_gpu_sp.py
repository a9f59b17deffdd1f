"""The GPU script's sequence-parallelism stage (``--what sp``): its arguments, its plan at published sizes (the
configs on the meta device, nothing allocated), the token slice it emulates a process's share with, and a run
of the same code on the tiny models on the CPU."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from flowrl.benchmarks.perf import gpu
from flowrl.benchmarks.perf.gpu import sp

pytestmark = pytest.mark.usefixtures("one_thread")


def test_sp_is_a_stage_with_its_arguments(capsys):
    from flowrl.benchmarks.perf.gpu.runner import STAGES

    assert "sp" in STAGES
    with pytest.raises(SystemExit):
        gpu.main(["--smoke", "--what", "sp", "--sp-families", "wan3"])
    assert "--sp-families: unknown family 'wan3'; choose from wan21-1.3b," in capsys.readouterr().err
    with pytest.raises(SystemExit):
        gpu.main(["--smoke", "--what", "sp", "--sp-degrees", "two"])
    assert "--sp-degrees: 'two' is not a comma-separated list of positive integers" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's refusal")
def test_published_sizes_need_a_gpu(capsys):
    rows = gpu.main(["--what", "sp"])
    assert rows == []
    assert "sp: skipped: the published transformers need a GPU" in capsys.readouterr().out


def test_plan_at_published_sizes():
    """What a GPU run builds, from the configs alone: the published transformers, the recipes' clips and the native
    ones, each S's tokens a process, or why a run refuses that S."""
    plan = sp.sp_plan()
    by = {(p["key"], p["shape"]): p for p in plan}
    assert list(by) == [
        ("wan21-1.3b", "recipe"),
        ("wan21-1.3b", "native"),
        ("wan22-5b", "recipe"),
        ("wan22-5b", "native"),
        ("wan22-a14b", "recipe"),
        ("wan22-a14b", "native"),
        ("wan21-i2v-14b", "recipe"),
        ("wan21-i2v-14b", "native"),
        ("ltx2", "recipe"),
    ]
    params = {k: p["params"] for (k, shape), p in by.items() if shape == "recipe"}
    assert params == {
        "wan21-1.3b": 1_418_996_800,
        "wan22-5b": 4_999_787_712,
        "wan22-a14b": 14_288_491_584,
        "wan21-i2v-14b": 16_394_878_784,
        "ltx2": 18_876_174_592,
    }
    assert all(p["checkpointing"] and p["lora_rank"] == 32 for p in plan)
    assert by["wan22-a14b", "recipe"]["experts"] == 2 and by["wan21-1.3b", "recipe"]["experts"] == 1
    assert {k: (p["video"], p["tokens"]) for k, p in by.items()} == {
        ("wan21-1.3b", "recipe"): ("33x240x416", 9 * 15 * 26),
        ("wan21-1.3b", "native"): ("81x480x832", 21 * 30 * 52),
        ("wan22-5b", "recipe"): ("33x480x832", 9 * 15 * 26),  # the Wan 2.2 VAE's 16x
        ("wan22-5b", "native"): ("121x704x1280", 31 * 22 * 40),
        ("wan22-a14b", "recipe"): ("33x480x832", 9 * 30 * 52),
        ("wan22-a14b", "native"): ("81x480x832", 32_760),
        ("wan21-i2v-14b", "recipe"): ("5x240x240", 2 * 15 * 15),
        ("wan21-i2v-14b", "native"): ("81x480x832", 32_760),
        ("ltx2", "recipe"): ("97x544x960", 13 * 17 * 30 + 101),  # video and audio tokens
    }
    degrees = by["wan21-1.3b", "native"]["degrees"]
    assert [degrees[s] for s in (1, 2, 4)] == [32_760, 16_380, 8_190]
    assert "does not divide the transformer's 12 attention heads" in degrees[8]
    assert "does not divide a row's 3510 tokens" in by["wan21-1.3b", "recipe"]["degrees"][4]
    assert by["wan22-a14b", "native"]["degrees"] == {1: 32_760, 2: 16_380, 4: 8_190, 8: 4_095}
    assert by["wan22-5b", "native"]["degrees"] == {1: 27_280, 2: 13_640, 4: 6_820, 8: 3_410}
    assert by["ltx2", "recipe"]["degrees"][1] == 6731
    assert all(isinstance(v, str) for s, v in by["ltx2", "recipe"]["degrees"].items() if s > 1)


def test_the_slice_is_a_process_share_of_the_tokens():
    """diffusers' context-parallel plan of the Wan transformer, applied locally: the first block sees 1/S of the
    tokens, the output has the whole row's shape (the all-gather's, padded with zeros), the LoRA gets gradients,
    and removing the hooks gives the whole row back."""
    cfg = sp.sp_config(sp.SP_FAMILIES[0], "recipe", smoke=True, precision="fp32")
    model, resident = sp.build_sp_transformer(cfg, torch.device("cpu"), torch.float32)
    assert resident is None and model.is_gradient_checkpointing
    assert any(p.requires_grad for p in model.parameters())
    profile, parts, geo = sp._parts(cfg)
    inputs = profile.inputs(model.config, geo.grid, geo.text_tokens, torch.device("cpu"), torch.float32)
    seen: list[int] = []
    remove = sp._slice_hooks(model, 2, seen)
    out = model(**inputs, return_dict=False)[0]
    assert seen == [geo.main_tokens // 2] and out.shape == inputs["hidden_states"].shape
    f = out.shape[2]
    assert out[:, :, f // 2 :].abs().sum() == 0 and out[:, :, : f // 2].abs().sum() > 0  # the first half's frames
    out.square().mean().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    remove()
    seen.clear()
    whole = model(**inputs, return_dict=False)[0]
    assert seen == [] and whole[:, :, f // 2 :].abs().sum() > 0


def test_the_estimate_beside_it_divides_the_activations():
    """The transformer-alone estimate: weights, LoRA and its gradient whole, one row's activations and the
    two-block transient at 1/S."""
    cfg = SimpleNamespace(
        model=SimpleNamespace(dtype="bf16"),
        train=SimpleNamespace(lora=SimpleNamespace(enabled=True), gradient_checkpointing=True, mixed_precision="bf16"),
    )
    m = SimpleNamespace(
        trainable_params=2 * 2**20,
        trained_experts=2,
        transformer_params=2**30,
        ckpt_bytes_per_row=6 * 2**30,
        act_bytes_per_row=60 * 2**30,
        block_bytes_per_row=2**30,
    )
    static = (2 * 2**30 + 8 * 2**20) / 2**30
    assert [sp.transformer_estimate_gib(cfg, m, s) for s in (1, 2, 4)] == [static + 8, static + 4, static + 2]


def test_smoke_runs_the_tiny_models_end_to_end(tmp_path, capsys):
    out = tmp_path / "sp.json"
    rows = gpu.main(["--smoke", "--what", "sp", "--sp-families", "wan21-1.3b,wan22-a14b,ltx2", "--json", str(out)])
    printed = capsys.readouterr().out
    assert [(r["model"], r["sp"]) for r in rows] == [
        (f"{name} SP", s) for name in ("Wan2.1-T2V-1.3B", "Wan2.2-T2V-A14B", "LTX-2") for s in (1, 2, 4, 8)
    ]
    for r in rows:
        measured = r["refused"] is None
        assert measured == ((r["sp"] in (1, 2) and "Wan" in r["model"]) or r["sp"] == 1)  # the tiny ones' 2 heads
        assert (r["seconds"] > 0) if measured else math.isnan(r["seconds"])
        assert r["est_peak_gib"] > 0 and math.isnan(r["peak_gib"])  # no CUDA allocator on a CPU
    wan = rows[:4]
    assert [r["tokens"] for r in wan] == [64, 32, 16, 8]
    assert wan[0]["est_peak_gib"] > wan[1]["est_peak_gib"]
    assert "does not divide the transformer's 2 attention heads" in wan[2]["refused"]
    assert "does not divide a row's 17 tokens" in rows[9]["refused"]  # LTX-2's tiny clip
    assert "| sequence parallelism (one row, 1/S of its tokens) |" in printed
    assert "Wan2.2-T2V-A14B: 0.00B frozen (both experts resident)" in printed
    assert [r["sp"] for r in json.loads(out.read_text())] == [r["sp"] for r in rows]


def test_smoke_in_bf16_autocast():
    """The GPU run's dtypes (bf16 weights, fp32 LoRA, bf16 autocast, Wan's fp32-kept modules) on the CPU, through
    TI2V-5B's tiny model (the Wan 2.2 VAE's 16x: 16 tokens a row)."""
    from flowrl.benchmarks.perf.gpu.common import Clock

    rows = sp.bench_sp(torch.device("cpu"), Clock(60), "bf16", smoke=True, families=("wan22-5b",), degrees=(1, 2))
    assert [(r["sp"], r["tokens"], r["refused"]) for r in rows] == [(1, 16, None), (2, 8, None)]
    assert all(r["seconds"] > 0 and "bf16" in r["setting"] for r in rows)


def test_the_slice_saves_a_share_of_the_activations():
    """What the slice keeps for backward (without checkpointing, the tiny Wan at 4 x 8 x 8 latent): the bytes that
    grow with the tokens fall with S as 1/S (the text context and the whole input the slices view stay)."""
    from flowrl.estimate.meta import saved_bytes

    family = sp.SP_FAMILIES[0]
    cfg = sp.sp_config(family, "recipe", smoke=True, precision="fp32")
    model, _ = sp.build_sp_transformer(cfg, torch.device("cpu"), torch.float32)
    model.disable_gradient_checkpointing()
    profile, parts, geo = sp._parts(cfg)
    inputs = profile.inputs(model.config, geo.grid, geo.text_tokens, torch.device("cpu"), torch.float32)
    saved = {}
    for s in (1, 2, 4):
        remove = sp._slice_hooks(model, s, []) if s > 1 else (lambda: None)
        saved[s] = saved_bytes(model, inputs, None)
        remove()
    assert saved[1] > saved[2] > saved[4]
    assert (saved[1] - saved[2]) / (saved[2] - saved[4]) == pytest.approx(2.0, rel=0.05)
