"""A JSON HTTP server on loopback for tests that stand in for a served model (OpenAI-compatible judges)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar


class JsonHandler(BaseHTTPRequestHandler):
    """Quiet request handler with ``_send(status, payload)`` for JSON replies."""

    def log_message(self, *args):
        pass

    def _send(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on a free loopback port in a thread; yields the ``http://127.0.0.1:PORT/v1`` base."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


class ScriptedJudge(JsonHandler):
    """An OpenAI-compatible chat endpoint with scripted replies: a subclass sets ``replies`` (an image's key ->
    its replies in turn, the last repeated; 500 fails the call) and ``key_of(body)`` (the key of a request's
    image); ``calls`` counts each key's requests and ``bodies`` keeps every request."""

    calls: ClassVar[dict] = {}
    bodies: ClassVar[list] = []
    replies: ClassVar[dict] = {}

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        key = self.key_of(body)
        n = type(self).calls[key] = type(self).calls.get(key, 0) + 1
        replies = type(self).replies[key]
        reply = replies[min(n, len(replies)) - 1]
        if reply == 500:
            return self._send(500, {"error": {"message": "engine crashed"}})
        self._send(200, {"choices": [{"message": {"role": "assistant", "content": reply}}]})


@contextlib.contextmanager
def serve_scripted(handler: type[ScriptedJudge]) -> Iterator[str]:
    """``serve`` a ``ScriptedJudge`` with its counts and kept requests emptied first."""
    handler.calls, handler.bodies = {}, []
    with serve(handler) as url:
        yield url
