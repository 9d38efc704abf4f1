"""The LLM reformulator: one chat request per turn (the paper's single call), through :mod:`apcir.llm.jobs`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from pydantic import Field

from apcir.console import warn
from apcir.contract.records import Turn
from apcir.contract.reformulations import ReformulationOutput, ReformulationRecord
from apcir.llm.accounting import Accounting
from apcir.llm.cache import cache_key
from apcir.llm.jobs import Answer, Ask, ask_all
from apcir.llm.settings import public_url
from apcir.llm.tokens import TokenCounter
from apcir.options import Options
from apcir.reformulation.prompt import (
    Prompt,
    PromptOptions,
    build_prompt,
    fit_prompt,
    grammar_schema,
    output_schema,
    parse_answer,
    repair_messages,
)
from apcir.reformulation.settings import ReformulatorOptions

SCHEMA_NAME = "apcir_reformulation"


class ChatOptions(Options):
    """A model's own ``[reformulator]`` keys: the prompt (``[reformulator.prompt]``)."""

    prompt: PromptOptions = Field(default_factory=PromptOptions, description="prompt ablations and history trimming")


def prompt_of(options: ReformulatorOptions) -> PromptOptions:
    return options.own(ChatOptions).prompt


def identity(turns: Sequence[Turn], options: ReformulatorOptions) -> dict[str, Any]:
    """What is actually sent: every turn's rendered messages with the generation parameters, and the schema.

    The hash changes with one word of the prompt, a demonstration, an ablation
    switch, the model or a parameter, so a stage fingerprint built on it redoes
    the reformulation exactly when the requests would differ.
    """
    params = options.params()
    digest = hashlib.sha256()
    for turn in turns:
        digest.update(cache_key(options.method, build_prompt(turn, prompt_of(options)).messages, params).encode())
    schema = json.dumps(output_schema(prompt_of(options).cot, prompt_of(options).track_persona), sort_keys=True)
    return {
        "requests": digest.hexdigest()[:16],
        "schema": hashlib.sha256(schema.encode()).hexdigest()[:16],
        "structured": options.structured,
        "base_url": public_url(options.resolved_base_url()),
        "max_prompt_tokens": options.max_prompt_tokens,
    }


def fitted_prompts(turns: Sequence[Turn], options: ReformulatorOptions) -> tuple[dict[str, Prompt],
                                                                                dict[str, list[str]]]:
    """Every turn's prompt, fitted to ``max_prompt_tokens`` when it is set (counted by the server's tokenizer
    where it has one), and the notes on what was cut, by turn."""
    if options.max_prompt_tokens is None:
        return {t.turn_id: build_prompt(t, prompt_of(options)) for t in turns}, {}
    counter = TokenCounter(options.resolved_base_url())
    prompts: dict[str, Prompt] = {}
    notes: dict[str, list[str]] = {}
    for turn in turns:
        prompt, cut = fit_prompt(turn, prompt_of(options), options.max_prompt_tokens, counter.count)
        prompts[turn.turn_id] = prompt
        if cut:
            notes[turn.turn_id] = [*cut, f"tokens counted by the {counter.source or 'estimate'}"]
    return prompts, notes


def _record(turn: Turn, prompt: Prompt, model: str, answer: Answer[ReformulationOutput],
            notes: list[str] | None = None) -> ReformulationRecord:
    return ReformulationRecord(
        notes=list(notes or []),
        turn_id=turn.turn_id,
        model=model,
        prompt_hash=prompt.hash,
        status="ok" if answer.ok else "failed",
        output=answer.value,
        error=answer.error,
        raw=None if answer.ok else answer.raw,
        seconds=round(answer.seconds, 3),
        usage=answer.usage,
        demonstrations=prompt.demonstrations,
        cached=answer.cached,
    )


def produce(
    turns: Sequence[Turn],
    options: ReformulatorOptions,
    emit: Callable[[ReformulationRecord], None],
    *,
    accounting: Accounting,
    refresh: bool = False,
) -> str | None:
    """Ask the model for every turn, emitting each record as soon as its answer is in."""
    settings = options.llm_settings()
    cot, persona = prompt_of(options).cot, prompt_of(options).track_persona
    prompts, notes = fitted_prompts(turns, options)
    by_id = {t.turn_id: t for t in turns}
    over = [t for t in turns if any(n.startswith("still over") for n in notes.get(t.turn_id, []))]
    for turn in over:
        error = (f"the prompt is over max_prompt_tokens ({options.max_prompt_tokens}) even after every cut: "
                 f"{'; '.join(notes[turn.turn_id])}; raise max_prompt_tokens (and the server's context)")
        warn(f"turn {turn.turn_id} failed: {error}; not sent")
        emit(_record(turn, prompts[turn.turn_id], options.method, Answer(turn.turn_id, None, error=error),
                     notes[turn.turn_id]))
    turns = [t for t in turns if t not in over]
    asks = [
        Ask(
            key=turn.turn_id,
            messages=prompts[turn.turn_id].messages,
            parse=partial(parse_answer, turn=turn, cot=cot, persona=persona),
            repair=partial(_repair, prompts[turn.turn_id], cot, persona),
            schema=output_schema(cot, persona),
            schema_name=SCHEMA_NAME,
            grammar=grammar_schema(cot, turn, persona),
        )
        for turn in turns
    ]

    def on_answer(ask: Ask[ReformulationOutput], answer: Answer[ReformulationOutput]) -> None:
        if not answer.ok:
            kept = "; the raw answer is kept in the record" if answer.raw is not None else ""
            warn(f"turn {ask.key} failed: {answer.error}{kept}")
        emit(_record(by_id[ask.key], prompts[ask.key], options.method, answer, notes.get(ask.key, [])))

    return ask_all(asks, model=options.method, settings=settings, accounting=accounting, on_answer=on_answer,
                   read_cache=not refresh)


def _repair(prompt: Prompt, cot: bool, persona: bool, raw: str, problem: str) -> list[dict[str, str]]:
    return repair_messages(prompt, raw, problem, cot, persona)


def shaping(options: ReformulatorOptions) -> dict[str, Any]:
    """What shapes every record a model writes: the prompt, the request's parameters, the server."""
    from apcir.llm.settings import public_url

    return {"prompt": prompt_of(options).snapshot(), "params": options.params(),
            "structured": options.structured, "base_url": public_url(options.resolved_base_url()),
            "max_prompt_tokens": options.max_prompt_tokens}
