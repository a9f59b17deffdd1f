"""The z_image adapter (pipelines/z_image/) on the tiny offline Z-Image: the pipeline's per-prompt text lengths,
its timestep (1 - sigma) and negated output, its guidance convention (the pipeline's g is flowrl's w - 1, Turbo's
g = 0 one pass), its cfg_normalization and cfg_truncation, and its sigmas, each against ZImagePipeline's own
loop; a short training run. The shared contract (shapes, rollout = pipeline, on-policy log-prob, LoRA, every
method) is tests/pipelines/test_family_contract.py's."""

import pytest
import torch

from flowrl.pipelines.base import adapter_class, list_pipelines
from flowrl.pipelines.z_image import ZImageAdapter
from flowrl.plan import ode_plan
from flowrl.resolve import resolve_config
from flowrl.rollout import rollout
from flowrl.trainer import Trainer

PROMPTS = ["a red cat", "a blue dog on a green field"]


@pytest.fixture(scope="module")
def adapter():
    return adapter_class("z_image").from_config(resolve_config("tiny-z-image").model, seed=0)


def _noise(adapter, n=2, seed=0):
    return adapter.initial_noise(n, torch.Generator().manual_seed(seed))


def test_registered_and_listed():
    assert "z_image" in list_pipelines() and adapter_class("z_image") is ZImageAdapter


def test_each_prompt_keeps_its_own_length(adapter, one_thread):
    cond = adapter.encode_prompts(PROMPTS)
    # the chat template's 5 tokens around the words (thinking on: no think block), padding dropped
    assert cond["prompt_lengths"].tolist() == [8, 12]
    assert cond["prompt_embeds"].shape == (2, 24, 16)
    own, _ = adapter.pipe.encode_prompt(list(PROMPTS), do_classifier_free_guidance=False, max_sequence_length=24)
    for i, e in enumerate(own):
        assert torch.equal(cond["prompt_embeds"][i, : len(e)], e)
        assert not cond["prompt_embeds"][i, len(e) :].any()


def test_the_transformer_gets_one_minus_sigma_and_the_velocity_is_its_negated_output(adapter, one_thread):
    x, cond = _noise(adapter), adapter.encode_prompts(PROMPTS)
    calls = []
    handle = adapter.transformer.register_forward_hook(lambda m, a, k, out: calls.append((k, out)), with_kwargs=True)
    try:
        v = adapter.velocity(x, 0.75, adapter.model_inputs(cond, 1.0), 1.0)
    finally:
        handle.remove()
    ((kwargs, out),) = calls
    assert torch.allclose(kwargs["t"], torch.full((2,), 0.25)) and len(kwargs["x"]) == 2
    assert [len(c) for c in kwargs["cap_feats"]] == [8, 12]
    assert torch.equal(v, -torch.stack(out[0]).squeeze(2).float())


def test_guidance_is_flowrls_scale_and_the_pipelines_minus_one(adapter):
    assert (adapter.guidance(5.0).kind, adapter.guidance(5.0).passes) == ("cfg", 2)
    for turbo in (1.0, 0.5):  # the pipeline's guidance 0 (Turbo) and below: the conditional branch alone
        assert (adapter.guidance(turbo).kind, adapter.guidance(turbo).passes) == ("none", 1)


def _pipeline_latents(adapter, noise, steps, w, **kwargs):
    return adapter.pipe(
        prompt=list(PROMPTS),  # the pipeline rewrites the list it is given
        latents=noise.clone(),
        height=adapter.height,
        width=adapter.width,
        num_inference_steps=steps,
        guidance_scale=w - 1.0,
        max_sequence_length=adapter.max_sequence_length,
        output_type="latent",
        **kwargs,
    ).images


@pytest.mark.parametrize(
    ("w", "knobs"),
    [(1.0, {}), (4.0, {}), (4.0, {"cfg_normalization": 1.0}), (4.0, {"cfg_truncation": 0.2})],
    ids=["turbo", "cfg", "cfg-normalization", "cfg-truncation"],
)
def test_the_ode_rollout_is_the_pipelines_loop(adapter, w, knobs, one_thread):
    """flowrl's Euler ODE rollout on the adapter's sigmas equals ZImagePipeline's own loop, latents given, with
    each of its guidance settings (the shift-3 schedule is the pipeline's: the test swaps no scheduler)."""
    steps, noise = 4, _noise(adapter, seed=3)
    adapter.cfg_normalization = knobs.get("cfg_normalization", 0.0)
    adapter.cfg_truncation = knobs.get("cfg_truncation", 1.0)
    try:
        traj = rollout(adapter, adapter.encode_prompts(PROMPTS), ode_plan(adapter.sigmas(steps)), noise, None, w)
        theirs = _pipeline_latents(adapter, noise, steps, w, **knobs)
    finally:
        adapter.cfg_normalization, adapter.cfg_truncation = 0.0, 1.0
    torch.testing.assert_close(traj.final, theirs, rtol=1e-4, atol=1e-4)


def test_sigmas_are_the_pipelines(adapter):
    sigmas = adapter.sigmas(8)
    adapter.pipe.scheduler.set_timesteps(sigmas=torch.linspace(1.0, 1 / 8, 8).tolist(), mu=0.5)
    assert torch.equal(sigmas, adapter.pipe.scheduler.sigmas.float())
    assert float(sigmas[0]) == 1.0 and float(sigmas[1]) == pytest.approx(3 * 0.875 / (1 + 2 * 0.875))


def test_a_rows_negative_prompt_is_its_cfg_branch(adapter, one_thread):
    x, w = _noise(adapter), 3.0
    cond = adapter.encode_prompts(PROMPTS, ["a white house", ""])
    v = adapter.velocity(x, 0.5, adapter.model_inputs(cond, w), w)
    plain = adapter.velocity(x, 0.5, adapter.model_inputs(adapter.encode_prompts(PROMPTS), w), w)
    assert (v[0] - plain[0]).abs().max() > 1e-4
    torch.testing.assert_close(v[1], plain[1], rtol=1e-5, atol=1e-6)


def test_two_iterations_train_with_cfg(tmp_path, one_thread):
    overrides = [f"output_dir={tmp_path}", "train.iterations=2", "sample.group_size=4", "sample.batch_size=4"]
    more = ["sample.guidance_scale=3.0", "sample.prompts_per_iteration=2", "log.eval_every=0"]
    cfg = resolve_config("tiny-z-image", overrides + more)
    rows = Trainer(cfg).train()
    assert len(rows) == 2 and (tmp_path / "lora" / "pytorch_lora_weights.safetensors").is_file()


def test_the_gpu_stage_builds_the_published_size(tmp_path):
    """What ``--what z_image`` builds on the GPU, built here on meta: Z-Image's 6.15B transformer with Qwen3-4B,
    the transformer in bf16 and the VAE in fp32; the estimate reads the same counts back from its configs."""
    from flowrl.benchmarks.perf import gpu
    from flowrl.estimate import model_size

    pipe = gpu.build_family("z_image", gpu.FULL, torch.device("meta"), torch.bfloat16)
    counts = tuple(sum(p.numel() for p in m.parameters()) for m in (pipe.transformer, pipe.text_encoder))
    assert counts == (6_154_908_736, 4_022_468_096)
    assert pipe.transformer.dtype == torch.bfloat16 and pipe.vae.dtype == torch.float32
    gpu.save_family_configs(pipe, tmp_path)
    m = model_size(gpu.family_config("z_image", gpu.FULL, tmp_path, 2, "bf16"))
    assert (m.transformer_params, m.text_encoder_params, m.image_tokens, m.passes) == (*counts, 1024, 1)
