"""The published evaluation protocols of the papers' reward table, as presets of ``flowrl eval checkpoint``.

A preset fixes what decides the pixels (resolution, steps, guidance, text length) and, per benchmark, the
prompt set and how many images each prompt gets. The sources (repository, commit, file:line) are in
``docs/evaluation.md``; in short:

* ``diffusion_nft`` (default): NVlabs/DiffusionNFT ``scripts/evaluation.py`` @24af555, the script behind
  DiffusionNFT's Table 1: 512 px, 40 steps, guidance 1.0 (its CFG-free checkpoints; its README gives 4.5 for
  Flow-GRPO's), the SD3 pipeline's default text length 256, one image per row of the prompt file: GenEval's
  553 prompts x 4, OCR's 1,018 x 1, DrawBench's 200 x 5 (``dataset/drawbench/test.txt``, each prompt 5 times).
* ``flow_grpo``: yifan123/flow_grpo ``scripts/train_sd3.py`` ``eval()`` and ``config/grpo.py`` @ac4c86e:
  512 px, 40 steps, guidance 4.5, text length 128, the same prompt files, one image per row.

Neither fixes seeds (DiffusionNFT draws without a generator); flowrl draws image k of prompt i with seed
``seed + i * n + k`` (``flowrl.benchmarks.generation``), so base and checkpoint see the same noise.
"""

from __future__ import annotations

from typing import Any

# settings shared by a preset's benchmarks: resolution, steps, guidance, text length
PRESETS: dict[str, dict[str, Any]] = {
    "diffusion_nft": {"resolution": 512, "steps": 40, "guidance_scale": 1.0, "max_sequence_length": 256},
    "flow_grpo": {"resolution": 512, "steps": 40, "guidance_scale": 4.5, "max_sequence_length": 128},
}
DEFAULT_PRESET = "diffusion_nft"

# images per prompt: the prompt file's rows per prompt (GenEval's test_metadata.jsonl repeats each of the 553
# rows 4 times; DrawBench's test.txt each of its 200 prompts 5 times; OCR's test.txt has 1,018 distinct rows)
IMAGES_PER_PROMPT = {"geneval": 4, "ocr": 1, "drawbench": 5}


def preset_settings(name: str) -> dict[str, Any]:
    """The preset's shared settings; an unknown name is refused in one line listing the known ones."""
    if name not in PRESETS:
        raise ValueError(f"--preset {name!r}: choose one of {', '.join(PRESETS)}")
    return dict(PRESETS[name])


# The metrics of the reward table: column -> (reward name, where its value is read, factor), in the units the
# papers print. PickScore: the CLIP logit logit_scale.exp() * cos (Flow-GRPO's reward divides it by 26: the
# tables multiply back); CLIPScore: DiffusionNFT's logits_per_image / 100 = flowrl's ``flow_grpo`` formula
# (logit / 30) x 0.3; UnifiedReward: the judge's 1-5 score (the rewards divide it by 5).
DRAWBENCH_METRICS: dict[str, tuple[str, str, float]] = {
    "pickscore": ("pickscore", "raw", 1.0),
    "clipscore": ("clipscore", "score", 0.3),
    "hpsv2.1": ("hpsv2", "score", 1.0),
    "aesthetic": ("aesthetic", "score", 1.0),
    "imagereward": ("imagereward", "score", 1.0),
    "unifiedreward": ("unifiedreward", "score", 5.0),
}

# each reward's options under the table's protocol (the user's --option NAME.key=value comes on top)
SCORER_DEFAULTS: dict[str, dict[str, Any]] = {
    "pickscore": {},
    "clipscore": {"formula": "flow_grpo"},
    "hpsv2": {"version": "v2.1"},
    "aesthetic": {},
    "imagereward": {},
    # DiffusionNFT's unifiedreward_score_sglang: UnifiedReward-7b-v1.5 served, PNG resized to 512, temperature 0,
    # the first "Final Score: X" (1-5) divided by 5, 0 when none parses
    "unifiedreward": {"model": "CodeGoat24/UnifiedReward-7b-v1.5", "parse": "flow_grpo", "image_size": 512},
    "ocr": {},
}
