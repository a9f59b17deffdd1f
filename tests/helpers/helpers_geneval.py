"""Tiny GenEval stand-ins shared by the GenEval tests: real transformers / open_clip classes, random weights.

* ``build_tiny_detector()``: a Mask2Former (Swin backbone) whose every query says "dog" with probability ~1
  and whose masks stay random, wrapped in ``QueryInstanceDetector``; ``save_tiny_detector(folder)``
  writes it as a local checkpoint folder that ``--detector FOLDER`` loads.
* ``build_tiny_clip(folder)``: an open_clip model registered as ``flowrl-tiny-clip`` (random weights);
  ``save_tiny_clip_weights(path)`` writes weights that ``--clip-pretrained PATH`` loads.
* ``noise_image``, ``write_folder``: images and GenEval folders.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from flowrl.benchmarks.geneval.constants import CLASSES

DOG = CLASSES.index("dog")
TINY_CLIP = "flowrl-tiny-clip"
TINY_CLIP_CONFIG = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


def build_tiny_mask2former():
    from transformers import (
        Mask2FormerConfig,
        Mask2FormerForUniversalSegmentation,
        Mask2FormerImageProcessor,
        SwinConfig,
    )

    torch.manual_seed(0)
    swin = SwinConfig(
        image_size=64, patch_size=4, embed_dim=16, depths=[1, 1, 1, 1], num_heads=[1, 1, 2, 2], window_size=4,
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )  # fmt: skip
    config = Mask2FormerConfig(
        backbone_config=swin, feature_size=32, mask_feature_size=32, hidden_dim=32, encoder_feedforward_dim=32,
        encoder_layers=1, decoder_layers=2, num_attention_heads=2, dim_feedforward=32, num_queries=6,
        id2label=dict(enumerate(CLASSES)), label2id={c: i for i, c in enumerate(CLASSES)},
    )  # fmt: skip
    model = Mask2FormerForUniversalSegmentation(config)
    with torch.no_grad():  # every query says "dog" with probability ~1; the masks stay random
        model.class_predictor.weight.zero_()
        model.class_predictor.bias.zero_()
        model.class_predictor.bias[DOG] = 12.0
    processor = Mask2FormerImageProcessor(size={"shortest_edge": 64, "longest_edge": 64})
    return model, processor


def build_tiny_detector():
    from flowrl.benchmarks.geneval.detect import QueryInstanceDetector

    model, processor = build_tiny_mask2former()
    return QueryInstanceDetector(model, processor, device="cpu")


def saved(folder: Path, model, processor) -> Path:
    """``model`` and its ``processor`` written to ``folder`` (``save_pretrained``); returns the folder."""
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def save_tiny_detector(folder: Path) -> Path:
    return saved(folder, *build_tiny_mask2former())


def register_tiny_clip(folder: Path) -> None:
    import open_clip

    path = Path(folder) / f"{TINY_CLIP}.json"
    path.write_text(json.dumps(TINY_CLIP_CONFIG))
    open_clip.add_model_config(path)


def build_tiny_clip(folder: Path):
    from flowrl.benchmarks.geneval.detect import ClipColorClassifier

    register_tiny_clip(folder)
    torch.manual_seed(0)
    return ClipColorClassifier.from_pretrained(TINY_CLIP, pretrained=None, device="cpu")


def save_tiny_clip_weights(path: Path) -> Path:
    """Random weights of the registered tiny arch in a file open_clip loads as ``pretrained=path``."""
    import open_clip

    torch.manual_seed(0)
    model = open_clip.create_model(TINY_CLIP, pretrained=None)
    torch.save(model.state_dict(), path)
    return path


def noise_image(h: int, w: int, seed: int = 0) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8))


def write_folder(root: Path, rows: list[dict], images_per_prompt: int = 2) -> None:
    for i, meta in enumerate(rows):
        folder = root / f"{i:05d}"
        (folder / "samples").mkdir(parents=True)
        (folder / "metadata.jsonl").write_text(json.dumps(meta))
        for k in range(images_per_prompt):
            noise_image(48, 48, seed=10 * i + k).save(folder / "samples" / f"{k:04d}.png")
    (root / "00000" / "samples" / "grid.png").write_bytes(b"")  # ignored: not <digits>.png
