"""The reformulators: the single source of the names ``reformulator.method`` / ``--method`` accepts.

A reformulator gives every turn a :class:`~apcir.contract.reformulations.ReformulationRecord`.
Each entry says how it is named, what identifies its output (for the stage
fingerprint: change it and the stage is redone) and how it produces records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from apcir.llm.batch import ProducerSpec
from apcir.registry import InRegistry, Registry


@dataclass(frozen=True)
class ReformulatorSpec(ProducerSpec):
    """A reformulator, named by ``method``: ``identity(turns, options)``, ``produce(turns, options, emit, *,
    accounting, refresh)`` and ``shaping(options) -> dict``, the settings that shape every record whatever the
    turns (see :class:`~apcir.llm.batch.ProducerSpec`); ``options`` names the model of the ``[reformulator]``
    keys of its own, read with ``options.own(ItsOptions)``. A reformulator that reads files says which in
    ``inputs(options) -> list[Path]`` (no output may overwrite them), and one that can reformulate only some turns,
    which, in ``covered(options) -> set[str]`` (turn ids: a tuning leg that would have none of a topic's is
    refused before anything runs)."""

    shaping: str | Callable[..., dict[str, Any]] | None = None
    inputs: str | Callable[..., list[Any]] | None = None
    covered: str | Callable[..., set[str]] | None = None


REFORMULATORS: Registry[ReformulatorSpec] = Registry("reformulator", "apcir.reformulators")
REFORMULATORS.add(ReformulatorSpec(
    "heuristic", "offline baseline: context terms from the history, a lexical level rule", "heuristic", True,
    "apcir.reformulation.offline:identity", "apcir.reformulation.offline:produce_heuristic",
    options="apcir.reformulation.offline:HeuristicOptions"))
REFORMULATORS.add(ReformulatorSpec(
    "manual", "offline: the annotators' manual rewrites (HumanQR)", "manual", True,
    "apcir.reformulation.offline:identity", "apcir.reformulation.offline:produce_manual",
    options="apcir.reformulation.offline:ManualOptions"))
REFORMULATORS.add(ReformulatorSpec(
    "file", "reformulations made elsewhere: apcir JSONL, a TSV, or JSON/JSONL fields", "file:PATH", True,
    "apcir.reformulation.file:identity", "apcir.reformulation.file:produce", syntax="prefix",
    options="apcir.reformulation.file:FileOptions", shaping="apcir.reformulation.file:shaping",
    inputs="apcir.reformulation.file:inputs", covered="apcir.reformulation.file:covered"))
REFORMULATORS.add(ReformulatorSpec(
    "llm", "any other name: that model on an OpenAI-compatible server, one request per turn", "MODEL (gpt-4o, ...)",
    False, "apcir.reformulation.chat:identity", "apcir.reformulation.chat:produce", syntax="other",
    options="apcir.reformulation.chat:ChatOptions", shaping="apcir.reformulation.chat:shaping"))


def reformulator_for(method: str) -> ReformulatorSpec:
    """The reformulator ``method`` names: ``heuristic``, ``manual`` (or a plugin's, named as it is), ``file:PATH``,
    else a model (:meth:`~apcir.registry.Registry.resolve`)."""
    return REFORMULATORS.resolve(method)[0]


METHOD = InRegistry(REFORMULATORS, open_ended=True)
"""A reformulation method's name, ``Annotated[str, METHOD]``: a reformulator's or a model's, not a near miss."""


def misspelt(method: str) -> str | None:
    """One line refusing a ``method`` that nearly spells a reformulator's name (``heuristc``, ``fle:x.tsv``) rather
    than being taken for a model's name and found out only when that model is asked; None otherwise."""
    return REFORMULATORS.near_miss(method, REFORMULATORS.usages())


def check_method(method: str) -> str:
    """``method`` if it names a reformulator or a model, else a ``ValueError`` (for validators) saying which
    reformulator it nearly spells."""
    return METHOD.check(method)


def is_offline(method: str) -> bool:
    """True for the reformulators that need no model and no network."""
    return reformulator_for(method).offline


def usage_help() -> str:
    """One line for ``--llm`` help, from the registry."""
    return "; ".join(f"{r.usage}: {r.description}" for r in REFORMULATORS)
