"""A scriptable OpenAI-compatible chat server on 127.0.0.1 for tests of the LLM paths (no network, real HTTP)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT_PATH = "/v1/chat/completions"


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted answer of the server."""

    status: int = 200
    """HTTP status code."""
    body: str | bytes = ""
    """Raw response body (already encoded as the test wants it, valid JSON or not)."""
    delay: float = 0.0
    """Seconds to wait before answering (longer than the client timeout = a timeout)."""
    content_type: str = "application/json"
    """Content-Type header of the reply."""
    dribble: float = 0.0
    """Seconds between single bytes of the body (a server that answers, but never finishes)."""


def chat_body(
    content: str, prompt_tokens: int = 20, completion_tokens: int = 10, model: str = "fake-model"
) -> str:
    """The JSON of a chat completion whose single choice says `content`, with a `usage` block."""
    return json.dumps(
        {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    )


def text(content: str, prompt_tokens: int = 20, completion_tokens: int = 10, delay: float = 0.0) -> Reply:
    """A 200 reply whose assistant message is `content`."""
    return Reply(200, chat_body(content, prompt_tokens, completion_tokens), delay)


def terms(
    search_terms: list[Any], include_preferences: Any = False, include_n_minus_1: Any = False, **kw: Any
) -> Reply:
    """A 200 reply carrying the search-term JSON object."""
    obj = {
        "search_terms": search_terms,
        "include_preferences": include_preferences,
        "include_n_minus_1": include_n_minus_1,
    }
    return text(json.dumps(obj), **kw)


def error(status: int, message: str = "scripted failure") -> Reply:
    """An OpenAI-style error reply."""
    return Reply(status, json.dumps({"error": {"message": message, "type": "server_error", "code": status}}))


class FakeLLMServer:
    """A ThreadingHTTPServer speaking `POST /v1/chat/completions`, answering from a script.

    Replies come from the queue `replies` first (in order); when it is empty, from `responder`
    (a function of the request JSON), else a 500. Every request body is recorded in `requests`,
    its headers (lower-case names) in `headers`.
    Use as a context manager; `base_url` is what an OpenAI client needs.
    """

    def __init__(self, responder: Callable[[dict[str, Any]], Reply] | None = None) -> None:
        self.replies: deque[Reply] = deque()
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.completed = 0
        """Replies sent in full."""
        self.aborted = 0
        """Replies cut off because the client closed the connection."""
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
                return

            def do_POST(self) -> None:  # stdlib name
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    request = json.loads(raw or b"{}")
                except ValueError:
                    request = {"_raw": raw.decode("utf-8", "replace")}
                with server._lock:
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                if self.path.rstrip("/") != CHAT_PATH:
                    reply = error(404, f"no route {self.path}")
                else:
                    reply = server._next(request)
                if reply.delay:
                    time.sleep(reply.delay)
                body = reply.body.encode("utf-8") if isinstance(reply.body, str) else reply.body
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    if reply.dribble:
                        for i in range(len(body)):
                            self.wfile.write(body[i : i + 1])
                            self.wfile.flush()
                            time.sleep(reply.dribble)
                    else:
                        self.wfile.write(body)
                    with server._lock:
                        server.completed += 1
                except OSError:  # the client gave up (timeout test): nothing to answer
                    with server._lock:
                        server.aborted += 1

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # -- script --------------------------------------------------------------------------------
    def push(self, *replies: Reply) -> FakeLLMServer:
        """Queue replies, answered in order."""
        with self._lock:
            self.replies.extend(replies)
        return self

    def _next(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self.replies:
                return self.replies.popleft()
            responder = self.responder
        if responder is not None:
            return responder(request)
        return error(500, "no scripted reply left")

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def port(self) -> int:
        """The port the server listens on."""
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The OpenAI base URL of this server."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeLLMServer:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def closed_port_url() -> str:
    """A base URL on 127.0.0.1 whose port nothing listens on (connection refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def prompt_of(request: dict[str, Any]) -> str:
    """All message contents of a recorded request, joined."""
    return "\n".join(str(m.get("content", "")) for m in request.get("messages", []))
