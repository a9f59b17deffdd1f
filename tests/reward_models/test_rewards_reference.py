"""Each learned reward against a reference pipeline written here from the model's documented preprocessing.

The references, as their scorers document them (each written out below, not imported from flowrl):

* PickScore, LAION aesthetic (as Flow-GRPO runs them), CLIPScore's hessel / torchmetrics / cos: the float
  images are rounded to uint8 PIL images and handed to transformers' CLIP processor (the Pillow one that
  transformers 4 used): shortest side to the processor's ``shortest_edge`` with the long side
  ``int(edge * long / short)``, Pillow bicubic, centre crop at ``(H - h) // 2``, ``/ 255``, CLIP mean/std;
* ImageReward: torchvision ``Resize(n, BICUBIC)``, ``CenterCrop(n)``, ``ToTensor``, ``Normalize`` on the PIL
  image;
* HPSv2 (tgxs002/HPSv2 ``hpsv2/src/open_clip/transform.py`` at 866735e, ``image_transform`` with
  ``resize_longest_max=True``, as Flow-GRPO's ``flow_grpo/hpsv2_scorer.py`` at 94e23ee calls it on uint8 PIL
  images): ``ToTensor`` first, then ``ResizeMaxSize``: longest side to n (each side
  ``round(side * n / longest)``) by torchvision's bicubic resize of the float tensor (antialiased, no clamp),
  zero padding ``[pad_w // 2, pad_h // 2, rest, rest]`` to n x n, then ``Normalize``;
* CLIPScore as Flow-GRPO: torchvision ``Resize(shortest_edge)`` (tensor default: bilinear, antialiased),
  ``CenterCrop``, ``Normalize`` on the float images; score = ``logits_per_image.diagonal() / 30``.

Tiny random models of the real architectures, images of several sizes and aspect ratios (including one whose
crop offset is ``x.5``, where rounding and flooring differ, and ones smaller than the model's input). The
tolerance: pixels within 1e-5 (both sides round the same uint8 values), scores within 1e-5. CPU, offline.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from flowrl.reward_models import RewardError, build_reward, check_reward_args
from tiny_clip import tiny_clip as build_tiny_clip
from tiny_imagereward import tiny_imagereward as build_tiny_imagereward

ASSETS = Path(__file__).parents[1] / "assets" / "rewards"
PIXEL_TOL = 1e-5
SCORE_TOL = 1e-5
# (H, W): square, portrait, landscape, extreme ratios, smaller than the 32 px input, and 32 x 39 / 39 x 32
# whose 7 px excess crops at offset round(3.5) = 4 (torchvision) but (7 // 2) = 3 (floor)
SIZES = [(32, 32), (48, 40), (40, 48), (37, 100), (100, 37), (32, 39), (39, 32), (17, 23), (64, 47)]
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def _images(n: int, h: int, w: int, seed: int = 0) -> torch.Tensor:
    """Smooth random images with a saturated block and a hard edge (where uint8 rounding and resizing bite)."""
    g = torch.Generator().manual_seed(seed)
    smooth = torch.nn.functional.interpolate(torch.rand(n, 3, 4, 5, generator=g), size=(h, w), mode="bilinear")
    images = smooth.clone()
    images[..., : h // 3, : w // 2] = 1.0
    images[..., h // 2 :, w // 2 :] = torch.rand(n, 3, 1, 1, generator=g) * 0.1
    return images.clamp(0, 1)


def _pil(images: torch.Tensor) -> list:
    """Float (B, 3, H, W) -> uint8 PIL images, as Flow-GRPO converts before calling its scorers."""
    arrays = (images * 255).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()
    return [Image.fromarray(a) for a in arrays]


def _to_tensor(image) -> torch.Tensor:
    return torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)


def _normalise(x: torch.Tensor, mean=CLIP_MEAN, std=CLIP_STD) -> torch.Tensor:
    return (x - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1)


def clip_processor_reference(images: torch.Tensor, edge: int, crop: int) -> torch.Tensor:
    """transformers' CLIP processor on uint8 PIL images, written out from its documented steps."""
    out = []
    for image in _pil(images):
        w, h = image.size
        short, long = min(h, w), max(h, w)
        new_long = int(edge * long / short)
        new_h, new_w = (edge, new_long) if h <= w else (new_long, edge)
        image = image.resize((new_w, new_h), Image.Resampling.BICUBIC)
        top, left = (new_h - crop) // 2, (new_w - crop) // 2
        image = image.crop((left, top, left + crop, top + crop))
        out.append(_normalise(_to_tensor(image)))
    return torch.stack(out)


def imagereward_reference(images: torch.Tensor, n: int) -> torch.Tensor:
    """ImageReward's documented transform: torchvision Resize(n, BICUBIC), CenterCrop(n), ToTensor, Normalize."""
    from torchvision import transforms as T

    tf = T.Compose(
        [
            T.Resize(n, interpolation=T.InterpolationMode.BICUBIC),
            T.CenterCrop(n),
            T.ToTensor(),
            T.Normalize(CLIP_MEAN, CLIP_STD),
        ]
    )
    return torch.stack([tf(image) for image in _pil(images)])


def hpsv2_reference(images: torch.Tensor, n: int) -> torch.Tensor:
    """HPSv2's ToTensor + ResizeMaxSize(n, fill=0) + Normalize, written out with torchvision's functional ops
    (the resize and the padding act on the float tensor, in that order)."""
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as TF

    out = []
    for image in _pil(images):
        tensor = TF.to_tensor(image)  # (3, H, W) float
        h, w = tensor.shape[1:]
        scale = n / float(max(h, w))
        if scale != 1.0:
            new_h, new_w = round(h * scale), round(w * scale)
            tensor = TF.resize(tensor, [new_h, new_w], InterpolationMode.BICUBIC)
            pad_h, pad_w = n - new_h, n - new_w
            tensor = TF.pad(tensor, [pad_w // 2, pad_h // 2, pad_w - pad_w // 2, pad_h - pad_h // 2], fill=0)
        out.append(TF.normalize(tensor, CLIP_MEAN, CLIP_STD))
    return torch.stack(out)


def flow_grpo_clip_reference(images: torch.Tensor, edge: int, crop: int) -> torch.Tensor:
    """Flow-GRPO's CLIPScore transform: torchvision Resize / CenterCrop / Normalize on the float tensor."""
    from torchvision import transforms as T

    return T.Compose([T.Resize(edge), T.CenterCrop(crop), T.Normalize(CLIP_MEAN, CLIP_STD)])(images)


# ---------------------------------------------------------------------------------------------- tiny models


@pytest.fixture(scope="module")
def tiny_clip():
    model, processor = build_tiny_clip()
    model.eval()
    with torch.no_grad():  # widen the random init so that pixel differences show in the scores
        for param in model.vision_model.parameters():
            if param.ndim >= 2:
                param.normal_(0, 0.2)
    return model, processor


@pytest.fixture(scope="module")
def tiny_openclip():
    open_clip = pytest.importorskip("open_clip")
    open_clip.add_model_config(ASSETS / "flowrl-tiny-openclip.json")
    torch.manual_seed(0)
    model = open_clip.create_model("flowrl-tiny-openclip", pretrained=None).eval()
    with torch.no_grad():
        for param in model.visual.parameters():
            if param.ndim >= 2:
                param.normal_(0, 0.2)
    return model, open_clip.get_tokenizer("flowrl-tiny-openclip")


@pytest.fixture(scope="module")
def tiny_imagereward(tmp_path_factory):
    from transformers import BertTokenizer

    folder = tmp_path_factory.mktemp("imagereward_ref")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "cat", "red", "cube", "on", "the", "mat"]
    (folder / "vocab.txt").write_text("\n".join(words) + "\n")
    tokenizer = BertTokenizer(str(folder / "vocab.txt"))
    tokenizer.add_special_tokens({"bos_token": "[DEC]", "additional_special_tokens": ["[ENC]"]})
    return build_tiny_imagereward(tokenizer)[0], tokenizer


def _clip_cos(model, processor, pixels, prompts):
    with torch.no_grad():
        tokens = processor.tokenizer(prompts, padding=True, truncation=True, max_length=77, return_tensors="pt")
        img = model.get_image_features(pixel_values=pixels)
        txt = model.get_text_features(**tokens)
        img, txt = getattr(img, "pooler_output", img), getattr(txt, "pooler_output", txt)
        return (img * txt).sum(-1) / (img.norm(dim=-1) * txt.norm(dim=-1))


# ---------------------------------------------------------------------------------------------- the tests


def test_the_written_clip_reference_is_transformers_pillow_processor(tiny_clip):
    """The hand-written CLIP reference equals transformers' own Pillow processor on every size."""
    try:
        from transformers import CLIPImageProcessorPil as PilProcessor
    except ImportError:  # transformers 4: the default CLIPImageProcessor is the Pillow one
        from transformers import CLIPImageProcessor as PilProcessor
    processor = PilProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    for h, w in SIZES:
        images = _images(2, h, w)
        official = processor(images=_pil(images), return_tensors="pt")["pixel_values"]
        assert (clip_processor_reference(images, 32, 32) - official).abs().max() < PIXEL_TOL, (h, w)


@pytest.mark.parametrize(("h", "w"), SIZES)
def test_pickscore_equals_its_reference(tiny_clip, h, w):
    from flowrl.reward_models.pickscore import PickScoreReward

    model, processor = tiny_clip
    reward = PickScoreReward.from_components(model, processor, device="cpu")
    assert reward.preprocess == "reference"
    images, prompts = _images(2, h, w, seed=h * w), ["a cat", "a red cube"]
    pixels = clip_processor_reference(images, 32, 32)
    assert (reward.transform(images) - pixels).abs().max() < PIXEL_TOL
    expected = model.logit_scale.exp().item() * _clip_cos(model, processor, pixels, prompts) / 26
    assert reward(images, prompts, [{}, {}]).scores.tolist() == pytest.approx(expected.tolist(), abs=SCORE_TOL)


@pytest.mark.parametrize(("h", "w"), SIZES)
def test_aesthetic_equals_its_reference(tiny_clip, h, w):
    from flowrl.reward_models.aesthetic import AestheticReward, PreferenceMLP

    model, processor = tiny_clip
    torch.manual_seed(1)
    mlp = PreferenceMLP(16).eval()
    reward = AestheticReward.from_components(model, processor.image_processor, mlp, device="cpu")
    images = _images(2, h, w, seed=h + w)
    pixels = clip_processor_reference(images, 32, 32)
    with torch.no_grad():
        embed = model.get_image_features(pixel_values=pixels)
        embed = getattr(embed, "pooler_output", embed)
        expected = mlp(embed / torch.linalg.vector_norm(embed, dim=-1, keepdim=True))
    assert reward(images, ["x", "y"], [{}, {}]).scores.tolist() == pytest.approx(expected.tolist(), abs=SCORE_TOL)


@pytest.mark.parametrize(("h", "w"), SIZES)
def test_clipscore_hessel_equals_its_reference(tiny_clip, h, w):
    from flowrl.reward_models.clipscore import ClipScoreReward

    model, processor = tiny_clip
    reward = ClipScoreReward.from_components(model, processor, device="cpu")
    images, prompts = _images(2, h, w, seed=3), ["a cat", "a red cube on the mat"]
    cos = _clip_cos(model, processor, clip_processor_reference(images, 32, 32), prompts)
    out = reward(images, prompts, [{}, {}])
    assert out.details["cos"].tolist() == pytest.approx(cos.tolist(), abs=SCORE_TOL)
    assert out.scores.tolist() == pytest.approx((2.5 * cos.clamp(min=0)).tolist(), abs=SCORE_TOL)


@pytest.mark.parametrize(("h", "w"), SIZES)
def test_clipscore_flow_grpo_equals_flow_grpos_scorer(tiny_clip, h, w):
    from flowrl.reward_models.clipscore import ClipScoreReward

    model, processor = tiny_clip
    images, prompts = _images(3, h, w, seed=4), ["a cat", "a red cube on the mat", "zz"]
    with torch.no_grad():  # Flow-GRPO: model(pixel_values, **texts).logits_per_image.diagonal() / 30
        texts = processor.tokenizer(prompts, padding="max_length", truncation=True, max_length=77, return_tensors="pt")
        pixels = flow_grpo_clip_reference(images, 32, 32)
        expected = model(pixel_values=pixels, **texts).logits_per_image.diagonal() / 30
    for preprocess in ("reference", "fast"):  # the same torchvision pipeline either way
        reward = ClipScoreReward.from_components(
            model, processor, device="cpu", formula="flow_grpo", preprocess=preprocess
        )
        assert (reward.transform(images) - pixels).abs().max() < PIXEL_TOL
        out = reward(images, prompts, [{}] * 3)
        assert out.scores.tolist() == pytest.approx(expected.tolist(), abs=SCORE_TOL)
    assert reward.score_range == (None, None)


def test_clipscore_flow_grpo_may_be_negative():
    from flowrl.reward_models.clipscore import clip_score

    # logit scale x cos / 30: 100 x (-0.3) / 30 = -1; 100 x 0.24 / 30 = 0.8
    assert clip_score(torch.tensor([-0.3, 0.24]), "flow_grpo", 100.0).tolist() == pytest.approx([-1.0, 0.8])


@pytest.mark.parametrize(("h", "w"), SIZES)
def test_imagereward_equals_its_reference(tiny_imagereward, h, w):
    from flowrl.reward_models.imagereward import REWARD_MEAN, REWARD_STD, ImageRewardReward

    model, tokenizer = tiny_imagereward
    reward = ImageRewardReward.from_components(model, tokenizer, device="cpu")
    images, prompts = _images(2, h, w, seed=5), ["a red cube on the mat", "a cat"]
    pixels = imagereward_reference(images, 32)
    assert (reward.transform(images) - pixels).abs().max() < PIXEL_TOL
    tokens = tokenizer(prompts, padding="max_length", truncation=True, max_length=35, return_tensors="pt")
    with torch.no_grad():
        raw = model(pixels, tokens["input_ids"], tokens["attention_mask"])
    expected = (raw - REWARD_MEAN) / REWARD_STD
    assert reward(images, prompts, [{}, {}]).scores.tolist() == pytest.approx(expected.tolist(), abs=SCORE_TOL)


def test_imagereward_crop_rounds_half_to_even_in_both_modes(tiny_imagereward):
    """32 x 39: the 7 px excess crops from column round(3.5) = 4 (torchvision), not 7 // 2 = 3."""
    from flowrl.reward_models.imagereward import imagereward_transform

    for preprocess in ("reference", "fast"):
        geometry = imagereward_transform(32, preprocess).geometry
        assert geometry.crop_box(32, 39) == (0, 4, 32, 32) and geometry.crop_box(39, 32) == (4, 0, 32, 32)
        assert geometry.crop_box(32, 37) == (0, 2, 32, 32)  # round(2.5) = 2: half to even
    images = torch.zeros(1, 3, 32, 39)
    images[..., 3] = 1.0  # a white column the floored crop would keep and the rounded one drops
    ours = imagereward_transform(32, "fast")(images)
    assert (ours - imagereward_reference(images, 32)).abs().max() < PIXEL_TOL


@pytest.mark.parametrize(("h", "w"), SIZES)
def test_hpsv2_equals_its_reference(tiny_openclip, h, w):
    from flowrl.reward_models.hps import HPSv2Reward

    model, tokenizer = tiny_openclip
    reward = HPSv2Reward.from_components(model, tokenizer, device="cpu")
    images, prompts = _images(2, h, w, seed=6), ["a photo of a cat", "an oil painting"]
    pixels = hpsv2_reference(images, 32)
    assert (reward.transform(images) - pixels).abs().max() < PIXEL_TOL
    with torch.no_grad():
        img = model.encode_image(pixels)
        txt = model.encode_text(tokenizer(prompts))
        expected = (img * txt).sum(-1) / (img.norm(dim=-1) * txt.norm(dim=-1))
    assert reward(images, prompts, [{}, {}]).scores.tolist() == pytest.approx(expected.tolist(), abs=SCORE_TOL)


def test_hpsv2_resizes_the_float_tensor_without_clamping():
    """HPSv2's order (tgxs002/HPSv2 hpsv2/src/open_clip/transform.py at 866735e: ToTensor, then ResizeMaxSize
    on the tensor): the bicubic overshoot of a hard edge survives, which Pillow's uint8 resize clips.

    A 1 x 2 image [black, white] to longest side 4: 2 x 4, one black row above and below. Upscaling, torch's
    antialiased bicubic (a = -0.5, k(d) = 1.5|d|^3 - 2.5|d|^2 + 1 for |d| <= 1, -0.5|d|^3 + 2.5|d|^2 - 4|d| + 2
    for 1 < |d| < 2) weighs source pixels 0, 1 at output column i by k(j - (i + 0.5) / 2 + 0.5), normalised:
    column 0: k(0.25) = 111/128, k(1.25) = -9/128 -> (0 * 111 - 9) / 102 = -3/34 (below black);
    column 1: k(0.25) = 111/128, k(0.75) = 29/128 -> 29/140; columns 2, 3 mirror: 1 - 29/140, 1 + 3/34.
    A constant 0.5 image is first rounded to uint8 as Flow-GRPO does: round(127.5) = 128 -> 128/255.
    """
    from flowrl.reward_models.hps import hpsv2_transform

    transform = hpsv2_transform(4, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))  # mean 0, std 1: the pixels themselves
    edge = torch.tensor([0.0, 1.0]).view(1, 1, 1, 2).expand(1, 3, 1, 2)
    pixels = transform(edge)[0, 0]  # (4, 4)
    row = torch.tensor([-3 / 34, 29 / 140, 1 - 29 / 140, 1 + 3 / 34])
    assert torch.allclose(pixels[1], row, atol=1e-6) and torch.allclose(pixels[2], row, atol=1e-6)
    assert torch.equal(pixels[0], torch.zeros(4)) and torch.equal(pixels[3], torch.zeros(4))
    grey = transform(torch.full((1, 3, 1, 2), 0.5))[0, 0]
    assert torch.allclose(grey[1:3], torch.full((2, 4), 128 / 255), atol=1e-6)
    fast = hpsv2_transform(4, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), "fast")(edge)[0, 0]
    assert fast.min() >= 0 and fast.max() <= 1  # the fast path clamps


def test_hpsv2_pads_non_square_images_with_black(tiny_openclip):
    from flowrl.reward_models.hps import openclip_transform

    model, _ = tiny_openclip
    images = torch.ones(1, 3, 16, 64)  # white, 4:1 -> resized to 8 x 32, 12 black rows above and below
    for preprocess in ("reference", "fast"):
        pixels = openclip_transform(model, preprocess)(images)[0]  # normalised
        black = _normalise(torch.zeros(3, 1, 1))
        white = _normalise(torch.ones(3, 1, 1))
        assert torch.allclose(pixels[:, :12], black.expand(3, 12, 32), atol=1e-5)
        assert torch.allclose(pixels[:, 20:], black.expand(3, 12, 32), atol=1e-5)
        assert torch.allclose(pixels[:, 12:20], white.expand(3, 8, 32), atol=1e-5)


# ---------------------------------------------------------------------------------------------- fast path


FAST_PIXEL_MAX = 40 / 255  # measured: up to ~16-33/255 at saturated edges (docs/rewards.md)
FAST_PIXEL_MEAN = 1.5 / 255


def _fast_and_reference(tiny_clip, tiny_openclip, tiny_imagereward):
    from flowrl.reward_models.aesthetic import AestheticReward, PreferenceMLP
    from flowrl.reward_models.clipscore import ClipScoreReward
    from flowrl.reward_models.hps import HPSv2Reward
    from flowrl.reward_models.imagereward import ImageRewardReward
    from flowrl.reward_models.pickscore import PickScoreReward

    clip, processor = tiny_clip
    openclip, tokenizer = tiny_openclip
    blip, bert = tiny_imagereward
    torch.manual_seed(1)
    mlp = PreferenceMLP(16).eval()
    makers = {
        "pickscore": lambda p: PickScoreReward.from_components(clip, processor, "cpu", preprocess=p),
        "aesthetic": lambda p: AestheticReward.from_components(
            clip, processor.image_processor, mlp, "cpu", preprocess=p
        ),
        "clipscore": lambda p: ClipScoreReward.from_components(clip, processor, "cpu", formula="cos", preprocess=p),
        "imagereward": lambda p: ImageRewardReward.from_components(blip, bert, "cpu", preprocess=p),
        "hpsv2": lambda p: HPSv2Reward.from_components(openclip, tokenizer, "cpu", preprocess=p),
    }
    return {name: (make("fast"), make("reference")) for name, make in makers.items()}


def test_fast_path_keeps_the_geometry_and_stays_close(tiny_clip, tiny_openclip, tiny_imagereward):
    """The fast path differs from the reference only in pixel values: measured here in units of 1/255 of the
    un-normalised image, on every size; the numbers are those of docs/rewards.md."""
    pairs = _fast_and_reference(tiny_clip, tiny_openclip, tiny_imagereward)
    report = []
    for name, (fast, ref) in pairs.items():
        assert fast.transform.geometry == ref.transform.geometry
        std = ref.transform.std.view(3, 1, 1)
        worst, means, score_gap = 0.0, [], 0.0
        for h, w in SIZES + [(512, 512), (512, 768), (1024, 576)]:
            images = _images(2, h, w, seed=7)
            gap = ((fast.transform(images) - ref.transform(images)) * std).abs()  # back in [0, 1] units
            worst, means = max(worst, gap.max().item()), means + [gap.mean().item()]
            prompts = ["a cat", "a red cube"]
            diff = fast(images, prompts, [{}, {}]).scores - ref(images, prompts, [{}, {}]).scores
            score_gap = max(score_gap, diff.abs().max().item())
        report.append(f"{name}: max {worst * 255:.1f}/255, mean {np.mean(means) * 255:.2f}/255, score {score_gap:.2e}")
        assert worst < FAST_PIXEL_MAX and np.mean(means) < FAST_PIXEL_MEAN, report[-1]
    print("\n" + "\n".join(report))


# ---------------------------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        (
            "pickscore",
            {"preprocess": "refrence"},
            "reward_args.pickscore.preprocess: pickscore's preprocess must be one of 'reference', 'fast'; got 'refrence'",
        ),
        (
            "hpsv2",
            {"preprocess": 1},
            "reward_args.hpsv2.preprocess: hpsv2's preprocess must be one of 'reference', 'fast'; got 1",
        ),
        (
            "aesthetic",
            {"preprocess": "torch"},
            "reward_args.aesthetic.preprocess: aesthetic's preprocess must be one of",
        ),
        (
            "imagereward",
            {"preprocess": None},
            "reward_args.imagereward.preprocess: imagereward's preprocess must be one of",
        ),
        (
            "clipscore",
            {"formula": "flowgrpo"},
            "reward_args.clipscore.formula: clipscore's formula must be one of 'hessel', 'torchmetrics', 'cos', 'flow_grpo'; got 'flowgrpo'",
        ),
        (
            "jpeg_incompressibility",
            {"raw_kb": "yes"},
            "reward_args.jpeg_incompressibility.raw_kb: jpeg_incompressibility's raw_kb must be a bool (true / false); got 'yes'",
        ),
        (
            "jpeg_compressibility",
            {"quality": 9.5},
            "reward_args.jpeg_compressibility.quality: jpeg_compressibility's quality must be an integer",
        ),
        (
            "unifiedreward",
            {"parse": "flow-grpo"},
            "reward_args.unifiedreward.parse: unifiedreward's parse must be one of 'lenient', 'flow_grpo', 'pref_grpo' or null; got 'flow-grpo'",
        ),
    ],
)
def test_bad_argument_values_are_one_line_naming_the_argument(name, kwargs, message):
    with pytest.raises(RewardError) as info:
        check_reward_args(name, kwargs)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_good_argument_values_pass_and_constructors_check_too(tiny_clip):
    from flowrl.reward_models.pickscore import PickScoreReward

    check_reward_args("pickscore", {"preprocess": "fast"})
    check_reward_args("clipscore", {"formula": "flow_grpo", "preprocess": "reference"})
    check_reward_args("jpeg_incompressibility", {"raw_kb": True, "quality": 90})
    check_reward_args("unifiedreward", {"parse": "flow_grpo", "fallback": 0})
    check_reward_args("pickscore", {"preprocess": "fast"}, where=None)
    with pytest.raises(RewardError, match=r"^pickscore's preprocess must be one of"):
        check_reward_args("pickscore", {"preprocess": "x"}, where=None)
    model, processor = tiny_clip
    with pytest.raises(RewardError, match=r"^pickscore: preprocess='x'; allowed: reference, fast$"):
        PickScoreReward.from_components(model, processor, preprocess="x")
    with pytest.raises(RewardError, match=r"^jpeg_incompressibility: raw_kb='yes'; expected a bool"):
        build_reward("jpeg_incompressibility", raw_kb="yes")
    with pytest.raises(RewardError, match=r"^unifiedreward: parse='x'; allowed: lenient, flow_grpo$"):
        build_reward("unifiedreward", parse="x", backend=object())


# ---------------------------------------------------------------------------------------------- conventions


def test_default_aesthetic_weights_are_the_laion_mlp_layout():
    """sac+logos+ava1-l14-linearMSE.pth (LAION, bundled by Flow-GRPO): Linear 768-1024-128-64-16-1 at indices
    0, 2, 4, 6, 7 of ``layers``. The default file is checked itself when it is in the local hub cache."""
    from flowrl.reward_models.aesthetic import CLIP_L14, DEFAULT_PREDICTOR, PreferenceMLP
    from flowrl.reward_models.loading import load_state_dict

    laion = {
        "layers.0.weight": (1024, 768),
        "layers.0.bias": (1024,),
        "layers.2.weight": (128, 1024),
        "layers.2.bias": (128,),
        "layers.4.weight": (64, 128),
        "layers.4.bias": (64,),
        "layers.6.weight": (16, 64),
        "layers.6.bias": (16,),
        "layers.7.weight": (1, 16),
        "layers.7.bias": (1,),
    }
    assert {k: tuple(v.shape) for k, v in PreferenceMLP(768).state_dict().items()} == laion
    assert CLIP_L14 == "openai/clip-vit-large-patch14"  # its projection_dim is 768
    assert DEFAULT_PREDICTOR.endswith("::aesthetic-model.pth")
    from huggingface_hub import try_to_load_from_cache

    repo, _, filename = DEFAULT_PREDICTOR.partition("::")
    cached = try_to_load_from_cache(repo, filename)
    if isinstance(cached, str):
        state = load_state_dict(Path(cached), "aesthetic")
        assert {k: tuple(v.shape) for k, v in state.items()} == laion


def test_jpeg_incompressibility_in_raw_kb_as_flow_grpo():
    from flowrl.reward_models.jpeg import JpegCompressibility, JpegIncompressibility

    images = _images(2, 64, 48)
    raw = JpegIncompressibility(raw_kb=True)(images, ["a", "b"], [{}, {}])
    assert raw.scores.tolist() == pytest.approx(raw.details["size_kb"].tolist())  # Flow-GRPO: bytes / 1000
    scaled = JpegIncompressibility()(images, ["a", "b"], [{}, {}])
    assert scaled.scores.tolist() == pytest.approx((raw.details["size_kb"] / 500).tolist())
    compress = JpegCompressibility()(images, ["a", "b"], [{}, {}])  # Flow-GRPO: -size_kB / 500
    assert compress.scores.tolist() == pytest.approx((-raw.details["size_kb"] / 500).tolist())


@pytest.mark.parametrize(
    ("text", "value"),
    [
        # yifan123/flow_grpo flow_grpo/rewards.py (94e23ee), _extract_scores: r"Final Score:\s*([1-5](?:\.\d+)?)"
        ("The image is fine.\nFinal Score: 4", 4.0),
        ("Final Score:3", 3.0),
        ("Final Score: 4.5", 4.5),  # decimals kept
        ("Final Score: 5.5", 5.5),  # a digit 1-5, then any decimals: not clipped
        ("Final Score: 3.25/5", 3.25),
        ("Final Score: 10", 1.0),  # the pattern stops after its first digit
        ("Final Score: 2. On reflection, Final Score: 5", 2.0),  # the first match
        ("final score: 4", None),  # case-sensitive
        ("**Final Score:** 4", None),  # the digit must follow the colon and spaces
        ("Final Score: 0", None),
        ("Final Score: 6", None),
        ("no score here", None),
    ],
)
def test_unifiedreward_flow_grpo_parse(text, value):
    from flowrl.reward_models.vlm import parse_final_score_flow_grpo

    assert parse_final_score_flow_grpo(text) == value


def test_unifiedreward_with_flow_grpo_parsing():
    replies = ["Final Score: 4.5", "final score: 5", "Final Score: 10", "Final Score: 5.5"]

    class Judge:
        def generate(self, requests, max_new_tokens):
            return replies[: len(requests)]

    reward = build_reward("unifiedreward", parse="flow_grpo", backend=Judge())
    out = reward(torch.rand(4, 3, 16, 16), ["a", "b", "c", "d"], [{}] * 4)
    # Flow-GRPO (flow_grpo/rewards.py, 94e23ee): score / 5, never clipped: 4.5/5, unparsed -> 0, 1/5, 5.5/5
    assert out.scores.tolist() == pytest.approx([0.9, 0.0, 0.2, 1.1])
    assert reward.score_range == (0.0, 1.2)
    lenient = build_reward("unifiedreward", backend=Judge())(torch.rand(4, 3, 16, 16), ["a", "b", "c", "d"], [{}] * 4)
    assert lenient.scores.tolist() == pytest.approx([0.9, 1.0, 1.0, 1.0])  # 4.5/5, 5/5, 10/5 and 5.5/5 clipped


def test_unifiedreward_judge_image_is_resized_as_flow_grpo_does():
    """Flow-GRPO (flow_grpo/rewards.py, 94e23ee, unifiedreward_score_sglang): uint8 rounding, then
    ``Image.fromarray(image).resize((512, 512))`` (Pillow's default filter for RGB: bicubic), then PNG."""
    seen = []

    class Judge:
        def generate(self, requests, max_new_tokens):
            seen.extend(requests)
            return ["Final Score: 3"] * len(requests)

    images = torch.rand(2, 3, 20, 24, generator=torch.Generator().manual_seed(3))
    build_reward("unifiedreward", parse="flow_grpo", image_size=16, backend=Judge())(images, ["a", "b"], [{}] * 2)
    for request, pil in zip(seen, _pil(images)):
        assert np.array_equal(request.images[0], np.asarray(pil.resize((16, 16))))
    seen.clear()
    build_reward("unifiedreward", image_size=16, resize_with="torch", backend=Judge())(images, ["a", "b"], [{}] * 2)
    assert not all(np.array_equal(r.images[0], np.asarray(p.resize((16, 16)))) for r, p in zip(seen, _pil(images)))


def test_pillow_range_is_the_one_that_resizes_as_flow_grpo():
    """Flow-GRPO pins pillow==10.4.0 (yifan123/flow_grpo setup.py); 10.4-12.3 resize alike, 13.0 resizes tall
    images differently (docs/rewards.md), so the requirement admits 10.4 and 12.3 and refuses 13."""
    import tomllib
    from packaging.requirements import Requirement

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    pillow = next(Requirement(r) for r in project["dependencies"] if Requirement(r).name.lower() == "pillow")
    assert pillow.specifier.contains("10.4.0") and pillow.specifier.contains("12.3.0")
    assert not pillow.specifier.contains("13.0.0") and not pillow.specifier.contains("10.3.0")
