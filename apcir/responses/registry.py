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
    from apcir.responses.settings import RespondSettings

_HERE = Path(__file__).resolve().parent
EXTRACTIVE = "extractive"


@dataclass(frozen=True)
class ResponderSpec(ProducerSpec):
    """A responder, named by ``responder``: ``identity(settings)`` and ``produce(jobs, settings, emit, *,
    accounting, refresh, trace)`` (see :class:`~apcir.llm.batch.ProducerSpec`); ``options`` names the model of the
    ``[respond]`` keys of its own (beyond ``top_k``, ``max_words`` and, for a model, the client's), read with
    ``settings.own(ItsOptions)``; another responder's keys are refused with it."""

    traced: bool = False
    """It writes a trace beside its output (:func:`apcir.responses.pathways.trace_path`)."""


def code_digest(*files: str) -> str:
    """A hash of some of this package's source files (what a responder's output depends on)."""
    digest = hashlib.sha256()
    for name in files:
        digest.update((_HERE / name).read_bytes())
    return digest.hexdigest()[:16]


def llm_identity(settings: RespondSettings, *own: str) -> dict[str, Any]:
    """What is sent: the prompt code, the model and the generation parameters (the cache key's parts), and the
    responder's own keys named in ``own``."""
    from apcir.llm.settings import public_url

    sampled = "best_of" in own and settings.options.best_of > 1  # best-of-N aggregates as the pathways do
    files = ["prompt.py", "chat.py", "job.py", "text.py"] + (["pathways.py", "pathway_prompts.py"] if sampled else [])
    return {"code": code_digest(*files), "params": settings.params(),
            "structured": settings.structured, "base_url": public_url(settings.resolved_base_url()),
            "max_prompt_tokens": settings.max_prompt_tokens,
            **settings.model_dump(include={"top_k", "max_words"}), **settings.options.model_dump(include=set(own))}


RESPONDERS: Registry[ResponderSpec] = Registry("responder", "apcir.responders")
RESPONDERS.add(ResponderSpec(
    EXTRACTIVE, "offline baseline, not an LLM: the top passages' sentences most similar to the rewrite, each cited",
    EXTRACTIVE, True, "apcir.responses.extractive:identity", "apcir.responses.extractive:produce",
    options="apcir.responses.extractive:ExtractiveOptions"))
RESPONDERS.add(ResponderSpec(
    "llm", "any other name: that model on an OpenAI-compatible server, one request per turn", "MODEL (gpt-4o, ...)",
    False, "apcir.responses.chat:identity", "apcir.responses.chat:produce", syntax="other",
    options="apcir.responses.chat:ChatOptions"))
RESPONDERS.add(ResponderSpec(
    "pathways", "Pathways of Thoughts: N reasoning pathways of at most T steps per turn, then one aggregation "
    "(2T requests per pathway at most, plus 2)", "pathways:MODEL", False, "apcir.responses.pathways:identity",
    "apcir.responses.pathways:produce", syntax="prefix", options="apcir.responses.pathways:PathwaysOptions",
    traced=True))


def responder_for(name: str) -> ResponderSpec:
    """The responder ``name`` names: ``extractive`` (or a plugin's, named as it is), ``pathways:MODEL``, else a
    model (:meth:`~apcir.registry.Registry.resolve`)."""
    return RESPONDERS.resolve(name)[0]


RESPONDER = InRegistry(RESPONDERS, open_ended=True)
"""A responder's name, ``Annotated[str, RESPONDER]``: a responder's or a model's, not a near miss."""


def misspelt(name: str) -> str | None:
    """One line refusing a responder ``name`` that nearly spells a responder's (``extractve``, ``pathway:gpt-4o``)
    rather than being taken for a model's name and found out only at the respond stage; None otherwise."""
    return RESPONDERS.near_miss(name, RESPONDERS.usages())


def check_responder(name: str) -> str:
    """``name`` if it names a responder or a model, else a ``ValueError`` (for validators)."""
    return RESPONDER.check(name)


def usage_help() -> str:
    """One line for ``--responder`` help, from the registry."""
    return "; ".join(f"{r.usage}: {r.description}" for r in RESPONDERS)
