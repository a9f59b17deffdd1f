"""The stable_audio adapter (pipelines/stable_audio/) on the tiny offline Stable Audio 3: shapes and dtypes,
the duration conditioning, the pipeline's log-SNR sigmas and its Euler loop (base model, with and without CFG
and negative prompts) reproduced by flowrl's ODE rollout, decoding as the pipeline decodes, the on-policy
log-prob, the LoRA export (StableAudio3Pipeline has no LoRA loader: ``load_lora``), on the (B, 8, L) audio
latents (every method runs an iteration on it in tests/pipelines/test_family_contract.py)."""

import json
import re
from types import SimpleNamespace

import pytest
import torch

from flowrl.pipelines.base import adapter_class, list_pipelines
from flowrl.pipelines.stable_audio.adapter import SA3_LORA_TARGETS, StableAudioAdapter, load_lora
from flowrl.pipelines.stable_audio.tiny import build_tiny_stable_audio, wake_tiny_same
from flowrl.plan import ode_plan
from flowrl.resolve import resolve_config
from flowrl.rollout import rollout
from flowrl.trainer import Trainer
from spies import record_calls
from tiny_runs import NO_EVAL, small

PROMPTS = ["a red cat", "a blue dog"]
SMALL = small(3, *NO_EVAL)


def _model(path="tiny-base", duration_s=1.0):
    return SimpleNamespace(
        path=path, dtype="fp32", revision=None, duration_s=duration_s, prompt_cache=64, attention_backend=None
    )


@pytest.fixture(scope="module")
def adapter():
    """The tiny base model (deterministic Euler), 1 s clips: latents (B, 8, 16), audio (B, 2, 256) at 256 Hz."""
    return StableAudioAdapter.from_config(_model(), seed=0)


def _pipe(seed=0, distilled=False):
    """The same tiny pipeline the adapter builds (``model.path: tiny-base`` / ``tiny``), for reference calls."""
    pipe = build_tiny_stable_audio(seed=seed, distilled=distilled)
    wake_tiny_same(pipe.vae, seed)
    return pipe


def test_registered_and_listed(capsys):
    from flowrl.cli import main

    assert "stable_audio" in list_pipelines() and adapter_class("stable_audio") is StableAudioAdapter
    assert main(["ls", "pipelines"]) == 0
    assert "stable_audio" in capsys.readouterr().out.split()


def test_shapes_dtypes_duration_conditioning_and_the_transformer_call(adapter, one_thread):
    cond = adapter.encode_prompts(PROMPTS)
    # T5Gemma padded to 256 tokens plus the duration token; the duration's global vector
    assert cond["prompt_embeds"].shape == (2, 257, 16) and cond["prompt_embeds"].dtype == torch.float32
    assert cond["encoder_attention_mask"].shape == (2, 257) and cond["encoder_attention_mask"][:, -1].eq(1).all()
    assert cond["global_hidden_states"].shape == (2, 16)
    duration = adapter.pipe.encode_duration(1.0, adapter.device, 1, 1)
    torch.testing.assert_close(cond["global_hidden_states"], duration.expand(2, -1), rtol=0, atol=0)
    torch.testing.assert_close(cond["prompt_embeds"][:, -1], duration.expand(2, -1), rtol=0, atol=0)
    assert adapter.encode_prompts(PROMPTS[::-1])["prompt_embeds"][0].equal(cond["prompt_embeds"][1])  # cached rows
    x = adapter.initial_noise(2, torch.Generator().manual_seed(0))
    assert x.shape == (2, 8, 16) == (2, *adapter.latent_shape) and x.dtype == torch.float32
    calls, handle = record_calls(adapter.transformer)
    try:
        inputs = adapter.model_inputs(cond, 1.0)
        v = adapter.velocity(x, 0.75, inputs, 1.0)
        v_rows = adapter.velocity(x, torch.tensor([0.75, 0.75]), inputs, 1.0)
        cfg_inputs = adapter.model_inputs(cond, 3.0)
        v_cfg = adapter.velocity(x, 0.75, cfg_inputs, 3.0)
    finally:
        handle.remove()
    assert v.shape == x.shape and v.dtype == torch.float32 and torch.equal(v, v_rows)
    assert v_cfg.shape == x.shape and v_cfg.dtype == torch.float32 and not torch.equal(v, v_cfg)
    assert [c["hidden_states"].shape[0] for c in calls] == [2, 2, 4]  # CFG: both branches in one forward
    assert calls[0]["timestep"].tolist() == [0.75, 0.75]  # num_train_timesteps=1: timestep = sigma
    assert calls[2]["timestep"].tolist() == [0.75] * 4
    empty = adapter.negative_conditioning(2)
    assert torch.equal(calls[2]["encoder_hidden_states"][:2], empty["prompt_embeds"])  # uncond rows first
    assert torch.equal(calls[2]["encoder_hidden_states"][2:], cond["prompt_embeds"])
    assert torch.equal(calls[2]["global_hidden_states"], cond["global_hidden_states"].repeat(2, 1))
    with pytest.raises(ValueError, match="model_inputs"):
        adapter.velocity(x, 0.75, inputs, 3.0)
    # guidance: two-branch CFG above 1, as the pipeline's do_classifier_free_guidance
    assert (adapter.guidance(3.0).kind, adapter.guidance(3.0).passes) == ("cfg", 2)
    assert (adapter.guidance(1.0).kind, adapter.guidance(1.0).passes) == ("none", 1)
    assert (adapter.guidance(0.5).kind, adapter.guidance(0.5).passes) == ("none", 1)
    assert adapter.model_inputs(cond, 0.5)["prompt_embeds"].shape[0] == 2
    # per-row negatives travel as rows of the conditioning
    neg = adapter.encode_prompts(PROMPTS, ["", "noise"])
    assert neg["negative_prompt_embeds"].shape == (2, 257, 16)
    assert torch.equal(neg["negative_prompt_embeds"][0], empty["prompt_embeds"][0])
    assert not torch.equal(neg["negative_prompt_embeds"][1], empty["prompt_embeds"][1])
    stacked = adapter.model_inputs(neg, 3.0)
    assert torch.equal(stacked["prompt_embeds"][:2], neg["negative_prompt_embeds"])


def test_decode_is_the_pipelines_and_respects_the_duration(adapter, one_thread):
    x = adapter.initial_noise(2, torch.Generator().manual_seed(1))
    media = adapter.decode(x)
    assert set(media) == {"audio", "sample_rate"} and media["sample_rate"] == 256
    assert media["audio"].shape == (2, 2, 256) and media["audio"].dtype == torch.float32
    assert media["audio"].abs().max() <= 1.0
    assert not torch.allclose(media["audio"][0], media["audio"][1], atol=1e-3)  # the audio depends on the latents
    short = StableAudioAdapter(adapter.pipe, duration_s=0.3)  # 76.8 samples: latents round up, audio is trimmed
    assert short.latent_shape == (8, 5)
    z = short.initial_noise(1, torch.Generator().manual_seed(0))
    assert short.decode(z)["audio"].shape == (1, 2, 76)
    assert adapter.pipe.vae.decode(z).sample.shape[-1] == 80
    ref = adapter.pipe(prompt=PROMPTS[:1], duration=0.3, num_inference_steps=2, latents=z.clone()).audios
    ode = rollout(short, short.encode_prompts(PROMPTS[:1]), ode_plan(short.sigmas(2)), z, torch.arange(1), 1.0)
    torch.testing.assert_close(short.decode(ode.final)["audio"], ref, rtol=1e-5, atol=1e-5)
    default = StableAudioAdapter(adapter.pipe)
    assert default.duration == 10.0 and default.latent_shape == (8, 160)  # the pipeline's default duration
    for bad, match in ((1e-4, "less than one sample"), (400.0, "at most 384 s")):
        with pytest.raises(ValueError, match=match):
            StableAudioAdapter(adapter.pipe, duration_s=bad)


@pytest.mark.parametrize("steps", [3, 8])
def test_sigmas_are_the_pipelines_and_feed_the_transformer(one_thread, steps):
    pipe = _pipe()
    adapter = StableAudioAdapter(pipe, duration_s=0.5)
    sigmas = adapter.sigmas(steps)
    timesteps = []  # the pipeline calls transformer(latents, t.expand(B), ...)
    handle = pipe.transformer.register_forward_pre_hook(lambda m, a: timesteps.append(a[1][0].item()))
    try:
        pipe(
            prompt="a cat",
            duration=0.5,
            num_inference_steps=steps,
            output_type="latent",
            generator=torch.Generator().manual_seed(0),
        )
    finally:
        handle.remove()
    assert sigmas.shape == (steps + 1,) and sigmas.dtype == torch.float32
    assert sigmas[0].item() == 1.0 and sigmas[-1].item() == 0.0 and torch.all(sigmas[1:] < sigmas[:-1])
    assert torch.equal(sigmas, pipe.scheduler.sigmas.float())
    assert timesteps == sigmas[:-1].tolist()  # timesteps equal sigmas: velocity passes timestep = sigma


@pytest.mark.parametrize("guidance, negative", [(1.0, None), (3.0, None), (3.0, ["noise", ""])])
def test_ode_rollout_is_the_pipelines_output(adapter, one_thread, guidance, negative):
    """The base model samples by deterministic Euler: flowrl's ODE walk of the adapter's velocity is its loop."""
    x = adapter.initial_noise(2, torch.Generator().manual_seed(3))
    cond = adapter.encode_prompts(PROMPTS, negative)
    traj = rollout(adapter, cond, ode_plan(adapter.sigmas(4)), x, torch.arange(2), guidance)
    assert traj.states.shape == (2, 5, 8, 16) and torch.all(traj.log_probs == 0)
    pipe = _pipe()
    ref = pipe(
        prompt=PROMPTS,
        duration=1.0,
        num_inference_steps=4,
        guidance_scale=guidance,
        negative_prompt=negative,
        latents=x.clone(),
        output_type="latent",
    ).audios
    torch.testing.assert_close(traj.final, ref, rtol=1e-5, atol=1e-5)


def test_generate_calls_the_pipeline(one_thread):
    base = StableAudioAdapter.from_config(_model(duration_s=0.5), seed=0)
    media = base.generate(PROMPTS, 3, 1.0, torch.Generator().manual_seed(0))
    assert media["audio"].shape == (2, 2, 128) and media["sample_rate"] == 256
    x = base.initial_noise(2, torch.Generator().manual_seed(0))
    ode = rollout(base, base.encode_prompts(PROMPTS), ode_plan(base.sigmas(3)), x, torch.arange(2), 1.0)
    torch.testing.assert_close(media["audio"], base.decode(ode.final)["audio"], rtol=1e-5, atol=1e-5)
    # the distilled model's own sampler re-noises (ping-pong): not flowrl's ODE, and seeded by the generator
    distilled = StableAudioAdapter.from_config(_model("tiny", duration_s=0.5), seed=0)
    assert distilled.pipe.scheduler.config.stochastic_sampling
    a = distilled.generate(PROMPTS, 3, 1.0, torch.Generator().manual_seed(0))["audio"]
    assert torch.equal(a, distilled.generate(PROMPTS, 3, 1.0, torch.Generator().manual_seed(0))["audio"])
    ode = rollout(distilled, distilled.encode_prompts(PROMPTS), ode_plan(distilled.sigmas(3)), x, torch.arange(2), 1.0)
    assert not torch.allclose(a, distilled.decode(ode.final)["audio"], atol=1e-4)


def _strip(name):  # drop the adapter name ("default", "default_0", ...)
    return re.sub(r"\.(lora_[AB])\.[^.]+\.", r".\1.", name)


def test_training_is_on_policy_changes_every_lora_weight_and_exports_a_loadable_lora(tmp_path, one_thread):
    """`flowrl train tiny-audio train.iterations=2` through the Trainer (smaller batches)."""
    cfg = resolve_config("tiny-audio", [f"output_dir={tmp_path}", *SMALL, "train.iterations=2"])
    trainer = Trainer(cfg)
    assert trainer.adapter.media_kind == "audio"
    before = {k: p.detach().clone() for k, p in trainer.policy.trainable.items()}
    rows = trainer.train()
    assert [r["iteration"] for r in rows] == [0, 1]
    assert rows[0]["policy/onpolicy_logp_diff"] <= 1e-4
    assert 0.0 <= rows[0]["reward/band_energy/mean"] <= 1.0
    unchanged = [k for k, p in trainer.policy.trainable.items() if torch.equal(p, before[k])]
    assert not unchanged, f"{len(unchanged)} of {len(before)} trainable tensors did not change, e.g. {unchanged[:3]}"
    assert (tmp_path / "lora" / "pytorch_lora_weights.safetensors").is_file()

    # the export loads into a fresh pipeline, every tensor exactly, and changes what it generates
    pipe = _pipe(seed=cfg.seed, distilled=True)
    before_audio = StableAudioAdapter(pipe, duration_s=1.0).generate(PROMPTS, 3, 1.0, torch.Generator().manual_seed(0))
    load_lora(pipe, tmp_path / "lora")
    trained = {_strip(k): v for k, v in trainer.policy.trainable.items()}
    loaded = {_strip(k): v for k, v in pipe.transformer.named_parameters() if "lora_" in k}
    assert trained.keys() == loaded.keys() and trained
    for k, v in trained.items():
        torch.testing.assert_close(loaded[k].float(), v.detach().float().cpu(), rtol=0, atol=0)
    # the LoRA's scale: the exported peft config keeps alpha / rank
    module = next(m for n, m in pipe.transformer.named_modules() if n.endswith("self_attn.to_qkv"))
    assert module.scaling["default_0"] == pytest.approx(cfg.train.lora.alpha / cfg.train.lora.rank)
    after_audio = StableAudioAdapter(pipe, duration_s=1.0).generate(PROMPTS, 3, 1.0, torch.Generator().manual_seed(0))
    assert not torch.allclose(before_audio["audio"], after_audio["audio"], atol=1e-6)

    # load_trained (flowrl sample) reads the run folder's export
    fresh = StableAudioAdapter.from_config(cfg.model, seed=cfg.seed)
    x = fresh.initial_noise(2, torch.Generator().manual_seed(0))
    inputs = fresh.model_inputs(fresh.encode_prompts(PROMPTS), 1.0)
    with torch.no_grad():
        v_base = fresh.velocity(x, 0.5, inputs, 1.0)
        assert fresh.load_trained(tmp_path) == "LoRA"
        v_trained = fresh.velocity(x, 0.5, inputs, 1.0)
    assert not torch.allclose(v_base, v_trained, atol=1e-6)
    assert fresh.load_trained(tmp_path / "nothing") is None


def test_full_fine_tuning_exports_a_transformer_that_loads_back(tmp_path, one_thread):
    cfg = resolve_config(
        "tiny-audio",
        [
            f"output_dir={tmp_path}",
            *SMALL,
            "train.iterations=1",
            "train.lora.enabled=false",
            "train.learning_rate=1e-4",
        ],
    )
    trainer = Trainer(cfg)
    assert trainer.train()[0]["policy/onpolicy_logp_diff"] <= 1e-4
    assert json.loads((tmp_path / "transformer" / "config.json").read_text())["_class_name"] == "StableAudio3DiTModel"
    fresh = StableAudioAdapter.from_config(cfg.model, seed=cfg.seed)
    assert fresh.load_trained(tmp_path) == "fine-tuned transformer"
    trained, loaded = trainer.adapter.transformer.state_dict(), fresh.transformer.state_dict()
    assert trained.keys() == loaded.keys()
    assert all(torch.equal(trained[k].float(), loaded[k].float()) for k in trained)


def test_lora_targets_are_the_dits_attention_projections(adapter):
    names = [n for n, _ in adapter.transformer.named_modules()]
    for target in SA3_LORA_TARGETS:
        hits = [n for n in names if n.endswith("." + target)]
        assert len(hits) == adapter.transformer.config.depth, target
        assert all(isinstance(adapter.transformer.get_submodule(n), torch.nn.Linear) for n in hits)
    assert type(adapter.transformer).__name__ == "StableAudio3DiTModel" and hasattr(adapter.transformer, "add_adapter")


def test_model_path_refusals(tmp_path):
    from flowrl.pipelines.base import check_model_path

    def model(path):
        return resolve_config("tiny-audio", [f"model.path={path}"]).model

    check_model_path(model("tiny"))
    check_model_path(model("tiny-base"))
    check_model_path(model("stabilityai/stable-audio-3-medium"))  # a hub id: loading says whether it can be fetched
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        check_model_path(model(str(tmp_path / "missing")))
    (tmp_path / "sa3.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="single-file Stable Audio checkpoints are not supported"):
        check_model_path(model(str(tmp_path / "sa3.safetensors")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="is empty"):
        check_model_path(model(str(tmp_path / "empty")))


def test_an_offline_hub_id_fails_in_one_line(monkeypatch):
    from flowrl.pipelines.kit.loading import HubUnavailableError
    from flowrl.pipelines.stable_audio.adapter import load_stable_audio_pipeline

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubUnavailableError, match="offline") as err:
        load_stable_audio_pipeline("no-such-owner/no-such-stable-audio")
    assert "\n" not in str(err.value)
