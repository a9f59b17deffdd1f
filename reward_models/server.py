"""Serve any registered reward over HTTP with JSON (stdlib ``http.server``; never pickle).

    GET  /health   -> {"status": "ok", "reward": NAME, "modality": ..., "score_range": [lo, hi] | null,
                       "pairwise": bool, "max_batch": N}
    POST /score    {"media": <media.encode_media>, "prompts": [B str], "metadata": [B dict] (optional),
                    "source_images": [B lists of one-image media payloads] (optional: editing; the reward
                    reads them as metadata["source_images"], (3, H, W) tensors)}
                   -> {"scores": [B float], "details": {key: [B values]}} (JSON-able details only)

Errors answer ``{"error": "<one line>"}``: 400 malformed JSON / fields / media, 401 missing or wrong bearer
token, 404 unknown path, 411 no length, 413 body over ``max_body_mb``, 422 the reward refused the input
(``RewardError`` / ``ValueError``), 500 the reward crashed (logged; the server keeps serving). Requests are
scored one at a time (models are rarely thread-safe) in chunks of at most ``max_batch`` samples; pairwise
rewards get the whole request at once, so a request must carry complete prompt groups.
Binds 127.0.0.1 by default; a non-loopback host without a token is refused.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch

from flowrl.reward_models.base import RewardError, batch_size_of, check_scores, index_media
from flowrl.reward_models.media import SOURCE_IMAGES, MediaError, decode_media, decode_sources

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 18080


class BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def reward_info(name: str, reward: Any) -> dict:
    """What a client needs to know about a served reward."""
    low_high = getattr(reward, "score_range", None)
    return {
        "reward": name,
        "modality": getattr(reward, "modality", "image"),
        "score_range": list(low_high) if low_high else None,
        "pairwise": bool(getattr(reward, "pairwise", False)),
    }


def _json_details(details: dict, batch: int) -> dict:
    """Per-sample details that survive JSON: tensors -> lists; anything else that is not a B-list is dropped."""
    out = {}
    for key, value in (details or {}).items():
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().tolist()
        if isinstance(value, (list, tuple)) and len(value) == batch:
            try:
                json.dumps(list(value))
            except (TypeError, ValueError):
                continue
            out[key] = list(value)
    return out


def _validate(body: Any) -> tuple[Any, list[str], list[dict]]:
    if not isinstance(body, dict):
        raise BadRequest(400, "the body must be a JSON object with 'media' and 'prompts'")
    unknown = set(body) - {"media", "prompts", "metadata", SOURCE_IMAGES}
    if unknown:
        raise BadRequest(400, f"unknown field(s) {sorted(unknown)}; expected media, prompts, metadata, {SOURCE_IMAGES}")
    if "media" not in body or "prompts" not in body:
        raise BadRequest(400, "missing field 'media' or 'prompts'")
    prompts = body["prompts"]
    if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
        raise BadRequest(400, "'prompts' must be a list of strings")
    metadata = body.get("metadata") or [{} for _ in prompts]
    if (
        not isinstance(metadata, list)
        or not all(isinstance(m, dict) for m in metadata)
        or len(metadata) != len(prompts)
    ):
        raise BadRequest(400, "'metadata' must be a list of objects, one per prompt")
    try:
        media = decode_media(body["media"])
    except MediaError as exc:
        raise BadRequest(400, f"media: {exc}") from None
    if batch_size_of(media) != len(prompts):
        raise BadRequest(400, f"{batch_size_of(media)} media samples but {len(prompts)} prompts")
    if body.get(SOURCE_IMAGES) is not None:
        try:
            sources = decode_sources(body[SOURCE_IMAGES], len(prompts))
        except MediaError as exc:
            raise BadRequest(400, f"{SOURCE_IMAGES}: {exc}") from None
        metadata = [{**m, SOURCE_IMAGES: row} if row else m for m, row in zip(metadata, sources)]
    return media, prompts, metadata


class RewardService:
    """The reward plus its lock and limits; the HTTP handler only parses and answers."""

    def __init__(self, name: str, reward: Any, token: str | None = None, max_batch: int = 64, max_body_mb: float = 512):
        self.name, self.reward, self.token = name, reward, token
        self.max_batch, self.max_body = max_batch, int(max_body_mb * 2**20)
        self.info = reward_info(name, reward)
        self.lock = threading.Lock()

    def authorised(self, header: str | None) -> bool:
        if not self.token:
            return True
        expected = f"Bearer {self.token}".encode()
        return hmac.compare_digest((header or "").encode(), expected)

    def score(self, body: Any) -> dict:
        media, prompts, metadata = _validate(body)
        kind = body["media"].get("kind")
        if kind != self.info["modality"]:
            raise BadRequest(422, f"reward {self.name!r} takes {self.info['modality']} media, got {kind}")
        num = len(prompts)
        step = num if self.info["pairwise"] else self.max_batch
        scores, details = [], {}
        with self.lock:
            for start in range(0, num, step):
                index = list(range(start, min(num, start + step)))
                part = index_media(media, index)
                try:
                    out = check_scores(
                        self.name,
                        self.reward(part, [prompts[i] for i in index], [metadata[i] for i in index]),
                        len(index),
                    )
                except (RewardError, ValueError) as exc:
                    raise BadRequest(422, str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
                scores.extend(out.scores.tolist())
                for key, values in _json_details(out.details, len(index)).items():
                    details.setdefault(key, []).extend(values)
        return {"scores": scores, "details": details}


def _make_handler(service: RewardService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "flowrl-reward"

        def log_message(self, fmt: str, *args: Any) -> None:  # route access logs through logging
            logger.info("%s %s", self.address_string(), fmt % args)

        def _answer(self, status: int, payload: dict) -> None:
            data = json.dumps(payload, allow_nan=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _check_auth(self) -> bool:
            if service.authorised(self.headers.get("Authorization")):
                return True
            self._answer(401, {"error": "missing or wrong bearer token"})
            return False

        def do_GET(self) -> None:
            if not self._check_auth():
                return
            if self.path.rstrip("/") == "/health":
                self._answer(200, {"status": "ok", **service.info, "max_batch": service.max_batch})
            else:
                self._answer(404, {"error": f"unknown path {self.path!r}; use GET /health or POST /score"})

        def _read_body(self) -> Any:
            length = self.headers.get("Content-Length")
            if length is None:
                raise BadRequest(411, "Content-Length is required")
            try:
                size = int(length)
            except ValueError:
                raise BadRequest(400, f"bad Content-Length {length!r}") from None
            if size < 0 or size > service.max_body:
                self.close_connection = True
                raise BadRequest(413, f"body of {size} bytes is over the limit of {service.max_body} bytes")
            raw = self.rfile.read(size)
            try:
                return json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise BadRequest(400, f"the body is not JSON ({exc})") from None

        def do_POST(self) -> None:
            try:
                if not self._check_auth():
                    return
                if self.path.rstrip("/") != "/score":
                    body_len = int(self.headers.get("Content-Length") or 0)
                    self.rfile.read(min(body_len, service.max_body))
                    raise BadRequest(404, f"unknown path {self.path!r}; use POST /score")
                result = service.score(self._read_body())
                if not all(math.isfinite(s) for s in result["scores"]):
                    raise BadRequest(500, "the reward returned non-finite scores")
                self._answer(200, result)
            except BadRequest as exc:
                self._answer(exc.status, {"error": str(exc)})
            except Exception as exc:
                logger.exception("reward %s crashed on a request", service.name)
                self._answer(500, {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"})

    return Handler


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def make_server(service: RewardService, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> ThreadingHTTPServer:
    """A bound, not yet serving, HTTP server for ``service`` (``port=0`` picks a free port)."""
    if not is_loopback(host) and not service.token:
        raise ValueError(f"serve-reward: binding {host} (not loopback) needs --token so that strangers cannot use it")
    server = ThreadingHTTPServer((host, port), _make_handler(service))
    server.daemon_threads = True
    return server
