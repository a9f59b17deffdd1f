"""The method contract, over every registered method (``list_methods()``): a new method joins by registering.

Each method declares its ``needs()`` before any weight loads, runs one tiny iteration (``tiny-cpu``; AV-GRPO on
``tiny-ltx2-av-grpo``) in which its credit returns the declared shape and its cost counters are positive and
consistent, and its state survives a JSON round trip into a fresh instance."""

import json
from collections.abc import Callable, Mapping

import pytest
import torch

from flowrl.methods import build_method, list_methods
from flowrl.methods.seam import Advantages, Needs, RewardTable
from flowrl.resolve import resolve_config
from flowrl.trainer import Trainer
from tiny_runs import NO_SAVES, small

SMALL = small(4, "train.iterations=1", *NO_SAVES)
# settings that keep a method's run tiny (DenseGRPO's noise calibration explores many rounds before the first)
TINY = {
    "dense_grpo": ["method.options.calibrate=false"],
    # backpropagates its reward: a differentiable one, JPEG compressibility kept at weight 0 (logged only)
    "reward_backprop": ["reward.smoothness=1.0", "reward.jpeg_compressibility=0"],
    "dgpo": ["method.options.trunc_steps=2", "method.options.num_noisings=2"],  # times from the 4-step grid's head
    # a dataset method: the shipped preference folder, no reward (Needs.rewards false)
    "sft": ["data.prompts=builtin:preference_pairs", "reward={}", "log.eval_every=0"],
}


def _cfg(name: str, *overrides: str):
    if name == "av_grpo":  # the one method for joint audio-video latents
        return resolve_config("tiny-ltx2-av-grpo", ["train.iterations=1", *overrides])
    return resolve_config("tiny-cpu", [f"method.name={name}", *SMALL, *TINY.get(name, []), *overrides])


@pytest.mark.parametrize("name", list_methods())
def test_needs_are_declared_before_any_weight_loads(name):
    method = build_method(_cfg(name))  # no adapter, no weights
    needs = method.needs()
    assert isinstance(needs, Needs)
    assert needs.media is None or all(isinstance(m, str) for m in needs.media)
    assert isinstance(needs.averages, Mapping) and all(isinstance(d, Callable) for d in needs.averages.values())
    assert needs.onpolicy_check is None or (needs.onpolicy_check and "\n" not in needs.onpolicy_check)
    assert all(isinstance(m, str) and not m.startswith("method/") for m in needs.metrics)
    turn = method.begin(0)
    assert isinstance(turn.prompts_of, int) and (turn.trains is None or needs.freezes_parameters)


@pytest.mark.parametrize("name", list_methods())
def test_one_tiny_iteration_keeps_the_contract(tmp_path, one_thread, name):
    tr = Trainer(_cfg(name, f"output_dir={tmp_path}"))
    needs, seen = tr.method.needs(), {}
    explore, credit = tr.method.explore, tr.method.credit

    def spy_explore(ctx, batch):
        exp = explore(ctx, batch)
        seen.setdefault("units", []).append(exp.traj)
        return exp

    def spy_credit(table: RewardTable) -> Advantages:
        seen["table"], seen["adv"] = table, credit(table)
        return seen["adv"]

    tr.method.explore, tr.method.credit = spy_explore, spy_credit
    (row,) = tr.train()

    # credit: (N,) or (N, T), T the transitions of a unit; keep None or (N,) booleans
    table, adv = seen["table"], seen["adv"]
    n = len(table.group_ids)
    assert n == sum(len(u) for u in seen["units"]) and all(len(c) == n for c in table.columns.values())
    assert adv.values.shape[0] == n and adv.values.ndim in (1, 2)
    if adv.values.ndim == 2:
        unit = seen["units"][0]
        assert adv.values.shape[1] == (len(unit.plan) if hasattr(unit, "plan") else len(unit.trained_indices))
    assert adv.keep is None or (adv.keep.shape == (n,) and adv.keep.dtype == torch.bool)
    assert set(adv.metrics) <= set(needs.metrics)
    assert {k for k in row if k.startswith("method/")} <= {f"method/{m}" for m in needs.metrics}

    # cost: positive, and the totals of one iteration are its own counts
    calls_at_least = n if tr.reward is not None else 0  # none configured: none called (a dataset method)
    assert needs.rewards or tr.reward is None or tr.cfg.reward
    assert row["cost/nfe"] > 0 and row["cost/reward_calls"] >= calls_at_least
    assert tr.reward is not None or row["cost/reward_calls"] == 0
    assert row["cost/nfe_total"] == row["cost/nfe"] and row["cost/reward_calls_total"] == row["cost/reward_calls"]

    # state: JSON-able, and a fresh instance restored from it says the same
    state = json.loads(json.dumps(tr.method.state_dict()))
    again = build_method(tr.cfg)
    again.load_state_dict(state)
    assert json.loads(json.dumps(again.state_dict())) == state
