"""UniGenBench (Wang et al., 2025): prompt sets, the MLLM judge, aggregation to 27 sub- and 10 primary dimensions.

Modules: ``dimensions`` (names, Chinese spellings, definitions), ``data`` (official CSVs or a ``datasets``
dataset, checked row by row: a malformed row is reported and unscored), ``judge`` (judge prompt, reply
parser, OpenAI-compatible and local transformers back ends), ``evaluate`` (judging an image folder with
a resumable progress file), ``scoring`` (aggregation with explicit unscored counts and the protocol label),
``official`` (``--protocol official``: the benchmark's own template and definitions read from a checkout of
its repository, its parse, scoring, re-ask and request rules), ``generate`` (images with a run's weights). ``flowrl eval unigenbench --help`` runs them from the shell. Importing
this package loads neither torch nor transformers.
"""

from .data import InvalidRow, PromptSet, TestCase, load_csv, load_prompts
from .dimensions import DIMENSIONS, PRIMARY, SUB_DIMENSIONS, canonical_name, primary_of
from .judge import ParseError, build_judge_prompt, parse_answer
from .official import OfficialDirError, OfficialProtocol, load_protocol, parse_reply
from .scoring import aggregate, summary_markdown

__all__ = [
    "DIMENSIONS",
    "PRIMARY",
    "SUB_DIMENSIONS",
    "InvalidRow",
    "OfficialDirError",
    "OfficialProtocol",
    "ParseError",
    "PromptSet",
    "TestCase",
    "aggregate",
    "build_judge_prompt",
    "canonical_name",
    "load_csv",
    "load_prompts",
    "load_protocol",
    "parse_answer",
    "parse_reply",
    "primary_of",
    "summary_markdown",
]
