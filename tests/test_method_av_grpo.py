"""AV-GRPO on the tiny LTX-2 (``tiny-ltx2-av-grpo``): the spec's oracles through the real trainer and adapter.

The frozen modality is the anchor's at every step in every group member; a video phase leaves every audio-tower
parameter and the video-to-audio cross-attention bit-identical (and the mirror case); the first ratio is exactly
1; the phases alternate on the same prompts with the optimizer state cleared at each switch; a NaN advantage
drops the step and switches at once; the phase travels in checkpoints; single-tensor pipelines are refused."""

import pytest
import torch

from flowrl.config import ConfigError, resolve_config
from flowrl.methods.av_grpo import PHASE_GROUPS
from flowrl.trainer import Trainer, preflight

SMALL = ["train.iterations=1", "sample.num_steps=3", "sample.group_size=4", "sample.prompts_per_iteration=2",
         "sample.batch_size=4", "log.save_every=1000", "log.eval_every=0", "method.options.steps_per_phase=2"]


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
    # the trained modality's steps: std capped at 0.5 where Flow-GRPO's g sqrt(|dt|) exceeds it
    plan = b.traj.plan
    from flowrl.sde import flow_sde_g

    for j in range(len(plan)):
        s, s_next, a = float(plan.sigma[j]), float(plan.sigma_next[j]), float(plan.noise_levels[j])
        std = flow_sde_g(s, a, plan.sigma_at_one) * (s - s_next) ** 0.5
        assert std <= 0.5 * (1 + 1e-6)
        if a < 0.8:
            assert std == pytest.approx(0.5, rel=1e-6)


@pytest.mark.parametrize("phase", ["video", "audio"])
def test_a_phase_leaves_the_other_tower_and_its_cross_attention_bit_identical(tmp_path, one_thread, phase):
    overrides = [f"method.options.start={phase}", f"method.options.{phase}_rewards=[video]"]
    if phase == "audio":  # a reward the audio changes: the share of energy above 1 kHz (tiny, but it moves)
        overrides += ["reward={video: 1.0, band_energy: 1.0}", "method.options.audio_rewards=[band_energy]",
                      "reward_args={video: {reward: jpeg_compressibility}, band_energy: {low_hz: 1000, high_hz: 12000}}"]
    tr = _trainer(tmp_path, *overrides)
    before = {n: p.detach().clone() for n, p in tr.trainable.items()}
    rows = tr.train()
    # the training forward sees the anchored partner the rollout saw: the first ratio is 1 to float rounding
    assert rows[0]["policy/onpolicy_logp_diff"] <= 1e-6 and rows[0]["policy/ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    tower_of = tr.adapter.tower_of
    moved = {n for n, p in tr.trainable.items() if not torch.equal(before[n], p)}
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
    opt = getattr(tr.optimizer, "optimizer", tr.optimizer)
    sizes = []
    original_update = tr.update

    def update(*args, **kwargs):
        out = original_update(*args, **kwargs)
        sizes.append(len(opt.state))
        return out

    tr.update = update
    rows = tr.train()
    assert [r["method/av/phase_video"] for r in rows] == [1.0, 1.0, 0.0]
    assert draws[:3] == [0, 1, 0]  # the audio phase revisits the video phase's first prompt draw
    assert sizes[0] > 0 and sizes[1] == 0  # after the second video step the phase switched: no moments kept
    state = tr.method.state_dict()["phases"]
    assert state["phase"] == "audio" and state["step_in_phase"] == 1 and state["cycle"] == 0
    # the phase travels in checkpoints: a resumed run picks it up
    again = Trainer(resolve_config("tiny-ltx2-av-grpo", [f"output_dir={tmp_path}", *SMALL, "train.iterations=4",
                                                          "resume=latest"]))
    assert again.method.state_dict()["phases"] == state


def test_a_nan_advantage_drops_the_step_and_switches_the_phase():
    from flowrl.methods.av_grpo import AVGRPO

    method = AVGRPO(resolve_config("tiny-ltx2-av-grpo"))
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    fine = method.credit({"final": torch.arange(8.0), "final/video": torch.arange(8.0)}, groups)
    assert torch.allclose(fine[:4].mean(), torch.tensor(0.0), atol=1e-6)
    assert torch.allclose(fine[:4].std(), torch.tensor(1.0), atol=1e-5)
    assert method.phase == "video"
    bad = torch.arange(8.0)
    bad[2] = float("nan")
    adv = method.credit({"final": bad, "final/video": bad}, groups)
    assert torch.equal(adv, torch.zeros(8)) and method.phase == "audio"
    assert method.after_update() is True  # the optimizer state goes with the switch
    state = method.state_dict()["phases"]
    assert state["cycle"] == 0 and state["step_in_phase"] == 0 and state["nan_switches"] == 1


def test_refusals_in_one_line():
    with pytest.raises(ConfigError, match="^method av_grpo trains audio_video media; model.pipeline=sd3 makes image$"):
        preflight(resolve_config("tiny-cpu", ["method.name=av_grpo"]))
    with pytest.raises(ConfigError, match="method.options.video_rewards: 'clap' is not a configured reward"):
        resolve_config("tiny-ltx2-av-grpo", ["method.options.video_rewards=[clap]"]) and preflight(
            resolve_config("tiny-ltx2-av-grpo", ["method.options.video_rewards=[clap]"]))
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
