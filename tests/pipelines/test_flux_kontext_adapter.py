"""The flux_kontext adapter (pipelines/flux_kontext/) on the tiny offline FLUX.1-Kontext-dev: the source latents as
FluxKontextPipeline makes them, appended to the tokens of every transformer call, the noise-free rollout equal to
the pipeline's own call, the on-policy log-prob, a LoRA FluxKontextPipeline loads, the cache keyed by the source,
the one-line refusal of a row without its image, and a trained iteration whose rollout batch and reward metadata
carry each row's source (every method runs an iteration in tests/pipelines/test_family_contract.py)."""

import pytest
import torch

from flowrl.pipelines.base import adapter_class, source_images_of
from flowrl.pipelines.flux_kontext import FluxKontextAdapter
from flowrl.pipelines.kit.images import load_image
from flowrl.plan import make_plan, ode_plan
from flowrl.resolve import resolve_config
from flowrl.rollout import rollout, transition
from flowrl.trainer import Trainer
from tiny_runs import NO_EVAL, small

PROMPTS = ["make the square red", "make the round blue"]
SMALL = small(3, *NO_EVAL)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _sources(seed: int = 0, sizes=((40, 48), (32, 32))) -> list[list[torch.Tensor]]:
    return [[torch.rand(3, h, w, generator=_gen(seed + i))] for i, (h, w) in enumerate(sizes)]


@pytest.fixture(scope="module")
def adapter():
    return adapter_class("flux_kontext").from_config(resolve_config("tiny-edit").model, seed=0)


def test_registered_with_one_source_image_per_row(adapter):
    assert adapter_class("flux_kontext") is FluxKontextAdapter and source_images_of(FluxKontextAdapter) == (1, 1)
    assert type(adapter.pipe).__name__ == "FluxKontextPipeline"


def test_source_latents_are_the_pipelines_and_enter_every_call(adapter, one_thread):
    sources = _sources()
    cond = adapter.encode_prompts(PROMPTS, images=sources)
    assert cond["image_latents"].shape == (2, 4, 64)
    pixels = adapter.source_pixels(sources)  # (2, 3, 32, 32): each resized to the output size
    assert pixels.shape == (2, 3, 32, 32)
    with torch.no_grad():
        theirs = adapter.pipe._encode_vae_image(pixels * 2 - 1, _gen(0))  # the pipeline's encoding (argmax)
        theirs = adapter.pipe._pack_latents(theirs, 2, 16, 4, 4)
    torch.testing.assert_close(cond["image_latents"], theirs, rtol=0, atol=0)
    calls = []
    handle = adapter.transformer.register_forward_pre_hook(lambda m, a, k: calls.append(k), with_kwargs=True)
    try:
        x = adapter.initial_noise(2, _gen(1))
        v = adapter.velocity(x, 0.5, adapter.model_inputs(cond, 2.5), 2.5)
    finally:
        handle.remove()
    assert v.shape == x.shape == (2, 4, 64)
    (kw,) = calls
    assert kw["hidden_states"].shape == (2, 8, 64) and kw["img_ids"].shape == (8, 3)
    assert kw["img_ids"][:4, 0].eq(0).all() and kw["img_ids"][4:, 0].eq(1).all()  # source ids: first coordinate 1
    other = adapter.encode_prompts(PROMPTS, images=_sources(seed=9))
    assert not torch.equal(adapter.velocity(x, 0.5, adapter.model_inputs(other, 2.5), 2.5), v)  # it reads the source


def test_the_cache_keys_rows_by_prompt_and_source(adapter):
    adapter.clear_cache()
    encoded = []
    original = FluxKontextAdapter.encode_sources

    def spy(self, images):
        encoded.append(len(images))
        return original(self, images)

    FluxKontextAdapter.encode_sources = spy
    try:
        one = _sources(seed=3)[0]
        adapter.encode_prompts([PROMPTS[0]] * 2, images=[one, [one[0].clone()]])
        adapter.encode_prompts([PROMPTS[0]], images=[one])
        adapter.encode_prompts([PROMPTS[0]], images=_sources(seed=4)[:1])
    finally:
        FluxKontextAdapter.encode_sources = original
    assert encoded == [1, 1]  # equal images share a row; a new image is a new row


def test_a_row_without_its_image_is_refused_in_one_line(adapter):
    with pytest.raises(ValueError, match=r"flux_kontext needs 1 source image\(s\) per prompt; none were given"):
        adapter.encode_prompts(PROMPTS)
    with pytest.raises(ValueError, match=r"flux_kontext takes 1\.\.1 source image\(s\) per prompt"):
        adapter.encode_prompts(PROMPTS, images=[[], []])


def test_noise_free_rollout_is_flux_kontext_pipeline(adapter, one_thread):
    from diffusers import FlowMatchEulerDiscreteScheduler

    sigmas = adapter.sigmas(3)
    sources = _sources()
    traj = rollout(adapter, adapter.encode_prompts(PROMPTS, images=sources), ode_plan(sigmas),
                   adapter.initial_noise(2, _gen(5)), torch.arange(2), 2.5)  # fmt: skip
    fixed = sigmas[:-1].tolist()

    class Fixed(FlowMatchEulerDiscreteScheduler):
        def set_timesteps(self, num_inference_steps=None, device=None, sigmas=None, mu=None, timesteps=None):
            super().set_timesteps(sigmas=fixed, device=device)

    own, adapter.pipe.scheduler = adapter.pipe.scheduler, Fixed(num_train_timesteps=1000, shift=1.0)
    try:
        theirs = adapter.generate(PROMPTS, 3, 2.5, _gen(5), images=sources)
    finally:
        adapter.pipe.scheduler = own
    torch.testing.assert_close(adapter.decode(traj.final), theirs, rtol=1e-5, atol=1e-5)


def test_recomputed_log_prob_equals_the_rollouts(adapter, one_thread):
    cond = adapter.encode_prompts(PROMPTS, images=_sources())
    traj = rollout(adapter, cond, make_plan(adapter.sigmas(3), noise_level=0.7), adapter.initial_noise(2, _gen(1)),
                   torch.arange(2), 2.5, _gen(2))  # fmt: skip
    inputs = adapter.model_inputs(cond, 2.5)
    for j in traj.plan.trained_indices:
        x, x_next = traj.pair(j)
        with torch.no_grad():
            out = transition(adapter, traj.plan, j, x, inputs, 2.5, x_next=x_next)
        assert torch.equal(out.log_prob, traj.log_probs[:, j]), j


def test_a_trained_lora_loads_into_flux_kontext_pipeline(tmp_path, one_thread):
    from diffusers import FluxKontextPipeline

    from flowrl.pipelines.flux_kontext.tiny import build_tiny_flux_kontext

    cfg = resolve_config("tiny-edit", [f"output_dir={tmp_path}", *SMALL, "train.iterations=1"])
    trainer = Trainer(cfg)
    seen = []
    reward = trainer.reward.rewards["edit_toy"][0]
    original = type(reward).__call__

    def spy(self, media, prompts, metadata):
        seen.extend(zip(prompts, metadata))
        return original(self, media, prompts, metadata)

    type(reward).__call__ = spy
    try:
        rows = trainer.train()
    finally:
        type(reward).__call__ = original
    assert len(rows) == 1 and rows[0]["policy/onpolicy_logp_diff"] == 0.0
    assert len(seen) == 8 and all(len(m["source_images"]) == 1 for _, m in seen)
    groups = {}
    for prompt, m in seen:
        groups.setdefault(m["group"], []).append((prompt, m["source_images"][0]))
    for members in groups.values():  # a group edits one row's source: the file its row names
        prompt, image = members[0]
        assert all(p == prompt and torch.equal(i, image) for p, i in members)
        assert any(it.prompt == prompt and torch.equal(load_image(it.images[0]), image) for it in trainer.prompts)
    pipe = build_tiny_flux_kontext(seed=cfg.seed)
    assert isinstance(pipe, FluxKontextPipeline)
    pipe.load_lora_weights(str(tmp_path / "lora"))
    assert any("lora" in n for n, _ in pipe.transformer.named_parameters())


def test_flowrl_sample_edits_the_given_image(tmp_path, capsys, one_thread):
    import json

    from flowrl.cli import main
    from flowrl.data import load_prompts

    source = load_prompts("builtin:tiny_edit")[0].images[0]
    args = ["sample", "tiny-edit", "--prompt", "make the square red", "--num", "2", "--steps", "2"]
    assert main([*args, "--image", source, "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "0001" / "sample.json").read_text())
    assert record["source_images"] == [source] and len(record["images"]) == 2
    assert main([*args, "--out", str(tmp_path)]) != 0  # no --image: one line, before the model is built
    assert main([*args, "--image", source, "--image", source, "--out", str(tmp_path)]) != 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == [
        "flowrl: error: --image: model.pipeline=flux_kontext takes 1 source image(s); 0 given",
        "flowrl: error: --image: model.pipeline=flux_kontext takes 1 source image(s); 2 given",
    ]
