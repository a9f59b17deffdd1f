"""GenEval's two models: an instance-segmentation detector and a CLIP colour classifier.

**Detector.** GenEval uses mmdet's Mask2Former Swin-S trained on COCO instances. Here any transformers
model whose output carries per-query class logits and mask logits (Mask2Former, MaskFormer) serves;
the default is ``facebook/mask2former-swin-small-coco-instance``, the same architecture and data.
Pre-processing is the checkpoint's own image processor; post-processing follows mmdet's Mask2Former
instance head, which GenEval's numbers come from: the top ``max_per_image`` (query, class) pairs by
class probability, mask logits upsampled bilinearly to the network input, cropped to the image's valid
region and resized to the original size, binarised at logit 0; score = class probability x mean mask
probability inside the mask; box = the mask's extent (``x2 = last column + 1``). Labels are mapped to
GenEval's class names (``constants.geneval_class``); labels outside the 80 classes are dropped.

**Colour classifier.** As GenEval: the image is composited through the instance mask onto a flat
``#999`` grey canvas, cropped to the box, and classified zero-shot by open_clip (ViT-L-14, OpenAI
weights by default) over the ten colours, each colour's text embedding being the normalised mean of
three templates.

Nothing here downloads unless a hub id is given and the hub is reachable; a model that cannot be loaded
raises ``GenEvalLoadError`` with a one-line message.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from .constants import COLORS, geneval_class
from .rules import ClassDetections

logger = logging.getLogger(__name__)

DEFAULT_DETECTOR = "facebook/mask2former-swin-small-coco-instance"
DEFAULT_CLIP_ARCH = "ViT-L-14"
DEFAULT_CLIP_PRETRAINED = "openai"
COLOR_TEMPLATES: tuple[str, ...] = (
    "a photo of a {color} {name}",
    "a photo of a {color}-colored {name}",
    "a photo of a {color} object",
)


class GenEvalLoadError(RuntimeError):
    """A GenEval model could not be built (missing weights, offline hub, wrong checkpoint)."""


class Detector(Protocol):
    """Raw detections per GenEval class for each image (scores above the detector's own floor)."""

    def __call__(self, images: Sequence[Image.Image]) -> list[dict[str, ClassDetections]]: ...


class ColorClassifier(Protocol):
    """One colour name from ``COLORS`` per detection of ``name`` in ``image``."""

    def __call__(self, image: Image.Image, dets: ClassDetections, name: str) -> list[str]: ...


def _one_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: first line`` of an exception, cut to ``limit`` characters."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _looks_like_path(name: str) -> bool:
    """A local path rather than a hub id (``org/name``): absolute, or starting with ``.`` or ``~``."""
    return name.startswith((".", "~")) or Path(name).is_absolute()


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


# ------------------------------------------------------------------------------------------- detector


def label_map(id2label: dict[Any, str]) -> dict[int, str]:
    """Model label id -> GenEval class; refuses a label set with no COCO class (wrong checkpoint)."""
    mapping = {int(i): name for i, label in id2label.items() if (name := geneval_class(str(label)))}
    if not mapping:
        sample = ", ".join(list(map(str, id2label.values()))[:5])
        raise GenEvalLoadError(f"detector labels ({sample}, ...) contain none of GenEval's 80 COCO classes")
    return mapping


def mask_boxes(masks: torch.Tensor) -> torch.Tensor:
    """Boxes ``(N, 4)`` ``x1, y1, x2, y2`` of binary masks ``(N, H, W)``; right/bottom edges exclusive."""
    cols, rows = masks.any(dim=1), masks.any(dim=2)  # (N, W), (N, H)
    w, h = cols.shape[1], rows.shape[1]
    ar_w = torch.arange(w, device=masks.device)
    ar_h = torch.arange(h, device=masks.device)
    x1 = torch.where(cols, ar_w, w).amin(dim=1)
    x2 = torch.where(cols, ar_w, -1).amax(dim=1) + 1
    y1 = torch.where(rows, ar_h, h).amin(dim=1)
    y2 = torch.where(rows, ar_h, -1).amax(dim=1) + 1
    return torch.stack([x1, y1, x2, y2], dim=1).float()


class QueryInstanceDetector:
    """A Mask2Former-style transformers model used as GenEval's detector (see the module docstring)."""

    def __init__(
        self,
        model: torch.nn.Module,
        processor: Any,
        device: str | None = None,
        min_score: float = 0.3,
        max_per_image: int = 100,
        batch_size: int = 4,
    ) -> None:
        self.device = device or default_device()
        self.model = model.to(self.device).eval()
        self.processor = processor
        self.classes = label_map(model.config.id2label)
        self.min_score = min_score
        self.max_per_image = max_per_image
        self.batch_size = batch_size

    @classmethod
    def from_pretrained(
        cls, name_or_path: str = DEFAULT_DETECTOR, processor_kwargs: dict[str, Any] | None = None, **kwargs: Any
    ) -> QueryInstanceDetector:
        """Load a checkpoint (hub id or local folder) and its image processor; one-line error on failure.

        ``processor_kwargs`` override the processor's settings, e.g. ``{"size": {"shortest_edge": 800,
        "longest_edge": 1333}}`` for the test-time scale of mmdet's COCO configs; ``kwargs`` go to ``__init__``.
        """
        from transformers import AutoImageProcessor, AutoModelForUniversalSegmentation

        if _looks_like_path(name_or_path) and not Path(name_or_path).expanduser().is_dir():
            raise GenEvalLoadError(f"GenEval detector folder {name_or_path} does not exist")
        try:
            processor = AutoImageProcessor.from_pretrained(name_or_path, **(processor_kwargs or {}))
            model = AutoModelForUniversalSegmentation.from_pretrained(name_or_path)
        except Exception as exc:  # hub, file and config errors all end here
            logger.debug("detector load failed", exc_info=True)
            raise GenEvalLoadError(
                f"cannot load GenEval detector {name_or_path!r} ({_one_line(exc)}); "
                "pass a local folder holding the checkpoint, or a hub id with the hub reachable"
            ) from None
        return cls(model, processor, **kwargs)

    def __call__(self, images: Sequence[Image.Image]) -> list[dict[str, ClassDetections]]:
        out: list[dict[str, ClassDetections]] = []
        for start in range(0, len(images), self.batch_size):
            out.extend(self._detect(images[start : start + self.batch_size]))
        return out

    @torch.no_grad()
    def _detect(self, images: Sequence[Image.Image]) -> list[dict[str, ClassDetections]]:
        rgb = [image.convert("RGB") for image in images]
        inputs = self.processor(images=rgb, return_tensors="pt")
        pixel_mask = inputs.get("pixel_mask")
        outputs = self.model(
            pixel_values=inputs["pixel_values"].to(self.device, dtype=next(self.model.parameters()).dtype),
            pixel_mask=None if pixel_mask is None else pixel_mask.to(self.device),
        )
        input_hw = tuple(inputs["pixel_values"].shape[-2:])
        results = []
        for i, image in enumerate(rgb):
            valid = input_hw if pixel_mask is None else _valid_extent(pixel_mask[i])
            results.append(
                self.postprocess(
                    outputs.class_queries_logits[i], outputs.masks_queries_logits[i], input_hw, valid, image.size[::-1]
                )
            )
        return results

    def postprocess(
        self,
        class_logits: torch.Tensor,  # (Q, K + 1), last = no object
        mask_logits: torch.Tensor,  # (Q, h, w) at a fraction of the input resolution
        input_hw: tuple[int, int],
        valid_hw: tuple[int, int],
        image_hw: tuple[int, int],
    ) -> dict[str, ClassDetections]:
        """Per-class detections of one image (mmdet's Mask2Former instance post-processing)."""
        probs = class_logits.float().softmax(-1)[:, :-1]  # (Q, K)
        num_classes = probs.shape[1]
        top, index = probs.flatten().topk(min(self.max_per_image, probs.numel()))
        labels, queries = index % num_classes, index // num_classes
        # The final score is top * (mask score <= 1), so pairs at or under the floor can go now.
        known = torch.tensor([int(lab) in self.classes for lab in labels], dtype=torch.bool, device=top.device)
        keep = (top > self.min_score) & known
        top, labels, queries = top[keep], labels[keep], queries[keep]
        masks = self._full_size_masks(mask_logits[queries], input_hw, valid_hw, image_hw)  # (N, H, W)
        binary = masks > 0
        area = binary.flatten(1).sum(1)
        mask_score = (masks.sigmoid() * binary).flatten(1).sum(1) / (area + 1e-6)
        scores = top * mask_score
        keep = (area > 0) & (scores > self.min_score)
        return self._group(scores[keep], labels[keep], binary[keep])

    @staticmethod
    def _full_size_masks(
        logits: torch.Tensor, input_hw: tuple[int, int], valid_hw: tuple[int, int], image_hw: tuple[int, int]
    ) -> torch.Tensor:
        if len(logits) == 0:
            return logits.new_zeros((0, *image_hw)).float()
        x = F.interpolate(logits[None].float(), size=input_hw, mode="bilinear", align_corners=False)
        x = x[..., : valid_hw[0], : valid_hw[1]]
        return F.interpolate(x, size=image_hw, mode="bilinear", align_corners=False)[0]

    def _group(self, scores: torch.Tensor, labels: torch.Tensor, binary: torch.Tensor) -> dict[str, ClassDetections]:
        boxes = mask_boxes(binary)
        out: dict[str, ClassDetections] = {}
        for label in labels.unique().tolist():
            sel = (labels == label).nonzero().flatten()
            order = sel[scores[sel].argsort(descending=True)]
            out[self.classes[label]] = ClassDetections(
                boxes=boxes[order].cpu().numpy(),
                scores=scores[order].cpu().numpy(),
                masks=binary[order].cpu().numpy(),
            )
        return out


def _valid_extent(pixel_mask: torch.Tensor) -> tuple[int, int]:
    """Height and width of the unpadded image inside a padded batch (``pixel_mask`` (H, W) of 0/1)."""
    return int(pixel_mask.any(dim=1).sum()), int(pixel_mask.any(dim=0).sum())


# ------------------------------------------------------------------------------------ colour classifier


def masked_crop(
    image: Image.Image, box: Sequence[float], mask: np.ndarray | None, bgcolor: str = "#999", crop: bool = True
) -> Image.Image:
    """The object alone: pixels outside ``mask`` (H, W) painted ``bgcolor``, then cropped to ``box``."""
    image = image.convert("RGB")
    if mask is not None:
        if mask.shape != (image.height, image.width):
            raise ValueError(f"mask shape {mask.shape} does not match image size {(image.height, image.width)}")
        canvas = Image.new("RGB", image.size, color=bgcolor)
        image = Image.composite(image, canvas, Image.fromarray(np.asarray(mask, dtype=np.uint8) * 255))
    if crop:
        image = image.crop(tuple(round(float(v)) for v in box[:4]))
    return image


class ClipColorClassifier:
    """Zero-shot colour of each detection with an open_clip model (see the module docstring)."""

    def __init__(
        self,
        model: torch.nn.Module,
        preprocess: Any,
        tokenizer: Any,
        device: str | None = None,
        bgcolor: str = "#999",
        crop: bool = True,
        batch_size: int = 16,
    ) -> None:
        self.device = device or default_device()
        self.model = model.to(self.device).eval()
        self.preprocess = preprocess
        self.tokenizer = tokenizer
        self.bgcolor = bgcolor
        self.crop = crop
        self.batch_size = batch_size
        self._weights: dict[str, torch.Tensor] = {}

    @classmethod
    def from_pretrained(
        cls, arch: str = DEFAULT_CLIP_ARCH, pretrained: str | None = DEFAULT_CLIP_PRETRAINED, **kwargs: Any
    ) -> ClipColorClassifier:
        """Build open_clip ``arch`` with ``pretrained`` weights (tag, file, or ``None`` for random init)."""
        try:
            import open_clip

            model, _, preprocess = open_clip.create_model_and_transforms(arch, pretrained=pretrained)
            tokenizer = open_clip.get_tokenizer(arch)
        except Exception as exc:
            logger.debug("CLIP load failed", exc_info=True)
            raise GenEvalLoadError(
                f"cannot load the GenEval colour classifier {arch!r} / {pretrained!r} ({_one_line(exc)}); "
                "install open_clip_torch and pass a local weights file, or allow the download"
            ) from None
        if pretrained is None:
            logger.warning("colour classifier %s has random weights (pretrained=None)", arch)
        return cls(model, preprocess, tokenizer, **kwargs)

    @torch.no_grad()
    def text_weights(self, name: str) -> torch.Tensor:
        """Unit text embeddings ``(D, 10)`` of the colours for class ``name`` (templates averaged)."""
        if name not in self._weights:
            columns = []
            for color in COLORS:
                texts = [t.format(color=color, name=name) for t in COLOR_TEMPLATES]
                emb = F.normalize(self.model.encode_text(self.tokenizer(texts).to(self.device)).float(), dim=-1)
                columns.append(F.normalize(emb.mean(dim=0), dim=-1))
            self._weights[name] = torch.stack(columns, dim=1)
        return self._weights[name]

    @torch.no_grad()
    def __call__(self, image: Image.Image, dets: ClassDetections, name: str) -> list[str]:
        masks = dets.masks if dets.masks is not None else [None] * len(dets)
        crops = [masked_crop(image, box, mask, self.bgcolor, self.crop) for box, mask in zip(dets.boxes, masks)]
        labels: list[str] = []
        weights = self.text_weights(name)
        for start in range(0, len(crops), self.batch_size):
            batch = torch.stack([self.preprocess(c) for c in crops[start : start + self.batch_size]]).to(self.device)
            feats = F.normalize(self.model.encode_image(batch).float(), dim=-1)  # (b, D)
            labels.extend(COLORS[int(i)] for i in (feats @ weights).argmax(dim=1))
        return labels
