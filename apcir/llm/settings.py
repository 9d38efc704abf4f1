"""How apcir talks to a model: one settings record shared by every stage that asks an LLM.

The same fields are a config section (``[reformulator]``, and the LLM parts of
later stages) and the options of the commands, so a config and a command line
with the same values send the same requests.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Iterable
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
    structured: StructuredMode = Field(
        "auto", description=f"structured output: {', '.join(typing.get_args(StructuredMode))}")
    temperature: float | None = Field(
        0.0, ge=0, allow_inf_nan=False, description="sampling temperature (None: the server's default)"
    )
    max_tokens: int | None = Field(1024, ge=1, description="answer length limit in tokens (None: no limit)")
    seed: int | None = Field(None, description="the request's sampling seed (sent and part of the cache key when set)")
    max_answer_bytes: int = Field(32_000, ge=1, description="an answer longer than this fails its item (not kept)")
    max_prompt_tokens: int | None = Field(
        None, ge=16, description="fit every prompt to this many tokens (the server's context window minus "
        "max_tokens): reformulation prompts are trimmed, other prompts over it fail before they are sent")
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
            raise ApcirError(f"OPENAI_BASE_URL {redact_url(from_env)!r}: {problem}")
        return from_env

    def effective_concurrency(self) -> int:
        """Requests in flight: ``concurrency`` when given; otherwise 8, or 1 for a server on this machine.

        A local server (llama.cpp, Ollama, a vLLM on the same box) usually answers one request at a time
        on a CPU; eight requests queued on its one slot would each wait for the others and run into the
        timeout in a cascade. One at a time, each request has the server to itself."""
        if "concurrency" in self.model_fields_set:
            return self.concurrency
        return 1 if is_loopback(self.resolved_base_url()) else self.concurrency

    def api_key(self) -> str | None:
        """The key from ``api_key_env`` (never stored anywhere by apcir)."""
        from apcir.settings import secret_from_env

        return secret_from_env(self.api_key_env) or None

    def params(self) -> dict[str, Any]:
        """Generation parameters sent with every request (and part of every cache key)."""
        params: dict[str, Any] = {}
        if self.temperature is not None:
            params["temperature"] = self.temperature
        if self.max_tokens is not None:
            params["max_tokens"] = self.max_tokens
        if self.seed is not None:
            params["seed"] = self.seed
        return params

    def client_snapshot(self, refresh: bool = False) -> dict[str, Any]:
        """How the requests were made, for a stage's summary file (never the key; the URL without credentials)."""
        cache = self.cache()
        return {
            "base_url": public_url(self.resolved_base_url()), "structured": self.structured,
            "concurrency": self.effective_concurrency(), "temperature": self.temperature, "max_tokens": self.max_tokens,
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


LLM_FIELDS: frozenset[str] = frozenset(LLMSettings.model_fields)


def refuse_unused(settings: BaseModel, unused: Iterable[str], mode: str) -> None:
    """Raise (as a validator does) when ``settings`` were given any of the ``unused`` keys with a value other than
    its default: a key that the chosen mode does not read would be ignored without a word. The message names the
    keys and the mode. (A key given its default value changes nothing, so a full dump of the settings reloads.)"""
    fields = type(settings).model_fields
    given = sorted(k for k in set(unused) & settings.model_fields_set
                   if getattr(settings, k) != fields[k].get_default(call_default_factory=True))
    if given:
        raise ValueError(f"{', '.join(given)}: not used {mode}; remove {'it' if len(given) == 1 else 'them'}")


def is_loopback(url: str | None) -> bool:
    """Whether ``url``'s host is this machine (localhost, 127.0.0.0/8, ::1)."""
    from urllib.parse import urlsplit

    if not url:
        return False
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    return host in ("localhost", "::1") or host.startswith("127.")


def redact_url(url: str) -> str:
    """``url`` with any credentials in it masked: the user info (``user:KEY@``) and the query's values."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = urlencode([(k, "***") for k, _ in parse_qsl(parts.query, keep_blank_values=True)], safe="*")
    if parts.query and not query:
        query = "***"
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment and "***"))


def redact_urls(value: Any) -> Any:
    """A copy of a JSON-like value in which every URL string has its credentials masked (see :func:`redact_url`);
    what apcir stores of a configuration (``config.json``) goes through this."""
    if isinstance(value, str):
        return redact_url(value) if "://" in value else value
    if isinstance(value, dict):
        return {k: redact_urls(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_urls(v) for v in value]
    return value


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
