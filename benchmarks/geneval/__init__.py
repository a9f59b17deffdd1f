"""GenEval (Ghosh et al., 2023): prompt suite, decision rules, detector + colour classifier, scoring.

Modules: ``prompts`` (the 553-row suite, reproduced byte for byte, and a checked loader), ``rules``
(official, strict and partial-credit rules over detections; pure numpy), ``detect`` (transformers
instance segmentation and the open_clip colour classifier), ``scoring`` (folders, results, summary),
``generate`` (images in GenEval's layout with a run's weights). ``flowrl eval geneval --help`` (or
``python -m flowrl.benchmarks.geneval --help``) runs them from the shell. Importing this package loads
neither torch nor transformers.
"""

from .prompts import MetadataError, check_metadata, generate_suite, load_metadata, write_prompts
from .rules import ClassDetections, Judgement, RuleConfig, evaluate_official, evaluate_partial, evaluate_strict, judge

__all__ = [
    "ClassDetections",
    "Judgement",
    "MetadataError",
    "RuleConfig",
    "check_metadata",
    "evaluate_official",
    "evaluate_partial",
    "evaluate_strict",
    "generate_suite",
    "judge",
    "load_metadata",
    "write_prompts",
]
