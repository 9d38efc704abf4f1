"""The response stage's core objects: the PTKB statements ranked, and one grounded response per turn.

:class:`StatementRanking` ranks each turn's statements (the ones the reformulation used first, then by
similarity to the personalised rewrite: BM25, or the retrieval encoder's vectors); :class:`Responding` answers
each turn from a run's top passages with those statements. Every front door goes through them: ``apcir run``'s
ledger stages (:class:`apcir.responses.stage.PtkbStage`, :class:`~apcir.responses.stage.RespondStage`), ``apcir
respond``, the per-turn pipeline (:mod:`apcir.experiment.turns`), :func:`apcir.respond` and :func:`apcir.export`.
The responses are kept in a resumable log (:func:`apcir.responses.stage.respond`), so answering again asks no
model again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from apcir.contract.records import Run, Turn
from apcir.contract.reformulations import ReformulationRecord
from apcir.contract.responses import ResponseRecord
from apcir.io import RecordLog
from apcir.responses.job import ResponseJob
from apcir.responses.ptkb import PtkbRanking, SimilaritySpec, bm25_similarity
from apcir.responses.settings import RespondSettings
from apcir.responses.stage import RespondSummary

Texts = Callable[[set[str]], Mapping[str, str]]
"""The texts of the passages asked for (only these are read)."""


def no_texts(ids: set[str]) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class StatementRanking:
    """Every turn's PTKB statements, best first (:func:`apcir.responses.ptkb.rank_statements`)."""

    similarity: SimilaritySpec = field(default_factory=bm25_similarity)

    @classmethod
    def of(cls, encoder: str | None, kind: str | None = None, dtype: str | None = "auto") -> StatementRanking:
        """By ``encoder``'s similarity: ``bm25`` (or None), else that model's (``kind`` as an index records it), in
        precision ``dtype`` (:func:`apcir.responses.ptkb.similarity_for`)."""
        from apcir.responses.ptkb import similarity_for

        return cls(similarity_for(encoder, kind, dtype))

    @property
    def name(self) -> str:
        return self.similarity.name

    def __call__(self, turns: Sequence[Turn], records: Mapping[str, ReformulationRecord]) -> PtkbRanking:
        from apcir.responses.ptkb import rank_statements

        return rank_statements(list(turns), records, self.similarity)


@dataclass
class Responding:
    """One grounded response per turn by ``settings.responder``, kept in the log ``out``, from a run's top passages
    (their texts from ``texts``) and the statements ``ptkb`` ranks."""

    settings: RespondSettings
    out: Path
    ptkb: StatementRanking = field(default_factory=StatementRanking)
    texts: Texts = no_texts
    redo_stale: bool = False
    progress: bool = False
    log: RecordLog[ResponseRecord] = field(init=False, repr=False)
    """The log indexed in memory: read from disk once, so a live turn reads no earlier record again."""

    def __post_init__(self) -> None:
        self.log = RecordLog(self.out, ResponseRecord, "responses")

    @property
    def offline(self) -> bool:
        return bool(self.settings.entry().offline)

    def jobs(self, turns: Sequence[Turn], records: Mapping[str, ReformulationRecord], run: Run | None,
             ranked: PtkbRanking | None = None) -> list[ResponseJob]:
        """What each turn is answered from: the run's top ``top_k`` passages (none without a run) and its statements
        (``ranked``, else ranked by ``ptkb``)."""
        from apcir.responses.job import build_jobs, needed_passages

        chosen = list(turns)
        top_k = self.settings.top_k
        texts = dict(self.texts(needed_passages(run, chosen, top_k))) if run is not None else {}
        statements = ranked if ranked is not None else self.ptkb(chosen, records)
        return build_jobs(chosen, dict(records), run, texts, statements, top_k)

    def make(self, jobs: list[ResponseJob], *, refresh: bool = False) -> RespondSummary:
        """The responses of ``jobs`` made (those not already in the log for the same passages)."""
        from apcir.responses.stage import respond

        return respond(jobs, self.settings, self.out, refresh=refresh, progress=self.progress,
                       redo_stale=self.redo_stale, log=self.log)

    def answer(self, jobs: list[ResponseJob], *, refresh: bool = False) -> RespondSummary:
        """:meth:`make`, saying which turns have no response (the same words from every front door)."""
        from apcir.responses.stage import warn_unanswered

        summary = self.make(jobs, refresh=refresh)
        warn_unanswered(summary)
        return summary

    def __call__(self, turns: Sequence[Turn], records: Mapping[str, ReformulationRecord], run: Run,
                 ranked: PtkbRanking | None = None) -> dict[str, ResponseRecord]:
        chosen = list(turns)
        self.answer(self.jobs(chosen, records, run, ranked))
        return self.log.records(t.turn_id for t in chosen)

    def extractive(self, out: Path) -> Responding:
        """The extractive responder with the same passages and budget: what answers when a model cannot in time."""
        from apcir.responses.registry import EXTRACTIVE

        settings = RespondSettings.model_validate({"responder": EXTRACTIVE, "top_k": self.settings.top_k,
                                                   "max_words": self.settings.max_words})
        return Responding(settings, out, self.ptkb, self.texts, self.redo_stale, self.progress)
