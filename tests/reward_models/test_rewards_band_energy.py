"""The band_energy audio reward (reward_models/audio.py): the share of the mono mix's power spectrum in a band,
checked by hand on tones, mixes and silence; its argument checks; both audio forms."""

import math

import pytest
import torch

from flowrl.reward_models import RewardError, build_reward, check_reward_args, list_rewards
from flowrl.reward_models.audio import BandEnergyReward, band_fraction, tone

RATE = 16000


def _score(reward, audio, rate=RATE):
    return reward({"audio": audio, "sample_rate": rate}, [""] * len(audio), [{} for _ in audio]).scores


def test_registered_with_its_contract():
    assert "band_energy" in list_rewards()
    reward = build_reward("band_energy", low_hz=100.0, high_hz=1000.0)
    assert isinstance(reward, BandEnergyReward)
    assert reward.modality == "audio" and reward.score_range == (0.0, 1.0)


@pytest.mark.parametrize("window", ["hann", "none"])
def test_tones_mixes_and_silence_by_hand(window):
    reward = build_reward("band_energy", low_hz=200.0, high_hz=1000.0, window=window)
    inside, outside = tone(440.0, 1.0, RATE), tone(3000.0, 1.0, RATE)
    off_bin = tone(437.3, 1.0, RATE)  # not a whole number of cycles: leakage
    audio = torch.stack([inside, outside, inside + outside, torch.zeros(RATE), off_bin])[:, None]  # (5, 1, N)
    scores = _score(reward, audio)
    assert scores.dtype == torch.float32 and scores.shape == (5,)
    assert scores[0] == pytest.approx(1.0, abs=1e-6)  # a tone in the band: all its energy
    assert scores[1] == pytest.approx(0.0, abs=1e-6)  # a tone outside
    assert scores[2] == pytest.approx(0.5, abs=1e-6)  # two equal tones, one in and one out: half
    assert scores[3] == 0.0 and not torch.isnan(scores).any()  # silence: 0, no NaN
    assert scores[4] == pytest.approx(1.0, abs=1e-3)
    assert torch.all((scores >= 0) & (scores <= 1))


def test_mapping_and_tensor_with_sample_rate_agree_and_stereo_is_mixed_to_mono():
    left, right = tone(440.0, 0.5, RATE), tone(3000.0, 0.5, RATE)
    stereo = torch.stack([torch.stack([left, right]), torch.stack([left, left])])  # (2, 2, N)
    as_mapping = _score(build_reward("band_energy", low_hz=200.0, high_hz=1000.0), stereo)
    as_tensor = build_reward("band_energy", low_hz=200.0, high_hz=1000.0, sample_rate=RATE)(
        stereo, ["", ""], [{}, {}]
    ).scores
    assert torch.equal(as_mapping, as_tensor)
    assert as_mapping.tolist() == pytest.approx([0.5, 1.0], abs=1e-4)
    mono = build_reward("band_energy", low_hz=200.0, high_hz=1000.0, sample_rate=RATE)(stereo[:, 0], ["", ""], [{}, {}])
    assert mono.scores[0] == pytest.approx(1.0, abs=1e-6)  # (B, N): one channel
    with pytest.raises(RewardError, match="sample rate is unknown"):
        build_reward("band_energy", low_hz=200.0, high_hz=1000.0)(stereo, ["", ""], [{}, {}])


def test_the_sample_rate_sets_the_frequencies_and_high_is_clipped_to_nyquist():
    # the same samples read at half the rate hold a tone of half the frequency
    samples = tone(440.0, 1.0, RATE)[None, None]
    assert _score(build_reward("band_energy", low_hz=200.0, high_hz=300.0), samples, RATE // 2)[0] == pytest.approx(
        1.0, abs=1e-6
    )
    # high above Nyquist (8 kHz): clipped; the whole spectrum is [0, Nyquist]
    noise = torch.randn(2, 1, RATE, generator=torch.Generator().manual_seed(0))
    everything = _score(build_reward("band_energy", low_hz=0.0, high_hz=1e9), noise)
    assert everything.tolist() == pytest.approx([1.0, 1.0], abs=1e-6)
    assert _score(build_reward("band_energy", low_hz=0.0, high_hz=math.inf), noise).tolist() == pytest.approx(
        [1.0, 1.0], abs=1e-6
    )
    # white noise spreads evenly: the lower half of the spectrum holds about half its energy
    half = _score(build_reward("band_energy", low_hz=0.0, high_hz=4000.0, window="none"), noise)
    assert half.tolist() == pytest.approx([0.5, 0.5], abs=0.03)
    with pytest.raises(RewardError, match="Nyquist"):
        _score(build_reward("band_energy", low_hz=8000.0, high_hz=9000.0), noise)


def test_band_fraction_directly():
    mono = torch.stack([tone(50.0, 1.0, 256), tone(100.0, 1.0, 256)])
    assert band_fraction(mono, 256, 40.0, 60.0).tolist() == pytest.approx([1.0, 0.0], abs=1e-6)


@pytest.mark.parametrize(
    "args, culprit",
    [
        ({"low_hz": -1.0, "high_hz": 100.0}, "low_hz=-1.0"),
        ({"low_hz": 100.0, "high_hz": 100.0}, "high_hz=100.0 must exceed low_hz=100.0"),
        ({"low_hz": 200.0, "high_hz": 100.0}, "high_hz=100.0 must exceed"),
        ({"low_hz": math.nan, "high_hz": 100.0}, "low_hz=nan"),
        ({"low_hz": 0.0, "high_hz": 100.0, "window": "hamming"}, "window"),
        ({"low_hz": 0.0, "high_hz": 100.0, "sample_rate": 0}, "sample_rate=0"),
    ],
)
def test_bad_arguments_are_refused_in_one_line_naming_them(args, culprit):
    with pytest.raises(RewardError, match=culprit) as err:
        check_reward_args("band_energy", args)
        BandEnergyReward(**args)
    assert "\n" not in str(err.value)


def test_missing_or_mistyped_arguments_are_refused_before_building():
    with pytest.raises(RewardError, match="needs argument 'high_hz'"):
        check_reward_args("band_energy", {"low_hz": 1.0})
    with pytest.raises(RewardError, match="low_hz must be a number"):
        check_reward_args("band_energy", {"low_hz": "1", "high_hz": 2.0})
    with pytest.raises(RewardError, match="did you mean 'high_hz'"):
        check_reward_args("band_energy", {"low_hz": 1.0, "hi_hz": 2.0})
