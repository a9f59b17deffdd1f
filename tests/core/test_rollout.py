import dataclasses
import random

import pytest
import torch

from flowrl.config import ModelConfig
from flowrl.pipelines.sd3 import SD3Adapter
from flowrl.plan import make_plan, ode_plan
from flowrl.rollout import rollout, transition


@pytest.fixture(scope="module")
def adapter():
    return SD3Adapter.from_config(ModelConfig(path="tiny", resolution=32, max_sequence_length=8))


def test_plan_fraction_and_window():
    sigmas = torch.linspace(1, 0, 11)
    plan = make_plan(sigmas, "flow_sde", 0.7, timestep_fraction=0.99)
    assert plan.kinds == ("flow_sde",) * 10
    assert plan.trained_indices == list(range(9))  # int(10 * 0.99) = 9: the last step never trains
    assert plan.sigma_at_one == pytest.approx(0.9)
    starts = set()
    for seed in range(50):
        p = make_plan(sigmas, "cps", 0.8, window_size=3, window_range=(0, 5), rng=random.Random(seed))
        idx = p.trained_indices
        assert len(idx) == 3 and idx == list(range(idx[0], idx[0] + 3)) and 0 <= idx[0] <= 2
        assert [k for k in p.kinds if k != "ode"] == ["cps"] * 3
        assert p.noise_levels[idx].tolist() == pytest.approx([0.8] * 3)
        starts.add(idx[0])
    assert starts == {0, 1, 2}
    with pytest.raises(ValueError, match="does not fit"):
        make_plan(sigmas, window_size=4, window_range=(0, 3))


def test_a_plan_reads_its_step_values_as_the_tensors_hold_them_and_a_new_plan_reads_its_own():
    plan = make_plan(torch.linspace(1, 0, 5), "flow_sde", 0.7, timestep_fraction=0.5)
    assert plan.step_values(1) == (0.75, 0.5, pytest.approx(0.7)) and plan.trained_indices == [0, 1]
    assert plan.step_values(1)[2] == float(plan.noise_levels[1])  # exactly the fp32 value
    other = dataclasses.replace(plan, noise_levels=torch.full((4,), 0.3), train=torch.tensor([0, 0, 1, 0]).bool())
    assert other.step_values(1)[2] == float(torch.tensor(0.3)) and other.trained_indices == [2]
    rebuilt = type(plan)(**{**plan.__dict__, "sigma": torch.tensor([1.0, 0.6, 0.4, 0.2])})  # stale values ignored
    assert rebuilt.step_values(1)[:2] == (float(torch.tensor(0.6)), 0.5)


def test_sigmas_come_from_the_scheduler_with_shift(adapter):
    sigmas = adapter.sigmas(10)
    assert len(sigmas) == 11 and sigmas[0] == 1 and sigmas[-1] == 0
    # diffusers: unshifted sigmas linspace(1, s_min, T) with s_min the shifted training minimum
    # 3 * 0.001 / (1 + 2 * 0.001) = 0.002994; then the SD3 shift s -> 3 s / (1 + 2 s)
    s = torch.linspace(1, 0.002994, 10)
    shifted = 3 * s / (1 + 2 * s)
    assert torch.allclose(sigmas[:-1], shifted, atol=1e-3)


def _rollout(adapter, prompts, guidance, plan=None, seed=0):
    cond = adapter.encode_prompts(prompts)
    plan = plan or make_plan(adapter.sigmas(4), "flow_sde", 0.7)
    gen = torch.Generator().manual_seed(seed)
    noise = adapter.initial_noise(len(prompts), gen)
    return rollout(adapter, cond, plan, noise, torch.arange(len(prompts)), guidance, gen), cond


@pytest.mark.parametrize("guidance", [1.0, 4.5])
def test_recomputed_log_prob_equals_rollout(adapter, guidance):
    traj, cond = _rollout(adapter, ["a red cat", "a blue car", "a red cat"], guidance)
    inputs = adapter.model_inputs(cond, guidance)
    for j in traj.plan.trained_indices:
        out = transition(adapter, traj.plan, j, traj.states[:, j], inputs, guidance, x_next=traj.states[:, j + 1])
        ratio = torch.exp(out.log_prob - traj.log_probs[:, j])
        assert torch.equal(ratio, torch.ones_like(ratio))  # exactly 1 for unchanged weights


def test_cfg_runs_both_branches_in_one_forward(adapter):
    calls = []
    hook = adapter.transformer.register_forward_hook(
        lambda m, a, kw, out: calls.append(kw["hidden_states"].shape[0]), with_kwargs=True
    )
    try:
        _rollout(adapter, ["a cat", "a dog"], 4.5)
    finally:
        hook.remove()
    assert calls == [4] * 4  # 4 steps, one forward each, batch 2 x (uncond, cond)


def test_prompt_embeddings_are_encoded_once_per_prompt(adapter, monkeypatch):
    adapter.clear_cache()
    seen = []
    real = adapter._encode
    monkeypatch.setattr(adapter, "_encode", lambda prompts: seen.append(list(prompts)) or real(prompts))
    cond = adapter.encode_prompts(["a cat"] * 4 + ["a dog"] * 4)
    adapter.encode_prompts(["a dog", "a cat"])
    assert seen == [["a cat", "a dog"]]
    assert cond["prompt_embeds"].shape[0] == 8
    assert torch.equal(cond["prompt_embeds"][0], cond["prompt_embeds"][3])


def test_the_prompt_cache_keeps_the_most_recently_used(adapter, monkeypatch):
    seen = []
    real = adapter._encode
    monkeypatch.setattr(adapter, "_encode", lambda prompts: seen.append(list(prompts)) or real(prompts))
    monkeypatch.setattr(adapter, "prompt_cache", 2)
    adapter.clear_cache()
    first = adapter.encode_prompts(["a cat", "a dog", "a cat"])
    adapter.encode_prompts(["a cat", "a red apple"])  # "a dog" is now the least recently used: dropped
    assert list(adapter._cache) == ["a cat", "a red apple"]
    again = adapter.encode_prompts(["a dog", "a cat"])
    assert seen == [["a cat", "a dog"], ["a red apple"], ["a dog"]]
    torch.testing.assert_close(again["prompt_embeds"][0], first["prompt_embeds"][1])
    assert list(adapter._cache) == ["a dog", "a cat"]
    monkeypatch.setattr(adapter, "prompt_cache", 0)  # nothing kept
    adapter.clear_cache()
    assert adapter.encode_prompts(["a cat", "a cat"])["prompt_embeds"].shape[0] == 2 and not adapter._cache
    adapter.clear_cache()


def test_ode_plan_matches_the_diffusers_pipeline(adapter):
    """Our Euler rollout with noise level 0 reproduces StableDiffusion3Pipeline's own sampler."""
    prompts = ["a red apple on a table", "a cat"]
    cond = adapter.encode_prompts(prompts)
    neg = adapter.negative_conditioning(2)
    gen = torch.Generator().manual_seed(1)
    noise = adapter.initial_noise(2, gen)
    traj = rollout(adapter, cond, ode_plan(adapter.sigmas(5)), noise, torch.arange(2), 4.5)
    ref = adapter.pipe(
        prompt_embeds=cond["prompt_embeds"],
        pooled_prompt_embeds=cond["pooled_prompt_embeds"],
        negative_prompt_embeds=neg["prompt_embeds"],
        negative_pooled_prompt_embeds=neg["pooled_prompt_embeds"],
        latents=noise.clone(),
        num_inference_steps=5,
        guidance_scale=4.5,
        output_type="latent",
    ).images
    assert torch.allclose(traj.final, ref, atol=1e-5)


def _window_rollout(adapter, **options):
    """Two prompts rolled out with an SDE window of 2 in 6 steps, from fixed noise and draws: (plan, trajectory)."""
    cond = adapter.encode_prompts(["a red cube", "a blue ball"])
    plan = make_plan(adapter.sigmas(6), "flow_sde", 0.7, window_size=2, window_range=(1, 4), rng=random.Random(0))
    noise = adapter.initial_noise(2, torch.Generator().manual_seed(0))
    return plan, rollout(adapter, cond, plan, noise, torch.arange(2), 4.5, torch.Generator().manual_seed(1), **options)


def test_trained_only_keeps_just_the_states_a_trained_transition_touches(adapter, tmp_path):
    """An SDE window of 2 in 6 steps keeps 3 of 7 states; each trained pair is the full chain's; the
    trainer's rollout batches hold only those (step-level methods do not multiply rollout memory)."""
    plan, full = _window_rollout(adapter)
    kept = full.trained_only()
    s = plan.trained_indices[0]
    assert kept.state_index == (s, s + 1, s + 2) and kept.states.shape[1] == 3
    for j in plan.trained_indices:
        assert all(torch.equal(a, b) for a, b in zip(kept.pair(j), full.pair(j)))
    with pytest.raises(ValueError, match="was not kept"):
        kept.state(s + 3)
    with pytest.raises(ValueError, match="does not hold a final state"):
        kept.final
    assert torch.equal(kept.select(torch.tensor([1])).pair(s)[1], full.states[1:, s + 1])

    from flowrl.resolve import resolve_config
    from flowrl.trainer import Trainer

    tr = Trainer(
        resolve_config(
            "tiny-cpu",
            [
                f"output_dir={tmp_path}",
                "method.options.window_size=2",
                "method.options.window_range=[0,4]",
                "sample.group_size=4",
                "sample.prompts_per_iteration=2",
                "sample.batch_size=4",
            ],
        )
    )
    batches, _ = tr.collect(0)
    assert all(b.traj.states.shape[1] == 3 for b in batches)


def test_a_rollout_can_hold_only_the_trained_states_and_the_final_one(adapter):
    """``keep_all_states=False`` (Flow-GRPO's exploration, evaluation) never stacks the untrained states: the
    same draws, log-probs, trained pairs and final state as the full rollout, with 4 of 7 states held."""
    (plan, full), (_, lean) = _window_rollout(adapter), _window_rollout(adapter, keep_all_states=False)
    s = plan.trained_indices[0]
    assert lean.state_index == (s, s + 1, s + 2, len(plan)) and lean.states.shape[1] == 4
    assert torch.equal(lean.log_probs, full.log_probs) and torch.equal(lean.final, full.final)
    for j in plan.trained_indices:
        assert all(torch.equal(a, b) for a, b in zip(lean.pair(j), full.pair(j)))
    trained = lean.trained_only()  # what the trainer keeps until the update: the final state goes
    assert trained.state_index == (s, s + 1, s + 2) and torch.equal(trained.states, full.trained_only().states)


def test_offloaded_states_wait_on_the_cpu_and_train_exactly_the_same(tmp_path):
    """``train.offload_states``: the rollout batches hold their states on the CPU; the update moves each one's
    back for its own loss, so the trained weights are bitwise those of a run without offloading."""
    from flowrl.resolve import resolve_config
    from flowrl.trainer import Trainer

    base = [
        "sample.group_size=4",
        "sample.prompts_per_iteration=2",
        "sample.batch_size=4",
        "train.iterations=1",
        "log.save_every=1000",
        "log.sample_every=1000",
    ]
    trained = {}
    for offload in (False, True):
        tr = Trainer(
            resolve_config(
                "tiny-cpu",
                [f"output_dir={tmp_path / str(offload)}", *base, f"train.offload_states={str(offload).lower()}"],
            )
        )
        if offload:
            batches, _ = tr.collect(0)
            assert all(b.traj.states.device.type == "cpu" for b in batches)
            moved = batches[0].traj.states_to(torch.device("meta"))
            assert moved.states.device.type == "meta" and moved.log_probs.device.type == "cpu"
        tr.train()
        trained[offload] = {n: p.detach().clone() for n, p in tr.policy.trainable.items()}
    assert all(torch.equal(trained[False][n], trained[True][n]) for n in trained[False])
