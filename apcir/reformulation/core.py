"""The reformulation stage's core object: turns in, one record per turn out (level and three rewrites).

:class:`Reformulation` is what every front door calls: ``apcir run``'s ledger stage
(:class:`apcir.reformulation.stage.ReformulateStage`), ``apcir reformulate``, the per-turn pipeline
(:mod:`apcir.experiment.turns`: ``apcir converse``, :meth:`apcir.Experiment.answer`, PyTerrier) and
:func:`apcir.reformulate`. Its records are kept in a resumable log (:func:`apcir.reformulation.stage.reformulate`,
the persistence the batch needs); :meth:`Reformulation.records` gives every turn a record, a failed or missing one
searched with its utterance at level a, and says so in the same warnings everywhere
(:func:`~apcir.contract.reformulations.filled_records`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from apcir.contract.records import Turn
from apcir.contract.reformulations import ReformulationRecord, filled_records
from apcir.io import RecordLog
from apcir.reformulation.settings import ReformulatorOptions
from apcir.reformulation.stage import ReformulateSummary


@dataclass
class Reformulation:
    """Each turn's level and three rewrites by ``options``, kept in the log ``out`` (a second call asks nothing
    again). ``label`` names it in warnings (``reformulate``, ``reformulate:tune``, ...)."""

    options: ReformulatorOptions
    out: Path
    redo_stale: bool = False
    progress: bool = False
    label: str = "reformulate"
    log: RecordLog[ReformulationRecord] = field(init=False, repr=False)
    """The log indexed in memory: read from disk once, so a live turn reads no earlier record again."""

    def __post_init__(self) -> None:
        self.log = RecordLog(self.out, ReformulationRecord, "reformulations")

    def make(self, turns: Sequence[Turn], *, refresh: bool = False) -> ReformulateSummary:
        """The records of ``turns`` made (those not already in the log), and what was done."""
        from apcir.reformulation.stage import reformulate

        return reformulate(list(turns), self.options, self.out, refresh=refresh, progress=self.progress,
                           redo_stale=self.redo_stale, log=self.log)

    def records(self, turns: Sequence[Turn]) -> dict[str, ReformulationRecord]:
        """The log's records of ``turns``, every turn given one (:func:`filled_records`)."""
        kept = self.log.records(t.turn_id for t in turns)
        return filled_records(kept, turns, f"{self.label} ({self.out.name})")

    def __call__(self, turns: Sequence[Turn]) -> dict[str, ReformulationRecord]:
        self.make(turns)
        return self.records(turns)
