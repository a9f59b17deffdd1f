"""G²RPO, E-GRPO and GRPO-Guard on the method seam (specs/addon_methods.md §3-4, flow_grpo_core.md §1.8):
shared anchors and branch inputs, the shared-input forward, merged steps, costs against the spec's
formulas, one optimizer step per branch, credit by hand, RatioNorm by hand, exact resume."""

import json

import pytest
import torch

from flowrl.credit.entropy import merge_length
from flowrl.credit.granular import tail_indices
from flowrl.losses import ratio_norm_log_ratio
from flowrl.methods import build_method, list_methods
from flowrl.methods.g2rpo import group_rows
from flowrl.methods.seam import RewardTable, TrainEntry
from flowrl.resolve import resolve_config
from flowrl.trainer import Trainer
from tiny_runs import NO_EVAL, assert_on_policy_ratio_norm, assert_resume_repeats, small

# 2 prompts x 4 members, 4 steps, CFG 4.5 (2 transformer rows a sample): one group per rollout batch
SMALL = small(4, *NO_EVAL)


def _trainer(tmp_path, *overrides) -> Trainer:
    return Trainer(resolve_config("tiny-cpu", [f"output_dir={tmp_path}", *SMALL, *overrides]))


def test_every_method_of_the_issue_is_listed():
    assert {"flow_grpo", "dense_grpo", "tp_grpo", "g2rpo", "e_grpo", "grpo_guard"} <= set(list_methods())


def test_group_rows_finds_each_groups_first_row():
    first, rows = group_rows(torch.tensor([5, 5, 2, 2, 2, 7]))
    assert first.tolist() == [2, 0, 5]  # groups in sorted order: 2, 5, 7
    assert rows.tolist() == [1, 1, 0, 0, 0, 2]


@pytest.mark.parametrize(
    "method, extra", [("g2rpo", []), ("e_grpo", []), ("e_grpo", ["method.options.merge_lengths=2"])]
)
def test_branches_share_their_anchor_and_the_update_recomputes_their_log_probs(tmp_path, one_thread, method, extra):
    """§3 oracle: all G members of a step-k group have bitwise-identical inputs a_k; their branch ends differ.
    The shared-input forward (one row per group) gives the log-prob a per-row forward gives, and the
    method's loss recomputes the rollout's log-prob exactly (same batch, same math)."""
    tr = _trainer(tmp_path, f"method.name={method}", *extra)
    ctx = tr.context(0)
    batches, _ = tr.collect(0, ctx)
    sigmas = tr.adapter.sigmas(4).float().cpu()
    for b in batches:
        traj = b.traj
        assert traj.next_states is not None and traj.states.shape[:2] == (4, 2)  # 4 members, K = 2 branches
        for k in range(len(traj.plan)):
            x, x_next = traj.pair(k)
            assert all(torch.equal(x[0], x[i]) for i in range(1, 4))
            assert not torch.equal(x_next[0], x_next[1])
            per_row = ctx.transition(traj.plan, k, x, ctx.model_inputs(b.cond), x_next).log_prob
            torch.testing.assert_close(per_row, traj.log_probs[:, k], rtol=0, atol=1e-5)
            loss = tr.method.transition_loss(ctx, traj, k, b.cond, torch.ones(4))
            assert loss.logp_gap == 0.0
        # the branch's sigma pair: G²RPO k -> k+1; E-GRPO n -> n + l (adaptive, or the fixed 2)
        starts = [0, 1]
        if method == "g2rpo":
            ends = [1, 2]
        elif extra:
            ends = [2, 3]
        else:
            ends = [n + merge_length(sigmas, n, 0.7, 2.2) for n in starts]
        assert traj.plan.sigma.tolist() == sigmas[starts].tolist()
        assert traj.plan.sigma_next.tolist() == sigmas[ends].tolist()
        assert traj.plan.sigma_at_one == float(sigmas[1])


def test_e_grpo_with_unit_merges_is_g2rpo_bitwise(tmp_path, one_thread):
    """§4 oracle: a merged step of length 1 is the Flow-GRPO step (here G²RPO's branch) bitwise."""
    g2 = _trainer(tmp_path / "g2", "method.name=g2rpo").collect(0)[0]
    e1 = _trainer(
        tmp_path / "e1", "method.name=e_grpo", "method.options.merge_lengths=1", "method.options.granularities=[1,2]"
    ).collect(0)[0]
    for a, b in zip(g2, e1, strict=True):
        assert torch.equal(a.traj.states, b.traj.states) and torch.equal(a.traj.next_states, b.traj.next_states)
        assert torch.equal(a.traj.log_probs, b.traj.log_probs)
        assert torch.equal(a.media, b.media) and torch.equal(a.extra["branch"], b.extra["branch"])


def _branch_nfes(num_steps, pairs, granularities, groups, members, cfg_rows=2) -> int:
    """The spec's count with the shared-input forward: per group T (anchor) + K (one branch forward each),
    per member one ODE tail per (branch, λ) of |tail_indices| forwards; times the CFG rows."""
    tails = sum(len(tail_indices(num_steps, end, lam)) for _, end in pairs for lam in granularities)
    return cfg_rows * groups * (num_steps + len(pairs) + members * tails)


@pytest.mark.parametrize(
    "method, extra, pairs, lams, rollout_nfe, calls",
    [
        # T = 4, M = {0, 1}, Λ = {1, 2}: tails from 1: [1,2,3] and [1,2]; from 2: [2,3] and [2] -> 8 a member;
        # per group 4 + 2 + 4 * 8 = 38, 2 groups, 2 CFG rows: 152. Calls: 8 samples * 2 branches * 2 λ = 32.
        ("g2rpo", [], [(0, 1), (1, 2)], [1, 2], 152, 32),
        # E-GRPO, l = 2 fixed, Λ = {1}: branches 0 -> 2 and 1 -> 3, tails [2, 3] and [3] -> 3 a member;
        # per group 4 + 2 + 4 * 3 = 18, times 2 groups and 2 rows: 72. Calls: 8 * 2 = 16.
        ("e_grpo", ["method.options.merge_lengths=2"], [(0, 2), (1, 3)], [1], 72, 16),
    ],
)
def test_branch_methods_cost_what_the_spec_counts(tmp_path, one_thread, method, extra, pairs, lams, rollout_nfe, calls):
    assert _branch_nfes(4, pairs, lams, groups=2, members=4) == rollout_nfe
    tr = _trainer(tmp_path, f"method.name={method}", "train.iterations=1", *extra)
    rows = tr.train()
    # the update: one optimizer step per branch, each unit (one group) forwarded once per step: 2 x 2 x 2 rows
    assert rows[0]["cost/nfe"] == rollout_nfe + 8
    assert rows[0]["cost/reward_calls"] == calls
    assert tr.updater.optimizer_steps == len(pairs)
    assert rows[0]["policy/onpolicy_logp_diff"] == 0.0


def test_g2rpo_schedule_is_one_optimizer_step_per_branch(tmp_path):
    method = build_method(resolve_config("tiny-cpu", [*SMALL, "method.name=g2rpo"]))
    method.num_branches = 3
    assert method.schedule(2) == [[TrainEntry(q, k) for q in range(2)] for k in range(3)]
    flow = build_method(resolve_config("tiny-cpu", [*SMALL, "train.optimizer_steps_per_iteration=2"]))
    assert flow.schedule(3) == [[TrainEntry(0), TrainEntry(2)], [TrainEntry(1)]]


def test_g2rpo_credit_sums_weighted_zscores_over_granularities_and_rewards():
    """§3.4-3.5 by hand: one group of 3, K = 2, Λ = {1, 2}, rewards a (weight 1) and b (weight 0.5).
    Columns: "final/<r>" is (branch 0, λ 1); "branch/<r>" the other three in (k, λ) order."""
    rewards_cfg = "reward={jpeg_compressibility: 1.0, jpeg_incompressibility: 0.5}"
    cfg = resolve_config("tiny-cpu", [*SMALL, "method.name=g2rpo", rewards_cfg])
    method = build_method(cfg)
    a = torch.tensor([[1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 5.0, 4.0], [3.0, 2.0, 1.0, 4.0]])  # (N, K*L)
    b = torch.tensor([[0.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], [2.0, 1.0, 1.0, 1.0]])
    rewards = {
        "final": torch.zeros(3),
        "final/jpeg_compressibility": a[:, 0],
        "branch/jpeg_compressibility": a[:, 1:],
        "final/jpeg_incompressibility": b[:, 0],
        "branch/jpeg_incompressibility": b[:, 1:],
    }
    adv = method.credit(RewardTable(rewards, torch.zeros(3, dtype=torch.long))).values

    def z(col):  # unbiased std, + 1e-8; a flat column is exactly 0
        return torch.zeros(3) if col.max() == col.min() else (col - col.mean()) / (col.std() + 1e-8)

    # k = 0: a's λ1 [1,2,3] -> [-1,0,1], a's λ2 flat; b's λ1 [0,1,2] -> [-1,0,1] at weight 0.5
    want0 = z(a[:, 0]) + z(a[:, 1]) + 0.5 * (z(b[:, 0]) + z(b[:, 1]))
    want1 = z(a[:, 2]) + z(a[:, 3]) + 0.5 * (z(b[:, 2]) + z(b[:, 3]))
    torch.testing.assert_close(adv, torch.stack([want0, want1], 1))
    assert adv[:, 0].tolist() == pytest.approx([-1.5, 0.0, 1.5])
    assert adv[:, 1].tolist() == pytest.approx([0.0, 1.0, -1.0])  # [3, 5, 1]: z = [0, 1, -1]


def test_ratio_norm_is_the_noise_projection_of_the_mean_change():
    """§1.8 identity: with x' = μ_old + s ε, (log π_θ - log π_old + b) s = mean_d[(μ_θ - μ_old) ε]."""
    from flowrl.sde import gaussian_log_prob

    g = torch.Generator().manual_seed(0)
    mu_old, eps = torch.randn(3, 4, 2, 2, generator=g), torch.randn(3, 4, 2, 2, generator=g)
    mu_new = mu_old + 0.01 * torch.randn(3, 4, 2, 2, generator=g)
    s = torch.tensor([0.3, 0.1, 0.05])
    x_next = mu_old + s.view(3, 1, 1, 1) * eps
    lp_new, lp_old = gaussian_log_prob(x_next, mu_new, s), gaussian_log_prob(x_next, mu_old, s)
    got = ratio_norm_log_ratio(lp_new, lp_old, mu_new, mu_old, s)
    torch.testing.assert_close(got, ((mu_new - mu_old) * eps).mean(dim=(1, 2, 3)), rtol=1e-4, atol=1e-6)
    assert torch.equal(ratio_norm_log_ratio(lp_old, lp_old, mu_old, mu_old, s), torch.zeros(3))  # on-policy: 1


def test_grpo_guard_divides_the_clipped_loss_by_the_step(tmp_path, one_thread):
    """The rollout keeps each transition's mean; the loss of transition j is Flow-GRPO's clipped surrogate of
    the RatioNorm ratio, divided by |Δ_j|; on-policy the ratio is 1 and the loss is -mean(A) / |Δ_j|."""
    tr = _trainer(tmp_path, "method.name=grpo_guard")
    ctx = tr.context(0)
    b = tr.collect(0, ctx)[0][0]
    assert b.traj.means is not None and b.traj.means.shape == b.traj.log_probs.shape + b.traj.states.shape[2:]
    assert_on_policy_ratio_norm(tr.method, ctx, b)


@pytest.mark.parametrize("method", ["g2rpo", "e_grpo", "grpo_guard"])
def test_resume_repeats_the_uninterrupted_run_exactly(tmp_path, one_thread, method):
    opts = [f"method.name={method}", "log.save_every=1"]
    full = assert_resume_repeats(lambda out, *o: _trainer(out, *o).train(), tmp_path, *opts)
    if method == "e_grpo":
        assert "method/e_grpo/merge_length_mean" in full[0]
        state = json.loads((tmp_path / "full" / "checkpoints" / "iter-000001" / "state.json").read_text())
        assert state["config"]["method"]["name"] == "e_grpo"


def test_the_context_swaps_in_the_ema_weights_and_restores_the_policy(tmp_path):
    tr = _trainer(tmp_path, "train.ema=true", "train.ema_every=1", "train.iterations=1")
    tr.train()
    ctx = tr.context(1)
    policy = {k: p.detach().clone() for k, p in tr.policy.trainable.items()}
    assert any(not torch.equal(policy[k], tr.policy.ema.shadow[k]) for k in policy)
    with ctx.ema_weights():
        assert all(torch.equal(p, tr.policy.ema.shadow[k]) for k, p in tr.policy.trainable.items())
    assert all(torch.equal(p, policy[k]) for k, p in tr.policy.trainable.items())
    with (
        pytest.raises(RuntimeError, match="set train.ema=true"),
        _trainer(tmp_path / "no-ema").context(0).ema_weights(),
    ):
        pass
