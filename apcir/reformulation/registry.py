"""The reformulators: the single source of the names ``reformulator.method`` / ``--method`` accepts.

A reformulator gives every turn a :class:`~apcir.contract.reformulations.ReformulationRecord`.
Each entry says how it is named, what identifies its output (for the stage
fingerprint: change it and the stage is redone) and how it produces records.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from apcir.console import shown, warn
from apcir.contract.records import Turn
from apcir.contract.reformulations import ReformulationRecord
from apcir.llm.accounting import Accounting
from apcir.reformulation import chat
from apcir.reformulation.file import PREFIX as FILE_PREFIX
from apcir.reformulation.file import file_path, file_records
from apcir.reformulation.offline import (
    HEURISTIC_VERSION,
    MANUAL_VERSION,
    heuristic_output,
    manual_output,
    offline_record,
    source_identity,
)
from apcir.reformulation.settings import ReformulatorOptions
from apcir.registry import Registry

Emit = Callable[[ReformulationRecord], None]
Produce = Callable[..., str | None]


@dataclass(frozen=True)
class ReformulatorSpec:
    name: str
    description: str
    usage: str
    """How ``llm`` names it."""
    offline: bool
    identity: Callable[[Sequence[Turn], ReformulatorOptions], dict[str, Any]]
    produce: Produce
    """``produce(turns, options, emit, *, accounting, refresh) -> structured mode or None``."""
    shaping: Callable[[ReformulatorOptions], dict[str, Any]] = lambda options: {}
    """The settings that shape every record whatever the turns (a resume under other ones is refused)."""


def _offline(make: Callable[[Turn], Any], version: str) -> Produce:
    def produce(turns: Sequence[Turn], options: ReformulatorOptions, emit: Emit, **_: Any) -> None:
        for turn in turns:
            emit(offline_record(turn, options.method, make, version))

    return produce


def _offline_identity(turns: Sequence[Turn], options: ReformulatorOptions) -> dict[str, Any]:
    return {"code": source_identity()}


def _from_file(turns: Sequence[Turn], options: ReformulatorOptions, emit: Emit, **_: Any) -> None:
    records, warnings = file_records(turns, options.method, options.map, options.level_fallback)
    for message in warnings:
        warn(message)
    missing = [r.turn_id for r in records if r.status == "failed"]
    if missing:
        listed = shown(missing)
        warn(f"{len(missing)} turn(s) have no usable reformulation in {options.method[len(FILE_PREFIX):]}: {listed}")
    filled = [r for r in records if any(n.startswith("no level") for n in r.notes)]
    if filled:
        warn(f"{len(filled)} turn(s) have no level in the file; levels from the fallback "
             f"'{options.level_fallback}'")
    for record in records:
        emit(record)


def _file_identity(turns: Sequence[Turn], options: ReformulatorOptions) -> dict[str, Any]:
    digest = hashlib.sha256(file_path(options.method).read_bytes()).hexdigest()[:16]
    identity: dict[str, Any] = {"file": digest, "map": dict(sorted(options.map.items())),
                                "level_fallback": options.level_fallback}
    if options.level_fallback == "heuristic":
        identity["heuristic"] = source_identity()
    return identity


def _file_shaping(options: ReformulatorOptions) -> dict[str, Any]:
    return {k: v for k, v in _file_identity([], options).items() if k != "heuristic"}


REFORMULATORS: Registry[ReformulatorSpec] = Registry("reformulator", "apcir.reformulators")
REFORMULATORS.add(ReformulatorSpec(
    "heuristic", "offline baseline: context terms from the history, a lexical level rule", "heuristic", True,
    _offline_identity, _offline(heuristic_output, HEURISTIC_VERSION)))
REFORMULATORS.add(ReformulatorSpec(
    "manual", "offline: the annotators' manual rewrites (HumanQR)", "manual", True, _offline_identity,
    _offline(manual_output, MANUAL_VERSION)))
REFORMULATORS.add(ReformulatorSpec(
    "file", "reformulations made elsewhere: apcir JSONL, a TSV, or JSON/JSONL fields", "file:PATH", True,
    _file_identity, _from_file, _file_shaping))
REFORMULATORS.add(ReformulatorSpec(
    "llm", "any other name: that model on an OpenAI-compatible server, one request per turn", "MODEL (gpt-4o, ...)",
    False, chat.identity, chat.produce, chat.shaping))


def reformulator_for(llm: str) -> ReformulatorSpec:
    """The reformulator ``llm`` names: ``heuristic``, ``manual``, ``file:PATH``, else a model."""
    if llm.startswith(FILE_PREFIX):
        return REFORMULATORS.get("file")
    if llm in REFORMULATORS and REFORMULATORS.get(llm).usage == llm:  # named as it is used: heuristic, a plugin's
        return REFORMULATORS.get(llm)
    return REFORMULATORS.get("llm")


def is_offline(llm: str) -> bool:
    """True for the reformulators that need no model and no network."""
    return reformulator_for(llm).offline


def usage_help() -> str:
    """One line for ``--llm`` help, from the registry."""
    return "; ".join(f"{r.usage}: {r.description}" for r in REFORMULATORS)


def accounting_for(options: ReformulatorOptions) -> Accounting:
    return Accounting(options.price_table())
