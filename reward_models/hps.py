"""Human Preference Score rewards: HPSv2 / v2.1 (OpenCLIP) and HPSv3 (Qwen2-VL + reward head).

HPSv2 (Wu et al., 2023): an OpenCLIP ViT-H-14 fine-tuned on HPD v2.

    score = cos(image_embedding, text_embedding)          (about 0.20-0.35 for real images)

Preprocessing is HPSv2's evaluation transform (``image_transform(..., resize_longest_max=True)`` in
HPSv2's ``hpsv2/src/open_clip/transform.py``, which Flow-GRPO's ``hpsv2_scorer.py`` calls on the uint8 PIL
images its ``rewards.py`` makes): ``ToTensor`` first (uint8 / 255, float), then ``ResizeMaxSize``, i.e.
torchvision's bicubic resize *of that float tensor* (antialiased, values left unclamped: bicubic overshoot
may leave [0, 1]) of the *longest* side to 224 (each side ``round(side * 224 / longest)``), then zero
padding to 224 x 224 (``pad // 2`` before, the rest after), then OpenAI CLIP mean/std.
``preprocess="reference"`` (default) does exactly that: round to uint8 (``clip(round(255 x), 0, 255)``, as
Flow-GRPO converts), back to float, torch resize without clamp, pad. ``"fast"`` skips the uint8 rounding
and clamps the bicubic overshoot (same geometry). One deliberate difference: an image whose longest side is
already 224 but is not square is padded here; ``ResizeMaxSize`` then skips both resize and padding and hands
the model a non-square input, which ViT-H-14 refuses. Text through OpenCLIP's own
tokenizer (its BPE vocabulary ships inside ``open_clip_torch``, so nothing is fetched), 77 tokens.
Weights: ``xswu/HPSv2::HPS_v2.1_compressed.pt`` (``version="v2.0"``: ``HPS_v2_compressed.pt``) or a local
file, loaded into ``open_clip.create_model("ViT-H-14", pretrained=None)``.

HPSv3 (Ma et al., 2025): Qwen2-VL-7B-Instruct whose hidden state at a special ``<|Reward|>`` token goes
through a small head to (mu, sigma) of a Gaussian preference score; the reward is ``mu``.

* each image is resized to 256 x 28 x 28 = 200,704 pixels (``smart_resize``: sides multiples of 28);
* the user turn holds the image and ``instruction.format(text_prompt=prompt) + suffix``; the suffix
  contains ``<|Reward|>``; the official instruction text is read from an installed ``hpsv3`` package
  (``pip install --no-deps hpsv3``) or from ``instruction_file`` (text with ``{text_prompt}``, the suffix
  appended after a line holding only ``---``), never pasted here;
* the language model runs with sequential positions (as HPSv3's own forward, which bypasses Qwen2-VL's
  multimodal rotary index), and the head ``Linear(D, 1024), ReLU, Dropout, Linear(1024, 16), ReLU,
  Linear(16, 2)`` reads the hidden state at the reward token, in float32.

Weights: the base ``Qwen/Qwen2-VL-7B-Instruct`` (processor, config and weights, hub id or folder) with the
reward token added, then ``MizzenAI/HPSv3::HPSv3.safetensors`` on top (keys in transformers-4.45 layout,
renamed here).
"""

from __future__ import annotations

import ast
import importlib.util
import math
import re
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from flowrl.reward_models.base import RewardError, RewardOutput, check_choice, images_to_uint8
from flowrl.reward_models.loading import (
    load_into,
    load_pretrained,
    load_state_dict,
    pick_device,
    resolve_file,
    strip_prefix,
)
from flowrl.reward_models.preprocess import PIL_BICUBIC, PREPROCESS_MODES, Geometry, ImageTransform, PreprocessMode

HPSV2_ARCH = "ViT-H-14"
HPSV2_CHECKPOINTS = {"v2.0": "xswu/HPSv2::HPS_v2_compressed.pt", "v2.1": "xswu/HPSv2::HPS_v2.1_compressed.pt"}


def hpsv2_transform(size: int, mean: Any, std: Any, preprocess: PreprocessMode = "reference") -> ImageTransform:
    """HPSv2's evaluation transform at ``size`` (see the module docstring): uint8 rounding, float, bicubic
    torch resize of the longest side (antialiased, unclamped), zero padding to ``size x size``, mean/std."""
    geometry = Geometry(resize="longest", edge=size, crop_hw=(size, size), resample=PIL_BICUBIC)
    return ImageTransform(geometry, mean, std, preprocess, "hpsv2", resampler="torch", clamp=False)


def openclip_transform(model: Any, preprocess: PreprocessMode = "reference") -> ImageTransform:
    """HPSv2's evaluation transform for an OpenCLIP model: longest side to the model's image size (bicubic),
    zero padding to a square (``ResizeMaxSize``), mean/std from the model's preprocess config."""
    import open_clip

    cfg = open_clip.get_model_preprocess_cfg(model)
    size = cfg.get("size", 224)
    height, width = (size, size) if isinstance(size, int) else size
    if height != width or cfg.get("interpolation", "bicubic") != "bicubic":
        raise RewardError(f"hpsv2: unsupported OpenCLIP preprocess config {cfg}")
    mean = cfg.get("mean", open_clip.OPENAI_DATASET_MEAN)
    std = cfg.get("std", open_clip.OPENAI_DATASET_STD)
    return hpsv2_transform(height, mean, std, preprocess)


class HPSv2Reward:
    """HPSv2 / v2.1 as a reward: the cosine of OpenCLIP image and text embeddings."""

    name = "hpsv2"
    score_range = (-1.0, 1.0)

    def __init__(
        self,
        version: str = "v2.1",
        checkpoint: str | None = None,
        arch: str = HPSV2_ARCH,
        device: str | torch.device | None = None,
        dtype: torch.dtype = torch.float32,
        preprocess: PreprocessMode = "reference",
    ):
        check_choice(self.name, "preprocess", preprocess, PREPROCESS_MODES)  # before loading anything
        try:
            import open_clip
        except ImportError as exc:
            raise RewardError("hpsv2: needs `pip install open_clip_torch`") from exc
        if checkpoint is None:
            if version not in HPSV2_CHECKPOINTS:
                raise RewardError(f"hpsv2: version={version!r}; allowed: {', '.join(HPSV2_CHECKPOINTS)}")
            checkpoint = HPSV2_CHECKPOINTS[version]
        path = resolve_file(checkpoint, self.name, "checkpoint")
        try:
            model = open_clip.create_model(arch, pretrained=None)
        except RuntimeError as exc:
            raise RewardError(f"hpsv2: unknown OpenCLIP architecture {arch!r} ({exc})") from exc
        load_into(model, strip_prefix(load_state_dict(path, self.name), "module."), self.name, "checkpoint")
        self._setup(model, open_clip.get_tokenizer(arch), device, dtype, preprocess)

    @classmethod
    def from_components(
        cls,
        model: nn.Module,
        tokenizer: Any,
        device=None,
        dtype=torch.float32,
        preprocess: PreprocessMode = "reference",
    ) -> HPSv2Reward:
        """From a ready OpenCLIP ``CLIP`` model and its tokenizer (``open_clip.get_tokenizer``)."""
        reward = cls.__new__(cls)
        reward._setup(model, tokenizer, device, dtype, preprocess)
        return reward

    def _setup(self, model: nn.Module, tokenizer: Any, device, dtype, preprocess: PreprocessMode = "reference") -> None:
        check_choice(self.name, "preprocess", preprocess, PREPROCESS_MODES)
        self.device, self.dtype = pick_device(device), dtype
        self.model = model.to(device=self.device, dtype=dtype).eval().requires_grad_(False)
        self.tokenizer = tokenizer
        self.preprocess = preprocess
        self.transform = openclip_transform(model, preprocess)
        self.grad_transform = openclip_transform(model, "fast")  # in torch: ``score_grad``

    @torch.no_grad()
    def embed(self, media: torch.Tensor, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Unit-norm image and text embeddings, (B, D) each, float32."""
        return self.embed_pixels(self.transform(media.to(self.device)), prompts)

    def embed_pixels(self, pixels: torch.Tensor, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """``embed`` of preprocessed pixels (B, 3, 224, 224), with grad when grad is on."""
        tokens = self.tokenizer(prompts).to(self.device)  # (B, 77)
        image = self.model.encode_image(pixels.to(self.dtype)).float()
        text = self.model.encode_text(tokens).float()
        return F.normalize(image, dim=-1), F.normalize(text, dim=-1)

    @torch.no_grad()
    def __call__(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        if media.ndim != 4 or media.shape[1] != 3 or len(media) != len(prompts):
            raise RewardError(
                f"hpsv2: expects images (B, 3, H, W) and B prompts, got {tuple(media.shape)}, {len(prompts)}"
            )
        image, text = self.embed(media, prompts)
        return RewardOutput(scores=(image * text).sum(dim=-1).cpu())

    def score_grad(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> torch.Tensor:
        """The score (B,) with autograd back to ``media``, on its device; preprocessed in torch."""
        image, text = self.embed_pixels(self.grad_transform(media.to(self.device)), prompts)
        return (image * text).sum(dim=-1).to(media.device)


# ---------------------------------------------------------------------------------------------- HPSv3

HPSV3_BASE = "Qwen/Qwen2-VL-7B-Instruct"
HPSV3_CHECKPOINT = "MizzenAI/HPSv3::HPSv3.safetensors"
REWARD_TOKEN = "<|Reward|>"
HPSV3_PIXELS = 256 * 28 * 28  # min_pixels = max_pixels in HPSv3's config


def smart_resize(
    height: int, width: int, factor: int = 28, min_pixels: int = HPSV3_PIXELS, max_pixels: int = HPSV3_PIXELS
) -> tuple[int, int]:
    """Qwen2-VL's resize rule: sides rounded to multiples of ``factor``, area brought into [min, max].

    e.g. (512, 512) -> (448, 448) for 200,704 pixels: 512/28 rounds to 18 -> 504^2 = 254,016 > max, so
    beta = sqrt(512*512 / 200704) = 1.1429 and each side is floor(512 / 1.1429 / 28) * 28 = 448.
    """
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def hpsv3_head(hidden: int) -> nn.Sequential:
    """HPSv3's ``ranknet`` head: indices 0, 3, 5 hold the linears, as in the released checkpoint."""
    return nn.Sequential(
        nn.Linear(hidden, 1024), nn.ReLU(), nn.Dropout(0.05), nn.Linear(1024, 16), nn.ReLU(), nn.Linear(16, 2)
    )


def read_hpsv3_template(instruction_file: str | None = None) -> str:
    """The HPSv3 text template: ``instruction`` (with ``{text_prompt}``) followed by the reward-token suffix.

    From ``instruction_file`` (instruction, a line ``---``, suffix) or from the installed ``hpsv3`` package's
    ``dataset/data_collator_qwen.py`` (its ``INSTRUCTION`` and ``prompt_with_special_token`` string
    constants, read with ``ast`` without importing the package, which pins an old transformers).
    """
    if instruction_file is not None:
        text = Path(instruction_file).read_text()
        instruction, sep, suffix = text.partition("\n---\n")
        template = instruction + suffix if sep else text
    else:
        spec = importlib.util.find_spec("hpsv3")
        source = (
            Path(next(iter(spec.submodule_search_locations))) / "dataset" / "data_collator_qwen.py" if spec else None
        )
        if source is None or not source.is_file():
            raise RewardError(
                "hpsv3: the official instruction text is needed: `pip install --no-deps hpsv3`, "
                "or pass instruction_file= (instruction with {text_prompt}, a line '---', then the suffix)"
            )
        constants = _string_constants(source)
        if not {"INSTRUCTION", "prompt_with_special_token"} <= set(constants):
            raise RewardError(f"hpsv3: {source} lacks INSTRUCTION / prompt_with_special_token")
        template = constants["INSTRUCTION"] + constants["prompt_with_special_token"]
    if "{text_prompt}" not in template or template.count(REWARD_TOKEN) != 1:
        raise RewardError(f"hpsv3: the template needs one {{text_prompt}} and one {REWARD_TOKEN}")
    return template


def _string_constants(source: Path) -> dict[str, str]:
    """Module-level ``NAME = "string"`` assignments of a Python file, read without running it."""
    constants = {}
    for node in ast.parse(source.read_text()).body:
        single = isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
        if single and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            constants[node.targets[0].id] = node.value.value
    return constants


_HPSV3_KEYS = [
    (re.compile(r"^visual\."), "model.visual."),
    (re.compile(r"^model\.(?!language_model\.|visual\.)"), "model.language_model."),
]


def rename_hpsv3_keys(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Split a released HPSv3 state dict into (backbone in transformers-5 layout, head without ``rm_head.``)."""
    backbone, head = {}, {}
    for key, value in state.items():
        if key.startswith("rm_head."):
            head[key[len("rm_head.") :]] = value
            continue
        for pattern, replacement in _HPSV3_KEYS:
            key = pattern.sub(replacement, key)
        backbone[key] = value
    return backbone, head


class HPSv3Reward:
    """HPSv3 as a reward (``mu``); details: ``sigma``. ``from_components`` takes a ready Qwen2-VL model."""

    name = "hpsv3"
    score_range = (None, None)

    def __init__(
        self,
        checkpoint: str = HPSV3_CHECKPOINT,
        base: str = HPSV3_BASE,
        instruction_file: str | None = None,
        device: str | torch.device | None = None,
        dtype: torch.dtype = torch.bfloat16,
    ):
        from transformers import AutoProcessor, Qwen2VLForConditionalGeneration

        template = read_hpsv3_template(instruction_file)
        path = resolve_file(checkpoint, self.name, "checkpoint")
        processor = load_pretrained(AutoProcessor, base, self.name, "processor", padding_side="right")
        processor.tokenizer.add_special_tokens({"additional_special_tokens": [REWARD_TOKEN]})
        model = load_pretrained(Qwen2VLForConditionalGeneration, base, self.name, "base model", dtype=dtype)
        backbone, head_state = rename_hpsv3_keys(load_state_dict(path, self.name))
        embed = backbone.get("model.language_model.embed_tokens.weight")
        model.resize_token_embeddings(len(processor.tokenizer) if embed is None else embed.shape[0])
        result = model.load_state_dict(backbone, strict=False)
        missing = [k for k in result.missing_keys if k != "lm_head.weight"]  # tied to the embeddings in 2B/7B? kept
        if result.unexpected_keys or missing:
            raise RewardError(
                f"hpsv3: checkpoint keys do not fit Qwen2-VL: unexpected {result.unexpected_keys[:3]}, "
                f"missing {missing[:3]}"
            )
        head = hpsv3_head(model.config.text_config.hidden_size)
        load_into(head, head_state, self.name, "reward head")
        self._setup(model, processor, head, template, device, dtype)

    @classmethod
    def from_components(
        cls,
        model: Any,
        processor: Any,
        head: nn.Module,
        template: str,
        device=None,
        dtype=torch.float32,
        pixels: int = HPSV3_PIXELS,
    ) -> HPSv3Reward:
        """From a Qwen2-VL model, its processor (tokenizer holding ``<|Reward|>``), a head and a template."""
        reward = cls.__new__(cls)
        reward._setup(model, processor, head, template, device, dtype, pixels)
        return reward

    def _setup(self, model, processor, head, template, device, dtype, pixels: int = HPSV3_PIXELS) -> None:
        self.device, self.dtype, self.pixels = pick_device(device), dtype, pixels
        self.model = model.to(device=self.device, dtype=dtype).eval().requires_grad_(False)
        self.head = head.to(device=self.device, dtype=torch.float32).eval().requires_grad_(False)
        self.processor, self.template = processor, template
        self.reward_id = processor.tokenizer.convert_tokens_to_ids(REWARD_TOKEN)
        if self.reward_id is None or self.reward_id == processor.tokenizer.unk_token_id:
            raise RewardError(f"hpsv3: the tokenizer has no {REWARD_TOKEN} token")
        vision = model.config.vision_config
        self.factor = vision.patch_size * vision.spatial_merge_size

    def _inputs(self, media: torch.Tensor, prompts: list[str]) -> dict:
        from PIL import Image

        images = []
        for image in images_to_uint8(self.name, media):
            h, w = smart_resize(*image.shape[:2], self.factor, self.pixels, self.pixels)
            images.append(Image.fromarray(image).resize((w, h), Image.Resampling.BICUBIC))
        texts = []
        for prompt in prompts:
            messages = [
                {
                    "role": "user",
                    "content": [{"type": "image"}, {"type": "text", "text": self.template.format(text_prompt=prompt)}],
                }
            ]
            texts.append(self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
        size = {"shortest_edge": self.pixels // 2, "longest_edge": self.pixels * 2}  # keep our resize
        return self.processor(text=texts, images=images, padding=True, return_tensors="pt", size=size).to(self.device)

    @torch.no_grad()
    def __call__(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        if len(media) != len(prompts):
            raise RewardError(f"hpsv3: {len(media)} images but {len(prompts)} prompts")
        inputs = self._inputs(media, prompts)
        ids = inputs["input_ids"]  # (B, L)
        if not bool(((ids == self.reward_id).sum(dim=1) == 1).all()):
            raise RewardError(f"hpsv3: every sample needs exactly one {REWARD_TOKEN} token")
        core = self.model.model
        embeds = core.get_input_embeddings()(ids)  # (B, L, D)
        features = core.get_image_features(inputs["pixel_values"].to(self.dtype), inputs["image_grid_thw"])
        features = getattr(features, "pooler_output", features)
        features = torch.cat(list(features)).to(embeds)  # (image tokens, D)
        mask = (ids == self.model.config.image_token_id)[..., None].expand_as(embeds)
        embeds = embeds.masked_scatter(mask, features)
        hidden = core.language_model(inputs_embeds=embeds, attention_mask=inputs["attention_mask"]).last_hidden_state
        out = self.head(hidden[ids == self.reward_id].float())  # (B, 2): mu, sigma
        return RewardOutput(scores=out[:, 0].cpu(), details={"sigma": out[:, 1].cpu()})
