"""The LLM responder: one chat request per turn through :mod:`apcir.llm.jobs` (cache, concurrency, retries,
one repair, accounting)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from apcir.console import warn
from apcir.contract.responses import ResponseRecord
from apcir.llm.accounting import Accounting
from apcir.llm.jobs import Answer, Ask, ask_all
from apcir.llm.settings import refuse_unused
from apcir.options import Options
from apcir.responses.job import ResponseJob, askable_jobs
from apcir.responses.pathways import AggregateMethod, aggregate_field
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


class ChatOptions(Options):
    """A model's own ``[respond]`` keys: how the profile is used, and best-of-N sampling."""

    personalisation: Literal["in-context", "none", "cot"] = Field(
        "in-context", description="the use of the profile: in-context, none (withheld: the no-personalisation "
        "baseline) or cot (in context, reasoning over it first in the same request)")
    best_of: int = Field(1, ge=1, le=64, description="N samples per turn (seeded, at temperature "
                                                     "sample_temperature), aggregated as pathways:MODEL aggregates")
    sample_temperature: float = Field(0.7, ge=0, description="best_of > 1: the samples' temperature")
    aggregate: AggregateMethod = aggregate_field()

    @model_validator(mode="after")
    def _one_sample(self) -> ChatOptions:
        if self.best_of == 1:
            refuse_unused(self, {"aggregate", "sample_temperature"}, "with best_of = 1 (one sample, nothing to "
                                                                     "aggregate)")
        return self


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
    model = settings.model_name
    own = settings.own(ChatOptions)
    askable = askable_jobs(jobs, model, emit)
    if own.best_of > 1:
        return _best_of(askable, settings, emit, accounting=accounting, refresh=refresh)
    cot = own.personalisation == "cot"
    prompts = {job.turn.turn_id: build_prompt(job, settings.max_words, own.personalisation) for job in askable}
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
        emit(_record(by_id[ask.key], prompts[ask.key], model, answer, own.personalisation))

    if not asks:
        return None
    return ask_all(asks, model=model, settings=settings.llm_settings(), accounting=accounting, on_answer=on_answer,
                   read_cache=not refresh)


def _best_of(jobs: Sequence[ResponseJob], settings: RespondSettings, emit: Callable[[ResponseRecord], None], *,
             accounting: Accounting, refresh: bool) -> str | None:
    """Best-of-N: ``best_of`` samples per turn (seed i, ``sample_temperature``), then the same aggregation as
    Pathways of Thoughts (the user's aspects, then a mixture or a pick)."""
    from apcir.responses.pathways import Asker, Pathway, answer_each

    own = settings.own(ChatOptions)
    cot = own.personalisation == "cot"
    asker = Asker(settings.model_name, settings.llm_settings(), accounting, refresh)

    def sample(job: ResponseJob, index: int) -> Pathway:
        prompt = build_prompt(job, settings.max_words, own.personalisation)
        answer = asker.ask(job.turn.turn_id, "sample", prompt.messages,
                           partial(parse_answer, job=job, max_words=settings.max_words), output_schema(cot),
                           grammar=grammar_schema(job, settings.max_words, cot),
                           temperature=own.sample_temperature, seed=index)
        named = answer.value.ptkb_used if answer.value is not None and own.personalisation != "none" else []
        return Pathway(index, actions=["sample"], response=answer.value, named=named, usage=answer.usage,
                       seconds=answer.seconds, stopped=None if answer.value is not None else str(answer.error))

    answer_each(jobs, own.best_of, sample, settings, asker, emit)
    return asker.mode


def identity(settings: RespondSettings) -> dict[str, Any]:
    """What is sent (:func:`~apcir.responses.registry.llm_identity`) and how: the profile's use and the samples."""
    from apcir.responses.registry import llm_identity

    own = ("personalisation", "best_of") + (("aggregate", "sample_temperature")
                                            if settings.own(ChatOptions).best_of > 1 else ())
    return llm_identity(settings, *own)
