"""DPG-Bench (ELLA, Hu et al., 2024): 1065 dense prompts, each with DSG-style yes/no questions linked by a
dependency graph, judged on 4 images per prompt in a 2 x 2 grid.

Modules: ``data`` (ELLA's ``dpg_bench.csv``, not shipped), ``scoring`` (the official question parsing,
dependency rule, crop and category averages), ``evaluate`` (a resumable image-folder scorer with a served or
local VLM in place of mPLUG), ``generate`` (4 images per prompt and their grids), ``official`` (parity with
the official code, the VQA model faked). Plain entry points for other tools: ``load_items(source)``,
``protocol(preset)``, ``score_folder(image_dir, out_dir, judge_options)``. Importing this package loads
neither torch nor transformers.
"""

from .data import load_items
from .evaluate import score_folder
from .generate import protocol

__all__ = ["load_items", "protocol", "score_folder"]
