"""VLM rewards (vlm_judge, unifiedreward) and HPSv3 on tiny randomly initialised Qwen2.5-VL / Qwen2-VL models
built from config (tokenizer made in code, chat template committed), and against a real OpenAI-compatible
HTTP endpoint on loopback. Hand-checked: P(yes) normalisation, score parsing, win rates, smart_resize."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import base64
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from _loopback import JsonHandler, serve
from flowrl.reward_models import RewardError, build_reward, win_rates
from flowrl.reward_models.vlm import (
    ChatRequest,
    TransformersChat,
    UnifiedRewardReward,
    VlmJudgeReward,
    parse_final_score,
    parse_preference,
    word_probs_from_choice,
    yes_probability,
)
from tiny_vlm import special_ids, vl_text_config, vl_tokenizer

ASSETS = Path(__file__).parents[1] / "assets" / "rewards"
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]


# ---------------------------------------------------------------------------------------------- pure maths


def test_yes_probability_by_hand():
    assert yes_probability({"yes": 0.6, "no": 0.2}, True) == pytest.approx(0.75)  # 0.6 / 0.8
    assert yes_probability({"yes": 0.6, "no": 0.2}, False) == pytest.approx(0.6)
    assert yes_probability({"yes": 0.0, "no": 0.0}, True) == 0.5


def test_word_probs_from_top_logprobs():
    choice = {
        "logprobs": {
            "content": [
                {
                    "token": "Yes",
                    "logprob": math.log(0.5),
                    "top_logprobs": [
                        {"token": "Yes", "logprob": math.log(0.5)},
                        {"token": " yes", "logprob": math.log(0.1)},
                        {"token": "No", "logprob": math.log(0.3)},
                        {"token": "Maybe", "logprob": math.log(0.1)},
                    ],
                }
            ]
        }
    }
    probs = word_probs_from_choice(choice, {"yes": ("Yes", "yes"), "no": ("No", "no")})
    assert probs == pytest.approx({"yes": 0.6, "no": 0.3})  # " yes" counts after stripping
    text_only = {"message": {"content": "No, it does not."}}
    assert word_probs_from_choice(text_only, {"yes": ("Yes",), "no": ("No",)}) == {"yes": 0.0, "no": 1.0}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("The image fits.\nFinal Score: 4", 4.0),
        ("**Final Score:** 3.5", 3.5),
        ("final score 2\nFinal Score: 5", 5.0),
        ("I would give it four.", None),
    ],
)
def test_parse_final_score(text, value):
    assert parse_final_score(text) == value


@pytest.mark.parametrize(
    ("text", "p"),
    [
        ("<think>hmm</think><answer>Image 1 is better</answer>", 1.0),
        ("Image 2 is better.", 0.0),
        ("<think>Image 1 is better at first</think><answer>Image 2 is better</answer>", 0.0),
        ("Both are equal", 0.5),
        ("Image 1 is better. No, Image 2 is better.", 0.5),
    ],
)
def test_parse_preference(text, p):
    assert parse_preference(text) == p


def test_win_rates_by_hand():
    # group of three: 0 beats 1, 0 ties 2, 2 beats 1 -> wins 0: 1 + 0.5, 1: 0 + 0, 2: 0.5 + 1, two games each
    rates = win_rates(4, [(0, 1), (0, 2), (1, 2)], torch.tensor([1.0, 0.5, 0.0]))
    assert rates.tolist() == pytest.approx([0.75, 0.0, 0.75, 0.5])  # sample 3 played no game: 0.5


class _ScriptedJudge:
    """A chat back end whose answers follow the images: the brighter image wins; pointwise text is canned."""

    def __init__(self, pointwise: list[str] | None = None):
        self.pointwise, self.requests = pointwise, []

    def generate(self, requests, max_new_tokens):
        self.requests += requests
        if self.pointwise is not None:
            return self.pointwise[: len(requests)]
        out = []
        for r in requests:
            half = len(r.images) // 2  # video pairs: frames of sample 1, then of sample 2
            a, b = float(np.mean(r.images[:half])), float(np.mean(r.images[half:]))
            out.append("<answer>Image 1 is better</answer>" if a > b else "<answer>Image 2 is better</answer>")
        return out


def test_unifiedreward_pairwise_scores_whole_groups():
    judge = _ScriptedJudge()
    reward = UnifiedRewardReward(mode="pairwise", backend=judge, image_size=None)
    levels = [0.2, 0.9, 0.5, 0.1, 0.4]
    images = torch.stack([torch.full((3, 8, 8), v) for v in levels])
    prompts = ["cat", "cat", "cat", "dog", "dog"]
    out = reward(images, prompts, [{}] * 5)
    # cat group: 0.9 beats both, 0.5 beats 0.2 -> 0/2, 2/2, 1/2; dog group: 0.4 beats 0.1 -> 0/1, 1/1
    assert out.scores.tolist() == pytest.approx([0.0, 1.0, 0.5, 0.0, 1.0])
    assert out.details["comparisons"] == 4 and len(judge.requests) == 4
    assert all(len(r.images) == 2 and ("cat" in r.text or "dog" in r.text) for r in judge.requests)
    order = [4, 2, 0, 3, 1]  # any order of the batch gives the same per-sample rates
    again = reward(images[order], [prompts[i] for i in order], [{}] * 5)
    assert again.scores.tolist() == pytest.approx([out.scores[i].item() for i in order])


def test_unifiedreward_pointwise_parses_and_falls_back():
    judge = _ScriptedJudge(pointwise=["ok\nFinal Score: 4", "Final Score: 7", "no idea"])
    reward = UnifiedRewardReward(mode="pointwise", backend=judge, image_size=16)
    out = reward(torch.rand(3, 3, 20, 24), ["a", "b", "c"], [{}] * 3)
    assert out.scores.tolist() == pytest.approx([0.8, 1.0, 0.0])  # 4/5, 7/5 clipped, unparsable -> fallback 0
    assert out.details["parsed"] == [True, True, False]
    assert judge.requests[0].images[0].shape == (16, 16, 3) and "Prompt: a" in judge.requests[0].text


def test_unifiedreward_video_pairs_show_sampled_frames():
    judge = _ScriptedJudge()
    reward = UnifiedRewardReward(mode="pairwise", backend=judge, image_size=None, video_frames=3)
    videos = torch.rand(2, 10, 3, 8, 8)
    reward(videos, ["p", "p"], [{}, {}])
    assert len(judge.requests[0].images) == 6  # 3 frames of video 1, then 3 of video 2


# ---------------------------------------------------------------------------------------------- tiny Qwen-VL


def test_vlm_judge_local_is_the_normalised_first_token_probability(tiny_qwen25vl):
    model, processor = tiny_qwen25vl
    chat = TransformersChat(model, processor, device="cpu", batch_size=2)
    reward = VlmJudgeReward(backend=chat)
    images = torch.rand(3, 3, 60, 50, generator=torch.Generator().manual_seed(2))
    prompts = ["a cat", "a much longer prompt about a red cube on a table", "x"]
    metadata = [{}, {"question": ["Is it red?", "Is it a cube on a table?"]}, {}]
    out = reward(images, prompts, metadata)
    assert out.scores.shape == (3,) and ((out.scores > 0) & (out.scores < 1)).all()

    yes_id, no_id = processor.tokenizer.encode("Yes")[0], processor.tokenizer.encode("No")[0]
    lower_yes, lower_no = processor.tokenizer.encode("yes")[0], processor.tokenizer.encode("no")[0]

    def p_yes(image, question):  # one request alone, no padding: the reference
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
        text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert text.endswith("<|im_start|>assistant\n") and "<|image_pad|>" in text
        pixels = Image.fromarray((image * 255).round().to(torch.uint8).permute(1, 2, 0).numpy())
        inputs = processor(text=[text], images=[pixels], return_tensors="pt")
        with torch.no_grad():
            probs = model(**inputs).logits[0, -1].softmax(-1)
        yes, no = probs[yes_id] + probs[lower_yes], probs[no_id] + probs[lower_no]
        return float(yes / (yes + no))

    expected = [
        p_yes(images[0], 'Does this image show "a cat"? Please answer yes or no.'),
        (p_yes(images[1], "Is it red?") + p_yes(images[1], "Is it a cube on a table?")) / 2,
        p_yes(images[2], 'Does this image show "x"? Please answer yes or no.'),
    ]
    assert out.scores.tolist() == pytest.approx(expected, abs=1e-4)  # left padding changes nothing


def test_unifiedreward_local_generation_runs(tiny_qwen25vl):
    model, processor = tiny_qwen25vl
    chat = TransformersChat(model, processor, device="cpu")
    reward = UnifiedRewardReward(mode="pairwise", backend=chat, max_new_tokens=3, image_size=28)
    out = reward(torch.rand(3, 3, 32, 32), ["p", "p", "q"], [{}] * 3)
    # random weights write no verdict: every game is a tie, every rate 0.5 (the lone "q" played none)
    assert out.scores.tolist() == [0.5, 0.5, 0.5]
    texts = chat.generate([ChatRequest([np.zeros((28, 28, 3), np.uint8)], "hi")], 4)
    assert len(texts) == 1 and isinstance(texts[0], str)


# ---------------------------------------------------------------------------------------------- OpenAI endpoint


class _FakeVllm(JsonHandler):
    """An OpenAI-compatible /v1/chat/completions on loopback: the first request gets a 503 (retry)."""

    calls = 0

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls += 1
        if type(self).calls == 1:
            return self._send(503, {"error": {"message": "warming up"}})
        if self.headers.get("Authorization") != "Bearer k":
            return self._send(401, {"error": {"message": "bad key"}})
        content = body["messages"][0]["content"]
        text = content[-1]["text"]
        images = [c["image_url"]["url"] for c in content if c["type"] == "image_url"]
        assert all(url.startswith("data:image/png;base64,") for url in images)
        if body.get("logprobs"):
            yes = 0.6 if "cat" in text else 0.1
            top = [{"token": "Yes", "logprob": math.log(yes)}, {"token": "No", "logprob": math.log(0.3)}]
            choice = {
                "message": {"content": "Yes"},
                "logprobs": {"content": [{"token": "Yes", "logprob": 0.0, "top_logprobs": top}]},
            }
        else:
            means = [np.array(Image.open(io.BytesIO(base64.b64decode(u.split(",", 1)[1])))).mean() for u in images]
            if len(means) == 2:
                choice = {"message": {"content": f"<answer>Image {1 if means[0] > means[1] else 2} is better</answer>"}}
            else:
                choice = {"message": {"content": "Final Score: 3"}}
        self._send(200, {"choices": [choice]})


@pytest.fixture()
def fake_vllm():
    _FakeVllm.calls = 0
    with serve(_FakeVllm) as url:
        yield url


def test_vlm_judge_against_an_openai_endpoint(fake_vllm):
    reward = build_reward(
        "vlm_judge", model="served", base_url=fake_vllm, api_key="k", retries=2, backoff=0.05, concurrency=3
    )
    out = reward(torch.rand(3, 3, 16, 16), ["a cat", "a dog", "a cat"], [{}] * 3)
    # cat: 0.6 / (0.6 + 0.3) = 2/3; dog: 0.1 / (0.1 + 0.3) = 1/4 (the first request was retried after a 503)
    assert out.scores.tolist() == pytest.approx([2 / 3, 0.25, 2 / 3], abs=1e-6)
    assert _FakeVllm.calls == 4


def test_unifiedreward_against_an_openai_endpoint(fake_vllm):
    pointwise = build_reward("unifiedreward", base_url=fake_vllm, model="served", api_key="k", retries=1, backoff=0.05)
    assert pointwise(torch.rand(2, 3, 16, 16), ["a", "b"], [{}, {}]).scores.tolist() == pytest.approx([0.6, 0.6])
    pairwise = build_reward("unifiedreward", mode="pairwise", base_url=fake_vllm, model="served", api_key="k")
    images = torch.stack([torch.full((3, 16, 16), v) for v in (0.1, 0.8, 0.5)])
    assert pairwise(images, ["p"] * 3, [{}] * 3).scores.tolist() == pytest.approx([0.0, 1.0, 0.5])


def test_wrong_api_key_is_one_line_without_retry(fake_vllm):
    reward = build_reward("vlm_judge", base_url=fake_vllm, api_key="wrong", retries=3, backoff=0.01)
    with pytest.raises(RewardError, match="HTTP 401: bad key"):
        reward(torch.rand(1, 3, 8, 8), ["a"], [{}])
    assert _FakeVllm.calls == 2  # the 503, then the 401 that is not retried


# ---------------------------------------------------------------------------------------------- HPSv3


@pytest.mark.parametrize(
    ("hw", "expected"),
    [
        # 1024x768 rounds to 1036x756 = 783,216 > 200,704: beta = sqrt(786,432 / 200,704) = 1.97949,
        # floor(1024 / beta / 28) = floor(18.47) = 18 -> 504, floor(768 / beta / 28) = floor(13.86) = 13 -> 364
        ((1024, 768), (504, 364)),
        # 600x500 -> 588x504 = 296,352 > max: beta = sqrt(300,000 / 200,704) = 1.22261 -> 17 * 28, 14 * 28
        ((600, 500), (476, 392)),
        # 200x100 -> 196x112 = 21,952 < min: beta = sqrt(200,704 / 20,000) = 3.16784,
        # ceil(200 * beta / 28) = ceil(22.63) = 23 -> 644, ceil(100 * beta / 28) = ceil(11.31) = 12 -> 336
        ((200, 100), (644, 336)),
        ((448, 448), (448, 448)),  # already 200,704 pixels on the grid
    ],
)
def test_smart_resize_by_hand(hw, expected):
    from flowrl.reward_models.hps import smart_resize

    assert smart_resize(*hw) == expected


def test_hpsv3_template_from_an_installed_package(tmp_path, monkeypatch):
    from flowrl.reward_models.hps import read_hpsv3_template

    package = tmp_path / "hpsv3" / "dataset"
    package.mkdir(parents=True)
    (tmp_path / "hpsv3" / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    (package / "data_collator_qwen.py").write_text(
        'import torch\nINSTRUCTION = """Judge {text_prompt}.\n"""\nprompt_with_special_token = """Score: <|Reward|>\n"""\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert read_hpsv3_template() == "Judge {text_prompt}.\nScore: <|Reward|>\n"
    bad = tmp_path / "bad.txt"
    bad.write_text("no placeholder\n---\n<|Reward|>")
    with pytest.raises(RewardError, match="text_prompt"):
        read_hpsv3_template(str(bad))


@pytest.fixture(scope="module")
def tiny_qwen2vl():
    from transformers import (
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )

    tokenizer = vl_tokenizer()
    processor = Qwen2VLProcessor(
        image_processor=Qwen2VLImageProcessor(),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(),
        chat_template=(ASSETS / "qwen_vl_chat_template.jinja").read_text(),
    )
    config = Qwen2VLConfig(
        text_config=vl_text_config(tokenizer),
        vision_config={
            "depth": 2,
            "embed_dim": 32,
            "hidden_size": 32,
            "mlp_ratio": 2,
            "num_heads": 4,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        **special_ids(tokenizer),
    )
    torch.manual_seed(0)
    return Qwen2VLForConditionalGeneration(config).eval(), processor


def test_hpsv3_loading_and_reward_token_readout(tiny_qwen2vl, tmp_path):
    from safetensors.torch import save_file

    from flowrl.reward_models.hps import REWARD_TOKEN, HPSv3Reward, hpsv3_head

    base, processor = tiny_qwen2vl
    base.save_pretrained(tmp_path / "base")
    processor.save_pretrained(tmp_path / "base")
    (tmp_path / "template.txt").write_text("Rate this image for: {text_prompt}\n---\nOverall: <|Reward|>\n")

    # the "released" reward model: base + <|Reward|> row + trained head, keys in transformers-4.45 layout
    import copy

    trained = copy.deepcopy(base)
    trained.resize_token_embeddings(len(processor.tokenizer) + 1)
    torch.manual_seed(1)
    head = hpsv3_head(32).eval()  # eval: no dropout in the reference either
    state = {}
    for key, value in trained.state_dict().items():
        key = key.replace("model.language_model.", "model.").replace("model.visual.", "visual.")
        state[key] = value.contiguous()
    state.update({"rm_head." + k: v for k, v in head.state_dict().items()})
    state.pop("lm_head.weight", None)  # tied to the embeddings
    save_file(state, str(tmp_path / "HPSv3.safetensors"))

    reward = HPSv3Reward(
        checkpoint=str(tmp_path / "HPSv3.safetensors"),
        base=str(tmp_path / "base"),
        instruction_file=str(tmp_path / "template.txt"),
        device="cpu",
        dtype=torch.float32,
    )
    reward.pixels = 56 * 56  # tiny images: 2 x 2 merged tokens each
    images = torch.rand(2, 3, 70, 60, generator=torch.Generator().manual_seed(3))
    prompts = ["a cat", "a red cube on a table"]
    out = reward(images, prompts, [{}, {}])

    # reference: transformers' own multimodal forward with sequential positions, read at <|Reward|>
    inputs = reward._inputs(images, prompts)
    reward_id = reward.processor.tokenizer.convert_tokens_to_ids(REWARD_TOKEN)
    assert (inputs["input_ids"] == reward_id).sum(dim=1).tolist() == [1, 1]
    assert inputs["image_grid_thw"].tolist() == [[1, 4, 4], [1, 4, 4]]  # 56 x 56 pixels: 4 x 4 patches of 14
    positions = torch.arange(inputs["input_ids"].shape[1])[None].expand(2, -1)
    with torch.no_grad():
        hidden = trained.model(
            input_ids=inputs["input_ids"],
            attention_mask=inputs["attention_mask"],
            pixel_values=inputs["pixel_values"],
            image_grid_thw=inputs["image_grid_thw"],
            position_ids=positions,
        ).last_hidden_state
        mu_sigma = head(hidden[inputs["input_ids"] == reward_id])
    assert out.scores.tolist() == pytest.approx(mu_sigma[:, 0].tolist(), abs=1e-4)
    assert out.details["sigma"].tolist() == pytest.approx(mu_sigma[:, 1].tolist(), abs=1e-4)


def test_vlm_judge_on_a_tiny_qwen3_vl():
    from transformers import (
        Qwen2VLImageProcessorFast,
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
        Qwen3VLProcessor,
        Qwen3VLVideoProcessor,
    )

    tokenizer = vl_tokenizer()
    processor = Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessorFast(
            patch_size=16, merge_size=2, min_pixels=32 * 32 * 4, max_pixels=64 * 64 * 4
        ),
        tokenizer=tokenizer,
        video_processor=Qwen3VLVideoProcessor(),
        chat_template=(ASSETS / "qwen_vl_chat_template.jinja").read_text(),
    )
    text = {**vl_text_config(tokenizer), "head_dim": 8}
    text["rope_scaling"] = {"rope_type": "default", "mrope_section": [2, 1, 1], "mrope_interleaved": True}
    vision = {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 4,
        "out_hidden_size": 32,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "num_position_embeddings": 64,
        "deepstack_visual_indexes": [1],
    }
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(
        Qwen3VLConfig(text_config=text, vision_config=vision, **special_ids(tokenizer))
    )
    reward = VlmJudgeReward(backend=TransformersChat(model.eval(), processor, device="cpu", batch_size=2))
    images = torch.rand(2, 3, 64, 48, generator=torch.Generator().manual_seed(0))
    prompts = ["a cat", "a much longer prompt about a cube"]
    batched = reward(images, prompts, [{}, {}]).scores
    alone = [reward(images[i : i + 1], prompts[i : i + 1], [{}]).scores.item() for i in range(2)]
    assert ((batched > 0) & (batched < 1)).all()
    assert batched.tolist() == pytest.approx(alone, abs=1e-4)  # left padding does not change P(yes)


# ---------------------------------------------------------------------------------------------- UnifiedReward-Think

# A stand-in for the user's copy of CodeGoat24/Pref-GRPO: fastvideo/rewards/templates.py holds the judge text
# as functions returning a string literal (the authors' layout since 1dc528e); the text here is made up.
_FAKE_TEMPLATES = '''
def get_unifiedreward_think_image_template() -> str:
    return """Compare Image 1 and Image 2 for the caption 「{prompt}」. <think>...</think> then <answer>."""


def get_unifiedreward_think_video_template() -> str:
    return """Compare Video 1 and Video 2 for 「{prompt}」."""


def get_unifiedreward_image_template() -> str:
    return "pointwise {prompt}"
'''


def _pref_grpo_copy(tmp_path, text=_FAKE_TEMPLATES):
    folder = tmp_path / "Pref-GRPO" / "fastvideo" / "rewards"
    folder.mkdir(parents=True)
    (folder / "templates.py").write_text(text + "\nraise SystemExit('must not be run')\n")
    return tmp_path / "Pref-GRPO"


class _CannedJudge:
    """Replies from a list, in order, recording requests and max_new_tokens."""

    def __init__(self, replies):
        self.replies, self.requests, self.max_new_tokens = list(replies), [], []

    def generate(self, requests, max_new_tokens):
        self.requests += requests
        self.max_new_tokens.append(max_new_tokens)
        out, self.replies = self.replies[: len(requests)], self.replies[len(requests) :]
        return out


@pytest.mark.parametrize(
    ("text", "p"),
    [
        # CodeGoat24/Pref-GRPO fastvideo/rewards/unifiedreward_think.py (3e787f6): the first <answer>, stripped;
        # "Image 1 is better" in it wins, else "Image 2 is better", else a tie; no <answer> tag: a tie
        ("<think>a</think>\n<answer> Image 1 is better </answer>", 1.0),
        ("<think>a</think><answer>Image 2 is better</answer>", 0.0),
        ("<think>Image 1 is better</think> Image 2 is better", 0.5),  # no tag: a tie (lenient: 0)
        ("<think>" + "x " * 50, 0.5),  # cut off by max_new_tokens: a tie
        ("<answer>image 1 is better</answer>", 0.5),  # case-sensitive
        ("<answer>Image 1 is better. Image 2 is better</answer>", 1.0),  # "Image 1" is checked first
        ("<answer>Image 2 is better</answer><answer>Image 1 is better</answer>", 0.0),  # the first tag
    ],
)
def test_pref_grpo_verdict_by_hand(text, p):
    from flowrl.reward_models.vlm import parse_preference_pref_grpo

    assert parse_preference_pref_grpo(text) == p


def test_unifiedreward_think_reads_the_authors_template_and_counts_untagged_replies_as_ties(tmp_path):
    root = _pref_grpo_copy(tmp_path)
    judge = _CannedJudge(
        [
            "<think>1 wins</think><answer>Image 1 is better</answer>",  # (0, 1)
            "Image 2 is better",  # (0, 2): no <answer>, a tie
            "<think>..</think><answer>Image 1 is better</answer>",  # (1, 2)
        ]
    )
    reward = build_reward("unifiedreward", mode="pairwise", template_from=str(root), backend=judge)
    images = torch.rand(3, 3, 20, 24, generator=torch.Generator().manual_seed(0))
    out = reward(images, ["a red cube"] * 3, [{}] * 3)
    # wins: 0: 1 + 0.5, 1: 0 + 1, 2: 0.5 + 0 over two games each
    assert out.scores.tolist() == pytest.approx([0.75, 0.5, 0.25])
    expected = "Compare Image 1 and Image 2 for the caption 「a red cube」. <think>...</think> then <answer>."
    assert [r.text for r in judge.requests] == [expected] * 3
    assert judge.max_new_tokens == [4096]  # the authors' client asks for up to 4096 new tokens
    first = judge.requests[0].images[0]  # not resized; the JPEG q95 the authors' client sends, decoded
    assert first.shape == (20, 24, 3)
    pixels = (images[0] * 255).round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).numpy()
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=95)
    assert np.array_equal(first, np.asarray(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")))
    # explicit settings still win
    again = build_reward(
        "unifiedreward", mode="pairwise", template_from=str(root / "fastvideo" / "rewards" / "templates.py"),
        max_new_tokens=64, image_size=16, image_format="png", backend=_CannedJudge(["x"] * 3),
    )  # fmt: skip
    again(images, ["p"] * 3, [{}] * 3)
    assert again.backend.max_new_tokens == [64] and again.backend.requests[0].images[0].shape == (16, 16, 3)


def test_unifiedreward_think_videos_use_the_video_template(tmp_path):
    judge = _CannedJudge(["<answer>Video 2 is better</answer>"])
    reward = build_reward(
        "unifiedreward", mode="pairwise", template_from=str(_pref_grpo_copy(tmp_path)), video_frames=2, backend=judge
    )
    out = reward(torch.rand(2, 5, 3, 8, 8), ["p", "p"], [{}, {}])
    assert out.scores.tolist() == pytest.approx([0.0, 1.0])
    assert judge.requests[0].text == "Compare Video 1 and Video 2 for 「p」." and len(judge.requests[0].images) == 4


@pytest.mark.parametrize(
    ("setup", "kwargs", "message"),
    [
        (None, {}, r"template_from='.*missing' does not exist"),
        ("empty", {}, r"has no fastvideo/rewards/templates\.py; is it a copy of github\.com/CodeGoat24/Pref-GRPO\?"),
        ("other", {}, r"has no get_unifiedreward_think_image_template\(\) returning a string literal"),
        ("fields", {}, r"get_unifiedreward_think_image_template\(\) is not a template with only \{prompt\}"),
        ("ok", {"mode": "pointwise"}, r"template_from reads UnifiedReward-Think's pairwise template; set mode="),
        ("ok", {"template": "{prompt}"}, r"give template or template_from, not both"),
        ("ok", {"parse": "flow_grpo"}, r"parse='flow_grpo'; allowed: lenient, pref_grpo"),
    ],
)
def test_unifiedreward_think_errors_are_one_line(tmp_path, setup, kwargs, message):
    if setup is None:
        root = tmp_path / "missing"
    elif setup == "empty":
        root = tmp_path / "empty"
        root.mkdir()
    elif setup == "other":
        root = _pref_grpo_copy(tmp_path, "def get_unifiedreward_image_template():\n    return '{prompt}'\n")
    elif setup == "fields":
        root = _pref_grpo_copy(tmp_path, "def get_unifiedreward_think_image_template():\n    return '{prompt} {x}'\n")
    else:
        root = _pref_grpo_copy(tmp_path)
    options = {"mode": "pairwise", **kwargs}
    with pytest.raises(RewardError, match=message) as info:
        build_reward("unifiedreward", template_from=str(root), backend=_CannedJudge([]), **options)
    assert "\n" not in str(info.value) and str(info.value).startswith("unifiedreward: ")


class _ThinkServer(JsonHandler):
    """A served UR-Think: answers without an <answer> tag once, then with one; records max_tokens."""

    bodies: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        content = "<think>long</think>" if len(type(self).bodies) == 1 else "<answer>Image 2 is better</answer>"
        self._send(200, {"choices": [{"message": {"content": content}}]})


def test_unifiedreward_think_against_an_openai_endpoint(tmp_path):
    _ThinkServer.bodies = []
    with serve(_ThinkServer) as url:
        reward = build_reward(
            "unifiedreward", mode="pairwise", template_from=str(_pref_grpo_copy(tmp_path)), base_url=url,
            model="UnifiedReward-Think", concurrency=1,
        )  # fmt: skip
        out = reward(torch.rand(3, 3, 8, 8), ["q"] * 3, [{}] * 3)
    # (0, 1) a tie, (0, 2) and (1, 2) won by the second: 0: 0.5 + 0, 1: 0.5 + 0, 2: 1 + 1
    assert out.scores.tolist() == pytest.approx([0.25, 0.25, 1.0])
    assert [b["max_tokens"] for b in _ThinkServer.bodies] == [4096] * 3
    assert "「q」" in _ThinkServer.bodies[0]["messages"][0]["content"][-1]["text"]
