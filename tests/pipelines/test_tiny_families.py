"""Tiny FLUX.1 / Wan 2.1-2.2 / Stable Audio 3 pipelines: offline, deterministic, with the real latent layouts
and sigma schedules (each family's tiny.py and layout.py under pipelines/)."""

import math

import pytest
import torch

from flowrl.pipelines.flux.layout import flux_mu
from flowrl.pipelines.flux.tiny import build_tiny_flux
from flowrl.pipelines.stable_audio.layout import (
    SA3_TINY_DOWNSAMPLING,
    SA3_TINY_LATENT_DIM,
    SA3_TINY_SAMPLING_RATE,
    stable_audio_latent_length,
)
from flowrl.pipelines.stable_audio.tiny import build_tiny_stable_audio
from flowrl.pipelines.wan.layout import wan_latent_shape
from flowrl.pipelines.wan.tiny import build_tiny_wan
from spies import record_calls, record_mu

PROMPT = "a red cat"


pytestmark = pytest.mark.usefixtures("no_network", "one_thread")  # offline, one thread for toy-sized ops


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------------------------


def test_builders_document_their_layout():
    """Each family folder's tiny builder documents its latent layout and first sigma (Wan's is not 1)."""
    assert build_tiny_wan.__doc__ and "0.99999899" in build_tiny_wan.__doc__
    for builder in (build_tiny_flux, build_tiny_wan, build_tiny_stable_audio):
        assert "Latent layout" in builder.__doc__


def test_builders_leave_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_stable_audio(seed=0)
    assert torch.equal(torch.rand(3), expected)


# ------------------------------------------------------------------------------------------------------------ FLUX


def test_flux_classes_and_config():
    import diffusers
    from transformers import CLIPTextModel, T5EncoderModel

    pipe = build_tiny_flux()
    assert type(pipe) is diffusers.FluxPipeline
    assert type(pipe.transformer) is diffusers.FluxTransformer2DModel
    assert pipe.transformer.config.guidance_embeds is True
    assert pipe.transformer.config.in_channels == 64
    assert isinstance(pipe.text_encoder, CLIPTextModel) and isinstance(pipe.text_encoder_2, T5EncoderModel)
    vae = pipe.vae.config
    assert (vae.latent_channels, vae.scaling_factor, vae.shift_factor) == (16, 0.3611, 0.1159)
    assert pipe.vae_scale_factor == 8
    sched = pipe.scheduler
    assert type(sched) is diffusers.FlowMatchEulerDiscreteScheduler
    assert sched.config.use_dynamic_shifting is True
    assert (sched.config.base_shift, sched.config.max_shift) == (0.5, 1.15)
    assert (sched.config.base_image_seq_len, sched.config.max_image_seq_len) == (256, 4096)


def test_flux_runs_with_packed_latents_ids_guidance_and_mu():
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift

    pipe = build_tiny_flux()
    calls, handle = record_calls(pipe.transformer, with_args=True)
    mus = record_mu(pipe.scheduler)
    try:
        out = pipe(
            prompt=[PROMPT, PROMPT], num_inference_steps=2, height=32, width=32, output_type="latent", generator=_gen()
        ).images
    finally:
        handle.remove()
    # packed tokens (B, (H/16)(W/16), 64)
    assert out.shape == (2, 4, 64) and out.dtype == torch.float32
    unpacked = pipe._unpack_latents(out, 32, 32, pipe.vae_scale_factor)
    assert unpacked.shape == (2, 16, 4, 4)
    # image ids (seq, 3) = (0, row, col); text ids zeros
    kw = calls[0][1]
    ids = kw["img_ids"]
    assert ids.shape == (4, 3)
    assert ids.tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 1, 1]]
    assert kw["txt_ids"].shape == (512, 3) and not kw["txt_ids"].any()
    assert kw["hidden_states"].shape == (2, 4, 64)
    # FLUX.1-dev guidance embedding: guidance_scale 3.5 fed to the transformer, one forward per step
    assert torch.allclose(kw["guidance"], torch.full((2,), 3.5))
    assert len(calls) == 2
    assert torch.allclose(kw["timestep"], torch.ones(2))  # sigma_0 * 1000 / 1000
    # resolution-dependent shift mu, as the pipeline computes it
    assert mus == [pytest.approx(flux_mu(32, 32))]
    assert flux_mu(32, 32) == pytest.approx(0.45734375)
    assert flux_mu(1024, 1024) == pytest.approx(1.15)
    assert flux_mu(512, 512) == pytest.approx(calculate_shift(1024, 256, 4096, 0.5, 1.15))
    sigmas = pipe.scheduler.sigmas
    mu = mus[0]
    assert sigmas[0].item() == 1.0  # exactly 1 for FLUX (linspace(1, 1/N, N) time-shifted)
    assert sigmas[1].item() == pytest.approx(math.exp(mu) / (math.exp(mu) + 1.0), abs=1e-6)
    assert sigmas[-1].item() == 0.0


def test_flux_images_deterministic():
    a = build_tiny_flux(seed=0)(
        prompt=PROMPT, num_inference_steps=2, height=32, width=32, output_type="pt", generator=_gen(0)
    ).images
    pipe = build_tiny_flux(seed=0)
    b = pipe(prompt=PROMPT, num_inference_steps=2, height=32, width=32, output_type="pt", generator=_gen(0)).images
    c = pipe(prompt=PROMPT, num_inference_steps=2, height=32, width=32, output_type="pt", generator=_gen(1)).images
    assert a.shape == (1, 3, 32, 32) and a.dtype == torch.float32
    assert 0.0 <= a.min() and a.max() <= 1.0
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    # a different build seed gives different weights
    w0 = build_tiny_flux(seed=0).transformer.proj_out.weight
    w1 = build_tiny_flux(seed=1).transformer.proj_out.weight
    assert torch.equal(w0, pipe.transformer.proj_out.weight) and not torch.equal(w0, w1)


# ------------------------------------------------------------------------------------------------------------ Wan


def test_wan_classes_and_scheduler():
    import diffusers
    from transformers import UMT5EncoderModel

    pipe = build_tiny_wan()
    assert type(pipe) is diffusers.WanPipeline
    assert type(pipe.transformer) is diffusers.WanTransformer3DModel and pipe.transformer_2 is None
    assert isinstance(pipe.text_encoder, UMT5EncoderModel)
    assert type(pipe.vae) is diffusers.AutoencoderKLWan
    assert (pipe.vae_scale_factor_temporal, pipe.vae_scale_factor_spatial) == (4, 8)
    assert pipe.config.boundary_ratio is None
    sched = pipe.scheduler
    assert type(sched) is diffusers.UniPCMultistepScheduler
    assert sched.config.prediction_type == "flow_prediction"
    assert sched.config.use_flow_sigmas is True and sched.config.flow_shift == 3.0
    sched.set_timesteps(2)
    s0 = sched.sigmas[0].item()
    # UniPC flow sigmas start just below 1 (recorded: 0.9999989867...), not at 1.0
    assert s0 < 1.0 and s0 == pytest.approx(0.9999989867210388, abs=1e-9)
    assert sched.timesteps[0].item() == 999
    assert sched.sigmas[-1].item() == 0.0


def test_wan_video_latents_and_determinism():
    pipe = build_tiny_wan()
    kwargs = {"prompt": PROMPT, "num_inference_steps": 2, "height": 32, "width": 32, "num_frames": 5}
    calls, handle = record_calls(pipe.transformer, with_args=True)
    try:
        lat = pipe(**kwargs, output_type="latent", generator=_gen(0)).frames
    finally:
        handle.remove()
    assert lat.shape == wan_latent_shape(1, 5, 32, 32) == (1, 16, 2, 4, 4)
    assert lat.dtype == torch.float32
    assert calls[0][1]["hidden_states"].shape == (1, 16, 2, 4, 4)
    assert len(calls) == 4  # CFG (guidance 5.0): cond + uncond forward per step
    assert [c[1]["timestep"].item() for c in calls[::2]] == [999, 750]
    assert pipe.scheduler.sigmas[0].item() == pytest.approx(0.9999989867210388, abs=1e-9)

    video = pipe(**kwargs, output_type="pt", generator=_gen(0)).frames
    assert video.shape == (1, 5, 3, 32, 32) and video.dtype == torch.float32  # (B, F, C, H, W)
    assert 0.0 <= video.min() and video.max() <= 1.0
    again = build_tiny_wan(seed=0)(**kwargs, output_type="pt", generator=_gen(0)).frames
    assert torch.equal(video, again)
    other = pipe(**kwargs, output_type="pt", generator=_gen(1)).frames
    assert not torch.equal(video, other)


def test_wan22_two_experts_switch_at_boundary():
    pipe = build_tiny_wan(two_experts=True)
    assert pipe.transformer_2 is not None and pipe.config.boundary_ratio == 0.875
    assert not torch.equal(pipe.transformer.proj_out.weight, pipe.transformer_2.proj_out.weight)
    call = {"prompt": PROMPT, "num_inference_steps": 2, "height": 32, "width": 32, "num_frames": 5}
    call.update(guidance_scale=1.0, output_type="latent")
    high, h1 = record_calls(pipe.transformer, with_args=True)
    low, h2 = record_calls(pipe.transformer_2, with_args=True)
    try:
        lat = pipe(**call, generator=_gen(0)).frames
    finally:
        h1.remove()
        h2.remove()
    assert lat.shape == (1, 16, 2, 4, 4)
    assert [c[1]["timestep"].item() for c in high] == [999]  # t >= 875: high-noise expert
    assert [c[1]["timestep"].item() for c in low] == [750]  # t < 875: low-noise expert
    again = build_tiny_wan(seed=0, two_experts=True)(**call, generator=_gen(0)).frames
    assert torch.equal(lat, again)


# ------------------------------------------------------------------------------------------------------------ SA3


def test_stable_audio_classes_and_scheduler():
    import diffusers
    from transformers import T5GemmaEncoderModel

    pipe = build_tiny_stable_audio()
    assert type(pipe) is diffusers.StableAudio3Pipeline
    assert type(pipe.transformer) is diffusers.StableAudio3DiTModel
    assert type(pipe.vae) is diffusers.AutoencoderSAME
    assert isinstance(pipe.text_encoder, T5GemmaEncoderModel)
    assert pipe.vae.downsampling_ratio == SA3_TINY_DOWNSAMPLING
    sched = pipe.scheduler
    assert type(sched) is diffusers.FlowMatchEulerDiscreteScheduler
    assert sched.config.num_train_timesteps == 1 and sched.config.shift == 1.0
    assert sched.config.stochastic_sampling is True
    assert build_tiny_stable_audio(distilled=False).scheduler.config.stochastic_sampling is False


def test_stable_audio_latents_audio_sigmas_and_determinism():
    pipe = build_tiny_stable_audio()
    calls, handle = record_calls(pipe.transformer, with_args=True)
    try:
        lat = pipe(
            prompt=[PROMPT, PROMPT], duration=1.0, num_inference_steps=2, output_type="latent", generator=_gen(0)
        ).audios
    finally:
        handle.remove()
    n = stable_audio_latent_length(1.0, SA3_TINY_SAMPLING_RATE, SA3_TINY_DOWNSAMPLING)
    assert n == 16
    assert lat.shape == (2, SA3_TINY_LATENT_DIM, n) and lat.dtype == torch.float32
    # the DiT sees t in [0, 1]: timesteps equal sigmas; the log-SNR schedule starts at exactly 1.0
    sigmas = pipe.scheduler.sigmas
    assert sigmas[0].item() == 1.0 and sigmas[-1].item() == 0.0
    assert sigmas[1].item() == pytest.approx(1 / (1 + math.exp(2.0 - 0.5 * 8.2)), abs=1e-6)  # sigmoid(-logsnr)
    assert torch.equal(pipe.scheduler.timesteps, sigmas[:-1])
    assert [c[0][1].tolist() for c in calls] == [[1.0, 1.0], [pytest.approx(sigmas[1].item())] * 2]
    # cross-attention context: 256 text tokens + 1 duration token
    assert calls[0][1]["encoder_hidden_states"].shape == (2, 257, 16)

    audio = pipe(prompt=PROMPT, duration=1.0, num_inference_steps=2, output_type="pt", generator=_gen(0)).audios
    assert audio.shape == (1, 2, 256) and audio.dtype == torch.float32  # (B, channels, samples)
    assert audio.abs().max() <= 1.0
    again = build_tiny_stable_audio(seed=0)(
        prompt=PROMPT, duration=1.0, num_inference_steps=2, output_type="pt", generator=_gen(0)
    ).audios
    assert torch.equal(audio, again)  # ping-pong re-noise draws from the same generator
    other = pipe(prompt=PROMPT, duration=1.0, num_inference_steps=2, output_type="pt", generator=_gen(1)).audios
    assert not torch.equal(audio, other)
    # durations that are not a whole latent frame: latents round up, audio is trimmed
    short = pipe(prompt=PROMPT, duration=0.3, num_inference_steps=2, output_type="pt", generator=_gen(0)).audios
    assert short.shape == (1, 2, int(0.3 * 256))
    assert stable_audio_latent_length(0.3, 256, 16) == 5


def test_stable_audio_base_model_is_deterministic_euler():
    pipe = build_tiny_stable_audio(distilled=False)
    a = pipe(prompt=PROMPT, duration=0.5, num_inference_steps=2, output_type="latent", generator=_gen(0)).audios
    b = pipe(prompt=PROMPT, duration=0.5, num_inference_steps=2, output_type="latent", generator=_gen(0)).audios
    assert a.shape == (1, 8, 8)
    assert torch.equal(a, b)
