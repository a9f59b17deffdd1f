"""The ltx2 adapter (pipelines/ltx2/) on the tiny offline LTX-2 (32x32 px, 9 frames): latents as a mapping
{"video", "audio"} of the loop's packed tokens, the cached connector rows, the transformer rows of each guidance
option, the pipeline's sigmas, the noise-free Euler ODE on both modalities reproducing LTX2Pipeline (unguided,
CFG, and CFG + STG + modality guidance), decode / generate as the pipeline's, the towers' module groups, the LoRA
LTX2Pipeline loads, and the refusals."""

import pytest
import torch

from flowrl.config import ModelConfig
from flowrl.media import media_kind
from flowrl.pipelines.base import adapter_class, list_pipelines
from flowrl.pipelines.ltx2.adapter import (
    CONDITION_KEYS,
    LTX2_LORA_TARGETS,
    LTX2_UNGUIDED_CALL_KWARGS,
    LTX2Adapter,
    tower_of,
)
from flowrl.pipelines.ltx2.tiny import build_tiny_ltx2
from ltx2_towers import AUDIO_TO_VIDEO_ATTN, AUDIO_TOWER, AV_CROSS_MODULATION, VIDEO_TO_AUDIO_ATTN, VIDEO_TOWER
from spies import record_calls

PROMPTS = ["a red cat", "a blue dog"]
TEXT_LEN = 128  # a multiple of the connectors' 128 registers
H = W = 32
FRAMES = 9  # two latent frames, 9 audio latent frames at 24 fps
N_V, L_A = 2, 9


pytestmark = pytest.mark.usefixtures("no_network", "one_thread")  # offline, one thread for toy-sized ops


def _model(**overrides):
    kwargs = {
        "pipeline": "ltx2",
        "path": "tiny",
        "height": H,
        "width": W,
        "num_frames": FRAMES,
        "max_sequence_length": TEXT_LEN,
    }
    return ModelConfig(**{**kwargs, **overrides})


@pytest.fixture(scope="module")
def adapter():
    return adapter_class("ltx2").from_config(_model(), seed=0)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _pipe_call(pipe, num_steps, output_type="latent", seed=0, prompts=PROMPTS, **guidance):
    kwargs = dict(LTX2_UNGUIDED_CALL_KWARGS)
    kwargs.update(guidance)
    return pipe(
        prompt=list(prompts),
        height=H,
        width=W,
        num_frames=FRAMES,
        num_inference_steps=num_steps,
        max_sequence_length=TEXT_LEN,
        output_type=output_type,
        generator=_gen(seed),
        **kwargs,
    )


@torch.no_grad()
def _ode(a, prompts, num_steps, guidance_scale, seed=0):
    """The noise-free Euler ODE over ``a.sigmas(T)`` on both modalities, from ``initial_noise``."""
    sigmas = a.sigmas(num_steps)
    x = a.initial_noise(len(prompts), _gen(seed))
    inputs = a.model_inputs(a.encode_prompts(list(prompts)), guidance_scale)
    for s, s_next in zip(sigmas[:-1].tolist(), sigmas[1:].tolist()):
        v = a.velocity(x, s, inputs, guidance_scale)
        x = {m: x[m] + (s_next - s) * v[m] for m in ("video", "audio")}
    return x


# ---------------------------------------------------------------------------------------------------- the basics
def test_registered_and_estimate_stand_in():
    assert "ltx2" in list_pipelines() and adapter_class("ltx2") is LTX2Adapter
    assert LTX2Adapter.media_kind == "audio_video" and LTX2Adapter.modalities == ("video", "audio")
    # flowrl.estimate calls guidance on a stand-in without the adapter's options: plain CFG
    assert LTX2Adapter.guidance(object(), 3.0).passes == 2 and LTX2Adapter.guidance(object(), 1.0).passes == 1
    from diffusers import LTX2Pipeline

    assert callable(getattr(LTX2Pipeline, "load_lora_weights", None))


def test_latents_noise_and_sigmas_are_the_pipelines(adapter):
    a = adapter
    assert a.latent_shapes == {"video": (N_V, 128), "audio": (L_A, 128)}
    x = a.initial_noise(2, _gen(3))
    assert set(x) == {"video", "audio"}
    assert x["video"].shape == (2, N_V, 128) and x["audio"].shape == (2, L_A, 128)
    assert x["video"].dtype == x["audio"].dtype == torch.float32
    # the pipeline's draws: video (B, 128, F', H', W') then audio (B, 8, L, 16), packed, not normalised
    g = _gen(3)
    video = torch.randn(2, 128, 2, 1, 1, generator=g)
    audio = torch.randn(2, 8, L_A, 16, generator=g)
    assert torch.equal(x["video"], a.pipe._pack_latents(video))
    assert torch.equal(x["audio"], a.pipe._pack_audio_latents(audio))
    # VAE space and back
    back = a.from_pipeline_latents(a.to_pipeline_latents(x))
    assert all(torch.allclose(back[m], x[m], atol=1e-5) for m in x)

    import numpy as np
    from diffusers import FlowMatchEulerDiscreteScheduler

    from flowrl.pipelines.ltx2.layout import LTX2_SCHEDULER_CONFIG, ltx2_mu

    for steps in (2, 4):
        s = a.sigmas(steps)
        assert s.shape == (steps + 1,) and s.dtype == torch.float32
        assert s[0].item() == 1.0 and s[-1].item() == 0.0 and s[-2].item() == pytest.approx(0.1, abs=1e-6)
        assert bool((s[:-1] > s[1:]).all())
        ref = FlowMatchEulerDiscreteScheduler(**LTX2_SCHEDULER_CONFIG)
        ref.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=ltx2_mu(FRAMES, H, W))
        assert torch.equal(s, ref.sigmas)
    assert a.mu() == pytest.approx(ltx2_mu(FRAMES, H, W))


def test_encode_caches_what_a_row_needs_with_per_row_negatives(adapter):
    a = adapter
    a.clear_cache()
    cond = a.encode_prompts(PROMPTS)
    assert set(cond) == set(CONDITION_KEYS)
    assert cond["prompt_embeds"].shape == cond["audio_prompt_embeds"].shape == (2, TEXT_LEN, 32)
    assert cond["prompt_attention_mask"].shape == (2, TEXT_LEN) and bool(cond["prompt_attention_mask"].all())
    # the cache: one row of exactly these keys per prompt
    assert set(a._cache) == set(PROMPTS)
    assert all(set(r) == set(CONDITION_KEYS) and all(v.shape[0] == 1 for v in r.values()) for r in a._cache.values())
    # the pipeline's batched encode_prompt + connectors
    embeds, mask, _, _ = a.pipe.encode_prompt(PROMPTS, do_classifier_free_guidance=False, max_sequence_length=TEXT_LEN)
    video, audio, mask = a.pipe.connectors(embeds, mask, padding_side="left")
    assert torch.allclose(cond["prompt_embeds"], video, atol=1e-6)
    assert torch.allclose(cond["audio_prompt_embeds"], audio, atol=1e-6)
    assert torch.equal(cond["prompt_attention_mask"], mask)
    # cached: no second encode
    calls = []
    own = a.pipe.encode_prompt
    a.pipe.encode_prompt = lambda *args, **kw: calls.append(1) or own(*args, **kw)
    try:
        again = a.encode_prompts(list(reversed(PROMPTS)))
    finally:
        del a.pipe.encode_prompt
    assert not calls and torch.equal(again["prompt_embeds"][0], cond["prompt_embeds"][1])

    # per-row negatives: "" is the empty prompt, another is its own encoding
    neg = a.encode_prompts(PROMPTS, ["", "blurry"])
    assert set(neg) == set(CONDITION_KEYS) | {f"negative_{k}" for k in CONDITION_KEYS}
    empty = a.negative_conditioning(1)
    blurry = a.encode_prompts(["blurry"])
    for k in CONDITION_KEYS:
        assert torch.equal(neg[f"negative_{k}"][0], empty[k][0])
        assert torch.equal(neg[f"negative_{k}"][1], blurry[k][0])
    stacked = a.model_inputs(neg, 3.0)
    assert stacked["prompt_embeds"].shape[0] == 4
    assert torch.equal(stacked["audio_prompt_embeds"][:2], neg["negative_audio_prompt_embeds"])
    assert torch.equal(stacked["audio_prompt_embeds"][2:], neg["audio_prompt_embeds"])
    assert a.model_inputs(neg, 1.0)["prompt_embeds"].shape[0] == 2
    with pytest.raises(ValueError, match="1 negative prompts for 2 prompts"):
        a.encode_prompts(PROMPTS, [""])


@torch.no_grad()
def test_velocity_rows_dtypes_and_per_modality_sigmas(adapter):
    a = adapter
    x = a.initial_noise(2, _gen(1))
    cond = a.encode_prompts(PROMPTS)
    tr = a.transformer
    for scale, rows in ((1.0, 2), (3.0, 4)):
        assert a.guidance(scale).passes == rows // 2
        assert a.guidance(scale).kind == ("cfg" if scale != 1.0 else "none")
        calls, handle = record_calls(tr)
        try:
            v = a.velocity(x, 0.7, a.model_inputs(cond, scale), scale)
        finally:
            handle.remove()
        assert len(calls) == 1 and calls[0]["hidden_states"].shape == (rows, N_V, 128)
        assert calls[0]["audio_hidden_states"].shape == (rows, L_A, 128)
        assert torch.allclose(calls[0]["timestep"], torch.full((rows,), 700.0))
        assert calls[0]["isolate_modalities"] is False and calls[0]["use_cross_timestep"] is True
        assert set(v) == {"video", "audio"} and v["video"].dtype == v["audio"].dtype == torch.float32
        assert v["video"].shape == x["video"].shape and v["audio"].shape == x["audio"].shape
    with pytest.raises(ValueError, match="build it with model_inputs"):
        a.velocity(x, 0.7, a.model_inputs(cond, 1.0), 3.0)

    inputs = a.model_inputs(cond, 1.0)
    ref = a.velocity(x, 0.7, inputs, 1.0)
    per_row = a.velocity(x, torch.tensor([0.7, 0.7]), inputs, 1.0)
    same = a.velocity(x, {"video": 0.7, "audio": torch.tensor([0.7, 0.7])}, inputs, 1.0)
    for m in ref:
        assert torch.equal(per_row[m], ref[m]) and torch.equal(same[m], ref[m])
    calls, handle = record_calls(tr)
    try:
        other = a.velocity(x, {"video": 0.7, "audio": 0.3}, inputs, 1.0)
    finally:
        handle.remove()
    kw = calls[0]
    assert torch.allclose(kw["timestep"], torch.full((2,), 700.0)) and torch.equal(kw["sigma"], kw["timestep"])
    assert torch.allclose(kw["audio_timestep"], torch.full((2,), 300.0))
    assert torch.equal(kw["audio_sigma"], kw["audio_timestep"])
    assert not torch.allclose(other["audio"], ref["audio"])


# ---------------------------------------------------------------------------------------------------- the pipeline
@pytest.mark.parametrize("guidance", [1.0, 3.0])
def test_ode_on_both_modalities_is_the_pipelines_and_decode_is_its_decode(adapter, guidance):
    a = adapter
    steps = 3
    x = _ode(a, PROMPTS, steps, guidance)
    ref = _pipe_call(a.pipe, steps, guidance_scale=guidance, audio_guidance_scale=guidance)
    mine = a.to_pipeline_latents(x)
    assert mine["video"].shape == ref.frames.shape == (2, 128, 2, 1, 1)
    assert mine["audio"].shape == ref.audio.shape == (2, 8, L_A, 16)
    assert torch.allclose(mine["video"], ref.frames, atol=1e-5, rtol=0)
    assert torch.allclose(mine["audio"], ref.audio, atol=1e-5, rtol=0)
    # and the pipeline's samples move with the guidance: the comparison is not vacuous
    if guidance != 1.0:
        plain = _pipe_call(a.pipe, steps)
        assert not torch.allclose(plain.frames, ref.frames, atol=1e-3)

    media = a.decode(x)
    assert media_kind(media) == "audio_video"
    assert media["video"].shape == (2, FRAMES, 3, H, W) and media["audio"].shape == (2, 2, 7920)
    assert media["fps"] == 24.0 and media["sample_rate"] == 24000
    assert 0.0 <= media["video"].min() and media["video"].max() <= 1.0 and media["audio"].abs().max() <= 1.0
    out = a.generate(PROMPTS, steps, guidance, _gen(0))
    assert media_kind(out) == "audio_video" and (out["fps"], out["sample_rate"]) == (24.0, 24000)
    assert torch.allclose(media["video"], out["video"], atol=1e-5, rtol=0)
    assert torch.allclose(media["audio"], out["audio"], atol=1e-5, rtol=0)


def test_generate_is_the_pipelines_call(adapter):
    a = adapter
    out = a.generate(PROMPTS, 2, 3.0, _gen(4), negative_prompts=["", "blurry"])
    ref = a.pipe(
        prompt=PROMPTS,
        negative_prompt=["", "blurry"],
        height=H,
        width=W,
        num_frames=FRAMES,
        frame_rate=24.0,
        num_inference_steps=2,
        max_sequence_length=TEXT_LEN,
        output_type="pt",
        generator=_gen(4),
        **dict(LTX2_UNGUIDED_CALL_KWARGS, guidance_scale=3.0, audio_guidance_scale=3.0),
    )
    assert torch.equal(out["video"], ref.frames) and torch.equal(out["audio"], ref.audio)
    assert out["video"].shape == (2, FRAMES, 3, H, W) and out["audio"].shape == (2, 2, 7920)


@torch.no_grad()
def test_stg_and_modality_guidance_options_reproduce_the_pipeline(adapter):
    guided = LTX2Adapter(
        adapter.pipe,
        H,
        FRAMES,
        max_sequence_length=TEXT_LEN,
        audio_guidance_scale=5.0,
        stg_scale=1.0,
        audio_stg_scale=0.5,
        stg_blocks=[1],
        modality_scale=3.0,
        audio_modality_scale=2.0,
    )
    assert guided.guidance(3.0).passes == 4 and guided.guidance(1.0).passes == 1
    kwargs = guided.call_guidance_kwargs(3.0)
    assert kwargs["guidance_rescale"] == kwargs["audio_guidance_rescale"] == 0.0
    assert (kwargs["audio_guidance_scale"], kwargs["audio_stg_scale"], kwargs["audio_modality_scale"]) == (
        5.0,
        0.5,
        2.0,
    )
    assert guided.call_guidance_kwargs(1.0) == LTX2_UNGUIDED_CALL_KWARGS

    x = guided.initial_noise(2, _gen(2))
    calls, handle = record_calls(guided.transformer)
    try:
        guided.velocity(x, 0.5, guided.model_inputs(guided.encode_prompts(PROMPTS), 3.0), 3.0)
    finally:
        handle.remove()
    assert [c["hidden_states"].shape[0] for c in calls] == [6, 2]  # [uncond, cond, STG] in one call; isolated
    assert calls[0]["spatio_temporal_guidance_blocks"] == [1] and calls[0]["isolate_modalities"] is False
    assert calls[0]["perturbation_mask"].tolist() == [1, 1, 1, 1, 0, 0]
    assert calls[1]["isolate_modalities"] is True and calls[1]["perturbation_mask"] is None

    steps = 2
    mine = guided.to_pipeline_latents(_ode(guided, PROMPTS, steps, 3.0))
    ref = _pipe_call(guided.pipe, steps, **kwargs)
    assert torch.allclose(mine["video"], ref.frames, atol=1e-5, rtol=0)
    assert torch.allclose(mine["audio"], ref.audio, atol=1e-5, rtol=0)
    cfg_only = _pipe_call(guided.pipe, steps, guidance_scale=3.0, audio_guidance_scale=5.0)
    assert not torch.allclose(cfg_only.audio, ref.audio, atol=1e-3)


# ---------------------------------------------------------------------------------------------------- towers, LoRA
def _prefix(name):
    parts = name.split(".")
    return f"transformer_blocks.*.{parts[2]}" if parts[0] == "transformer_blocks" else parts[0]


# the module-name groups of build_tiny_ltx2's transformer (tests/helpers/ltx2_towers.py)
GROUPS = {
    "video": VIDEO_TOWER,
    "audio": AUDIO_TOWER,
    "audio_to_video": AUDIO_TO_VIDEO_ATTN,
    "video_to_audio": VIDEO_TO_AUDIO_ATTN,
    "shared": AV_CROSS_MODULATION,
}


def test_tower_of_covers_every_parameter_in_its_documented_group(adapter):
    names = [n for n, _ in adapter.transformer.named_parameters()]
    found = {}
    for name in names:
        found.setdefault(tower_of(name), set()).add(_prefix(name))
    assert {g: sorted(p) for g, p in found.items()} == {g: sorted(p) for g, p in GROUPS.items()}
    assert (
        LTX2Adapter.tower_of("module._orig_mod.transformer_blocks.1.audio_to_video_attn.to_q.lora_A.default.weight")
        == "audio_to_video"
    )
    assert tower_of("transformer_blocks.0._fsdp_wrapped_module.audio_attn1.to_out.0.base_layer.weight") == "audio"
    towers = {t: tower_of(f"transformer_blocks.0.{t}.weight") for t in LTX2_LORA_TARGETS}
    assert sorted(set(towers.values())) == ["audio", "audio_to_video", "video", "video_to_audio"]


def test_lora_targets_export_and_load_into_a_fresh_pipeline(tmp_path):
    from peft import LoraConfig, get_peft_model_state_dict

    a = LTX2Adapter(build_tiny_ltx2(seed=0), H, FRAMES, max_sequence_length=TEXT_LEN)
    a.transformer.add_adapter(LoraConfig(r=2, lora_alpha=4, target_modules=a.lora_target_modules))
    adapted = {n for n, m in a.transformer.named_modules() if hasattr(m, "lora_A")}
    assert adapted == {f"transformer_blocks.{i}.{t}" for i in (0, 1) for t in LTX2_LORA_TARGETS}
    g = _gen(7)
    with torch.no_grad():
        for n, p in a.transformer.named_parameters():
            if "lora_B" in n:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
    # under grad, both modalities' CFG velocity reaches every LoRA weight of every targeted attention
    x = a.initial_noise(2, _gen(8))
    v = a.velocity(x, 0.6, a.model_inputs(a.encode_prompts(PROMPTS), 3.0), 3.0)
    (v["video"].square().mean() + v["audio"].square().mean()).backward()
    lora = {n: p for n, p in a.transformer.named_parameters() if "lora_" in n}
    assert len(lora) == 2 * 2 * len(LTX2_LORA_TARGETS)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in lora.values())
    a.transformer.zero_grad(set_to_none=True)
    a.save_lora(tmp_path / "lora", get_peft_model_state_dict(a.transformer))
    assert sorted(p.name for p in (tmp_path / "lora").iterdir()) == ["pytorch_lora_weights.safetensors"]

    fresh = LTX2Adapter(build_tiny_ltx2(seed=0), H, FRAMES, max_sequence_length=TEXT_LEN)
    before = _pipe_call(fresh.pipe, 2)
    assert fresh.load_trained(tmp_path) == "LoRA"  # LTX2Pipeline.load_lora_weights(tmp_path / "lora")
    after = _pipe_call(fresh.pipe, 2)
    assert not torch.allclose(before.frames, after.frames, atol=1e-3)
    assert not torch.allclose(before.audio, after.audio, atol=1e-3)
    # the loaded pipeline samples what the trained adapter's ODE does (rank, alpha and every target kept)
    mine = a.to_pipeline_latents(_ode(a, PROMPTS, 2, 1.0))
    assert torch.allclose(mine["video"], after.frames, atol=1e-5, rtol=0)
    assert torch.allclose(mine["audio"], after.audio, atol=1e-5, rtol=0)
    assert (
        LTX2Adapter(build_tiny_ltx2(seed=0), H, FRAMES, max_sequence_length=TEXT_LEN).load_trained(tmp_path / "nothing")
        is None
    )


# ---------------------------------------------------------------------------------------------------- refusals
def test_model_path_size_and_option_refusals(adapter, tmp_path):
    from flowrl.pipelines.base import check_model_path

    check_model_path(_model())
    check_model_path(_model(path="Lightricks/LTX-2"))  # a hub id: loading says if it can be fetched
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        check_model_path(_model(path=str(tmp_path / "missing")))
    (tmp_path / "ltx2.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="single-file LTX-2 checkpoints are not supported"):
        check_model_path(_model(path=str(tmp_path / "ltx2.safetensors")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="is empty"):
        check_model_path(_model(path=str(tmp_path / "empty")))
    with pytest.raises(ValueError, match="model.width: LTX-2 needs a multiple of 32, got 48"):
        check_model_path(_model(width=48))
    with pytest.raises(ValueError, match=r"model.num_frames: LTX-2 needs 8k \+ 1 frames"):
        check_model_path(_model(num_frames=8))
    pipe = adapter.pipe
    with pytest.raises(ValueError, match="model.height: LTX-2 needs a multiple of 32"):
        LTX2Adapter(pipe, (48, 32), FRAMES, max_sequence_length=TEXT_LEN)
    with pytest.raises(ValueError, match="model.num_frames"):
        LTX2Adapter(pipe, H, 10, max_sequence_length=TEXT_LEN)
    with pytest.raises(ValueError, match="model.max_sequence_length: .* multiple of 128"):
        LTX2Adapter(pipe, H, FRAMES, max_sequence_length=100)
    with pytest.raises(ValueError, match="needs stg_blocks"):
        LTX2Adapter(pipe, H, FRAMES, max_sequence_length=TEXT_LEN, stg_scale=1.0)
    with pytest.raises(ValueError, match=r"stg_blocks: \[5\] are not blocks"):
        LTX2Adapter(pipe, H, FRAMES, max_sequence_length=TEXT_LEN, stg_scale=1.0, stg_blocks=[5])
    with pytest.raises(ValueError, match="audio_stg_scale=0"):
        LTX2Adapter(pipe, H, FRAMES, max_sequence_length=TEXT_LEN, stg_scale=1.0, audio_stg_scale=0.0, stg_blocks=[0])


def test_offline_hub_id_is_one_line():
    from flowrl.pipelines.kit.loading import HubUnavailableError

    with pytest.raises(HubUnavailableError, match="hub is offline") as info:
        LTX2Adapter.from_config(_model(path="nobody-here/no-such-ltx2-model"))
    assert "\n" not in str(info.value)
