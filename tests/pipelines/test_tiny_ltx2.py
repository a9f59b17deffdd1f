"""Tiny LTX-2 (joint audio-video) pipeline: the real diffusers classes, offline, deterministic, with LTX-2's
latent layouts, sigma schedule, guidance passes and dual-tower transformer (pipelines/ltx2/tiny.py and layout.py)."""

import itertools
import re

import pytest
import torch

from flowrl.pipelines.ltx2.adapter import LTX2_UNGUIDED_CALL_KWARGS
from flowrl.pipelines.ltx2.layout import (
    LTX2_SCHEDULER_CONFIG,
    ltx2_audio_latent_length,
    ltx2_audio_latent_shape,
    ltx2_mu,
    ltx2_video_latent_shape,
    ltx2_video_seq_len,
    ltx2_waveform_length,
)
from flowrl.pipelines.ltx2.tiny import build_tiny_ltx2
from ltx2_towers import AUDIO_TO_VIDEO_ATTN, AUDIO_TOWER, AV_CROSS_MODULATION, VIDEO_TO_AUDIO_ATTN, VIDEO_TOWER
from spies import record_calls, record_mu

PROMPT = "a red cat"
TEXT_LEN = 128  # max_sequence_length: a multiple of the connectors' 128 registers (the pipeline default is 1024)
H = W = 32
FRAMES = 9  # 8k + 1: two latent frames


pytestmark = pytest.mark.usefixtures("no_network", "one_thread")  # offline, one thread for toy-sized ops


@pytest.fixture(scope="module")
def pipe():
    return build_tiny_ltx2(seed=0)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _call(pipe, output_type="pt", generator=None, **kwargs):
    args = dict(LTX2_UNGUIDED_CALL_KWARGS)
    args.update(kwargs)
    return pipe(
        prompt=args.pop("prompt", PROMPT),
        height=args.pop("height", H),
        width=args.pop("width", W),
        num_frames=args.pop("num_frames", FRAMES),
        num_inference_steps=args.pop("num_inference_steps", 2),
        max_sequence_length=TEXT_LEN,
        output_type=output_type,
        generator=_gen() if generator is None else generator,
        **args,
    )


# ------------------------------------------------------------------------------------------------------------


def test_classes_sizes_and_config(pipe):
    import diffusers
    from diffusers.pipelines.ltx2 import LTX2TextConnectors, LTX2Vocoder
    from transformers import Gemma3ForConditionalGeneration, PreTrainedTokenizerFast

    assert type(pipe) is diffusers.LTX2Pipeline
    assert type(pipe.transformer) is diffusers.LTX2VideoTransformer3DModel
    assert type(pipe.vae) is diffusers.AutoencoderKLLTX2Video
    assert type(pipe.audio_vae) is diffusers.AutoencoderKLLTX2Audio
    assert type(pipe.connectors) is LTX2TextConnectors
    assert type(pipe.vocoder) is LTX2Vocoder
    assert type(pipe.text_encoder) is Gemma3ForConditionalGeneration
    assert isinstance(pipe.tokenizer, PreTrainedTokenizerFast) and pipe.tokenizer.padding_side == "left"
    assert pipe.processor is None and pipe.prompt_enhancer is None and pipe.duration_head is None

    te = pipe.text_encoder.config.text_config
    assert (te.num_hidden_layers, te.hidden_size) == (2, 32)
    assert pipe.connectors.config.caption_channels == 32 and pipe.connectors.config.text_proj_in_factor == 3
    tr = pipe.transformer.config
    assert (tr.in_channels, tr.audio_in_channels, tr.caption_channels, tr.num_layers) == (128, 128, 32, 2)
    # video / audio compression as LTX-2's
    assert (pipe.vae_spatial_compression_ratio, pipe.vae_temporal_compression_ratio) == (32, 8)
    assert (pipe.audio_vae_temporal_compression_ratio, pipe.audio_vae_mel_compression_ratio) == (4, 4)
    assert (pipe.audio_sampling_rate, pipe.audio_hop_length) == (16000, 160)
    assert pipe.vocoder.config.output_sampling_rate == 24000 and pipe.vocoder.total_upsample_factor == 240
    # non-trivial latent statistics, so the pipeline's (de)normalisation is visible
    for vae in (pipe.vae, pipe.audio_vae):
        assert vae.latents_mean.shape == vae.latents_std.shape == (128,)
        assert vae.latents_mean.abs().max() > 0 and not torch.allclose(vae.latents_std, torch.ones(128))
    sched = pipe.scheduler
    assert type(sched) is diffusers.FlowMatchEulerDiscreteScheduler
    for key, value in LTX2_SCHEDULER_CONFIG.items():
        assert sched.config[key] == value, key
    assert sched.config.use_dynamic_shifting is True
    assert (sched.config.base_shift, sched.config.max_shift) == (0.95, 2.05)
    assert (sched.config.base_image_seq_len, sched.config.max_image_seq_len) == (1024, 4096)


def test_builder_leaves_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_ltx2(seed=0)
    assert torch.equal(torch.rand(3), expected)


def test_unguided_call_shapes_one_pass_per_step_and_sigmas(pipe):
    calls, handle = record_calls(pipe.transformer)
    mus = record_mu(pipe.scheduler)
    try:
        out = _call(pipe)
    finally:
        handle.remove()
        del pipe.scheduler.set_timesteps
    frames, audio = out.frames, out.audio
    assert frames.shape == (1, FRAMES, 3, H, W) and frames.dtype == torch.float32
    assert 0.0 <= frames.min() and frames.max() <= 1.0
    latent_len = ltx2_audio_latent_length(FRAMES)  # round(9 / 24 * 25) = 9
    assert latent_len == 9
    assert audio.shape == (1, 2, ltx2_waveform_length(latent_len)) == (1, 2, 7920)  # 33 mel frames x 240
    assert audio.abs().max() <= 1.0

    # one transformer pass per step; packed tokens and the documented call
    assert len(calls) == 2
    kw = calls[0]
    assert kw["hidden_states"].shape == (1, ltx2_video_seq_len(FRAMES, H, W), 128) == (1, 2, 128)
    assert kw["audio_hidden_states"].shape == (1, latent_len, 128)
    assert kw["encoder_hidden_states"].shape == kw["audio_encoder_hidden_states"].shape == (1, TEXT_LEN, 32)
    assert kw["encoder_attention_mask"].shape == (1, TEXT_LEN) and bool(kw["encoder_attention_mask"].all())
    assert (kw["num_frames"], kw["height"], kw["width"], kw["audio_num_frames"]) == (2, 1, 1, latent_len)
    assert "audio_timestep" not in kw  # both towers get the same timestep in the T2V pipeline
    assert torch.equal(kw["timestep"], torch.full((1,), 1000.0)) and torch.equal(kw["sigma"], kw["timestep"])
    assert kw["isolate_modalities"] is False and kw["use_cross_timestep"] is True

    # mu from the packed video token count; sigma_0 exactly 1, last non-zero sigma 0.1 (shift_terminal)
    assert mus == [pytest.approx(ltx2_mu(FRAMES, H, W))] * 2  # video scheduler and its audio deep copy
    assert ltx2_mu(FRAMES, H, W) == pytest.approx(0.95 + (2 - 1024) * 1.1 / 3072)
    assert ltx2_mu(97, 544, 960) > 2.05  # 13 * 17 * 30 = 6630 tokens: extrapolated past max_shift
    sigmas = pipe.scheduler.sigmas
    assert sigmas[0].item() == 1.0
    assert sigmas[-2].item() == pytest.approx(0.1, abs=1e-6) and sigmas[-1].item() == 0.0
    assert torch.allclose(pipe.scheduler.timesteps, sigmas[:-1] * 1000)


def test_four_step_schedule():
    import numpy as np
    from diffusers import FlowMatchEulerDiscreteScheduler

    sched = FlowMatchEulerDiscreteScheduler(**LTX2_SCHEDULER_CONFIG)
    mu = ltx2_mu(121, 512, 768)  # 16 * 16 * 24 = 6144 video tokens
    sched.set_timesteps(sigmas=np.linspace(1.0, 1 / 4, 4), mu=mu)
    s = sched.sigmas.tolist()
    assert len(s) == 5 and s[0] == 1.0 and s[-1] == 0.0
    assert s[-2] == pytest.approx(0.1, abs=1e-6)
    assert all(a > b for a, b in itertools.pairwise(s))


def test_guided_call_runs_cfg_stg_and_modality_passes(pipe):
    calls, handle = record_calls(pipe.transformer)
    try:
        guided = _call(
            pipe,
            guidance_scale=3.0,
            audio_guidance_scale=7.0,
            stg_scale=1.0,
            audio_stg_scale=1.0,
            spatio_temporal_guidance_blocks=[1],  # the pipeline's default [28] is past this 2-layer model
            modality_scale=3.0,
            audio_modality_scale=3.0,
            guidance_rescale=0.7,
            audio_guidance_rescale=0.7,
        )
    finally:
        handle.remove()
    plain = _call(pipe)
    assert guided.frames.shape == plain.frames.shape and guided.audio.shape == plain.audio.shape
    assert not torch.allclose(guided.frames, plain.frames) and not torch.allclose(guided.audio, plain.audio)
    # per step: CFG on a doubled batch, then an STG pass, then an isolated-modalities pass
    assert len(calls) == 2 * 3
    cfg, stg, iso = calls[:3]
    assert cfg["hidden_states"].shape[0] == 2 and cfg["isolate_modalities"] is False
    assert stg["hidden_states"].shape[0] == 1 and stg["spatio_temporal_guidance_blocks"] == [1]
    assert iso["hidden_states"].shape[0] == 1 and iso["isolate_modalities"] is True


def test_deterministic_offline(pipe):
    a = _call(pipe, generator=_gen(0))
    b = _call(build_tiny_ltx2(seed=0), generator=_gen(0))
    c = _call(pipe, generator=_gen(1))
    assert torch.equal(a.frames, b.frames) and torch.equal(a.audio, b.audio)
    assert not torch.allclose(a.frames, c.frames) and not torch.allclose(a.audio, c.audio)
    d = _call(build_tiny_ltx2(seed=1), generator=_gen(0))
    assert not torch.allclose(a.frames, d.frames)


def test_latent_output_shapes_and_denormalisation(pipe):
    seen = {}

    def grab(p, i, t, kwargs):
        seen["latents"] = kwargs["latents"].clone()
        return {}

    out = _call(pipe, output_type="latent", callback_on_step_end=grab)
    video, audio = out.frames, out.audio
    assert video.shape == ltx2_video_latent_shape(1, FRAMES, H, W) == (1, 128, 2, 1, 1)
    assert audio.shape == ltx2_audio_latent_shape(1, FRAMES) == (1, 8, 9, 16)
    # the loop's packed, normalised latents (B, F'H'W', 128) -> unpacked and denormalised per channel
    packed = seen["latents"]
    assert packed.shape == (1, 2, 128)
    unpacked = pipe._unpack_latents(packed, 2, 1, 1)
    expected = pipe._denormalize_latents(unpacked, pipe.vae.latents_mean, pipe.vae.latents_std, 1.0)
    assert torch.allclose(video, expected, atol=1e-6)
    assert not torch.allclose(video, unpacked)
    # audio packing: (B, C, L, M) <-> (B, L, C*M)
    packed_audio = pipe._pack_audio_latents(audio)
    assert packed_audio.shape == (1, 9, 128)
    assert torch.equal(pipe._unpack_audio_latents(packed_audio, 9, num_mel_bins=16), audio)

    bigger = _call(pipe, output_type="latent", height=64, width=96, frame_rate=25.0)
    assert bigger.frames.shape == (1, 128, 2, 2, 3)
    assert bigger.audio.shape == (1, 8, 9, 16)  # round(9 / 25 * 25)
    five = _call(pipe, output_type="latent", num_frames=5)  # not 8k + 1: a single latent frame
    assert five.frames.shape == (1, 128, 1, 1, 1) and five.audio.shape == (1, 8, 5, 16)


def _direct_inputs(pipe, seed=0):
    embeds, mask, _, _ = pipe.encode_prompt(PROMPT, do_classifier_free_guidance=False, max_sequence_length=TEXT_LEN)
    assert embeds.shape == (1, TEXT_LEN, 32 * 3)  # all 2 + 1 Gemma hidden states, stacked
    video_text, audio_text, text_mask = pipe.connectors(embeds, mask, padding_side="left")
    g = _gen(seed)
    return {
        "hidden_states": torch.randn(1, 2, 128, generator=g),
        "audio_hidden_states": torch.randn(1, 9, 128, generator=g),
        "encoder_hidden_states": video_text,
        "audio_encoder_hidden_states": audio_text,
        "encoder_attention_mask": text_mask,
        "audio_encoder_attention_mask": text_mask,
        "timestep": torch.tensor([500.0]),
        "num_frames": 2,
        "height": 1,
        "width": 1,
        "fps": 24.0,
        "audio_num_frames": 9,
        "return_dict": False,
    }


@torch.no_grad()
def test_transformer_velocities_isolation_and_audio_timestep(pipe):
    tr = pipe.transformer
    kw = _direct_inputs(pipe)
    video_v, audio_v = tr(**kw)
    assert video_v.shape == kw["hidden_states"].shape and audio_v.shape == kw["audio_hidden_states"].shape
    again = tr(**kw)
    assert torch.equal(again[0], video_v) and torch.equal(again[1], audio_v)

    iso_v, iso_a = tr(**kw, isolate_modalities=True)
    assert not torch.allclose(iso_v, video_v) and not torch.allclose(iso_a, audio_v)

    # cross-modal attention is the only path between the towers
    other_audio = dict(kw, audio_hidden_states=torch.randn(1, 9, 128, generator=_gen(5)))
    other_video = dict(kw, hidden_states=torch.randn(1, 2, 128, generator=_gen(6)))
    assert not torch.allclose(tr(**other_audio)[0], video_v)
    assert not torch.allclose(tr(**other_video)[1], audio_v)
    assert torch.allclose(tr(**other_audio, isolate_modalities=True)[0], iso_v, atol=1e-6)
    assert torch.allclose(tr(**other_video, isolate_modalities=True)[1], iso_a, atol=1e-6)

    # a separate audio timestep conditions the audio tower (default: the video timestep)
    same_t = tr(**kw, audio_timestep=kw["timestep"])
    assert torch.equal(same_t[1], audio_v)
    _, audio_t = tr(**kw, audio_timestep=torch.tensor([100.0]))
    assert not torch.allclose(audio_t, audio_v)


# the transformer's parameters by module name, for AV-GRPO's per-phase trainable split: tests/helpers/ltx2_towers.py


def _module_prefix(param_name):
    parts = param_name.split(".")
    if parts[0] == "transformer_blocks":
        return f"transformer_blocks.*.{parts[2]}"
    return parts[0]


def _group(prefix):
    local = prefix.removeprefix("transformer_blocks.*.")
    if local in ("audio_to_video_attn", "av_cross_attn_video_a2v_gate"):
        return "audio_to_video_attn"
    if local in ("video_to_audio_attn", "av_cross_attn_audio_v2a_gate"):
        return "video_to_audio_attn"
    if "a2v_cross_attn_scale_shift_table" in local or local.startswith("av_cross_attn_"):
        return "av_cross_modulation"
    return "audio_tower" if local.startswith("audio_") else "video_tower"


def test_transformer_module_groups(pipe):
    names = [n for n, _ in pipe.transformer.named_parameters()]
    groups = {}
    for prefix in sorted({_module_prefix(n) for n in names}):
        groups.setdefault(_group(prefix), []).append(prefix)
    for group, prefixes in groups.items():
        print(f"{group}: {prefixes}")
    assert groups == {
        "video_tower": VIDEO_TOWER,
        "audio_tower": AUDIO_TOWER,
        "audio_to_video_attn": AUDIO_TO_VIDEO_ATTN,
        "video_to_audio_attn": VIDEO_TO_AUDIO_ATTN,
        "av_cross_modulation": AV_CROSS_MODULATION,
    }
    # every block has the same modules; the cross-modal norms carry no parameters
    blocks = {re.match(r"transformer_blocks\.(\d+)\.", n).group(1) for n in names if n.startswith("transformer_")}
    assert blocks == {"0", "1"}
    assert not list(pipe.transformer.transformer_blocks[0].audio_to_video_norm.parameters())
    assert not list(pipe.transformer.transformer_blocks[0].video_to_audio_norm.parameters())
    a2v = pipe.transformer.transformer_blocks[0].audio_to_video_attn
    assert (a2v.to_q.in_features, a2v.to_k.in_features) == (16, 8)  # Q: video (2 x 8), K/V: audio (2 x 4)
    v2a = pipe.transformer.transformer_blocks[0].video_to_audio_attn
    assert (v2a.to_q.in_features, v2a.to_k.in_features) == (8, 16)
