"""AV-GRPO on the tiny LTX-2 (``tiny-ltx2-av-grpo``): the spec's oracles through the real trainer and adapter.

The frozen modality is the anchor's at every step in every group member; a video phase leaves every audio-tower
parameter and the video-to-audio cross-attention bit-identical (and the mirror case); the first ratio is exactly
1; the phases alternate on the same prompts with the optimizer state cleared at each switch; a NaN advantage
drops the step and switches at once; the phase travels in checkpoints; single-tensor pipelines are refused."""

import os
import signal
import sys
from pathlib import Path

import pytest
import torch

from _processes import KEYS as COMPARED
from _processes import needs_torchrun, torchrun, train_metrics
from flowrl.config import ConfigError
from flowrl.interrupts import Interrupted
from flowrl.logs import read_metrics
from flowrl.methods.av_grpo import PHASE_GROUPS
from flowrl.methods.seam import RewardTable, TrainEntry
from flowrl.preflight import preflight
from flowrl.resolve import resolve_config
from flowrl.trainer import Trainer
from flowrl.update import Updater
from tiny_runs import same_numbers, small

SMALL = ["train.iterations=1", *small(3, "log.save_every=1000", "log.eval_every=0", "method.options.steps_per_phase=2")]


def _trainer(tmp_path, *overrides):
    return Trainer(resolve_config("tiny-ltx2-av-grpo", [f"output_dir={tmp_path}", *SMALL, *overrides]))


def test_the_frozen_modality_is_the_anchor_at_every_step_in_every_member(tmp_path, one_thread):
    from flowrl.plan import ode_plan

    tr = _trainer(tmp_path)
    ctx = tr.context(0)
    batches, group_ids = tr.collect(0, ctx)
    method = tr.method
    assert method.phase == "video" and method.frozen == "audio"
    b = batches[0]
    audio = b.traj.states["audio"]  # (B, T+1, L, 128): every state kept (all transitions train)
    assert audio.shape[1] == len(b.traj.plan) + 1
    for g in torch.unique(b.traj.prompt_ids).tolist():
        rows = (b.traj.prompt_ids == g).nonzero().flatten()
        assert all(torch.equal(audio[rows[0]], audio[r]) for r in rows[1:])  # bitwise across the group
        assert not torch.equal(b.traj.states["video"][rows[0], -1], b.traj.states["video"][rows[1], -1])
    # and it is the deterministic joint anchor from the group's first member's noise
    noise = tr._initial_noise(0, tr.sampler.iteration(0))
    first = {m: t[:1] for m, t in noise.items()}
    cond = tr.adapter.encode_prompts(b.prompts[:1])
    anchor = ctx.rollout(ode_plan(ctx.sigmas()), first, cond, torch.zeros(1, dtype=torch.long), None)
    assert torch.equal(anchor.states["audio"][0], audio[0])
    # the trained modality's (video, a = 0.02) steps as the authors' code takes them (zhiyuxu03/AV-GRPO
    # ltx-trainer, spec "Corrections"): g = 0.02 sqrt(t / max(1 - t, 1e-5)), the std g sqrt(|dt|) capped at 0.5;
    # the first step (t = 1: g = 0.02 sqrt(1e5)) is capped to 0.5, not Flow-GRPO's sigma_1 substitute
    plan = b.traj.plan
    from flowrl.sde import flow_sde_g

    for j in range(len(plan)):
        s, s_next, a = float(plan.sigma[j]), float(plan.sigma_next[j]), float(plan.noise_levels[j])
        std = flow_sde_g(s, a, plan.sigma_at_one) * (s - s_next) ** 0.5  # what the step computes
        code = min(0.02 * (s / max(1 - s, 1e-5)) ** 0.5 * (s - s_next) ** 0.5, 0.5)
        assert std == pytest.approx(code, rel=1e-6) and std <= 0.5 * (1 + 1e-6)
    assert float(plan.sigma[0]) == 1.0 and flow_sde_g(1.0, float(plan.noise_levels[0]), plan.sigma_at_one) * (
        1 - float(plan.sigma_next[0])
    ) ** 0.5 == pytest.approx(0.5, rel=1e-6)


@pytest.mark.parametrize("phase", ["video", "audio"])
def test_a_phase_leaves_the_other_tower_and_its_cross_attention_bit_identical(tmp_path, one_thread, phase):
    overrides = [f"method.options.start={phase}", f"method.options.{phase}_rewards=[video]"]
    if phase == "audio":  # a reward the audio changes: the share of energy above 1 kHz (tiny, but it moves)
        overrides += [
            "reward={video: 1.0, band_energy: 1.0}",
            "method.options.audio_rewards=[band_energy]",
            "reward_args={video: {reward: jpeg_compressibility}, band_energy: {low_hz: 1000, high_hz: 12000}}",
        ]
    tr = _trainer(tmp_path, *overrides)
    before = {n: p.detach().clone() for n, p in tr.policy.trainable.items()}
    rows = tr.train()
    # the training forward sees the anchored partner the rollout saw: the first pass is on-policy to float
    # rounding (the ratio of later optimizer steps of the iteration moves: one step per sample and transition)
    assert rows[0]["policy/onpolicy_logp_diff"] <= 1e-6
    tower_of = tr.adapter.tower_of
    moved = {n for n, p in tr.policy.trainable.items() if not torch.equal(before[n], p)}
    frozen = {n for n in before if tower_of(n) not in PHASE_GROUPS[phase]}
    trained = set(before) - frozen
    assert frozen and not (moved & frozen), sorted(moved & frozen)[:3]
    cross = "video_to_audio" if phase == "video" else "audio_to_video"
    assert any(tower_of(n) == cross for n in frozen)
    assert moved == trained, sorted(trained - moved)[:3]


def test_phases_alternate_on_the_same_prompts_and_clear_the_optimizer(tmp_path, one_thread):
    tr = _trainer(tmp_path, "train.iterations=3")
    draws = []
    original = tr.sampler.iteration

    def record(k):
        draws.append(k)
        return original(k)

    tr.sampler.iteration = record
    opt = getattr(tr.policy.optimizer, "optimizer", tr.policy.optimizer)
    sizes = []
    original_update = tr.updater.run

    def update(*args, **kwargs):
        out = original_update(*args, **kwargs)
        sizes.append(len(opt.state))
        return out

    tr.updater.run = update
    rows = tr.train()
    assert [r["method/av/phase_video"] for r in rows] == [1.0, 1.0, 0.0]
    assert draws[:3] == [0, 1, 0]  # the audio phase revisits the video phase's first prompt draw
    assert sizes[0] > 0 and sizes[1] == 0  # after the second video step the phase switched: no moments kept
    state = tr.method.state_dict()["phases"]
    assert state["phase"] == "audio" and state["step_in_phase"] == 1 and state["cycle"] == 0
    # the phase travels in checkpoints: a resumed run picks it up
    again = Trainer(
        resolve_config("tiny-ltx2-av-grpo", [f"output_dir={tmp_path}", *SMALL, "train.iterations=4", "resume=latest"])
    )
    assert again.method.state_dict()["phases"] == state


def test_a_nan_advantage_drops_the_step_and_switches_the_phase():
    from flowrl.methods.av_grpo import AVGRPO

    method = AVGRPO(resolve_config("tiny-ltx2-av-grpo"))
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    fine = method.credit(RewardTable({"final": torch.arange(8.0), "final/video": torch.arange(8.0)}, groups)).values
    assert torch.allclose(fine[:4].mean(), torch.tensor(0.0), atol=1e-6)
    assert torch.allclose(fine[:4].std(), torch.tensor(1.0), atol=1e-5)
    assert method.phase == "video"
    bad = torch.arange(8.0)
    bad[2] = float("nan")
    adv = method.credit(RewardTable({"final": bad, "final/video": bad}, groups)).values
    assert torch.equal(adv, torch.zeros(8)) and method.phase == "audio"
    assert method.end().reset_optimizer is True  # the optimizer state goes with the switch
    state = method.state_dict()["phases"]
    assert state["cycle"] == 0 and state["step_in_phase"] == 0 and state["nan_switches"] == 1


def test_a_flat_group_keeps_its_rows_at_advantage_zero_and_a_nan_step_keeps_none():
    """The authors' trainer takes its optimizer step on every sample, so a prompt group whose rewards are all equal
    still trains at advantage 0: its loss is the KL term alone. Group 0's rewards 0, 1, 2, 3: population z-scores
    (x - 1.5) / sqrt(1.25), averaged over one metric and z-scored again with the sample std: (-1.5, -0.5, 0.5, 1.5)
    / sqrt(5/3) = (-1.162, -0.387, 0.387, 1.162); group 1's are all 5: advantage exactly 0, every row kept. A NaN
    drops the step: no row kept."""
    from flowrl.methods.av_grpo import AVGRPO

    method = AVGRPO(resolve_config("tiny-ltx2-av-grpo"))
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    rewards = torch.tensor([0.0, 1.0, 2.0, 3.0, 5.0, 5.0, 5.0, 5.0])
    out = method.credit(RewardTable({"final": rewards, "final/video": rewards}, groups))
    z = 1.5 / (5 / 3) ** 0.5, 0.5 / (5 / 3) ** 0.5
    assert out.values.tolist() == pytest.approx([-z[0], -z[1], z[1], z[0], 0.0, 0.0, 0.0, 0.0], abs=1e-6)
    assert out.keep.tolist() == [True] * 8
    bad = rewards.clone()
    bad[2] = float("nan")
    out = method.credit(RewardTable({"final": bad, "final/video": bad}, groups))
    assert out.keep.tolist() == [False] * 8 and method.phase == "audio"


def test_an_iteration_whose_groups_are_all_flat_takes_its_kl_only_steps(tmp_path, one_thread):
    """A video reward is flat in the audio phase (the video is pinned to the anchor): every advantage is 0, yet each
    (member, transition) still takes its optimizer step on the KL term, 4 members x 3 transitions = 12, as the
    authors' loop steps on every sample (flowrl dropped such rows before: 0 steps)."""
    tr = _trainer(tmp_path, "method.options.start=audio", "method.options.audio_rewards=[video]")
    rows = tr.train()
    assert rows[0]["method/av/phase_video"] == 0.0 and rows[0]["adv/abs_mean"] == 0.0
    assert rows[0]["cost/optimizer_steps"] == 12


def test_refusals_in_one_line():
    with pytest.raises(ConfigError, match="^method av_grpo trains audio_video media; model.pipeline=sd3 makes image$"):
        preflight(resolve_config("tiny-cpu", ["method.name=av_grpo"]))
    with pytest.raises(ConfigError, match="method.options.video_rewards: 'clap' is not a configured reward"):
        resolve_config("tiny-ltx2-av-grpo", ["method.options.video_rewards=[clap]"]) and preflight(
            resolve_config("tiny-ltx2-av-grpo", ["method.options.video_rewards=[clap]"])
        )
    with pytest.raises(ConfigError, match="method.options.start: 'both' is not one of video, audio"):
        preflight(resolve_config("tiny-ltx2-av-grpo", ["method.options.start=both"]))


def test_the_authors_dropped_frozen_modality_is_an_option_with_its_gap_logged(tmp_path, one_thread, caplog):
    """``frozen_input=dropped``: the training forward leaves the frozen modality out (no cross-modal attention),
    as the authors' code does; the first ratio is then not 1, the gap is logged and the run goes on."""
    import logging

    with caplog.at_level(logging.WARNING):
        tr = _trainer(tmp_path, "method.options.frozen_input=dropped")
    assert "frozen_input=dropped leaves the frozen modality out" in caplog.text
    rows = tr.train()
    assert rows[0]["policy/onpolicy_logp_diff"] > 1e-4  # the anchored default gives <= 1e-6
    with pytest.raises(ConfigError, match="method.options.frozen_input: 'none' is not one of anchor, dropped"):
        preflight(resolve_config("tiny-ltx2-av-grpo", ["method.options.frozen_input=none"]))


# ------------------------------------------------------------------------- as the authors' code runs it
# The rules below are the authors' code (zhiyuxu03/AV-GRPO, ltx-trainer trainer.py and validation_sampler.py), as
# measured in specs/addon_methods.md "Corrections, measured against the authors' own code".


def test_one_optimizer_step_per_sample_and_transition_sample_order_then_time_order(tmp_path, one_thread):
    """The code steps AdamW after every (sample, transition) backward: 4 members x 3 transitions = 12 steps
    here, member i of both groups at transition k in step (i, k), i then k, all at one learning rate."""
    tr = _trainer(tmp_path)
    assert tr.method.schedule(2) == [[(0, k, i), (1, k, i)] for i in range(4) for k in range(3)]
    assert tr.updater.total_optimizer_steps == 12
    passes, rates = [], []
    update_unit = tr.updater.unit

    def record(ctx, b, adv, transitions, *args):
        passes.append((len(b.traj), list(transitions), b.metadata[0]["group"]))
        return update_unit(ctx, b, adv, transitions, *args)

    tr.updater.unit = record
    opt = getattr(tr.policy.optimizer, "optimizer", tr.policy.optimizer)
    step = opt.step

    def stepping(*args, **kwargs):
        rates.append(opt.param_groups[0]["lr"])
        return step(*args, **kwargs)

    opt.step = stepping
    rows = tr.train()
    assert rows[0]["cost/optimizer_steps"] == 12 and len(rates) == 12
    assert passes == [(1, [k], g) for _ in range(4) for k in range(3) for g in (0, 1)]  # one row, one transition
    assert set(rates) == {tr.cfg.train.learning_rate} and rows[0]["policy/lr"] == pytest.approx(rates[0], rel=1e-12)
    # flowrl's grouping instead, as a named option: train.optimizer_steps_per_iteration steps over the batches
    other = _trainer(
        tmp_path / "other", "method.options.optimizer_steps=train", "train.optimizer_steps_per_iteration=1"
    )
    assert other.method.schedule(2) == [[TrainEntry(0), TrainEntry(1)]] and other.updater.total_optimizer_steps == 1


def test_the_first_av_grpo_step_runs_at_the_first_rate_then_the_schedule_per_av_grpo_step(tmp_path, one_thread):
    """The code: the first AV-GRPO step at the yaml's rate (1e-5), never 0; then 1e-6 with one warm-up step and a
    cosine to 0 over the run, counted in AV-GRPO steps; every optimizer step of one AV-GRPO step at its rate.
    flowrl's own cosine with one warm-up step counted in optimizer steps would start at 0."""
    tr = _trainer(
        tmp_path,
        "train.iterations=3",
        "train.lr_schedule=cosine",
        "train.lr_warmup_steps=1",
        "train.learning_rate=1e-3",
        "method.options.first_learning_rate=1e-2",
    )
    rows = tr.train()
    # AV-GRPO step n >= 1 of 3: 1e-3 * 0.5 (1 + cos(π (n - 1) / 2)): n = 1 -> 1e-3, n = 2 -> 0.5e-3
    assert [r["policy/lr"] for r in rows] == pytest.approx([1e-2, 1e-3, 0.5e-3], rel=1e-12)
    assert all(r["cost/optimizer_steps"] > 1 for r in rows)
    with pytest.raises(ConfigError, match="method.options.first_learning_rate: must be > 0"):
        preflight(resolve_config("tiny-ltx2-av-grpo", ["method.options.first_learning_rate=0"]))


def test_dropped_frozen_input_is_one_conditional_pass_without_cfg(tmp_path, one_thread):
    """The code's training forward: one conditional pass with the frozen modality left out, no CFG and no STG,
    although the rollouts ran with CFG (here 2.0)."""
    tr = _trainer(tmp_path, "method.options.frozen_input=dropped", "sample.guidance_scale=2.0")
    calls = []
    velocity = tr.adapter.velocity

    def record(x, sigma, inputs, guidance_scale, model=None, **options):
        calls.append((x["video"].shape[0], inputs["prompt_embeds"].shape[0], options))
        return velocity(x, sigma, inputs, guidance_scale, model=model, **options)

    batches, group_ids = tr.collect(0)
    scored = tr.scoring.score(batches)
    adv = tr.method.credit(RewardTable(scored.columns, group_ids)).values
    tr.adapter.velocity = record
    tr.updater.run(batches, adv, True, tr.context(0), trains=tr.method.begin(0).trains)
    assert calls and all(rows == inputs for rows, inputs, _ in calls)  # no CFG rows
    assert all(options == {"isolate_modalities": True, "unguided": True} for _, _, options in calls)


def test_the_shipped_tiny_recipe_trains_its_audio_phase(tmp_path, one_thread):
    """With the video pinned to the anchor a video reward is flat in the audio phase; the recipe's audio phase
    trains on a reward the audio moves, so its advantages are not 0 and the audio tower's LoRA moves."""
    tr = _trainer(tmp_path, "method.options.start=audio")
    before = {n: p.detach().clone() for n, p in tr.policy.trainable.items()}
    rows = tr.train()
    assert rows[0]["method/av/phase_video"] == 0.0 and rows[0]["adv/abs_mean"] > 0.5
    assert rows[0]["cost/optimizer_steps"] > 1
    moved = {n for n, p in tr.policy.trainable.items() if not torch.equal(before[n], p)}
    assert any(tr.adapter.tower_of(n) == "audio" for n in moved)
    assert not any(tr.adapter.tower_of(n) == "video" for n in moved)


@pytest.mark.parametrize("reward", ["av_sync", "desync"])
def test_a_promptless_sync_reward_alone_in_a_phase_is_refused_unless_allowed(reward):
    """A pure audio-video sync score never reads the prompt: a collapsed video can be in sync with its sound, so
    it is refused as a phase's only reward (one line), unless explicitly allowed; beside a reward that reads the
    prompt it is fine."""
    args = "{}" if reward == "av_sync" else "{checkpoint: /nonexistent.pth}"
    base = [
        f"reward={{video: 1.0, {reward}: 1.0}}",
        f"reward_args={{video: {{reward: jpeg_compressibility}}, {reward}: {args}}}",
    ]
    from flowrl.methods.av_grpo import AVGRPO

    with pytest.raises(
        ConfigError,
        match=rf"^method.options.audio_rewards: the audio phase's only rewards "
        rf"\['{reward}'\] are audio-video scores that never read the prompt",
    ):
        AVGRPO(resolve_config("tiny-ltx2-av-grpo", [*base, f"method.options.audio_rewards=[{reward}]"]))
    AVGRPO(
        resolve_config(
            "tiny-ltx2-av-grpo",
            [*base, f"method.options.audio_rewards=[{reward}]", "method.options.allow_promptless_phase_reward=true"],
        )
    )
    AVGRPO(resolve_config("tiny-ltx2-av-grpo", [*base, f"method.options.audio_rewards=[video, {reward}]"]))
    with pytest.raises(ConfigError, match=r"^reward: the video phase's only rewards"):
        AVGRPO(
            resolve_config(
                "tiny-ltx2-av-grpo",
                [
                    f"reward={{{reward}: 1.0}}",
                    f"reward_args={{{reward}: {args}}}",
                    "method.options.video_rewards=[]",
                    "method.options.audio_rewards=[]",
                ],
            )
        )


# ------------------------------------------------------------------------- processes, signals and resume
# one phase per iteration: video, then audio (on the video phase's prompts), then video again
RUN = [*SMALL, "method.options.steps_per_phase=1", "log.sample_every=1000"]
KEYS = [*COMPARED, "policy/lr", "cost/optimizer_steps"]
TORCHRUN = torchrun(29563)


def _cli(command: list[str], out: Path, *extra: str) -> list[dict]:
    return train_metrics([*command, "tiny-ltx2-av-grpo"], out, *RUN, "train.iterations=2", *extra)


@pytest.mark.slow
@needs_torchrun
@pytest.mark.parametrize("frozen_input", ["anchor", "dropped"])
def test_two_processes_give_one_process_metrics(tmp_path, frozen_input):
    """One prompt group per process: each per-(sample, transition) optimizer step joins one row of each process
    (DDP averages them as one process's mean over both), both phases, the same figures; the other tower, which
    the loss may not reach, joins DDP's backward with weight 0 and does not train."""
    option = f"method.options.frozen_input={frozen_input}"
    one = _cli([sys.executable, "-m", "flowrl", "train"], tmp_path / "one", option)
    two = _cli([*TORCHRUN, "-m", "flowrl", "train"], tmp_path / "two", option)
    assert len(one) == len(two) == 2 and [r["method/av/phase_video"] for r in one] == [1.0, 0.0]
    assert one[0]["cost/optimizer_steps"] == 12 and one[1]["adv/abs_mean"] > 0
    for a, b in zip(one, two):
        own = [k for k in a if k.startswith("method/")]
        assert {k: a[k] for k in own} == {k: b[k] for k in own}
        for key in KEYS:
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-9), (a["iteration"], key)


def _train_rows(run: Path, *extra: str) -> list[dict]:
    cfg = resolve_config(
        "tiny-ltx2-av-grpo", [f"output_dir={run}", *RUN, "train.iterations=3", "log.save_every=1", *extra]
    )
    Trainer(cfg).train()
    return [same_numbers(r) for r in read_metrics(run / "metrics.jsonl")]


@pytest.mark.slow
def test_sigterm_during_the_update_then_resume_repeats_the_run(
    tmp_path, one_thread, monkeypatch, signals_ignored_outside_training
):
    """A SIGTERM between two of the update's per-(sample, transition) optimizer steps: the iteration finishes and
    is saved (phase, AV-GRPO step count and optimizer state with it); resuming gives the uninterrupted run."""
    reference = _train_rows(tmp_path / "clean")
    assert [r["method/av/phase_video"] for r in reference] == [1.0, 0.0, 1.0]
    update, calls = Updater.unit, {"n": 0}

    def signalling_update(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # inside iteration 0's update
            os.kill(os.getpid(), signal.SIGTERM)
        return update(self, *args, **kwargs)

    monkeypatch.setattr(Updater, "unit", signalling_update)
    with pytest.raises(Interrupted, match=r"^interrupted \(SIGTERM\)"):
        _train_rows(tmp_path / "cut")
    monkeypatch.setattr(Updater, "unit", update)
    assert _train_rows(tmp_path / "cut", "resume=latest") == reference


def test_the_ltx2_recipe_carries_the_authors_settings():
    """ltx2-av-grpo: the code's weight decay (torch's 0.01), negative prompt, first-step rate (1e-5) then 1e-6
    cosine with one warm-up step, dropped training forward, per-(sample, transition) steps, noise 0.02 / 0.8."""
    from flowrl.credit.av_grpo import NEGATIVE_PROMPT
    from flowrl.methods.av_grpo import AVGRPO

    cfg = resolve_config("ltx2-av-grpo")
    t = cfg.train
    assert (t.weight_decay, t.learning_rate, t.lr_schedule, t.lr_warmup_steps, t.iterations) == (
        0.01,
        1e-6,
        "cosine",
        1,
        1440,
    )
    assert cfg.data.negative_prompt == NEGATIVE_PROMPT
    assert NEGATIVE_PROMPT == "worst quality, inconsistent motion, blurry, jittery, distorted"
    method = AVGRPO(cfg)
    o = method.options
    assert (o.noise_video, o.noise_audio, o.frozen_input, o.first_learning_rate) == (0.02, 0.8, "dropped", 1e-5)
    assert len(method.schedule(8)) == 8 * 15 and all(len(step) == 8 for step in method.schedule(8))
    assert method.learning_rate(0.0, 0) == 1e-5  # the first AV-GRPO step, whatever flowrl's schedule would say
    method.schedule_state.after_step()
    assert method.learning_rate(0.0, 120) == 1e-6
