import json

import pytest
import torch

from flowrl.logs import read_metrics
from flowrl.resolve import resolve_config
from flowrl.trainer import Trainer
from flowrl.update import OnPolicyError

REQUIRED = [
    "iteration",
    "reward/mean",
    "reward/std",
    "reward/jpeg_compressibility/mean",
    "policy/loss",
    "policy/approx_kl",
    "policy/clip_frac",
    "timing_s/rollout",
    "timing_s/update",
]


def _cfg(tmp_path, base, *extra):
    return resolve_config("tiny-cpu", [f"output_dir={tmp_path}", *base, *extra])


def test_short_run_changes_every_trainable_parameter_and_logs_metrics(tmp_path, tiny_cfg_overrides):
    cfg = _cfg(tmp_path, tiny_cfg_overrides, "train.iterations=2", "method.options.beta=0.01", "log.save_every=2")
    trainer = Trainer(cfg)
    before = {k: p.detach().clone() for k, p in trainer.policy.trainable.items()}
    trainer.train()
    unchanged = [k for k, p in trainer.policy.trainable.items() if torch.equal(p, before[k])]
    assert not unchanged, f"{len(unchanged)} of {len(before)} trainable tensors did not change, e.g. {unchanged[:3]}"
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == [0, 1]
    for key in REQUIRED:
        assert all(key in r for r in rows), key
    assert rows[0]["policy/onpolicy_logp_diff"] == 0.0
    assert rows[1]["policy/kl"] > 0  # the policy has moved away from the base weights
    for name in ("config.yaml", "reward_curve.png", "lora/pytorch_lora_weights.safetensors"):
        assert (tmp_path / name).is_file(), name
    assert list((tmp_path / "samples").glob("*.png"))
    assert (tmp_path / "checkpoints" / "iter-000002" / "state.json").is_file()


def test_exported_lora_loads_into_a_diffusers_pipeline(tmp_path, tiny_cfg_overrides):
    cfg = _cfg(tmp_path, tiny_cfg_overrides, "train.iterations=1")
    trainer = Trainer(cfg)
    trainer.train()
    from flowrl.pipelines.sd3.tiny import build_tiny_sd3_pipeline

    pipe = build_tiny_sd3_pipeline(cfg.model.resolution, cfg.model.tiny_size, seed=cfg.seed)
    pipe.load_lora_weights(str(tmp_path / "lora"))
    import re

    def strip(name):  # drop the adapter name ("default", "default_0", ...) from parameter names
        return re.sub(r"\.(lora_[AB])\.[^.]+\.", r".\1.", name)

    trained = {strip(k): v for k, v in trainer.policy.trainable.items()}
    loaded = {strip(k): v for k, v in pipe.transformer.named_parameters() if "lora_" in k}
    assert set(loaded) == set(trained)
    for name, value in trained.items():
        assert torch.allclose(loaded[name], value), name


def test_resume_continues_with_the_same_metrics(tmp_path, tiny_cfg_overrides):
    base = [*tiny_cfg_overrides, "log.save_every=2", "method.options.beta=0.01"]
    full = Trainer(_cfg(tmp_path / "full", base, "train.iterations=4")).train()
    Trainer(_cfg(tmp_path / "part", base, "train.iterations=2")).train()
    ckpt = tmp_path / "part" / "checkpoints" / "iter-000002"
    resumed = Trainer(_cfg(tmp_path / "part", base, "train.iterations=4", f"resume={ckpt}")).train()
    assert [m["iteration"] for m in resumed] == [2, 3]
    for a, b in zip(full[2:], resumed):
        for key in ("reward/mean", "policy/loss", "policy/approx_kl", "policy/kl", "policy/grad_norm"):
            assert a[key] == b[key], key
    lines = (tmp_path / "part" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [0, 1, 2, 3]


def test_onpolicy_check_stops_a_mismatched_update(tmp_path, tiny_cfg_overrides, monkeypatch):
    trainer = Trainer(_cfg(tmp_path, tiny_cfg_overrides, "train.iterations=1"))
    import flowrl.methods.context as tr  # the context's forwards: rollout and update go through `transition`

    real = tr.transition

    def shifted(adapter, plan, i, *args, **kwargs):  # the update sees another schedule than the rollout
        if kwargs.get("x_next") is not None:
            plan = plan.__class__(
                plan.sigma * 0.98, plan.sigma_next, plan.kinds, plan.noise_levels, plan.train, plan.sigma_at_one
            )
        return real(adapter, plan, i, *args, **kwargs)

    monkeypatch.setattr(tr, "transition", shifted)
    with pytest.raises(OnPolicyError, match="step-0 on-policy check failed"):
        trainer.train()


@pytest.mark.slow
def test_reward_rises_on_compressibility(tmp_path):
    cfg = resolve_config("tiny-cpu", [f"output_dir={tmp_path}", "train.iterations=100"])
    rows = Trainer(cfg).train()
    first = sum(r["reward/mean"] for r in rows[:10]) / 10
    last = sum(r["reward/mean"] for r in rows[-10:]) / 10
    # the tiny-cpu demo climbs about 3.4 within-batch standard deviations in its first 100 iterations
    assert last > first + 2 * rows[0]["reward/std"], (first, last, rows[0]["reward/std"])


def test_full_finetune_with_ema_checkpointing_and_kl(tmp_path, tiny_cfg_overrides):
    cfg = _cfg(
        tmp_path,
        tiny_cfg_overrides,
        "train.iterations=2",
        "train.lora.enabled=false",
        "train.ema=true",
        "train.ema_every=1",
        "train.gradient_checkpointing=true",
        "method.options.beta=0.01",
        "log.save_every=2",
    )
    trainer = Trainer(cfg)
    assert trainer.policy.ref_model is not None
    before = {k: p.detach().clone() for k, p in trainer.policy.trainable.items()}
    rows = trainer.train()
    assert rows[0]["policy/onpolicy_logp_diff"] == 0.0  # gradient checkpointing recomputes the same forward
    changed = sum(not torch.equal(p, before[k]) for k, p in trainer.policy.trainable.items())
    assert changed == len(before)
    assert rows[1]["policy/kl"] > 0
    # the export holds the EMA weights, not the live ones
    from diffusers import SD3Transformer2DModel

    exported = SD3Transformer2DModel.from_pretrained(tmp_path / "transformer")
    name = "proj_out.weight"
    assert torch.allclose(dict(exported.named_parameters())[name], trainer.policy.ema.shadow[name])
    assert not torch.equal(trainer.policy.ema.shadow[name], trainer.policy.trainable[name].float())


def test_periodic_evaluation_on_held_out_prompts(tmp_path, tiny_cfg_overrides):
    held_out = tmp_path / "eval.txt"
    held_out.write_text("a red apple\na blue car\na green tree\n")
    cfg = _cfg(
        tmp_path,
        tiny_cfg_overrides,
        "train.iterations=2",
        "log.eval_every=1",
        f"data.eval_prompts={held_out}",
        "log.eval_num_prompts=3",
        "sample.eval_num_steps=3",
        "eval_reward={jpeg_incompressibility: 1.0}",
    )
    rows = Trainer(cfg).train()
    assert [r["iteration"] for r in rows] == [0, 1, 2]
    for r in rows:
        assert "eval/reward/jpeg_incompressibility/mean" in r and r["eval/reward/mean"] > 0
    assert "reward/mean" not in rows[-1]  # the final row holds the evaluation of the trained policy only
    assert rows[0]["reward/jpeg_compressibility/mean"] < 0
    assert (tmp_path / "reward_curve.png").is_file() and list((tmp_path / "samples").glob("eval-*.png"))


def test_a_context_is_built_from_adapter_config_and_policy_without_a_trainer():
    """A method's services need no trainer and no run folder: a tiny adapter, its Policy and the config."""
    from accelerate import Accelerator

    from flowrl.methods.context import Context
    from flowrl.pipelines.base import adapter_class
    from flowrl.policy import Policy

    cfg = resolve_config("tiny-cpu")
    adapter = adapter_class(cfg.model.pipeline).from_config(cfg.model, device=torch.device("cpu"), seed=0)
    policy = Policy(cfg, adapter, Accelerator(mixed_precision="no"), reference=False, averages={"old": lambda k: 0.5})
    ctx = Context(adapter, cfg, policy, 0)
    start = {k: p.detach().clone() for k, p in policy.trainable.items()}
    with torch.no_grad():
        for p in policy.trainable.values():
            p.add_(1.0)
    with ctx.average_weights("old") as model:  # the average is still the initial policy
        assert model is policy.model and all(torch.equal(p, start[k]) for k, p in policy.trainable.items())
    assert all(torch.equal(p, start[k] + 1.0) for k, p in policy.trainable.items())  # restored
    with pytest.raises(RuntimeError, match="set train.ema=true"), ctx.ema_weights():
        pass
    with pytest.raises(RuntimeError, match="asked for the average 'new'"), ctx.weights("new"):
        pass


def test_update_statistics_read_host_tensors_as_the_stacked_read_does():
    """On the host the statistics are read value by value, on a device in one stacked read: the same floats."""
    from flowrl.update import UpdateStats

    values = [torch.tensor(0.1), torch.tensor([1 / 3]), torch.tensor(2.5, dtype=torch.bfloat16), torch.tensor(True)]
    stats = UpdateStats()
    for i, v in enumerate(values):
        stats.add(2.0, **{f"v{i}": v, "plain": 0.25})
    stats.add_max(gap=torch.tensor(0.7, dtype=torch.float64))
    wide = torch.stack([v.reshape(()).to(torch.float64) for v in values]).tolist()
    assert stats.sums == {**{f"v{i}": w * 2.0 for i, w in enumerate(wide)}, "plain": 2.0}
    assert stats.maxima == {"gap": 0.7}
