"""The responders: the single source of the names ``respond.responder`` / ``--responder`` accept.

A responder gives every turn a :class:`~apcir.contract.responses.ResponseRecord`.
Each entry says how it is named, what identifies its output (for the stage
fingerprint: change it and the stage is redone) and how it produces records.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apcir.contract.responses import ResponseRecord
from apcir.llm.accounting import Accounting
from apcir.registry import Registry
from apcir.responses import chat
from apcir.responses.extractive import NAME as EXTRACTIVE
from apcir.responses.extractive import extractive_record
from apcir.responses.job import ResponseJob
from apcir.responses.settings import RespondSettings

Emit = Callable[[ResponseRecord], None]
Produce = Callable[..., str | None]
_HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class ResponderSpec:
    name: str
    description: str
    usage: str
    """How ``responder`` names it."""
    offline: bool
    identity: Callable[[RespondSettings], dict[str, Any]]
    produce: Produce
    """``produce(jobs, settings, emit, *, accounting, refresh) -> structured mode or None``."""


def _code(*files: str) -> str:
    digest = hashlib.sha256()
    for name in files:
        digest.update((_HERE / name).read_bytes())
    return digest.hexdigest()[:16]


def _extractive(jobs: Sequence[ResponseJob], settings: RespondSettings, emit: Emit, **_: Any) -> None:
    for job in jobs:
        emit(extractive_record(job, settings))


def _extractive_identity(settings: RespondSettings) -> dict[str, Any]:
    return {"code": _code("extractive.py", "job.py", "text.py"),
            **settings.model_dump(include={"top_k", "max_words", "max_sentences"})}


def _llm_identity(settings: RespondSettings) -> dict[str, Any]:
    """What is sent: the prompt code, the model and the generation parameters (the cache key's parts)."""
    from apcir.llm.settings import public_url

    return {"code": _code("prompt.py", "chat.py", "job.py", "text.py"), "params": settings.params(),
            "structured": settings.structured, "base_url": public_url(settings.resolved_base_url()),
            "max_prompt_tokens": settings.max_prompt_tokens,
            **settings.model_dump(include={"top_k", "max_words"})}


RESPONDERS: Registry[ResponderSpec] = Registry("responder")
RESPONDERS.add(ResponderSpec(
    EXTRACTIVE, "offline baseline, not an LLM: the top passages' sentences most similar to the rewrite, each cited",
    EXTRACTIVE, True, _extractive_identity, _extractive))
RESPONDERS.add(ResponderSpec(
    "llm", "any other name: that model on an OpenAI-compatible server, one request per turn", "MODEL (gpt-4o, ...)",
    False, _llm_identity, chat.produce))


def responder_for(name: str) -> ResponderSpec:
    """The responder ``name`` names: ``extractive``, else a model."""
    if name in RESPONDERS and RESPONDERS.get(name).offline:
        return RESPONDERS.get(name)
    return RESPONDERS.get("llm")


def usage_help() -> str:
    """One line for ``--responder`` help, from the registry."""
    return "; ".join(f"{r.usage}: {r.description}" for r in RESPONDERS)


def accounting_for(settings: RespondSettings) -> Accounting:
    return Accounting(settings.price_table())
