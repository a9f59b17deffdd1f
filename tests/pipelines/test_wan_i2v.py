"""Wan image-to-video (``model.pipeline: wan_i2v``) on its three tiny models: Wan 2.1 I2V (a CLIP image encoder),
Wan 2.2 I2V-A14B (two experts, no image encoder) and Wan 2.2 TI2V-5B's image mode (``expand_timesteps``). The
source-image contract (one image a prompt, refused in one line otherwise, cached by content), the conditioning
the pipeline's own ``prepare_latents`` / ``encode_image`` make, flowrl's noise-free rollout equal to
``WanImageToVideoPipeline`` (``generate``), the on-policy log-prob, TI2V's first frame (timestep 0, the source
latent at the end) and the LoRA the pipeline loads back: the conformance kit's checks, with images."""

import re

import pytest
import torch

from flowrl.pipelines.base import adapter_class, list_pipelines
from flowrl.pipelines.wan_i2v import WanI2VAdapter
from flowrl.pipelines.wan_i2v.adapter import image_key
from flowrl.pipelines.wan_i2v.tiny import build_tiny_wan_i2v
from flowrl.plan import make_plan, ode_plan
from flowrl.resolve import resolve_config
from flowrl.rollout import rollout, transition
from tiny_runs import NO_EVAL, small

PROMPTS = ["a red cat", "a blue dog"]
PATHS = {"tiny": 32, "tiny-a14b": 32, "tiny-ti2v": 64}  # model.path -> resolution
GUIDANCE = 3.0


def _images(seed: int = 0, n: int = 2) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [[torch.rand(3, 40, 48, generator=g)] for _ in range(n)]  # not the model's size: the pipeline resizes


def _cfg(path: str):
    return resolve_config("tiny-wan-i2v", [f"model.path={path}", f"model.resolution={PATHS[path]}"])


@pytest.fixture(scope="module", params=list(PATHS))
def i2v(request):
    return request.param, WanI2VAdapter.from_config(_cfg(request.param).model, seed=0)


def _euler_on(pipe, sigmas):
    from diffusers import FlowMatchEulerDiscreteScheduler

    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=1.0)
    own = scheduler.set_timesteps
    scheduler.set_timesteps = lambda *args, device=None, **kwargs: own(sigmas=sigmas[:-1].tolist(), device=device)
    old, pipe.scheduler = pipe.scheduler, scheduler
    return old


def test_registered_with_one_source_image_a_row():
    assert "wan_i2v" in list_pipelines() and adapter_class("wan_i2v") is WanI2VAdapter
    assert WanI2VAdapter.source_images == (1, 1) and WanI2VAdapter.media_kind == "video"
    assert resolve_config(WanI2VAdapter.tiny_recipe).model.pipeline == "wan_i2v"
    assert getattr(adapter_class("wan"), "source_images", (0, 0)) == (0, 0)


def test_the_conditioning_rows_of_each_model(i2v, one_thread):
    path, a = i2v
    cond = a.encode_prompts(PROMPTS, images=_images())
    z, f, h, w = a.latent_shape
    want = {"tiny": {"image_condition": (2, 20, f, h, w), "image_embeds": (2, 17, 8)},
            "tiny-a14b": {"image_condition": (2, 20, f, h, w)},
            "tiny-ti2v": {"image_latents": (2, 48, 1, h, w)}}[path]  # fmt: skip
    assert {k: tuple(v.shape) for k, v in cond.items() if k != "prompt_embeds"} == want
    assert a.two_experts == (path == "tiny-a14b") and a.expand_timesteps == (path == "tiny-ti2v")
    if "image_condition" in cond:  # the mask: 4 ones over the first latent frame, zeros after; then the latent
        mask = cond["image_condition"][:, :4]
        assert mask[:, :, 0].eq(1).all() and mask[:, :, 1:].eq(0).all()
    swapped = a.encode_prompts(PROMPTS, images=_images()[::-1])
    for key in want:  # a row's image conditioning follows its image
        assert torch.equal(swapped[key][0], cond[key][1]) and torch.equal(swapped[key][1], cond[key][0])
    inputs = a.model_inputs(cond, GUIDANCE)
    assert all(inputs[key].shape[0] == 4 for key in want)  # both CFG branches see the image


def test_one_image_a_prompt_or_one_line(i2v):
    _, a = i2v
    with pytest.raises(ValueError, match="one source image per prompt") as exc:
        a.encode_prompts(PROMPTS)
    assert "\n" not in str(exc.value)
    two = [_images()[0] * 2, _images()[1]]
    with pytest.raises(ValueError, match="prompt 0 has 2 source images; image-to-video takes one"):
        a.encode_prompts(PROMPTS, images=two)
    with pytest.raises(ValueError, match="1 source-image lists for 2 prompts"):
        a.encode_prompts(PROMPTS, images=_images(n=1))
    with pytest.raises(ValueError, match="one source image per prompt"):
        a.generate(PROMPTS, 2, 1.0, torch.Generator().manual_seed(0))


def test_an_image_is_encoded_once_and_keyed_by_content(one_thread):
    a = WanI2VAdapter.from_config(_cfg("tiny-a14b").model, seed=0)
    calls = []
    handle = a.pipe.vae.register_forward_pre_hook(lambda *args: calls.append(1))
    encode = a.pipe.vae.encode
    a.pipe.vae.encode = lambda *args, **kw: (calls.append(1), encode(*args, **kw))[1]
    try:
        images = _images()
        a.encode_prompts(PROMPTS, images=images)
        a.encode_prompts(PROMPTS[::-1], images=[[images[1][0].clone()], [images[0][0].clone()]])
    finally:
        handle.remove()
        a.pipe.vae.encode = encode
    assert len(calls) == 2  # one VAE encode per distinct image
    assert image_key(images[0][0]) == image_key(images[0][0].clone()) != image_key(images[1][0])


def test_noise_free_rollout_is_wan_image_to_video_pipeline(i2v, one_thread):
    """flowrl's ODE rollout, decoded, equals ``generate`` (``WanImageToVideoPipeline``, one call a row) from the
    same generator when both step the adapter's sigmas with Euler; TI2V: its first frame ends on the image."""
    path, a = i2v
    sigmas, images = a.sigmas(3), _images(1)
    cond = a.encode_prompts(PROMPTS, images=images)
    noise = a.initial_noise(2, torch.Generator().manual_seed(5))
    traj = rollout(a, cond, ode_plan(sigmas), noise, torch.arange(2), GUIDANCE)
    mine = a.decode(traj.final)["video"]
    own = _euler_on(a.pipe, sigmas)
    try:
        theirs = a.generate(PROMPTS, 3, GUIDANCE, torch.Generator().manual_seed(5), images=images)["video"]
    finally:
        a.pipe.scheduler = own
    assert mine.shape == theirs.shape == (2, 5, 3, PATHS[path], PATHS[path])
    torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)
    if path == "tiny-ti2v":
        torch.testing.assert_close(traj.final[:, :, :1], cond["image_latents"], rtol=0, atol=1e-5)


def test_recomputed_log_prob_equals_the_rollouts(i2v, one_thread):
    _, a = i2v
    cond = a.encode_prompts(PROMPTS, images=_images(2))
    plan = make_plan(a.sigmas(3), noise_level=0.7, timestep_fraction=1.0)
    traj = rollout(a, cond, plan, a.initial_noise(2, torch.Generator().manual_seed(1)), torch.arange(2), GUIDANCE,
                   torch.Generator().manual_seed(2))  # fmt: skip
    inputs = a.model_inputs(cond, GUIDANCE)
    assert traj.plan.trained_indices
    for j in traj.plan.trained_indices:
        x, x_next = traj.pair(j)
        with torch.no_grad():
            out = transition(a, traj.plan, j, x, inputs, GUIDANCE, x_next=x_next)
        assert torch.isfinite(out.log_prob).all() and torch.equal(out.log_prob, traj.log_probs[:, j]), j


def test_ti2v_first_frame_tokens_at_timestep_zero_and_no_gradient_there(one_thread):
    a = WanI2VAdapter.from_config(_cfg("tiny-ti2v").model, seed=0)
    cond = a.encode_prompts(PROMPTS, images=_images())
    x = a.initial_noise(2, torch.Generator().manual_seed(0))
    seen = []
    handle = a.transformer.register_forward_pre_hook(lambda m, args, kw: seen.append(kw), with_kwargs=True)
    try:
        v = a.velocity(x, 0.5, a.model_inputs(cond, 1.0), 1.0)
    finally:
        handle.remove()
    assert seen[0]["timestep"].tolist() == [[0.0] * 4 + [500.0] * 4] * 2  # 2 x 2 tokens a latent frame
    assert torch.equal(seen[0]["hidden_states"][:, :, :1], cond["image_latents"])  # the image replaces the noise
    torch.testing.assert_close(v[:, :, :1], (x[:, :, :1] - cond["image_latents"]) / 0.5)
    x.requires_grad_(False)
    param = next(p for n, p in a.transformer.named_parameters() if n.endswith("proj_out.weight"))
    param.requires_grad_(True)
    v = a.velocity(x, 0.5, a.model_inputs(cond, 1.0), 1.0)
    (grad,) = torch.autograd.grad(v[:, :, :1].sum(), param, allow_unused=True)
    assert grad is None or not grad.any()  # the first frame's velocity is not the model's
    param.requires_grad_(False)


def test_a14b_experts_switch_at_0_9():
    a = WanI2VAdapter.from_config(_cfg("tiny-a14b").model, seed=0)
    assert a.boundary_ratio == 0.9 and a.pipe.image_encoder is None
    assert a.expert_of(0.91) == "high_noise" and a.expert_of(0.89) == "low_noise"


def test_a_lora_export_loads_back_into_wan_image_to_video_pipeline(tmp_path, one_thread):
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    cfg = _cfg("tiny")
    trained = WanI2VAdapter.from_config(cfg.model, seed=0)
    trained.transformer.add_adapter(
        LoraConfig(r=2, lora_alpha=4, init_lora_weights="gaussian", target_modules=trained.lora_target_modules)
    )
    with torch.no_grad():
        for n, p in trained.transformer.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(7)) * 0.01)
    (tmp_path / "lora").mkdir()
    trained.save_lora(tmp_path / "lora", get_peft_model_state_dict(trained.transformer))
    pipe = build_tiny_wan_i2v(seed=0)
    pipe.load_lora_weights(str(tmp_path / "lora"))
    strip = lambda k: re.sub(r"\.(lora_[AB])\.[^.]+\.", r".\1.", k)  # noqa: E731
    want = {strip(k): v for k, v in trained.transformer.named_parameters() if "lora_" in k}
    got = {strip(k): v for k, v in pipe.transformer.named_parameters() if "lora_" in k}
    assert want and want.keys() == got.keys()
    for k, v in want.items():
        torch.testing.assert_close(got[k].float(), v.detach().float(), rtol=0, atol=0)
    assert WanI2VAdapter.from_config(cfg.model, seed=0).load_trained(tmp_path) == "LoRA"


def test_model_path_refusals(tmp_path):
    from flowrl.pipelines.base import check_model_path

    with pytest.raises(ValueError, match="needs a two-expert model"):
        check_model_path(resolve_config("tiny-wan-i2v", ["model.trained_experts=high_noise"]).model)
    with pytest.raises(ValueError, match="model.num_frames"):
        check_model_path(resolve_config("tiny-wan-i2v", ["model.num_frames=6"]).model)
    (tmp_path / "w.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="wan_i2v pipeline loads a diffusers folder"):
        check_model_path(resolve_config("tiny-wan-i2v", [f"model.path={tmp_path / 'w.safetensors'}"]).model)


SMALL = small(3, *NO_EVAL)


def test_tiny_wan_i2v_trains_from_its_rows_source_images(tmp_path, one_thread):
    """`flowrl train tiny-wan-i2v` end to end: the rows of builtin:tiny_i2v carry their image through the trainer
    to ``encode_prompts(..., images=...)``; on policy, every LoRA weight moves, the LoRA loads back."""
    import flowrl.rollout

    if not hasattr(flowrl.rollout, "encode_rows"):
        pytest.skip("the trainer does not carry a row's source images yet")
    from flowrl.trainer import Trainer

    cfg = resolve_config("tiny-wan-i2v", [f"output_dir={tmp_path}", *SMALL, "train.iterations=1"])
    trainer = Trainer(cfg)
    before = {k: p.detach().clone() for k, p in trainer.policy.trainable.items()}
    rows = trainer.train()
    assert rows[0]["policy/onpolicy_logp_diff"] <= 1e-4
    assert all(not torch.equal(p, before[k]) for k, p in trainer.policy.trainable.items())
    assert WanI2VAdapter.from_config(cfg.model, seed=cfg.seed).load_trained(tmp_path) == "LoRA"


def test_wan21_i2v_needs_512_text_tokens():
    """diffusers' Wan attention takes the context tokens before the last 512 as the CLIP image states: a shorter
    text would drop the image and attend to it as text."""
    with pytest.raises(ValueError, match="model.max_sequence_length: Wan 2.1 I2V needs 512") as exc:
        WanI2VAdapter.from_config(resolve_config("tiny-wan-i2v", ["model.max_sequence_length=16"]).model, seed=0)
    assert "\n" not in str(exc.value)
    a14b = resolve_config("tiny-wan-i2v", ["model.path=tiny-a14b", "model.max_sequence_length=16"]).model
    assert WanI2VAdapter.from_config(a14b, seed=0).max_sequence_length == 16  # no image encoder: any length
