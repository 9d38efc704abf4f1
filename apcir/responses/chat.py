"""The LLM responder: one chat request per turn through :mod:`apcir.llm.jobs` (cache, concurrency, retries,
one repair, accounting)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from apcir.console import warn
from apcir.contract.responses import ResponseRecord
from apcir.llm.accounting import Accounting
from apcir.llm.jobs import Answer, Ask, ask_all
from apcir.responses.job import ResponseJob, failed_record, unusable
from apcir.responses.prompt import (
    SCHEMA_NAME,
    ParsedResponse,
    ResponsePrompt,
    build_prompt,
    grammar_schema,
    output_schema,
    parse_answer,
    repair_messages,
)
from apcir.responses.settings import RespondSettings


def _record(job: ResponseJob, prompt: ResponsePrompt, model: str, answer: Answer[ParsedResponse]) -> ResponseRecord:
    value = answer.value
    return ResponseRecord(
        turn_id=job.turn.turn_id,
        responder=model,
        prompt_hash=prompt.hash,
        status="ok" if value is not None else "failed",
        text=value.text if value is not None else "",
        passages=job.passage_ids,
        citations=[job.passages[n - 1][0] for n in value.numbers] if value is not None else [],
        ptkb_used=value.ptkb_used if value is not None else [],
        error=answer.error,
        raw=None if value is not None else answer.raw,
        seconds=round(answer.seconds, 3),
        usage=answer.usage,
        cached=answer.cached,
        notes=list(job.notes),
    )


def produce(
    jobs: Sequence[ResponseJob],
    settings: RespondSettings,
    emit: Callable[[ResponseRecord], None],
    *,
    accounting: Accounting,
    refresh: bool = False,
    trace: Path | None = None,
) -> str | None:
    """Ask the model for every job's response, emitting each record as soon as its answer is in."""
    model = settings.responder
    askable = []
    for job in jobs:
        problem = unusable(job)
        if problem is None:
            askable.append(job)
        else:
            warn(f"turn {job.turn.turn_id}: {problem}")
            emit(failed_record(job, model, problem))
    prompts = {job.turn.turn_id: build_prompt(job, settings.max_words) for job in askable}
    by_id = {job.turn.turn_id: job for job in askable}
    asks = [
        Ask(
            key=job.turn.turn_id,
            messages=prompts[job.turn.turn_id].messages,
            parse=partial(parse_answer, job=job, max_words=settings.max_words),
            repair=partial(repair_messages, prompts[job.turn.turn_id]),
            schema=output_schema(),
            schema_name=SCHEMA_NAME,
            grammar=grammar_schema(job, settings.max_words),
        )
        for job in askable
    ]

    def on_answer(ask: Ask[ParsedResponse], answer: Answer[ParsedResponse]) -> None:
        if not answer.ok:
            kept = "; the raw answer is kept in the record" if answer.raw is not None else ""
            warn(f"turn {ask.key} failed: {answer.error}{kept}")
        emit(_record(by_id[ask.key], prompts[ask.key], model, answer))

    if not asks:
        return None
    return ask_all(asks, model=model, settings=settings.llm_settings(), accounting=accounting, on_answer=on_answer,
                   read_cache=not refresh)
