"""How apcir talks to a model: one settings record shared by every stage that asks an LLM.

The same fields are a config section (``[reformulator]``, and the LLM parts of
later stages) and the options of the commands, so a config and a command line
with the same values send the same requests.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from apcir.errors import ApcirError
from apcir.llm.accounting import Price, load_prices
from apcir.llm.cache import ResponseCache, default_cache_dir
from apcir.llm.client import RetryPolicy, StructuredMode


class LLMSettings(BaseModel):
    """Server, client behaviour, generation parameters and cache of one kind of request."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(None, description="OpenAI-compatible server; default OPENAI_BASE_URL or OpenAI")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the API key")
    concurrency: int = Field(8, ge=1, description="requests in flight at most")
    timeout: float = Field(120.0, gt=0, description="seconds before a request is abandoned (and retried)")
    max_retries: int = Field(6, ge=0, description="retries on 429, 5xx, timeouts and unreadable answers")
    retry_delay: float = Field(1.0, ge=0, description="first backoff delay in seconds (doubles)")
    structured: StructuredMode = Field("auto", description="structured output: auto, json_schema, json_object, none")
    temperature: float | None = Field(
        0.0, ge=0, allow_inf_nan=False, description="sampling temperature (None: the server's default)"
    )
    max_tokens: int | None = Field(1024, ge=1, description="answer length limit in tokens (None: no limit)")
    max_answer_bytes: int = Field(32_000, ge=1, description="an answer longer than this fails its item (not kept)")
    cache_dir: str | None = Field(None, description="answer cache; default APCIR_CACHE_DIR or ~/.cache/apcir/llm")
    no_cache: bool = Field(False, description="neither read nor write the answer cache")
    prices: str | None = Field(None, description='JSON price file {"model": {"input": $/1M, "output": $/1M}}')

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        problem = url_problem(value) if value else None
        if problem is not None:
            raise ValueError(problem)
        return value

    def resolved_base_url(self) -> str | None:
        """The server the requests go to: ``base_url``, else ``OPENAI_BASE_URL``, else OpenAI (None)."""
        if self.base_url:
            return self.base_url
        from_env = os.environ.get("OPENAI_BASE_URL") or None
        if from_env is not None and (problem := url_problem(from_env)) is not None:
            raise ApcirError(f"OPENAI_BASE_URL {from_env!r}: {problem}")
        return from_env

    def api_key(self) -> str | None:
        """The key from ``api_key_env`` (never stored anywhere by apcir)."""
        return os.environ.get(self.api_key_env) or None

    def params(self) -> dict[str, Any]:
        """Generation parameters sent with every request (and part of every cache key)."""
        params: dict[str, Any] = {}
        if self.temperature is not None:
            params["temperature"] = self.temperature
        if self.max_tokens is not None:
            params["max_tokens"] = self.max_tokens
        return params

    def client_snapshot(self, refresh: bool = False) -> dict[str, Any]:
        """How the requests were made, for a stage's summary file (never the key; the URL without credentials)."""
        cache = self.cache()
        return {
            "base_url": public_url(self.resolved_base_url()), "structured": self.structured,
            "concurrency": self.concurrency, "temperature": self.temperature, "max_tokens": self.max_tokens,
            "timeout": self.timeout, "max_retries": self.max_retries,
            "cache_dir": None if cache is None else str(cache.directory), "refresh": refresh, "no_cache": self.no_cache,
        }

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(max_retries=self.max_retries, base_delay=self.retry_delay)

    def cache(self) -> ResponseCache | None:
        if self.no_cache:
            return None
        return ResponseCache(Path(self.cache_dir).expanduser() if self.cache_dir else default_cache_dir())

    def price_table(self) -> dict[str, Price]:
        return load_prices(Path(self.prices) if self.prices else None)


def public_url(url: str | None) -> str | None:
    """``url`` without user info, query or fragment (where credentials could hide)."""
    from urllib.parse import urlsplit, urlunsplit

    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a server's base URL (it must be ``http(s)://host[:port][/path]``), else None."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        return f"not a valid URL ({exc}); expected http(s)://host[:port][/path], e.g. http://localhost:8000/v1"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "not an http(s):// URL with a host; expected http(s)://host[:port][/path], e.g. http://localhost:8000/v1"
    return None
