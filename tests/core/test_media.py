"""flowrl.media: the media forms (images, video, audio, audio_video), their monitors (hand-checked values) and the
files a run writes of them (PNG grid, MP4s with a frame sheet, WAVs with waveforms)."""

import math

import numpy as np
import pytest
import torch
from PIL import Image

from flowrl import media as M
from flowrl.reward_models.media import mp4_to_video, wav_to_audio
from flowrl.reward_models.monitors import image_monitors

GEN = torch.Generator().manual_seed(0)


def _video(b=2, f=5, h=16, w=16, fps=12.0):
    return {"video": torch.rand(b, f, 3, h, w, generator=GEN), "fps": fps}


def _audio(b=2, c=1, n=4000, rate=8000):
    return {"audio": torch.rand(b, c, n, generator=GEN) * 2 - 1, "sample_rate": rate}


# ---------------------------------------------------------------------------------------------- forms
def test_media_kind_of_each_form_and_one_line_errors():
    assert M.media_kind(torch.rand(2, 3, 8, 8)) == "image"
    assert M.media_kind(_video()) == "video" and M.media_kind(torch.rand(2, 4, 3, 8, 8)) == "video"
    assert M.media_kind(_audio()) == "audio" and M.media_kind(torch.rand(2, 100)) == "audio"
    assert M.media_kind({**_video(), **_audio()}) == "audio_video"
    for bad, match in [
        ({"fps": 8.0}, "neither 'video' nor 'audio'"),
        (torch.rand(8), "neither images"),
        ([1, 2], "tensor or a mapping"),
    ]:
        with pytest.raises(ValueError, match=match) as info:
            M.media_kind(bad)
        assert "\n" not in str(info.value)


def test_num_samples_cat_select_and_to_cpu():
    video, other = _video(b=2), _video(b=3)
    assert M.num_samples(video) == 2 and M.num_samples(torch.rand(4, 3, 8, 8)) == 4
    both = M.cat_media([video, other])
    assert M.num_samples(both) == 5 and both["fps"] == 12.0
    assert torch.equal(both["video"], torch.cat([video["video"], other["video"]]))
    images = [torch.rand(2, 3, 4, 4), torch.rand(1, 3, 4, 4)]
    assert torch.equal(M.cat_media(images), torch.cat(images)) and M.cat_media(images[:1]) is images[0]
    picked = M.select_media(both, torch.tensor([4, 0]))
    assert torch.equal(picked["video"], both["video"][[4, 0]]) and picked["fps"] == 12.0
    assert torch.equal(M.select_media(both, 1)["video"], both["video"][1:2])
    assert torch.equal(M.select_media(both, slice(0, 2))["video"], video["video"])
    assert M.select_media(images[0], [1]).shape == (1, 3, 4, 4)
    masked = M.select_media(both, torch.tensor([True, False, False, True, False]))
    assert torch.equal(masked["video"], both["video"][[0, 3]])
    rate_tensor = {"audio": torch.rand(3, 1, 10), "sample_rate": torch.tensor(8000)}  # a 0-d rate is no batch
    assert M.num_samples(rate_tensor) == 3 and M.select_media(rate_tensor, [2])["sample_rate"] == 8000
    assert M.num_samples(M.cat_media([rate_tensor, rate_tensor])) == 6
    moved = M.to_cpu(_audio())
    assert moved["audio"].device.type == "cpu" and moved["sample_rate"] == 8000
    with pytest.raises(ValueError, match="differ in batch size"):
        M.num_samples({"video": torch.rand(2, 1, 3, 4, 4), "audio": torch.rand(3, 1, 10)})


def test_cat_refuses_other_rates_and_other_forms_in_one_line():
    for items, match in [
        ([_video(fps=12.0), _video(fps=24.0)], "different fps: 12.0 and 24.0"),
        ([_audio(rate=8000), _audio(rate=16000)], "different sample_rate: 8000 and 16000"),
        ([_video(), _audio()], "keys"),
        ([torch.rand(1, 3, 4, 4), _video()], "tensor batch with a media mapping"),
        ([], "no media"),
    ]:
        with pytest.raises(ValueError, match=match) as info:
            M.cat_media(items)
        assert "\n" not in str(info.value)


def test_unflatten_and_flatten_view_b_k_samples_as_groups():
    av = {**_video(b=6), **_audio(b=6)}
    grouped = M.unflatten(av, 3)
    assert grouped["video"].shape[:2] == (2, 3) and grouped["audio"].shape[:2] == (2, 3)
    assert torch.equal(grouped["video"][1, 2], av["video"][5])  # sample-major
    flat, k = M.flatten(grouped)
    assert k == 3 and torch.equal(flat["video"], av["video"]) and flat["sample_rate"] == av["sample_rate"]
    images = torch.rand(4, 3, 4, 4)
    assert torch.equal(M.flatten(M.unflatten(images, 2))[0], images)
    with pytest.raises(ValueError, match="4 samples are not groups of 3"):
        M.unflatten(images, 3)


# ---------------------------------------------------------------------------------------------- monitors
def test_image_monitors_are_unchanged():
    images, groups = torch.rand(6, 3, 16, 16, generator=GEN), torch.tensor([0, 0, 0, 1, 1, 2])
    assert M.media_monitors(images, groups) == image_monitors(images, groups)


def test_video_monitors_average_the_image_ones_and_measure_change():
    still = torch.rand(4, 3, 16, 16, generator=GEN)
    groups = torch.tensor([0, 0, 1, 1])
    out = M.media_monitors({"video": still[:, None].expand(4, 7, 3, 16, 16), "fps": 8.0}, groups)
    assert out.pop("monitor/video/temporal_change") == 0.0  # a still clip does not change
    assert out == pytest.approx(image_monitors(still, groups), abs=1e-6)  # every frame alike: the image values
    ramp = torch.arange(6, dtype=torch.float32).view(1, 6, 1, 1, 1).expand(2, 6, 3, 8, 8) * 0.1  # +0.1 a frame
    assert M.media_monitors({"video": ramp, "fps": 8.0}, torch.tensor([0, 1]))[
        "monitor/video/temporal_change"
    ] == pytest.approx(0.1, abs=1e-6)
    one = M.video_monitors(torch.rand(2, 1, 3, 8, 8), torch.tensor([0, 0]))
    assert one["monitor/video/temporal_change"] == 0.0


def test_video_monitors_look_at_uniform_frames():
    # frames 0..8 of brightness 0, 1/8, ..., 1: the 4 frames 0, 3, 5, 8 (rounded uniform picks) average to 0.5
    video = torch.linspace(0, 1, 9).view(1, 9, 1, 1, 1).expand(2, 9, 3, 4, 4)
    picked = [0, 3, 5, 8]
    assert M._frame_indices(9, 4) == picked
    out = M.video_monitors(video, torch.tensor([0, 1]))
    assert out["monitor/colour/brightness"] == pytest.approx(float(torch.linspace(0, 1, 9)[picked].mean()))


def test_audio_monitors_by_hand():
    rate, t = 16000, torch.arange(16000) / 16000
    groups = torch.tensor([0, 0])
    for a in (0.25, 0.5, 0.9):
        sine = (a * torch.sin(2 * math.pi * 440 * t)).view(1, 1, -1).expand(2, 2, -1)  # 440 whole periods
        out = M.media_monitors({"audio": sine, "sample_rate": rate}, groups)
        assert out["monitor/audio/rms"] == pytest.approx(a / math.sqrt(2), rel=1e-4)
        assert out["monitor/audio/peak"] == pytest.approx(a, abs=1e-4)
        assert out["monitor/audio/clipped_frac"] == 0.0
        assert out["monitor/diversity/audio_in_group"] == 0.0 and out["monitor/diversity/groups"] == 1.0
    square = torch.sign(torch.sin(2 * math.pi * 100 * (t + 0.5 / 16000))).view(1, 1, -1).repeat(3, 1, 1)
    out = M.media_monitors({"audio": square, "sample_rate": rate}, torch.tensor([0, 1, 2]))
    assert out["monitor/audio/clipped_frac"] == 1.0 and out["monitor/audio/rms"] == 1.0
    assert out["monitor/audio/peak"] == 1.0 and out["monitor/diversity/groups"] == 0.0  # groups of one


def test_audio_diversity_is_zero_for_identical_members_and_ignores_loudness():
    t = torch.arange(8000) / 8000
    low, high = torch.sin(2 * math.pi * 200 * t), torch.sin(2 * math.pi * 1500 * t)
    noise = torch.rand(8000, generator=GEN) * 2 - 1
    # group 0: two copies of one tone at different loudness; group 1: tone and noise; group 2: silence twice
    wave = torch.stack([low, 0.2 * low, high, 0.5 * noise, 0 * low, 0 * low])[:, None]
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    spectra = M.log_spectra(wave)
    assert torch.isfinite(spectra).all() and spectra[4:].abs().max() == 0
    by_group = {
        g: M.audio_diversity(wave[groups == g], torch.zeros(2, dtype=torch.long))["monitor/diversity/audio_in_group"]
        for g in range(3)
    }
    assert by_group[2] == 0.0 and 0.0 < by_group[0] < 0.2 * by_group[1]  # log1p is not quite scale-free
    both = M.audio_diversity(wave, groups)
    assert both["monitor/diversity/groups"] == 3.0
    assert both["monitor/diversity/audio_in_group"] == pytest.approx(sum(by_group.values()) / 3)
    same = wave[:1].expand(4, 1, -1)
    assert M.audio_diversity(same, torch.tensor([0, 0, 1, 1]))["monitor/diversity/audio_in_group"] == 0.0


def test_audio_video_has_both_and_names_per_kind():
    av = {**_video(b=2), **_audio(b=2)}
    out = M.media_monitors(av, torch.tensor([0, 0]))
    assert set(out) == M.monitor_names("audio_video") == M.monitor_names("video") | M.monitor_names("audio")
    assert M.monitor_names("image") == set(image_monitors(torch.rand(2, 3, 4, 4), torch.zeros(2, dtype=torch.long)))
    assert M.monitor_names("video") - M.monitor_names("image") == {"monitor/video/temporal_change"}
    assert M.monitor_names("audio") == {
        "monitor/audio/rms",
        "monitor/audio/peak",
        "monitor/audio/clipped_frac",
        "monitor/diversity/audio_in_group",
        "monitor/diversity/groups",
    }
    assert all(math.isfinite(v) for v in out.values())
    with pytest.raises(ValueError, match="unknown media kind"):
        M.monitor_names("smell")


# ---------------------------------------------------------------------------------------------- files
def test_images_save_as_today_s_grid(tmp_path):
    from flowrl.logs import save_grid

    images = torch.rand(5, 3, 16, 16, generator=GEN)
    save_grid(images[:4], tmp_path / "reference.png")
    written = M.save_media(images, tmp_path / "samples" / "iter-000010", max_samples=4)
    assert written == [tmp_path / "samples" / "iter-000010.png"]
    assert written[0].read_bytes() == (tmp_path / "reference.png").read_bytes()
    assert M.save_media(images[:4], tmp_path / "samples" / "eval-000000.png")[0].name == "eval-000000.png"
    assert not (tmp_path / "samples" / "iter-000010").exists()


def test_video_saves_mp4s_and_a_frame_sheet(tmp_path):
    # smooth clips (H.264 is lossy): video i is a horizontal ramp whose brightness grows with the frame
    b, f, h, w = 3, 10, 32, 48
    ramp = torch.linspace(0, 1, w).view(1, 1, 1, 1, w)
    video = ramp * torch.linspace(0.3, 1, f).view(1, f, 1, 1, 1) * torch.tensor([1.0, 0.7, 0.4]).view(b, 1, 1, 1, 1)
    video = video.expand(b, f, 3, h, w).contiguous()
    written = M.save_media({"video": video, "fps": 16.0}, tmp_path / "samples" / "iter-000010", max_samples=2)
    folder = tmp_path / "samples" / "iter-000010"
    assert written == [tmp_path / "samples" / "iter-000010.png", folder / "0000.mp4", folder / "0001.mp4"]
    for i in range(2):
        back = mp4_to_video((folder / f"{i:04d}.mp4").read_bytes(), "clip")
        assert back.shape == (f, 3, h, w)
        assert (back - video[i]).abs().mean() < 0.03
    import av

    with av.open(str(folder / "0000.mp4")) as container:
        assert float(container.streams.video[0].average_rate) == 16.0
    with Image.open(written[0]) as sheet:  # 2 rows of 8 frames, 2 px padding
        assert sheet.size == (8 * (w + 2) + 2, 2 * (h + 2) + 2)
        pixels = np.asarray(sheet.convert("RGB"))
    first, last = pixels[2 : 2 + h, 2 : 2 + w], pixels[2 : 2 + h, 2 + 7 * (w + 2) : 2 + 7 * (w + 2) + w]
    assert first.mean() < last.mean()  # columns run through time


def test_frame_sheet_shrinks_big_frames():
    sheet = M.frame_sheet(torch.rand(1, 20, 3, 480, 832), frames=4, side=256)
    assert sheet.shape == (4, 3, 148, 256) and 0 <= sheet.min() and sheet.max() <= 1


def test_audio_saves_wavs_and_waveforms(tmp_path):
    audio = _audio(b=2, c=2, n=3000, rate=8000)
    written = M.save_media(audio, tmp_path / "iter-000003")
    assert [p.name for p in written] == ["iter-000003.png", "0000.wav", "0001.wav"]
    for i, path in enumerate(written[1:]):
        wave, rate = wav_to_audio(path.read_bytes(), "clip")
        assert rate == 8000 and wave.shape == (2, 3000)
        assert (wave - audio["audio"][i]).abs().max() <= 1.5 / 32767  # 16-bit PCM (written x 32767, read / 32768)
    with Image.open(written[0]) as picture:  # one 48 px row per channel, a clip per block
        assert picture.size == (256 + 4, 2 * (2 * 48 + 2) + 2)
    with pytest.raises(ValueError, match="sample rate"):
        M.save_clips(torch.rand(1, 1, 100), tmp_path / "bare")


def test_waveform_picture_draws_the_envelope():
    picture = M.waveform_picture(torch.cat([torch.ones(1, 50), -torch.ones(1, 50)], dim=1), width=2, height=10)
    assert picture.shape == (3, 10, 2)
    lit = picture[0] > 0.5
    assert lit[:, 0].tolist() == [True] + [False] * 9  # +1: the top row only
    assert lit[:, 1].tolist() == [False] * 9 + [True]


def test_audio_video_saves_both(tmp_path):
    av = {**_video(b=2, f=3), **_audio(b=2)}
    written = M.save_media(av, tmp_path / "eval-000000")
    assert [p.name for p in written] == ["eval-000000.png", "0000.mp4", "0000.wav", "0001.mp4", "0001.wav"]


def test_audio_video_mp4s_carry_the_sound_beside_the_wavs(tmp_path):
    import av

    from flowrl.reward_models.media import mp4_to_audio

    rate, t = 16000, torch.arange(16000) / 16000
    tones = torch.stack([0.5 * torch.sin(2 * torch.pi * hz * t).repeat(2, 1) for hz in (440.0, 880.0)])  # (2, 2, N)
    media = {**_video(b=2, f=8, h=16, w=16, fps=8.0), "audio": tones, "sample_rate": rate}
    written = M.save_clips(media, tmp_path / "clips")
    assert [p.name for p in written] == ["0000.mp4", "0000.wav", "0001.mp4", "0001.wav"]
    for i, hz in enumerate((440.0, 880.0)):
        with av.open(str(tmp_path / "clips" / f"{i:04d}.mp4")) as container:
            assert len(container.streams.video) == 1 and len(container.streams.audio) == 1
            sound = container.streams.audio[0]
            assert sound.codec_context.name == "aac" and sound.rate == rate and sound.channels == 2
        wave, back_rate = mp4_to_audio((tmp_path / "clips" / f"{i:04d}.mp4").read_bytes(), "clip")
        spectrum = np.abs(np.fft.rfft(wave.mean(dim=0).numpy()))
        assert back_rate == rate and abs(float(np.argmax(spectrum)) * rate / wave.shape[1] - hz) < 3.0
        assert mp4_to_video((tmp_path / "clips" / f"{i:04d}.mp4").read_bytes(), "clip").shape == (8, 3, 16, 16)
        raw, raw_rate = wav_to_audio((tmp_path / "clips" / f"{i:04d}.wav").read_bytes(), "clip")  # the WAV as ever
        assert raw_rate == rate and (raw - tones[i]).abs().max() <= 1.5 / 32767
    with av.open(str(M.save_clips(_video(b=1), tmp_path / "silent")[0])) as container:  # video alone: no track
        assert not container.streams.audio


def test_an_edit_sheet_shows_each_source_before_its_edit(tmp_path):
    from flowrl.media import edit_rows, save_media

    images = torch.stack([torch.zeros(3, 4, 4), torch.full((3, 4, 4), 0.25)])
    sources = [[torch.full((3, 2, 2), 0.5)], []]  # the second row edits nothing: a white cell holds its place
    cells = edit_rows(images, sources)
    assert cells.shape == (4, 3, 4, 4)
    assert torch.equal(cells[0], torch.full((3, 4, 4), 0.5))  # the 2 x 2 source, resized to the edit's 4 x 4
    assert torch.equal(cells[1], images[0])
    assert torch.equal(cells[2], torch.ones(3, 4, 4))
    assert torch.equal(cells[3], images[1])
    png = save_media(images, tmp_path / "iter-000001", sources=sources)[0]
    assert Image.open(png).size == (2 + 2 * (4 + 2), 2 + 2 * (4 + 2))  # 2 columns (source, edit), 2 rows
    plain = save_media(images, tmp_path / "iter-000002")[0]
    assert Image.open(plain).size == (2 + 2 * (4 + 2), 2 + 1 * (4 + 2))  # a text-only grid: 2 x 1
