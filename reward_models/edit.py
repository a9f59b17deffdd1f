r"""Edit rewards: they score an edited image against its source (``metadata["source_images"]``, the prompt row's
source images as (3, H, W) [0, 1] tensors; the first is the one edited) and the instruction (the prompt).

``edit`` (``EditReward``): a VLM judge that sees both images, plus an image-similarity term that keeps what the
instruction did not ask to change. The judge is shown two images, Image 1 the source and Image 2 the edit, and
the instruction (the two-image judgement of edit RL, in the manner of VIEScore's semantic-consistency question:
did the edit do what was asked, and only that), and ends with ``Final Score: X``, X from 0 to 10; its score is
``X / 10`` clipped to [0, 1] (``fallback`` when no score parses). It runs through the chat back ends of
``flowrl.reward_models.vlm``: a served model (vLLM, SGLang: ``base_url``, the OpenAI-compatible path, images as
base64 PNG) or a local transformers model. The similarity is computed here, offline:

* ``"ssim"`` (default): the structural similarity of Wang et al. (2004) on the luma (0.299 R + 0.587 G +
  0.114 B), an 11 x 11 Gaussian window of sigma 1.5 (smaller on images under 11 pixels), C1 = 0.01^2,
  C2 = 0.03^2, averaged over the valid positions and clipped to [0, 1];
* ``"pixel"``: ``1 - mean |edited - source|`` over pixels and channels.

The source is resized to the edited image's size first (antialiased bicubic, ``kit.images.fit``). The score is
the weighted mean ``(w_j judge + w_s similarity) / (w_j + w_s)`` (``judge_weight``, ``similarity_weight``), in
[0, 1]; ``judge_weight=0`` builds no judge (the similarity alone). Details: ``judge_score``, ``similarity``,
``judge_text``.

``edit_toy`` (``EditToyReward``): an offline stand-in for the tiny editing recipe, which depends on the source and
the instruction as an edit reward does: ``w_s pixel_similarity + (1 - w_s) colour``, where ``colour`` reads the
first of red / green / blue in the instruction and is ``(1 + mean(that channel) - mean(the other two)) / 2``.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import torch

from flowrl.pipelines.kit.images import fit
from flowrl.reward_models.base import RewardError, RewardOutput, batch_size_of, check_choice
from flowrl.reward_models.vlm import ChatBackend, ChatRequest, make_backend, parse_final_score, sample_images

SOURCE_KEY = "source_images"
EDIT_TEMPLATE = (
    "You will see two images. Image 1 is the source image; Image 2 is the result of editing it with the "
    "instruction below. Judge whether Image 2 carries out the instruction, keeps everything in Image 1 that the "
    "instruction did not ask to change, and looks natural.\nInstruction: {prompt}\n"
    "Give one or two sentences of reasoning, then a last line of the form 'Final Score: X' where X is an integer "
    "from 0 (the edit failed) to 10 (a perfect edit)."
)
LUMA = (0.299, 0.587, 0.114)


def sources_of(name: str, media: torch.Tensor, metadata: list[dict]) -> torch.Tensor:
    """Each sample's (first) source image at the edited image's size: (B, 3, H, W) in [0, 1]; one line naming the
    reward when a sample has none."""
    if len(metadata) != len(media):
        raise RewardError(f"reward {name!r}: {len(media)} samples but {len(metadata)} metadata rows")
    height, width = media.shape[-2:]
    out = []
    for i, meta in enumerate(metadata):
        images = (meta or {}).get(SOURCE_KEY)
        if not images:
            raise RewardError(
                f"reward {name!r} compares each sample with its source image, but sample {i} has none "
                f"(metadata[{SOURCE_KEY!r}]: give the data rows an 'image')"
            )
        out.append(fit(torch.as_tensor(images[0]).float().cpu(), height, width))
    return torch.stack(out)


def _gaussian_window(size: int, sigma: float) -> torch.Tensor:
    x = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    g = torch.exp(-(x**2) / (2 * sigma**2))
    g = g / g.sum()
    return (g[:, None] * g[None, :]).float()  # (size, size)


def ssim(a: torch.Tensor, b: torch.Tensor, window: int = 11, sigma: float = 1.5) -> torch.Tensor:
    """Mean SSIM (Wang et al. 2004, eq. 13) of the luma of images ``a``, ``b`` (B, 3, H, W) in [0, 1]: (B,), with a
    Gaussian window (``window`` x ``window``, ``sigma``; the window shrinks to the image's smaller side, odd) over
    the valid positions, C1 = (0.01 L)^2, C2 = (0.03 L)^2, L = 1."""
    luma = torch.tensor(LUMA, dtype=torch.float32).view(1, 3, 1, 1)
    x, y = (t.float().mul(luma).sum(1, keepdim=True) for t in (a, b))  # (B, 1, H, W)
    size = min(window, x.shape[-2], x.shape[-1])
    size -= 1 - size % 2  # odd
    kernel = _gaussian_window(size, sigma * size / window)[None, None]

    def blur(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.conv2d(t, kernel)

    mu_x, mu_y = blur(x), blur(y)
    var_x, var_y = blur(x * x) - mu_x**2, blur(y * y) - mu_y**2
    cov = blur(x * y) - mu_x * mu_y
    c1, c2 = 0.01**2, 0.03**2
    value = ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / ((mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2))
    return value.flatten(1).mean(1)


def pixel_similarity(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``1 - mean |a - b|`` per sample of images (B, 3, H, W) in [0, 1]: (B,), 1 for equal images."""
    return 1.0 - (a.float() - b.float()).abs().flatten(1).mean(1)


SIMILARITIES = {"ssim": lambda a, b: ssim(a, b).clamp(0, 1), "pixel": pixel_similarity}


def _images(name: str, media: Any) -> torch.Tensor:
    if not isinstance(media, torch.Tensor) or media.ndim != 4 or media.shape[1] != 3:
        shape = tuple(media.shape) if isinstance(media, torch.Tensor) else type(media).__name__
        raise RewardError(f"reward {name!r} scores images (B, 3, H, W), got {shape}")
    return media.float().cpu()


class EditReward:
    """VLM judge of source and edit plus a similarity term (see the module docstring)."""

    name = "edit"
    modality = "image"
    score_range = (0.0, 1.0)

    def __init__(
        self,
        model: str = "Qwen/Qwen2.5-VL-7B-Instruct",
        base_url: str | None = None,
        template: str = EDIT_TEMPLATE,
        judge_weight: float = 1.0,
        similarity_weight: float = 0.25,
        similarity: Literal["ssim", "pixel"] = "ssim",
        max_score: float = 10.0,
        fallback: float = 0.0,
        max_new_tokens: int = 256,
        image_size: int | None = 512,
        backend: ChatBackend | None = None,
        **backend_options: Any,
    ):
        check_choice(self.name, "similarity", similarity, tuple(SIMILARITIES))
        for arg, value in (("judge_weight", judge_weight), ("similarity_weight", similarity_weight)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise RewardError(f"edit: {arg}={value!r}; expected a number >= 0")
        if judge_weight + similarity_weight <= 0:
            raise RewardError("edit: judge_weight and similarity_weight are both 0; give one a positive weight")
        if "{prompt}" not in template:
            raise RewardError("edit: template must contain {prompt} (the instruction)")
        if not max_score > 0:
            raise RewardError(f"edit: max_score={max_score!r}; expected a number > 0")
        self.template, self.similarity = template, similarity
        self.judge_weight, self.similarity_weight = float(judge_weight), float(similarity_weight)
        self.max_score, self.fallback = float(max_score), float(fallback)
        self.max_new_tokens, self.image_size = max_new_tokens, image_size
        self.backend = None
        if judge_weight > 0:
            self.backend = backend or make_backend(model, base_url, self.name, **backend_options)

    def judge(self, edited: torch.Tensor, sources: torch.Tensor, prompts: list[str]) -> tuple[list[float], list[str]]:
        """The judge's score of each (source, edit) pair in [0, 1], and its replies."""
        requests = [
            ChatRequest(
                sample_images(self.name, s, self.image_size, 1) + sample_images(self.name, e, self.image_size, 1),
                self.template.format(prompt=p),
            )
            for s, e, p in zip(sources, edited, prompts)
        ]
        texts = self.backend.generate(requests, self.max_new_tokens)
        values = [parse_final_score(t) for t in texts]
        scores = [self.fallback if v is None else min(max(v / self.max_score, 0.0), 1.0) for v in values]
        return scores, texts

    def __call__(self, media: Any, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        edited = _images(self.name, media)
        if batch_size_of(edited) != len(prompts):
            raise RewardError(f"edit: {batch_size_of(edited)} samples but {len(prompts)} prompts")
        sources = sources_of(self.name, edited, metadata or [{} for _ in prompts])
        similarity = SIMILARITIES[self.similarity](edited, sources)
        details: dict[str, Any] = {"similarity": similarity}
        total = self.similarity_weight * similarity
        if self.backend is not None:
            judged, texts = self.judge(edited, sources, prompts)
            judged = torch.tensor(judged, dtype=torch.float32)
            total = total + self.judge_weight * judged
            details.update(judge_score=judged, judge_text=texts)
        scores = total / (self.judge_weight * (self.backend is not None) + self.similarity_weight)
        return RewardOutput(scores=scores.float(), details=details)


_COLOURS = {"red": 0, "green": 1, "blue": 2}
_COLOUR_WORD = re.compile(r"\b(red|green|blue)\b", re.IGNORECASE)


def colour_score(images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
    """``(1 + mean(named channel) - mean(other two)) / 2`` per sample, the channel the first of red / green / blue
    in each prompt names (0.5 when none is named): (B,) in [0, 1]."""
    means = images.float().mean(dim=(2, 3))  # (B, 3)
    out = []
    for row, prompt in zip(means, prompts):
        found = _COLOUR_WORD.search(prompt or "")
        if found is None:
            out.append(0.5)
            continue
        c = _COLOURS[found.group(1).lower()]
        others = [row[k] for k in range(3) if k != c]
        out.append(float((1 + row[c] - (others[0] + others[1]) / 2) / 2))
    return torch.tensor(out, dtype=torch.float32)


class EditToyReward:
    """The tiny editing recipe's offline reward: similarity to the source plus the instructed colour (see the module
    docstring). ``similarity_weight`` in [0, 1]."""

    name = "edit_toy"
    modality = "image"
    score_range = (0.0, 1.0)

    def __init__(self, similarity_weight: float = 0.5, similarity: Literal["ssim", "pixel"] = "pixel"):
        check_choice(self.name, "similarity", similarity, tuple(SIMILARITIES))
        if not isinstance(similarity_weight, (int, float)) or not 0 <= similarity_weight <= 1:
            raise RewardError(f"edit_toy: similarity_weight={similarity_weight!r}; expected a number in [0, 1]")
        self.similarity_weight, self.similarity = float(similarity_weight), similarity

    def __call__(self, media: Any, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        edited = _images(self.name, media)
        sources = sources_of(self.name, edited, metadata or [{} for _ in prompts])
        similarity = SIMILARITIES[self.similarity](edited, sources)
        colour = colour_score(edited, prompts)
        w = self.similarity_weight
        return RewardOutput(
            scores=(w * similarity + (1 - w) * colour).float(), details={"similarity": similarity, "colour": colour}
        )
