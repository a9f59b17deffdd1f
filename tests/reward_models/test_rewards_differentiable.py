"""Differentiable rewards (``flowrl.reward_models.differentiable``): ``score_grad`` gives the reward's own value
(its torch preprocessing, ``preprocess="fast"``) with autograd back to the media, on tiny CLIP-family models built
offline; the weighted sum the loss calls; the one-line refusal of a reward without a gradient."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from flowrl.reward_models import RewardError
from flowrl.reward_models.differentiable import (
    GradRewardSum,
    Smoothness,
    check_differentiable_names,
    is_differentiable,
    total_variation,
)
from tiny_clip import tiny_clip

PROMPTS = ["a red cube", "two blue spheres on grass"]


def _images(n=2, h=48, w=40, seed=1):
    return torch.rand(n, 3, h, w, generator=torch.Generator().manual_seed(seed))


def test_smoothness_by_hand():
    # a flat image: no variation, 0; a 2x2 checkerboard of 0 and 1: down 1 and across 1, so -2;
    # columns [0, 0.5] repeated down: down 0, across 0.5, so -0.5
    flat = torch.full((1, 3, 4, 4), 0.3)
    board = torch.tensor([[0.0, 1.0], [1.0, 0.0]]).expand(1, 3, 2, 2)
    ramp = torch.tensor([[0.0, 0.5], [0.0, 0.5]]).expand(1, 3, 2, 2)
    got = Smoothness().score_grad(torch.cat([flat[..., :2, :2], board, ramp]), ["a"] * 3, [{}] * 3)
    torch.testing.assert_close(got, torch.tensor([0.0, -2.0, -0.5]))
    video = torch.cat([board, ramp])[None]  # (1, F=2, 3, 2, 2): the mean over frames, -1.25
    torch.testing.assert_close(total_variation(video), torch.tensor([1.25]))
    assert Smoothness()(board, ["a"], [{}]).scores.tolist() == [-2.0]
    assert Smoothness()({"video": video, "fps": 8.0}, ["a"], [{}]).scores.tolist() == [-1.25]  # a video mapping


def _clip_rewards():
    from flowrl.reward_models.aesthetic import AestheticReward, PreferenceMLP
    from flowrl.reward_models.clipscore import ClipScoreReward
    from flowrl.reward_models.pickscore import PickScoreReward

    model, processor = tiny_clip()
    torch.manual_seed(1)
    mlp = PreferenceMLP(model.config.projection_dim)
    return {
        "pickscore": PickScoreReward.from_components(model, processor, device="cpu", preprocess="fast"),
        "clipscore": ClipScoreReward.from_components(model, processor, device="cpu", preprocess="fast"),
        "clipscore_flow_grpo": ClipScoreReward.from_components(
            model, processor, device="cpu", formula="flow_grpo", preprocess="fast"
        ),
        "aesthetic": AestheticReward.from_components(
            model, processor.image_processor, mlp, device="cpu", preprocess="fast"
        ),  # fmt: skip
    }


@pytest.mark.parametrize("name", ["pickscore", "clipscore", "clipscore_flow_grpo", "aesthetic"])
def test_clip_family_score_grad_is_the_fast_score_with_a_gradient(name):
    reward = _clip_rewards()[name]
    media = _images().requires_grad_(True)
    scores = reward.score_grad(media, PROMPTS, [{}, {}])
    assert scores.shape == (2,) and scores.requires_grad
    torch.testing.assert_close(scores.detach(), reward(media.detach(), PROMPTS, [{}, {}]).scores, rtol=1e-5, atol=1e-6)
    (grad,) = torch.autograd.grad(scores.sum(), media)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0
    assert is_differentiable(reward) and is_differentiable(type(reward))


def test_hpsv2_score_grad_is_the_fast_score_with_a_gradient():
    from pathlib import Path

    open_clip = pytest.importorskip("open_clip")
    from flowrl.reward_models.hps import HPSv2Reward

    open_clip.add_model_config(Path(__file__).parents[1] / "assets" / "rewards" / "flowrl-tiny-openclip.json")
    torch.manual_seed(0)
    model = open_clip.create_model("flowrl-tiny-openclip", pretrained=None).eval()
    tokenizer = open_clip.get_tokenizer("flowrl-tiny-openclip")
    reward = HPSv2Reward.from_components(model, tokenizer, device="cpu", preprocess="fast")
    media = _images().requires_grad_(True)
    scores = reward.score_grad(media, PROMPTS, [])
    torch.testing.assert_close(scores.detach(), reward(media.detach(), PROMPTS, []).scores, rtol=1e-5, atol=1e-6)
    (grad,) = torch.autograd.grad(scores.sum(), media)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_reference_preprocessing_still_scores_while_score_grad_stays_in_torch():
    from flowrl.reward_models.pickscore import PickScoreReward

    model, processor = tiny_clip()
    reference = PickScoreReward.from_components(model, processor, device="cpu")  # uint8 + Pillow
    fast = PickScoreReward.from_components(model, processor, device="cpu", preprocess="fast")
    media = _images()
    torch.testing.assert_close(reference.score_grad(media, PROMPTS, []), fast(media, PROMPTS, []).scores)


def test_video_reward_over_pickscore_backpropagates_through_its_frames():
    from flowrl.reward_models.video import VideoFrameReward

    inner = _clip_rewards()["pickscore"]
    reward = VideoFrameReward(inner, frames=3, aggregate="mean")
    video = torch.rand(2, 5, 3, 32, 32, generator=torch.Generator().manual_seed(2)).requires_grad_(True)
    scores = reward.score_grad(video, PROMPTS, [{}, {}])
    torch.testing.assert_close(scores.detach(), reward(video.detach(), PROMPTS, [{}, {}]).scores, rtol=1e-5, atol=1e-6)
    (grad,) = torch.autograd.grad(scores.sum(), video)
    assert grad[:, [0, 2, 4]].abs().sum() > 0 and grad[:, [1, 3]].abs().sum() == 0  # frames 0, 2, 4 are scored
    assert reward.differentiable


def test_the_weighted_sum_counts_its_calls_and_skips_weight_zero():
    from flowrl.reward_models.jpeg import JpegCompressibility

    rewards = {"smoothness": (Smoothness(), 2.0), "jpeg_compressibility": (JpegCompressibility(), 0.0)}
    total = GradRewardSum(rewards)
    media = _images(h=4, w=4).requires_grad_(True)
    got = total(media, PROMPTS, [{}, {}])
    torch.testing.assert_close(got, 2 * Smoothness().score_grad(media, PROMPTS, []))
    assert total.take_calls() == 2 and total.take_calls() == 0


def test_a_reward_without_a_gradient_is_refused_in_one_line():
    from flowrl.reward_models.jpeg import JpegCompressibility

    with pytest.raises(RewardError, match="reward 'jpeg_compressibility' is not differentiable") as err:
        GradRewardSum({"jpeg_compressibility": (JpegCompressibility(), 1.0)})
    assert "\n" not in str(err.value)
    with pytest.raises(RewardError, match="every reward has weight 0"):
        GradRewardSum({"smoothness": (Smoothness(), 0.0)})
    # by name, before anything loads; the video reward is judged by the reward it wraps
    check_differentiable_names({"pickscore": 1.0, "jpeg_compressibility": 0.0}, {}, "reward_backprop")
    check_differentiable_names({"video": 1.0}, {}, "reward_backprop")  # over pickscore by default
    with pytest.raises(RewardError, match=r"reward 'video' \(over 'ocr'\) is not differentiable"):
        check_differentiable_names({"video": 1.0}, {"video": {"reward": "ocr"}}, "reward_backprop")
    with pytest.raises(RewardError, match="reward 'geneval' is not differentiable, and method reward_backprop"):
        check_differentiable_names({"geneval": 0.5}, {}, "reward_backprop")
