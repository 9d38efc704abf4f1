"""The responders: the single source of the names ``respond.responder`` / ``--responder`` accept.

A responder gives every turn a :class:`~apcir.contract.responses.ResponseRecord`.
Each entry says how it is named, what identifies its output (for the stage
fingerprint: change it and the stage is redone) and how it produces records.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from apcir.llm.batch import ProducerSpec
from apcir.registry import InRegistry, Registry

if TYPE_CHECKING:
    from apcir.llm.accounting import Accounting
    from apcir.responses.settings import RespondSettings

_HERE = Path(__file__).resolve().parent
EXTRACTIVE = "extractive"


@dataclass(frozen=True)
class ResponderSpec(ProducerSpec):
    """A responder, named by ``responder``: ``identity(settings)`` and ``produce(jobs, settings, emit, *,
    accounting, refresh, trace)`` (see :class:`~apcir.llm.batch.ProducerSpec`)."""

    settings: frozenset[str] = frozenset()
    """The ``[respond]`` keys of its own it reads (beyond ``top_k``, ``max_words`` and, for a model, the client's);
    the others are refused with it."""
    traced: bool = False
    """It writes a trace beside its output (:func:`apcir.responses.pathways.trace_path`)."""


def code_digest(*files: str) -> str:
    """A hash of some of this package's source files (what a responder's output depends on)."""
    digest = hashlib.sha256()
    for name in files:
        digest.update((_HERE / name).read_bytes())
    return digest.hexdigest()[:16]


def llm_identity(settings: RespondSettings) -> dict[str, Any]:
    """What is sent: the prompt code, the model and the generation parameters (the cache key's parts)."""
    from apcir.llm.settings import public_url

    files = ["prompt.py", "chat.py", "job.py", "text.py"] + (["pathways.py", "pathway_prompts.py"]
                                                             if settings.best_of > 1 else [])
    return {"code": code_digest(*files), "params": settings.params(),
            "structured": settings.structured, "base_url": public_url(settings.resolved_base_url()),
            "max_prompt_tokens": settings.max_prompt_tokens,
            **settings.model_dump(include={"top_k", "max_words", "personalisation", "best_of"}),
            **(settings.model_dump(include={"aggregate", "sample_temperature"}) if settings.best_of > 1 else {})}


RESPONDERS: Registry[ResponderSpec] = Registry("responder", "apcir.responders")
RESPONDERS.add(ResponderSpec(
    EXTRACTIVE, "offline baseline, not an LLM: the top passages' sentences most similar to the rewrite, each cited",
    EXTRACTIVE, True, "apcir.responses.extractive:identity", "apcir.responses.extractive:produce",
    frozenset({"max_sentences"})))
RESPONDERS.add(ResponderSpec(
    "llm", "any other name: that model on an OpenAI-compatible server, one request per turn", "MODEL (gpt-4o, ...)",
    False, llm_identity, "apcir.responses.chat:produce",
    frozenset({"personalisation", "best_of", "sample_temperature", "aggregate"})))
PATHWAYS = "pathways"
RESPONDERS.add(ResponderSpec(
    PATHWAYS, "Pathways of Thoughts: N reasoning pathways of at most T steps per turn, then one aggregation "
    "(2T requests per pathway at most, plus 2)", "pathways:MODEL", False, "apcir.responses.pathways:identity",
    "apcir.responses.pathways:produce",
    frozenset({"pathways", "max_actions", "diversify", "aggregate", "plan_temperature", "subset_ratio"}), traced=True))


def responder_settings() -> frozenset[str]:
    """Every responder's own keys (each responder refuses the others')."""
    return frozenset().union(*(spec.settings for spec in RESPONDERS))


def responder_for(name: str) -> ResponderSpec:
    """The responder ``name`` names: ``extractive``, ``pathways:MODEL``, else a model."""
    if name in RESPONDERS and RESPONDERS.get(name).offline:
        return RESPONDERS.get(name)
    if name.startswith(f"{PATHWAYS}:") and name != f"{PATHWAYS}:":
        return RESPONDERS.get(PATHWAYS)
    return RESPONDERS.get("llm")


def responder_usages() -> list[str]:
    """How a responder that is not a model's name is written: those named as they are used, ``pathways:``."""
    return [r.usage for r in RESPONDERS if r.usage == r.name] + [f"{PATHWAYS}:"]


RESPONDER = InRegistry(RESPONDERS, open_ended=True, usages=responder_usages)
"""A responder's name, ``Annotated[str, RESPONDER]``: a responder's or a model's, not a near miss."""


def misspelt(name: str) -> str | None:
    """One line refusing a responder ``name`` that nearly spells a responder's (``extractve``, ``pathway:gpt-4o``)
    rather than being taken for a model's name and found out only at the respond stage; None otherwise."""
    return RESPONDERS.near_miss(name, responder_usages())


def check_responder(name: str) -> str:
    """``name`` if it names a responder or a model, else a ``ValueError`` (for validators)."""
    return RESPONDER.check(name)


def usage_help() -> str:
    """One line for ``--responder`` help, from the registry."""
    return "; ".join(f"{r.usage}: {r.description}" for r in RESPONDERS)


def accounting_for(settings: RespondSettings) -> Accounting:
    from apcir.llm.accounting import Accounting

    return Accounting(settings.price_table())
