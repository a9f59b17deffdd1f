"""``model.attention_backend`` (the transformer's attention through diffusers' dispatcher) and ``train.compile``
(torch.compile of the transformer's forward): both off by default, today's path unchanged; on, the same
velocities, a passing step-0 on-policy check, and the same checkpoints."""

from __future__ import annotations

import functools

import pytest
import torch

from flowrl.config import ConfigError
from flowrl.pipelines.sd3 import SD3Adapter
from flowrl.pipelines.sd3.attention import DispatchedJointAttention
from flowrl.resolve import resolve_config
from flowrl.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_thread")


def _cfg(tmp_path, overrides, *extra):
    return resolve_config("tiny-cpu", [f"output_dir={tmp_path}", *overrides, "log.eval_every=0", *extra])


def _velocity(adapter: SD3Adapter) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    x = adapter.initial_noise(3, gen)
    inputs = adapter.model_inputs(adapter.encode_prompts(["a red cube", "a cat", "a blue sky"]), 4.5)
    with torch.no_grad():
        return adapter.velocity(x, 0.7, inputs, 4.5)


def _processors(adapter: SD3Adapter) -> set[type]:
    return {type(p) for p in adapter.transformer.attn_processors.values()}


# ----------------------------------------------------------------------------------------------------
# model.attention_backend


def test_an_unknown_attention_backend_is_a_one_line_config_error(tmp_path):
    with pytest.raises(ConfigError) as err:
        resolve_config("tiny-cpu", [f"output_dir={tmp_path}", "model.attention_backend=flashy"])
    message = str(err.value)
    assert "\n" not in message and message.startswith("model.attention_backend: 'flashy' is not one of")
    assert "native" in message and "_native_cudnn" in message and "flash" in message
    with pytest.raises(ConfigError, match="train.compile_mode"):
        resolve_config("tiny-cpu", [f"output_dir={tmp_path}", "train.compile_mode=fastest"])


def test_the_default_keeps_today_s_attention_and_a_backend_gives_the_same_velocity(tmp_path):
    from diffusers.models.attention_processor import JointAttnProcessor2_0

    from flowrl.pipelines.sd3.tiny import build_tiny_sd3_pipeline

    cfg = _cfg(tmp_path, [])
    default = SD3Adapter.from_config(cfg.model, seed=cfg.seed)
    assert cfg.model.attention_backend is None and _processors(default) == {JointAttnProcessor2_0}
    today = SD3Adapter(
        build_tiny_sd3_pipeline(cfg.model.resolution, cfg.model.tiny_size, seed=cfg.seed),
        cfg.model.resolution,
        cfg.model.max_sequence_length,
    )  # as built before the option
    v = _velocity(default)
    assert torch.equal(v, _velocity(today))

    for name in ("native", "_native_math"):
        cfg_b = _cfg(tmp_path, [], f"model.attention_backend={name}")
        adapter = SD3Adapter.from_config(cfg_b.model, seed=cfg.seed)
        assert _processors(adapter) == {DispatchedJointAttention}
        assert {p._attention_backend.value for p in adapter.transformer.attn_processors.values()} == {name}
        torch.testing.assert_close(_velocity(adapter), v, rtol=1e-5, atol=1e-5)
    # the process-wide default backend of other diffusers models is left as it was
    from diffusers.models.attention_dispatch import _AttentionBackendRegistry

    assert _AttentionBackendRegistry._active_backend.value == "native"


def test_the_dispatched_processor_matches_sd3_s_with_qk_norm_and_dual_attention():
    """SD3.5's blocks: RMS-normed queries and keys, a second (image-only) attention in the first blocks, and
    the last block's text stream left unprojected (context_pre_only)."""
    from diffusers import SD3Transformer2DModel

    torch.manual_seed(0)
    model = SD3Transformer2DModel(
        sample_size=8,
        patch_size=2,
        in_channels=4,
        out_channels=4,
        num_layers=2,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=32,
        caption_projection_dim=32,
        pooled_projection_dim=16,
        pos_embed_max_size=8,
        qk_norm="rms_norm",
        dual_attention_layers=(0,),
    ).eval()
    inputs = {
        "hidden_states": torch.randn(2, 4, 8, 8),
        "encoder_hidden_states": torch.randn(2, 5, 32),
        "pooled_projections": torch.randn(2, 16),
        "timestep": torch.tensor([500.0, 100.0]),
        "return_dict": False,
    }
    with torch.no_grad():
        expected = model(**inputs)[0]
        model.set_attn_processor(DispatchedJointAttention())
        got = model(**inputs)[0]  # the dispatcher's active backend: native
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)


def test_a_backend_whose_package_or_hardware_is_missing_is_refused_in_one_line(tmp_path):
    import importlib.util

    cases = [("_native_cudnn", "cannot run on this cpu with float32 weights")]  # a CUDA kernel on a CPU
    if importlib.util.find_spec("flash_attn") is None:
        cases.append(("flash", "is not available here: .*flash-attn"))
    for name, why in cases:
        cfg = _cfg(tmp_path, [], f"model.attention_backend={name}")
        with pytest.raises(RuntimeError, match=f"model.attention_backend='{name}' {why}") as err:
            SD3Adapter.from_config(cfg.model, seed=cfg.seed)
        assert "\n" not in str(err.value)


def test_an_inference_only_backend_is_refused_for_training(tmp_path, tiny_cfg_overrides, monkeypatch):
    from flowrl.pipelines.kit import attention

    monkeypatch.setattr(attention, "probe_attention", lambda *args: False)  # as SageAttention's kernel: no grad
    cfg = _cfg(tmp_path, tiny_cfg_overrides, "model.attention_backend=native")
    with pytest.raises(ValueError, match="model.attention_backend='native' is an inference-only kernel"):
        Trainer(cfg)


def test_a_native_backend_trains_with_the_onpolicy_check_passing(tmp_path, tiny_cfg_overrides):
    cfg = _cfg(tmp_path, tiny_cfg_overrides, "train.iterations=1", "model.attention_backend=native")
    rows = Trainer(cfg).train()  # the check is on (train.onpolicy_check): a gap would raise OnPolicyError
    assert cfg.train.onpolicy_check and rows[0]["policy/onpolicy_logp_diff"] <= 1e-6


# ----------------------------------------------------------------------------------------------------
# train.compile


def _checkpoint(run) -> dict[str, torch.Tensor]:
    from flowrl import checkpoint as ckpt

    return ckpt.load_checkpoint(ckpt.latest_checkpoint(run / "checkpoints"))["trainable"]


def _lora_keys(run) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(run / "lora" / "pytorch_lora_weights.safetensors"), framework="pt") as f:
        return sorted(f.keys())


def _train_compiled_and_not(tmp_path, overrides):
    """The same 2-iteration run (with a KL term, so the base weights are scored with the LoRA disabled)
    without and with train.compile; returns both trainers and their metrics."""
    runs = {}
    for compiled in (False, True):
        extra = [
            "train.iterations=2",
            "method.options.beta=0.01",
            "log.save_every=1",
            f"train.compile={str(compiled).lower()}",
        ]
        cfg = _cfg(tmp_path / f"compile-{compiled}", overrides, *extra)
        trainer = Trainer(cfg)
        runs[compiled] = (trainer, trainer.train())
    return runs


def _check_like_the_eager_run(tmp_path, runs):
    (eager, eager_rows), (compiled, rows) = runs[False], runs[True]
    transformer = compiled.adapter.transformer
    assert "forward" in vars(transformer) and "forward" not in vars(eager.adapter.transformer)
    assert all(r["policy/onpolicy_logp_diff"] <= compiled.cfg.train.onpolicy_tol for r in rows)
    # the iteration-0 rollouts are the initial policy's: the same rewards
    assert rows[0]["reward/mean"] == pytest.approx(eager_rows[0]["reward/mean"], abs=1e-5)
    assert rows[1]["policy/kl"] > 0  # the reference (LoRA disabled) differs from the trained policy
    # parameter names, checkpoints and the diffusers LoRA export are the uncompiled run's
    assert list(compiled.policy.trainable) == list(eager.policy.trainable)
    ours, theirs = _checkpoint(tmp_path / "compile-True"), _checkpoint(tmp_path / "compile-False")
    assert sorted(ours) == sorted(theirs) and all(ours[k].shape == theirs[k].shape for k in ours)
    assert _lora_keys(tmp_path / "compile-True") == _lora_keys(tmp_path / "compile-False")
    assert sorted(transformer.state_dict()) == sorted(eager.adapter.transformer.state_dict())


@pytest.mark.slow
def test_compile_trains_with_the_onpolicy_check_and_the_same_checkpoints(tmp_path, tiny_cfg_overrides, monkeypatch):
    """torch.compile's graph capture (dynamo, AOT autograd) through the LoRA layers, the NFE hook, the
    no-grad rollout, the update's backward and the LoRA-disabled reference; the kernels are left to eager
    (``aot_eager``) so that this runs in seconds; the slow test below builds inductor's."""
    from torch._dynamo.utils import counters

    real = torch.compile
    calls = []

    def aot_eager(fn, **kwargs):
        calls.append(kwargs)
        return real(fn, backend="aot_eager", **kwargs)

    monkeypatch.setattr(torch, "compile", aot_eager)
    torch._dynamo.reset()
    counters.clear()
    runs = _train_compiled_and_not(tmp_path, tiny_cfg_overrides)
    assert calls == [{"mode": "default"}]
    # rollout (no grad), update (grad), reference (LoRA disabled): each its graph, none broken
    assert counters["stats"]["unique_graphs"] >= 3 and not counters["graph_break"]
    _check_like_the_eager_run(tmp_path, runs)
    torch._dynamo.reset()


def _cpp_compiler() -> str | None:
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        return get_cpp_compiler()
    except Exception:  # noqa: BLE001
        return None


@pytest.mark.slow
@pytest.mark.skipif(_cpp_compiler() is None, reason="torch.compile's inductor needs a C++ compiler on a CPU")
def test_compile_with_inductor_kernels(tmp_path, tiny_cfg_overrides):
    """The real thing: inductor's C++ kernels (about 1-2 minutes of kernel builds on 2 cores, seconds with
    a warm inductor cache)."""
    torch._dynamo.reset()
    _check_like_the_eager_run(tmp_path, _train_compiled_and_not(tmp_path, tiny_cfg_overrides))
    torch._dynamo.reset()


def test_compile_is_refused_in_one_line_without_a_cpp_compiler(monkeypatch):
    import torch._inductor.cpp_builder as builder

    from flowrl.policy import check_compile

    def missing():
        raise RuntimeError("no working C++ compiler found")

    monkeypatch.setattr(builder, "get_cpp_compiler", missing)
    with pytest.raises(RuntimeError, match="train.compile: torch.compile on a CPU needs a C.. compiler") as err:
        check_compile(torch.device("cpu"))
    assert "\n" not in str(err.value)


def test_compile_wraps_the_module_s_forward_in_place():
    """``compile_forward`` keeps the module (and so DDP/FSDP wrappers around it, its hooks, its parameter
    names); its forward gives the eager forward's output."""
    from flowrl.policy import compile_forward

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
    seen = []
    module.register_forward_pre_hook(lambda m, args: seen.append(args[0].shape[0]))
    x = torch.randn(3, 4)
    expected = module(x)
    keys = list(module.state_dict())
    real = torch.compile
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "compile", functools.partial(real, backend="aot_eager"))
        compile_forward(module, "default", torch.device("cpu"))
    torch.testing.assert_close(module(x), expected)
    assert list(module.state_dict()) == keys and seen == [3, 3]
    torch._dynamo.reset()
