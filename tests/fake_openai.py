"""A local server speaking OpenAI's chat-completions protocol, for offline tests.

It listens on a free loopback port and answers ``POST /v1/chat/completions``
with scripted replies (queued :class:`Reply` objects, consumed in order), else
with a valid reformulation built from the request's current utterance. It
records every request body and header set, counts requests in flight and keeps
their maximum. Used with the real ``openai`` client over real HTTP.

Run it alone (``python tests/fake_openai.py``) to point a CLI at it by hand.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

_ERRORS = {
    400: ("invalid_request_error", "Bad request"),
    401: (
        "invalid_request_error",
        "Incorrect API key provided: sk-te*****cret. You can find your API key at the dashboard.",
    ),
    403: ("permission_error", "Project does not have access to this model"),
    404: ("invalid_request_error", "The model does not exist"),
    429: ("rate_limit_error", "Rate limit reached for requests"),
    500: ("server_error", "The server had an error while processing your request"),
    503: ("server_error", "The engine is currently overloaded"),
}


@dataclass
class Reply:
    """One scripted reply: an HTTP error (``status`` != 200) or a chat answer with ``content``."""

    status: int = 200
    content: str | None = None
    delay: float = 0.0
    message: str | None = None
    usage: bool = True
    headers: dict[str, str] | None = None
    raw: bytes | None = None
    """Send these bytes as the body instead of a JSON completion (e.g. a proxy's HTML error page)."""
    content_type: str = "application/json"


def default_content(body: dict[str, Any]) -> str:
    """A valid answer for the request: the current utterance, marked as rewritten."""
    last = body["messages"][-1]["content"]
    match = re.search(r"Current utterance \(turn \d+\): (.*)", last)
    utterance = match.group(1).strip() if match else "unknown"
    answer = {
        "reasoning": "scripted by the fake server",
        "level": "b",
        "rewrite": f"{utterance} [rewritten]",
        "response": f"an answer to {utterance}",
        "third_rewrite": f"{utterance} [personalised]",
        "third_response": "a personalised answer",
        "ptkb_used": ["1"],
    }
    return json.dumps(answer)


class FakeOpenAI:
    """The server; use as a context manager or call :meth:`start` / :meth:`stop`."""

    def __init__(
        self,
        delay: float = 0.0,
        content: Callable[[dict[str, Any]], str] = default_content,
        reply: Callable[[dict[str, Any]], Reply | None] | None = None,
    ):
        self.delay = delay
        self.content = content
        self.reply = reply
        self.script: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.times: list[float] = []
        """Arrival time (time.monotonic) of each request, and when its answer was sent (answered)."""
        self.answered: list[float] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ---
    def start(self) -> Self:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                fake._handle(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    # --- scripting ---
    def queue(self, *replies: Reply) -> None:
        with self._lock:
            self.script.extend(replies)

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    # --- the protocol ---
    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("content-length", 0))
        body = json.loads(handler.rfile.read(length) or b"{}")
        arrived = time.monotonic()
        with self._lock:
            self.requests.append(body)
            self.times.append(arrived)
            self.headers.append({k.lower(): v for k, v in handler.headers.items()})
            scripted = self.reply(body) if self.reply is not None else None
            reply = scripted or (self.script.popleft() if self.script else Reply())
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(reply.delay or self.delay)
            if handler.path.rstrip("/") != "/v1/chat/completions":
                status, payload = 404, _error(404, f"no route {handler.path}")
            elif reply.status != 200:
                status, payload = reply.status, _error(reply.status, reply.message)
            else:
                content = reply.content if reply.content is not None else self.content(body)
                status, payload = 200, _completion(body, content, reply.usage)
        finally:
            with self._lock:
                self.in_flight -= 1
                self.answered.append(time.monotonic())
        data = reply.raw if reply.raw is not None else json.dumps(payload).encode("utf-8")
        try:
            handler.send_response(status)
            handler.send_header("content-type", reply.content_type)
            for name, value in (reply.headers or {}).items():
                handler.send_header(name, value)
            handler.send_header("content-length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test); nothing to answer


def _error(status: int, message: str | None) -> dict[str, Any]:
    kind, default = _ERRORS.get(status, ("error", "error"))
    return {"error": {"message": message or default, "type": kind, "param": None, "code": None}}


def _completion(body: dict[str, Any], content: str, with_usage: bool) -> dict[str, Any]:
    prompt_chars = sum(len(m.get("content") or "") for m in body.get("messages", []))
    payload: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }
    if with_usage:
        payload["usage"] = {
            "prompt_tokens": prompt_chars // 4,
            "completion_tokens": len(content) // 4,
            "total_tokens": prompt_chars // 4 + len(content) // 4,
        }
    return payload


if __name__ == "__main__":
    with FakeOpenAI() as server:
        print(f"fake OpenAI server at {server.url} (Ctrl-C to stop)", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
