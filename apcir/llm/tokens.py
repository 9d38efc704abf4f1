"""Counting a prompt's tokens before it is sent, so that it can be fitted to a server's context window.

A server that has a tokenizer endpoint is asked: llama.cpp's Python server answers ``POST /extras/tokenize/count``
(``{"input": text}`` -> ``{"count": n}``) with the model's own tokenizer. Otherwise the count is an estimate:
one token per 3 characters, deliberately above the usual 4 characters a token of English text, so that a
prompt fitted to a budget by the estimate still fits. Either way each message adds :data:`PER_MESSAGE` tokens
for the chat template's role markers (ChatML, which SmolLM2 and Qwen use, spends 5; Llama 3 spends 4).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from functools import lru_cache

PER_MESSAGE = 8
CHARS_PER_TOKEN_ESTIMATE = 3


def estimate(text: str) -> int:
    """A conservative token count without a tokenizer (characters / 3, rounded up)."""
    return -(-len(text) // CHARS_PER_TOKEN_ESTIMATE)


class TokenCounter:
    """Counts chat messages in tokens: through the server's tokenizer where it has one, else by :func:`estimate`.

    ``source`` says which (``server`` or ``estimate``); it is decided by the first count."""

    def __init__(self, base_url: str | None, timeout: float = 10.0) -> None:
        self.base_url = base_url
        self.timeout = timeout
        self.source: str | None = None if base_url else "estimate"
        self._count = lru_cache(maxsize=65_536)(self._count_text)

    def _endpoint(self) -> str | None:
        if not self.base_url:
            return None
        root = self.base_url.rstrip("/")
        root = root[: -len("/v1")] if root.endswith("/v1") else root
        return f"{root}/extras/tokenize/count"

    def _count_text(self, text: str) -> int:
        endpoint = self._endpoint() if self.source != "estimate" else None
        if endpoint is not None:
            request = urllib.request.Request(endpoint, data=json.dumps({"input": text}).encode(),
                                             headers={"content-type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                    count = json.loads(answer.read()).get("count")
                if isinstance(count, int):
                    self.source = "server"
                    return count
            except (urllib.error.URLError, OSError, ValueError, AttributeError):
                pass
            self.source = "estimate"  # no such endpoint (OpenAI, vLLM, Ollama): estimate from here on
        return estimate(text)

    def count(self, messages: Sequence[dict[str, str]]) -> int:
        """Tokens of ``messages`` as a chat prompt (contents plus the template's per-message markers)."""
        return sum(self._count(m.get("content") or "") + PER_MESSAGE for m in messages)
