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
from apcir.responses.job import ResponseJob, askable_jobs
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


def _record(job: ResponseJob, prompt: ResponsePrompt, model: str, answer: Answer[ParsedResponse],
            personalisation: str = "in-context") -> ResponseRecord:
    value = answer.value
    return ResponseRecord(
        turn_id=job.turn.turn_id,
        responder=model,
        prompt_hash=prompt.hash,
        status="ok" if value is not None else "failed",
        text=value.text if value is not None else "",
        passages=job.passage_ids,
        citations=[job.passages[n - 1][0] for n in value.numbers] if value is not None else [],
        ptkb_used=value.ptkb_used if value is not None and personalisation != "none" else [],
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
    askable = askable_jobs(jobs, model, emit)
    if settings.best_of > 1:
        return _best_of(askable, settings, emit, accounting=accounting, refresh=refresh)
    cot = settings.personalisation == "cot"
    prompts = {job.turn.turn_id: build_prompt(job, settings.max_words, settings.personalisation) for job in askable}
    by_id = {job.turn.turn_id: job for job in askable}
    asks = [
        Ask(
            key=job.turn.turn_id,
            messages=prompts[job.turn.turn_id].messages,
            parse=partial(parse_answer, job=job, max_words=settings.max_words),
            repair=partial(repair_messages, prompts[job.turn.turn_id]),
            schema=output_schema(cot),
            schema_name=SCHEMA_NAME,
            grammar=grammar_schema(job, settings.max_words, cot),
        )
        for job in askable
    ]

    def on_answer(ask: Ask[ParsedResponse], answer: Answer[ParsedResponse]) -> None:
        if not answer.ok:
            kept = "; the raw answer is kept in the record" if answer.raw is not None else ""
            warn(f"turn {ask.key} failed: {answer.error}{kept}")
        emit(_record(by_id[ask.key], prompts[ask.key], model, answer, settings.personalisation))

    if not asks:
        return None
    return ask_all(asks, model=model, settings=settings.llm_settings(), accounting=accounting, on_answer=on_answer,
                   read_cache=not refresh)


def _best_of(jobs: Sequence[ResponseJob], settings: RespondSettings, emit: Callable[[ResponseRecord], None], *,
             accounting: Accounting, refresh: bool) -> str | None:
    """Best-of-N: ``best_of`` samples per turn (seed i, ``sample_temperature``), then the same aggregation as
    Pathways of Thoughts (the user's aspects, then a mixture or a pick)."""
    from concurrent.futures import ThreadPoolExecutor

    from apcir.responses.pathways import Asker, Pathway, aggregate, finished_record

    cot = settings.personalisation == "cot"
    asker = Asker(settings.responder, settings.llm_settings(), accounting, refresh)

    def sample(job: ResponseJob, index: int) -> Pathway:
        prompt = build_prompt(job, settings.max_words, settings.personalisation)
        answer = asker.ask(job.turn.turn_id, "sample", prompt.messages,
                           partial(parse_answer, job=job, max_words=settings.max_words), output_schema(cot),
                           grammar=grammar_schema(job, settings.max_words, cot),
                           temperature=settings.sample_temperature, seed=index)
        named = answer.value.ptkb_used if answer.value is not None and settings.personalisation != "none" else []
        return Pathway(index, actions=["sample"], response=answer.value, named=named, usage=answer.usage,
                       seconds=answer.seconds, stopped=None if answer.value is not None else str(answer.error))

    with ThreadPoolExecutor(max_workers=settings.llm_settings().effective_concurrency()) as pool:
        futures = {job.turn.turn_id: [pool.submit(sample, job, i) for i in range(settings.best_of)] for job in jobs}
        for job in jobs:
            samples = [f.result() for f in futures[job.turn.turn_id]]
            final = aggregate(job, samples, settings, asker)
            if final.response is None:
                warn(f"turn {job.turn.turn_id} failed: {final.error}")
            emit(finished_record(job, settings, samples, final))
    return asker.mode
