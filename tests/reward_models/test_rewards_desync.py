"""The ``desync`` reward (reward_models/desync.py): Synchformer's offset classifier on tiny random stand-ins
of its real architecture, with the real preprocessing. Hand-checked: the offset grid, the reward of a head
that predicts 0 s / +1.0 s, the first-and-last window rule, the segment / window arithmetic; checked against
the reference: the state-dict names of ``synchformer_state_dict.pth`` (as v-iashin/Synchformer's modules name
them), the AST part against transformers' ``ASTModel``, the mel front end and the resampler against numbers
computed once with torchaudio 2.11.1 (not a dependency)."""

import math
import re

import pytest
import torch

from flowrl.reward_models import RewardError, build_reward, check_reward_args, list_rewards
from flowrl.reward_models import desync as ds
from flowrl.reward_models.conformance import run_conformance
from flowrl.reward_models.desync import DeSyncReward, Synchformer, SynchformerConfig

pytestmark = pytest.mark.usefixtures("one_thread")  # toy-sized ops: a second thread mostly waits

TINY = {
    "image_size": 32,
    "video_dim": 16,
    "video_depth": 1,
    "video_heads": 2,
    "audio_dim": 16,
    "audio_depth": 1,
    "audio_heads": 2,
    "audio_ffn": 32,
    "dim": 16,
    "depth": 1,
    "heads": 2,
}


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return Synchformer(TINY).eval()


def _media(batch=2, seconds=5.0, fps=24.0, rate=48000, channels=2, size=(40, 56), seed=0):
    gen = torch.Generator().manual_seed(seed)
    frames = round(seconds * fps)
    video = torch.rand(batch, frames, 3, *size, generator=gen)
    audio = torch.rand(batch, channels, round(seconds * rate), generator=gen) * 2 - 1
    return {"video": video, "audio": audio, "fps": fps, "sample_rate": rate}


def _call(reward, media):
    batch = len(media["video"])
    return reward(media, [""] * batch, [{} for _ in range(batch)])


def _head(model, cls):
    """A copy of ``model`` whose offset head puts (almost) all the mass on class ``cls``."""
    clone = Synchformer(TINY)
    clone.load_state_dict(model.state_dict())
    with torch.no_grad():
        clone.transformer.off_head.weight.zero_()
        clone.transformer.off_head.bias.fill_(-30.0)
        clone.transformer.off_head.bias[cls] = 30.0
    return clone.eval()


# ---------------------------------------------------------------------------------------- contract
def test_registered_with_its_contract(tiny):
    assert "desync" in list_rewards()
    check_reward_args("desync", {"checkpoint": "x.pth", "score": "prob_zero", "windows": "all"})
    with pytest.raises(RewardError, match=r"reward_args\.desync\.score: desync's score must be one of"):
        check_reward_args("desync", {"score": "desync"})
    reward = DeSyncReward.from_components(tiny, device="cpu")
    assert reward.modality == "audio_video" and reward.score_range == (-2.0, 0.0)
    assert DeSyncReward.from_components(tiny, score="prob_zero", device="cpu").score_range == (0.0, 1.0)


def test_preprocessing_constants_are_synchformers():
    # MMAudio eval_utils (_SYNC_FPS, _SYNC_SIZE, Normalize 0.5), av-benchmark / JavisBench (segments, mel, AST stats)
    assert (ds.SYNC_FPS, ds.SYNC_RATE, ds.SYNC_SIZE) == (25.0, 16000, 224)
    assert (ds.VIDEO_MEAN, ds.VIDEO_STD) == (0.5, 0.5)
    assert (ds.SEGMENT_FRAMES, ds.SEGMENT_FRAME_STEP, ds.SEGMENT_SAMPLES, ds.SEGMENT_SAMPLE_STEP) == (
        16,
        8,
        10240,
        5120,
    )
    assert ds.SEGMENT_FRAMES / ds.SYNC_FPS == ds.SEGMENT_SAMPLES / ds.SYNC_RATE == 0.64  # both 0.64 s, hop 0.32 s
    assert (ds.MEL_N_FFT, ds.MEL_WIN, ds.MEL_HOP, ds.MEL_BINS, ds.SPEC_FRAMES) == (1024, 400, 160, 128, 66)
    assert (ds.AST_MEAN, ds.AST_STD, ds.LOG_EPS) == (-4.2677393, 4.5689974, 1e-6)
    assert ds.WINDOW_SEGMENTS == 14
    assert (ds.WINDOW_SEGMENTS - 1) * 0.32 + 0.64 == pytest.approx(4.8)  # a window is 4.8 s
    cfg = SynchformerConfig()
    assert (cfg.time_tokens, cfg.freq_tokens, cfg.audio_time_tokens, cfg.sequence) == (8, 12, 6, 198)
    assert ds.CHECKPOINT_URL.endswith("/MMAudio/releases/download/v0.1/synchformer_state_dict.pth")


def test_offset_grid_has_21_classes_from_minus_2_to_2_s_in_steps_of_0_2():
    grid = ds.OFFSET_GRID
    assert grid.shape == (21,) and grid.dtype == torch.float32
    assert grid[0] == -2.0 and grid[-1] == 2.0 and grid[ds.ZERO_CLASS] == 0.0 and ds.ZERO_CLASS == 10
    assert grid[15] == 1.0 and grid[5] == -1.0
    assert torch.allclose(grid[1:] - grid[:-1], torch.full((20,), 0.2), atol=1e-6)


# ------------------------------------------------------------------------------------ preprocessing
def test_mel_front_end_matches_torchaudio():
    # values computed once with torchaudio 2.11.1's MelSpectrogram(16000, n_fft 1024, win 400, hop 160, 128 mels)
    fb = ds.mel_filterbank()
    assert fb.shape == (513, 128)
    assert fb[1, 0].item() == pytest.approx(0.8710208535, abs=1e-6)
    assert fb[2, 1].item() == pytest.approx(0.7660064697, abs=1e-6)
    assert fb[55, 40].item() == pytest.approx(0.9984523654, abs=1e-6)
    assert fb[501, 127].item() == pytest.approx(0.9783707261, abs=1e-6)
    assert fb.sum().item() == pytest.approx(506.1060485839844, abs=1e-3)
    assert [int((fb[:, m] > 0).sum()) for m in (0, 1, 40, 127)] == [1, 2, 3, 21]
    tone = torch.sin(2 * math.pi * 440 * torch.arange(10240) / 16000) * 0.5
    mel = ds.log_mel(tone[None])[0]
    assert mel.shape == (128, 66)  # 65 frames (centred STFT) padded to 66 with log-mel 0
    expected = {(0, 0): 0.83652, (20, 10): 0.54347, (20, 64): 1.13701, (100, 30): -1.02197, (5, 65): 0.46703}
    for (i, j), value in expected.items():
        assert mel[i, j].item() == pytest.approx(value, abs=1e-4)
    assert mel[:, 65].unique().tolist() == pytest.approx([(0 - ds.AST_MEAN) / (2 * ds.AST_STD)])  # the padding
    assert int(mel[:, 30].argmax()) == 24


@pytest.mark.parametrize(
    "rate,first,last",
    [
        (48000, [0.085272, 0.235083, 0.280252, 0.37051, 0.499697, 0.554195], [-0.552107, -0.429003, -0.142323]),
        (24000, [0.089382, 0.184732, 0.227873, 0.259232, 0.282718, 0.317793], [-0.296311, -0.155644, -0.008763]),
    ],
)
def test_resampling_matches_torchaudio(rate, first, last):
    # 10 ms of samples of a 1 kHz + 3 kHz mix written at 48 kHz, read at ``rate``;
    # torchaudio.functional.resample(x, rate, 16000) gave these (torchaudio 2.11.1)
    t = torch.arange(480, dtype=torch.float32) / 48000
    x = (torch.sin(2 * math.pi * 1000 * t) * 0.5 + 0.1 * torch.cos(2 * math.pi * 3000 * t))[: rate // 100]
    y = ds.sinc_resample(x, rate, 16000)
    assert y.shape == (160,)
    assert y[:6].tolist() == pytest.approx(first, abs=2e-6) and y[-3:].tolist() == pytest.approx(last, abs=2e-6)
    assert ds.sinc_resample(x, rate, rate) is x
    stereo = torch.stack([x, -x])[None]  # (1, 2, N): every leading axis is kept
    assert torch.allclose(ds.sinc_resample(stereo, rate, 16000)[0, 1], -y, atol=1e-6)
    assert ds.sinc_resample(torch.zeros(4801), 24000, 16000).shape == (3201,)  # ceil(N * 2 / 3)


def test_frames_are_picked_at_25_fps_from_the_nearest_source_frame():
    assert ds.frame_indices(50, 25.0).tolist() == list(range(50))
    assert ds.frame_indices(20, 50.0).tolist() == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]  # 0.4 s -> 10 frames
    # 24 fps: output k at k/25 s is source k * 24/25 rounded: 0, 1, 2, ..., 12 -> 11.52 -> 12, 13 -> 12.48 -> 12
    got = ds.frame_indices(24, 24.0).tolist()
    assert len(got) == 25 and got[:13] == list(range(13)) and got[13] == 12 and got[-1] == 23
    assert ds.frame_indices(97, 24.0, seconds=4.0).shape == (100,)


def test_frames_are_resized_centre_cropped_and_normalised():
    frames = torch.zeros(2, 3, 48, 64)
    frames[0] = 1.0  # white
    frames[1, :, :, :32] = 0.5  # left half grey, right half black
    out = ds.prepare_frames(frames, 32)  # shorter side 48 -> 32 (long side 42), centre crop 32 x 32
    assert out.shape == (2, 3, 32, 32)
    assert torch.all(out[0] == 1.0)  # (1 - 0.5) / 0.5
    grey = (round(0.5 * 255) / 255 - 0.5) / 0.5  # uint8 rounding first, as a decoded video
    assert out[1, :, :, 0].unique().tolist() == pytest.approx([grey], abs=1e-6) and torch.all(out[1, :, :, -1] == -1.0)


def test_segments_and_windows_by_hand():
    assert ds.segment_count(120, 76800) == 14  # 4.8 s: exactly one window
    assert ds.segment_count(200, 128000) == 24  # 8 s
    assert ds.segment_count(200, 76800) == 14  # the shorter stream decides
    assert ds.segment_count(15, 76800) == 0 and ds.segment_count(16, 10240) == 1
    win = ds.window_indices
    assert win(20, "first_last") == [list(range(14)), list(range(6, 20))]  # av-benchmark's [:14] and [-14:]
    assert win(14, "first_last") == [list(range(14))] * 2  # a 4.8 s clip: the same window twice
    assert win(30, "all") == [list(range(14)), list(range(14, 28)), list(range(16, 30))]  # JavisBench
    assert win(28, "all") == [list(range(14)), list(range(14, 28))]
    assert win(11, "first_last") == win(11, "all") == [list(range(11)) + [0, 1, 2]]  # padded by repetition
    with pytest.raises(RewardError, match="at least one segment"):
        win(0)


# ------------------------------------------------------------------------------------ the tiny model
def test_tiny_stand_in_scores_a_batch(tiny):
    reward = DeSyncReward.from_components(tiny, device="cpu")
    out = _call(reward, _media(batch=2, seconds=5.0))  # 5 s at 24 fps / 48 kHz stereo -> 25 fps / 16 kHz mono
    assert out.scores.shape == (2,) and out.scores.dtype == torch.float32 and torch.isfinite(out.scores).all()
    assert torch.all((out.scores >= -2.0) & (out.scores <= 0.0))
    assert out.details["windows"].tolist() == [2, 2]
    assert torch.equal(out.scores, -out.details["desync"])
    assert torch.all((out.details["prob_zero"] > 0) & (out.details["prob_zero"] < 1))
    # every DeSync is a mean of two |grid| values: a multiple of 0.1
    assert torch.allclose(out.details["desync"] * 10, (out.details["desync"] * 10).round(), atol=1e-5)
    prob = _call(DeSyncReward.from_components(tiny, score="prob_zero", device="cpu"), _media(batch=2, seconds=5.0))
    assert torch.equal(prob.scores, out.details["prob_zero"])


def test_clip_inputs_shapes(tiny):
    reward = DeSyncReward.from_components(tiny, device="cpu")
    media = _media(batch=1, seconds=5.0)
    video, mels = reward.clip_inputs(media["video"][0], media["audio"][0], 24.0, 48000)
    # 5 s -> 125 frames at 25 fps -> (125 - 16) // 8 + 1 = 14 segments; 80000 samples -> 14 segments
    assert video.shape == (14, 16, 3, 32, 32) and mels.shape == (14, 128, 66)
    capped = DeSyncReward.from_components(tiny, max_seconds=2.0, device="cpu")
    video, mels = capped.clip_inputs(media["video"][0], media["audio"][0], 24.0, 48000)
    assert video.shape[0] == mels.shape[0] == 5  # 50 frames -> 5 segments


def test_a_head_on_zero_offset_gives_exactly_0_and_on_plus_1_s_gives_minus_1(tiny):
    media = _media(batch=2, seconds=6.0)
    zero = _call(DeSyncReward.from_components(_head(tiny, 10), device="cpu"), media)
    assert zero.scores.tolist() == [0.0, 0.0] and zero.details["desync"].tolist() == [0.0, 0.0]
    assert zero.details["prob_zero"].tolist() == pytest.approx([1.0, 1.0])
    plus_one = _call(DeSyncReward.from_components(_head(tiny, 15), device="cpu"), media)
    assert plus_one.scores.tolist() == [-1.0, -1.0]
    assert plus_one.details["prob_zero"].tolist() == pytest.approx([0.0, 0.0], abs=1e-12)
    minus_two = _call(DeSyncReward.from_components(_head(tiny, 0), device="cpu"), media)
    assert minus_two.scores.tolist() == [-2.0, -2.0]  # |-2 s|: the sign does not matter
    prob = _call(DeSyncReward.from_components(_head(tiny, 10), score="prob_zero", device="cpu"), media)
    assert prob.scores.tolist() == pytest.approx([1.0, 1.0])


def test_first_and_last_windows_are_averaged(tiny, monkeypatch):
    reward = DeSyncReward.from_components(tiny, device="cpu")
    media = _media(batch=1, seconds=7.0, fps=25.0, rate=16000)  # 175 frames -> 20 segments
    seen = []

    def compare(video, audio):  # window 0: class 15 (+1.0 s); window 1: class 6 (-0.8 s)
        seen.append((video.clone(), audio.clone()))
        logits = torch.full((len(video), 21), -5.0)
        for row, cls in enumerate([15, 6][: len(video)]):
            logits[row, cls] = 5.0
        return logits

    monkeypatch.setattr(reward.model, "compare", compare)
    out = _call(reward, media)
    assert out.scores.tolist() == pytest.approx([-(1.0 + 0.8) / 2])  # mean |offset| = 0.9 s
    assert out.details["windows"].tolist() == [2]
    vf, af = reward.features(*reward.clip_inputs(media["video"][0], media["audio"][0], 25.0, 16000))
    assert len(vf) == 20
    video, audio = seen[0]
    assert video.shape == (2, 14, 8, 16) and audio.shape == (2, 14, 6, 16)
    assert torch.allclose(video[0], vf[:14]) and torch.allclose(video[1], vf[6:])  # first and last 14 segments
    assert torch.allclose(audio[0], af[:14]) and torch.allclose(audio[1], af[6:])
    monkeypatch.setattr(reward, "windows", "all")
    seen.clear()
    assert _call(reward, media).details["windows"].tolist() == [2]


def test_short_clips_are_padded_by_repetition_and_too_short_ones_refused(tiny):
    reward = DeSyncReward.from_components(tiny, device="cpu")
    out = _call(reward, _media(batch=1, seconds=3.0))  # 11 segments: one window, segments 0..10, 0, 1, 2
    assert out.details["windows"].tolist() == [1] and torch.isfinite(out.scores).all()
    with pytest.raises(RewardError, match=r"^desync: a clip of 0\.50 s is shorter than one Synchformer segment") as err:
        _call(reward, _media(batch=1, seconds=0.5))
    assert "\n" not in str(err.value)


def test_the_audio_is_cut_to_the_video(tiny):
    reward = DeSyncReward.from_components(tiny, device="cpu")
    media = _media(batch=1, seconds=5.0, fps=25.0, rate=16000)
    longer = dict(media, audio=torch.cat([media["audio"], torch.rand(1, 2, 16000)], dim=-1))
    assert torch.equal(_call(reward, media).details["prob_zero"], _call(reward, longer).details["prob_zero"])


def test_passes_the_conformance_checks(tiny):
    report = run_conformance(DeSyncReward.from_components(tiny, device="cpu"), "desync", batch=2)
    assert all(check.ok for check in report.checks), report.checks


# ------------------------------------------------------------------------- against the real model's names
# Names of synchformer_state_dict.pth as the modules of v-iashin/Synchformer (model/sync_model.py,
# model/modules/transformer.py, feat_extractors/visual/motionformer.py + motionformer_src, audio/ast.py +
# hf_src/modeling_ast.py) and av-benchmark's Synchformer() build them, with the shapes of the released sizes.
REAL_NAMES = {
    "vfeat_extractor.patch_embed.proj.weight": (768, 3, 16, 16),
    "vfeat_extractor.patch_embed_3d.proj.weight": (768, 3, 2, 16, 16),
    "vfeat_extractor.patch_embed_3d.proj.bias": (768,),
    "vfeat_extractor.cls_token": (1, 1, 768),
    "vfeat_extractor.pos_embed": (1, 197, 768),
    "vfeat_extractor.temp_embed": (1, 8, 768),
    "vfeat_extractor.blocks.0.norm1.weight": (768,),
    "vfeat_extractor.blocks.0.norm3.bias": (768,),
    "vfeat_extractor.blocks.0.attn.qkv.weight": (2304, 768),
    "vfeat_extractor.blocks.0.attn.qkv.bias": (2304,),
    "vfeat_extractor.blocks.0.timeattn.proj.weight": (768, 768),
    "vfeat_extractor.blocks.11.mlp.fc1.weight": (3072, 768),
    "vfeat_extractor.blocks.11.mlp.fc2.bias": (768,),
    "vfeat_extractor.norm.weight": (768,),
    "vfeat_extractor.spatial_attn_agg.cls_token": (1, 1, 768),
    "vfeat_extractor.spatial_attn_agg.self_attn.in_proj_weight": (2304, 768),
    "vfeat_extractor.spatial_attn_agg.self_attn.out_proj.bias": (768,),
    "vfeat_extractor.spatial_attn_agg.linear1.weight": (3072, 768),
    "vfeat_extractor.spatial_attn_agg.norm2.weight": (768,),
    "afeat_extractor.ast.embeddings.cls_token": (1, 1, 768),
    "afeat_extractor.ast.embeddings.distillation_token": (1, 1, 768),
    "afeat_extractor.ast.embeddings.position_embeddings": (1, 74, 768),
    "afeat_extractor.ast.embeddings.patch_embeddings.projection.weight": (768, 1, 16, 16),
    "afeat_extractor.ast.encoder.layer.0.attention.attention.query.weight": (768, 768),
    "afeat_extractor.ast.encoder.layer.0.attention.output.dense.bias": (768,),
    "afeat_extractor.ast.encoder.layer.11.intermediate.dense.weight": (3072, 768),
    "afeat_extractor.ast.encoder.layer.11.output.dense.weight": (768, 3072),
    "afeat_extractor.ast.encoder.layer.0.layernorm_before.weight": (768,),
    "afeat_extractor.ast.encoder.layer.0.layernorm_after.bias": (768,),
    "afeat_extractor.ast.layernorm.weight": (768,),
    "afeat_extractor.freq_attn_agg.cls_token": (1, 1, 768),
    "afeat_extractor.freq_attn_agg.self_attn.in_proj_bias": (2304,),
    "afeat_extractor.freq_attn_agg.linear2.weight": (768, 3072),
    "vproj.weight": (768, 768),
    "aproj.bias": (768,),
    "transformer.vis_in_lnorm.weight": (768,),
    "transformer.aud_in_lnorm.bias": (768,),
    "transformer.OFF_tok": (1, 1, 768),
    "transformer.MOD_tok": (1, 1, 768),
    "transformer.pos_emb_cfg.pos_emb": (1, 198, 768),
    "transformer.blocks.0.ln1.weight": (768,),
    "transformer.blocks.2.attn.query.weight": (768, 768),
    "transformer.blocks.0.attn.proj.bias": (768,),
    "transformer.blocks.0.mlp.0.weight": (3072, 768),
    "transformer.blocks.0.mlp.2.weight": (768, 3072),
    "transformer.ln_f.weight": (768,),
    "transformer.off_head.weight": (21, 768),
    "transformer.off_head.bias": (21,),
}


def _pattern(name: str) -> str:
    return re.sub(r"\.\d+\.", ".N.", name)


def test_the_released_sizes_build_the_real_names_and_shapes():
    with torch.device("meta"):  # no memory: shapes only
        state = Synchformer().state_dict()
    for name, shape in REAL_NAMES.items():
        assert name in state, name
        assert tuple(state[name].shape) == shape, name
    assert {k.split(".")[0] for k in state} == {"vfeat_extractor", "afeat_extractor", "vproj", "aproj", "transformer"}
    assert not [k for k in state if ".head" in k or "classifier" in k or "pre_logits" in k]  # features only
    assert sum(1 for k in state if re.fullmatch(r"vfeat_extractor\.blocks\.\d+\.norm1\.weight", k)) == 12
    assert sum(1 for k in state if re.fullmatch(r"transformer\.blocks\.\d+\.ln1\.weight", k)) == 3


def test_the_released_sizes_run_on_the_meta_device():
    """Shapes only (no memory, no time): 20 segments of 224 px frames and 66-frame mels, two windows."""
    with torch.device("meta"):
        model = Synchformer().eval()
        video = model.video_features(torch.empty(20, 16, 3, 224, 224))
        audio = model.audio_features(torch.empty(20, 128, 66))
        index = torch.tensor(ds.window_indices(20))
        assert video.shape == (20, 8, 768) and audio.shape == (20, 6, 768)
        assert model.compare(video[index], audio[index]).shape == (2, 21)  # 1 + 112 + 1 + 84 = 198 tokens


def test_the_tiny_stand_in_has_the_real_names(tiny):
    tiny_names = {_pattern(k) for k in tiny.state_dict()}
    with torch.device("meta"):
        real_names = {_pattern(k) for k in Synchformer().state_dict()}
    assert tiny_names == real_names
    assert {_pattern(k) for k in REAL_NAMES} <= tiny_names


@pytest.mark.parametrize("wrap", ["plain", "module_prefix", "model_key"])
def test_checkpoint_round_trip(tiny, tmp_path, wrap):
    state = tiny.state_dict()
    if wrap == "module_prefix":
        state = {f"module.{k}": v for k, v in state.items()}
    elif wrap == "model_key":
        state = {"model": state}
    path = tmp_path / "synchformer_state_dict.pth"
    torch.save(state, path)
    loaded = DeSyncReward(checkpoint=str(path), config=TINY, device="cpu")
    media = _media(batch=2, seconds=5.0)
    assert torch.equal(
        _call(loaded, media).details["prob_zero"],
        _call(DeSyncReward.from_components(tiny, device="cpu"), media).details["prob_zero"],
    )


def test_a_checkpoint_that_does_not_fit_is_one_line(tiny, tmp_path):
    state = dict(tiny.state_dict())
    del state["transformer.off_head.bias"]
    path = tmp_path / "broken.pth"
    torch.save(state, path)
    with pytest.raises(RewardError, match=r"^desync: the Synchformer weights do not fit the model: missing 1") as err:
        DeSyncReward(checkpoint=str(path), config=TINY, device="cpu")
    assert "\n" not in str(err.value)
    with pytest.raises(RewardError, match="do not fit"):  # the tiny weights into the released sizes
        torch.save(tiny.state_dict(), path)
        DeSyncReward(checkpoint=str(path), config=dict(TINY, dim=32), device="cpu")


def test_missing_checkpoint_is_one_line_naming_the_argument_and_the_release():
    for kwargs, pattern in [
        ({}, r"^desync: needs checkpoint=PATH to synchformer_state_dict\.pth"),
        ({"checkpoint": "/nowhere/synchformer_state_dict.pth"}, r"^desync: checkpoint '/nowhere/"),
    ]:
        with pytest.raises(RewardError, match=pattern) as err:
            DeSyncReward(**kwargs)
        assert "\n" not in str(err.value) and ds.CHECKPOINT_URL in str(err.value)
    with pytest.raises(RewardError, match="needs checkpoint=PATH"):
        build_reward("desync")


def test_ast_part_matches_transformers_ast(tiny):
    """The audio encoder with the names of transformers 4 (the checkpoint's) equals transformers' own ASTModel
    (whose parameters transformers 5 renames: mapped here)."""
    from transformers import ASTConfig, ASTModel

    ref = ASTModel(
        ASTConfig(
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_length=66,
            num_mel_bins=128,
        )
    ).eval()
    renames = [
        (r"^encoder\.layer\.", "layers."),
        (r"attention\.attention\.query", "attention.q_proj"),
        (r"attention\.attention\.key", "attention.k_proj"),
        (r"attention\.attention\.value", "attention.v_proj"),
        (r"attention\.output\.dense", "attention.o_proj"),
        (r"intermediate\.dense", "mlp.fc1"),
        (r"\.output\.dense", ".mlp.fc2"),
    ]
    state = {}
    for key, value in tiny.afeat_extractor.ast.state_dict().items():
        for old, new in renames:
            key = re.sub(old, new, key)
        state[key] = value
    ref.load_state_dict(state, strict=True)
    spec = torch.randn(3, 66, 128, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(ref(spec).last_hidden_state, tiny.afeat_extractor.ast(spec), atol=1e-5)


def test_divided_attention_equals_a_loop_over_groups():
    """Motionformer's divided attention, vectorised, against one loop per frame / per patch position."""
    torch.manual_seed(2)
    attn = ds._DividedAttention(8, 2).eval()
    frames, patches = 3, 4
    x = torch.randn(2, 1 + frames * patches, 8)
    q, k, v = attn.qkv(x).chunk(3, dim=-1)

    def heads(t):  # (2, L, 8) -> (2, 2, L, 4)
        return t.reshape(2, -1, 2, 4).transpose(1, 2)

    def attend(qq, kk, vv):
        return torch.softmax(qq @ kk.transpose(-1, -2) * 4**-0.5, dim=-1) @ vv

    q, k, v = heads(q), heads(k), heads(v)
    for over in ("time", "space"):
        out = torch.zeros_like(q)
        out[:, :, :1] = attend(q[:, :, :1], k, v)  # the CLS query sees every token
        groups = (
            [[1 + f * patches + p for f in range(frames)] for p in range(patches)]
            if over == "time"
            else [[1 + f * patches + p for p in range(patches)] for f in range(frames)]
        )
        for group in groups:
            keys = [0] + group  # the group and the CLS token
            out[:, :, group] = attend(q[:, :, group], k[:, :, keys], v[:, :, keys])
        expected = attn.proj(out.transpose(1, 2).reshape(2, -1, 8))
        with torch.no_grad():
            assert torch.allclose(attn(x, frames, patches, over), expected, atol=1e-5), over


# --------------------------------------------------------------------------------------- bad inputs
@pytest.mark.parametrize(
    "media,pattern",
    [
        (torch.zeros(1, 3, 8, 8), r"expects media \{'video'"),
        (
            {"video": torch.zeros(1, 8, 8, 3), "audio": torch.zeros(1, 1, 100), "fps": 25.0, "sample_rate": 16000},
            r"video must be \(B, F, 3, H, W\), got \(1, 8, 8, 3\)",
        ),
        (
            {"video": torch.zeros(1, 8, 3, 8, 8), "audio": torch.zeros(100), "fps": 25.0, "sample_rate": 16000},
            r"audio must be \(B, C, N\) or \(B, N\), got \(100,\)",
        ),
        (
            {"video": torch.zeros(2, 8, 3, 8, 8), "audio": torch.zeros(1, 1, 100), "fps": 25.0, "sample_rate": 16000},
            "2 videos but 1 audio clips",
        ),
        (
            {"video": torch.zeros(1, 8, 3, 8, 8), "audio": torch.zeros(1, 1, 100), "sample_rate": 16000},
            "fps is unknown",
        ),
        (
            {"video": torch.zeros(1, 8, 3, 8, 8), "audio": torch.zeros(1, 1, 100), "fps": 0.0, "sample_rate": 16000},
            r"fps=0\.0; expected a positive number",
        ),
        (
            {"video": torch.zeros(1, 8, 3, 8, 8), "audio": torch.zeros(1, 1, 100), "fps": 25.0, "sample_rate": 16000.5},
            "whole number of Hz",
        ),
        (
            {
                "video": torch.full((1, 8, 3, 8, 8), float("nan")),
                "audio": torch.zeros(1, 1, 100),
                "fps": 25.0,
                "sample_rate": 16000,
            },
            "the video must be finite floats",
        ),
    ],
)
def test_bad_media_is_one_line(tiny, media, pattern):
    reward = DeSyncReward.from_components(tiny, device="cpu")
    with pytest.raises(RewardError, match=pattern) as err:
        reward(media, [""], [{}])
    assert "\n" not in str(err.value) and str(err.value).startswith("desync: ")


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({"score": "desync"}, r"desync: score='desync'; allowed: neg_desync, prob_zero"),
        ({"windows": "last"}, r"desync: windows='last'; allowed: first_last, all"),
        ({"max_seconds": -1.0}, r"max_seconds=-1\.0; expected a positive number"),
        ({"segment_batch": 0}, r"segment_batch=0; expected a positive integer"),
        ({"fps": -8.0}, r"desync: fps=-8\.0; expected a positive number"),
    ],
)
def test_bad_arguments_are_one_line(tiny, kwargs, pattern):
    with pytest.raises(RewardError, match=pattern):
        DeSyncReward.from_components(tiny, device="cpu", **kwargs)


def test_bad_config_is_one_line():
    with pytest.raises(RewardError, match=r"config\.width is not a Synchformer size"):
        Synchformer({"width": 3})
    with pytest.raises(RewardError, match=r"config\.dim=0; expected a positive integer"):
        Synchformer({"dim": 0})
    with pytest.raises(RewardError, match=r"config\.image_size=40 is not a multiple of config\.patch_size=16"):
        Synchformer(dict(TINY, image_size=40))
    with pytest.raises(RewardError, match=r"config\.video_dim=15 is not a multiple of config\.video_heads=2"):
        Synchformer(dict(TINY, video_dim=15))


def test_av_sync_scorer_slot(tiny, tmp_path):
    path = tmp_path / "synchformer_state_dict.pth"
    torch.save(tiny.state_dict(), path)
    reward = build_reward(
        "av_sync", scorer="flowrl.reward_models.desync:synchformer_sync", checkpoint=str(path), config=TINY
    )
    media = _media(batch=2, seconds=5.0)
    got = _call(reward, media).scores
    assert torch.equal(got, _call(DeSyncReward.from_components(tiny, device="cpu"), media).scores)
