"""OCR reward of Flow-GRPO: how exactly the image spells the text quoted in the prompt.

target = text between the first pair of double quotes of the prompt (after the only quote when there is
one, as Flow-GRPO); recognised = all recognised text joined. Both are lower-cased with spaces removed, then

    dist   = 0 if target in recognised else Levenshtein(recognised, target)
    dist   = min(dist, len(target))
    reward = 1 - dist / len(target)            in [0, 1]

Back ends: RapidOCR (default; PP-OCRv4 ONNX models shipped inside the ``rapidocr-onnxruntime`` wheel, the
model family of Flow-GRPO's PaddleOCR), Tesseract through ``pytesseract``, or PaddleOCR itself
(``backend=paddleocr``, Flow-GRPO's engine: ``lang="en"``, no angle classifier; it fetches its models on
first use, so it needs the network or a filled PaddleOCR model cache). An OCR failure on one image
gives that image reward 0 and a logged warning.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Any, Protocol, runtime_checkable

import Levenshtein
import numpy as np
import torch

from flowrl.reward_models.base import RewardError, RewardOutput, images_to_uint8

logger = logging.getLogger(__name__)


def extract_quoted(prompt: str) -> str:
    """The text between the first pair of double quotes: ``'a sign "Open Late" here'`` -> ``'Open Late'``.

    A prompt with a single ``"`` gives the text after it, as Flow-GRPO's ``prompt.split('"')[1]`` does; a
    prompt without any is an error.
    """
    parts = prompt.split('"')
    if len(parts) < 2:
        raise RewardError(f'ocr reward: prompt has no text in double quotes ("..."): {prompt!r}')
    return parts[1]


def _normalise(text: str) -> str:
    return text.replace(" ", "").lower()


def _check_target(target: str) -> str:
    target_n = _normalise(target)
    if not target_n:
        raise RewardError(f"ocr reward: the target text {target!r} is empty once spaces are removed")
    return target_n


def ocr_score(recognised: str, target: str) -> float:
    """Flow-GRPO's OCR reward ``1 - min(dist, len(t)) / len(t)``, dist 0 when ``t`` is a substring.

    Both strings are lower-cased with spaces removed first; ``t`` is the normalised target.
    """
    target_n, recognised_n = _check_target(target), _normalise(recognised)
    dist = 0 if target_n in recognised_n else Levenshtein.distance(recognised_n, target_n)
    dist = min(dist, len(target_n))
    return 1.0 - dist / len(target_n)


@runtime_checkable
class OcrBackend(Protocol):
    """Reads all text of one uint8 RGB image (H, W, 3) as one string."""

    def read(self, image: np.ndarray) -> str: ...


class RapidOcrBackend:
    """RapidOCR on onnxruntime, no angle classifier (as Flow-GRPO's PaddleOCR); the engine loads lazily once.

    Lines with confidence > ``min_confidence`` are concatenated in reading order.
    """

    def __init__(self, min_confidence: float = 0.0):
        if importlib.util.find_spec("rapidocr_onnxruntime") is None:
            raise RewardError("ocr reward: backend 'rapidocr' needs `pip install rapidocr-onnxruntime`")
        self.min_confidence = min_confidence
        self._engine: Any = None

    def _get_engine(self) -> Any:
        if self._engine is None:
            from rapidocr_onnxruntime import RapidOCR

            self._engine = RapidOCR(use_cls=False, text_score=self.min_confidence)
        return self._engine

    def read(self, image: np.ndarray) -> str:
        bgr = np.ascontiguousarray(image[..., ::-1])  # RapidOCR treats 3-channel arrays as BGR (OpenCV)
        result, _ = self._get_engine()(bgr)
        if not result:  # nothing detected
            return ""
        return "".join(text for _, text, conf in result if float(conf) > self.min_confidence)


class TesseractBackend:
    """Tesseract (Debian ``tesseract-ocr``) through ``pytesseract``; lines are joined with spaces."""

    def __init__(self, lang: str = "eng", config: str = ""):
        try:
            import pytesseract
        except ImportError as exc:
            raise RewardError("ocr reward: backend 'tesseract' needs `pip install pytesseract`") from exc
        try:
            pytesseract.get_tesseract_version()
        except pytesseract.TesseractNotFoundError as exc:
            raise RewardError("ocr reward: tesseract binary not found: `apt-get install tesseract-ocr`") from exc
        self._pytesseract = pytesseract
        self.lang = lang
        self.config = config

    def read(self, image: np.ndarray) -> str:
        from PIL import Image

        text = self._pytesseract.image_to_string(Image.fromarray(image), lang=self.lang, config=self.config)
        return " ".join(text.split())


class PaddleOcrBackend:
    """PaddleOCR (2.x ``ocr()`` or 3.x ``predict()`` API), English, no angle classifier; lines with
    confidence > ``min_confidence`` are concatenated."""

    def __init__(self, lang: str = "en", min_confidence: float = 0.0, **options: Any):
        try:
            import paddleocr
        except ImportError as exc:
            raise RewardError("ocr reward: backend 'paddleocr' needs `pip install paddleocr paddlepaddle`") from exc
        self.min_confidence = min_confidence
        self.v3 = int(str(getattr(paddleocr, "__version__", "2")).split(".")[0]) >= 3
        try:
            if self.v3:
                self._engine = paddleocr.PaddleOCR(lang=lang, use_textline_orientation=False, **options)
            else:
                self._engine = paddleocr.PaddleOCR(lang=lang, use_angle_cls=False, show_log=False, **options)
        except Exception as exc:
            raise RewardError(f"ocr reward: PaddleOCR could not start ({type(exc).__name__}: {exc})") from exc

    def read(self, image: np.ndarray) -> str:
        bgr = np.ascontiguousarray(image[..., ::-1])  # PaddleOCR reads arrays as BGR (OpenCV)
        if self.v3:
            texts = []
            for page in self._engine.predict(bgr):
                texts += [t for t, s in zip(page["rec_texts"], page["rec_scores"]) if float(s) > self.min_confidence]
            return "".join(texts)
        result = self._engine.ocr(bgr, cls=False)
        lines = [line for page in (result or []) if page for line in page]
        return "".join(text for _, (text, conf) in lines if float(conf) > self.min_confidence)


_BACKENDS = {"rapidocr": RapidOcrBackend, "tesseract": TesseractBackend, "paddleocr": PaddleOcrBackend}


def _make_backend(backend: str | OcrBackend, **kwargs) -> OcrBackend:
    if not isinstance(backend, str):
        return backend
    if backend not in _BACKENDS:
        raise RewardError(f"ocr reward: unknown backend {backend!r}; choose one of {sorted(_BACKENDS)}")
    return _BACKENDS[backend](**kwargs)


class OcrReward:
    """Flow-GRPO's OCR reward (see the module docstring). Details: ``ocr_text``, ``target``.

    ``backend`` is ``"rapidocr"`` (default), ``"tesseract"`` or any object with ``read(image) -> str``;
    ``backend_kwargs`` go to the back end. The target comes from ``metadata[i][target_key]`` when present,
    else from the prompt's first double-quoted span.
    """

    name = "ocr"
    score_range = (0.0, 1.0)

    def __init__(
        self,
        backend: str | OcrBackend = "rapidocr",
        target_key: str = "ocr_text",
        backend_kwargs: dict | None = None,
    ):
        self.backend = _make_backend(backend, **(backend_kwargs or {}))
        self.target_key = target_key

    def _target(self, prompt: str, meta: dict) -> str:
        target = meta.get(self.target_key) if meta else None
        target = extract_quoted(prompt) if target is None else str(target)
        if not _normalise(target):
            raise RewardError(f"ocr reward: the target text {target!r} is empty; prompt: {prompt!r}")
        return target

    def _read(self, image: np.ndarray, index: int) -> str | None:
        try:
            return self.backend.read(image)
        except Exception as exc:  # noqa: BLE001 - any OCR failure on one image must not stop training
            logger.warning("ocr reward: OCR failed on image %d (%s: %s); reward 0", index, type(exc).__name__, exc)
            return None

    def __call__(self, media: torch.Tensor, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        if len(media) != len(prompts):
            raise RewardError(f"ocr reward: {len(media)} images but {len(prompts)} prompts")
        metadata = metadata or [{}] * len(prompts)
        targets = [self._target(p, m) for p, m in zip(prompts, metadata)]  # errors before any OCR work
        pixels = images_to_uint8(self.name, media)  # (B, H, W, 3)
        scores, texts = [], []
        for index, (image, target) in enumerate(zip(pixels, targets)):
            text = self._read(image, index)
            scores.append(0.0 if text is None else ocr_score(text, target))
            texts.append(text or "")
        return RewardOutput(
            scores=torch.tensor(scores, dtype=torch.float32), details={"ocr_text": texts, "target": targets}
        )
