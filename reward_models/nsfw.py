"""NSFW penalty from NudeNet's bundled detector (``nudenet`` wheel: ``320n.onnx``, a YOLOv8-n, MIT).

    r = -max over anchors and over the *exposed* classes of the class score,  or 0 when under ``threshold``

so ``r`` is in [-1, 0]: 0 for a safe image, about -1 for a confident detection. Preprocessing as NudeNet:
pad the RGB image at the bottom / right to a square with black, resize bilinearly to 320 x 320, scale to
[0, 1], NCHW float32. The output (B, 4 + 18, anchors) holds box coordinates then 18 class scores; the
penalty needs only the scores, so no NMS is run. Details: ``nsfw_class`` (the worst class or "").
"""

from __future__ import annotations

import os

import numpy as np
import torch

from flowrl.reward_models.base import RewardError, RewardOutput, images_to_uint8

NUDENET_CLASSES = (
    "FEMALE_GENITALIA_COVERED",
    "FACE_FEMALE",
    "BUTTOCKS_EXPOSED",
    "FEMALE_BREAST_EXPOSED",
    "FEMALE_GENITALIA_EXPOSED",
    "MALE_BREAST_EXPOSED",
    "ANUS_EXPOSED",
    "FEET_EXPOSED",
    "BELLY_COVERED",
    "FEET_COVERED",
    "ARMPITS_COVERED",
    "ARMPITS_EXPOSED",
    "FACE_MALE",
    "BELLY_EXPOSED",
    "MALE_GENITALIA_EXPOSED",
    "ANUS_COVERED",
    "FEMALE_BREAST_COVERED",
    "BUTTOCKS_COVERED",
)  # the order of the model's outputs
UNSAFE_CLASSES = (
    "BUTTOCKS_EXPOSED",
    "FEMALE_BREAST_EXPOSED",
    "FEMALE_GENITALIA_EXPOSED",
    "ANUS_EXPOSED",
    "MALE_GENITALIA_EXPOSED",
)
INPUT_SIZE = 320


def letterbox(image: np.ndarray, size: int = INPUT_SIZE) -> np.ndarray:
    """(H, W, 3) uint8 RGB -> (3, size, size) float32 in [0, 1]: pad bottom/right to a square, bilinear resize."""
    import cv2

    side = max(image.shape[:2])
    padded = np.zeros((side, side, 3), dtype=np.uint8)
    padded[: image.shape[0], : image.shape[1]] = image
    resized = cv2.resize(padded, (size, size), interpolation=cv2.INTER_LINEAR)
    return resized.astype(np.float32).transpose(2, 0, 1) / 255.0


class NsfwPenalty:
    """The NudeNet penalty (see module docstring). ``classes`` chooses which labels count as unsafe."""

    name = "nsfw"
    score_range = (-1.0, 0.0)

    def __init__(
        self,
        threshold: float = 0.2,
        classes: tuple[str, ...] | list[str] = UNSAFE_CLASSES,
        model_path: str | None = None,
    ):
        unknown = sorted(set(classes) - set(NUDENET_CLASSES))
        if unknown:
            raise RewardError(f"nsfw: unknown classes {unknown}; known: {', '.join(NUDENET_CLASSES)}")
        if not 0 <= threshold <= 1:
            raise RewardError(f"nsfw: threshold must be in [0, 1], got {threshold}")
        if model_path is None:
            try:
                import nudenet
            except ImportError as exc:
                raise RewardError("nsfw: needs `pip install nudenet` (its wheel bundles the ONNX detector)") from exc
            model_path = os.path.join(os.path.dirname(nudenet.__file__), "320n.onnx")
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = min(4, os.cpu_count() or 1)
        self.session = onnxruntime.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
        self.input_name = self.session.get_inputs()[0].name
        self.threshold = threshold
        self.class_index = np.array([NUDENET_CLASSES.index(c) for c in classes])
        self.classes = list(classes)

    def class_scores(self, media: torch.Tensor) -> np.ndarray:
        """(B, 18) max score of each class over all anchors."""
        blob = np.stack([letterbox(image) for image in images_to_uint8(self.name, media)])  # (B, 3, 320, 320)
        (out,) = self.session.run(None, {self.input_name: blob})  # (B, 22, anchors)
        return out[:, 4:, :].max(axis=2)

    def __call__(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        scores = self.class_scores(media)[:, self.class_index]  # (B, K)
        worst = scores.max(axis=1)
        flagged = worst >= self.threshold
        penalty = np.where(flagged, -worst, 0.0).astype(np.float32)
        names = [self.classes[int(i)] if f else "" for i, f in zip(scores.argmax(axis=1), flagged)]
        return RewardOutput(scores=torch.from_numpy(penalty), details={"nsfw_class": names})
