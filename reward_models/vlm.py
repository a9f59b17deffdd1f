r"""VLM rewards: a yes/no probability judge (``vlm_judge``) and UnifiedReward (``unifiedreward``).

Both talk to a chat back end, local or remote:

* ``TransformersChat``: a Qwen2.5-VL / Qwen3-VL (or any image-text-to-text) model run with transformers;
  prompts through the processor's chat template, left padding, greedy decoding.
* ``OpenAIChat``: an OpenAI-compatible ``/chat/completions`` endpoint (vLLM or SGLang serving the model),
  chosen by ``base_url``; images as base64 PNG data URLs; ``concurrency`` requests in flight (the server
  batches them), each with a timeout and retries with backoff (``remote.request_json``).

vlm_judge (VQAScore-style): for each sample a yes/no question (``metadata["question"]``, a list of
questions averaged, or ``question.format(prompt=...)``); from the first answer token's distribution

    r = P(yes) / (P(yes) + P(no))      (``normalise=True``; else r = P(yes))

where P(yes) sums the probabilities of the single-token spellings "Yes" / "yes" (likewise "No" / "no").
Remotely the same comes from ``top_logprobs`` of a 1-token completion; without logprobs the answer text
counts as 1 or 0.

unifiedreward, ``mode="pointwise"``: the judge writes a reason ending in ``Final Score: X`` (1-5);
``fallback`` (default 0, as Flow-GRPO) when no score parses. ``parse``:

* ``"lenient"`` (default): the last ``Final Score``, any case, bold and decimals allowed; ``r = X / 5``
  clipped to [0, 1];
* ``"flow_grpo"``: Flow-GRPO's ``unifiedreward_score_sglang`` (yifan123/flow_grpo ``flow_grpo/rewards.py``):
  the first case-sensitive match of ``Final Score:\s*([1-5](?:\.\d+)?)``, decimals kept, ``r = X / 5``
  never clipped ("4.5" gives 0.9, "5.5" gives 1.1, "10" gives 0.2: only its "1" matches).

The judge image: ``image_size`` (default 512, Flow-GRPO's) resizes every image to a square;
``resize_with="pillow"`` (default) does it as Flow-GRPO does, on the uint8 image with Pillow's bicubic
(``Image.resize((512, 512))``, whose default filter for RGB is bicubic); ``"torch"`` resizes the float
image (antialiased bicubic, clamped) before rounding. ``image_size=None`` sends the images as they are.

``mode="pairwise"`` (Pref-GRPO): each unordered pair of a prompt group is shown as Image 1, Image 2, and the
reward is each sample's win rate (``base.PairwiseReward``). The verdict (``parse``): ``"lenient"`` reads
"Image 1 is better" / "Image 2 is better" (any case, inside the last ``<answer>`` when present, else in the
whole reply) as 1 / 0, anything else 0.5; ``"pref_grpo"`` is Pref-GRPO's rule
(CodeGoat24/Pref-GRPO ``fastvideo/rewards/unifiedreward_think.py``): the first ``<answer>...</answer>``,
stripped; "Image 1 is better" in it gives 1, else "Image 2 is better" gives 0, else 0.5, and a reply without
an ``<answer>`` tag is a tie (0.5). Video samples are shown as ``video_frames`` uniformly sampled frames
(first all frames of sample 1, then of sample 2; "Video 1/2 is better" under ``pref_grpo``).

UnifiedReward-Think as Pref-GRPO runs it: ``template_from=PATH`` names the user's copy of
CodeGoat24/Pref-GRPO (or its ``fastvideo/rewards/templates.py``); the judge text is read from it at
construction, never shipped here: the string returned by ``get_unifiedreward_think_image_template()`` (and
``get_unifiedreward_think_video_template()`` for videos), read with ``ast`` without running the file, and
filled with ``str.format(prompt=...)`` as the authors do. With ``template_from`` the other defaults follow
the authors' client (``vllm_utils/vllm_request.py``): ``mode`` must be pairwise, ``parse="pref_grpo"``,
``max_new_tokens=4096``, no resize (``image_size="auto"`` means 512 otherwise, None here) and
``image_format="jpeg"`` (the judge sees the JPEG quality 95 of the image, as the authors' client encodes the
saved PNG); each can still be set explicitly. The other prompt templates here are flowrl's own; pass
``template=`` to use a model's training template.
"""

from __future__ import annotations

import ast
import base64
import io
import math
import os
import re
import string
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import torch

from flowrl.reward_models.base import (
    PairwiseReward,
    RewardError,
    RewardOutput,
    batch_size_of,
    check_choice,
    images_to_uint8,
)
from flowrl.reward_models.loading import load_pretrained, pick_device
from flowrl.reward_models.media import image_to_png, unwrap_video
from flowrl.reward_models.remote import check_waits, request_json
from flowrl.reward_models.video import uniform_frame_indices

YES_WORDS = ("Yes", "yes")
NO_WORDS = ("No", "no")
DEFAULT_QUESTION = 'Does this image show "{prompt}"? Please answer yes or no.'
POINTWISE_TEMPLATE = (
    "You will see an image generated from a text prompt. Judge how faithfully the image follows the prompt "
    "and how good it looks.\nPrompt: {prompt}\n"
    "Give one or two sentences of reasoning, then a last line of the form 'Final Score: X' where X is an "
    "integer from 1 (poor) to 5 (excellent)."
)
PAIRWISE_TEMPLATE = (
    "You will see two images generated from the same text prompt: Image 1 first, then Image 2. Decide which "
    "one follows the prompt more faithfully and looks better.\nPrompt: {prompt}\n"
    "Reason briefly inside <think></think>, then answer inside <answer></answer> with exactly "
    "'Image 1 is better' or 'Image 2 is better'."
)


@dataclass
class ChatRequest:
    """One user turn: images (uint8 (H, W, 3)) shown first, then the text."""

    images: list[np.ndarray]
    text: str


class ChatBackend(Protocol):
    def generate(self, requests: list[ChatRequest], max_new_tokens: int) -> list[str]: ...

    def next_token_probs(
        self, requests: list[ChatRequest], words: dict[str, tuple[str, ...]]
    ) -> list[dict[str, float]]: ...


# ---------------------------------------------------------------------------------------------- local


class TransformersChat:
    """A local VLM: ``TransformersChat.from_pretrained("Qwen/Qwen2.5-VL-7B-Instruct")`` or from components."""

    def __init__(
        self, model: Any, processor: Any, device=None, dtype: torch.dtype = torch.float32, batch_size: int = 4
    ):
        self.device, self.dtype = pick_device(device), dtype
        self.model = model.to(device=self.device, dtype=dtype).eval().requires_grad_(False)
        self.processor, self.batch_size = processor, batch_size
        self.tokenizer = processor.tokenizer
        self.tokenizer.padding_side = "left"  # the last position is every row's next token

    @classmethod
    def from_pretrained(
        cls, model: str, device=None, dtype: torch.dtype = torch.bfloat16, batch_size: int = 4, reward: str = "vlm"
    ) -> TransformersChat:
        from transformers import AutoModelForImageTextToText, AutoProcessor

        processor = load_pretrained(AutoProcessor, model, reward, "processor")
        vlm = load_pretrained(AutoModelForImageTextToText, model, reward, "model", dtype=dtype)
        return cls(vlm, processor, device, dtype, batch_size)

    def _inputs(self, requests: list[ChatRequest]) -> dict:
        from PIL import Image

        texts, images = [], []
        for request in requests:
            content = [{"type": "image"} for _ in request.images] + [{"type": "text", "text": request.text}]
            messages = [{"role": "user", "content": content}]
            texts.append(self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
            images.extend(Image.fromarray(image) for image in request.images)
        inputs = self.processor(text=texts, images=images or None, padding=True, return_tensors="pt")
        inputs = inputs.to(self.device)
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self.dtype)
        return inputs

    def _single_token_ids(self, words: tuple[str, ...]) -> list[int]:
        ids = [self.tokenizer.encode(w, add_special_tokens=False) for w in words]
        single = sorted({i[0] for i in ids if len(i) == 1})
        if not single:
            raise RewardError(f"vlm: none of {words} is a single token of this tokenizer")
        return single

    @torch.no_grad()
    def next_token_distribution(self, requests: list[ChatRequest]) -> torch.Tensor:
        """The softmax of the first answer token's logits (fp32), one row per request: (N, V) on the CPU."""
        rows = []
        for start in range(0, len(requests), self.batch_size):
            inputs = self._inputs(requests[start : start + self.batch_size])
            rows.append(self.model(**inputs).logits[:, -1].float().softmax(dim=-1).cpu())  # (b, V)
        return torch.cat(rows) if rows else torch.zeros(0, 0)

    def next_token_probs(
        self, requests: list[ChatRequest], words: dict[str, tuple[str, ...]]
    ) -> list[dict[str, float]]:
        ids = {key: self._single_token_ids(variants) for key, variants in words.items()}
        probs = self.next_token_distribution(requests)  # (N, V)
        return [{key: float(row[token_ids].sum()) for key, token_ids in ids.items()} for row in probs]

    @torch.no_grad()
    def generate(self, requests: list[ChatRequest], max_new_tokens: int) -> list[str]:
        out = []
        for start in range(0, len(requests), self.batch_size):
            inputs = self._inputs(requests[start : start + self.batch_size])
            tokens = self.model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
            new = tokens[:, inputs["input_ids"].shape[1] :]
            out.extend(self.tokenizer.batch_decode(new, skip_special_tokens=True))
        return out


# ---------------------------------------------------------------------------------------------- remote


class OpenAIChat:
    """An OpenAI-compatible chat endpoint, e.g. ``OpenAIChat("http://127.0.0.1:8000/v1", "Qwen2.5-VL-7B")``."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 120.0,
        retries: int = 3,
        backoff: float = 1.0,
        concurrency: int = 8,
        top_logprobs: int = 20,
    ):
        check_waits("vlm endpoint", timeout, retries, backoff)  # before any request: none may wait forever
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.api_key = model, api_key
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        self.concurrency, self.top_logprobs = max(1, concurrency), top_logprobs

    def _body(self, request: ChatRequest, **options: Any) -> dict:
        content = [
            {
                "type": "image_url",
                "image_url": {"url": "data:image/png;base64," + base64.b64encode(image_to_png(i)).decode()},
            }
            for i in request.images
        ]
        content.append({"type": "text", "text": request.text})
        return {"model": self.model, "messages": [{"role": "user", "content": content}], "temperature": 0.0, **options}

    def _post(self, body: dict) -> dict:
        answer = request_json(
            self.url,
            body,
            token=self.api_key,
            timeout=self.timeout,
            retries=self.retries,
            backoff=self.backoff,
            what="vlm endpoint",
        )
        if not isinstance(answer, dict) or not answer.get("choices"):
            raise RewardError(f"vlm endpoint {self.url}: the answer has no choices")
        return answer["choices"][0]

    def _map(self, fn, items: list) -> list:
        if self.concurrency == 1 or len(items) <= 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items))) as pool:
            return list(pool.map(fn, items))

    def generate(self, requests: list[ChatRequest], max_new_tokens: int) -> list[str]:
        def one(request: ChatRequest) -> str:
            choice = self._post(self._body(request, max_tokens=max_new_tokens))
            return str((choice.get("message") or {}).get("content") or "")

        return self._map(one, requests)

    def next_token_probs(
        self, requests: list[ChatRequest], words: dict[str, tuple[str, ...]]
    ) -> list[dict[str, float]]:
        return [word_probs_from_choice(choice, words) for choice in self.first_token_choices(requests)]

    def first_token_choices(self, requests: list[ChatRequest], **options: Any) -> list[dict]:
        """The raw first choice of a 1-token completion with ``top_logprobs`` per request (``options`` are
        further body fields, e.g. vLLM's ``return_tokens_as_token_ids``)."""

        def one(request: ChatRequest) -> dict:
            return self._post(
                self._body(request, max_tokens=1, logprobs=True, top_logprobs=self.top_logprobs, **options)
            )

        return self._map(one, requests)


def word_probs_from_choice(choice: dict, words: dict[str, tuple[str, ...]]) -> dict[str, float]:
    """P(word group) from the first token's ``top_logprobs`` (tokens compared after stripping spaces).

    Without logprobs, the answer text decides: 1 for the group whose spelling starts the text, else 0.
    """
    content = ((choice.get("logprobs") or {}).get("content")) or []
    if content:
        first = content[0]
        candidates = first.get("top_logprobs") or [
            {"token": first.get("token", ""), "logprob": first.get("logprob", 0.0)}
        ]
        probs = dict.fromkeys(words, 0.0)
        for cand in candidates:
            token = str(cand.get("token", "")).strip()
            for key, variants in words.items():
                if token in variants:
                    probs[key] += math.exp(float(cand.get("logprob", -math.inf)))
        return probs
    text = str((choice.get("message") or {}).get("content") or "").strip()
    return {key: float(any(text.startswith(v) for v in variants)) for key, variants in words.items()}


def make_backend(
    model: str,
    base_url: str | None,
    reward: str,
    api_key: str | None = None,
    timeout: float = 120.0,
    retries: int = 3,
    backoff: float = 1.0,
    concurrency: int = 8,
    batch_size: int = 4,
    device=None,
    dtype: torch.dtype = torch.bfloat16,
) -> ChatBackend:
    """``base_url`` set: an ``OpenAIChat`` (key from ``api_key`` or ``$OPENAI_API_KEY``); else a local model."""
    if base_url:
        api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        return OpenAIChat(base_url, model, api_key, timeout, retries, backoff, concurrency)
    return TransformersChat.from_pretrained(model, device, dtype, batch_size, reward)


def sample_images(
    name: str,
    sample: torch.Tensor,
    size: int | None,
    video_frames: int,
    resize_with: Literal["torch", "pillow"] = "torch",
) -> list[np.ndarray]:
    """One sample -> uint8 images: (3, H, W) -> [image]; (F, 3, H, W) -> ``video_frames`` sampled frames.

    ``size`` resizes each to ``size x size`` by bicubic: ``"torch"`` on the float image (antialiased,
    clamped) before rounding to uint8; ``"pillow"`` on the uint8 image with Pillow (as Flow-GRPO does).
    """
    frames = sample[None] if sample.ndim == 3 else sample[uniform_frame_indices(sample.shape[0], video_frames)]
    if size and resize_with == "torch":
        frames = torch.nn.functional.interpolate(
            frames.float(), size=(size, size), mode="bicubic", align_corners=False, antialias=True
        ).clamp(0, 1)
    images = list(images_to_uint8(name, frames))
    if size and resize_with == "pillow":
        from PIL import Image

        resample = Image.Resampling.BICUBIC  # Pillow's default filter for RGB, which Flow-GRPO relies on
        images = [np.asarray(Image.fromarray(i).resize((size, size), resample)) for i in images]
    return images


def jpeg_round_trip(image: np.ndarray, quality: int = 95) -> np.ndarray:
    """The pixels a server decodes from the JPEG (``quality``) of a uint8 (H, W, 3) image."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    with Image.open(io.BytesIO(buffer.getvalue())) as decoded:
        return np.asarray(decoded.convert("RGB"))


# ---------------------------------------------------------------------------------------------- rewards


def yes_probability(probs: dict[str, float], normalise: bool) -> float:
    """P(yes) / (P(yes) + P(no)) (0.5 when both are 0), or P(yes) itself."""
    if not normalise:
        return probs["yes"]
    total = probs["yes"] + probs["no"]
    return probs["yes"] / total if total > 0 else 0.5


class VlmJudgeReward:
    """Yes/no VLM judge (see module docstring). ``backend`` may be given ready (tests, shared models)."""

    name = "vlm_judge"
    score_range = (0.0, 1.0)
    modalities = ("image", "video")  # a video is judged on sampled frames

    def __init__(
        self,
        model: str = "Qwen/Qwen2.5-VL-7B-Instruct",
        base_url: str | None = None,
        question: str = DEFAULT_QUESTION,
        normalise: bool = True,
        question_key: str = "question",
        image_size: int | None = None,
        video_frames: int = 8,
        backend: ChatBackend | None = None,
        **backend_options: Any,
    ):
        if "{prompt}" not in question:
            raise RewardError("vlm_judge: question must contain {prompt}")
        self.backend = backend or make_backend(model, base_url, self.name, **backend_options)
        self.question, self.normalise, self.question_key = question, normalise, question_key
        self.image_size, self.video_frames = image_size, video_frames

    def questions(self, prompt: str, meta: dict) -> list[str]:
        asked = (meta or {}).get(self.question_key)
        if asked is None:
            return [self.question.format(prompt=prompt)]
        asked = [asked] if isinstance(asked, str) else list(asked)
        if not asked or not all(isinstance(q, str) and q for q in asked):
            raise RewardError(f"vlm_judge: metadata[{self.question_key!r}] must be a question or a list of questions")
        return asked

    def __call__(self, media: Any, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        media, _ = unwrap_video(media)
        if batch_size_of(media) != len(prompts):
            raise RewardError(f"vlm_judge: {batch_size_of(media)} samples but {len(prompts)} prompts")
        metadata = metadata or [{} for _ in prompts]
        requests, owner = [], []
        for i, (sample, prompt, meta) in enumerate(zip(media, prompts, metadata)):
            images = sample_images(self.name, sample, self.image_size, self.video_frames)
            for question in self.questions(prompt, meta):
                requests.append(ChatRequest(images, question))
                owner.append(i)
        probs = self.backend.next_token_probs(requests, {"yes": YES_WORDS, "no": NO_WORDS})
        owners = torch.tensor(owner)
        counts = torch.bincount(owners, minlength=len(prompts)).float()

        def per_sample(values: list[float]) -> torch.Tensor:  # mean over each sample's questions
            return torch.zeros(len(prompts)).index_add_(0, owners, torch.tensor(values, dtype=torch.float32)) / counts

        scores = per_sample([yes_probability(p, self.normalise) for p in probs])
        return RewardOutput(scores=scores, details={"p_yes": per_sample([p["yes"] for p in probs])})


_FINAL_SCORE = re.compile(r"final\s*score\s*[:：]?\s*\**\s*([0-9]+(?:\.[0-9]+)?)", re.IGNORECASE)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_IMAGE_BETTER = re.compile(r"image\s*([12])\s*is\s*better", re.IGNORECASE)


def parse_final_score(text: str) -> float | None:
    """The number after the last ``Final Score:`` (markdown bold allowed), or None."""
    found = _FINAL_SCORE.findall(text or "")
    return float(found[-1]) if found else None


# yifan123/flow_grpo flow_grpo/rewards.py (unifiedreward_score_sglang, _extract_scores)
_FLOW_GRPO_SCORE = re.compile(r"Final Score:\s*([1-5](?:\.\d+)?)")


def parse_final_score_flow_grpo(text: str) -> float | None:
    """Flow-GRPO's parse: the *first* case-sensitive ``Final Score:`` followed by a digit 1-5 and its
    decimals, or None. ``Final Score: 4.5`` gives 4.5, ``5.5`` gives 5.5 (not clipped), ``10`` gives 1 (the
    pattern stops after its first digit), ``0`` or ``6`` nothing."""
    found = _FLOW_GRPO_SCORE.search(text or "")
    return float(found.group(1)) if found else None


SCORE_PARSERS = {"lenient": parse_final_score, "flow_grpo": parse_final_score_flow_grpo}
PAIRWISE_PARSERS = ("lenient", "pref_grpo")


def parse_preference(text: str) -> float:
    """1.0 for "Image 1 is better", 0.0 for "Image 2 is better" (inside <answer> if present), else 0.5."""
    answer = _ANSWER.findall(text or "")
    verdicts = set(_IMAGE_BETTER.findall(answer[-1] if answer else text or ""))
    if verdicts == {"1"}:
        return 1.0
    if verdicts == {"2"}:
        return 0.0
    return 0.5


_PREF_GRPO_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def parse_preference_pref_grpo(text: str, noun: str = "Image") -> float:
    """Pref-GRPO's verdict (CodeGoat24/Pref-GRPO fastvideo/rewards/unifiedreward_think.py, ``_extract_answer``
    and ``_pairwise_win_rate``): the first ``<answer>...</answer>`` (case-sensitive), stripped; "Image 1 is
    better" in it -> 1.0, else "Image 2 is better" -> 0.0, else 0.5; no ``<answer>`` tag at all -> 0.5."""
    found = _PREF_GRPO_ANSWER.search(text or "")
    answer = found.group(1).strip() if found else ""
    if f"{noun} 1 is better" in answer:
        return 1.0
    if f"{noun} 2 is better" in answer:
        return 0.0
    return 0.5


# ---------------------------------------------------------------------------------------------- UR-Think

THINK_TEMPLATES_FILE = Path("fastvideo") / "rewards" / "templates.py"
THINK_TEMPLATE_FUNCTIONS = {
    "image": "get_unifiedreward_think_image_template",
    "video": "get_unifiedreward_think_video_template",
}
THINK_MAX_NEW_TOKENS = 4096  # the authors' client: vllm_utils/vllm_request.py, max_tokens


def _returned_strings(source: Path) -> dict[str, str]:
    """Module-level functions of a Python file whose body returns one string literal (docstring allowed),
    read with ``ast`` without running the file: {function name: string}."""
    out = {}
    for node in ast.parse(source.read_text(encoding="utf-8"), filename=str(source)).body:
        if not isinstance(node, ast.FunctionDef):
            continue
        body = [b for b in node.body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]
        if len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Constant):
            if isinstance(body[0].value.value, str):
                out[node.name] = body[0].value.value
    return out


def read_think_templates(template_from: str) -> dict[str, str]:
    """UnifiedReward-Think's pairwise judge texts ({"image": ..., "video": ...} where present) from the
    user's copy of CodeGoat24/Pref-GRPO (the folder, or its ``fastvideo/rewards/templates.py``)."""
    root = Path(str(template_from)).expanduser()
    source = root if root.is_file() else root / THINK_TEMPLATES_FILE
    if not root.exists():
        raise RewardError(f"unifiedreward: template_from={str(template_from)!r} does not exist")
    if not source.is_file():
        raise RewardError(
            f"unifiedreward: template_from={str(template_from)!r} has no {THINK_TEMPLATES_FILE}; is it a copy "
            "of github.com/CodeGoat24/Pref-GRPO?"
        )
    try:
        found = _returned_strings(source)
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        raise RewardError(f"unifiedreward: {source} is not readable Python ({type(exc).__name__})") from None
    templates = {kind: found[fn] for kind, fn in THINK_TEMPLATE_FUNCTIONS.items() if fn in found}
    if "image" not in templates:
        raise RewardError(
            f"unifiedreward: {source} has no {THINK_TEMPLATE_FUNCTIONS['image']}() returning a string literal"
        )
    for kind, template in templates.items():
        try:
            fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
        except ValueError:
            fields = set()
        if fields != {"prompt"}:
            raise RewardError(
                f"unifiedreward: {source} {THINK_TEMPLATE_FUNCTIONS[kind]}() is not a template with only {{prompt}}"
            )
    return templates


class UnifiedRewardReward(PairwiseReward):
    """UnifiedReward judge, pointwise or pairwise (see module docstring). Details: ``judge_text``."""

    name = "unifiedreward"
    modalities = ("image", "video")  # a video is judged on sampled frames

    def __init__(
        self,
        model: str = "CodeGoat24/UnifiedReward-2.0-qwen-7b",
        base_url: str | None = None,
        mode: str = "pointwise",
        template: str | None = None,
        template_from: str | None = None,
        max_new_tokens: int | None = None,
        image_size: int | Literal["auto"] | None = "auto",
        image_format: Literal["png", "jpeg"] | None = None,
        resize_with: Literal["pillow", "torch"] = "pillow",
        video_frames: int = 8,
        fallback: float = 0.0,
        parse: Literal["lenient", "flow_grpo", "pref_grpo"] | None = None,
        both_orders: bool = False,
        backend: ChatBackend | None = None,
        **backend_options: Any,
    ):
        if mode not in ("pointwise", "pairwise"):
            raise RewardError(f"unifiedreward: mode={mode!r}; allowed: pointwise, pairwise")
        if both_orders and mode != "pairwise":
            raise RewardError("unifiedreward: both_orders=true needs mode=pairwise")
        self.both_orders = bool(both_orders)
        self.mode, self.pairwise = mode, mode == "pairwise"
        think = template_from is not None
        if think and template is not None:
            raise RewardError("unifiedreward: give template or template_from, not both")
        if think and not self.pairwise:
            raise RewardError(
                "unifiedreward: template_from reads UnifiedReward-Think's pairwise template; set mode=pairwise"
            )
        parse = parse if parse is not None else ("pref_grpo" if think else "lenient")
        check_choice(self.name, "parse", parse, PAIRWISE_PARSERS if self.pairwise else tuple(SCORE_PARSERS))
        check_choice(self.name, "resize_with", resize_with, ("pillow", "torch"))
        image_format = image_format if image_format is not None else ("jpeg" if think else "png")
        check_choice(self.name, "image_format", image_format, ("png", "jpeg"))
        if image_size == "auto":
            image_size = None if think else 512
        self.parse, self.image_format, self.resize_with = parse, image_format, resize_with
        self.templates = read_think_templates(template_from) if think else {}
        self.template = self.templates.get("image") or template
        self.template = self.template or (PAIRWISE_TEMPLATE if self.pairwise else POINTWISE_TEMPLATE)
        if "{prompt}" not in self.template:
            raise RewardError("unifiedreward: template must contain {prompt}")
        self.template_from = str(template_from) if think else None
        self.backend = backend or make_backend(model, base_url, self.name, **backend_options)
        if max_new_tokens is None:
            max_new_tokens = THINK_MAX_NEW_TOKENS if think else 512
        self.max_new_tokens, self.image_size, self.video_frames = max_new_tokens, image_size, video_frames
        self.fallback = fallback

    @property
    def score_range(self) -> tuple[float, float]:
        # Flow-GRPO's parse never clips: X in [1, 6) gives X / 5 in [0.2, 1.2), the fallback 0
        return (min(0.0, self.fallback), 1.2) if self.parse == "flow_grpo" else (0.0, 1.0)

    def _images(self, sample: torch.Tensor) -> list[np.ndarray]:
        images = sample_images(self.name, sample, self.image_size, self.video_frames, self.resize_with)
        return [jpeg_round_trip(i) for i in images] if self.image_format == "jpeg" else images

    def _pair_template(self, media: Any) -> tuple[str, str]:
        """(template, noun) for one pair: UR-Think's video template and "Video" for video samples."""
        if not self.templates or getattr(media, "ndim", 4) != 5:
            return self.template, "Image"
        if "video" not in self.templates:
            raise RewardError(
                f"unifiedreward: {self.template_from} has no {THINK_TEMPLATE_FUNCTIONS['video']}() for video samples"
            )
        return self.templates["video"], "Video"

    def _score(self, value: float | None) -> float:
        if value is None:
            return self.fallback
        if self.parse == "flow_grpo":
            return value / 5.0  # Flow-GRPO: score / 5, not clipped
        return min(max(value / 5.0, 0.0), 1.0)

    def __call__(self, media: Any, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        media, _ = unwrap_video(media)
        if self.pairwise:
            return super().__call__(media, prompts, metadata)
        if batch_size_of(media) != len(prompts):
            raise RewardError(f"unifiedreward: {batch_size_of(media)} samples but {len(prompts)} prompts")
        requests = [ChatRequest(self._images(s), self.template.format(prompt=p)) for s, p in zip(media, prompts)]
        texts = self.backend.generate(requests, self.max_new_tokens)
        values = [SCORE_PARSERS[self.parse](t) for t in texts]
        scores = [self._score(v) for v in values]
        return RewardOutput(
            scores=torch.tensor(scores, dtype=torch.float32),
            details={"judge_text": texts, "parsed": [v is not None for v in values]},
        )

    def compare(self, media_a: Any, media_b: Any, prompts: list[str], metadata: list[dict]) -> torch.Tensor:
        template, noun = self._pair_template(media_a)
        requests = [
            ChatRequest(self._images(a) + self._images(b), template.format(prompt=p))
            for a, b, p in zip(media_a, media_b, prompts)
        ]
        texts = self.backend.generate(requests, self.max_new_tokens)
        if self.parse == "pref_grpo":
            return torch.tensor([parse_preference_pref_grpo(t, noun) for t in texts], dtype=torch.float32)
        return torch.tensor([parse_preference(t) for t in texts], dtype=torch.float32)
