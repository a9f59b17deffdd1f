"""Edit rewards (reward_models/edit.py): SSIM and pixel similarity worked by hand, the two-image judge (source first,
then the edit) on a tiny local Qwen2.5-VL and against an OpenAI-compatible endpoint on loopback, the weights, the
one-line refusal of a sample without a source, the conformance check, and source images on the reward server's wire
(the served score equals the local one)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import base64
import io
import json
import threading

import numpy as np
import pytest
import torch
from PIL import Image

from _loopback import JsonHandler, serve
from flowrl.reward_models import RewardError, build_reward
from flowrl.reward_models.conformance import run_conformance
from flowrl.reward_models.edit import EDIT_TEMPLATE, EditReward, colour_score, pixel_similarity, ssim
from flowrl.reward_models.server import RewardService, make_server
from flowrl.reward_models.vlm import TransformersChat


def _grey(value: float, size: int = 16) -> torch.Tensor:
    return torch.full((1, 3, size, size), value)


# ---------------------------------------------------------------------------------------------- similarity by hand


def test_ssim_by_hand():
    # equal images: 1. Two flat images a, b: no variance or covariance, so SSIM = (2ab + C1) / (a^2 + b^2 + C1)
    # (the contrast-structure factor is C2 / C2); a = 0.5, b = 0.25: (0.25 + 1e-4) / (0.3125 + 1e-4) = 0.800064
    x = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    assert ssim(x, x).tolist() == pytest.approx([1.0, 1.0], abs=1e-5)
    assert ssim(_grey(0.5), _grey(0.25)).item() == pytest.approx(0.2501 / 0.3126, abs=1e-5)
    # luma 0.299 R + 0.587 G + 0.114 B: pure red 0.8 is luma 0.2392 against a flat grey of 0.2392: equal
    red = torch.zeros(1, 3, 16, 16)
    red[:, 0] = 0.8
    assert ssim(red, _grey(0.299 * 0.8)).item() == pytest.approx(1.0, abs=1e-5)
    assert ssim(_grey(0.5, 6), _grey(0.5, 6)).item() == pytest.approx(1.0)  # a window smaller than 11 pixels


def test_pixel_similarity_and_colour_by_hand():
    assert pixel_similarity(_grey(0.5), _grey(0.25)).item() == pytest.approx(0.75)
    image = torch.zeros(1, 3, 4, 4)
    image[:, 0], image[:, 1], image[:, 2] = 0.9, 0.3, 0.1  # red 0.9 against (0.3 + 0.1) / 2: (1 + 0.7) / 2
    assert colour_score(image.repeat(3, 1, 1, 1), ["make it red", "Blue!", "no colour"]).tolist() == pytest.approx(
        [0.85, (1 + 0.1 - 0.6) / 2, 0.5]
    )


def test_the_similarity_alone_and_the_weights():
    edited, source = _grey(0.5), _grey(0.25, 8)  # the source is resized to the edit's size
    reward = build_reward("edit", judge_weight=0.0, similarity_weight=1.0, similarity="pixel")
    out = reward(edited, ["p"], [{"source_images": [source[0]]}])
    assert out.scores.tolist() == pytest.approx([0.75]) and "judge_score" not in out.details
    with pytest.raises(RewardError, match="both 0"):
        build_reward("edit", judge_weight=0.0, similarity_weight=0.0)
    with pytest.raises(RewardError, match="similarity='lpips'; allowed: ssim, pixel"):
        build_reward("edit", judge_weight=0.0, similarity="lpips")


def test_a_sample_without_its_source_is_one_line():
    reward = build_reward("edit_toy")
    with pytest.raises(RewardError, match=r"sample 1 has none \(metadata\['source_images'\]") as err:
        reward(torch.rand(2, 3, 8, 8), ["red", "red"], [{"source_images": [torch.rand(3, 8, 8)]}, {}])
    assert "\n" not in str(err.value)


def test_edit_toy_depends_on_the_source():
    reward = build_reward("edit_toy", similarity_weight=0.5)
    edited = torch.rand(1, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    near = reward(edited, ["make it red"], [{"source_images": [edited[0]]}]).scores
    far = reward(edited, ["make it red"], [{"source_images": [1 - edited[0]]}]).scores
    assert near.item() > far.item()


@pytest.mark.parametrize("name", ["edit_toy"])
def test_conformance_on_synthetic_edits(name):
    report = run_conformance(build_reward(name), name)
    assert report.ok, report.format()


# ---------------------------------------------------------------------------------------------- the judge


def test_the_judge_on_a_tiny_local_vlm(tiny_qwen25vl):
    model, processor = tiny_qwen25vl
    seen = []
    chat = TransformersChat(model, processor, device="cpu")
    generate = chat.generate

    def spy(requests, max_new_tokens):
        seen.extend(requests)
        return generate(requests, max_new_tokens)

    chat.generate = spy
    reward = EditReward(backend=chat, max_new_tokens=3, image_size=28, judge_weight=1.0, similarity_weight=1.0)
    edited = torch.rand(2, 3, 32, 32)
    sources = [torch.zeros(3, 40, 24), torch.ones(3, 32, 32)]
    out = reward(edited, ["add a hat", "remove the dog"], [{"source_images": [s]} for s in sources])
    # random weights write no score: the judge's fallback 0, so the score is the similarity's half
    assert out.details["judge_score"].tolist() == [0.0, 0.0]
    assert out.scores.tolist() == pytest.approx((out.details["similarity"] / 2).tolist(), abs=1e-6)
    assert [len(r.images) for r in seen] == [2, 2] and seen[0].text == EDIT_TEMPLATE.format(prompt="add a hat")
    assert seen[0].images[0].max() == 0 and seen[1].images[0].min() == 255  # Image 1 is the source


class _Judge(JsonHandler):
    """An OpenAI-compatible judge: 'Final Score: 8' when Image 2 is brighter than Image 1, else 2."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        content = body["messages"][0]["content"]
        urls = [c["image_url"]["url"] for c in content if c["type"] == "image_url"]
        assert len(urls) == 2 and "Instruction: brighten it" in content[-1]["text"]
        means = [np.asarray(Image.open(io.BytesIO(base64.b64decode(u.split(",", 1)[1])))).mean() for u in urls]
        self._send(200, {"choices": [{"message": {"content": f"Final Score: {8 if means[1] > means[0] else 2}"}}]})


def test_the_judge_against_an_openai_endpoint():
    with serve(_Judge) as url:
        reward = build_reward("edit", base_url=url, model="served", judge_weight=3.0, similarity_weight=1.0,
                              similarity="pixel", image_size=16)  # fmt: skip
        source = torch.full((3, 16, 16), 0.4)
        out = reward(torch.stack([torch.full((3, 16, 16), 0.6), torch.full((3, 16, 16), 0.2)]),
                     ["brighten it"] * 2, [{"source_images": [source]}] * 2)  # fmt: skip
    # (3 x 0.8 + 1 x 0.8) / 4 and (3 x 0.2 + 1 x 0.8) / 4: pixel similarity 1 - 0.2 both
    assert out.details["judge_score"].tolist() == pytest.approx([0.8, 0.2])
    assert out.scores.tolist() == pytest.approx([0.8, 0.35], abs=1e-6)


# ---------------------------------------------------------------------------------------------- on the wire


@pytest.mark.parametrize("media_format", [None, "array"])
def test_source_images_travel_to_the_reward_server(media_format):
    service = RewardService("edit_toy", build_reward("edit_toy"), token="t")
    server = make_server(service, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        remote = build_reward("remote", url=url, token="t", batch_size=2, media_format=media_format)
        gen = torch.Generator().manual_seed(3)
        edited = (torch.rand(3, 3, 16, 16, generator=gen) * 255).round() / 255  # PNG-exact
        sources = [[(torch.rand(3, h, 12, generator=gen) * 255).round() / 255] for h in (16, 20, 8)]
        metadata = [{"source_images": s, "group": i} for i, s in enumerate(sources)]
        prompts = ["make it red", "make it blue", "make it green"]
        served = remote(edited, prompts, metadata)
        local = build_reward("edit_toy")(edited, prompts, metadata)
        torch.testing.assert_close(served.scores, local.scores, rtol=0, atol=1e-6)
        assert all("source_images" in m for m in metadata)  # the caller's metadata is left as it was
    finally:
        server.shutdown()
        server.server_close()
