"""Pref-GRPO on the method seam (specs/addon_methods.md §5): the win-rate oracles, credit with pairwise and
score-derived win rates z-scored per component, the exact judge-call count, the per-sample subset of
trained transitions forwarding only its rows, two processes against one; the authors' current switches for
every method (GDPO ``method.credit_norm=gdpo``, RatioNorm ``method.loss=ratio_norm``, ``sample.same_noise_in_group``) and
the ``sd35m-pref-grpo`` recipe's released settings."""

import itertools
import os
import sys
from pathlib import Path

import pytest
import torch

from flowrl.config import ConfigError
from flowrl.methods import build_method
from flowrl.methods.pref_grpo import score_win_rates
from flowrl.methods.seam import RewardTable
from flowrl.resolve import resolve_config
from flowrl.reward_models.base import win_rates
from flowrl.trainer import Trainer
from tiny_runs import NO_EVAL, assert_on_policy_ratio_norm, same_numbers, small

SMALL = small(4, *NO_EVAL)
PAIRWISE = ["reward={'pairwise_rewards:Brighter': 1.0}"]


def _cfg(tmp_path, *overrides):
    return resolve_config("tiny-cpu", [f"output_dir={tmp_path}", *SMALL, "method.name=pref_grpo", *overrides])


def _pair_rates(scores: list[float]) -> torch.Tensor:
    """Win rates of one group from a judge that prefers the higher score (ties 1/2)."""
    pairs = list(itertools.combinations(range(len(scores)), 2))
    p = torch.tensor([1.0 if scores[a] > scores[b] else 0.5 if scores[a] == scores[b] else 0.0 for a, b in pairs])
    return win_rates(len(scores), pairs, p)


@pytest.mark.parametrize("scores", [[0.3, 0.3, 0.9, 0.1, 0.3], [1, 2, 3, 4, 5, 6, 7, 8], [2.0] * 6])
def test_win_rates_sum_to_half_the_group(scores):
    """§5 oracle: the rates of a group of G sum to G/2, ties included; pairwise and score-derived agree."""
    for rates in (
        _pair_rates(scores),
        score_win_rates(torch.tensor(scores), torch.zeros(len(scores), dtype=torch.long)),
    ):
        assert float(rates.sum()) == pytest.approx(len(scores) / 2)
    torch.testing.assert_close(
        _pair_rates(scores),
        score_win_rates(torch.tensor(scores, dtype=torch.float32), torch.zeros(len(scores), dtype=torch.long)),
    )


def test_a_strict_order_gives_a_permutation_of_the_grid():
    scores = torch.tensor([0.4, 0.9, 0.1, 0.7, 0.2, 0.5, 0.3, 0.8])
    rates = score_win_rates(scores, torch.zeros(8, dtype=torch.long))
    assert sorted(rates.tolist()) == pytest.approx([k / 7 for k in range(8)])


def test_score_derived_win_rates_ignore_monotone_transforms():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(24, generator=g)
    groups = torch.arange(24) // 6
    base = score_win_rates(scores, groups)
    for f in (torch.exp, lambda x: 3 * x - 1, lambda x: x**3, torch.sigmoid):
        assert torch.equal(score_win_rates(f(scores), groups), base)


def test_all_ties_give_zero_advantages_without_nan(tmp_path):
    method = build_method(_cfg(tmp_path, *PAIRWISE))
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    columns = {"final": torch.full((8,), 0.5), "final/pairwise_rewards:Brighter": torch.full((8,), 0.5)}
    out = method.credit(RewardTable(columns, groups, frozenset({"pairwise_rewards:Brighter"})))
    assert torch.equal(out.values, torch.zeros(8))
    assert out.metrics == {"pref/win_rate_mean": 0.5, "pref/win_rate_std": 0.0}


def test_credit_z_scores_each_component_with_the_sample_std(tmp_path):
    """Two rewards, one turned into score-derived win rates: A = w1 z(winrate(r1)) + w2 z(r2), each z
    within its group with the unbiased std and eps 1e-8, then clipped."""
    cfg = _cfg(
        tmp_path,
        "reward={jpeg_compressibility: 2.0, aesthetic: 0.5}",
        "method.options.win_rate_from=[jpeg_compressibility]",
    )
    method = build_method(cfg)
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    r1, r2 = torch.tensor([0.1, 0.4, 0.2, 5.0, 5.0, 1.0]), torch.tensor([1.0, 2.0, 4.0, 0.0, 1.0, 1.0])
    out = method.credit(RewardTable({"final": r1, "final/jpeg_compressibility": r1, "final/aesthetic": r2}, groups))
    adv = out.values

    def z(v):
        out = torch.zeros_like(v)
        for g in (0, 1):
            m = groups == g
            out[m] = (v[m] - v[m].mean()) / (v[m].std(unbiased=True) + 1e-8)
        return out

    w1 = torch.tensor([0.0, 1.0, 0.5, 0.75, 0.75, 0.0])
    torch.testing.assert_close(adv, (2.0 * z(w1) + 0.5 * z(r2)).clamp(-5, 5))
    assert out.metrics["pref/win_rate_mean"] == pytest.approx(0.5)


def test_judge_calls_are_the_pairs_of_each_group(tmp_path, one_thread):
    """C(G, 2) comparisons per group (twice with both_orders), counted in cost/reward_calls."""
    for both, per_group in ((False, 6), (True, 12)):
        tr = Trainer(
            _cfg(
                tmp_path / str(both),
                *PAIRWISE,
                "train.iterations=1",
                f"reward_args={{'pairwise_rewards:Brighter': {{both_orders: {str(both).lower()}}}}}",
            )
        )
        (row,) = tr.train()
        assert row["cost/reward_calls"] == 2 * per_group
        assert row["cost/reward_calls/pairwise_rewards:Brighter"] == 2 * per_group
        assert row["method/pref/win_rate_mean"] == pytest.approx(0.5)
        assert row["method/pref/win_rate_std"] > 0


def test_both_orders_cancel_a_position_bias():
    from pairwise_rewards import Brighter

    images = torch.stack([torch.full((3, 4, 4), v) for v in (0.1, 0.2, 0.3)])
    biased = Brighter(bias=0.15)(images, ["p"] * 3, [{}] * 3).scores  # the first shown wins close calls
    fair = Brighter(bias=0.15, both_orders=True)(images, ["p"] * 3, [{}] * 3).scores
    assert biased.tolist() == pytest.approx([0.5, 0.5, 0.5])
    assert fair.tolist() == pytest.approx([0.25, 0.5, 0.75])


def test_each_sample_trains_its_own_subset_and_only_its_rows_are_forwarded(tmp_path, one_thread):
    """subset_fraction 0.5 of 4 transitions: every row trains exactly 2, drawn per row; the update's
    forwards are the trained (row, transition) pairs times the CFG rows, and its first update is on-policy."""
    tr = Trainer(
        _cfg(
            tmp_path,
            "method.options.subset_fraction=0.5",
            "train.iterations=1",
            "reward={jpeg_compressibility: 1.0}",
            "train.optimizer_steps_per_iteration=1",
        )
    )
    batches, group_ids = tr.collect(0, tr.context(0))
    masks = torch.cat([b.traj.row_mask for b in batches])
    assert masks.shape == (8, 4) and masks.sum(dim=1).tolist() == [2] * 8
    assert len({tuple(m.tolist()) for m in masks}) > 1  # not one draw for all
    scored = tr.scoring.score(batches)
    adv = tr.method.credit(RewardTable(scored.columns, group_ids)).values
    tr.policy.nfe = 0
    upd = tr.updater.run(batches, adv, True, tr.context(0), trains=tr.method.begin(0).trains)
    kept = adv != 0
    assert tr.policy.nfe == 2 * int(masks[kept].sum())
    assert upd["onpolicy_logp_diff"] <= 1e-4


def test_bad_options_are_one_line_errors(tmp_path):
    for override, message in (
        ("method.options.subset_fraction=0", "method.options.subset_fraction: must be in (0, 1]"),
        ("method.options.win_rate_from=[ocr]", "method.options.win_rate_from: 'ocr' is not a configured reward"),
        ("method.options.std_eps=0", "method.options.std_eps: must be > 0"),
    ):
        with pytest.raises(ConfigError) as err:
            Trainer(_cfg(tmp_path, override))
        assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="gloo on linux")
@pytest.mark.parametrize(
    "switches",
    [[], ["method.credit_norm=gdpo", "method.loss=ratio_norm", "sample.same_noise_in_group=true"]],
    ids=["plain", "authors-switches"],
)
def test_two_processes_give_one_processs_win_rates(tmp_path, switches):
    """The pairwise judge sees whole groups on each process: the same win rates, advantages and losses; with
    GDPO (over the gathered iteration), RatioNorm and shared initial noise as well."""
    from _processes import ENV, ONE_PROCESS, assert_same_metrics, torchrun, train_metrics

    env = {
        **ENV,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "helpers"), ENV.get("PYTHONPATH", "")]),
    }
    common = [*SMALL, "method.name=pref_grpo", *PAIRWISE, "train.iterations=2", "log.monitors=false", *switches]

    one = train_metrics(ONE_PROCESS, tmp_path / "one", *common, env=env, timeout=300)
    two = train_metrics([*torchrun(29531), "-m", "flowrl", "train"], tmp_path / "two", *common, env=env, timeout=300)
    assert_same_metrics(one, two)
    for a, b in zip(one, two):
        for key in ("method/pref/win_rate_std", "cost/reward_calls"):
            assert a[key] == pytest.approx(b[key], rel=1e-6)


# ------------------------------------------------------------------ the authors' switches, for every method


def _run(tmp_path, *overrides) -> list[dict]:
    cfg = resolve_config("tiny-cpu", [f"output_dir={tmp_path}", *SMALL, "train.iterations=2", *overrides])
    return Trainer(cfg).train()


def _same(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert same_numbers(x) == same_numbers(y)


def test_ratio_norm_on_flow_grpo_is_grpo_guard(tmp_path, one_thread):
    """``method.loss=ratio_norm`` makes Flow-GRPO's loss GRPO-Guard's: the same run, metric for metric."""
    _same(
        _run(tmp_path / "a", "method.name=flow_grpo", "method.loss=ratio_norm"),
        _run(tmp_path / "b", "method.name=grpo_guard"),
    )


@pytest.mark.parametrize("method", ["pref_grpo", "g2rpo"])
def test_ratio_norm_reaches_the_methods_built_on_flow_grpos_loss(tmp_path, one_thread, method):
    """The rollout keeps each transition's mean; on-policy the RatioNorm ratio is 1 and the loss is
    -mean(A) / |Δ_j| (CodeGoat24/Pref-GRPO fastvideo/train_flux.py --rationorm, commit 3e787f6: the bias per
    sample, the scale the step's std, the policy loss divided by sqrt(|dt|)^2)."""
    tr = Trainer(
        resolve_config(
            "tiny-cpu", [f"output_dir={tmp_path}", *SMALL, f"method.name={method}", "method.loss=ratio_norm"]
        )
    )
    ctx = tr.context(0)
    b = tr.collect(0, ctx)[0][0]
    assert b.traj.means is not None and b.traj.means.shape[:2] == b.traj.log_probs.shape
    assert_on_policy_ratio_norm(tr.method, ctx, b)


def test_ratio_norm_refusals_are_one_line_errors(tmp_path):
    for overrides, message in (
        (["method.name=ram"], "method.loss=ratio_norm: needs per-step log-probs, which method ram's exploration"),
        (
            ["method.name=flow_grpo", "method.options.sde_type=cps"],
            "method.options.sde_type: flow_grpo needs a Gaussian step",
        ),
        (["method.name=tp_grpo"], "method.options.sde_type: tp_grpo needs a Gaussian step"),  # CPS by default
    ):
        with pytest.raises(ConfigError) as err:
            build_method(resolve_config("tiny-cpu", [f"output_dir={tmp_path}", "method.loss=ratio_norm", *overrides]))
        assert message in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"^method.loss=ratio_norm: model.pipeline=ltx2 steps joint latents [^\n]*$"):
        build_method(resolve_config("tiny-ltx2", [f"output_dir={tmp_path}", "method.loss=ratio_norm"]))


def test_gdpo_and_ratio_norm_from_the_command_line_keys(tmp_path, one_thread):
    """``method.credit_norm=gdpo`` z-scores the credit part's
    advantages over the iteration before the clip (a part every method takes); the update gets exactly
    clip(batch_zscore(credit))."""
    from flowrl.advantages import batch_zscore

    # a pairwise judge's win rates at 0.4 and a pointwise score at 0.6, as the authors' UR-Think 0.4 + CLIP 0.6
    tr = Trainer(
        _cfg(
            tmp_path,
            "reward={'pairwise_rewards:Brighter': 0.4, jpeg_compressibility: 0.6}",
            "train.iterations=1",
            "method.credit_norm=gdpo",
            "method.loss=ratio_norm",
            "sample.same_noise_in_group=true",
        )
    )
    seen = {}
    update, rule = tr.updater.run, tr.method._credit_rule

    def spy_rule(method, table):  # the credit part, before the credit normalisation
        adv = rule(method, table)
        seen["credit"] = adv.values
        return adv

    def spy_update(batches, adv_all, *args, **kwargs):
        seen["adv"] = adv_all
        return update(batches, adv_all, *args, **kwargs)

    tr.method._credit_rule, tr.updater.run = spy_rule, spy_update
    (row,) = tr.train()
    torch.testing.assert_close(seen["adv"], batch_zscore(seen["credit"]).clamp(-5, 5), rtol=0, atol=0)
    assert float(seen["adv"].std()) == pytest.approx(1.0, rel=1e-5)  # the batch's sample std, before any clip
    assert row["policy/onpolicy_logp_diff"] <= 1e-4


def test_shared_noise_is_one_draw_per_group_on_any_number_of_processes(tmp_path):
    """Pref-GRPO's --init_same_noise (fastvideo/train_flux.py: one draw for a rollout's whole group):
    ``sample.same_noise_in_group`` gives every member of a group the same initial noise, different groups
    different noise, and two processes' shares are the one process's rows."""
    from flowrl.data import GroupSampler

    tr = Trainer(_cfg(tmp_path, "sample.same_noise_in_group=true"))
    s = tr.cfg.sample
    one = tr.sampler.iteration(3)
    noise = tr._initial_noise(3, one)  # (8, C, H, W): 2 groups of 4
    for g in one.group_ids.unique():
        members = noise[one.group_ids == g]
        assert all(torch.equal(members[0], m) for m in members[1:])
    assert not torch.equal(noise[one.group_ids == 0][0], noise[one.group_ids == 1][0])
    shares = [
        GroupSampler(len(tr.prompts), s.prompts_per_iteration, s.group_size, tr.cfg.seed, 2, r).iteration(3)
        for r in (0, 1)
    ]
    assert torch.equal(torch.cat([tr._initial_noise(3, share) for share in shares]), noise)


def test_resume_with_the_authors_switches_repeats_the_uninterrupted_run(tmp_path, one_thread):
    switches = [
        *PAIRWISE,
        "method.credit_norm=gdpo",
        "method.loss=ratio_norm",
        "sample.same_noise_in_group=true",
        "log.save_every=1",
    ]
    full = _run(tmp_path / "full", "method.name=pref_grpo", *switches, "train.iterations=3")
    _run(tmp_path / "part", "method.name=pref_grpo", *switches, "train.iterations=1")
    resumed = _run(tmp_path / "part", "method.name=pref_grpo", *switches, "train.iterations=3", "resume=latest")
    _same(full[1:], resumed)


def test_the_sd35m_recipe_carries_the_authors_released_settings():
    """CodeGoat24/Pref-GRPO scripts/_common_finetune.sh + scripts/lora/lora_ur_think_prefgrpo_flux.sh (commit
    3e787f6): UR-Think 0.4 + CLIP 0.6, --apply_gdpo, --rationorm, --init_same_noise, 25 steps at eta 0.7 with
    the last one ignored and timestep_fraction 0.6, clip 1e-4, adv clip 5, no KL, lr 1e-5, wd 1e-4, LoRA 64/128."""
    cfg = resolve_config("sd35m-pref-grpo")
    s, t, o = cfg.sample, cfg.train, build_method(cfg).options
    assert cfg.reward == {"unifiedreward": 0.4, "clipscore": 0.6}
    ur = cfg.reward_args["unifiedreward"]
    assert ur["mode"] == "pairwise" and "template_from" in ur and ur["max_new_tokens"] == 4096
    assert cfg.reward_args["clipscore"]["formula"] == "cos"
    assert cfg.method.credit_norm == "gdpo" and cfg.method.loss == "ratio_norm" and s.same_noise_in_group
    assert (s.num_steps, o.noise_level, s.group_size, int(s.num_steps * o.timestep_fraction)) == (25, 0.7, 8, 24)
    assert cfg.method.options["subset_fraction"] == 0.6 and round(0.6 * 24) == 14  # the authors' int(24 x 0.6)
    assert (o.clip_range, o.adv_clip_max, o.beta, t.learning_rate, t.weight_decay) == (1e-4, 5.0, 0.0, 1e-5, 1e-4)
    assert (t.lora.rank, t.lora.alpha, t.ema) == (64, 128, False)
