"""Wan 2.2 TI2V-5B in text-to-video mode (``model.pipeline: wan``, ``model.path: tiny-ti2v``): the 48-channel Wan
2.2 VAE layout at 16x, a timestep per video token (``expand_timesteps``), flowrl's noise-free rollout equal to
``WanPipeline(expand_timesteps=True)``, the on-policy log-prob, the LoRA the pipeline loads back and a training
iteration through the Trainer."""

import re

import pytest
import torch

from flowrl.pipelines.base import adapter_class
from flowrl.pipelines.wan import layout
from flowrl.pipelines.wan.tiny import build_tiny_wan
from flowrl.plan import make_plan, ode_plan
from flowrl.resolve import resolve_config
from flowrl.rollout import rollout, transition
from flowrl.trainer import Trainer
from tiny_runs import NO_EVAL, small

PROMPTS = ["a red cat", "a blue dog"]
PIPE_KW = {"height": 64, "width": 64, "num_frames": 5, "max_sequence_length": 16}
SMALL = small(3, *NO_EVAL)


@pytest.fixture(scope="module")
def ti2v():
    return adapter_class("wan").from_config(resolve_config("tiny-wan-ti2v").model, seed=0)


def _euler_on(pipe, sigmas):
    from diffusers import FlowMatchEulerDiscreteScheduler

    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=1.0)
    own = scheduler.set_timesteps
    scheduler.set_timesteps = lambda *args, device=None, **kwargs: own(sigmas=sigmas[:-1].tolist(), device=device)
    pipe.scheduler = scheduler
    return pipe


def test_token_timesteps_by_hand():
    """Two rows at t = 500 and 250 over 2 latent frames of 4 x 4 (2 x 2 tokens a frame after the 1x2x2 patches):
    8 tokens a row, frame-major; with the first frame fixed its 4 tokens are 0."""
    t = torch.tensor([500.0, 250.0])
    assert layout.token_timesteps(t, 2, 4, 4).tolist() == [[500.0] * 8, [250.0] * 8]
    fixed = layout.token_timesteps(t, 2, 4, 4, first_frame_fixed=True)
    assert fixed.tolist() == [[0.0] * 4 + [500.0] * 4, [0.0] * 4 + [250.0] * 4]


def test_the_48_channel_layout_and_a_timestep_per_token(ti2v, one_thread):
    a = ti2v
    assert a.expand_timesteps and a.pipe.vae.config.z_dim == 48 and a.pipe.vae_scale_factor_spatial == 16
    assert a.latent_shape == (48, 2, 4, 4) == layout.for_model(resolve_config("tiny-wan-ti2v").model).latent
    assert layout.for_model(resolve_config("tiny-wan-ti2v").model).tokens == 8
    assert a.pipe.scheduler.config.flow_shift == 5.0
    x = a.initial_noise(2, torch.Generator().manual_seed(0))
    assert x.shape == (2, 48, 2, 4, 4)
    seen = []
    handle = a.transformer.register_forward_pre_hook(lambda m, args, kw: seen.append(kw), with_kwargs=True)
    try:
        v = a.velocity(x, torch.tensor([0.75, 0.5]), a.model_inputs(a.encode_prompts(PROMPTS), 4.5), 4.5)
    finally:
        handle.remove()
    assert v.shape == x.shape and v.dtype == torch.float32
    assert seen[0]["timestep"].shape == (4, 8)  # CFG rows (negatives first) x video tokens
    assert seen[0]["timestep"].tolist() == [[750.0] * 8, [500.0] * 8, [750.0] * 8, [500.0] * 8]
    video = a.decode(x)["video"]
    assert video.shape == (2, 5, 3, 64, 64) and 0 <= video.min() and video.max() <= 1


@pytest.mark.parametrize("guidance", [4.5, 1.0])
def test_ode_rollout_is_wan_pipeline_with_expand_timesteps(ti2v, one_thread, guidance):
    sigmas = ti2v.sigmas(4)
    x = ti2v.initial_noise(2, torch.Generator().manual_seed(3))
    traj = rollout(ti2v, ti2v.encode_prompts(PROMPTS), ode_plan(sigmas), x, torch.arange(2), guidance)
    pipe = _euler_on(build_tiny_wan(seed=0, ti2v=True), sigmas)
    assert pipe.config.expand_timesteps
    kwargs = dict(prompt=PROMPTS, num_inference_steps=4, guidance_scale=guidance, latents=x.clone(), **PIPE_KW)
    torch.testing.assert_close(traj.final, pipe(**kwargs, output_type="latent").frames, rtol=1e-5, atol=1e-5)
    frames = pipe(**kwargs, output_type="pt").frames
    torch.testing.assert_close(ti2v.decode(traj.final)["video"], frames, rtol=1e-5, atol=1e-5)


def test_recomputed_log_prob_equals_the_rollouts(ti2v, one_thread):
    plan = make_plan(ti2v.sigmas(3), noise_level=0.7, timestep_fraction=1.0)
    cond = ti2v.encode_prompts(PROMPTS)
    traj = rollout(ti2v, cond, plan, ti2v.initial_noise(2, torch.Generator().manual_seed(1)), torch.arange(2), 4.5,
                   torch.Generator().manual_seed(2))  # fmt: skip
    inputs = ti2v.model_inputs(cond, 4.5)
    for j in traj.plan.trained_indices:
        x, x_next = traj.pair(j)
        with torch.no_grad():
            out = transition(ti2v, traj.plan, j, x, inputs, 4.5, x_next=x_next)
        assert torch.equal(out.log_prob, traj.log_probs[:, j]), j


def test_training_is_on_policy_and_its_lora_loads_into_wan_pipeline(tmp_path, one_thread):
    cfg = resolve_config("tiny-wan-ti2v", [f"output_dir={tmp_path}", *SMALL, "train.iterations=1"])
    trainer = Trainer(cfg)
    before = {k: p.detach().clone() for k, p in trainer.policy.trainable.items()}
    rows = trainer.train()
    assert rows[0]["policy/onpolicy_logp_diff"] <= 1e-4
    assert all(not torch.equal(p, before[k]) for k, p in trainer.policy.trainable.items())
    pipe = build_tiny_wan(seed=cfg.seed, ti2v=True)
    pipe.load_lora_weights(str(tmp_path / "lora"))
    strip = lambda k: re.sub(r"\.(lora_[AB])\.[^.]+\.", r".\1.", k)  # noqa: E731
    loaded = {strip(k): v for k, v in pipe.transformer.named_parameters() if "lora_" in k}
    trained = {strip(k): v for k, v in trainer.policy.trainable.items()}
    assert loaded.keys() == trained.keys()
    for k, v in trained.items():
        torch.testing.assert_close(loaded[k].float(), v.detach().float(), rtol=0, atol=0)
