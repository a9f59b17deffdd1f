"""CLIP-family rewards on tiny randomly initialised models of their real architectures, through the real
preprocessing, formulas and loading code: CLIPScore, LAION aesthetic, HPSv2 (OpenCLIP), ImageReward (BLIP).
CPU only, offline."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

from flowrl.reward_models import RewardError, build_reward
from tiny_clip import tiny_clip as build_tiny_clip
from tiny_imagereward import VISION
from tiny_imagereward import tiny_imagereward as build_tiny_imagereward

ASSETS = Path(__file__).parents[1] / "assets" / "rewards"


def _images(n: int, h: int = 48, w: int = 40, seed: int = 1) -> torch.Tensor:
    return torch.rand(n, 3, h, w, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------- tiny CLIP


@pytest.fixture(scope="module")
def tiny_clip():
    return build_tiny_clip()


def _cos(model, processor, reward, images, prompts):
    with torch.no_grad():
        pixels = reward.transform(images)
        tokens = processor.tokenizer(prompts, padding=True, truncation=True, max_length=77, return_tensors="pt")
        img = model.get_image_features(pixel_values=pixels)
        txt = model.get_text_features(**tokens)
        img, txt = getattr(img, "pooler_output", img), getattr(txt, "pooler_output", txt)
        return (img * txt).sum(-1) / (img.norm(dim=-1) * txt.norm(dim=-1))


@pytest.mark.parametrize(
    ("formula", "expected"),
    [("hessel", [0.0, 0.0, 0.5, 2.5]), ("torchmetrics", [0.0, 0.0, 20.0, 100.0]), ("cos", [-0.5, 0.0, 0.2, 1.0])],
)
def test_clip_score_formulas_by_hand(formula, expected):
    from flowrl.reward_models.clipscore import clip_score

    cos = torch.tensor([-0.5, 0.0, 0.2, 1.0])
    # hessel: 2.5 * max(c, 0) -> 0, 0, 0.5, 2.5; torchmetrics: max(100 c, 0) -> 0, 0, 20, 100
    assert clip_score(cos, formula).tolist() == pytest.approx(expected)
    with pytest.raises(RewardError, match="formula"):
        clip_score(cos, "w2.5")


def test_clipscore_on_tiny_clip(tiny_clip):
    from flowrl.reward_models.clipscore import ClipScoreReward

    model, processor = tiny_clip
    reward = ClipScoreReward.from_components(model, processor, device="cpu", formula="hessel")
    images, prompts = _images(3), ["a cat", "a red cube", "a dog " * 50]
    out = reward(images, prompts, [{}] * 3)
    cos = _cos(model, processor, reward, images, prompts)
    assert out.details["cos"].tolist() == pytest.approx(cos.tolist(), abs=1e-5)
    assert out.scores.tolist() == pytest.approx((2.5 * cos.clamp(min=0)).tolist(), abs=1e-5)
    assert reward.score_range == (0.0, 2.5)


def test_clipscore_loads_a_local_folder(tiny_clip, tmp_path):
    model, processor = tiny_clip
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    reward = build_reward("clipscore", model=str(tmp_path), formula="cos", device="cpu")
    images = _images(2)
    direct = _cos(model, processor, reward, images, ["a", "b"])
    assert reward(images, ["a", "b"], [{}, {}]).scores.tolist() == pytest.approx(direct.tolist(), abs=1e-5)
    with pytest.raises(RewardError, match="clipscore: cannot load the model 'flowrl-tests/none'"):
        build_reward("clipscore", model="flowrl-tests/none")


# ---------------------------------------------------------------------------------------------- aesthetic


def test_aesthetic_mlp_layout_matches_the_released_state_dict():
    from flowrl.reward_models.aesthetic import PreferenceMLP

    keys = set(PreferenceMLP(768).state_dict())
    # sac+logos+ava1-l14-linearMSE.pth holds exactly these (linears at 0, 2, 4, 6, 7)
    assert keys == {f"layers.{i}.{p}" for i in (0, 2, 4, 6, 7) for p in ("weight", "bias")}


def test_aesthetic_real_loading_and_formula(tiny_clip, tmp_path):
    from flowrl.reward_models.aesthetic import PreferenceMLP

    model, processor = tiny_clip
    model.save_pretrained(tmp_path / "clip")
    processor.save_pretrained(tmp_path / "clip")
    torch.manual_seed(3)
    mlp = PreferenceMLP(16).eval()
    torch.save(mlp.state_dict(), tmp_path / "mlp.pth")
    reward = build_reward("aesthetic", clip=str(tmp_path / "clip"), predictor=str(tmp_path / "mlp.pth"), device="cpu")

    images = _images(3)
    with torch.no_grad():
        embeds = model.get_image_features(pixel_values=reward.transform(images))
        embeds = getattr(embeds, "pooler_output", embeds)
        expected = mlp(embeds / embeds.norm(dim=-1, keepdim=True))  # MLP(e / |e|)
    assert reward(images, ["x"] * 3, [{}] * 3).scores.tolist() == pytest.approx(expected.tolist(), abs=1e-5)

    with pytest.raises(RewardError, match="does not exist"):
        build_reward("aesthetic", clip=str(tmp_path / "clip"), predictor=str(tmp_path / "missing.pth"))
    torch.save(PreferenceMLP(8).state_dict(), tmp_path / "wrong.pth")
    with pytest.raises(RewardError, match="do not fit"):
        build_reward("aesthetic", clip=str(tmp_path / "clip"), predictor=str(tmp_path / "wrong.pth"))


# ---------------------------------------------------------------------------------------------- HPSv2


@pytest.fixture(scope="module")
def tiny_openclip():
    open_clip = pytest.importorskip("open_clip")
    open_clip.add_model_config(ASSETS / "flowrl-tiny-openclip.json")
    torch.manual_seed(0)
    return open_clip.create_model("flowrl-tiny-openclip", pretrained=None).eval(), open_clip


def test_hpsv2_checkpoint_loading_and_cosine(tiny_openclip, tmp_path):
    model, open_clip = tiny_openclip
    state = {"module." + k: v for k, v in model.state_dict().items()}  # saved from a DDP wrapper
    torch.save({"state_dict": state, "epoch": 3}, tmp_path / "HPS_tiny.pt")
    reward = build_reward("hpsv2", checkpoint=str(tmp_path / "HPS_tiny.pt"), arch="flowrl-tiny-openclip", device="cpu")

    images, prompts = _images(3, 64, 48), ["a photo of a cat", "an oil painting", "x " * 100]
    out = reward(images, prompts, [{}] * 3)
    tokenizer = open_clip.get_tokenizer("flowrl-tiny-openclip")  # the real BPE vocabulary, bundled
    with torch.no_grad():
        img = model.encode_image(reward.transform(images))
        txt = model.encode_text(tokenizer(prompts))
        cos = (img * txt).sum(-1) / (img.norm(dim=-1) * txt.norm(dim=-1))
    assert tokenizer(prompts).shape == (3, 77)
    assert out.scores.tolist() == pytest.approx(cos.tolist(), abs=1e-5)
    assert reward.score_range == (-1.0, 1.0)


def test_hpsv2_preprocessing_of_square_images_is_openclips(tiny_openclip):
    """On square images HPSv2's longest-side resize + pad and OpenCLIP's shortest-side resize + crop have the
    same geometry; the pip package's transform resizes the uint8 image with Pillow, HPSv2's own copy of
    open_clip resizes the float tensor (checked exactly in test_rewards_reference.py), so values differ a
    little at edges."""
    from flowrl.reward_models.hps import openclip_transform

    model, open_clip = tiny_openclip
    transform = open_clip.image_transform(open_clip.get_model_preprocess_cfg(model)["size"], is_train=False)
    smooth = torch.nn.functional.interpolate(torch.rand(2, 3, 5, 5), size=(80, 80), mode="bilinear")
    pixels = (smooth * 255).round().to(torch.uint8)
    reference = torch.stack([transform(Image.fromarray(p.permute(1, 2, 0).numpy())) for p in pixels])
    ours = openclip_transform(model)(pixels.float() / 255)
    assert ours.shape == reference.shape == (2, 3, 32, 32)
    assert (ours - reference).abs().max() < 0.1  # torch (unclamped) vs Pillow (uint8) on the same geometry
    fast = openclip_transform(model, "fast")(pixels.float() / 255)
    assert (fast - reference).abs().max() < 0.1  # torch resizes the float image


def test_hpsv2_missing_checkpoint_is_one_line(tiny_openclip):
    with pytest.raises(RewardError) as info:
        build_reward("hpsv2")  # the hub default, offline and not cached
    assert "HPS_v2.1_compressed.pt" in str(info.value) and "\n" not in str(info.value)


# ---------------------------------------------------------------------------------------------- ImageReward


@pytest.fixture(scope="module")
def tiny_imagereward(tmp_path_factory):
    from transformers import BertTokenizer

    folder = tmp_path_factory.mktemp("imagereward")
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "cat", "red", "cube", "on", "the", "mat", "photo", "of"]
    (folder / "vocab.txt").write_text("\n".join(words) + "\n")
    tokenizer = BertTokenizer(str(folder / "vocab.txt"))
    tokenizer.save_pretrained(folder / "tokenizer")
    tokenizer.add_special_tokens({"bos_token": "[DEC]", "additional_special_tokens": ["[ENC]"]})
    model, med = build_tiny_imagereward(tokenizer)
    (folder / "med_config.json").write_text(json.dumps(med))
    return model, tokenizer, folder, VISION


def _to_blip_layout(state: dict) -> dict:
    """The inverse renaming, written out independently: transformers names -> BLIP / ImageReward.pt names."""
    out = {}
    for key, value in state.items():
        if key.startswith("vision."):
            k = key[len("vision.") :]
            k = k.replace("embeddings.class_embedding", "cls_token").replace(
                "embeddings.position_embedding", "pos_embed"
            )
            k = k.replace("embeddings.patch_embedding.", "patch_embed.proj.").replace("post_layernorm.", "norm.")
            k = k.replace("encoder.layers.", "blocks.").replace("layer_norm1", "norm1").replace("layer_norm2", "norm2")
            k = k.replace("self_attn.projection", "attn.proj").replace("self_attn.qkv", "attn.qkv")
            out["blip.visual_encoder." + k] = value
        elif key.startswith("text."):
            out["blip.text_encoder." + key[len("text.") :]] = value
        else:
            out[key] = value
    out["blip.text_encoder.embeddings.position_ids"] = torch.arange(64)[None]  # a buffer the release carries
    return out


def test_imagereward_checkpoint_conversion_and_normalisation(tiny_imagereward):
    from flowrl.reward_models.imagereward import (
        MAX_TEXT_TOKENS,
        REWARD_MEAN,
        REWARD_STD,
        ImageRewardReward,
        convert_imagereward_state_dict,
    )

    model, tokenizer, folder, overrides = tiny_imagereward
    released = _to_blip_layout(model.state_dict())
    assert "blip.visual_encoder.blocks.1.attn.qkv.weight" in released and "blip.visual_encoder.pos_embed" in released
    assert set(convert_imagereward_state_dict(released)) == set(model.state_dict())
    torch.save({"state_dict": released}, folder / "ImageReward.pt")

    reward = ImageRewardReward(
        checkpoint=str(folder / "ImageReward.pt"),
        med_config=str(folder / "med_config.json"),
        tokenizer=str(folder / "tokenizer"),
        device="cpu",
        vision_overrides=overrides,
    )
    images, prompts = _images(2, 40, 56), ["a red cube on the mat", "a photo of a cat"]
    out = reward(images, prompts, [{}, {}])
    tokens = reward.tokenize(prompts)
    assert tokens["input_ids"].shape == (2, MAX_TEXT_TOKENS)  # padded to max_length 35
    assert tokens["input_ids"][:, 0].tolist() == [tokenizer.cls_token_id] * 2
    with torch.no_grad():
        states = model.vision(pixel_values=reward.transform(images)).last_hidden_state
        text = model.text(
            input_ids=tokens["input_ids"],
            attention_mask=tokens["attention_mask"],
            encoder_hidden_states=states,
            is_decoder=False,
        ).last_hidden_state
        raw = model.mlp(text[:, 0])
    assert out.details["raw"].tolist() == pytest.approx(raw.tolist(), abs=1e-5)
    # (mlp - 0.16717362830052426) / 1.0333394966054072
    assert out.scores.tolist() == pytest.approx(((raw - 0.16717362830052426) / 1.0333394966054072).tolist(), abs=1e-5)
    assert (REWARD_MEAN, REWARD_STD) == (0.16717362830052426, 1.0333394966054072)


def test_imagereward_cross_attention_sees_the_image(tiny_imagereward):
    from flowrl.reward_models.imagereward import ImageRewardReward

    model, tokenizer, _, _ = tiny_imagereward
    reward = ImageRewardReward.from_components(model, tokenizer, device="cpu")
    a, b = _images(1, seed=5), _images(1, seed=6)
    same_prompt = ["a cat"]
    assert reward(a, same_prompt, [{}]).scores.item() != pytest.approx(
        reward(b, same_prompt, [{}]).scores.item(), abs=1e-7
    )
