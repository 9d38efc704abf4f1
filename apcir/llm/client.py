"""An async chat client on the official ``openai`` package.

Works with any server speaking OpenAI's chat-completions protocol (OpenAI,
Azure's OpenAI-compatible endpoint, vLLM, Ollama, llama.cpp): the base URL and
key come from the options, else ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``.

* at most ``concurrency`` requests are in flight at once (a semaphore);
* 429, 5xx, timeouts and connection errors are retried with exponential
  backoff (``Retry-After`` honoured up to the maximum delay); the openai
  package's own retries are switched off so every request is counted here;
* 401/403 stop the whole run with :class:`LLMAuthError`, 404 (unknown model
  or wrong base URL) with :class:`LLMFatalError`; other 4xx fail the turn;
* structured output: ``json_schema`` (strict schema), ``json_object_schema``
  (llama.cpp's ``{"type": "json_object", "schema": ...}``), ``json_object`` or
  ``none`` (JSON asked for in the prompt only, parsed and validated either
  way). ``auto`` starts with ``json_schema`` and steps down, with a warning,
  for the rest of the run when the server refuses ``response_format`` (a 400,
  or llama.cpp's 500 about it);
* a prompt over the server's context window fails its item with one line
  giving the prompt's tokens, the window and the setting to change.

The API key is handed to the openai client and nowhere else.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import time
from dataclasses import dataclass
from typing import Any, Literal, cast

from apcir.errors import ApcirError
from apcir.llm.accounting import Accounting

StructuredMode = Literal["auto", "json_schema", "json_object_schema", "json_object", "none"]
STRUCTURED_MODES: tuple[str, ...] = ("auto", "json_schema", "json_object_schema", "json_object", "none")
# From the strongest to the weakest: OpenAI's and vLLM's json_schema; llama.cpp's json_object with a "schema"
# (grammar-constrained to the schema; its server answers a json_schema request with HTTP 500); plain JSON mode;
# the JSON asked for in the prompt only (parsed and validated either way).
_FALLBACK: dict[str, str] = {"json_schema": "json_object_schema", "json_object_schema": "json_object",
                             "json_object": "none"}


class LLMFatalError(ApcirError):
    """An error that no other turn can avoid either (stops the run)."""


class LLMAuthError(LLMFatalError):
    """The server refused the credentials (401/403)."""


class LLMRequestError(Exception):
    """One turn's request failed for good (retries exhausted or a non-retryable 4xx)."""


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff: ``base_delay * 2**attempt`` (capped, with jitter), ``max_retries`` times."""

    max_retries: int = 6
    base_delay: float = 1.0
    max_delay: float = 60.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.max_delay)
        wait = min(self.max_delay, self.base_delay * (2**attempt))
        return wait * (0.5 + random.random() / 2)


@dataclass(frozen=True)
class Completion:
    content: str
    input_tokens: int | None
    output_tokens: int | None
    requests: int
    seconds: float


def resolve_api_key(api_key: str | None, base_url: str | None) -> str:
    """The key to use; a clear error when talking to OpenAI without one.

    A custom base URL (vLLM, Ollama, llama.cpp) often needs no key; the openai
    package still wants a non-empty string, so a placeholder is sent.
    """
    from apcir.settings import secret_from_env

    key = api_key or secret_from_env("OPENAI_API_KEY")
    if key:
        return key
    if base_url or os.environ.get("OPENAI_BASE_URL"):
        return "no-key"
    raise ApcirError(
        "no API key: set OPENAI_API_KEY (or pass --base-url for a local server such as vLLM or Ollama); "
        "the offline choices need none (--llm heuristic or manual, --responder extractive, no judge)"
    )


def _retry_after(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


REDACTED = "[redacted: API key]"
_SURROGATES = re.compile("[\ud800-\udfff]")


class RequestTimedOut(Exception):
    """The whole request (sending, waiting and reading) took longer than the timeout."""


class UnreadableAnswer(Exception):
    """An HTTP 200 whose body is not a chat completion (a proxy's error page, a truncated body)."""


class ChatClient:
    """Sends chat requests with bounded concurrency, retries and structured-output fallback.

    A 429 pauses **every** request of this client for the server's
    ``Retry-After`` (or the backoff delay), not only the one that got it; a 200
    whose body is not a chat completion is retried like a 5xx; an answer longer
    than ``max_answer_bytes`` fails its item without being retried.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        concurrency: int = 8,
        timeout: float = 120.0,
        retry: RetryPolicy | None = None,
        structured: StructuredMode = "auto",
        accounting: Accounting | None = None,
        max_answer_bytes: int = 32_000,
    ):
        if concurrency < 1:
            raise ApcirError(f"concurrency must be at least 1, got {concurrency}")
        if structured not in STRUCTURED_MODES:
            raise ApcirError(
                f"unknown structured-output mode {structured!r}: expected one of {STRUCTURED_MODES}"
            )
        from openai import AsyncOpenAI

        self.model = model
        self.retry = retry or RetryPolicy()
        self.accounting = accounting or Accounting()
        self.mode: str = "json_schema" if structured == "auto" else structured
        self.max_answer_bytes = max_answer_bytes
        self._auto = structured == "auto"
        self._semaphore = asyncio.Semaphore(concurrency)
        self._paused_until = 0.0
        key = resolve_api_key(api_key, base_url)
        self._scrub_key = key
        self._url_secrets = url_secrets(base_url or os.environ.get("OPENAI_BASE_URL") or "")
        self._secret = key if key != "no-key" and len(key) >= 6 else ""
        self._warned_redaction = False
        self.timeout = timeout
        self._client = AsyncOpenAI(
            api_key=key,
            base_url=base_url or os.environ.get("OPENAI_BASE_URL") or None,
            timeout=timeout,
            max_retries=0,
        )

    async def close(self) -> None:
        await self._client.close()

    def _response_format(self, mode: str, schema: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
        if schema is None:  # a free-text answer: no structured output asked for
            return None
        if mode == "json_schema":
            return {
                "type": "json_schema",
                "json_schema": {"name": name, "strict": True, "schema": schema},
            }
        if mode == "json_object_schema":
            return {"type": "json_object", "schema": schema}
        if mode == "json_object":
            return {"type": "json_object"}
        return None

    async def _wait_while_paused(self) -> None:
        """Hold a request while a 429 has paused this server (shared by every request in flight)."""
        loop = asyncio.get_running_loop()
        while (wait := self._paused_until - loop.time()) > 0:
            await asyncio.sleep(wait)

    def _pause(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        self._paused_until = max(self._paused_until, loop.time() + seconds)

    async def complete(
        self,
        messages: list[dict[str, str]],
        params: dict[str, Any],
        schema: dict[str, Any] | None,
        schema_name: str = "apcir_answer",
        grammar: dict[str, Any] | None = None,
    ) -> Completion:
        """One answer for ``messages``; raises LLMRequestError or LLMFatalError."""
        import openai

        requests = 0
        attempt = 0
        total = 0.0
        while True:
            async with self._semaphore:
                await self._wait_while_paused()
                mode = self.mode  # read inside the slot: a fallback decided meanwhile applies at once
                kwargs: dict[str, Any] = dict(params)
                response_format = self._response_format(mode, grammar if mode == "json_object_schema" and grammar
                                                        else schema, schema_name)
                if response_format is not None:
                    kwargs["response_format"] = response_format
                started = time.perf_counter()
                error: Exception | None = None
                try:
                    # The client's own timeout bounds each read; this bounds the whole request, so that a
                    # server trickling its answer byte by byte cannot hold it past --timeout either.
                    async with asyncio.timeout(self.timeout):
                        response = await self._client.chat.completions.create(
                            model=self.model,
                            messages=cast(Any, messages),
                            **kwargs,
                        )
                    if not isinstance(getattr(response, "choices", None), list):
                        error = UnreadableAnswer(
                            "the server answered 200 with a body that is not a chat completion "
                            f"({_snippet(response)})"
                        )
                except openai.APIError as exc:
                    error = exc
                except TimeoutError:
                    error = RequestTimedOut(f"no complete answer within {self.timeout:g} s (--timeout)")
                except (ValueError, TypeError, AttributeError, KeyError) as exc:  # a body the client cannot read
                    error = UnreadableAnswer(f"the server's answer could not be read ({type(exc).__name__}: {exc})")
                seconds = time.perf_counter() - started
            requests += 1
            total += seconds
            if error is None:
                usage = response.usage
                input_tokens = usage.prompt_tokens if usage is not None else None
                output_tokens = usage.completion_tokens if usage is not None else None
                self.accounting.request(self.model, seconds, input_tokens, output_tokens)
                choice = response.choices[0] if response.choices else None
                content = self._clean((choice.message.content if choice is not None else None) or "")
                size = len(content.encode("utf-8"))
                if size > self.max_answer_bytes:
                    raise LLMRequestError(
                        f"the answer has {size:,} bytes, over the cap of {self.max_answer_bytes:,} "
                        "(max_answer_bytes); it was not kept"
                    )
                return Completion(content, input_tokens, output_tokens, requests, total)
            self.accounting.failed_request(self.model, seconds)
            if self._should_fall_back(error, mode):
                continue
            if self._retryable(error) and attempt < self.retry.max_retries:
                self.accounting.retry(self.model)
                delay = self.retry.delay(attempt, _retry_after(error))
                if isinstance(error, openai.RateLimitError):
                    self._pause(delay)  # every request to this server waits, not only this one
                else:
                    await asyncio.sleep(delay)
                attempt += 1
                continue
            raise self._final_error(error, attempt)

    def _clean(self, content: str) -> str:
        """The answer as apcir keeps it: the API key redacted (a server or proxy that reflects the request's
        headers would otherwise get it stored, cached and printed), lone surrogates made U+FFFD."""
        if self._secret and self._secret in content:
            content = content.replace(self._secret, REDACTED)
            if not self._warned_redaction:
                self._warned_redaction = True
                from apcir.console import warn

                warn("the server's answer contained the API key; apcir redacted it (as "
                     f"{REDACTED}) before storing, caching or printing anything")
        if _SURROGATES.search(content):
            content = _SURROGATES.sub("\ufffd", content)
        return content

    def _should_fall_back(self, error: Exception, mode: str) -> bool:
        import openai

        refused = isinstance(error, openai.BadRequestError | openai.UnprocessableEntityError) or (
            isinstance(error, openai.InternalServerError) and error.status_code == 500)
        if not (self._auto and refused and mode in _FALLBACK):
            return False
        text = f"{getattr(error, 'message', '')} {getattr(error, 'body', '')}".lower()
        if (
            "response_format" not in text
            and "json_schema" not in text
            and "json_object" not in text
        ):
            return False
        if self.mode == mode:  # several turns may hit this at once; step down one level only
            self.mode = _FALLBACK[mode]
            from apcir.console import warn

            warn(f"the server refused structured output {mode!r} (HTTP {getattr(error, 'status_code', '?')}); "
                 f"using {self.mode!r} from now on (set structured to choose)")
        return True

    @staticmethod
    def _retryable(error: Exception) -> bool:
        import openai

        if isinstance(error, UnreadableAnswer | RequestTimedOut):
            return True
        if isinstance(error, openai.APIConnectionError):  # includes APITimeoutError
            return True
        if isinstance(error, openai.APIStatusError):
            return error.status_code == 429 or error.status_code == 408 or error.status_code >= 500
        return False

    def _final_error(self, error: Exception, attempt: int) -> Exception:
        import openai

        def _short(exc: Exception) -> str:
            text = _short_text(exc)
            for secret in self._url_secrets:
                text = text.replace(secret, "***")
            return _scrub(text, self._scrub_key)

        tries = f" after {attempt} retries" if attempt else ""
        if isinstance(error, (openai.AuthenticationError, openai.PermissionDeniedError)):
            return LLMAuthError(
                f"the server refused the API key (HTTP {error.status_code}: {_short(error)}); check "
                "OPENAI_API_KEY (or the key your --base-url server expects); no turn was sent after this"
            )
        if isinstance(error, openai.NotFoundError):
            return LLMFatalError(
                f"HTTP 404 for model {self.model!r} ({_short(error)}); check --llm and --base-url"
            )
        if isinstance(error, openai.APIStatusError) and (context := context_problem(_short(error))) is not None:
            return LLMRequestError(context)
        if isinstance(error, openai.APIStatusError):
            return LLMRequestError(f"HTTP {error.status_code}{tries}: {_short(error)}")
        if isinstance(error, UnreadableAnswer):
            return LLMRequestError(f"unreadable answer{tries}: {_short(error)}")
        return LLMRequestError(f"{type(error).__name__}{tries}: {_short(error)}")


_CONTEXT = re.compile(r"context (?:length|window)|context_length_exceeded|too many tokens|exceeds? (?:the )?"
                      r"(?:model'?s? )?(?:maximum )?context", re.I)


def context_problem(message: str) -> str | None:
    """One line for a server's "prompt over the context window" answer (vLLM, OpenAI and llama.cpp word it as
    ``maximum context length is W tokens. However, you requested T tokens (P in the messages, C in the
    completion)``), or None for any other error."""
    if not _CONTEXT.search(message):
        return None
    window = re.search(r"(?:context length is|context window of|context size of|n_ctx[^0-9]{0,5})\s*(\d+)", message)
    asked = re.search(r"requested (\d+) tokens(?: \((\d+) in the messages, (\d+) in the completion\))?", message) \
        or re.search(r"requested tokens \((\d+)\)()()", message, re.I)
    prompt = f"the prompt has {asked.group(2)} tokens (+{asked.group(3)} for the answer)" if asked and asked.group(2) \
        else (f"the request needs {asked.group(1)} tokens" if asked else "the prompt is too long")
    limit = f"the server's context window of {window.group(1)} tokens" if window else "the server's context window"
    return (f"{prompt}, over {limit}; set max_prompt_tokens (--max-prompt-tokens) to fit it (the window minus "
            "max_tokens), or give the server a larger context (llama.cpp: --n_ctx)")


def url_secrets(url: str) -> list[str]:
    """What in a base URL may be a credential: the password and user of ``user:KEY@``, the query's values."""
    from urllib.parse import parse_qsl, urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found = [v for v in (parts.password, parts.username) if v]
    found += [v for _, v in parse_qsl(parts.query) if v]
    return sorted({s for s in found if len(s) >= 3}, key=len, reverse=True)


def _snippet(value: Any, limit: int = 120) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[:limit] + "..."


_KEY_LIKE = re.compile(r"\b(sk|key)-[A-Za-z0-9_*\-]{4,}")


def _scrub(text: str, key: str) -> str:
    """``text`` without the API key or anything shaped like one (servers echo masked keys)."""
    if key:
        text = text.replace(key, "***")
    return _KEY_LIKE.sub(r"\1-***", text)


def _short_text(error: Exception, limit: int = 300) -> str:
    text = getattr(error, "message", None) or str(error)
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."
