"""The reformulators: the single source of the names ``reformulator.method`` / ``--method`` accepts.

A reformulator gives every turn a :class:`~apcir.contract.reformulations.ReformulationRecord`.
Each entry says how it is named, what identifies its output (for the stage
fingerprint: change it and the stage is redone) and how it produces records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from apcir.llm.batch import ProducerSpec
from apcir.registry import InRegistry, Registry

if TYPE_CHECKING:
    from apcir.llm.accounting import Accounting
    from apcir.reformulation.settings import ReformulatorOptions

FILE_PREFIX = "file:"


@dataclass(frozen=True)
class ReformulatorSpec(ProducerSpec):
    """A reformulator, named by ``method``: ``identity(turns, options)``, ``produce(turns, options, emit, *,
    accounting, refresh)`` and ``shaping(options) -> dict``, the settings that shape every record whatever the
    turns (see :class:`~apcir.llm.batch.ProducerSpec`)."""

    shaping: str | Callable[..., dict[str, Any]] | None = None


REFORMULATORS: Registry[ReformulatorSpec] = Registry("reformulator", "apcir.reformulators")
REFORMULATORS.add(ReformulatorSpec(
    "heuristic", "offline baseline: context terms from the history, a lexical level rule", "heuristic", True,
    "apcir.reformulation.offline:identity", "apcir.reformulation.offline:produce_heuristic"))
REFORMULATORS.add(ReformulatorSpec(
    "manual", "offline: the annotators' manual rewrites (HumanQR)", "manual", True,
    "apcir.reformulation.offline:identity", "apcir.reformulation.offline:produce_manual"))
REFORMULATORS.add(ReformulatorSpec(
    "file", "reformulations made elsewhere: apcir JSONL, a TSV, or JSON/JSONL fields", "file:PATH", True,
    "apcir.reformulation.file:identity", "apcir.reformulation.file:produce", "apcir.reformulation.file:shaping"))
REFORMULATORS.add(ReformulatorSpec(
    "llm", "any other name: that model on an OpenAI-compatible server, one request per turn", "MODEL (gpt-4o, ...)",
    False, "apcir.reformulation.chat:identity", "apcir.reformulation.chat:produce",
    "apcir.reformulation.chat:shaping"))


def reformulator_for(llm: str) -> ReformulatorSpec:
    """The reformulator ``llm`` names: ``heuristic``, ``manual``, ``file:PATH``, else a model."""
    if llm.startswith(FILE_PREFIX):
        return REFORMULATORS.get("file")
    if llm in REFORMULATORS and REFORMULATORS.get(llm).usage == llm:  # named as it is used: heuristic, a plugin's
        return REFORMULATORS.get(llm)
    return REFORMULATORS.get("llm")


def source_file(method: str) -> str | None:
    """The file a ``file:PATH`` method reads its reformulations from; None for any other method."""
    return method.removeprefix(FILE_PREFIX) if method.startswith(FILE_PREFIX) else None


def method_usages() -> list[str]:
    """How a method that is not a model's name is written: the reformulators named as they are used, ``file:``."""
    return [r.usage for r in REFORMULATORS if r.usage == r.name] + [FILE_PREFIX]


METHOD = InRegistry(REFORMULATORS, open_ended=True, usages=method_usages)
"""A reformulation method's name, ``Annotated[str, METHOD]``: a reformulator's or a model's, not a near miss."""


def misspelt(method: str) -> str | None:
    """One line refusing a ``method`` that nearly spells a reformulator's name (``heuristc``, ``fle:x.tsv``) rather
    than being taken for a model's name and found out only when that model is asked; None otherwise."""
    return REFORMULATORS.near_miss(method, method_usages())


def check_method(method: str) -> str:
    """``method`` if it names a reformulator or a model, else a ``ValueError`` (for validators) saying which
    reformulator it nearly spells."""
    return METHOD.check(method)


def is_offline(llm: str) -> bool:
    """True for the reformulators that need no model and no network."""
    return reformulator_for(llm).offline


def usage_help() -> str:
    """One line for ``--llm`` help, from the registry."""
    return "; ".join(f"{r.usage}: {r.description}" for r in REFORMULATORS)


def accounting_for(options: ReformulatorOptions) -> Accounting:
    from apcir.llm.accounting import Accounting

    return Accounting(options.price_table())
