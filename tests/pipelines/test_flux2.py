"""The flux2 adapter (pipelines/flux2/) on the tiny offline FLUX.2-klein, base and distilled: the stacked Qwen3
hidden states, the packed 128-channel tokens and their ids, the step-dependent shift, sigma as the timestep, the
base model's CFG against the distilled model's single pass, a row's own negative, and the decode's batch-norm
de-normalisation, each against Flux2KleinPipeline's own loop; a short training run. The shared contract
(shapes, rollout = pipeline, on-policy log-prob, LoRA, every method) is tests/pipelines/test_family_contract.py's."""

import pytest
import torch

from flowrl.pipelines.base import adapter_class, list_pipelines
from flowrl.pipelines.flux2 import Flux2Adapter
from flowrl.pipelines.flux2.layout import mu_of
from flowrl.plan import ode_plan
from flowrl.resolve import resolve_config
from flowrl.rollout import rollout
from flowrl.trainer import Trainer

PROMPTS = ["a red cat", "a blue dog on a green field"]


def _model(path: str = "tiny"):
    return resolve_config("tiny-flux2", [f"model.path={path}"]).model


@pytest.fixture(scope="module")
def adapter():
    return adapter_class("flux2").from_config(_model(), seed=0)


@pytest.fixture(scope="module")
def distilled():
    return adapter_class("flux2").from_config(_model("tiny-distilled"), seed=0)


def _noise(adapter, n=2, seed=0):
    return adapter.initial_noise(n, torch.Generator().manual_seed(seed))


def test_registered_and_listed():
    assert "flux2" in list_pipelines() and adapter_class("flux2") is Flux2Adapter


def test_shapes_and_the_transformer_call(adapter, one_thread):
    cond = adapter.encode_prompts(PROMPTS)
    assert cond["prompt_embeds"].shape == (2, 16, 48)  # every padded token, hidden states 9, 18, 27 of width 16
    x = _noise(adapter)
    assert x.shape == (2, 4, 128) == (2, *adapter.latent_shape) and x.dtype == torch.float32
    calls = []
    handle = adapter.transformer.register_forward_pre_hook(lambda m, a, k: calls.append(k), with_kwargs=True)
    try:
        adapter.velocity(x, 0.75, adapter.model_inputs(cond, 1.0), 1.0)
    finally:
        handle.remove()
    (k,) = calls
    assert k["timestep"].tolist() == [0.75, 0.75] and k["guidance"] is None
    assert k["img_ids"][0].tolist() == [[0, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0], [0, 1, 1, 0]]
    assert k["txt_ids"].shape == (2, 16, 4) and k["txt_ids"][0, :, 3].tolist() == list(range(16))


def test_the_base_model_guides_and_the_distilled_one_does_not(adapter, distilled):
    assert (adapter.guidance(4.0).kind, adapter.guidance(4.0).passes) == ("cfg", 2)
    assert adapter.guidance(1.0).passes == 1
    assert (distilled.guidance(4.0).kind, distilled.guidance(4.0).passes) == ("none", 1)


@pytest.mark.parametrize(("which", "w"), [("base", 1.0), ("base", 4.0), ("distilled", 4.0)])
def test_the_ode_rollout_is_the_pipelines_loop(adapter, distilled, which, w, one_thread):
    """flowrl's ODE rollout on the adapter's sigmas equals Flux2KleinPipeline's own loop from the same packed
    latents, the decoded images too (the shift mu = compute_empirical_mu(N, T) is the pipeline's: no scheduler
    swapped)."""
    a, steps = (adapter if which == "base" else distilled), 4
    noise = _noise(a, seed=3)
    traj = rollout(a, a.encode_prompts(PROMPTS), ode_plan(a.sigmas(steps)), noise, None, w)
    theirs = a.pipe(
        prompt=list(PROMPTS),
        latents=noise.permute(0, 2, 1).reshape(2, 128, 2, 2),  # the pipeline takes them unpacked and packs them
        height=a.height,
        width=a.width,
        num_inference_steps=steps,
        guidance_scale=w,
        max_sequence_length=a.max_sequence_length,
        output_type="pt",
    ).images
    torch.testing.assert_close(a.decode(traj.final), theirs, rtol=1e-4, atol=1e-4)


def test_sigmas_shift_with_the_step_count(adapter):
    for steps in (4, 28):
        sigmas = adapter.sigmas(steps)
        shifted = torch.linspace(1.0, 1 / steps, steps, dtype=torch.float64)
        mu = mu_of(4, steps)
        want = torch.exp(torch.tensor(mu)) / (torch.exp(torch.tensor(mu)) + (1 / shifted - 1))
        torch.testing.assert_close(sigmas[:-1].double(), want, rtol=1e-5, atol=1e-6)
        assert float(sigmas[0]) == 1.0 and float(sigmas[-1]) == 0.0


def test_a_rows_negative_prompt_is_its_cfg_branch_in_the_pipeline_too(adapter, one_thread):
    x, w = _noise(adapter), 3.0
    cond = adapter.encode_prompts(PROMPTS, ["a white house", ""])
    v = adapter.velocity(x, 0.5, adapter.model_inputs(cond, w), w)
    plain = adapter.velocity(x, 0.5, adapter.model_inputs(adapter.encode_prompts(PROMPTS), w), w)
    assert (v[0] - plain[0]).abs().max() > 1e-4
    torch.testing.assert_close(v[1], plain[1], rtol=1e-5, atol=1e-6)
    gen = torch.Generator().manual_seed(4)
    traj = rollout(adapter, cond, ode_plan(adapter.sigmas(3)), _noise(adapter, seed=4), None, w)
    theirs = adapter.generate(list(PROMPTS), 3, w, gen, negative_prompts=["a white house", ""])
    torch.testing.assert_close(adapter.decode(traj.final), theirs, rtol=1e-4, atol=1e-4)


def test_two_iterations_train_the_distilled_model(tmp_path, one_thread):
    overrides = [f"output_dir={tmp_path}", "train.iterations=2", "sample.group_size=4", "sample.batch_size=4"]
    more = ["model.path=tiny-distilled", "sample.prompts_per_iteration=2", "log.eval_every=0"]
    rows = Trainer(resolve_config("tiny-flux2", overrides + more)).train()
    assert len(rows) == 2 and (tmp_path / "lora" / "pytorch_lora_weights.safetensors").is_file()


def test_the_gpu_stage_builds_the_published_size(tmp_path):
    """What ``--what flux2`` builds on the GPU, built here on meta: klein-base-4B's 3.88B transformer with
    Qwen3-4B; the estimate reads the same counts back from its configs, with the base model's two CFG passes."""
    from flowrl.benchmarks.perf import gpu
    from flowrl.estimate import model_size

    pipe = gpu.build_family("flux2", gpu.FULL, torch.device("meta"), torch.bfloat16)
    counts = tuple(sum(p.numel() for p in m.parameters()) for m in (pipe.transformer, pipe.text_encoder))
    assert counts == (3_875_544_576, 4_022_468_096)
    gpu.save_family_configs(pipe, tmp_path)
    m = model_size(gpu.family_config("flux2", gpu.FULL, tmp_path, 2, "bf16"))
    assert (m.transformer_params, m.text_encoder_params, m.image_tokens, m.passes) == (*counts, 576, 2)
