"""The response stage: one grounded, cited response per turn, one JSONL record per turn.

:func:`respond` appends one :class:`~apcir.contract.responses.ResponseRecord`
to the output as soon as its turn is answered, so a killed run loses at most the
turns in flight. A re-run skips the turns whose record is already ``ok`` *for
the same responder and the same passages* (a record made from other passages
is answered again, and the new line replaces the old); failed turns are asked
again. Model answers are cached by content (:mod:`apcir.llm.cache`). A summary
(configuration, counts, usage and cost; never the API key) is written beside
the output as ``<out stem>.summary.json``. ``apcir respond`` and ``apcir run``
both call :func:`respond` with the same :class:`~apcir.responses.settings.RespondSettings`.

Every answer is checked (citations must point at given passages, statement
ids must be in the profile, the word budget holds); a failed check gets one
repair request, then the turn is recorded as failed with the error and the
raw answer. Nothing is dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from apcir.contract.records import Turn
from apcir.contract.reformulations import ReformulationRecord
from apcir.contract.responses import ResponseRecord
from apcir.contract.stage import Stage, StageContext, StageResult, an_output, not_an_input
from apcir.io import RecordAppender, RecordLog
from apcir.llm.accounting import Accounting
from apcir.llm.batch import BatchSummary, run_batch
from apcir.responses.job import ResponseJob
from apcir.responses.settings import RespondSettings


class RespondSummary(BatchSummary):
    """What one :func:`respond` call did (also saved beside the output); ``skipped``: ok for the same passages."""

    responder: str


def stage_identity(settings: RespondSettings) -> dict[str, Any]:
    """What determines the records, given the same inputs (the stage fingerprint's part from the settings)."""
    spec = settings.entry()
    return {"responder": spec.name, "name": settings.responder, **spec.call("identity", settings)}


def shaping_settings(settings: RespondSettings) -> dict[str, Any]:
    """The settings that shape a response whatever the turns (a resume with other ones is refused)."""
    return {k: v for k, v in stage_identity(settings).items() if k != "code"}


def respond(
    jobs: list[ResponseJob],
    settings: RespondSettings,
    out: Path,
    *,
    refresh: bool = False,
    progress: bool = True,
    redo_stale: bool = False,
    log: RecordLog[ResponseRecord] | None = None,
) -> RespondSummary:
    """Answer every job as ``settings.responder`` says into ``out``: a resumable batch (:func:`run_batch`, which says
    what it raises; see also the module docstring). A turn's record is kept only for the same passages. ``log``:
    ``out`` held open across calls (:class:`~apcir.io.RecordLog`), so that a call reads none of its records from disk
    again."""
    out = Path(out)
    spec = settings.entry()

    def produce(pending: list[ResponseJob], writer: RecordAppender[ResponseRecord], accounting: Accounting) -> Any:
        return spec.call("produce", pending, settings, writer, accounting=accounting, refresh=refresh,
                         trace=_trace_path(out))

    return run_batch(
        jobs, out, what="responses", record=ResponseRecord, key=lambda job: job.turn.turn_id,
        settings=shaping_settings(settings), description=f"respond {settings.responder}",
        accounting=settings.accounting,
        config=lambda: settings.config_snapshot(settings.model_dump(include={"responder", "top_k", "max_words"}), refresh),
        produce=produce, summarise=lambda batch, fields: RespondSummary(responder=settings.responder, **fields),
        is_done=lambda job, record: record.status == "ok" and record.responder == settings.responder
        and record.passages == job.passage_ids,
        refresh=refresh, also_refresh=[_trace_path(out)], progress=progress, redo_stale=redo_stale, log=log)


def warn_unanswered(summary: RespondSummary) -> None:
    """Say which turns have no response (the same words from every front door)."""
    from apcir.console import shown, warn

    if summary.failed_turns:
        warn(f"{len(summary.failed_turns)} turn(s) have no response (their records keep the error and the raw "
             f"answer; the submission falls back to the pseudo-response): {shown(summary.failed_turns)}")


def _trace_path(out: Path) -> Path:
    """Where a responder may write a trace beside the responses (``responses.pathways.jsonl``)."""
    from apcir.responses.pathways import trace_path

    return trace_path(out)


@dataclass
class PtkbStage(Stage):
    """``ptkb.run`` (apcir's ranking of every turn's statements, which the responses and the submission use) and
    its two reference orders (``ptkb/heuristic.run``, ``ptkb/profile.run``)."""

    code: ClassVar[tuple[str, ...]] = ("apcir.responses.ptkb", "apcir.responses.text")
    reformulations: Path
    turns: list[Turn]
    encoder: str
    """``bm25`` or the retrieval model whose vectors compare a rewrite with the statements."""
    kind: str | None
    experiment: str
    out: Path = an_output()
    baselines: dict[str, Path] = an_output()
    records: dict[str, ReformulationRecord] = not_an_input()
    dtype: str | None = None
    """The encoder's precision (resolved on this machine; None: auto)."""

    @property
    def name(self) -> str:
        return "ptkb"

    def run(self, context: StageContext) -> StageResult:
        from apcir.responses.ptkb import PTKB_METHODS, rank_statements, similarity_for, write_ptkb_run

        spec = similarity_for(self.encoder, self.kind, self.dtype)
        write_ptkb_run(rank_statements(self.turns, self.records, spec), self.out, tag=f"{self.experiment}-ptkb")
        for name, path in self.baselines.items():
            ranked, _ = PTKB_METHODS.get(name).rank(self.turns, None, None, None)
            write_ptkb_run(ranked, path, tag=f"{self.experiment}-ptkb-{name}")
        return StageResult(f"statements of {len(self.turns)} turns ranked (ptkb_used first, then {spec.name} "
                           "similarity)")


@dataclass
class RespondStage(Stage):
    """``responses.jsonl``: one response per turn from the final run's top passages (resumable)."""

    run_file: Path
    reformulations: Path
    ptkb: Path
    turns: list[Turn]
    passages: Path | None
    identity: dict[str, Any]
    """The responder's identity (:func:`stage_identity`)."""
    out: Path = an_output()
    settings: RespondSettings = not_an_input()
    records: dict[str, ReformulationRecord] = not_an_input()

    @classmethod
    def of(cls, settings: RespondSettings, **fields: Any) -> RespondStage:
        return cls(identity=stage_identity(settings), settings=settings, **fields)

    @property
    def name(self) -> str:
        return "respond"

    def run(self, context: StageContext) -> StageResult:
        from apcir.responses.job import build_jobs, needed_passages
        from apcir.responses.ptkb import load_ptkb_run

        run = context.read_run(self.run_file)
        store = context.passage_texts()
        top_k = self.settings.top_k
        texts = store.texts(needed_passages(run, self.turns, top_k)) if store is not None else {}
        jobs = build_jobs(self.turns, self.records, run, texts, load_ptkb_run(self.ptkb, self.turns), top_k)
        summary = respond(jobs, self.settings, self.out, progress=context.progress, redo_stale=True)
        warn_unanswered(summary)
        context.counts.llm_requests += summary.requests
        context.counts.failed_turns.extend(summary.failed_turns)
        return StageResult(f"{summary.ok} responses ok, {summary.failed} failed ({summary.responder}), "
                           f"{summary.requests} LLM requests, {summary.cache_hits} cache hits",
                           unfinished=bool(summary.failed_turns))
