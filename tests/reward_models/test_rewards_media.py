"""Video, audio and audio-video rewards, the bundled real models (Silero VAD, NudeNet), CLAP on a tiny model,
the wire encodings of media, and the monitors. CPU only, offline."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from flowrl.reward_models import RewardError, RewardOutput, build_reward
from flowrl.reward_models.media import MediaError, decode_media, encode_media, wav_to_audio

ASSETS = Path(__file__).parents[1] / "assets" / "rewards"


def frame_index(media, prompts, metadata):
    """A user's image reward: the brightness of the frame, so per-frame scores are known."""
    return RewardOutput(scores=media.mean(dim=(1, 2, 3)), details={"prompt": list(prompts)})


# ---------------------------------------------------------------------------------------------- video


def test_uniform_frame_indices_by_hand():
    from flowrl.reward_models.video import uniform_frame_indices

    assert uniform_frame_indices(10, 4) == [0, 3, 6, 9]  # round(k * 9 / 3)
    assert uniform_frame_indices(9, 3) == [0, 4, 8]
    assert uniform_frame_indices(5, 8) == [0, 1, 2, 3, 4]
    assert uniform_frame_indices(7, 1) == [3]


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("mean", [0.4, 0.5]),
        ("min", [0.1, 0.5]),
        ("max", [0.7, 0.5]),
        ("median", [0.4, 0.5]),
        ("first", [0.1, 0.5]),
        ("last", [0.7, 0.5]),
    ],
)
def test_video_reward_scores_frames_then_aggregates(how, expected):
    # video 0 has frame brightness 0.1, 0.2, ..., 0.7 (7 frames); video 1 is 0.5 throughout
    video = torch.stack(
        [torch.stack([torch.full((3, 4, 4), 0.1 * (f + 1)) for f in range(7)]), torch.full((7, 3, 4, 4), 0.5)]
    )
    reward = build_reward("video", reward=f"{__name__}:frame_index", frames=3, aggregate=how)
    out = reward(video, ["a", "b"], [{}, {}])  # frames 0, 3, 6 -> 0.1, 0.4, 0.7
    assert out.scores.tolist() == pytest.approx(expected)
    assert out.details["per_frame"][0].tolist() == pytest.approx([0.1, 0.4, 0.7])
    assert out.details["frame_prompt"] == ["a", "a", "a", "b", "b", "b"]


def test_video_reward_rejects_images_and_bad_options():
    with pytest.raises(RewardError, match="aggregate"):
        build_reward("video", reward="jpeg_compressibility", aggregate="mode")
    reward = build_reward("video", reward="jpeg_compressibility")
    with pytest.raises(RewardError, match=r"\(B, F, 3, H, W\)"):
        reward(torch.rand(2, 3, 8, 8), ["a", "b"], [{}, {}])


# ---------------------------------------------------------------------------------------------- audio


def _speech() -> tuple[torch.Tensor, int]:
    return wav_to_audio((ASSETS / "speech_16k.wav").read_bytes(), "asset")  # espeak-ng, 16 kHz mono


def test_speech_reward_with_the_bundled_silero_vad():
    pytest.importorskip("silero_vad")
    speech, rate = _speech()
    n = speech.shape[1]
    t = torch.arange(n) / rate
    batch = torch.stack(
        [
            speech,
            torch.zeros(1, n),
            0.3 * torch.randn(1, n, generator=torch.Generator().manual_seed(0)),
            0.5 * torch.sin(2 * math.pi * 440 * t)[None],
        ]
    )  # (4, 1, N)
    reward = build_reward("speech")
    out = reward({"audio": batch, "sample_rate": rate}, ["x"] * 4, [{}] * 4)
    assert out.scores[0] > 0.6 and out.details["speech_frac"][0] > 0.6  # speech
    assert (out.scores[1:] < 0.1).all(), out.scores  # silence, white noise, a pure tone
    # the same clip at 48 kHz stereo goes through resampling and down-mixing to nearly the same score
    from flowrl.reward_models.audio import resample

    stereo = resample(speech, rate, 48000).expand(2, -1)[None]
    resampled = reward({"audio": stereo, "sample_rate": 48000}, ["x"], [{}])
    assert resampled.scores.item() == pytest.approx(out.scores[0].item(), abs=0.05)


def test_audio_without_a_rate_is_an_error():
    pytest.importorskip("silero_vad")
    with pytest.raises(RewardError, match="sample rate"):
        build_reward("speech", sample_rate=None)(torch.zeros(1, 1, 16000), ["x"], [{}])


@pytest.fixture(scope="module")
def tiny_clap(tmp_path_factory):
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import ClapConfig, ClapFeatureExtractor, ClapModel, ClapProcessor, RobertaTokenizer

    folder = tmp_path_factory.mktemp("clap")
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4}
    for char in sorted(ByteLevel.alphabet()):
        vocab.setdefault(char, len(vocab))
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = RobertaTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    features = ClapFeatureExtractor(
        feature_size=16,
        sampling_rate=16000,
        hop_length=160,
        max_length_s=1,
        fft_window_size=400,
        frequency_min=50,
        frequency_max=8000,
        truncation="rand_trunc",
    )
    config = ClapConfig(
        text_config={
            "vocab_size": len(vocab),
            "hidden_size": 32,
            "intermediate_size": 37,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "max_position_embeddings": 64,
            "projection_dim": 16,
            "pad_token_id": 1,
            "bos_token_id": 0,
            "eos_token_id": 2,
        },
        audio_config={
            "spec_size": 64,
            "num_mel_bins": 16,
            "window_size": 4,
            "patch_size": 4,
            "patch_stride": [4, 4],
            "hidden_size": 32,
            "depths": [1, 1],
            "num_attention_heads": [2, 2],
            "patch_embeds_hidden_size": 16,
            "projection_dim": 16,
            "enable_fusion": False,
        },
        projection_dim=16,
    )
    torch.manual_seed(0)
    return ClapModel(config).eval(), ClapProcessor(feature_extractor=features, tokenizer=tokenizer)


def test_clap_is_the_text_audio_cosine(tiny_clap):
    from flowrl.reward_models.audio import ClapReward

    model, processor = tiny_clap
    reward = ClapReward.from_components(model, processor, sample_rate=8000, device="cpu")
    gen = torch.Generator().manual_seed(0)
    audio = 0.3 * torch.randn(2, 1, 12000, generator=gen)  # 1.5 s at 8 kHz: resampled to 16 kHz, cut to 1 s
    prompts = ["rain on a roof", "a dog barks"]
    out = reward(audio, prompts, [{}, {}])

    from flowrl.reward_models.audio import resample

    mono = resample(audio.mean(dim=1), 8000, 16000)[:, :16000]
    inputs = processor.feature_extractor(list(mono.numpy()), sampling_rate=16000, return_tensors="pt")
    tokens = processor.tokenizer(prompts, padding=True, return_tensors="pt")
    with torch.no_grad():
        a = model.get_audio_features(**inputs)
        t = model.get_text_features(**tokens)
        a, t = getattr(a, "pooler_output", a), getattr(t, "pooler_output", t)
    expected = (a * t).sum(-1) / (a.norm(dim=-1) * t.norm(dim=-1))
    assert out.scores.tolist() == pytest.approx(expected.tolist(), abs=1e-5)
    assert out.scores.tolist() == pytest.approx(reward(audio, prompts, [{}, {}]).scores.tolist())  # no random crop


# ---------------------------------------------------------------------------------------------- audio-video


def _clip(flash_frames, click_frames, frames=24, per_frame=2000):
    video = 0.1 * torch.ones(frames, 3, 8, 8)
    audio = torch.zeros(1, frames * per_frame)
    for f in flash_frames:
        video[f] = 0.9
    for f in click_frames:
        audio[0, f * per_frame : f * per_frame + 300] = 0.8
    return video, audio


def test_peak_iou_by_hand():
    from flowrl.reward_models.av import peak_iou

    assert peak_iou([5, 15], [6, 15], 3) == 1.0
    assert peak_iou([5, 15], [5, 25], 3) == pytest.approx(1 / 3)  # one match: 1 / (2 + 2 - 1)
    assert peak_iou([5], [], 3) == 0.0 and peak_iou([], [], 3) == 0.0


def test_av_sync_onset_scorer():
    clips = [_clip([5, 15], [5, 15]), _clip([5, 15], [5, 21]), _clip([5, 15], [16, 6])]
    media = {
        "video": torch.stack([v for v, _ in clips]),
        "audio": torch.stack([a for _, a in clips]),
        "fps": 8.0,
        "sample_rate": 16000,
    }
    out = build_reward("av_sync", tolerance=1)(media, ["x"] * 3, [{}] * 3)
    # in sync: 1; one click moved 6 frames: 1 / 3; both clicks 1 frame late (within tolerance): 1
    assert out.scores.tolist() == pytest.approx([1.0, 1 / 3, 1.0])


def test_av_sync_takes_a_model_as_scorer():
    reward = build_reward("av_sync", scorer="numpy:ones_like", fps=8, sample_rate=16000)
    with pytest.raises(RewardError, match="expects media"):
        reward(torch.zeros(2, 3, 4, 4), ["a", "b"], [{}, {}])


# ---------------------------------------------------------------------------------------------- NSFW


def test_nsfw_penalty_with_the_bundled_detector():
    pytest.importorskip("nudenet")
    reward = build_reward("nsfw")
    images = torch.rand(3, 3, 200, 300, generator=torch.Generator().manual_seed(0))
    images[0] = 1.0
    out = reward(images, ["a"] * 3, [{}] * 3)
    assert out.scores.tolist() == [0.0, 0.0, 0.0] and out.details["nsfw_class"] == ["", "", ""]
    assert reward.class_scores(images).shape == (3, 18)
    strict = build_reward("nsfw", threshold=0.0)  # every image flagged: the penalty is minus the top score
    penalties = strict(images, ["a"] * 3, [{}] * 3).scores
    assert ((penalties <= 0) & (penalties >= -1)).all()
    assert penalties.tolist() == pytest.approx((-reward.class_scores(images)[:, reward.class_index].max(1)).tolist())
    with pytest.raises(RewardError, match="unknown classes"):
        build_reward("nsfw", classes=["NOT_A_CLASS"])


def test_letterbox_pads_bottom_right():
    pytest.importorskip("cv2")
    from flowrl.reward_models.nsfw import letterbox

    image = np.full((100, 200, 3), 255, np.uint8)
    blob = letterbox(image, 32)
    assert blob.shape == (3, 32, 32)
    assert blob[:, :14].min() == 1.0 and blob[:, 18:].max() == 0.0  # top half image, bottom half black padding


# ---------------------------------------------------------------------------------------------- media encodings


def test_media_round_trips():
    gen = torch.Generator().manual_seed(0)
    images = (torch.rand(2, 3, 9, 7, generator=gen) * 255).round() / 255
    assert torch.equal(decode_media(encode_media(images, "image")), images)  # PNG is lossless on uint8
    assert torch.equal(decode_media(json.loads(json.dumps(encode_media(images, "image", "array")))), images)
    video = (torch.rand(2, 3, 3, 8, 8, generator=gen) * 255).round() / 255
    back = decode_media(encode_media(video, "video", fps=12))
    assert torch.equal(back["video"], video) and back["fps"] == 12
    audio = torch.rand(2, 2, 100, generator=gen) * 2 - 1
    back = decode_media(encode_media({"audio": audio, "sample_rate": 22050}, "audio"))
    assert (
        back["sample_rate"] == 22050 and (back["audio"] - audio).abs().max() < 2 / 32767
    )  # 16-bit PCM, read back / 32768


def test_mp4_video_round_trip():
    pytest.importorskip("av")
    video = torch.zeros(1, 6, 3, 32, 32)
    video[:, :, 0] = torch.linspace(0.2, 0.8, 6)[None, :, None, None]
    back = decode_media(encode_media(video, "video", "mp4", fps=8))["video"]
    assert back.shape == (1, 6, 3, 32, 32)
    assert (back - video).abs().mean() < 0.05  # lossy H.264


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        ({"kind": "image", "format": "png", "data": ["not base64!"]}, "invalid base64"),
        ({"kind": "image", "format": "png", "data": ["aGVsbG8="]}, "not a readable image"),
        ({"kind": "image", "format": "jpeg", "data": []}, "format 'jpeg'"),
        (
            {"kind": "image", "format": "array", "data": {"dtype": "float32", "shape": [1, 3, 2, 2], "data": "AAAA"}},
            "bytes",
        ),
        ({"kind": "audio", "format": "wav", "data": ["AAAA"]}, "sample_rate"),
        ({"kind": "hologram"}, "unknown media kind"),
    ],
)
def test_bad_media_is_a_media_error(payload, match):
    with pytest.raises(MediaError, match=match):
        decode_media(payload)


# ---------------------------------------------------------------------------------------------- monitors


def test_monitors_by_hand():
    from flowrl.reward_models.monitors import colour_stats, image_monitors, in_group_diversity, saturation_stats

    black, white = torch.zeros(3, 4, 4), torch.ones(3, 4, 4)
    red = torch.zeros(3, 4, 4)
    red[0] = 1.0
    images = torch.stack([black, white, red, red])
    groups = torch.tensor([0, 0, 1, 1])
    # group 0: black vs white, RMS distance 1; group 1: identical, 0 -> mean 0.5
    assert in_group_diversity(images, groups)["monitor/diversity/in_group"] == pytest.approx(0.5)
    sat = saturation_stats(images)
    assert sat["monitor/saturation/mean"] == pytest.approx(0.5)  # black 0, white 0, red 1, red 1
    assert sat["monitor/pixels/clipped_frac"] == 1.0
    colour = colour_stats(torch.stack([red]))
    # red: rg = 1, yb = 0.5 everywhere -> std 0, colourfulness 0.3 * sqrt(1 + 0.25)
    assert colour["monitor/colour/colourfulness"] == pytest.approx(0.3 * math.sqrt(1.25))
    assert colour["monitor/colour/r_mean"] == 1.0 and colour["monitor/colour/contrast"] == 0.0
    assert set(image_monitors(images, groups)) >= {"monitor/diversity/in_group", "monitor/colour/brightness"}


# ---------------------------------------------------------------------------------------------- mp4 with a sound track


def _tone(channels, rate, seconds=1.0, hz=440.0):
    t = torch.arange(int(rate * seconds)) / rate
    return (0.5 * torch.sin(2 * torch.pi * hz * t)).repeat(channels, 1)


def _dominant_hz(wave, rate):
    spectrum = np.abs(np.fft.rfft(wave.mean(dim=0).numpy() * np.hanning(wave.shape[-1])))
    return float(np.argmax(spectrum)) * rate / wave.shape[-1]


def _smooth_clip():
    video = torch.zeros(6, 3, 32, 32)
    video[:, 0] = torch.linspace(0.2, 0.8, 6)[:, None, None]
    return video


@pytest.mark.parametrize(("channels", "rate"), [(2, 16000), (1, 44100), (2, 24000)])
def test_mp4_with_a_tone_round_trips(channels, rate):
    pytest.importorskip("av")
    from flowrl.reward_models.media import mp4_audio_rate, mp4_to_audio, mp4_to_video, video_to_mp4

    video, tone = _smooth_clip(), _tone(channels, rate)
    data = video_to_mp4(video, 8, tone, rate)
    wave, back_rate = mp4_to_audio(data)
    assert back_rate == rate == mp4_audio_rate(rate) and wave.shape[0] == channels and wave.dtype == torch.float32
    assert abs(wave.shape[1] - tone.shape[1]) <= 1024  # within one AAC frame
    assert abs(_dominant_hz(wave, back_rate) - 440.0) < 3.0
    n = min(wave.shape[1], tone.shape[1])
    assert (wave[:, :n] - tone[:, :n]).abs().mean() < 0.02  # aligned: the encoder's priming samples are dropped
    frames = mp4_to_video(data, "clip")
    assert torch.equal(frames, mp4_to_video(video_to_mp4(video, 8), "clip"))  # the video decodes as before


def test_mp4_audio_at_a_rate_aac_lacks_is_resampled():
    pytest.importorskip("av")
    from flowrl.reward_models.media import mp4_audio_rate, mp4_to_audio, video_to_mp4

    assert mp4_audio_rate(22000) == 22050 and mp4_audio_rate(200000) == 96000
    wave, rate = mp4_to_audio(video_to_mp4(_smooth_clip(), 8, _tone(2, 22000), 22000))
    assert rate == 22050 and wave.shape[0] == 2 and abs(wave.shape[1] - 22050) <= 1024
    assert abs(_dominant_hz(wave, rate) - 440.0) < 3.0


def test_mp4_without_audio_is_unchanged_and_has_no_track():
    pytest.importorskip("av")
    from flowrl.reward_models.media import mp4_to_audio, video_to_mp4

    video = torch.rand(5, 3, 18, 22, generator=torch.Generator().manual_seed(1))
    plain = video_to_mp4(video, 12)
    assert video_to_mp4(video, 12, None, None) == plain == video_to_mp4(video, 12, audio=None)
    assert video_to_mp4(video, 12, _tone(1, 16000), 16000) != plain
    with pytest.raises(MediaError, match="no audio track"):
        mp4_to_audio(plain, "clip")
    with pytest.raises(MediaError, match="not a readable MP4"):
        mp4_to_audio(b"not an mp4", "clip")
    with pytest.raises(MediaError, match="sample_rate"):
        video_to_mp4(video, 12, _tone(1, 16000))
    with pytest.raises(MediaError, match="C = 1 or 2"):
        video_to_mp4(video, 12, _tone(3, 16000), 16000)
