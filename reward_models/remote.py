"""Client side of remote scoring: JSON over HTTP with timeouts, retries with backoff and one clear final error.

``post_json`` is shared by the ``remote`` reward (flowrl's own reward server, ``flowrl serve-reward``) and
the OpenAI-compatible VLM client (``vlm.py``). Retried: refused / reset connections, timeouts, HTTP 429 and
5xx. Not retried: other 4xx, whose reason (the server's ``error`` field) is raised at once.

    remote reward:  POST {url}/score  {"media": <encoded>, "prompts": [...], "metadata": [...],
                                       "source_images": [[<image>, ...], ...] (editing rows only)}
                    -> {"scores": [...], "details": {...}}
                    GET  {url}/health -> {"status": "ok", "reward": NAME, "modality": ..., ...}
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import urllib.error
import urllib.request
from typing import Any

import torch

from flowrl.reward_models.base import RewardError, RewardOutput, batch_size_of, index_media
from flowrl.reward_models.media import SOURCE_IMAGES, encode_media, encode_sources

logger = logging.getLogger(__name__)

RETRY_STATUS = {429, 500, 502, 503, 504}
TOKEN_ENV = "FLOWRL_REWARD_TOKEN"


def jsonable(value: Any) -> Any:
    """``json.dumps`` fallback: tensors and numpy values become lists / numbers, anything else its ``str``."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().tolist()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


class HttpStatusError(RewardError):
    """The server answered with an error status that is not worth retrying (a 4xx)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _error_reason(exc: urllib.error.HTTPError) -> str:
    try:
        body = exc.read().decode("utf-8", "replace")
        data = json.loads(body)
        if isinstance(data, dict):
            error = data.get("error")
            if isinstance(error, dict):  # OpenAI-style {"error": {"message": ...}}
                error = error.get("message")
            return str(error or body)[:300]
        return body[:300]
    except (ValueError, OSError):
        return exc.reason if isinstance(exc.reason, str) else str(exc)


def request_json(
    url: str,
    payload: dict | None = None,
    *,
    token: str | None = None,
    timeout: float = 60.0,
    retries: int = 3,
    backoff: float = 1.0,
    what: str = "remote reward",
) -> Any:
    """POST ``payload`` (GET when None) as JSON and return the decoded answer.

    Up to ``1 + retries`` attempts; attempt ``k`` (from 0) waits ``backoff * 2**k`` seconds before the
    next. The final error says how many attempts failed and the last reason. ``timeout`` must be finite
    (``check_waits``), so no request waits forever.
    """
    check_waits(what, timeout, retries, backoff)
    data = None if payload is None else json.dumps(payload, default=jsonable).encode("utf-8")
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    last = ""
    for attempt in range(retries + 1):
        if attempt:
            delay = backoff * 2 ** (attempt - 1)
            logger.warning("%s %s: attempt %d failed (%s); retrying in %.2f s", what, url, attempt, last, delay)
            time.sleep(delay)
        request = urllib.request.Request(url, data=data, headers=headers, method="GET" if data is None else "POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            reason = _error_reason(exc)
            if exc.code not in RETRY_STATUS:
                raise HttpStatusError(exc.code, f"{what} {url}: HTTP {exc.code}: {reason}") from None
            last = f"HTTP {exc.code}: {reason}"
        except urllib.error.URLError as exc:
            last = str(exc.reason)
        except TimeoutError:
            last = f"no answer within {timeout:g} s"
        except (ConnectionError, OSError) as exc:  # reset mid-response, broken pipe
            last = f"{type(exc).__name__}: {exc}"
        except ValueError as exc:
            last = f"the answer is not JSON ({exc})"
    raise RewardError(
        f"{what} {url}: failed after {retries + 1} attempts ({last}); is the server running and reachable?"
    )


def check_waits(what: str, timeout: Any, retries: Any, backoff: Any) -> None:
    """Refuse settings that could wait forever: a request needs a finite timeout and a finite number of retries.

    ``urllib`` takes ``timeout=None`` as "block forever" (and 0 as non-blocking), so both are refused. A request
    then ends after ``1 + retries`` attempts, each waiting at most ``timeout`` s at every step (connect, reads).
    """
    number = (int, float)
    if isinstance(timeout, bool) or not isinstance(timeout, number) or not 0 < timeout < math.inf:
        raise RewardError(f"{what}: timeout must be a positive, finite number of seconds, got {timeout!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise RewardError(f"{what}: retries must be a whole number >= 0, got {retries!r}")
    if isinstance(backoff, bool) or not isinstance(backoff, number) or not 0 <= backoff < math.inf:
        raise RewardError(f"{what}: backoff must be a finite number of seconds >= 0, got {backoff!r}")


class RemoteReward:
    """A reward computed by ``flowrl serve-reward`` elsewhere: ``RemoteReward(url="http://127.0.0.1:18080")``.

    ``url`` is required (a run must not guess where its reward lives). Every request has a finite
    ``timeout`` (seconds without an answer) and ``retries``, so a dead server is an error, never a hang.

    ``batch_size`` samples go in each request; media are sent as ``media_format`` (default: PNG for
    images and video frames, WAV for audio; ``"array"`` for exact float32). ``token`` defaults to the
    ``FLOWRL_REWARD_TOKEN`` environment variable. Media come as the adapters decode them (``flowrl.media``):
    a ``{"video", "fps"}`` or ``{"audio", "sample_rate"}`` mapping is sent at its own rate (``fps`` and
    ``sample_rate`` here are for bare tensors); an audio_video mapping gives a video or audio reward its
    part. Each sample's source images (``metadata["source_images"]``, editing) are sent as images beside the
    metadata (``source_images``: PNG, or exact float32 with ``media_format="array"``). ``modality`` and ``score_range`` are read from the server's health answer on the first call (or
    given here).
    """

    name = "remote"

    def __init__(
        self,
        url: str,
        token: str | None = None,
        timeout: float = 120.0,
        retries: int = 3,
        backoff: float = 1.0,
        batch_size: int = 64,
        media_format: str | None = None,
        modality: str | None = None,
        fps: float = 8.0,
        sample_rate: int = 16000,
    ):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise RewardError(f"remote reward: url must start with http:// or https://, got {url!r}")
        check_waits("remote reward", timeout, retries, backoff)
        if not isinstance(batch_size, int) or batch_size < 1:
            raise RewardError(f"remote reward: batch_size must be at least 1, got {batch_size!r}")
        self.url = url.rstrip("/")
        self.token = token if token is not None else os.environ.get(TOKEN_ENV)
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        self.batch_size, self.media_format = batch_size, media_format
        self.fps, self.sample_rate = fps, sample_rate
        self._info: dict | None = {"modality": modality} if modality else None

    def _call(self, path: str, payload: dict | None = None) -> Any:
        return request_json(
            self.url + path,
            payload,
            token=self.token,
            timeout=self.timeout,
            retries=self.retries,
            backoff=self.backoff,
            what="remote reward",
        )

    def health(self) -> dict:
        return self._call("/health")

    @property
    def modality(self) -> str:
        if self._info is None:
            self._info = self.health()
        return self._info.get("modality") or "image"

    @property
    def score_range(self):
        if self._info is None or "score_range" not in self._info:
            self._info = {**(self._info or {}), **self.health()}
        low_high = self._info.get("score_range")
        return tuple(low_high) if low_high else None

    @property
    def pairwise(self) -> bool:
        if self._info is None or "pairwise" not in self._info:
            self._info = {**(self._info or {}), **self.health()}
        return bool(self._info.get("pairwise"))

    def __call__(self, media: Any, prompts: list[str], metadata: list[dict]) -> RewardOutput:
        num = batch_size_of(media)
        if num != len(prompts):
            raise RewardError(f"remote reward: {num} samples but {len(prompts)} prompts")
        metadata = metadata or [{} for _ in prompts]
        scores: list[float] = []
        details: dict[str, list] = {}
        step = num if self.pairwise else self.batch_size  # a pairwise reward needs whole prompt groups
        # each sample's source images (editing) travel as images, not inside the JSON metadata
        sources = [m.get(SOURCE_IMAGES) if isinstance(m, dict) else None for m in metadata]
        metadata = [{k: v for k, v in m.items() if k != SOURCE_IMAGES} if isinstance(m, dict) else m for m in metadata]
        image_format = self.media_format if self.media_format in ("png", "array") else None
        for start in range(0, num, step):
            index = list(range(start, min(num, start + step)))
            payload = {
                # a {"video", "fps"} / {"audio", "sample_rate"} mapping carries its own rate (encode_media)
                "media": encode_media(
                    index_media(media, index), self.modality, self.media_format, self.fps, self.sample_rate
                ),
                "prompts": [prompts[i] for i in index],
                "metadata": [metadata[i] for i in index],
            }
            if any(sources[i] for i in index):
                payload[SOURCE_IMAGES] = encode_sources([sources[i] for i in index], image_format)
            answer = self._call("/score", payload)
            part = answer.get("scores") if isinstance(answer, dict) else None
            if not isinstance(part, list) or len(part) != len(index):
                raise RewardError(f"remote reward {self.url}: the answer holds no {len(index)} scores")
            scores.extend(float(s) for s in part)
            for key, values in (answer.get("details") or {}).items():
                details.setdefault(key, []).extend(values if isinstance(values, list) else [values])
        return RewardOutput(scores=torch.tensor(scores, dtype=torch.float32), details=details)
