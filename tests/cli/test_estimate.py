"""The pre-flight estimate: its counts and FLOPs against exact references, its memory against a run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flowrl.config import ConfigError
from flowrl.estimate import (
    CPU_RUNTIME_GIB,
    GIB,
    estimate,
    format_estimate,
    lora_parameter_count,
    model_size,
)
from flowrl.estimate.meta import saved_bytes
from flowrl.estimate.sd3 import sd3_flops_per_row, vae_decode_cost
from flowrl.resolve import resolve_config

pytestmark = pytest.mark.usefixtures("one_thread")


def _narrow_sd35(layers: int = 4, heads: int = 4, side: int = 32):
    """SD3.5-Medium's block structure (qk RMS norm, dual attention in the first half) at a small width."""
    from diffusers import SD3Transformer2DModel

    torch.manual_seed(0)
    return SD3Transformer2DModel(
        sample_size=side,
        patch_size=2,
        in_channels=16,
        out_channels=16,
        num_layers=layers,
        attention_head_dim=32,
        num_attention_heads=heads,
        joint_attention_dim=64,
        caption_projection_dim=heads * 32,
        pooled_projection_dim=32,
        pos_embed_max_size=side // 2,
        qk_norm="rms_norm",
        dual_attention_layers=tuple(range(layers // 2)),
    )


def _inputs(side: int, text: int, rows: int = 1) -> dict:
    return {
        "hidden_states": torch.randn(rows, 16, side, side),
        "encoder_hidden_states": torch.randn(rows, text, 64),
        "pooled_projections": torch.randn(rows, 32),
        "timestep": torch.full((rows,), 500.0),
    }


def test_published_parameter_counts():
    """Built offline from the built-in table: SD3.5-M 2.24B (the "2.5B" model), Large 8.06B; CLIP-L 124M +
    CLIP-G 695M + T5-XXL encoder 4,762M; the SD3 VAE 83.8M."""
    medium = model_size(resolve_config("sd35m-ocr"))
    assert medium.source.startswith("built-in table")
    assert medium.transformer_params == pytest.approx(2.243e9, rel=1e-3)
    assert medium.text_encoder_params == pytest.approx(5.581e9, rel=1e-3)
    assert medium.vae_params == pytest.approx(83.8e6, rel=1e-3)
    # 1024 image tokens at 512 px (latent 64, patch 2) + 77 CLIP + 128 T5 tokens
    assert (medium.image_tokens, medium.text_tokens, medium.hidden, medium.layers) == (1024, 205, 1536, 24)
    from diffusers import SD3Transformer2DModel

    from flowrl.estimate import SD3_TRANSFORMERS

    with torch.device("meta"):
        large = SD3Transformer2DModel.from_config(SD3_TRANSFORMERS["stabilityai/stable-diffusion-3.5-large"])
    assert sum(p.numel() for p in large.parameters()) == pytest.approx(8.057e9, rel=1e-3)


def test_lora_count_matches_peft():
    """r * (in + out) per targeted Linear equals what peft actually adds (tiny preset, tiny-cpu targets)."""
    from peft import LoraConfig

    from flowrl.pipelines.sd3.tiny import build_tiny_sd3_pipeline

    cfg = resolve_config("tiny-cpu")
    transformer = build_tiny_sd3_pipeline(32, "tiny").transformer
    targets = cfg.train.lora.target_modules
    expected = lora_parameter_count(transformer, targets, rank=16)
    transformer.requires_grad_(False)
    transformer.add_adapter(LoraConfig(r=16, lora_alpha=16, target_modules=targets))
    assert expected == sum(p.numel() for p in transformer.parameters() if p.requires_grad) > 0
    assert model_size(cfg).trainable_params == expected
    # by hand: one Linear(4, 8) named attn.to_q, rank 2 -> 2 * (4 + 8) = 24
    m = torch.nn.Module()
    m.attn = torch.nn.Module()
    m.attn.to_q = torch.nn.Linear(4, 8)
    assert lora_parameter_count(m, ["attn.to_q"], 2) == 24 and lora_parameter_count(m, ["to_k"], 2) == 0


@pytest.mark.parametrize("side,text", [(32, 40), (16, 100)])
def test_transformer_flops_formula_is_exact(side, text):
    """2 * weights x tokens (adaLN per sample, context stream per text token) + 4 N^2 D attention equals
    torch's FLOP counter on a real forward (math attention, so QK^T and AV are visible matmuls)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    model = _narrow_sd35()
    with FlopCounterMode(display=False) as counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        model(**_inputs(side, text), return_dict=False)
    assert sd3_flops_per_row(model, (side // 2) ** 2, text) == counter.get_total_flops()


def test_vae_decode_flops_formula_is_exact():
    from diffusers import AutoencoderKL
    from torch.utils.flop_counter import FlopCounterMode

    from flowrl.estimate import SD3_VAE

    vae = AutoencoderKL.from_config(dict(SD3_VAE, block_out_channels=[16, 32, 32, 32], norm_num_groups=8))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        vae.decode(torch.randn(1, 16, 8, 8))
    assert vae_decode_cost(vae, 64)[0] == counter.get_total_flops()


@pytest.mark.parametrize("lora", [False, True])
def test_activation_probe_scales_to_other_widths(lora):
    """The probe runs at width 64; the estimate scales by D. Check against the bytes autograd saves in a
    real forward of a 4x wider model at another token count (SD3.5 block structure, full FT and LoRA)."""
    from flowrl.estimate.sd3 import sd3_probe

    heads, side, text, layers = 8, 32, 48, 4
    model = _narrow_sd35(layers=layers, heads=heads, side=side)
    cfg = resolve_config("tiny-cpu", ["train.lora.rank=8"] if lora else ["train.lora.enabled=false"])
    targets = ["attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0"] if lora else None
    per_row, per_img, per_txt = sd3_probe(dict(model.config), cfg, targets)
    predicted = per_row + heads * 32 / 64 * (per_img * (side // 2) ** 2 + per_txt * text)
    model.requires_grad_(not lora)
    if lora:
        from peft import LoraConfig

        model.add_adapter(LoraConfig(r=8, lora_alpha=8, target_modules=targets))
    measured = saved_bytes(model, _inputs(side, text), None)
    assert predicted == pytest.approx(measured, rel=0.05)


def test_memory_moves_the_right_way():
    base = resolve_config("sd35m-ocr")
    ref = estimate(base, world_size=8, flops=1e15)
    ckpt = estimate(resolve_config("sd35m-ocr", ["train.gradient_checkpointing=true"]), world_size=8, flops=1e15)
    full = estimate(resolve_config("sd35m-ocr", ["train.lora.enabled=false"]), world_size=8, flops=1e15)
    zero2 = estimate(
        resolve_config("sd35m-ocr", ["train.lora.enabled=false"]), world_size=8, flops=1e15, strategy="zero2"
    )
    half_batch = estimate(resolve_config("sd35m-ocr", ["sample.batch_size=4"]), world_size=8, flops=1e15)
    more = estimate(base, world_size=16, flops=1e15)
    assert ckpt.peak_gib < ref.peak_gib < full.peak_gib
    assert zero2.peak_gib < full.peak_gib
    assert half_batch.peak_gib < ref.peak_gib
    assert more.seconds_per_iteration == pytest.approx(ref.seconds_per_iteration / 2, rel=0.01)
    assert ckpt.seconds_per_iteration > ref.seconds_per_iteration  # one more forward per trained step
    # full fine-tuning of 2.24B parameters: fp32 weights + grads + AdamW = 16 bytes each, + DDP bucket
    assert full.memory_gib["AdamW moments"] == pytest.approx(8 * 2.243e9 / 2**30, rel=1e-3)
    text = format_estimate(ref)
    assert "peak memory" in text and "time per iteration" in text and "1024 image + 205 text" in text


def test_unknown_model_offline_names_the_path():
    with pytest.raises(ConfigError, match="model.path='someone/unknown-model'"):
        model_size(resolve_config("sd35m-ocr", ["model.path=someone/unknown-model"]))


def test_local_folder_configs_are_read(tmp_path):
    """A pipeline folder's config.json files are read (here a saved tiny pipeline)."""
    from flowrl.pipelines.sd3.tiny import build_tiny_sd3_pipeline

    build_tiny_sd3_pipeline(32, "tiny").save_pretrained(tmp_path)
    from_folder = model_size(resolve_config("tiny-cpu", [f"model.path={tmp_path}"]))
    preset = model_size(resolve_config("tiny-cpu"))
    assert from_folder.source == f"configs of {tmp_path}"
    for key in ("transformer_params", "text_encoder_params", "vae_params", "text_tokens", "flops_per_row"):
        assert getattr(from_folder, key) == getattr(preset, key), key


_MEASURE = r"""
import json, sys
from flowrl.resolve import resolve_config
from flowrl.estimate import estimate
from flowrl.trainer import Trainer


def high_water_gib():  # this process's peak RSS (ru_maxrss would include the parent's RSS at fork/exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20


common = ["log.save_every=1000", "log.sample_every=1000", "log.monitors=false", "sample.num_steps=2",
          "sample.group_size=2", "sample.prompts_per_iteration=1", "sample.batch_size=2"]
runs = {"tiny": ["sample.num_steps=3"],
        "70m-full": ["model.tiny_size=70m", "model.resolution=16", "train.lora.enabled=false"]}
out = {}
for name, extra in runs.items():
    cfg = resolve_config("tiny-cpu", common + extra + [f"output_dir={sys.argv[1]}/{name}"])
    trainer = Trainer(cfg)
    metrics = [trainer.step(i) for i in range(2 if name == "tiny" else 1)]
    est = estimate(cfg, device="cpu")
    out[name] = {"peak_gib": high_water_gib(), "trainer_peak_gib": metrics[-1]["memory/peak_gib"],
                 "seconds": metrics[-1]["timing_s/iteration"], "est_peak_gib": est.peak_gib,
                 "est_seconds": est.seconds_per_iteration}
    if name == "tiny":  # the runtime baseline: a Trainer built, its (tiny) model a few MB
        out["baseline_gib"] = high_water_gib()
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads the peak RSS from /proc (Linux)")
def test_estimate_matches_measured_cpu_peak(tmp_path):
    """tiny-cpu (LoRA, two iterations) and the 70m preset fully fine-tuned (one), in a fresh process.

    Measured on the CI machine (2 shared cores, one thread), peak RSS (VmHWM): tiny 1.03 GiB measured
    vs 0.95 estimated; 70m full fine-tuning 2.16 vs 2.12 GiB, of which 1.12 vs 1.17 GiB above the
    runtime baseline (fp32 weights + gradients + AdamW = 1.10 GiB of it). Time is looser (tiny 0.11 vs
    0.11 s, 70m 2.8 vs 1.2 s on its first iteration): Python overhead and small matmuls dominate here.
    """
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).parents[2],
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps(r, indent=1))
    baseline = r["baseline_gib"]
    assert baseline == pytest.approx(CPU_RUNTIME_GIB, rel=0.25), "CPU_RUNTIME_GIB no longer matches this runtime"
    for name in ("tiny", "70m-full"):
        assert r[name]["est_peak_gib"] == pytest.approx(r[name]["peak_gib"], rel=0.2), name
        # time is printed, not asserted: this machine's load moves it several-fold
    # what the model adds above the runtime, within a factor 1.3
    grown, predicted = r["70m-full"]["peak_gib"] - baseline, r["70m-full"]["est_peak_gib"] - CPU_RUNTIME_GIB
    assert 1 / 1.3 < predicted / grown < 1.3, (predicted, grown)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads the peak RSS from /proc (Linux)")
def test_estimate_matches_two_cpu_processes():
    """FSDP2 over 2 gloo processes (tiny-cpu with LoRA, the 70m preset fully fine-tuned) and sequence parallelism 2
    (tiny-wan): each process's peak RSS after its iterations within 20 % of the estimate at world size 2, the
    estimate's runtime constant replaced by the runtime measured on this machine (the built tiny Trainer).

    Measured 2026-12-07 (2 cores, one thread a process): estimate / measured 0.97, 0.99 and 0.96 on the machine the
    runtime measured 0.83 GiB; on the CI machine, where it measured 1.07, the estimate's constant runtime had given
    0.91 and 0.79 (docs/scaling.md, "Checked against 2 CPU processes")."""
    from flowrl.benchmarks.perf.parallel_memory import CASES, measure_cases

    results = measure_cases(list(CASES), 2, 29641)
    assert [r["case"] for r in results] == list(CASES), results
    for r in results:
        print(json.dumps(r))
        assert "skipped" not in r, r
        assert 0.8 <= r["ratio"] <= 1.2, r


def test_validate_estimate_cli(capsys):
    from flowrl.cli import main

    assert main(["validate", "tiny-cpu", "--estimate", "--world-size", "2"]) == 0
    out = capsys.readouterr().out
    assert "ok: tiny-cpu is valid" in out
    assert "per process (2 x cpu, ddp): 16 samples/iteration" in out
    assert "peak memory:" in out and "time per iteration:" in out


def test_validate_estimate_cli_refuses_uneven_split(capsys):
    from flowrl.cli import main

    assert main(["validate", "tiny-cpu", "--estimate", "--world-size", "3"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "do not split evenly over 3 processes" in err[0]


# ----------------------------------------------------------------------------------------------------
# FLUX.1, Wan 2.1 / 2.2, Stable Audio 3

# (recipe, overrides) of each family's tiny model as its adapter builds it
TINY_FAMILIES = {
    "flux": ("tiny-flux", []),
    "wan": ("tiny-wan", []),
    "wan-a14b": ("tiny-wan", ["model.path=tiny-a14b"]),
    "stable_audio": ("tiny-audio", []),
}
# the built-in table's published architectures (model.path unreadable offline), at small sample sizes
PUBLISHED = {
    "FLUX.1-dev": (
        "tiny-flux",
        [
            "model.path=black-forest-labs/FLUX.1-dev",
            "model.resolution=512",
            "model.max_sequence_length=512",
            "train.lora.target_modules=null",
        ],
    ),
    "Wan2.1-1.3B": (
        "tiny-wan",
        [
            "model.path=Wan-AI/Wan2.1-T2V-1.3B-Diffusers",
            "model.height=480",
            "model.width=832",
            "model.num_frames=81",
            "model.max_sequence_length=512",
            "train.lora.target_modules=null",
            "sample.batch_size=1",
        ],
    ),
    "Wan2.1-14B": (
        "tiny-wan",
        [
            "model.path=Wan-AI/Wan2.1-T2V-14B-Diffusers",
            "model.resolution=256",
            "model.num_frames=17",
            "train.lora.target_modules=null",
        ],
    ),
    "Wan2.2-A14B": (
        "tiny-wan",
        [
            "model.path=Wan-AI/Wan2.2-T2V-A14B-Diffusers",
            "model.resolution=256",
            "model.num_frames=17",
            "train.lora.target_modules=null",
        ],
    ),
    "SA3-medium": (
        "tiny-audio",
        ["model.path=stabilityai/stable-audio-3-medium", "model.duration_s=null", "train.lora.target_modules=null"],
    ),
}


def _family_cfg(recipe: str, overrides: list[str], *extra: str):
    return resolve_config(recipe, [*overrides, *extra])


@pytest.mark.parametrize("name", list(TINY_FAMILIES) + list(PUBLISHED))
def test_every_family_estimates_offline(name):
    """Each family's tiny model and each published architecture of the built-in table: a finite estimate,
    the family's own tokens and media in the report."""
    recipe, overrides = {**TINY_FAMILIES, **PUBLISHED}[name]
    cfg = _family_cfg(recipe, overrides)
    est = estimate(cfg, device="cpu" if name in TINY_FAMILIES else "cuda", flops=1e14)
    m = est.model
    assert est.peak_gib > 0 and est.seconds_per_iteration > 0 and m.flops_per_row > 0 and m.act_bytes_per_row > 0
    assert m.vae_decode_flops > 0 and m.vae_decode_bytes > 0 and m.rollout_bytes_per_row > 0
    if name in PUBLISHED:
        assert m.source == "built-in table (configs unreadable offline)"
    word = {"flux": "image", "wan": "video", "stable_audio": "audio"}[cfg.model.pipeline]
    assert f"{m.image_tokens} {word} + {m.text_tokens} text" in format_estimate(est)


def test_published_family_parameter_counts():
    """The built-in table, built on meta: FLUX.1-dev 11.90B with CLIP-L + T5-XXL (4.89B) and the 83.8M VAE;
    Wan2.1 1.42B and 14.29B, Wan2.2 A14B two experts of 14.29B, UMT5-XXL 5.68B, the Wan VAE 126.9M; SA3 medium
    1.45B with the T5Gemma-B encoder (0.28B) and SAME-L (107.5M). Tokens: FLUX 1024 image + 512 text at 512 px,
    Wan 21 x 30 x 52 = 32,760 video tokens at 81 x 480 x 832, SA3 10 s = 108 latent frames + 64 memory tokens."""
    flux = model_size(_family_cfg(*PUBLISHED["FLUX.1-dev"]))
    assert (flux.transformer_params, flux.text_encoder_params, flux.vae_params) == (
        11_901_408_320,
        4_885_371_136,
        83_819_683,
    )
    assert (flux.image_tokens, flux.text_tokens, flux.hidden, flux.layers, flux.passes) == (1024, 512, 3072, 57, 1)
    wan = model_size(_family_cfg(*PUBLISHED["Wan2.1-1.3B"]))
    assert (wan.transformer_params, wan.text_encoder_params, wan.vae_params) == (
        1_418_996_800,
        5_680_910_336,
        126_892_531,
    )
    assert (wan.image_tokens, wan.text_tokens, wan.passes, wan.experts) == (32_760, 512, 2, 1)
    assert wan.latent_elems == 16 * 21 * 60 * 104 and wan.media_bytes == 4 * 81 * 3 * 480 * 832
    big = model_size(_family_cfg(*PUBLISHED["Wan2.1-14B"]))
    a14b = model_size(_family_cfg(*PUBLISHED["Wan2.2-A14B"]))
    assert big.transformer_params == 14_288_491_584 and (big.hidden, big.layers) == (5120, 40)
    assert (a14b.experts, a14b.transformer_params, a14b.expert_params) == (2, 2 * 14_288_491_584, 14_288_491_584)
    sa3 = model_size(_family_cfg(*PUBLISHED["SA3-medium"]))
    assert (sa3.transformer_params, sa3.vae_params) == (1_453_170_944, 107_458_096)
    assert sa3.text_encoder_params == pytest.approx(281.8e6, rel=1e-3)  # T5Gemma-B encoder + duration embedder
    assert (sa3.image_tokens, sa3.text_tokens, sa3.passes) == (108 + 64, 257, 1)  # guidance 1: the distilled model


def _lora_of(adapter, cfg) -> int:
    """The LoRA parameters the trainer adds to ``adapter.transformer``, counted after adding them."""
    from flowrl.policy import lora_config

    transformer = adapter.transformer
    transformer.requires_grad_(False)
    transformer.add_adapter(lora_config(cfg.train.lora, adapter.lora_target_modules))
    return sum(p.numel() for p in transformer.parameters() if p.requires_grad)


@pytest.mark.parametrize("name", list(TINY_FAMILIES))
def test_tiny_family_counts_equal_the_built_modules(name):
    """On each tiny model: transformer(s), text encoders, VAE and LoRA parameters equal those of the real
    modules its adapter builds (the LoRA as the trainer adds it); FLOPs of a meta forward equal torch's counter
    on a real CPU forward; tokens and latent elements equal the adapter's layout."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from flowrl.estimate.families import family_inputs
    from flowrl.pipelines.base import adapter_class

    recipe, overrides = TINY_FAMILIES[name]
    cfg = _family_cfg(recipe, overrides)
    m = model_size(cfg)
    adapter = adapter_class(cfg.model.pipeline).from_config(cfg.model)
    pipe = adapter.pipe

    def count(module):
        return sum(p.numel() for p in module.parameters())

    experts = [pipe.transformer] + ([pipe.transformer_2] if getattr(pipe, "transformer_2", None) is not None else [])
    encoders = [
        pipe.components[k]
        for k in ("text_encoder", "text_encoder_2", "duration_embedder")
        if pipe.components.get(k) is not None
    ]
    assert m.transformer_params == sum(count(e) for e in experts)
    assert m.text_encoder_params == sum(count(e) for e in encoders)
    assert m.vae_params == count(pipe.vae)
    assert m.experts == len(experts)
    assert m.latent_elems == math.prod(adapter.initial_noise(1, torch.Generator().manual_seed(0)).shape[1:])
    # FLOPs: the estimate's meta forward (fused attention) against a CPU forward (math attention: visible matmuls)
    grid = {
        "flux": lambda: (cfg.model.resolution // 16,) * 2,
        "wan": lambda: tuple(adapter.latent_shape[1:]),
        "stable_audio": lambda: (adapter.latent_length,),
    }[cfg.model.pipeline]()
    inputs = family_inputs(
        cfg.model.pipeline, pipe.transformer.config, grid, m.text_tokens, torch.device("cpu"), torch.float32
    )
    with FlopCounterMode(display=False) as counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        pipe.transformer(**inputs, return_dict=False)
    assert m.flops_per_row == counter.get_total_flops()
    assert m.trainable_params == _lora_of(adapter, cfg) > 0


def test_family_decode_flops_and_working_set_on_meta_match_the_cpu():
    """The Wan and SAME decoders on meta (fused attention, live bytes tracked per storage) against the same
    decode of real tensors on the CPU: the same FLOPs (attention counted from its shapes) and the same peak."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from flowrl.estimate.families import meta_decode_cost
    from flowrl.estimate.meta import LiveBytes
    from flowrl.pipelines.stable_audio.tiny import build_tiny_stable_audio
    from flowrl.pipelines.wan.tiny import build_tiny_wan

    for pipeline, vae, latent in (
        ("wan", build_tiny_wan().vae, (16, 3, 8, 8)),
        ("stable_audio", build_tiny_stable_audio().vae, (8, 32)),
    ):
        flops, peak = meta_decode_cost(pipeline, json.dumps(dict(vae.config), default=list), latent)
        z = torch.randn(1, *latent)
        with torch.no_grad(), FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
            vae.decode(z, return_dict=False)  # math attention: its matmuls visible to the counter
        with torch.no_grad(), LiveBytes([*vae.parameters(), *vae.buffers(), z]) as live:
            vae.decode(z, return_dict=False)  # the CPU's fused attention kernel, as a GPU's
        assert flops == counter.get_total_flops(), pipeline
        assert peak == live.peak > 0, pipeline


def test_live_bytes_counts_each_storage_once_and_frees():
    from flowrl.estimate.meta import LiveBytes

    x = torch.ones(1024)
    with LiveBytes([x]) as live:
        y = x * 2  # 4 kB
        z = y.view(32, 32)  # a view: no new storage
        del y, z
        w = x + 1  # 4 kB again, after the first was freed
        del w
    assert live.peak == 4096 and live.live == 0


_WIDE = {  # 4x the probe's width, other token counts
    "flux": {
        "num_attention_heads": 4,
        "attention_head_dim": 64,
        "joint_attention_dim": 32,
        "pooled_projection_dim": 32,
        "axes_dims_rope": (16, 24, 24),
        "num_layers": 2,
        "num_single_layers": 3,
    },
    "wan": {"num_attention_heads": 4, "attention_head_dim": 64, "ffn_dim": 512, "text_dim": 32, "num_layers": 3},
    "stable_audio": {"embed_dim": 256, "num_heads": 4, "cond_token_dim": 32, "global_cond_dim": 32, "depth": 3},
}
_WIDE_GRID = {"flux": ((6, 6), 40), "wan": ((2, 12, 12), 40), "stable_audio": ((40,), 40)}


@pytest.mark.parametrize("lora", [False, True])
@pytest.mark.parametrize("name", ["flux", "wan", "stable_audio"])
def test_family_activation_probe_scales_to_other_widths(name, lora):
    """As the SD3 probe test: each family's width-64 probe, scaled by D, against the bytes autograd saves in a
    real forward of a 4x wider copy of its tiny model at other token counts (full FT in fp32; LoRA in bf16
    with bf16 autocast), within the same 5 %."""
    from flowrl.estimate.families import (
        TRANSFORMER_CLASSES,
        family_inputs,
        family_parts,
        family_probe,
        family_width,
        grid_tokens,
    )
    from flowrl.estimate.meta import component
    from flowrl.pipelines.base import adapter_class

    recipe, overrides = TINY_FAMILIES[name]
    precision = (
        ["model.dtype=bf16", "train.mixed_precision=bf16", "train.lora.rank=8"]
        if lora
        else ["train.lora.enabled=false"]
    )
    cfg = _family_cfg(recipe, overrides, *precision)
    pipeline = cfg.model.pipeline
    base = dict(family_parts(pipeline, cfg.model.path, None).experts[0].config)  # the tiny model's config
    wide = {k: v for k, v in {**base, **_WIDE[name]}.items() if not k.startswith("_")}
    targets = list(adapter_class(pipeline).lora_target_modules) if lora else None
    per_row, per_main, per_txt = family_probe(pipeline, wide, cfg, targets)
    torch.manual_seed(0)
    model = component(TRANSFORMER_CLASSES[pipeline], wide)
    weights = torch.bfloat16 if lora else torch.float32
    keep = getattr(model, "_keep_in_fp32_modules", None) or []
    for pname, p in model.named_parameters():
        p.data = p.data.float() if any(k in pname.split(".") for k in keep) else p.data.to(weights)
    model.requires_grad_(not lora)
    if lora:
        from peft import LoraConfig, inject_adapter_in_model

        inject_adapter_in_model(LoraConfig(r=8, lora_alpha=8, target_modules=targets), model)
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.float()
    grid, n_txt = _WIDE_GRID[name]
    width = family_width(pipeline, model.config)[0]
    assert width == 4 * 64
    predicted = per_row + width / 64 * (per_main * grid_tokens(pipeline, model.config, grid) + per_txt * n_txt)
    measured = saved_bytes(
        model,
        family_inputs(pipeline, model.config, grid, n_txt, torch.device("cpu"), weights),
        torch.bfloat16 if lora else None,
    )
    assert predicted == pytest.approx(measured, rel=0.05)


def test_wan_two_experts_weights_resident_optimizer_state_of_the_trained_only():
    """Wan 2.2 A14B: both experts' weights are resident whatever trains; LoRA, AdamW moments and gradients
    are the trained experts' only; the transitions the frozen expert takes run a forward and no backward."""
    recipe, overrides = TINY_FAMILIES["wan-a14b"]
    both = estimate(_family_cfg(recipe, overrides), device="cpu", flops=1e12)
    high = estimate(_family_cfg(recipe, overrides, "model.trained_experts=high_noise"), device="cpu", flops=1e12)
    low = estimate(_family_cfg(recipe, overrides, "model.trained_experts=low_noise"), device="cpu", flops=1e12)
    assert both.model.transformer_params == high.model.transformer_params == 2 * high.model.expert_params
    for one in (high, low):
        assert one.memory_gib["2 experts (frozen)"] == both.memory_gib["2 experts (frozen)"]
        assert one.model.trainable_params * 2 == both.model.trainable_params
        assert one.memory_gib["AdamW moments"] * 2 == pytest.approx(both.memory_gib["AdamW moments"])
        assert one.time_s["update"] < both.time_s["update"]
    # every trained transition of the plan belongs to one expert or the other
    assert high.model.trained_transitions + low.model.trained_transitions == both.model.trained_transitions
    assert high.model.forward_only_transitions == low.model.trained_transitions
    # full fine-tuning of the high-noise expert: it in fp32, the low-noise one frozen at model.dtype
    full = estimate(
        _family_cfg(recipe, overrides, "model.trained_experts=high_noise", "train.lora.enabled=false"),
        device="cpu",
        flops=1e12,
    )
    expert = full.model.expert_params
    assert full.memory_gib["transformer (trainable, fp32)"] == pytest.approx(4 * expert / 2**30)
    assert full.memory_gib["frozen expert"] == pytest.approx(4 * expert / 2**30)  # fp32 model.dtype
    assert full.memory_gib["AdamW moments"] == pytest.approx(8 * expert / 2**30)
    # the published A14B: 2 x 14.29B frozen in bf16, LoRA moments of one expert
    a14b = estimate(
        _family_cfg(*PUBLISHED["Wan2.2-A14B"], "model.trained_experts=high_noise", "model.dtype=bf16"), flops=1e15
    )
    assert a14b.memory_gib["2 experts (frozen)"] == pytest.approx(2 * 2 * 14_288_491_584 / 2**30)
    assert a14b.model.trained_experts == 1 and a14b.model.experts == 2


def test_guidance_passes_follow_the_adapters():
    """Rows per sample and velocity, from each adapter's guidance(): FLUX.1-dev's embedded guidance 1 at any
    scale; Wan CFG 2 (1 at scale 1); Stable Audio 3 CFG only above 1."""

    def passes(name, scale):
        recipe, overrides = TINY_FAMILIES[name]
        return model_size(_family_cfg(recipe, overrides, f"sample.guidance_scale={scale}")).passes

    assert (passes("flux", 3.5), passes("flux", 1.0)) == (1, 1)
    assert (passes("wan", 4.5), passes("wan", 1.0)) == (2, 1)
    assert (passes("stable_audio", 7.0), passes("stable_audio", 1.0), passes("stable_audio", 0.5)) == (2, 1, 1)
    recipe, overrides = TINY_FAMILIES["wan"]
    cfg2 = estimate(_family_cfg(recipe, overrides), device="cpu", flops=1e12)
    cfg1 = estimate(_family_cfg(recipe, overrides, "sample.guidance_scale=1.0"), device="cpu", flops=1e12)
    assert cfg2.flops_per_iteration - cfg2.model.vae_decode_flops * 32 == pytest.approx(
        2 * (cfg1.flops_per_iteration - cfg1.model.vae_decode_flops * 32)
    )


def test_video_states_kept_only_for_trained_transitions():
    """Rollout buffers hold the states Trajectory.trained_only keeps: a window of 2 keeps 3 of T + 1."""
    recipe, overrides = TINY_FAMILIES["wan"]
    every = estimate(_family_cfg(recipe, overrides, "method.options.timestep_fraction=1.0"), device="cpu", flops=1e12)
    window = estimate(_family_cfg(recipe, overrides, "method.options.window_size=2"), device="cpu", flops=1e12)
    state = window.model.latent_elems * 4 * 32 / 2**30
    cond = window.model.cond_elems * 4 * 32 / 2**30
    assert every.memory_gib["rollout buffers"] == pytest.approx(7 * state + cond)  # 6 steps: all 7 states
    assert window.memory_gib["rollout buffers"] == pytest.approx(3 * state + cond)


def test_family_folder_configs_are_read(tmp_path):
    """A saved pipeline folder (here the tiny Wan 2.2 A14B) is read through model_index.json: both experts,
    the boundary from its config, the same counts as the preset's."""
    from flowrl.pipelines.wan.tiny import build_tiny_wan

    build_tiny_wan(two_experts=True).save_pretrained(tmp_path)
    recipe, overrides = TINY_FAMILIES["wan-a14b"]
    extra = ["model.trained_experts=high_noise"]
    from_folder = model_size(_family_cfg(recipe, [f"model.path={tmp_path}"], *extra))
    preset = model_size(_family_cfg(recipe, overrides, *extra))
    assert from_folder.source == f"configs of {tmp_path}" and from_folder.experts == 2
    for key in (
        "transformer_params",
        "text_encoder_params",
        "vae_params",
        "trainable_params",
        "flops_per_row",
        "trained_transitions",
        "forward_only_transitions",
        "latent_elems",
    ):
        assert getattr(from_folder, key) == getattr(preset, key), key


@pytest.mark.parametrize("recipe", ["tiny-flux", "tiny-wan", "tiny-audio"])
def test_validate_estimate_cli_for_every_family(recipe, capsys):
    from flowrl.cli import main

    assert main(["validate", recipe, "--estimate"]) == 0
    out = capsys.readouterr().out
    assert f"ok: {recipe} is valid" in out and "peak memory:" in out and "time per iteration:" in out


# ----------------------------------------------------------------------------------------------------
# LTX-2 (joint audio + video)


def test_ltx2_tiny_counts_and_flops_equal_the_built_modules():
    """On the tiny LTX-2: transformer, Gemma-3 + connectors, both VAEs + vocoder and LoRA parameters equal the
    modules the adapter builds (the LoRA as the trainer adds it); tokens are N_v + L; meta FLOPs equal torch's
    counter on a real CPU forward."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from flowrl.estimate.families import family_inputs
    from flowrl.pipelines.base import adapter_class

    cfg = resolve_config("tiny-ltx2")
    m = model_size(cfg)
    adapter = adapter_class("ltx2").from_config(cfg.model)
    pipe = adapter.pipe

    def count(*modules):
        return sum(p.numel() for mod in modules for p in mod.parameters())

    assert m.transformer_params == count(pipe.transformer)
    assert m.text_encoder_params == count(pipe.text_encoder, pipe.connectors)
    assert m.vae_params == count(pipe.vae, pipe.audio_vae, pipe.vocoder)
    noise = adapter.initial_noise(1, torch.Generator().manual_seed(0))
    assert m.latent_elems == noise["video"][0].numel() + noise["audio"][0].numel()
    assert m.image_tokens == adapter.video_seq_len + adapter.audio_frames
    assert m.text_tokens == cfg.model.max_sequence_length and m.media == "audio+video"
    grid = (adapter.latent_frames, adapter.latent_height, adapter.latent_width, adapter.audio_frames)
    inputs = family_inputs("ltx2", pipe.transformer.config, grid, m.text_tokens, torch.device("cpu"), torch.float32)
    with FlopCounterMode(display=False) as counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        pipe.transformer(**inputs, return_dict=False)
    assert m.flops_per_row == counter.get_total_flops()
    assert m.trainable_params == _lora_of(adapter, cfg) > 0


def test_ltx2_av_grpo_adds_anchor_rollouts_and_trains_every_transition():
    plain = estimate(resolve_config("tiny-ltx2"), device="cpu", flops=1e12)
    av = estimate(resolve_config("tiny-ltx2-av-grpo"), device="cpu", flops=1e12)
    assert av.model.trained_transitions == 6 and av.model.anchor_rollouts and av.model.kl_reference
    assert "anchor trajectories" in av.memory_gib and "anchor trajectories" not in plain.memory_gib
    s = av.model
    # members + one anchor per group, T forwards each
    groups = 4
    assert av.time_s["rollout"] > plain.time_s["rollout"]
    assert av.flops_per_iteration >= (32 + groups) * 6 * s.passes * s.flops_per_row


@pytest.mark.parametrize("recipe", ["tiny-ltx2", "tiny-ltx2-av-grpo", "ltx2-av-grpo", "ltx2-av-grpo-lora"])
def test_ltx2_validate_estimate_offline(recipe, capsys):
    from flowrl.cli import main

    assert main(["validate", recipe, "--estimate"]) == 0
    out = capsys.readouterr().out
    assert "peak memory:" in out and "audio+video" in out


def test_ltx2_published_sizes():
    """The built-in table: LTX2VideoTransformer3DModel's defaults (18.88B), Gemma-3-12B + connectors; full
    fine-tuning with AV-GRPO's KL keeps a frozen copy, LoRA does not; AdamW over every trainable parameter."""
    full = estimate(resolve_config("ltx2-av-grpo"), flops=1e14)
    lora = estimate(resolve_config("ltx2-av-grpo-lora"), flops=1e14)
    assert full.model.transformer_params == 18_876_174_592
    assert full.model.source == "built-in table (configs unreadable offline)"
    assert "KL reference copy" in full.memory_gib and "KL reference copy" not in lora.memory_gib
    assert full.memory_gib["AdamW moments"] * GIB == pytest.approx(8 * full.model.transformer_params)
    assert full.model.image_tokens == 13 * 17 * 30 + 101  # 97 x 544 x 960 at 24 fps


def test_full_fine_tune_under_fsdp_on_a_gpu_is_built_on_the_host():
    """A full fine-tune under FSDP2 on a GPU makes its fp32 weights and reference in host memory
    (policy.builds_on_host): the GPU's start-up phase is the 16-bit pipeline as loaded, not the whole fp32
    model plus its copy, and a note gives the host bytes. On the CPU (the 2-process check) the old phase stays."""
    cfg = resolve_config("ltx2-av-grpo", ["model.text_encoders=device"])
    m = estimate(cfg, 32, "cuda", 1e14, "fsdp").model
    gpu = estimate(cfg, 32, "cuda", 1e14, "fsdp")
    steady = sum(v for k, v in gpu.memory_gib.items() if not k.startswith("peak phase"))
    loaded = (2 * (m.transformer_params + m.text_encoder_params) + 4 * m.vae_params) / GIB
    phases = [k for k in gpu.memory_gib if k.startswith("peak phase")]
    assert phases == ["peak phase: training activations + gradients"]  # below the training peak
    assert steady + gpu.memory_gib[phases[0]] >= loaded
    host = (4 + 2) * m.transformer_params / GIB  # fp32 model + bf16 reference
    assert any(f"({host:.1f} GiB of host memory a process)" in n for n in gpu.notes)
    cpu = estimate(cfg, 2, "cpu", 1e14, "fsdp")
    assert not any("host memory a process" in n for n in cpu.notes)
    lora = estimate(resolve_config("ltx2-av-grpo-lora"), 32, "cuda", 1e14, "fsdp")
    assert not any("host memory a process" in n for n in lora.notes)


def test_builds_on_host_only_for_fsdp2_on_an_accelerator():
    from types import SimpleNamespace

    import torch

    from flowrl.policy import builds_on_host

    def acc(fsdp2, device):
        return SimpleNamespace(is_fsdp2=fsdp2, device=torch.device(device))

    assert builds_on_host(acc(True, "cuda:0"))
    assert not builds_on_host(acc(False, "cuda:0"))  # DDP: the whole model is on every GPU anyway
    assert not builds_on_host(acc(True, "cpu"))  # on a CPU the host is the device


# ----------------------------------------------------------------------------------------------------
# the launch, sequence parallelism, the memory savers and the verdict


def test_sequence_parallel_splits_the_token_activations_and_the_flops():
    """Ulysses over S processes: a data group's S processes hold the group's samples, the token-proportional
    activations and working sets and the FLOPs of each forward 1/S each; the weights whole under DDP."""
    cfg = resolve_config("tiny-wan", [])
    one = estimate(cfg, 1, "cuda", 1e13)
    sp = estimate(cfg, 2, "cuda", 1e13, "ddp", 2)
    assert sp.samples_per_process == one.samples_per_process  # one data group of 2 processes
    assert sp.sequence_parallel == 2 and "sequence parallelism 2" in format_estimate(sp)
    for key in ("transformer (frozen)", "text encoders", "rollout buffers"):
        assert sp.memory_gib[key] == pytest.approx(one.memory_gib[key])
    m = one.model
    rows = min(cfg.sample.batch_size, one.samples_per_process) * 2  # CFG
    act = (m.ckpt_bytes_per_row if cfg.train.gradient_checkpointing else m.act_bytes_per_row) * rows
    train = lambda e: e.memory_gib.get("peak phase: training activations + gradients")  # noqa: E731
    if train(one) is not None and train(sp) is not None:
        assert train(one) - train(sp) == pytest.approx((act + 2 * m.block_bytes_per_row * rows) / 2 / GIB, rel=1e-6)
    assert sp.time_s["update"] < one.time_s["update"]
    decode = one.samples_per_process * m.vae_decode_flops  # every process of a group decodes the group's samples
    assert sp.flops_per_iteration - decode == pytest.approx((one.flops_per_iteration - decode) / 2)
    # 4 processes in 2 groups of 2: each group draws half the samples
    assert estimate(cfg, 4, "cuda", 1e13, "ddp", 2).samples_per_process == one.samples_per_process // 2


def test_sequence_parallel_refusals_are_one_line():
    with pytest.raises(ValueError, match="sequence parallelism 2: model.pipeline=sd3 cannot split a sample yet"):
        estimate(resolve_config("tiny-cpu", []), 2, "cpu", 1e9, "ddp", 2)
    with pytest.raises(ValueError, match="sequence parallelism 4 does not divide the 2 processes"):
        estimate(resolve_config("tiny-wan", []), 2, "cpu", 1e9, "ddp", 4)
    with pytest.raises(ValueError, match="3 does not divide the transformer's 40 attention heads"):
        estimate(resolve_config("wan21-t2v-14b", []), 3, "cuda", 1e13, "fsdp", 3)


def test_fsdp_shards_the_wrapped_transformer_lora_and_ema():
    """FSDP2 shards every parameter of the wrapped transformer (the frozen base with the LoRA), and the EMA is
    kept as shards; the text encoders and the VAE stay whole."""
    cfg = resolve_config("wan21-t2v-1.3b", [])
    ddp, fsdp = estimate(cfg, 8, "cuda", 1e13, "ddp", 1), estimate(cfg, 8, "cuda", 1e13, "fsdp", 1)
    m = ddp.model
    block = 2 * m.transformer_params / m.layers * 2 / GIB  # two gathered blocks, bf16
    assert fsdp.memory_gib["transformer (frozen, 1/8 each)"] == pytest.approx(
        ddp.memory_gib["transformer (frozen)"] / 8 + block
    )
    assert fsdp.memory_gib["LoRA (fp32, 1/8 each)"] == pytest.approx(ddp.memory_gib["LoRA (fp32)"] / 8)
    assert fsdp.memory_gib["EMA (1/8)"] == pytest.approx(ddp.memory_gib["EMA"] / 8)
    assert fsdp.memory_gib["text encoders"] == ddp.memory_gib["text encoders"]


def test_memory_savers_are_modelled_only_where_the_config_has_them():
    from flowrl.estimate.model import SAVERS, available_settings

    cfg = resolve_config("flux2-klein-9b-pickscore", [])
    have = available_settings(cfg)
    assert set(have) <= set(SAVERS)
    base = estimate(cfg, 2, "cuda", 1e13, "fsdp", 2)
    if "train.optimizer" in have:
        eight = estimate(
            resolve_config("flux2-klein-9b-pickscore", ["train.optimizer=adamw_8bit"]), 2, "cuda", 1e13, "fsdp", 2
        )
        assert eight.memory_gib["AdamW moments (8-bit)"] == pytest.approx(base.memory_gib["AdamW moments"] / 4)
    if "model.base_quantization" in have:
        quantized = resolve_config("flux2-klein-9b-pickscore", ["model.base_quantization=int8"])
        q = estimate(quantized, 2, "cuda", 1e13, "ddp", 2)
        plain = estimate(cfg, 2, "cuda", 1e13, "ddp", 2)
        key = "transformer (frozen)"
        assert q.memory_gib[key] == pytest.approx(plain.memory_gib[key] / 2)  # 1 byte for bf16's 2
        with pytest.raises(ValueError, match="FSDP2 cannot shard a quantized base"):
            estimate(quantized, 2, "cuda", 1e13, "fsdp", 2)  # as the Trainer refuses it
    if "train.activation_offload" in have:
        off = estimate(
            resolve_config("flux2-klein-9b-pickscore", ["train.activation_offload=true"]), 2, "cuda", 1e13, "fsdp", 2
        )
        assert off.peak_gib < base.peak_gib
    if "model.text_encoders" in have:
        cached = estimate(
            resolve_config("flux2-klein-9b-pickscore", ["model.text_encoders=cache"]), 2, "cuda", 1e13, "fsdp", 2
        )
        assert "text encoders" not in cached.memory_gib and cached.peak_gib < base.peak_gib


def test_launch_keys_are_checked_in_one_line():
    with pytest.raises(ConfigError, match="launch.strategy: 'deepspeed' is not one of ddp, zero2, fsdp"):
        resolve_config("tiny-cpu", ["launch.strategy=deepspeed"])
    with pytest.raises(ConfigError, match="launch.gpus: must be >= 1, got 0"):
        resolve_config("tiny-cpu", ["launch.gpus=0"])
    with pytest.raises(ConfigError, match="launch.gpus: 6 is not a multiple of train.sequence_parallel=4"):
        resolve_config("tiny-wan", ["launch.gpus=6", "train.sequence_parallel=4"])


def test_validate_estimate_uses_the_declared_launch_and_ends_with_the_verdict(capsys):
    from flowrl.cli import main

    assert main(["validate", "wan21-t2v-14b", "--estimate"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[1] == "launch: 4 GPUs, fsdp, sequence parallelism 4 (the recipe's launch.* keys)"
    assert "per process (4 x cuda, fsdp, sequence parallelism 4): 16 samples/iteration" in out
    assert out[-1].startswith("verdict: fits: ") and "of 80 GiB" in out[-1]
    # a launch that does not fit: the settings that would, each with its peak, in the one last line
    assert main(["validate", "flux2-klein-9b-pickscore", "train.sequence_parallel=1", "--estimate", "--world-size",
                 "8", "--strategy", "ddp"]) == 0  # fmt: skip
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("verdict: does not fit: ") and "; would fit: " in last
    assert "train.sequence_parallel=2 (" in last and "train.gradient_checkpointing=true (" in last


def test_validate_json_is_one_object(capsys):
    from flowrl.cli import main

    assert main(["validate", "wan21-t2v-14b", "--json", "--gpu-memory", "60"]) == 0
    out = capsys.readouterr().out
    assert len(out.strip().splitlines()) == 1
    r = json.loads(out)
    assert {"peak_gib", "seconds_per_iteration", "world_size", "strategy", "sequence_parallel", "gpu_memory_gib",
            "fits"} <= set(r)  # fmt: skip
    assert (r["world_size"], r["strategy"], r["sequence_parallel"], r["gpu_memory_gib"]) == (4, "fsdp", 4, 60.0)
    assert r["fits"] is (r["peak_gib"] <= 57.0) is False  # 64.5 GiB
    assert r["would_fit"] and all(alt["peak_gib"] <= 57.0 for alt in r["would_fit"])  # e.g. activation offload


@pytest.mark.slow
def test_every_published_recipe_fits_its_declared_launch():
    """With its declared launch, each full-size recipe's estimate is at most 76 GiB (80 less 5 %) on at most 8
    GPUs (LTX-2 and Wan 2.2 A14B: up to 32)."""
    from flowrl.config import recipe_names
    from flowrl.estimate import is_tiny
    from flowrl.estimate.verdict import verdict

    for name in recipe_names():
        cfg = resolve_config(name, [])
        if is_tiny(cfg.model) or name.startswith("toy-"):
            continue
        assert cfg.launch.gpus is not None, f"{name}: no launch.gpus"
        assert cfg.launch.gpus <= (32 if name.startswith(("ltx2", "wan22-a14b")) else 8), name
        text = (Path(__file__).parents[2] / "flowrl" / "recipes" / f"{name}.yaml").read_text()
        assert "# Launch (launch.*" in text, f"{name}: the header does not say the launch"
        v = verdict(cfg, flops=1e13)
        assert v.fits, (name, v.estimate.peak_gib)


# ----------------------------------------------------------------------------------------------------
# every shipped recipe's estimate at its declared launch (launch.gpus, launch.strategy, train.sequence_parallel),
# held equal to the recorded text (tests/assets/estimate_golden.txt; the toy recipes' model folders are made on
# first use). Regenerate after a deliberate change: python tests/cli/test_estimate.py --write-golden

GOLDEN = Path(__file__).parents[1] / "assets" / "estimate_golden.txt"
GOLDEN_EXTRA = [  # overrides that reach the branches the recipes leave out
    ("tiny-cpu", ["train.lora.enabled=false", "method.options.beta=0.01", "train.ema=true"], {}),
    ("tiny-cpu", ["train.gradient_checkpointing=true", "method.options.window_size=2"], {}),
    ("tiny-wan", ["model.path=tiny-a14b", "model.trained_experts=low_noise"], {}),
    ("tiny-audio", ["model.path=tiny-base", "sample.guidance_scale=1.0"], {}),
    ("sd35m-pickscore", [], {"world_size": 8, "strategy": "fsdp"}),
    ("sd35m-pickscore", ["train.lora.enabled=false"], {"world_size": 4, "strategy": "zero2"}),
    ("wan22-a14b", [], {"world_size": 8, "strategy": "fsdp"}),
    ("tiny-wan", ["train.sequence_parallel=2"], {"world_size": 2}),
    ("wan21-t2v-14b", [], {"world_size": 8, "strategy": "fsdp", "sequence_parallel": 8}),
    ("flux-dev-pickscore", ["train.gradient_checkpointing=true"], {"world_size": 8}),
    ("ltx2-av-grpo", [], {"world_size": 8, "strategy": "zero2"}),
    (
        "wan21-t2v-1.3b",
        ["train.lora.enabled=false", "train.mixed_precision=bf16"],
        {"world_size": 2, "strategy": "fsdp"},
    ),
]


def _golden_cases() -> list[tuple[str, list[str], dict]]:
    from flowrl.config import recipe_names

    return [(r, [], {}) for r in sorted(recipe_names()) if not r.startswith("toy-")] + GOLDEN_EXTRA


def _golden_blocks() -> dict[str, str]:
    blocks = GOLDEN.read_text().split("=== ")[1:]
    return {b.split("\n", 1)[0]: b.split("\n", 1)[1] for b in blocks}


def _golden_texts(tiny: bool | None):
    """(key, text) of every golden case (``tiny``: only the tiny models', or only the others'; None: all)."""
    from flowrl.estimate import is_tiny
    from flowrl.estimate.verdict import declared_launch

    for name, overrides, kw in _golden_cases():
        key = " ".join([name, *overrides, *(f"--{k.replace('_', '-')} {v}" for k, v in kw.items())])
        cfg = resolve_config(name, overrides)
        if tiny is not None and is_tiny(cfg.model) != tiny:
            continue
        launch = declared_launch(cfg)
        kw = {"world_size": launch.gpus, "strategy": launch.strategy, **kw}
        yield key, format_estimate(estimate(cfg, device="cpu" if is_tiny(cfg.model) else "cuda", flops=1e13, **kw))


def _check_golden(tiny: bool) -> None:
    expected = _golden_blocks()
    assert len(_golden_cases()) == len(expected)
    checked = 0
    for key, text in _golden_texts(tiny):
        assert text + "\n" == expected[key], key
        checked += 1
    assert checked > 5


def test_every_tiny_recipe_estimate_equals_its_recorded_text():
    """format_estimate of every shipped tiny recipe (and the tiny overrides above) at a given FLOP rate, on the
    CPU (as `flowrl validate --estimate` picks for them), equals the recorded text line for line."""
    _check_golden(tiny=True)


@pytest.mark.slow
def test_every_published_recipe_estimate_equals_its_recorded_text():
    """The same for every shipped full-size recipe (and overrides) on CUDA: about a minute of meta forwards."""
    _check_golden(tiny=False)


if __name__ == "__main__" and sys.argv[1:] == ["--write-golden"]:
    GOLDEN.write_text("".join(f"=== {key}\n{text}\n" for key, text in _golden_texts(None)))
