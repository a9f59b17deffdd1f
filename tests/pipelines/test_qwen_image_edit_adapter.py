"""The qwen_image_edit adapter at adapter level (the source-image plumbing from data rows comes with the
conditioning contract): the VL encoder sees the source images and their latents join the sequence, so flowrl's
noise-free rollout equals QwenImageEditPipeline's and QwenImageEditPlusPipeline's own calls on the tiny models;
the recomputed log-prob equals the rollout's; a LoRA export loads back into the edit pipeline; the prompt cache
keys rows by the images' content; counts a pipeline does not take are refused in one line."""

import pytest
import torch

from flowrl.config import ModelConfig
from flowrl.plan import make_plan, ode_plan
from flowrl.rollout import rollout, transition

PROMPTS = ["make the cat red", "a blue dog"]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _images(per_row: int, seed: int = 0) -> list[list[torch.Tensor]]:
    return [[torch.rand(3, 40, 48, generator=_gen(seed + 10 * i + j)) for j in range(per_row)] for i in range(2)]


def _adapter(path: str):
    from flowrl.pipelines.qwen_image_edit import QwenImageEditAdapter

    return QwenImageEditAdapter.from_config(
        ModelConfig(pipeline="qwen_image", path=path, resolution=32, max_sequence_length=64)
    )


@pytest.fixture(scope="module")
def edit():
    return _adapter("tiny")


@pytest.fixture(scope="module")
def plus():
    return _adapter("tiny-plus")


def _euler_on(pipe, sigmas):
    from diffusers import FlowMatchEulerDiscreteScheduler

    fixed = sigmas[:-1].tolist()

    class Fixed(FlowMatchEulerDiscreteScheduler):
        def set_timesteps(self, num_inference_steps=None, device=None, sigmas=None, mu=None, timesteps=None):
            super().set_timesteps(sigmas=fixed, device=device)

    own = pipe.scheduler
    pipe.scheduler = Fixed(num_train_timesteps=1000, shift=1.0)
    return own


@pytest.mark.parametrize(("which", "per_row"), [("edit", 1), ("plus", 2)])
def test_noise_free_rollout_is_the_edit_pipelines_own_call(request, one_thread, which, per_row):
    adapter = request.getfixturevalue(which)
    images = _images(per_row)
    cond = adapter.encode_prompts(PROMPTS, images=images)
    assert cond["image_latents"].shape == (2, 4096 * per_row, 64)  # 1024 x 1024 area, packed 2x2
    sigmas = adapter.sigmas(3)
    traj = rollout(adapter, cond, ode_plan(sigmas), adapter.initial_noise(2, _gen(5)), torch.arange(2), 3.0)
    own = _euler_on(adapter.pipe, sigmas)
    try:
        theirs = adapter.generate(PROMPTS, 3, 3.0, _gen(5), images=images)
    finally:
        adapter.pipe.scheduler = own
    torch.testing.assert_close(adapter.decode(traj.final), theirs, rtol=1e-5, atol=1e-5)


def test_recomputed_log_prob_equals_the_rollouts(plus, one_thread):
    cond = plus.encode_prompts(PROMPTS, images=_images(1))
    plan = make_plan(plus.sigmas(3), noise_level=0.7, timestep_fraction=1.0)
    traj = rollout(plus, cond, plan, plus.initial_noise(2, _gen(1)), torch.arange(2), 3.0, _gen(2))
    inputs = plus.model_inputs(cond, 3.0)
    for j in traj.plan.trained_indices:
        x, x_next = traj.pair(j)
        with torch.no_grad():
            out = transition(plus, traj.plan, j, x, inputs, 3.0, x_next=x_next)
        assert torch.equal(out.log_prob, traj.log_probs[:, j]), j


def test_the_encoder_sees_the_image_and_the_cache_keys_it(edit, one_thread):
    a = edit.encode_prompts(PROMPTS[:1], images=_images(1, seed=0)[:1])
    b = edit.encode_prompts(PROMPTS[:1], images=_images(1, seed=50)[:1])
    again = edit.encode_prompts(PROMPTS[:1], images=_images(1, seed=0)[:1])
    assert not torch.equal(a["prompt_embeds"], b["prompt_embeds"])  # the vision tokens are in the embeddings
    assert not torch.equal(a["image_latents"], b["image_latents"])
    assert not torch.equal(a["negative_prompt_embeds"], b["negative_prompt_embeds"])  # the negative sees it too
    for key in a:
        assert torch.equal(a[key], again[key]), key


def test_counts_the_pipeline_does_not_take_are_refused_in_one_line(edit, plus):
    assert (edit.source_images, plus.source_images) == ((1, 1), (1, 3))
    with pytest.raises(ValueError, match=r"^qwen_image_edit takes 1\.\.1 source image\(s\) per prompt; a row has 2$"):
        edit.encode_prompts(PROMPTS, images=_images(2))
    with pytest.raises(ValueError, match="^qwen_image_edit needs 1..3 source image"):
        plus.encode_prompts(PROMPTS)
    with pytest.raises(ValueError, match="same number of source images$"):
        plus.encode_prompts(PROMPTS, images=[_images(1)[0], _images(2)[1]])


def test_a_lora_export_loads_back_into_the_edit_pipeline(edit, tmp_path, one_thread):
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    trained = _adapter("tiny")
    trained.transformer.add_adapter(
        LoraConfig(r=2, lora_alpha=4, init_lora_weights="gaussian", target_modules=trained.lora_target_modules)
    )
    (tmp_path / "lora").mkdir()
    trained.save_lora(tmp_path / "lora", get_peft_model_state_dict(trained.transformer))
    assert type(edit.pipe).__name__ == "QwenImageEditPipeline"
    assert edit.load_trained(tmp_path) == "LoRA"
    loaded = {k for k, _ in edit.transformer.named_parameters() if "lora_" in k}
    assert len(loaded) == len([k for k, _ in trained.transformer.named_parameters() if "lora_" in k]) > 0


def test_model_source_area_sets_the_source_size_the_layout_and_the_estimate_count(one_thread):
    """``model.source_area``: each source VAE-encoded (and, for Edit-Plus, seen by the VL encoder, at most 384 x
    384) at that area instead of the pipelines' 1024 x 1024, so the source's packed tokens in every forward shrink
    from 64 x 64 to 2 x 2 at 32 x 32; the family layout and the estimate count the same tokens."""
    from flowrl.configkit import ConfigError
    from flowrl.estimate.qwen_image_edit import _source_grid
    from flowrl.pipelines.qwen_image_edit import QwenImageEditAdapter, layout
    from flowrl.resolve import resolve_config

    small = ModelConfig(pipeline="qwen_image_edit", path="tiny-plus", resolution=32, max_sequence_length=64,
                        source_area=32 * 32)  # fmt: skip
    adapter = QwenImageEditAdapter.from_config(small)
    assert (adapter.vae_size, adapter.vl_size) == ((32, 32), (32, 32))
    cond = adapter.encode_prompts(PROMPTS, images=_images(1))
    assert cond["image_latents"].shape[1] == 2 * 2  # (32 / 8 / 2)^2 packed tokens
    assert layout.for_model(small).tokens == 2 * 2 + 2 * 2
    default = ModelConfig(pipeline="qwen_image_edit", path="tiny", resolution=32)
    assert layout.for_model(default).tokens == 2 * 2 + 64 * 64
    assert (_source_grid(32, 32), _source_grid(32, 32, 32 * 32)) == ((64, 64), (2, 2))
    x = torch.randn(2, *adapter.latent_shape)
    v = adapter.velocity(x, 0.5, adapter.model_inputs(cond, 4.0), 4.0)
    assert v.shape == x.shape
    with pytest.raises(ConfigError, match=r"^model.source_area: at least 1024 pixels \(32 x 32\), got 100$"):
        resolve_config("tiny-qwen-image-edit", ["model.source_area=100"])


def test_the_gpu_stage_builds_the_published_size(tmp_path):
    """What ``--what qwen_image_edit`` builds on the GPU, built here on meta: Qwen-Image-Edit-Plus with the 20.43B
    transformer and Qwen2.5-VL-7B (8.29B) in bf16 and the VAE in fp32; its saved configs give the estimate the same
    counts, and the stage's settings keep the pipelines' 1024 x 1024 source area (4,096 source tokens)."""
    from _gpu_stage import published_build

    pipe, cfg, m = published_build("qwen_image_edit", tmp_path, (20_430_401_088, 8_292_166_656))
    assert type(pipe).__name__ == "QwenImageEditPlusPipeline"
    assert cfg.model.source_area is None and cfg.data.prompts == "builtin:tiny_edit"
    assert (m.image_tokens, m.passes, cfg.sample.num_steps) == (1024 + 4096, 2, 10)


def test_the_gpu_stage_smoke_runs_an_edit_iteration(capsys):
    """--what qwen_image_edit on the tiny model: one flowrl iteration beside its estimate."""
    from flowrl.benchmarks.perf import gpu

    rows = gpu.main(["--smoke", "--what", "qwen_image_edit", "--iterations", "2", "--repeats", "1"])
    row = next(r for r in rows if r["model"] == "Qwen-Image-Edit-2509 (flowrl iteration)")
    assert row["seconds"] > 0 and row["est_seconds"] > 0 and row["samples"] == 2
