"""The toy audio-video world: renders, the exact detector, the rewards, the prompt files, the CLI's refusals."""

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from flowrl.benchmarks.toy_av import world
from flowrl.benchmarks.toy_av.reward import ToyAVAccuracy, ToyAVAudio, ToyAVReward, ToyAVSync, ToyAVVideo
from flowrl.reward_models import RewardError, build_reward

PROMPTS = Path(__file__).resolve().parents[2] / "flowrl" / "prompts"
N = world.SAMPLES_PER_FRAME * world.FRAMES


def clip(row, onset, audio_onset=None, samples=N):
    video = world.render_video(row["color"], onset)
    audio = world.render_audio(row["pitch"], onset if audio_onset is None else audio_onset, samples)
    return video, audio


def media_of(pairs):
    return {
        "video": torch.from_numpy(np.stack([v for v, _ in pairs])),
        "fps": world.FPS,
        "audio": torch.from_numpy(np.stack([a for _, a in pairs])),
        "sample_rate": world.SAMPLE_RATE,
    }


def test_detector_is_exact_on_every_render():
    for row in world.all_rows():
        lo, hi = world.SLOTS[row["slot"]]
        for onset in range(lo, hi + 1):
            j = world.judge(*clip(row, onset), row)
            d = j.detection
            assert (d.video_onset, d.audio_onset, d.color, d.pitch) == (onset, onset, row["color"], row["pitch"])
            assert j.all_ok and (j.video_score, j.audio_score, j.sync_score) == (1.0, 1.0, 1.0)


def test_judge_sees_each_kind_of_mistake():
    row = world.row_of("red", "low", "middle")
    wrong_colour = world.judge(world.render_video("cyan", 8), world.render_audio("low", 8, N), row)
    assert not wrong_colour.video_ok and wrong_colour.audio_ok and wrong_colour.sync
    assert wrong_colour.video_score == 0.5  # slot right, colour wrong
    wrong_pitch = world.judge(world.render_video("red", 8), world.render_audio("high", 8, N), row)
    assert wrong_pitch.video_ok and not wrong_pitch.audio_ok and wrong_pitch.audio_score == 0.5
    late_beep = world.judge(*clip(row, 7, audio_onset=10), row)  # both in the slot, 3 frames apart
    assert late_beep.video_ok and late_beep.audio_ok and not late_beep.sync and not late_beep.all_ok
    assert late_beep.sync_score == pytest.approx(0.25)
    one_off = world.judge(*clip(row, 8, audio_onset=9), row)
    assert one_off.sync and one_off.sync_score == pytest.approx(0.75)
    outside = world.judge(*clip(row, 13), row)  # the late slot for a "middle" prompt: 3 frames out
    assert not outside.video_ok and outside.video_score == pytest.approx(0.5)
    silent = world.judge(world.render_video("red", 8), np.zeros((2, N), np.float32), row)
    assert not silent.detection.audio_present and silent.audio_score == 0.0 and not silent.sync
    dark = world.judge(
        np.zeros((world.FRAMES, 3, world.SIZE, world.SIZE), np.float32), world.render_audio("low", 8, N), row
    )
    assert not dark.detection.video_present and dark.video_score == 0.0 and dark.sync_score == 0.0


def test_slot_score_by_hand():
    assert world.slot_score(7, "middle") == world.slot_score(10, "middle") == 1.0
    assert world.slot_score(6, "middle") == pytest.approx(2 / 3)
    assert world.slot_score(12, "middle") == pytest.approx(1 / 3)
    assert world.slot_score(0, "late") == 0.0


def test_split_keeps_every_word_and_prompt_files_match():
    train, test = world.split_rows()
    assert len(train) == 42 and len(test) == 12 and not {r["prompt"] for r in train} & {r["prompt"] for r in test}
    for key, values in (("color", world.COLORS), ("pitch", world.PITCHES), ("slot", world.SLOTS)):
        assert {r[key] for r in train} == set(values)
    for name, rows in (("toy_av_train", train), ("toy_av_eval", test)):
        lines = (PROMPTS / f"{name}.jsonl").read_text().splitlines()
        assert [json.loads(line) for line in lines] == rows


def test_rewards_score_parts_and_details():
    rows = [world.row_of("red", "low", "early"), world.row_of("blue", "high", "late")]
    media = media_of([clip(rows[0], 3), clip(rows[1], 12, audio_onset=15)])
    out = {
        cls.name: cls()(media, [r["prompt"] for r in rows], rows)
        for cls in (ToyAVVideo, ToyAVAudio, ToyAVSync, ToyAVReward, ToyAVAccuracy)
    }
    assert out["toy_av_video"].scores.tolist() == [1.0, 1.0]
    assert out["toy_av_audio"].scores.tolist() == [1.0, 1.0]
    assert out["toy_av_sync"].scores.tolist() == pytest.approx([1.0, 0.25])
    assert out["toy_av"].scores.tolist() == pytest.approx([1.0, 2.25 / 3])
    assert out["toy_av_accuracy"].scores.tolist() == [1.0, 0.0]
    assert out["toy_av"].details["sync"].tolist() == [True, False]
    assert build_reward("toy_av_sync").name == "toy_av_sync"


def test_reward_refusals_are_one_line():
    row = world.row_of("red", "low", "early")
    media = media_of([clip(row, 3)])
    with pytest.raises(RewardError, match="part='both'; allowed"):
        ToyAVReward(part="both")
    with pytest.raises(RewardError, match="expects audio-video media"):
        ToyAVReward()(media["video"], [row["prompt"]], [row])
    with pytest.raises(RewardError, match="16000 Hz"):
        ToyAVReward()({**media, "sample_rate": 16000}, [row["prompt"]], [row])
    with pytest.raises(RewardError, match=r"sample 0: pitch='squeak'"):
        ToyAVReward()(media, [row["prompt"]], [{**row, "pitch": "squeak"}])
    with pytest.raises(RewardError, match="1 clips, 1 sound tracks, 2 metadata"):
        ToyAVReward()(media, [row["prompt"]] * 2, [row, row])


def test_renders_follow_the_spec():
    video = world.render_video("yellow", 4)
    assert video.shape == (world.FRAMES, 3, world.SIZE, world.SIZE)
    assert video[4, 0].max() == 1.0 and video[4, 2].max() == 0.0 and video[3].max() == 0.0
    assert video[5, 1].max() == pytest.approx(0.4) and video[6, 1].max() == pytest.approx(0.15)
    audio = world.render_audio("mid", 4, N)
    start = 4 * world.SAMPLES_PER_FRAME
    assert np.abs(audio[:, :start]).max() == 0.0 and np.abs(audio).max() <= world.BEEP_AMPLITUDE
    assert np.array_equal(audio[0], audio[1])
    # multiples of 100 Hz: every 240-sample vocoder frame starts at phase 0
    assert all(
        f % 100 == 0 and (world.SAMPLE_RATE // 100) % (world.SAMPLE_RATE // f) == 0 for f in world.PITCHES.values()
    )


def test_draw_onsets_stay_in_their_slots():
    rng = random.Random(0)
    clips = world.draw_clips(world.all_rows() * 4, rng)
    for c in clips:
        lo, hi = world.SLOTS[c.row["slot"]]
        assert lo <= c.onset <= hi


# ------------------------------------------------------------------------------------------ the model


@pytest.fixture(scope="module")
def toy_adapter():
    from flowrl.benchmarks.toy_av import pretrain

    torch.set_num_threads(1)
    return pretrain.adapter_for(pretrain.build_toy_av_pipeline(pretrain.ToyAVConfig()))


def test_codes_are_local_in_time(toy_adapter):
    from flowrl.benchmarks.toy_av.pretrain import Codes

    codes = Codes(toy_adapter)
    assert [codes.span(k) for k in range(3)] == [(0, 0), (1, 8), (9, 16)]
    row = world.row_of("red", "low", "early")
    z = codes([world.Clip(row, 2), world.Clip(row, 7), world.Clip(world.row_of("blue", "low", "early"), 2)])
    assert z["video"].shape == (3, 3, 128) and z["audio"].shape == (3, 53, 32)
    lit = z["video"].abs().sum(-1) > 0
    assert lit.tolist() == [[False, True, False], [False, True, True], [False, True, False]]  # frames 7-9 span two
    # the same onset offset in its latent frame gives the same code, whatever the clip's time
    assert torch.allclose(z["video"][0, 1] - z["video"][2, 1], codes.video_color[0] - codes.video_color[2], atol=1e-6)
    audio = z["audio"][0]
    onset_frame = round(2 / world.FPS * 25)
    assert audio[: onset_frame - 5].abs().max() < 0.1 * audio[onset_frame].abs().max()  # silence: about 0


@pytest.mark.slow
def test_pretrain_writes_a_pipeline_that_loads(tmp_path):
    from flowrl.benchmarks.toy_av import pretrain

    cfg = pretrain.ToyAVConfig(video_steps=2, audio_steps=1, steps=2, batch_size=4, video_batch=2, audio_batch=2)
    said = []
    folder = pretrain.pretrain(cfg, root=tmp_path, progress=said.append)
    assert folder.name == cfg.folder_name() and pretrain.cached_model(cfg, tmp_path) == folder
    info = pretrain.read_info(folder)
    assert {"decoders_clean", "decoders_noisy", "transformer_s"} <= set(info)
    adapter = pretrain.adapter_for(pretrain.load_pipeline(folder))
    assert adapter.latent_shapes == {"video": (3, 128), "audio": (53, 32)}
    assert pretrain.pretrain(cfg, root=tmp_path, progress=said.append) == folder and "reusing" in said[-1]
    with pytest.raises(FileNotFoundError, match="flowrl eval toy-av --pretrain"):
        pretrain.load_pipeline(tmp_path / "missing")


def test_recipes_resolve_and_share_the_budget():
    from flowrl.resolve import resolve_config

    flow, av = resolve_config("toy-av-flow-grpo"), resolve_config("toy-av-av-grpo")
    assert flow.model == av.model and flow.reward == av.reward and flow.sample == av.sample
    assert flow.train.iterations == av.train.iterations and av.method.name == "av_grpo"


def test_cli_refusals_are_one_line(capsys):
    from flowrl.benchmarks.toy_av.cli import main

    assert main(["--clips-per-prompt", "0"]) == 2
    assert "--clips-per-prompt: must be at least 1" in capsys.readouterr().err
    assert main(["--compare", "toy-av-flow-grpo"]) == 2
    assert "--compare trains" in capsys.readouterr().err
    assert main(["--model", "/nonexistent/toy"]) == 2
    assert "flowrl eval toy-av --pretrain" in capsys.readouterr().err
