"""The toy GenEval score as a reward (registered as ``toy_geneval``).

Each sample's metadata carries its toy row (``tag``, ``include``, optional ``exclude``; the prompt comes
from ``prompts``). The exact toy detector finds the shapes and GenEval's rules judge them. ``mode``:

* ``"partial"`` (default, the training reward): GenEval's partial credit in ``[0, 1]``;
* ``"strict"``: 1 when every include clause holds with exact counts;
* ``"official"``: 1 when GenEval's official rule says correct (the benchmark's accuracy).

Details (length B): ``correct``, ``strict`` (bool tensors), ``partial`` (float tensor), ``tag``.
Extra keyword arguments override fields of the toy rule options (``detect.TOY_RULES``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from flowrl.reward_models.base import RewardError, RewardOutput

from .detect import TOY_RULES, ToyDetector, judge_images
from .world import check_row

MODES = ("partial", "strict", "official")


class ToyGenEvalReward:
    name = "toy_geneval"
    score_range = (0.0, 1.0)

    def __init__(self, mode: str = "partial", min_area: int = 6, **rule_options: Any) -> None:
        if mode not in MODES:
            raise RewardError(f"toy_geneval reward: mode={mode!r}; allowed: {', '.join(MODES)}")
        try:
            self.rules = dataclasses.replace(TOY_RULES, **rule_options)
        except (TypeError, ValueError) as exc:
            raise RewardError(f"toy_geneval reward: {exc}") from None
        self.mode = mode
        self.detector = ToyDetector(min_area=min_area)

    def __call__(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        if not len(media) == len(prompts) == len(metadata):
            raise RewardError(
                f"toy_geneval reward: {len(media)} images, {len(prompts)} prompts, {len(metadata)} metadata"
            )
        rows = []
        for i, (prompt, meta) in enumerate(zip(prompts, metadata)):
            if not isinstance(meta, dict) or "include" not in meta:
                raise RewardError(f"toy_geneval reward: sample {i} metadata has no toy clauses (tag/include/exclude)")
            try:
                rows.append(check_row({**meta, "prompt": prompt}, f"toy_geneval reward: sample {i}"))
            except ValueError as exc:
                raise RewardError(str(exc)) from None
        judgements = judge_images(media, rows, self.detector, self.rules)
        correct = torch.tensor([j.correct for j in judgements], dtype=torch.bool)
        strict = torch.tensor([j.strict for j in judgements], dtype=torch.bool)
        partial = torch.tensor([j.partial for j in judgements], dtype=torch.float32)
        scores = {"partial": partial, "strict": strict.float(), "official": correct.float()}[self.mode]
        details = {"correct": correct, "strict": strict, "partial": partial, "tag": [r["tag"] for r in rows]}
        return RewardOutput(scores=scores, details=details)


class ToyGenEvalAccuracy(ToyGenEvalReward):
    """The toy benchmark's accuracy (``mode="official"``) under its own name, so that a recipe can train on
    ``toy_geneval`` (partial credit) and evaluate on this one: ``reward_args`` are keyed by name."""

    name = "toy_geneval_accuracy"

    def __init__(self, mode: str = "official", min_area: int = 6, **rule_options: Any) -> None:
        super().__init__(mode=mode, min_area=min_area, **rule_options)
