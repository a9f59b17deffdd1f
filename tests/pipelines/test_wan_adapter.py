"""The wan adapter (pipelines/wan/) on the tiny offline Wan 2.1 T2V and Wan 2.2 T2V-A14B (two experts): shapes,
dtypes and the transformer call, the pipeline's own sigmas (UniPC flow sigmas, sigma_0 = 0.99999899) and their
first SDE transition, the pipeline's denoising loop and VAE decode reproduced by flowrl's ODE rollout, the expert
switch at the boundary (rows that straddle it, the expert that sampled a transition trains it), frozen experts,
the LoRA export WanPipeline loads, on the 5-D video latents (every method runs an iteration on it in
tests/pipelines/test_family_contract.py)."""

import copy
import math
import re

import pytest
import torch

from flowrl.pipelines.base import adapter_class, list_pipelines
from flowrl.pipelines.wan.adapter import LORA_FILES, WanAdapter
from flowrl.pipelines.wan.experts import WanExperts
from flowrl.pipelines.wan.tiny import build_tiny_wan
from flowrl.plan import make_plan, ode_plan
from flowrl.resolve import resolve_config
from flowrl.rollout import rollout, transition
from flowrl.sde import flow_sde_g, step
from flowrl.trainer import Trainer
from spies import record_calls
from tiny_runs import NO_EVAL, small

PROMPTS = ["a red cat", "a blue dog"]
SMALL = small(3, *NO_EVAL)
PIPE_KW = {"height": 32, "width": 32, "num_frames": 5, "max_sequence_length": 16}


def _adapter(path="tiny", *overrides):
    return adapter_class("wan").from_config(
        resolve_config("tiny-wan", [f"model.path={path}", *overrides]).model, seed=0
    )


@pytest.fixture(scope="module")
def wan21():
    return _adapter("tiny")


@pytest.fixture(scope="module")
def a14b():
    return _adapter("tiny-a14b")


def _strip(name):  # drop the adapter name ("default", "default_0", ...)
    return re.sub(r"\.(lora_[AB])\.[^.]+\.", r".\1.", name)


def _euler_on(pipe, sigmas):
    """Swap the pipeline's scheduler for a one-step FlowMatchEuler that runs exactly ``sigmas`` (T+1, ending in 0):
    WanPipeline asks ``set_timesteps(num_inference_steps)``, so the call is redirected to ``sigmas=``."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=1.0)
    own = scheduler.set_timesteps
    scheduler.set_timesteps = lambda *args, device=None, **kwargs: own(sigmas=sigmas[:-1].tolist(), device=device)
    pipe.scheduler = scheduler
    return pipe


# ---------------------------------------------------------------------------------------------------- the basics
def test_registered_and_listed(capsys):
    from flowrl.cli import main

    assert "wan" in list_pipelines() and adapter_class("wan") is WanAdapter
    assert main(["ls", "pipelines"]) == 0
    assert "wan" in capsys.readouterr().out.split()


def test_shapes_dtypes_and_the_transformer_call(wan21, one_thread):
    a = wan21
    assert a.media_kind == "video" and a.transformer is a.pipe.transformer and not a.two_experts
    cond = a.encode_prompts(PROMPTS)
    assert cond.keys() == {"prompt_embeds"} and cond["prompt_embeds"].shape == (2, 16, 32)
    assert a.encode_prompts(PROMPTS[::-1])["prompt_embeds"][0].equal(cond["prompt_embeds"][1])  # cached rows
    with_neg = a.encode_prompts(PROMPTS, ["", "blurry"])
    assert with_neg["negative_prompt_embeds"][0].equal(a.negative_conditioning(1)["prompt_embeds"][0])
    assert with_neg["negative_prompt_embeds"][1].equal(a.encode_prompts(["blurry"])["prompt_embeds"][0])
    x = a.initial_noise(2, torch.Generator().manual_seed(0))
    assert x.shape == (2, 16, 2, 4, 4) == (2, *a.latent_shape) and x.dtype == torch.float32
    assert a.guidance(4.5).passes == 2 and a.guidance(1.0).passes == 1
    inputs = a.model_inputs(with_neg, 4.5)
    assert inputs["prompt_embeds"].shape[0] == 4  # CFG rows, negatives first
    assert inputs["prompt_embeds"][:2].equal(with_neg["negative_prompt_embeds"])
    calls, handle = record_calls(a.transformer)
    try:
        v = a.velocity(x, 0.75, inputs, 4.5)
        v_rows = a.velocity(x, torch.tensor([0.75, 0.75]), inputs, 4.5)
        v_nocfg = a.velocity(x, 0.75, a.model_inputs(cond, 1.0), 1.0)
    finally:
        handle.remove()
    assert v.shape == x.shape and v.dtype == torch.float32 and torch.equal(v, v_rows)
    assert v_nocfg.shape == x.shape and not torch.equal(v, v_nocfg)
    assert len(calls) == 3 and calls[0]["hidden_states"].shape == (4, 16, 2, 4, 4)  # one forward, both branches
    assert calls[0]["timestep"].tolist() == [750.0] * 4  # sigma * num_train_timesteps
    assert calls[2]["hidden_states"].shape[0] == 2
    with pytest.raises(ValueError, match="model_inputs"):
        a.velocity(x, 0.75, a.model_inputs(cond, 1.0), 4.5)
    media = a.decode(x)
    assert set(media) == {"video", "fps"} and media["fps"] == 8.0  # the recipe's model.fps
    assert media["video"].shape == (2, 5, 3, 32, 32) and media["video"].dtype == torch.float32
    assert 0 <= media["video"].min() and media["video"].max() <= 1


def test_sigmas_are_the_pipelines_and_start_below_one(wan21, one_thread):
    sigmas = wan21.sigmas(6)
    pipe = build_tiny_wan(seed=0)
    pipe(
        prompt="a cat",
        num_inference_steps=6,
        output_type="latent",
        generator=torch.Generator().manual_seed(0),
        **PIPE_KW,
    )
    assert sigmas.shape == (7,) and sigmas.dtype == torch.float32 and torch.equal(sigmas, pipe.scheduler.sigmas.float())
    assert sigmas[0].item() == pytest.approx(0.99999899, abs=1e-8) and sigmas[0].item() < 1.0
    assert sigmas[-1].item() == 0.0 and bool((sigmas[1:] < sigmas[:-1]).all())


def test_first_flow_sde_transition_is_not_blown_up_by_sigma_0(one_thread):
    """sigma_0 = 0.99999899 (UniPC flow sigmas, 20 steps, shift 3): flow_sde's g = a sqrt(s / (1 - s)) would be
    ~700 there; flowrl substitutes sigma_at_one = sigma_1 within SIGMA_ONE_TOL of 1, as Flow-GRPO does at 1."""
    a = WanAdapter(build_tiny_wan(seed=0, flow_shift=3.0), 32, 5, max_sequence_length=16)
    sigmas = a.sigmas(20)
    s0, s1 = float(sigmas[0]), float(sigmas[1])
    plan = make_plan(sigmas, "flow_sde", 0.7)
    expected = 0.7 * math.sqrt(s0 / (1 - s1))
    assert expected == pytest.approx(5.3, abs=0.1)
    assert flow_sde_g(s0, 0.7, plan.sigma_at_one) == pytest.approx(expected, rel=1e-6)
    assert 0.7 * math.sqrt(s0 / (1 - s0)) > 500  # what it would be without the substitution
    x = a.initial_noise(2, torch.Generator().manual_seed(0))
    out = step(
        "flow_sde",
        torch.zeros_like(x),
        x,
        s0,
        s1,
        0.7,
        sigma_at_one=plan.sigma_at_one,
        generator=torch.Generator().manual_seed(1),
    )
    assert out.std.tolist() == pytest.approx([expected * math.sqrt(s0 - s1)] * 2, rel=1e-5)
    assert bool(torch.isfinite(out.x_next).all()) and float(out.x_next.abs().max()) < 20


@pytest.mark.parametrize("path, guidance", [("tiny", 4.5), ("tiny", 1.0), ("tiny-a14b", 4.5)])
def test_ode_rollout_is_the_pipelines_output(wan21, a14b, one_thread, path, guidance):
    """With a FlowMatchEuler scheduler on the adapter's own sigmas, WanPipeline's loop (its CFG, its expert
    switch) is flowrl's noise-free rollout; its VAE decode is ``decode``. (With the checkpoints' UniPC, a
    multistep solver, only the schedule is shared.)"""
    a = wan21 if path == "tiny" else a14b
    sigmas = a.sigmas(6)
    x = a.initial_noise(2, torch.Generator().manual_seed(3))
    hooks = [record_calls(t) for t in a._transformers()]
    try:
        traj = rollout(a, a.encode_prompts(PROMPTS), ode_plan(sigmas), x, torch.arange(2), guidance)
    finally:
        for _, handle in hooks:
            handle.remove()
    if path == "tiny-a14b":  # 6 steps straddle the boundary (t = 875): each expert ran some
        assert [len(calls) for calls, _ in hooks] == [2, 4]
        assert all(c["timestep"][0] >= 875 for c in hooks[0][0]) and all(c["timestep"][0] < 875 for c in hooks[1][0])
    assert traj.states.shape == (2, 7, 16, 2, 4, 4) and torch.all(traj.log_probs == 0)
    pipe = _euler_on(build_tiny_wan(seed=0, two_experts=path == "tiny-a14b"), sigmas)
    kwargs = dict(prompt=PROMPTS, num_inference_steps=6, guidance_scale=guidance, latents=x.clone(), **PIPE_KW)
    ref = pipe(**kwargs, output_type="latent").frames
    torch.testing.assert_close(traj.final, ref, rtol=1e-5, atol=1e-5)
    if guidance != 1.0 and path == "tiny":
        frames = pipe(**kwargs, output_type="pt").frames
        torch.testing.assert_close(a.decode(traj.final)["video"], frames, rtol=1e-5, atol=1e-5)


def test_generate_is_the_pipelines_call(wan21, one_thread):
    out = wan21.generate(PROMPTS, 3, 4.5, torch.Generator().manual_seed(0), negative_prompts=["", "blurry"])
    ref = build_tiny_wan(seed=0)(
        prompt=PROMPTS,
        negative_prompt=["", "blurry"],
        num_inference_steps=3,
        guidance_scale=4.5,
        generator=torch.Generator().manual_seed(0),
        output_type="pt",
        **PIPE_KW,
    ).frames
    assert out["fps"] == 8.0 and out["video"].shape == (2, 5, 3, 32, 32)
    torch.testing.assert_close(out["video"], ref, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------------- two experts
def test_experts_switch_at_the_boundary_and_split_straddling_rows(a14b, one_thread):
    a = a14b
    experts = a.transformer
    assert isinstance(experts, WanExperts) and a.two_experts and a.boundary_ratio == 0.875
    assert experts.high_noise is a.pipe.transformer and experts.low_noise is a.pipe.transformer_2
    assert a.expert_of(0.875) == "high_noise" and a.expert_of(0.874) == "low_noise"
    assert a.expert_of(torch.tensor([0.9, 0.1])) == ["high_noise", "low_noise"]
    x = a.initial_noise(3, torch.Generator().manual_seed(0))
    inputs = a.model_inputs(a.encode_prompts(PROMPTS + ["a cat"]), 4.5)
    sig = torch.tensor([0.95, 0.5, 0.9])
    calls, handle = record_calls(experts)
    try:
        mixed = a.velocity(x, sig, inputs, 4.5)
    finally:
        handle.remove()
    assert len(calls) == 1 and calls[0]["hidden_states"].shape[0] == 6  # one call of the trained module
    high, low = a.velocity(x, 0.95, inputs, 4.5), a.velocity(x, 0.5, inputs, 4.5)
    # equal up to the float noise of a different batch size
    torch.testing.assert_close(mixed[0], high[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mixed[1], low[1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mixed[2], a.velocity(x, 0.9, inputs, 4.5)[2], rtol=1e-5, atol=1e-5)
    # each expert alone is what a sigma on its side runs
    ref_low = a.pipe.transformer_2(
        hidden_states=torch.cat([x, x]),
        timestep=torch.full((6,), 500.0),
        encoder_hidden_states=inputs["prompt_embeds"],
        return_dict=False,
    )[0]
    u, c = ref_low.chunk(2)
    torch.testing.assert_close(low, u + 4.5 * (c - u), rtol=1e-5, atol=1e-5)


def test_the_expert_that_sampled_a_transition_scores_it(a14b, one_thread):
    """Rollout log-probs recomputed transition by transition (the update's path), and with per-row sigmas that
    straddle the boundary: the same expert runs, so the log-probs are the rollout's."""
    a = a14b
    cond = a.encode_prompts(PROMPTS)
    plan = make_plan(a.sigmas(6), "flow_sde", 0.7, timestep_fraction=1.0)
    x = a.initial_noise(2, torch.Generator().manual_seed(5))
    traj = rollout(a, cond, plan, x, torch.arange(2), 4.5, torch.Generator().manual_seed(6))
    inputs = a.model_inputs(cond, 4.5)
    names = [a.expert_of(float(s)) for s in plan.sigma]
    assert "high_noise" in names and "low_noise" in names
    for j in range(len(plan)):
        xj, xn = traj.pair(j)
        out = transition(a, plan, j, xj, inputs, 4.5, x_next=xn)
        torch.testing.assert_close(out.log_prob, traj.log_probs[:, j], rtol=0, atol=1e-5)
    j_high, j_low = names.index("high_noise"), names.index("low_noise")
    rows_x = torch.stack([traj.pair(j_high)[0][0], traj.pair(j_low)[0][1]])
    sig = torch.tensor([float(plan.sigma[j_high]), float(plan.sigma[j_low])])
    v = a.velocity(rows_x, sig, inputs, 4.5)
    for row, j in enumerate((j_high, j_low)):
        torch.testing.assert_close(
            v[row], a.velocity(traj.pair(j)[0], float(plan.sigma[j]), inputs, 4.5)[row], rtol=1e-5, atol=1e-5
        )


@pytest.mark.parametrize("trained, frozen", [("high_noise", "low_noise"), ("low_noise", "high_noise")])
def test_a_frozen_expert_gets_no_lora_no_grad_and_is_shared_by_a_copy(one_thread, trained, frozen):
    from flowrl.policy import lora_config

    a = _adapter("tiny-a14b", f"model.trained_experts={trained}")
    experts = a.transformer
    assert experts.trained == (trained,)
    experts.requires_grad_(True)  # what the trainer does for full fine-tuning
    assert all(p.requires_grad for p in getattr(experts, trained).parameters())
    assert not any(p.requires_grad for p in getattr(experts, frozen).parameters())
    ref = copy.deepcopy(experts)
    assert getattr(ref, frozen) is getattr(experts, frozen) and getattr(ref, trained) is not getattr(experts, trained)
    experts.requires_grad_(False)
    cfg = resolve_config("tiny-wan").train.lora
    experts.add_adapter(lora_config(cfg, a.lora_target_modules))
    names = [n for n, p in experts.named_parameters() if p.requires_grad]
    assert names and all(n.startswith(f"{trained}.") and "lora_" in n for n in names)
    assert not any("lora_" in n for n, _ in getattr(experts, frozen).named_parameters())
    assert a.trains_sigma(torch.tensor([0.95, 0.5])).tolist() == [trained == "high_noise", trained == "low_noise"]
    # a transition of the frozen expert still has a (zero-gradient) loss; one of the trained expert a real one
    x = a.initial_noise(1, torch.Generator().manual_seed(0))
    inputs = a.model_inputs(a.encode_prompts(PROMPTS[:1]), 4.5)
    for sigma, live in ((0.95, trained == "high_noise"), (0.5, trained == "low_noise")):
        experts.zero_grad(set_to_none=True)
        a.velocity(x, sigma, inputs, 4.5).square().mean().backward()
        grads = [p.grad for n, p in experts.named_parameters() if p.requires_grad]
        assert all(g is not None for g in grads)
        assert any(bool(g.abs().sum() > 0) for g in grads) == live
    experts.disable_adapters()
    experts.enable_adapters()


# ---------------------------------------------------------------------------------------------------- training
def test_training_is_on_policy_changes_every_lora_weight_and_exports_a_loadable_lora(tmp_path, one_thread):
    """`flowrl train tiny-wan train.iterations=2` through the Trainer (smaller batches)."""
    cfg = resolve_config("tiny-wan", [f"output_dir={tmp_path}", *SMALL, "train.iterations=2"])
    trainer = Trainer(cfg)
    before = {k: p.detach().clone() for k, p in trainer.policy.trainable.items()}
    rows = trainer.train()
    assert [r["iteration"] for r in rows] == [0, 1]
    assert rows[0]["policy/onpolicy_logp_diff"] <= 1e-4 and rows[0]["reward/video/mean"] < 0
    unchanged = [k for k, p in trainer.policy.trainable.items() if torch.equal(p, before[k])]
    assert not unchanged, f"{len(unchanged)} of {len(before)} trainable tensors did not change, e.g. {unchanged[:3]}"
    assert sorted(p.name for p in (tmp_path / "lora").iterdir()) == ["pytorch_lora_weights.safetensors"]

    pipe = build_tiny_wan(seed=cfg.seed)
    kwargs = dict(prompt=PROMPTS, num_inference_steps=3, output_type="latent", **PIPE_KW)
    base = pipe(**kwargs, generator=torch.Generator().manual_seed(0)).frames
    pipe.load_lora_weights(str(tmp_path / "lora"))
    trained = {_strip(k): v for k, v in trainer.policy.trainable.items()}
    loaded = {_strip(k): v for k, v in pipe.transformer.named_parameters() if "lora_" in k}
    assert trained.keys() == loaded.keys()
    for k, v in trained.items():
        torch.testing.assert_close(loaded[k].float(), v.detach().float().cpu(), rtol=0, atol=0)
    after = pipe(**kwargs, generator=torch.Generator().manual_seed(0)).frames
    assert not torch.allclose(base, after, atol=1e-6)
    fresh = _adapter("tiny")
    assert fresh.load_trained(tmp_path) == "LoRA"


@pytest.mark.parametrize("trained", ["both", "high_noise", "low_noise"])
def test_two_expert_training_trains_only_its_experts(tmp_path, one_thread, trained):
    cfg = resolve_config(
        "tiny-wan",
        [
            f"output_dir={tmp_path}",
            *SMALL,
            "train.iterations=1",
            "model.path=tiny-a14b",
            f"model.trained_experts={trained}",
        ],
    )
    trainer = Trainer(cfg)
    experts = trainer.adapter.transformer
    before = {k: p.detach().clone() for k, p in trainer.policy.trainable.items()}
    rows = trainer.train()
    assert rows[0]["policy/onpolicy_logp_diff"] <= 1e-4
    names = ("high_noise", "low_noise") if trained == "both" else (trained,)
    assert {k.split(".")[0] for k in trainer.policy.trainable} == set(names)
    assert all(not torch.equal(p, before[k]) for k, p in trainer.policy.trainable.items())
    base = build_tiny_wan(seed=cfg.seed, two_experts=True)
    for name, pipe_part in (("high_noise", base.transformer), ("low_noise", base.transformer_2)):
        if name in names:
            continue
        expert = getattr(experts, name)
        assert not any("lora_" in n for n, _ in expert.named_parameters())
        reference = pipe_part.state_dict()
        assert all(torch.equal(v, reference[k]) for k, v in expert.state_dict().items())  # bit-identical
    files = sorted(p.name for p in (tmp_path / "lora").iterdir())
    assert files == sorted(LORA_FILES[n] for n in names)
    fresh = _adapter("tiny-a14b")
    assert fresh.load_trained(tmp_path).startswith("LoRA")
    trained_rows = {_strip(k): v for k, v in trainer.policy.trainable.items()}
    loaded = {
        f"{n}.{_strip(k)}": v for n, e in fresh.transformer.experts() for k, v in e.named_parameters() if "lora_" in k
    }
    assert trained_rows.keys() == loaded.keys()
    for k, v in trained_rows.items():
        torch.testing.assert_close(loaded[k].float(), v.detach().float().cpu(), rtol=0, atol=0)


def test_two_expert_full_fine_tuning_keeps_the_frozen_expert_and_round_trips(tmp_path, one_thread):
    cfg = resolve_config(
        "tiny-wan",
        [
            f"output_dir={tmp_path}",
            *SMALL,
            "train.iterations=1",
            "model.path=tiny-a14b",
            "model.trained_experts=low_noise",
            "train.lora.enabled=false",
            "train.learning_rate=1e-4",
            "method.options.beta=0.004",
        ],
    )
    trainer = Trainer(cfg)
    experts = trainer.adapter.transformer
    assert trainer.policy.ref_model.high_noise is experts.high_noise  # the frozen expert is shared, not copied
    assert trainer.policy.ref_model.low_noise is not experts.low_noise
    high = copy.deepcopy(experts.high_noise.state_dict())
    before = {k: p.detach().clone() for k, p in trainer.policy.trainable.items()}
    assert before and all(k.startswith("low_noise.") for k in before)
    rows = trainer.train()
    assert rows[0]["policy/onpolicy_logp_diff"] <= 1e-4
    assert all(torch.equal(v, high[k]) for k, v in experts.high_noise.state_dict().items())
    assert any(not torch.equal(p, before[k]) for k, p in trainer.policy.trainable.items())
    fresh = _adapter("tiny-a14b")
    assert fresh.load_trained(tmp_path) == "fine-tuned experts"
    for name in ("high_noise", "low_noise"):
        mine, theirs = getattr(experts, name).state_dict(), getattr(fresh.transformer, name).state_dict()
        assert all(torch.equal(v.float(), theirs[k].float()) for k, v in mine.items())


def test_full_fine_tuning_of_wan21_round_trips(tmp_path, one_thread):
    cfg = resolve_config(
        "tiny-wan",
        [
            f"output_dir={tmp_path}",
            *SMALL,
            "train.iterations=1",
            "train.lora.enabled=false",
            "train.learning_rate=1e-4",
        ],
    )
    trainer = Trainer(cfg)
    before = {k: p.detach().clone() for k, p in trainer.policy.trainable.items()}
    rows = trainer.train()
    assert rows[0]["policy/onpolicy_logp_diff"] <= 1e-4
    assert any(not torch.equal(p, before[k]) for k, p in trainer.policy.trainable.items())
    fresh = _adapter("tiny")
    assert fresh.load_trained(tmp_path) == "fine-tuned transformer" and fresh.transformer is fresh.pipe.transformer
    theirs = fresh.transformer.state_dict()
    assert all(torch.equal(v.float(), theirs[k].float()) for k, v in trainer.adapter.transformer.state_dict().items())
    assert fresh.load_trained(tmp_path / "nothing") is None


def test_attention_backends_reach_both_experts_or_are_refused_in_one_line(a14b, one_thread):
    import importlib.util

    x = a14b.initial_noise(1, torch.Generator().manual_seed(0))
    inputs = a14b.model_inputs(a14b.encode_prompts(PROMPTS[:1]), 4.5)
    expected = [a14b.velocity(x, s, inputs, 4.5) for s in (0.95, 0.5)]
    adapter = _adapter("tiny-a14b", "model.attention_backend=_native_math")
    for expert in (adapter.pipe.transformer, adapter.pipe.transformer_2):
        assert {p._attention_backend.value for p in expert.attn_processors.values()} == {"_native_math"}
    for s, v in zip((0.95, 0.5), expected):
        torch.testing.assert_close(adapter.velocity(x, s, inputs, 4.5), v, rtol=1e-5, atol=1e-5)
    from diffusers.models.attention_dispatch import _AttentionBackendRegistry

    assert _AttentionBackendRegistry._active_backend.value == "native"  # the process-wide default is left alone
    cases = [("_native_cudnn", "cannot run on this cpu")]
    if importlib.util.find_spec("flash_attn") is None:
        cases.append(("flash", "is not available here"))
    for name, why in cases:
        with pytest.raises(RuntimeError, match=f"model.attention_backend='{name}' {why}") as err:
            _adapter("tiny", f"model.attention_backend={name}")
        assert "\n" not in str(err.value)


# ---------------------------------------------------------------------------------------------------- refusals
def test_model_path_and_shape_refusals(tmp_path):
    from flowrl.pipelines.base import check_model_path

    def model(*overrides):
        return resolve_config("tiny-wan", list(overrides)).model

    check_model_path(model("model.path=tiny"))
    check_model_path(model("model.path=tiny-a14b", "model.trained_experts=high_noise"))
    check_model_path(
        model("model.path=Wan-AI/Wan2.1-T2V-1.3B-Diffusers")
    )  # a hub id: loading says if it can be fetched
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        check_model_path(model(f"model.path={tmp_path / 'missing'}"))
    (tmp_path / "wan.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="single-file Wan checkpoints are not supported"):
        check_model_path(model(f"model.path={tmp_path / 'wan.safetensors'}"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="is empty"):
        check_model_path(model(f"model.path={tmp_path / 'empty'}"))
    with pytest.raises(ValueError, match=r"model.num_frames: Wan needs 4k \+ 1 frames"):
        check_model_path(model("model.num_frames=8"))
    with pytest.raises(ValueError, match="model.trained_experts: 'low_noise' needs a two-expert model"):
        check_model_path(model("model.trained_experts=low_noise"))
    pipe = build_tiny_wan(seed=0)
    with pytest.raises(ValueError, match="model.num_frames"):
        WanAdapter(pipe, 32, num_frames=6)
    with pytest.raises(ValueError, match="model.trained_experts"):
        WanAdapter(pipe, 32, num_frames=5, trained_experts="high_noise")
    with pytest.raises(ValueError, match="model.width: Wan needs a multiple of 16"):
        WanAdapter(pipe, (32, 40), num_frames=5)


def test_offline_hub_id_is_one_line(monkeypatch):
    from flowrl.pipelines.kit.loading import HubUnavailableError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = resolve_config("tiny-wan", ["model.path=nobody-here/no-such-wan-model"]).model
    with pytest.raises(HubUnavailableError, match="hub is offline") as info:
        WanAdapter.from_config(cfg)
    assert "\n" not in str(info.value)
