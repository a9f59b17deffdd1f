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

from pathlib import Path
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


# the published prompt files: sha256 of the file, where it is
OFFICIAL_PROMPTS = {
    "ocr": (
        "4dd8caf3ab6ade73bd376c7d14c6ca49b6eacfb1bd321e22c40714ae4a98d4dc",
        "dataset/ocr/test.txt of yifan123/flow_grpo @ac4c86e and NVlabs/DiffusionNFT @24af555",
    ),
    "drawbench": (
        "9006b98feabb94b28a2bc0c88de42fd4f31a9ec3c2a19e308a02c5385b7172f0",
        "dataset/drawbench/test.txt of NVlabs/DiffusionNFT @24af555",
    ),
}


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


# ------------------------------------------------------------------------------ UnifiedReward's judge text

REWARDS_FILE = "flow_grpo/rewards.py"  # in a DiffusionNFT (or flow_grpo) checkout


def checkout_of(prompt_file: Path) -> Path | None:
    """The DiffusionNFT / flow_grpo checkout a prompt file lies in (``<root>/dataset/<name>/test.txt``), if any."""
    for root in list(prompt_file.resolve().parents)[:4]:
        if (root / REWARDS_FILE).is_file():
            return root
    return None


def unifiedreward_template(rewards_py: Path) -> str:
    """The UnifiedReward question of ``flow_grpo/rewards.py`` (``unifiedreward_score_sglang``'s ``evaluate_image``:
    ``question = f"...{prompt}..."``), read with ``ast`` without running the file, as a ``str.format`` template
    with one ``{prompt}`` field; flowrl ships no copy of the text."""
    import ast

    tree = ast.parse(rewards_py.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name != "evaluate_image":
            continue
        for stmt in ast.walk(node):
            if (
                isinstance(stmt, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "question" for t in stmt.targets)
                and isinstance(stmt.value, ast.JoinedStr)
            ):
                return _format_template(stmt.value, rewards_py)
    raise ValueError(f"{rewards_py}: no evaluate_image() assigning question = f'...' (UnifiedReward's judge text)")


def _format_template(fstring: Any, where: Path) -> str:
    import ast

    parts = []
    for value in fstring.values:
        if isinstance(value, ast.Constant):
            parts.append(str(value.value).replace("{", "{{").replace("}", "}}"))
        elif (
            isinstance(value, ast.FormattedValue)
            and isinstance(value.value, ast.Name)
            and value.value.id == "prompt"
            and value.conversion == -1
            and value.format_spec is None
        ):
            parts.append("{prompt}")
        else:
            raise ValueError(f"{where}: UnifiedReward's question has a field other than {{prompt}}")
    return "".join(parts)
