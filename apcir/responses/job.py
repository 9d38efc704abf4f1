"""What a responder gets for one turn: the conversation, the level, the personalised rewrite, the ranked
profile statements and the top passages of the final run, numbered [1]..[k]."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from apcir.console import warn
from apcir.contract.records import Run, Turn
from apcir.contract.reformulations import ReformulationRecord
from apcir.contract.responses import ResponseRecord
from apcir.contract.runs import ranking
from apcir.errors import ApcirError
from apcir.responses.ptkb import PtkbRanking, personalised_rewrite, statements_used


@dataclass(frozen=True)
class ResponseJob:
    turn: Turn
    level: str
    rewrite: str
    """The personalised rewrite (q^u at levels b/c, q' at level a)."""
    statements: list[tuple[str, str]]
    """Every profile statement (id, text), best first (the PTKB ranking)."""
    used: list[str]
    """The statements the reformulation says it used."""
    passages: list[tuple[str, str]]
    """The top passages (id, text), given to the responder as [1]..[k]; a text may be empty."""
    notes: list[str] = field(default_factory=list)
    neutral_rewrite: str = ""
    """The non-personalised rewrite q' (what a responder without the profile is given)."""
    retrieval: bool = True
    """False when there is no retrieval at all (LaMP-QA): no passages, an answer without citations."""

    @property
    def passage_ids(self) -> list[str]:
        return [pid for pid, _ in self.passages]


def build_jobs(
    turns: Sequence[Turn],
    records: Mapping[str, ReformulationRecord],
    run: Run | None,
    passages: Mapping[str, str],
    ptkb: PtkbRanking,
    top_k: int,
) -> list[ResponseJob]:
    """One job per turn, in the topics' order (a turn the run lacks gets no passage, and then a failed record)."""
    jobs = []
    for turn in turns:
        record = records.get(turn.turn_id)
        level = record.output.level if record is not None and record.output is not None else "a"
        ranked = [sid for sid, _ in ptkb.get(turn.turn_id, [])]
        ranked += [sid for sid in turn.ptkb if sid not in ranked]  # a ranking that lacks some: profile order after
        top = ranking(run.get(turn.turn_id, {}), top_k) if run is not None else []
        jobs.append(ResponseJob(
            turn=turn, level=level, rewrite=personalised_rewrite(turn, record),
            statements=[(sid, turn.ptkb[sid]) for sid in ranked if sid in turn.ptkb],
            used=statements_used(turn, record),
            passages=[(pid, passages.get(pid, "").strip()) for pid, _ in top],
            neutral_rewrite=record.output.rewrite if record is not None and record.output is not None else "",
            retrieval=run is not None,
        ))
    return jobs


def check_run_turns(run: Run, turns: Sequence[Turn]) -> None:
    """Refuse a run with passages for no turn of the topics; name the topic turns it has no passage for (``apcir
    respond``: a run given by hand may be another topic set's)."""
    lacking = [t.turn_id for t in turns if not run.get(t.turn_id)]
    if turns and len(lacking) == len(turns):
        example = f", e.g. {next(iter(sorted(run)))}" if run else ""
        raise ApcirError(f"the run has no passage for any of the {len(turns)} topic turn(s) ({len(run)} run "
                         f"turns{example}): is it the run of these topics?")
    if lacking:
        warn(f"{len(lacking)} of the {len(turns)} topic turn(s) have no passage in the run, so no response (recorded "
             f"as failed): {', '.join(lacking[:10])}{' ...' if len(lacking) > 10 else ''}")


def needed_passages(run: Run, turns: Sequence[Turn], top_k: int) -> set[str]:
    """The passages a response may cite: each turn's top ``top_k`` (read only these texts from the collection)."""
    return {pid for t in turns for pid, _ in ranking(run.get(t.turn_id, {}), top_k)}


def failed_record(job: ResponseJob, responder: str, error: str) -> ResponseRecord:
    return ResponseRecord(turn_id=job.turn.turn_id, responder=responder, status="failed", error=error,
                          passages=job.passage_ids, notes=list(job.notes))


def unusable(job: ResponseJob) -> str | None:
    """Why no response can be written for ``job`` (no passage, or none with text), else None. Without retrieval
    (LaMP-QA) the answer needs no passage."""
    if not job.retrieval:
        return None
    if not job.passages:
        return "the run has no passage for this turn: nothing to answer from"
    if not any(text for _, text in job.passages):
        ids = ", ".join(pid for pid, _ in job.passages)
        return f"none of the top {len(job.passages)} passages has a text in the collection given ({ids})"
    return None


def askable_jobs(jobs: Sequence[ResponseJob], responder: str,
                 emit: Callable[[ResponseRecord], None]) -> list[ResponseJob]:
    """The jobs a model can be asked to answer; each of the others is recorded as failed now (``emit``), with a
    warning saying why (:func:`unusable`)."""
    found = []
    for job in jobs:
        problem = unusable(job)
        if problem is None:
            found.append(job)
        else:
            warn(f"turn {job.turn.turn_id}: {problem}")
            emit(failed_record(job, responder, problem))
    return found
