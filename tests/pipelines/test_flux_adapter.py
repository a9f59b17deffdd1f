"""The flux adapter (pipelines/flux/) on the tiny offline FLUX.1-dev: shapes and dtypes, the pipeline's own
sigmas (dynamic shift mu) and denoising loop reproduced by flowrl's ODE rollout, the on-policy log-prob, the
LoRA export FluxPipeline loads, on the packed (B, N, 64) latents (every method runs an iteration on it in
tests/pipelines/test_family_contract.py)."""

import re

import pytest
import torch

from flowrl.pipelines.base import adapter_class, list_pipelines
from flowrl.pipelines.flux import FluxAdapter
from flowrl.pipelines.flux.layout import flux_mu
from flowrl.pipelines.flux.tiny import build_tiny_flux
from flowrl.plan import ode_plan
from flowrl.resolve import resolve_config
from flowrl.rollout import rollout
from flowrl.trainer import Trainer
from spies import record_calls
from tiny_runs import NO_EVAL, small

PROMPTS = ["a red cat", "a blue dog"]
SMALL = small(3, *NO_EVAL)


@pytest.fixture(scope="module")
def adapter():
    return adapter_class("flux").from_config(resolve_config("tiny-flux").model, seed=0)


def test_registered_and_listed(capsys):
    from flowrl.cli import main

    assert "flux" in list_pipelines() and adapter_class("flux") is FluxAdapter
    assert main(["ls", "pipelines"]) == 0
    assert "flux" in capsys.readouterr().out.split()


def test_shapes_dtypes_and_the_transformer_call(adapter, one_thread):
    cond = adapter.encode_prompts(PROMPTS)
    assert cond["prompt_embeds"].shape == (2, 16, 32) and cond["pooled_prompt_embeds"].shape == (2, 32)
    assert adapter.encode_prompts(PROMPTS[::-1])["prompt_embeds"][0].equal(cond["prompt_embeds"][1])  # cached rows
    x = adapter.initial_noise(2, torch.Generator().manual_seed(0))
    assert x.shape == (2, 4, 64) == (2, *adapter.latent_shape) and x.dtype == torch.float32
    inputs = adapter.model_inputs(cond, 3.5)
    assert inputs["prompt_embeds"].shape[0] == 2  # no CFG rows
    calls, handle = record_calls(adapter.transformer)
    try:
        v = adapter.velocity(x, 0.75, inputs, 3.5)
        v_rows = adapter.velocity(x, torch.tensor([0.75, 0.75]), inputs, 3.5)
    finally:
        handle.remove()
    assert v.shape == x.shape and v.dtype == torch.float32 and torch.equal(v, v_rows)
    assert len(calls) == 2 and calls[0]["hidden_states"].shape == (2, 4, 64)
    # FluxPipeline feeds timesteps / 1000 (the transformer multiplies by 1000): sigma itself; guidance embedded
    assert calls[0]["timestep"].tolist() == [0.75, 0.75]
    assert calls[0]["guidance"].tolist() == [3.5, 3.5]
    assert calls[0]["img_ids"].shape == (4, 3) and calls[0]["txt_ids"].shape == (16, 3)
    assert not torch.equal(v, adapter.velocity(x, 0.75, inputs, 1.0))  # the guidance input matters
    images = adapter.decode(x)
    assert images.shape == (2, 3, 32, 32) and images.dtype == torch.float32
    assert 0 <= images.min() and images.max() <= 1
    assert adapter.encode_prompts(PROMPTS, ["", ""]).keys() == cond.keys()
    with pytest.raises(ValueError, match="no negative branch"):
        adapter.encode_prompts(PROMPTS, ["blurry", ""])
    with pytest.raises(NotImplementedError, match="embedded"):
        adapter.negative_conditioning(2)


@pytest.mark.parametrize("resolution, steps", [(32, 4), (64, 6)])
def test_sigmas_are_the_pipelines(one_thread, resolution, steps):
    pipe = build_tiny_flux(seed=0)
    adapter = FluxAdapter(pipe, resolution=resolution, max_sequence_length=16)
    sigmas = adapter.sigmas(steps)
    assert adapter.mu() == pytest.approx(flux_mu(resolution, resolution))
    pipe(
        prompt="a cat",
        num_inference_steps=steps,
        height=resolution,
        width=resolution,
        max_sequence_length=16,
        output_type="latent",
        generator=torch.Generator().manual_seed(0),
    )
    assert sigmas.shape == (steps + 1,) and sigmas[0].item() == 1.0 and sigmas[-1].item() == 0.0
    assert torch.equal(sigmas, pipe.scheduler.sigmas.float())


def test_ode_rollout_is_the_pipelines_output(adapter, one_thread):
    x = adapter.initial_noise(2, torch.Generator().manual_seed(3))
    traj = rollout(adapter, adapter.encode_prompts(PROMPTS), ode_plan(adapter.sigmas(4)), x, torch.arange(2), 3.5)
    assert traj.states.shape == (2, 5, 4, 64) and torch.all(traj.log_probs == 0)
    pipe = build_tiny_flux(seed=0)
    ref = pipe(
        prompt=PROMPTS,
        num_inference_steps=4,
        height=32,
        width=32,
        guidance_scale=3.5,
        max_sequence_length=16,
        latents=x.clone(),
        output_type="latent",
    ).images
    torch.testing.assert_close(traj.final, ref, rtol=1e-5, atol=1e-5)


def test_training_is_on_policy_changes_every_lora_weight_and_exports_a_loadable_lora(tmp_path, one_thread):
    """`flowrl train tiny-flux train.iterations=2` through the Trainer (smaller batches)."""
    cfg = resolve_config("tiny-flux", [f"output_dir={tmp_path}", *SMALL, "train.iterations=2"])
    trainer = Trainer(cfg)
    before = {k: p.detach().clone() for k, p in trainer.policy.trainable.items()}
    rows = trainer.train()
    assert [r["iteration"] for r in rows] == [0, 1]
    assert rows[0]["policy/onpolicy_logp_diff"] <= 1e-4
    unchanged = [k for k, p in trainer.policy.trainable.items() if torch.equal(p, before[k])]
    assert not unchanged, f"{len(unchanged)} of {len(before)} trainable tensors did not change, e.g. {unchanged[:3]}"
    assert (tmp_path / "lora" / "pytorch_lora_weights.safetensors").is_file()

    pipe = build_tiny_flux(seed=cfg.seed)
    pipe.load_lora_weights(str(tmp_path / "lora"))

    def strip(name):  # drop the adapter name ("default", "default_0", ...)
        return re.sub(r"\.(lora_[AB])\.[^.]+\.", r".\1.", name)

    trained = {strip(k): v for k, v in trainer.policy.trainable.items()}
    loaded = {strip(k): v for k, v in pipe.transformer.named_parameters() if "lora_" in k}
    assert trained.keys() == loaded.keys()
    for k, v in trained.items():
        torch.testing.assert_close(loaded[k].float(), v.detach().float().cpu(), rtol=0, atol=0)


def test_model_path_refusals(tmp_path):
    from flowrl.pipelines.base import check_model_path

    def model(path):
        return resolve_config("tiny-flux", [f"model.path={path}"]).model

    check_model_path(model("tiny"))
    check_model_path(model("black-forest-labs/FLUX.1-dev"))  # a hub id: loading says whether it can be fetched
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        check_model_path(model(str(tmp_path / "missing")))
    (tmp_path / "flux.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="single-file FLUX checkpoints are not supported"):
        check_model_path(model(str(tmp_path / "flux.safetensors")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="is empty"):
        check_model_path(model(str(tmp_path / "empty")))
