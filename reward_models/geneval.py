"""GenEval as a reward: detector + CLIP colour classifier + GenEval's rules (``flowrl.benchmarks.geneval``).

Each sample's metadata carries its GenEval row: ``tag``, ``include`` and optionally ``exclude`` (the
prompt comes from ``prompts``; a ``prompt`` key in the metadata is ignored). ``mode`` picks the score:

* ``"partial"`` (default, the training reward): partial credit in ``[0, 1]`` (Flow-GRPO's ``scores``
  without its quirks; see ``flowrl.benchmarks.geneval.rules``);
* ``"strict"``: 1 when every include clause holds with exact counts (Flow-GRPO's ``strict_accuracy``);
* ``"official"``: 1 when GenEval's own rule says correct (Flow-GRPO's ``accuracy``).

Details (length B): ``correct`` and ``strict`` (bool tensors), ``partial`` (float tensor), ``tag`` and
``reasons`` (lists of str; the official rule's reasons, newline-joined, empty when correct).
Images go to the detector as uint8 RGB without JPEG, as in GenEval's PNG pipeline.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from PIL import Image

from flowrl.benchmarks.geneval.detect import (
    DEFAULT_CLIP_ARCH,
    DEFAULT_CLIP_PRETRAINED,
    DEFAULT_DETECTOR,
    ClipColorClassifier,
    ColorClassifier,
    Detector,
    GenEvalLoadError,
    QueryInstanceDetector,
)
from flowrl.benchmarks.geneval.prompts import MetadataError, check_metadata
from flowrl.benchmarks.geneval.rules import RuleConfig
from flowrl.benchmarks.geneval.scoring import GenEvalScorer
from flowrl.reward_models.base import RewardError, RewardOutput, images_to_uint8

logger = logging.getLogger(__name__)

MODES = ("partial", "strict", "official")


class GenEvalReward:
    """GenEval reward; ``detector`` / ``colors`` are model ids (or local paths) or ready-made objects.

    ``colors=None`` skips the CLIP model; a sample with a colour clause then raises an error.
    Extra keyword arguments are ``RuleConfig`` fields (``threshold``, ``counting_threshold``, ...).
    """

    name = "geneval"

    def __init__(
        self,
        detector: str | Detector = DEFAULT_DETECTOR,
        colors: str | ColorClassifier | None = DEFAULT_CLIP_ARCH,
        clip_pretrained: str | None = DEFAULT_CLIP_PRETRAINED,
        mode: str = "partial",
        device: str | None = None,
        **rule_options: Any,
    ) -> None:
        if mode not in MODES:
            raise RewardError(f"geneval reward: mode={mode!r}; allowed: {', '.join(MODES)}")
        try:
            rules = RuleConfig(**rule_options)
        except (TypeError, ValueError) as exc:
            raise RewardError(f"geneval reward: {exc}") from None
        try:
            if isinstance(detector, str):
                detector = QueryInstanceDetector.from_pretrained(detector, device=device, min_score=_floor(rules))
            if isinstance(colors, str):
                colors = ClipColorClassifier.from_pretrained(colors, clip_pretrained, device=device)
        except GenEvalLoadError as exc:
            raise RewardError(f"geneval reward: {exc}") from None
        self.mode = mode
        self.scorer = GenEvalScorer(detector, colors, rules)

    def __call__(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        pixels = images_to_uint8(self.name, media)  # (B, H, W, 3)
        if not len(prompts) == len(metadata) == len(pixels):
            raise RewardError(f"geneval reward: {len(pixels)} images, {len(prompts)} prompts, {len(metadata)} metadata")
        rows = [_row(i, p, m) for i, (p, m) in enumerate(zip(prompts, metadata))]
        results = self.scorer.judge([Image.fromarray(p) for p in pixels], rows)
        correct = torch.tensor([r.judgement.correct for r in results], dtype=torch.bool)
        strict = torch.tensor([r.judgement.strict for r in results], dtype=torch.bool)
        partial = torch.tensor([r.judgement.partial for r in results], dtype=torch.float32)
        scores = {"partial": partial, "strict": strict.float(), "official": correct.float()}[self.mode]
        details = {
            "correct": correct,
            "strict": strict,
            "partial": partial,
            "tag": [row["tag"] for row in rows],
            "reasons": ["\n".join(r.judgement.reasons) for r in results],
        }
        return RewardOutput(scores=scores, details=details)


def _floor(rules: RuleConfig) -> float:
    """The detector may drop what no rule can keep: scores at or under the lower of the two thresholds."""
    return min(rules.threshold, rules.counting_threshold)


def _row(index: int, prompt: str, metadata: dict) -> dict:
    if not isinstance(metadata, dict) or "include" not in metadata:
        raise RewardError(f"geneval reward: sample {index} metadata has no GenEval clauses (tag/include/exclude)")
    try:
        return check_metadata({**metadata, "prompt": prompt}, f"geneval reward: sample {index}")
    except MetadataError as exc:
        raise RewardError(str(exc)) from None
