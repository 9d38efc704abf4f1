"""Asking a model many questions: cache, concurrency, retries, one repair, accounting.

Every stage that asks an LLM something per item (a turn's reformulations, a
window of passages to re-rank, a response, a judgement) describes each
question as an :class:`Ask` and hands them to :func:`ask_all`. For each one:

1. the answer cache is looked up by (model, messages, generation parameters);
   a cached answer that still parses is used without a request;
2. otherwise the request is sent (at most ``concurrency`` at once, retried on
   429/5xx/timeouts by :class:`~apcir.llm.client.ChatClient`);
3. the answer is parsed and validated by the ask's ``parse``; if that fails,
   **one** repair request shows the model the problem; if the repaired answer
   fails too, the item fails with the error and the raw answer;
4. a valid answer is cached, and ``on_answer`` receives the outcome at once
   (so the caller can append it to its output file and lose nothing on a crash).

A fatal error (the key refused, the model unknown) stops everything; answers
already handed to ``on_answer`` stay with the caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from apcir.contract.reformulations import Usage
from apcir.errors import ApcirError
from apcir.llm.accounting import Accounting
from apcir.llm.cache import CachedAnswer, ResponseCache, cache_key
from apcir.llm.client import ChatClient, Completion, LLMFatalError, LLMRequestError, resolve_api_key
from apcir.llm.settings import LLMSettings

T = TypeVar("T")
Message = dict[str, str]


@dataclass
class Ask(Generic[T]):
    """One question: the messages, how to read the answer and how to ask for a repair."""

    key: str
    messages: list[Message]
    parse: Callable[[str], T]
    """Turns the answer text into a value; raises ``ValueError`` saying what is wrong."""
    repair: Callable[[str, str], list[Message]]
    """``(raw answer, problem) -> messages`` of the one repair request."""
    schema: dict[str, Any] | None = None
    schema_name: str = "apcir_answer"
    grammar: dict[str, Any] | None = None
    """A stricter schema for servers that constrain decoding to it (llama.cpp's ``json_object_schema``): it may use
    keywords OpenAI's strict mode refuses (``minLength``, ``pattern``), so that a small model cannot produce an
    answer the stage would reject. Default: ``schema``."""


@dataclass
class Answer(Generic[T]):
    """What became of one :class:`Ask`."""

    key: str
    value: T | None
    raw: str | None = None
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.value is not None


def check_key(settings: LLMSettings) -> None:
    """Fail early (before any work) when no key is available for a server that needs one."""
    if settings.api_key() is None and settings.api_key_env != "OPENAI_API_KEY":
        from apcir.errors import ApcirError

        # The user named this key: never fall back to another one (OPENAI_API_KEY) and send it elsewhere.
        raise ApcirError(f"api_key_env {settings.api_key_env}: that environment variable is not set (or empty); "
                         "set it, or drop --api-key-env / api_key_env for a server that needs no key")
    resolve_api_key(settings.api_key(), settings.resolved_base_url())


def ask_all(
    asks: Sequence[Ask[T]],
    *,
    model: str,
    settings: LLMSettings,
    accounting: Accounting,
    on_answer: Callable[[Ask[T], Answer[T]], None],
    read_cache: bool = True,
) -> str | None:
    """Answer every ask (see the module docstring); returns the structured-output mode in use at the end."""
    asking = _Asking(model, settings.params(), settings.cache(), accounting, on_answer)
    misses: list[tuple[Ask[T], str]] = []
    for ask in asks:
        key = cache_key(model, ask.messages, asking.params)
        if not (read_cache and _from_cache(ask, key, asking)):
            misses.append((ask, key))
    if settings.max_prompt_tokens is not None:
        misses = _within_budget(misses, settings, on_answer)
    if not misses:
        return None
    check_key(settings)
    if asking.cache is not None:
        asking.cache.check_writable()  # before any request: an answer paid for must not be lost to the cache
    return asyncio.run(_ask_misses(misses, settings, asking))


@dataclass(frozen=True)
class _Asking(Generic[T]):
    """What every ask of one :func:`ask_all` shares: the model, its generation parameters, the answer cache, the
    accounting and where the answers go."""

    model: str
    params: dict[str, Any]
    cache: ResponseCache | None
    accounting: Accounting
    on_answer: Callable[[Ask[T], Answer[T]], None]


def _within_budget(misses: list[tuple[Ask[T], str]], settings: LLMSettings,
                   on_answer: Callable[[Ask[T], Answer[T]], None]) -> list[tuple[Ask[T], str]]:
    """The asks whose prompts fit ``max_prompt_tokens``; the others fail at once, unsent, saying by how much."""
    from apcir.llm.tokens import TokenCounter

    budget = settings.max_prompt_tokens
    assert budget is not None
    counter = TokenCounter(settings.resolved_base_url())
    kept = []
    for ask, key in misses:
        tokens = counter.count(ask.messages)
        if tokens <= budget:
            kept.append((ask, key))
            continue
        on_answer(ask, Answer(ask.key, None, error=(
            f"the prompt has {tokens} tokens (counted by the {counter.source}), over max_prompt_tokens {budget}; "
            "not sent: raise max_prompt_tokens (and the server's context), or shorten the input")))
    return kept


def _from_cache(ask: Ask[T], key: str, asking: _Asking[T]) -> bool:
    if asking.cache is None:
        return False
    hit = asking.cache.get(key)
    if hit is None:
        return False
    try:
        value = ask.parse(hit.content)
    except ValueError:
        return False
    asking.accounting.cache_hit(asking.model)
    asking.on_answer(ask, Answer(ask.key, value, raw=hit.content, usage=hit.usage.model_copy(update={"requests": 0}),
                                 cached=True))
    return True


async def _ask_misses(misses: list[tuple[Ask[T], str]], settings: LLMSettings, asking: _Asking[T]) -> str | None:
    client = ChatClient(
        asking.model,
        base_url=settings.resolved_base_url(),
        api_key=settings.api_key(),
        concurrency=settings.effective_concurrency(),
        max_answer_bytes=settings.max_answer_bytes,
        timeout=settings.timeout,
        retry=settings.retry_policy(),
        structured=settings.structured,
        accounting=asking.accounting,
    )
    try:
        async with asyncio.TaskGroup() as group:
            for ask, key in misses:
                group.create_task(_ask_one(client, ask, key, asking))
    except BaseExceptionGroup as group_error:
        # A task group wraps what its tasks raised: the user sees apcir's own one-line error, not the group.
        leaves = _leaves(group_error)
        for kind in (KeyboardInterrupt, LLMFatalError, ApcirError):
            found = [e for e in leaves if isinstance(e, kind)]
            if found:
                raise found[0] from None
        raise
    finally:
        await client.close()
    return client.mode


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:  # type: ignore[type-arg]
    found: list[BaseException] = []
    for exc in group.exceptions:
        found += _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return found


def _add(usage: Usage, completion: Completion) -> Usage:
    return Usage(
        requests=usage.requests + completion.requests,
        input_tokens=usage.input_tokens + (completion.input_tokens or 0),
        output_tokens=usage.output_tokens + (completion.output_tokens or 0),
    )


async def _ask_one(client: ChatClient, ask: Ask[T], key: str, asking: _Asking[T]) -> None:
    model, params, on_answer = asking.model, asking.params, asking.on_answer
    usage = Usage()
    seconds = 0.0
    schema = ask.schema
    try:
        first = await client.complete(ask.messages, params, schema, ask.schema_name, ask.grammar)
        usage, seconds = _add(usage, first), seconds + first.seconds
        raw = first.content
        try:
            value = ask.parse(raw)
        except ValueError as problem:
            asking.accounting.repair(model)
            second = await client.complete(ask.repair(raw, str(problem)), params, schema, ask.schema_name, ask.grammar)
            usage, seconds = _add(usage, second), seconds + second.seconds
            try:
                value = ask.parse(second.content)
                raw = second.content
            except ValueError as again:
                error = f"invalid answer, and again after one repair request: {again} (first: {problem})"
                on_answer(ask, Answer(ask.key, None, raw=second.content, error=error, usage=usage,
                                      seconds=seconds))
                return
    except LLMRequestError as exc:
        on_answer(ask, Answer(ask.key, None, error=str(exc), usage=usage, seconds=seconds))
        return
    if asking.cache is not None:
        asking.cache.put_or_warn(CachedAnswer(key=key, model=model, content=raw, usage=usage))
    on_answer(ask, Answer(ask.key, value, raw=raw, usage=usage, seconds=seconds))
