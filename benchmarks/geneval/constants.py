"""GenEval's vocabulary: the 80 COCO class names as GenEval spells them, colours, relations, tasks.

The order of ``CLASSES`` matters: the prompt generator draws class indices from it, so the official
``evaluation_metadata.jsonl`` is reproduced only with exactly this order (COCO's category order).
"""

from __future__ import annotations

# COCO's 80 "thing" categories in COCO order, with GenEval's spellings ("computer mouse", "tv remote",
# "computer keyboard" where COCO says "mouse", "remote", "keyboard").
CLASSES: tuple[str, ...] = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
    "traffic light", "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog",
    "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella",
    "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball", "kite",
    "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle",
    "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich", "orange",
    "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch", "potted plant",
    "bed", "dining table", "toilet", "tv", "laptop", "computer mouse", "tv remote",
    "computer keyboard", "cell phone", "microwave", "oven", "toaster", "sink", "refrigerator",
    "book", "clock", "vase", "scissors", "teddy bear", "hair drier", "toothbrush",
)  # fmt: skip

COLORS: tuple[str, ...] = (
    "red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white",
)  # fmt: skip

RELATIONS: tuple[str, ...] = ("left of", "right of", "above", "below")

NUMBER_WORDS: tuple[str, ...] = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
)  # fmt: skip

# Task tags in the order the generator emits them (and the order of the summary table).
TASKS: tuple[str, ...] = ("single_object", "two_object", "counting", "colors", "position", "color_attr")

# Other spellings of the same categories found in detector label maps (mmdet, Detectron2, VOC-style
# names, Hugging Face configs). Keys are normalised with ``normalize_label``.
LABEL_ALIASES: dict[str, str] = {
    "mouse": "computer mouse",
    "remote": "tv remote",
    "keyboard": "computer keyboard",
    "tvmonitor": "tv",
    "tv monitor": "tv",
    "television": "tv",
    "motorbike": "motorcycle",
    "aeroplane": "airplane",
    "sofa": "couch",
    "pottedplant": "potted plant",
    "diningtable": "dining table",
    "hair dryer": "hair drier",
    "doughnut": "donut",
    "cellphone": "cell phone",
    "mobile phone": "cell phone",
}

_CLASS_SET = frozenset(CLASSES)


def normalize_label(label: str) -> str:
    """Lower-case, ``_``/``-`` to spaces, collapsed whitespace: ``"Potted_Plant" -> "potted plant"``."""
    return " ".join(label.lower().replace("_", " ").replace("-", " ").split())


def geneval_class(label: str) -> str | None:
    """GenEval's name for a detector label, or ``None`` when it is not one of the 80 classes."""
    name = normalize_label(label)
    name = LABEL_ALIASES.get(name, name)
    return name if name in _CLASS_SET else None
