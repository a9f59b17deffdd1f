"""Diffusion-DPO (online and offline), DGPO and SFT on the seam: cost/nfe and cost/reward_calls equal to each
method's formula, no reward built or logged for the dataset methods, exact resume, and typed one-line option
errors. Their math by hand: tests/credit/test_preference.py."""

import pytest

from flowrl.config import ConfigError
from flowrl.methods import build_method
from flowrl.resolve import resolve_config
from flowrl.trainer import Trainer
from tiny_runs import NO_EVAL, assert_resume_repeats, small

# 2 prompts x 4 members, 4 steps with CFG 4.5 (two rows a step), one group per rollout batch
SMALL = small(4, *NO_EVAL)
DATASET = ["data.prompts=builtin:preference_pairs", "reward={}"]
RUNS = {
    "dpo": ["method.name=dpo", "method.options.num_noisings=2"],
    "dpo_offline": ["method.name=dpo", "method.options.pairs=dataset", "method.options.num_noisings=2",
                    "sample.group_size=2", *DATASET],
    "dgpo": ["method.name=dgpo", "method.options.num_noisings=2", "method.options.trunc_steps=2"],
    "sft": ["method.name=sft", "method.options.num_noisings=2", "sample.group_size=2", *DATASET],
}  # fmt: skip


def _trainer(tmp_path, name, *overrides) -> Trainer:
    return Trainer(resolve_config("tiny-cpu", [f"output_dir={tmp_path}", *SMALL, *RUNS[name], *overrides]))


def _nfe(name: str, row: dict) -> float:
    """Each method's forwards per iteration (sample rows; CFG's two branches are two): n samples, T = 4 steps
    with CFG (2 rows), K = 2 noisings; P pairs (2 rows each, a policy and a reference forward each)."""
    n, t, k = 8, 4, 2
    if name == "dpo":  # ODE endpoints, then each pair's 2 rows x K x (policy + reference)
        return n * t * 2 + row["method/dpo/pairs"] * 2 * k * 2
    if name == "dpo_offline":  # no rollout: 2 pairs (prompts) from the folder
        return 2 * 2 * k * 2
    if name == "dgpo":  # ODE endpoints (dpm2: one evaluation a step), reference and old at every noising, training
        return n * t * 2 + n * k * 2 + n * k
    return 2 * 2 * k  # sft: 2 rows x 2 repeats, K noisings each


def test_the_dgpo_old_policy_decay_is_the_authors_off_by_one():
    """Luo-Yihong/DGPO scripts/train_sd3_dgpo.py:1176 (01ceb4b): after each optimizer step, ema_ref_decay =
    min(0.3, 0.001 * global_step) with global_step still the count before this step (it is incremented after), so
    optimizer step s (from 1) decays by min(0.001 (s - 1), 0.3): s = 1 -> 0 (θ_old = θ), 2 -> 0.001, 101 -> 0.1,
    300 -> 0.299, 301 -> 0.3, and 0.3 from there. One optimizer step an iteration: update k is step k; with 2 a
    step, update k ends at step 2k: k = 1 -> 0.001, k = 151 -> min(0.301, 0.3) = 0.3."""
    cfg = resolve_config("tiny-cpu", [*RUNS["dgpo"], "train.optimizer_steps_per_iteration=1"])
    d = build_method(cfg).averages()["old"]
    assert [d(1), d(2), d(101), d(300), d(301), d(10**4)] == pytest.approx([0.0, 0.001, 0.1, 0.299, 0.3, 0.3])
    two = build_method(resolve_config("tiny-cpu", [*RUNS["dgpo"], "train.optimizer_steps_per_iteration=2"]))
    assert [two.averages()["old"](k) for k in (1, 150, 151)] == pytest.approx([0.001, 0.299, 0.3])


@pytest.mark.parametrize("name", list(RUNS))
def test_costs_are_the_formula(tmp_path, one_thread, name):
    tr = _trainer(tmp_path, name, "train.iterations=1")
    (row,) = tr.train()
    assert row["cost/nfe"] == _nfe(name, row)
    if name in ("dpo_offline", "sft"):  # no reward configured: none built, called or logged
        assert tr.reward is None and row["cost/reward_calls"] == 0
        assert not any(k.startswith("reward/") for k in row)
    else:
        assert row["cost/reward_calls"] == 8 and "reward/mean" in row
    assert "policy/onpolicy_logp_diff" not in row and (tmp_path / "lora").is_dir()


@pytest.mark.parametrize("name", list(RUNS))
def test_resume_repeats_the_uninterrupted_run_exactly(tmp_path, one_thread, name):
    train = lambda out, *o: _trainer(out, name, *o).train()  # noqa: E731
    assert_resume_repeats(train, tmp_path, "log.save_every=1", iterations=2)


@pytest.mark.parametrize(
    "name, override, message",
    [
        ("dpo", "method.options.pairs=offline", "method.options.pairs: 'offline'; allowed: online, dataset"),
        ("dpo", "method.options.beta=0", "method.options.beta: must be > 0, got 0"),
        ("dpo", "method.options.time_law=cosine", "method.options.time_law: 'cosine'; allowed: logit_normal, uniform"),
        ("dpo", "sample.same_noise_in_group=true", "sample.same_noise_in_group: online DPO samples with a"),
        ("dpo_offline", "sample.group_size=4", "sample.group_size: method.options.pairs=dataset makes a prompt"),
        ("dgpo", "method.options.beta_dpo=-1", "method.options.beta_dpo: must be > 0, got -1"),
        ("dgpo", "method.options.kl_cfg=0.5", "method.options.kl_cfg: must be >= 1"),
        ("dgpo", "method.options.num_noisings=5", "method.options.num_noisings: 5 distinct times from the first"),
        ("dgpo", "method.options.trunc_steps=4", "method.options.trunc_steps: 4 must be below sample.num_steps=4"),
        ("sft", "method.options.num_noisings=0", "method.options.num_noisings: must be >= 1, got 0"),
    ],
)
def test_option_errors_are_one_line(name, override, message):
    with pytest.raises(ConfigError, match=message) as err:
        build_method(resolve_config("tiny-cpu", [*SMALL, *RUNS[name], override]))
    assert "\n" not in str(err.value)


def test_dataset_methods_need_no_reward_but_evaluation_does(tmp_path):
    from flowrl.preflight import preflight

    with pytest.raises(ConfigError, match="log.eval_every: evaluation scores with a reward and none is configured"):
        preflight(resolve_config("tiny-cpu", [*SMALL, *RUNS["sft"], "log.eval_every=5"]))


def test_sft_trains_from_a_folder_of_prompt_and_image_rows_one_sample_a_prompt(tmp_path, one_thread, capsys):
    """SFT's documented folder, ``{"prompt": ..., "image": "a.png"}`` rows: the loader reads ``image`` as an
    editing row's source image, so for a dataset method it goes back to being the row's target (a text-only family
    then sees no source image to refuse); ``sample.group_size=1`` is allowed for SFT (no group is compared) and
    refused for a method that compares a prompt's samples."""
    import json

    from PIL import Image

    from flowrl.cli import main

    folder = tmp_path / "renders"
    folder.mkdir()
    rows = []
    for i, colour in enumerate([(255, 0, 0), (0, 0, 255), (0, 255, 0), (255, 255, 0)]):
        Image.new("RGB", (32, 32), colour).save(folder / f"{i}.png")
        rows.append(json.dumps({"prompt": f"a flat colour {i}", "image": f"{i}.png"}) + "\n")
    (folder / "train.jsonl").write_text("".join(rows))
    run = ["method.name=sft", f"data.prompts={folder}", "reward={}", "sample.group_size=1",
           "sample.prompts_per_iteration=4", "train.iterations=1"]  # fmt: skip
    assert main(["validate", "tiny-cpu", *run]) == 0
    assert "ok: tiny-cpu is valid" in capsys.readouterr().out
    (row,) = Trainer(resolve_config("tiny-cpu", [f"output_dir={tmp_path / 'run'}", *SMALL, *run])).train()
    assert row["cost/nfe"] == 4  # 4 rows, one noising each, the conditional prediction alone
    with pytest.raises(ConfigError, match="^sample.group_size: method dgpo compares the samples of a prompt"):
        resolve_config("tiny-cpu", ["method.name=dgpo", "sample.group_size=1"])
