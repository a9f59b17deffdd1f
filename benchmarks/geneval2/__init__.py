"""GenEval 2 (Kamath et al., 2025): 800 prompts scored by Soft-TIFA with a VQA judge (Qwen3-VL-8B-Instruct).

Modules: ``data`` (the official ``geneval2_data.jsonl``, not shipped: CC BY-NC 4.0), ``scoring`` (Soft-TIFA
and the analysis breakdowns, as the official scripts compute them), ``judge`` (first-token probabilities
from a local transformers VLM or an OpenAI-compatible endpoint), ``evaluate`` (a resumable image-folder
scorer), ``generate`` (images with a run's weights under UniRL's pinned protocol or flowrl's), ``official``
(parity with the official code, the model faked). Plain entry points for other tools:
``load_items(source)``, ``protocol(preset)``, ``score_folder(image_dir, out_dir, judge_options)``.
Importing this package loads neither torch nor transformers.
"""

from .data import load_items
from .evaluate import score_folder
from .generate import protocol

__all__ = ["load_items", "protocol", "score_folder"]
