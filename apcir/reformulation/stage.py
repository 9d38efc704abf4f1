"""The reformulation stage: every turn's level and three reformulations, one JSONL record per turn.

:func:`reformulate` appends one :class:`ReformulationRecord` to the output as
soon as its turn finishes, so a killed run loses at most the turns in flight;
a re-run skips the turns whose record is already ``ok`` in the output (failed
ones are asked again, and their new line replaces the old for
:func:`~apcir.contract.reformulations.load_reformulations`). Model answers are
cached by content (see :mod:`apcir.llm.cache`), so a re-run into a new file
makes no request either. A summary (configuration, counts, usage and cost) is
written beside the output as ``<out stem>.summary.json``; it never contains
the API key. ``apcir reformulate`` and ``apcir run`` both call :func:`reformulate`
with the same :class:`~apcir.reformulation.settings.ReformulatorOptions`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from apcir.contract.records import Turn
from apcir.contract.reformulations import LEVELS, ReformulationRecord, filled_records, load_reformulations
from apcir.contract.stage import Stage, StageContext, StageResult, an_output
from apcir.errors import ApcirError
from apcir.io import RecordAppender, RecordLog
from apcir.llm.accounting import Accounting
from apcir.llm.batch import Batch, BatchSummary, run_batch
from apcir.reformulation.settings import ReformulatorOptions


class ReformulateSummary(BatchSummary):
    """What one :func:`reformulate` call did (also saved beside the output)."""

    model: str
    levels: dict[str, int] = Field(default_factory=dict, description="levels of all ok records in the output")
    fallback_levels: dict[str, int] = Field(
        default_factory=dict, description="file:PATH: those of the levels that came from level_fallback, not the file")


def stage_identity(turns: list[Turn], options: ReformulatorOptions) -> dict[str, Any]:
    """What determines the records of ``turns`` (the stage fingerprint's input): see each reformulator."""
    spec = options.entry()
    return {"reformulator": spec.name, "llm": options.method, **spec.call("identity", turns, options)}


def shaping_settings(options: ReformulatorOptions) -> dict[str, Any]:
    """The settings that shape a record whatever the turns (a resume with other ones is refused)."""
    return {"llm": options.method, **options.entry().call("shaping", options)}


# --- the stage -------------------------------------------------------------------------------
def reformulate(
    turns: list[Turn],
    options: ReformulatorOptions,
    out: Path,
    *,
    refresh: bool = False,
    progress: bool = True,
    redo_stale: bool = False,
    log: RecordLog[ReformulationRecord] | None = None,
) -> ReformulateSummary:
    """Reformulate ``turns`` as ``options.method`` says into ``out``: a resumable batch (:func:`run_batch`, which says
    what it raises; see also the module docstring). A file of another method's records is refused; what the
    reformulator's settings lack (``file:PATH``'s file) fails before any output exists, when the settings that shape
    the records are read. ``log``: ``out`` held open across calls (:class:`~apcir.io.RecordLog`), so that a call
    reads none of its records from disk again."""
    out = Path(out)
    spec = options.entry()

    def check_existing(existing: dict[str, ReformulationRecord]) -> None:
        others = sorted({r.model for r in existing.values() if r.model != options.method})
        if others:
            raise ApcirError(
                f"already holds records of {', '.join(others)}, not {options.method}; choose another --out (or "
                "--refresh to start it over)",
                path=out,
            )

    def produce(pending: list[Turn], writer: RecordAppender[ReformulationRecord], accounting: Accounting) -> Any:
        return spec.call("produce", pending, options, writer, accounting=accounting, refresh=refresh)

    return run_batch(
        turns, out, what="reformulations", record=ReformulationRecord, key=lambda turn: turn.turn_id,
        settings=shaping_settings(options), description=f"reformulate {options.method}",
        accounting=options.accounting, config=lambda: options.config_snapshot({"llm": options.method,
                                                                               "versions": _versions()}, refresh),
        produce=produce, summarise=lambda batch, fields: _summary(options.method, batch, fields),
        check_existing=check_existing, refresh=refresh, progress=progress, redo_stale=redo_stale, log=log)


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("apcir", "openai"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            pass
    return found


def _summary(llm: str, batch: Batch[Turn, ReformulationRecord], fields: dict[str, Any]) -> ReformulateSummary:
    from apcir.reformulation.file import level_from_fallback

    records = dict(batch.existing)
    for record in batch.writer.records:
        records[record.turn_id] = record
    ok = [r for r in records.values() if r.status == "ok" and r.output is not None]
    levels = Counter(r.output.level for r in ok if r.output is not None)
    fallback = Counter(r.output.level for r in ok if r.output is not None and level_from_fallback(r))
    return ReformulateSummary(
        model=llm,
        levels={level: levels.get(level, 0) for level in LEVELS},
        fallback_levels={level: fallback[level] for level in LEVELS if fallback[level]},
        **fields,
    )


@dataclass
class ReformulateStage(Stage):
    """``apcir run``'s reformulation stage (and its tuning and manual legs): ``reformulations.jsonl``."""

    label: str
    turns: list[Turn]
    options: ReformulatorOptions
    identity: dict[str, Any]
    """The reformulator's own identity (for ``file:PATH``, the file's content): :func:`stage_identity`."""
    out: Path = an_output()

    @classmethod
    def of(cls, label: str, turns: list[Turn], options: ReformulatorOptions, out: Path) -> ReformulateStage:
        return cls(label, turns, options, stage_identity(turns, options), out)

    @property
    def name(self) -> str:
        return self.label

    def run(self, context: StageContext) -> StageResult:
        summary = reformulate(self.turns, self.options, self.out, progress=context.progress, redo_stale=True)
        context.counts.llm_requests += summary.requests
        context.counts.failed_turns.extend(summary.failed_turns)
        return StageResult(f"{summary.ok} turns ok, {summary.failed} failed, {summary.requests} LLM requests, "
                           f"{summary.cache_hits} cache hits", unfinished=bool(summary.failed_turns))

    def records(self) -> dict[str, ReformulationRecord]:
        """Records for every turn, after the stage ran (:func:`~apcir.contract.reformulations.filled_records`, as
        :meth:`apcir.reformulation.core.Reformulation.records` gives them)."""
        return filled_records(load_reformulations(self.out), self.turns, f"{self.label} ({self.out.name})")
