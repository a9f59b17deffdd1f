"""Reward models: hand-checked OCR and JPEG values, real RapidOCR / Tesseract on rendered text, PickScore on a
tiny random CLIP, the registry and the weighted sum. CPU only, offline."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers / huggingface_hub are imported

import glob
import io
import logging
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw, ImageFont

from flowrl.reward_models import (
    RewardError,
    RewardOutput,
    WeightedReward,
    build_reward,
    check_reward_name,
    list_rewards,
    register_reward,
)
from flowrl.reward_models import base as reward_base
from flowrl.reward_models.jpeg import JpegCompressibility, JpegIncompressibility
from flowrl.reward_models.ocr import OcrReward, extract_quoted, ocr_score
from tiny_clip import tiny_clip as build_tiny_clip

# ---------------------------------------------------------------- helpers: user rewards given as "module:attr"


def mean_brightness(media, prompts, metadata, scale=1.0):
    """A user's reward function: mean pixel value per image, times ``scale``."""
    return scale * media.mean(dim=(1, 2, 3))


def constant_one(media, prompts, metadata):
    return [1.0] * len(prompts)


def returns_nan(media, prompts, metadata):
    return RewardOutput(scores=torch.tensor([0.5, float("nan")]))


def returns_wrong_shape(media, prompts, metadata):
    return RewardOutput(scores=torch.zeros(len(prompts), 2))


def _spec(attr: str) -> str:
    return f"{__name__}:{attr}"  # this test module, importable under whatever name pytest gave it


def _to_tensor(image: Image.Image) -> torch.Tensor:
    """PIL RGB -> (1, 3, H, W) float in [0, 1]."""
    return torch.from_numpy(np.array(image)).permute(2, 0, 1)[None].float() / 255


def _font(size: int) -> ImageFont.FreeTypeFont:
    found = sorted(glob.glob("/usr/share/fonts/**/DejaVuSans-Bold.ttf", recursive=True))
    return ImageFont.truetype(found[0], size) if found else ImageFont.load_default(size=size)


def render_text(text: str, size: int = 512) -> torch.Tensor:
    """Dark text on a light background, centred, as (1, 3, size, size)."""
    image = Image.new("RGB", (size, size), (245, 245, 240))
    ImageDraw.Draw(image).text((size // 2, size // 2), text, fill=(20, 20, 20), font=_font(64), anchor="mm")
    return _to_tensor(image)


# ---------------------------------------------------------------- OCR: pure scoring


@pytest.mark.parametrize(
    ("recognised", "target", "expected"),
    [
        ("hallo", "hello", 0.8),  # one substitution over 5 chars: 1 - 1/5
        ("helo", "hello", 0.8),  # one insertion: 1 - 1/5
        ("Helo Wrld", "Hello World", 0.8),  # 'helowrld' vs 'helloworld': 2 edits over 10
        ("hellp world extra", "hello world", 0.4),  # 1 substitution + 5 deletions = 6 over 10
        ("xx HELLO yy", "hello", 1.0),  # substring after lower-casing and removing spaces
        ("Hello World", "helloworld", 1.0),
        ("", "abc", 0.0),  # distance 3 = len(target)
        ("zzzzzzzzzzzz", "ab", 0.0),  # distance 12 capped at len(target) = 2
    ],
)
def test_ocr_score_hand_values(recognised, target, expected):
    assert ocr_score(recognised, target) == pytest.approx(expected)


def test_ocr_score_empty_target_is_an_error():
    with pytest.raises(RewardError, match="empty"):
        ocr_score("anything", "  ")


def test_extract_quoted():
    assert extract_quoted('A neon sign that says "Open Late" at night') == "Open Late"
    assert extract_quoted('a "first" and a "second"') == "first"


def test_extract_quoted_without_quotes_names_the_prompt():
    prompt = "a cat on a mat"
    with pytest.raises(RewardError) as info:
        extract_quoted(prompt)
    assert repr(prompt) in str(info.value) and "\n" not in str(info.value)


class _Reads:
    """An OCR back end that reads the same text from every image."""

    def __init__(self, text: str):
        self.text = text

    def read(self, image: np.ndarray) -> str:
        return self.text


def test_a_single_quote_takes_the_text_after_it_as_flow_grpo():
    # Flow-GRPO's target is prompt.split('"')[1]: with one quote, everything after it
    assert extract_quoted('a sign saying "OPEN LATE') == "OPEN LATE"
    reward = OcrReward(backend=_Reads("xx open late xx"))
    out = reward(torch.zeros(1, 3, 8, 8), ['a sign saying "Open Late'], [{}])
    assert out.scores.tolist() == [1.0] and out.details["target"] == ["Open Late"]
    with pytest.raises(RewardError, match="empty"):  # the quote ends the prompt: nothing to read
        reward(torch.zeros(1, 3, 8, 8), ['a blank sign "'], [{}])


class _FailsOnSecond:
    """An OCR back end (the ``OcrBackend`` protocol) whose second call raises."""

    def __init__(self):
        self.calls = 0

    def read(self, image: np.ndarray) -> str:
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("engine exploded")
        return "hello"


def test_ocr_failure_on_one_image_gives_zero_and_a_warning(caplog):
    reward = OcrReward(backend=_FailsOnSecond())
    images = torch.zeros(3, 3, 8, 8)
    with caplog.at_level(logging.WARNING, logger="flowrl.reward_models.ocr"):
        out = reward(images, ['"hello"', '"hello"', '"help"'], [{}, {}, {}])
    assert out.scores.tolist() == pytest.approx([1.0, 0.0, 0.5])  # 'hello' vs 'help': 2 edits over 4
    assert "OCR failed on image 1" in caplog.text


def test_ocr_target_from_metadata_and_empty_target_error():
    reward = OcrReward(backend=_FailsOnSecond())
    out = reward(torch.zeros(1, 3, 8, 8), ["no quotes here"], [{"ocr_text": "Hello"}])
    assert out.scores.tolist() == [1.0]
    with pytest.raises(RewardError, match="empty"):
        reward(torch.zeros(1, 3, 8, 8), ['a sign that says ""'], [{}])


# ---------------------------------------------------------------- OCR: real engines on rendered text


@pytest.fixture(scope="module")
def rapidocr_reward():
    pytest.importorskip("rapidocr_onnxruntime")
    return build_reward("ocr", backend="rapidocr")


def _check_real_ocr(reward):
    image = render_text("Hello World")
    images = torch.cat([image, image, torch.ones_like(image)])  # the last is blank
    prompts = ['A sign that says "Hello World"', 'A sign that says "Quantum Zebra"', 'A sign "Hello"']
    out = reward(images, prompts, [{}, {}, {}])
    right, wrong, blank = out.scores.tolist()
    assert right > 0.9, out.details
    assert wrong < 0.5, out.details
    assert blank == 0.0


def test_rapidocr_reads_rendered_text(rapidocr_reward):
    _check_real_ocr(rapidocr_reward)


def test_tesseract_reads_rendered_text():
    pytest.importorskip("pytesseract")
    if shutil.which("tesseract") is None:
        pytest.skip("tesseract binary not installed (apt-get install tesseract-ocr)")
    _check_real_ocr(OcrReward(backend="tesseract"))


# ---------------------------------------------------------------- JPEG


def _jpeg_kb(image: torch.Tensor) -> float:
    """Independent measurement: uint8 by rounding, PIL JPEG q95, bytes / 1000."""
    array = np.clip(np.round(image.permute(1, 2, 0).numpy() * 255.0), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="JPEG", quality=95)
    return len(buffer.getvalue()) / 1000


def test_jpeg_flat_compresses_better_than_noise():
    generator = torch.Generator().manual_seed(0)
    flat = torch.full((1, 3, 64, 64), 0.4)
    noise = torch.rand(1, 3, 64, 64, generator=generator)
    images = torch.cat([flat, noise])
    out = JpegCompressibility()(images, ["a", "b"], [{}, {}])
    assert out.scores.shape == (2,)
    assert out.scores[0] > out.scores[1]
    expected = [-_jpeg_kb(image) / 500 for image in images]
    assert out.scores.tolist() == pytest.approx(expected, rel=1e-6)
    assert out.details["size_kb"].tolist() == pytest.approx([-500 * e for e in expected], rel=1e-6)
    opposite = JpegIncompressibility()(images, ["a", "b"], [{}, {}])
    assert opposite.scores.tolist() == pytest.approx([-e for e in expected], rel=1e-6)


def test_jpeg_rejects_non_image_shapes():
    with pytest.raises(RewardError, match="jpeg_compressibility"):
        build_reward("jpeg_compressibility")(torch.rand(2, 8, 8), ["a", "b"], [{}, {}])


# ---------------------------------------------------------------- PickScore on a tiny random CLIP


@pytest.fixture(scope="module")
def tiny_clip():
    return build_tiny_clip()


def test_pickscore_matches_hand_computation(tiny_clip):
    from flowrl.reward_models.pickscore import PickScoreReward

    model, processor = tiny_clip
    reward = PickScoreReward.from_components(model, processor, device="cpu")
    images = torch.rand(3, 3, 48, 40, generator=torch.Generator().manual_seed(1))
    prompts = ["a cat", "a dog " * 60, "a red cube"]  # the second exceeds 77 tokens: truncated
    out = reward(images, prompts, [{}] * 3)
    assert out.scores.shape == (3,) and torch.isfinite(out.scores).all()

    with torch.no_grad():
        pixels = reward.transform(images)
        tokens = processor.tokenizer(prompts, padding=True, truncation=True, max_length=77, return_tensors="pt")
        image_out = model.get_image_features(pixel_values=pixels)
        text_out = model.get_text_features(**tokens)
        img = getattr(image_out, "pooler_output", image_out)
        txt = getattr(text_out, "pooler_output", text_out)
        cos = (img * txt).sum(-1) / (img.norm(dim=-1) * txt.norm(dim=-1))
        expected = model.logit_scale.exp() * cos / 26  # Flow-GRPO: raw PickScore / 26
    assert tokens["input_ids"].shape[1] == 77
    assert out.scores.tolist() == pytest.approx(expected.tolist(), abs=1e-5)
    assert out.details["raw"].tolist() == pytest.approx((26 * expected).tolist(), abs=1e-4)


def test_pickscore_preprocessing_follows_the_processor(tiny_clip):
    from flowrl.reward_models.pickscore import ClipImageTransform

    _, processor = tiny_clip
    smooth = torch.nn.functional.interpolate(torch.rand(2, 3, 6, 5), size=(96, 80), mode="bilinear")
    pixels = (smooth * 255).round().to(torch.uint8)  # (2, 3, 96, 80)
    pil_images = [Image.fromarray(p.permute(1, 2, 0).numpy()) for p in pixels]
    reference = processor.image_processor(images=pil_images, return_tensors="pt")["pixel_values"]
    ours = ClipImageTransform(processor.image_processor)(pixels.float() / 255)
    assert ours.shape == reference.shape == (2, 3, 32, 32)
    assert (ours - reference).abs().max() < 0.05  # the processor rounds its resized image to uint8


def test_pickscore_missing_weights_is_one_clear_line():
    from flowrl.reward_models.pickscore import PickScoreReward

    with pytest.raises(RewardError) as info:
        PickScoreReward(model="flowrl-tests/no-such-model", processor="flowrl-tests/no-such-processor")
    message = str(info.value)
    assert "no-such-model" in message and "local folder" in message and "\n" not in message


# ---------------------------------------------------------------- registry and weighted sum


def test_builtin_names_are_registered():
    assert {"jpeg_compressibility", "jpeg_incompressibility", "ocr", "pickscore", "geneval"} <= set(list_rewards())


def test_unknown_name_suggests_the_closest():
    with pytest.raises(RewardError, match="did you mean 'jpeg_compressibility'"):
        check_reward_name("jpeg_compresibility")
    with pytest.raises(RewardError, match="did you mean 'pickscore'"):
        build_reward("pickscor")


def test_duplicate_registration_is_refused():
    with reward_base.REWARDS.temporary():
        register_reward("ocr", "flowrl.reward_models.ocr:OcrReward")  # the same target again: allowed
        with pytest.raises(ValueError, match="already registered"):
            register_reward("ocr", _spec("constant_one"))
        register_reward("constant_one_for_test", _spec("constant_one"))
        assert "constant_one_for_test" in reward_base.list_rewards()
    assert "constant_one_for_test" not in reward_base.list_rewards()  # forgotten after the block


def test_importing_the_package_stays_light():
    code = (
        "import sys, flowrl.reward_models; "
        "heavy = [m for m in ('transformers', 'onnxruntime', 'rapidocr_onnxruntime') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


def test_user_function_through_build_reward():
    reward = build_reward(_spec("mean_brightness"), scale=2.0)
    images = torch.stack([torch.full((3, 4, 4), 0.25), torch.full((3, 4, 4), 0.5)])
    out = reward(images, ["a", "b"], [{}, {}])
    assert out.scores.tolist() == pytest.approx([0.5, 1.0])


def test_weighted_reward_sums_components():
    images = torch.stack([torch.full((3, 4, 4), 0.25), torch.full((3, 4, 4), 0.5)])
    weighted = WeightedReward(
        {"bright": (build_reward(_spec("mean_brightness")), 2.0), "one": (build_reward(_spec("constant_one")), -0.5)}
    )
    out = weighted(images, ["a", "b"], [{}, {}])
    assert out.scores.tolist() == pytest.approx([2 * 0.25 - 0.5, 2 * 0.5 - 0.5])
    assert out.details["components"]["bright"].tolist() == pytest.approx([0.25, 0.5])


@pytest.mark.parametrize(("attr", "match"), [("returns_nan", "non-finite"), ("returns_wrong_shape", "shape")])
def test_weighted_reward_errors_name_the_reward(attr, match):
    weighted = WeightedReward(
        {"good": (build_reward(_spec("constant_one")), 1.0), "broken": (build_reward(_spec(attr)), 1.0)}
    )
    with pytest.raises(RewardError, match=f"'broken'.*{match}"):
        weighted(torch.zeros(2, 3, 4, 4), ["a", "b"], [{}, {}])
