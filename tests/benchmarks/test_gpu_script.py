"""The GPU benchmark script (its --smoke run, and its full-size models built on meta) and the shipped
accelerate launch configs."""

from __future__ import annotations

import importlib
import json
from importlib import resources

import pytest
import torch
import yaml

from flowrl.benchmarks.perf import gpu

pytestmark = pytest.mark.usefixtures("one_thread")


def test_smoke_runs_and_prints_a_table(tmp_path, capsys):
    out = tmp_path / "rows.json"
    rows = gpu.main(["--smoke", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "| model | setting | s | images/s | peak GiB | estimate s | estimate peak GiB |" in printed
    assert [r["model"].split(" ")[0] for r in rows] == ["SD3.5-M"] * 3 + ["Wan2.1-1.3B"] * 4
    assert rows[-1]["model"] == "Wan2.1-1.3B (flowrl iteration)"  # after the transformer alone
    assert [r["model"] for r in rows[1:3]] == ["SD3.5-M rollout overhead", "SD3.5-M update overhead"]
    assert all(r["ratio"] > 0 and r["seconds"] > 0 and r["bare_seconds"] > 0 for r in rows[1:3])  # pairs' median
    assert "| side by side | flowrl s | bare s | flowrl / bare |" in printed
    sd3 = rows[0]
    assert sd3["seconds"] > 0 and sd3["images_per_s"] > 0 and sd3["est_peak_gib"] > 0
    assert sd3["onpolicy_logp_diff"] == 0.0  # fp32 on CPU: the update recomputes the rollout's log-probs
    assert all(r["seconds"] > 0 for r in rows[3:])
    assert json.loads(out.read_text())[0]["model"] == sd3["model"]


@pytest.fixture
def fresh_accelerate_state():
    """accelerate keeps one process-wide state, fixed by the first Accelerator (mixed_precision included)."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def test_smoke_in_bf16_autocast(fresh_accelerate_state):
    """The GPU run's dtype plumbing (16-bit weights, fp32 LoRA, autocast through accelerate, Wan's
    fp32-kept modules), here in bf16 on the CPU."""
    rows = gpu.main(
        ["--smoke", "--precision", "bf16", "--iterations", "1", "--repeats", "1", "--overhead-repeats", "0"]
    )
    assert "bf16" in rows[0]["setting"] and rows[0]["seconds"] > 0
    assert all(r["seconds"] > 0 for r in rows[1:])


def test_full_sizes_are_the_published_architectures():
    """What the GPU run builds, built here on meta: SD3.5-Medium's 2.24B transformer with CLIP-L, CLIP-G
    and the T5-XXL encoder; Wan2.1-T2V-1.3B's 1.42B transformer; the video latent of 81 x 480 x 832."""
    from diffusers import WanTransformer3DModel

    pipe = gpu.build_sd35m(gpu.FULL, torch.device("meta"), torch.float16)

    def count(module):
        return sum(p.numel() for p in module.parameters())

    assert count(pipe.transformer) == pytest.approx(2.243e9, rel=1e-3)
    assert [round(count(m) / 1e6) for m in (pipe.text_encoder, pipe.text_encoder_2, pipe.text_encoder_3)] == [
        124,
        695,
        4762,
    ]
    assert pipe.transformer.dtype == torch.float16 and pipe.vae.dtype == torch.float32
    with torch.device("meta"):
        wan = WanTransformer3DModel(**gpu.WAN21_1_3B)
    assert count(wan) == pytest.approx(1.419e9, rel=1e-3)
    assert gpu.wan_latent(gpu.FULL.wan_video) == (21, 60, 104)  # 21 * 30 * 52 = 32,760 tokens


# ----------------------------------------------------------------------------------------------------
# accelerate launch configs

EXPECTED = {"ddp.yaml": "MULTI_GPU", "fsdp.yaml": "FSDP", "deepspeed_zero2.yaml": "DEEPSPEED"}


def _configs():
    folder = resources.files("flowrl") / "recipes" / "accelerate"
    return sorted((p.name, p) for p in folder.iterdir() if p.name.endswith(".yaml"))


def test_every_expected_accelerate_config_ships():
    assert {name for name, _ in _configs()} >= set(EXPECTED)


@pytest.mark.parametrize("name,path", _configs(), ids=[n for n, _ in _configs()])
def test_accelerate_config_is_a_valid_launch_config(name, path):
    """Plain YAML with the expected distributed_type, and accepted by accelerate's own loader (which
    refuses unknown keys), as `accelerate launch --config_file` reads it."""
    from accelerate.commands.config.config_args import load_config_from_file

    data = yaml.safe_load(path.read_text())
    assert data["distributed_type"] == EXPECTED[name]
    assert data["mixed_precision"] == "no"  # flowrl passes train.mixed_precision to Accelerator
    loaded = load_config_from_file(str(path))
    assert loaded.distributed_type.value == EXPECTED[name]
    if name == "fsdp.yaml":
        fsdp = data["fsdp_config"]
        assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_reshard_after_forward"] is True  # FULL_SHARD
        assert fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
        # no class named: accelerate wraps the model's _no_split_modules, the blocks of each model family
        assert "fsdp_transformer_layer_cls_to_wrap" not in fsdp
        from diffusers import SD3Transformer2DModel, WanTransformer3DModel

        assert SD3Transformer2DModel._no_split_modules == ["JointTransformerBlock"]
        assert WanTransformer3DModel._no_split_modules == ["WanTransformerBlock"]
    if name == "deepspeed_zero2.yaml":
        assert data["deepspeed_config"]["zero_stage"] == 2


def test_recipe_listing_ignores_the_accelerate_folder():
    from flowrl.config import recipe_names

    assert "accelerate" not in recipe_names() and "ddp" not in recipe_names()


def test_smoke_measures_one_iteration_of_every_method(capsys):
    from flowrl.methods import list_methods

    rows = gpu.main(["--smoke", "--what", "methods"])
    names = ["flow_grpo"] + [m for m in list_methods("image") if m != "flow_grpo"]
    assert [r["model"] for r in rows] == [f"SD3.5-M method {m}" for m in names]
    assert all(r["seconds"] > 0 and r["nfe"] > 0 for r in rows)
    # every method scores its samples but SFT, which learns from a dataset with no reward
    assert [r["model"] for r in rows if r["reward_calls"] == 0] == ["SD3.5-M method sft"]
    assert rows[0]["vs_flow_grpo"] == 1.0
    assert "| method iteration | setting | s | vs flow_grpo |" in capsys.readouterr().out


@pytest.mark.slow
def test_smoke_compares_attention_backends_and_compile(capsys):
    """--what attention: today's path, each backend that runs here (on a CPU: native; a CUDA-only one is
    skipped with a note), torch.compile with today's attention and with the fastest backend."""
    rows = gpu.main(["--smoke", "--what", "attention", "--attention-backends", "native,_native_cudnn"])
    printed = capsys.readouterr().out
    assert [r["model"] for r in rows] == [
        f"SD3.5-M attention {label}" for label in ("today", "native", "compile", "native + compile")
    ]
    assert [(r["attention"], r["compile"]) for r in rows] == [
        ("default", False),
        ("native", False),
        ("default", True),
        ("native", True),
    ]
    assert "attention _native_cudnn: skipped (model.attention_backend='_native_cudnn' cannot run on this cpu" in printed
    assert rows[0]["vs_today"] == 1.0 and all(r["vs_today"] == r["seconds"] / rows[0]["seconds"] for r in rows)
    assert all(r["seconds"] > 0 and r["first_seconds"] > 0 for r in rows)
    # fp32 on a CPU: every variant's update recomputes its rollout's log-probs
    assert all(r["onpolicy_logp_diff"] <= r["onpolicy_tol"] for r in rows)
    assert "| attention / compile | setting | s | vs today | first iteration s | on-policy log-prob gap |" in printed


# ----------------------------------------------------------------------------------------------------
# FLUX.1-dev, Wan2.1 and Stable Audio 3 iterations through the Trainer


def _adapter_importable(module: str) -> str | None:
    """None when ``flowrl.pipelines.<module>`` imports, else why not (the skip reason)."""
    try:
        importlib.import_module(f"flowrl.pipelines.{module}")
    except ImportError as exc:
        return f"flowrl.pipelines.{module} cannot be imported yet ({exc})"
    return None


@pytest.mark.parametrize(
    "what,model,module",
    [
        ("flux", "FLUX.1-dev (flowrl iteration)", "flux"),
        ("wan", "Wan2.1-1.3B (flowrl iteration)", "wan"),
        ("audio", "SA3-medium (flowrl iteration)", "stable_audio"),
        ("ltx2", "LTX-2 (AV-GRPO) (flowrl iteration)", "ltx2"),
        ("flux_kontext", "FLUX.1-Kontext-dev (flowrl iteration)", "flux_kontext"),
    ],
)
def test_smoke_family_iteration_next_to_its_estimate(what, model, module, capsys):
    """--what flux / wan / audio on the tiny models: one row of a flowrl iteration through the family's adapter
    (seconds, samples/s, peak) beside the estimate of the same config."""
    reason = _adapter_importable(module)
    if reason:
        pytest.skip(reason)
    rows = gpu.main(["--smoke", "--what", what, "--iterations", "2", "--repeats", "1"])
    family = [r for r in rows if r["model"] == model]
    assert len(family) == 1, [r["model"] for r in rows]
    r = family[0]
    assert r["seconds"] > 0 and r["images_per_s"] > 0 and r["peak_gib"] > 0
    assert r["est_seconds"] > 0 and r["est_peak_gib"] > 0 and set(r["est_phases"]) == {"rollout", "decode", "update"}
    assert r["samples"] == 2 and r["images_per_s"] == pytest.approx(2 / r["seconds"])
    assert f"| {model} | tiny model (--smoke); fp32 |" in capsys.readouterr().out


def test_unknown_stage_is_refused(capsys):
    with pytest.raises(SystemExit):
        gpu.main(["--smoke", "--what", "fluxx"])
    assert "--what: unknown stage 'fluxx'" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["flux", "wan", "stable_audio", "flux_kontext"])
def test_family_full_sizes_are_the_published_architectures(name, tmp_path):
    """What --what flux / wan / audio build on the GPU, built here on meta: the estimate's published tables
    (FLUX.1-dev 11.90B with CLIP-L + T5-XXL; Wan2.1-1.3B 1.42B with UMT5-XXL; SA3 medium 1.45B with T5Gemma-B),
    the transformer and encoders in bf16, the VAE in fp32; its saved configs give the estimate the same counts
    as the built-in table, and the run's config the stated settings."""
    from flowrl.estimate import model_size

    pipe = gpu.build_family(name, gpu.FULL, torch.device("meta"), torch.bfloat16)

    def count(module):
        return sum(p.numel() for p in module.parameters())

    expected = {
        "flux": (11_901_408_320, 4_885_371_136),
        "flux_kontext": (11_901_408_320, 4_885_371_136),  # FLUX.1-dev's architecture
        "wan": (1_418_996_800, 5_680_910_336),
        "stable_audio": (1_453_170_944, 281_777_664),
    }[name]
    encoders = [
        pipe.components[k]
        for k in ("text_encoder", "text_encoder_2", "duration_embedder")
        if pipe.components.get(k) is not None
    ]
    assert (count(pipe.transformer), sum(count(m) for m in encoders)) == expected
    assert pipe.transformer.dtype == torch.bfloat16 and pipe.vae.dtype == torch.float32
    gpu.save_family_configs(pipe, tmp_path)
    cfg = gpu.family_config(name, gpu.FULL, tmp_path, 2, "bf16")
    m = model_size(cfg)
    assert m.source == f"configs of {tmp_path}"
    assert (m.transformer_params, m.text_encoder_params) == expected
    assert (cfg.model.dtype, cfg.train.mixed_precision) == ("bf16", "bf16")
    if name == "wan":
        assert (m.image_tokens, cfg.train.gradient_checkpointing, cfg.sample.guidance_scale) == (32_760, True, 4.5)
    if name == "flux":
        assert (m.image_tokens, m.passes, cfg.sample.num_steps) == (1024, 1, 6)
    if name == "flux_kontext":  # the source image's 1,024 packed tokens after the generated ones
        assert (m.image_tokens, m.passes, cfg.train.gradient_checkpointing) == (2048, 1, True)
    if name == "stable_audio":
        assert (m.image_tokens, m.passes) == (108 + 64, 1)


def test_ltx2_full_size_is_the_published_architecture(tmp_path):
    """What --what ltx2 builds on the GPU, built here on meta: the estimate's table (18.88B transformer), its
    saved configs read back by the estimate with the same counts, and the stage's AV-GRPO settings."""
    from flowrl.estimate import model_size

    pipe = gpu.build_family("ltx2", gpu.FULL, torch.device("meta"), torch.bfloat16)
    assert sum(p.numel() for p in pipe.transformer.parameters()) == 18_876_174_592
    assert pipe.transformer.dtype == torch.bfloat16 and pipe.vae.dtype == torch.float32
    gpu.save_family_configs(pipe, tmp_path)
    cfg = gpu.family_config("ltx2", gpu.FULL, tmp_path, 1, "bf16")
    m = model_size(cfg)
    assert m.source == f"configs of {tmp_path}" and m.transformer_params == 18_876_174_592
    assert cfg.method.name == "av_grpo" and cfg.train.gradient_checkpointing and cfg.train.lora.rank == 32
    assert m.image_tokens == 7 * 16 * 24 + 51 and m.anchor_rollouts
