"""Re-exports of the tiny SD3 builder and the shared tiny text pieces, for code that imports them from here:
the builder is ``flowrl.pipelines.sd3.tiny``, the tokenizer ``flowrl.pipelines.kit.tiny``."""

from flowrl.pipelines.kit.tiny import _WORDS, SPECIAL, count_parameters, make_word_tokenizer, words_known
from flowrl.pipelines.sd3.tiny import SIZES, TinySize, build_tiny_sd3_pipeline

__all__ = [
    "SIZES",
    "SPECIAL",
    "_WORDS",
    "TinySize",
    "build_tiny_sd3_pipeline",
    "count_parameters",
    "make_word_tokenizer",
    "words_known",
]
