"""The Pathways of Thoughts responder (``pathways:MODEL``): several reasoning pathways per turn, then one answer.

Per turn (PoT, ``../shared/papers/pathways-of-thoughts.txt``; the prompts are in
:mod:`apcir.responses.pathway_prompts`):

1. **Pathways.** ``pathways`` (N) of them, each at most ``max_actions`` (T) steps. At each step the model
   chooses an action among the allowed ones (:func:`~apcir.responses.pathway_prompts.allowed_actions`: plan
   first, revise only after an answer, only answer/revise/finalize at the last step), then performs it; both
   go into the pathway's state. A choice with a single option (the first step's plan) is not asked. The
   allowed actions are the choice's schema (a grammar on llama.cpp) and are checked; a choice outside them
   gets one repair request, then the pathway stops and is counted, as does a step whose result stays
   unusable. Finalize ends the pathway; its answer is the pathway's response; a pathway that reaches T
   without finalizing uses its last answer or revision; one with neither gives no response (counted).
2. **Diversity** (``diversify``): ``plan-temperature`` samples the plan at ``plan_temperature`` (0.9) and
   every other step at 0.1; ``profile-subsets`` gives each pathway a random subset of ``subset_ratio`` of
   the profile statements (seeded by turn and pathway). Every pathway request carries the pathway's index as
   its ``seed`` (and in its cache key), so pathways at the same temperature stay distinct and reproducible.
3. **Aggregation** (``aggregate``): one request lists the aspects important to this user (from the profile);
   then ``mixture`` merges the pathways' responses in one request (checked like the llm responder's answer)
   or ``best`` picks one. One response needs no aggregation. The record's ``ptkb_used`` are the statements
   the contributing pathways' personalize steps named.

Cost, the Framework of Thoughts way: pathways of all turns run concurrently in a pool of the client's
concurrency, each step waiting only for the step before it in its pathway; every request is cached (a
re-run sends none; N from 2 to 3 sends only the third pathway's requests and the new aggregation; a smaller
T reuses every step it keeps). A step whose answer stayed unusable after its repair is remembered beside the
cache (``pot-failures/``) and replayed, so a re-run sends no request for it either (``--refresh`` asks
again); a request that failed (a timeout, a refused connection) is asked again. Usage is accounted per turn and per action kind. The trace,
``<responses stem>.pathways.jsonl``, has one line per turn and pathway (``turn_id``, ``pathway``,
``actions``, ``finalized``, ``response``, ``stopped``) and one per turn (``turn_id``, ``aspects``, ``method``,
``usage`` per action kind).
"""

from __future__ import annotations

import json
import math
import random
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from apcir.console import warn
from apcir.contract.reformulations import Usage
from apcir.contract.responses import ResponseRecord
from apcir.io import read_json, write_json
from apcir.llm.accounting import Accounting
from apcir.llm.cache import cache_key
from apcir.llm.jobs import Answer, Ask, ask_all
from apcir.llm.settings import LLMSettings
from apcir.options import Options
from apcir.responses import pathway_prompts as pp
from apcir.responses.job import ResponseJob, askable_jobs, failed_record
from apcir.responses.prompt import ParsedResponse, grammar_schema, parse_answer
from apcir.responses.settings import RespondSettings

STEP_TEMPERATURE = 0.1
AggregateMethod = Literal["mixture", "best"]


def aggregate_field() -> Any:
    """``aggregate``, a key of ``pathways:MODEL`` and of a model's best-of-N samples."""
    return Field("mixture", description="merge the pathways' (or samples') responses in one request, or pick one")


class PathwaysOptions(Options):
    """``pathways:MODEL``'s own ``[respond]`` keys."""

    pathways: int = Field(4, ge=1, le=64, description="N, the reasoning pathways per turn")
    max_actions: int = Field(8, ge=1, le=32, description="T, the most steps of a pathway")
    diversify: Literal["plan-temperature", "profile-subsets"] = Field(
        "plan-temperature", description="plan sampled at plan_temperature (other steps at 0.1), or each pathway "
        "given a random subset of subset_ratio of the profile")
    aggregate: AggregateMethod = aggregate_field()
    plan_temperature: float = Field(0.9, ge=0, description="the plan's sampling temperature")
    subset_ratio: float = Field(0.5, gt=0, le=1, description="share of the profile a pathway sees with diversify = "
                                                             "profile-subsets")


def trace_path(out: Path) -> Path:
    """``responses.jsonl`` -> ``responses.pathways.jsonl``."""
    return out.with_name(f"{out.stem}.pathways.jsonl")


@dataclass
class Pathway:
    index: int
    actions: list[str] = field(default_factory=list)
    finalized: bool = False
    response: ParsedResponse | None = None
    named: list[str] = field(default_factory=list)
    """Statement ids its personalize steps named."""
    stopped: str | None = None
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0


class Asker:
    """One question at a time through :func:`ask_all` (cache, retries, one repair), with per-request temperature
    and seed, the structured-output mode found once, and usage per action kind. Thread-safe."""

    def __init__(self, model: str, settings: LLMSettings, accounting: Accounting, refresh: bool) -> None:
        self.model, self.settings, self.accounting, self.refresh = model, settings, accounting, refresh
        self.lock = threading.Lock()
        self.mode: str | None = None
        self.by_kind: dict[str, dict[str, float]] = {}
        self.by_turn: dict[str, dict[str, dict[str, float]]] = {}

    def _failure_file(self, messages: list[dict[str, str]], settings: LLMSettings) -> Path | None:
        cache = settings.cache()
        if cache is None:
            return None
        key = cache_key(self.model, messages, settings.params())
        return cache.directory / "pot-failures" / key[:2] / f"{key}.json"

    def ask(self, turn: str, kind: str, messages: list[dict[str, str]], parse: Callable[[str], Any],
            schema: dict[str, Any], *, grammar: dict[str, Any] | None = None, temperature: float | None = None,
            seed: int | None = None) -> Answer[Any]:
        update: dict[str, Any] = {"concurrency": 1, "seed": seed}
        if temperature is not None:
            update["temperature"] = temperature
        if self.mode is not None:
            update["structured"] = self.mode
        settings = self.settings.model_copy(update=update)
        box: list[Answer[Any]] = []

        def repair(raw: str, problem: str) -> list[dict[str, str]]:
            return [*messages, {"role": "assistant", "content": raw},
                    {"role": "user", "content": f"Your answer could not be used: {problem}. Reply again with only "
                                                "the JSON asked for."}]

        ask = Ask(key=kind, messages=messages, parse=parse, repair=repair, schema=schema,
                  schema_name=f"apcir_pot_{kind}", grammar=grammar)
        failure = self._failure_file(messages, settings)
        if failure is not None and failure.exists() and not self.refresh:
            known = read_json(failure, "failed answer")
            return Answer(kind, None, raw=known.get("raw"), error=known.get("error"), cached=True)
        mode = ask_all([ask], model=self.model, settings=settings, accounting=self.accounting,
                       on_answer=lambda _, answer: box.append(answer), read_cache=not self.refresh)
        answer = box[0]
        if answer.value is None and answer.raw is not None and failure is not None:
            # an unusable answer (not a failed request) is a step's result too: a re-run replays it, sends nothing
            write_json(failure, {"error": answer.error, "raw": answer.raw})
        with self.lock:
            if mode is not None and self.mode is None:
                self.mode = mode
            for table in (self.by_kind.setdefault(kind, {}), self.by_turn.setdefault(turn, {}).setdefault(kind, {})):
                table["requests"] = table.get("requests", 0) + answer.usage.requests
                table["input_tokens"] = table.get("input_tokens", 0) + answer.usage.input_tokens
                table["output_tokens"] = table.get("output_tokens", 0) + answer.usage.output_tokens
                table["seconds"] = round(table.get("seconds", 0.0) + answer.seconds, 3)
        return answer


def profile_for(job: ResponseJob, index: int, settings: RespondSettings) -> list[tuple[str, str]]:
    """The statements pathway ``index`` sees: all, or (``profile-subsets``) a seeded subset in ranking order."""
    own = settings.own(PathwaysOptions)
    if own.diversify != "profile-subsets" or not job.statements:
        return list(job.statements)
    size = max(1, math.ceil(own.subset_ratio * len(job.statements)))
    chosen = set(random.Random(f"{job.turn.turn_id}/{index}").sample(range(len(job.statements)), size))
    return [s for i, s in enumerate(job.statements) if i in chosen]


def run_pathway(job: ResponseJob, index: int, *, settings: RespondSettings, asker: Asker) -> Pathway:
    """One pathway of one turn (see the module doc)."""
    pathway = Pathway(index)
    own = settings.own(PathwaysOptions)
    turn = job.turn.turn_id
    state = pp.initial_messages(job, profile_for(job, index, settings), settings.max_words)
    answered: ParsedResponse | None = None

    def temperature(action: str) -> float:
        return own.plan_temperature if action == "plan" and own.diversify == "plan-temperature" \
            else STEP_TEMPERATURE

    def spend(answer: Answer[Any]) -> None:
        usage = answer.usage
        pathway.usage = Usage(requests=pathway.usage.requests + usage.requests,
                              input_tokens=pathway.usage.input_tokens + usage.input_tokens,
                              output_tokens=pathway.usage.output_tokens + usage.output_tokens)
        pathway.seconds += answer.seconds

    for step in range(own.max_actions):
        allowed = pp.allowed_actions(step, own.max_actions, answered is not None)
        if len(allowed) == 1:
            action = allowed[0]
        else:
            asking = [*state, pp.choose_message(allowed)]
            choice = asker.ask(turn, "choose", asking, partial(pp.parse_choice, allowed=allowed),
                               pp.choose_schema(allowed), temperature=STEP_TEMPERATURE, seed=index)
            spend(choice)
            if choice.value is None:
                pathway.stopped = f"step {step + 1}: no allowed action chosen ({choice.error})"
                break
            action = choice.value
            state = [*asking, {"role": "assistant", "content": json.dumps({"action": action})}]
        performing = [*state, pp.perform_message(action)]
        grammar = grammar_schema(job, settings.max_words) if action in pp.ANSWERING else None
        result = asker.ask(turn, action, performing,
                           partial(pp.parse_step, action=action, job=job, max_words=settings.max_words),
                           pp.perform_schema(action, job), grammar=grammar, temperature=temperature(action),
                           seed=index)
        spend(result)
        if result.value is None:
            pathway.stopped = f"step {step + 1} ({action}): {result.error}"
            break
        pathway.actions.append(action)
        state = [*performing, {"role": "assistant", "content": result.raw or ""}]
        if result.value.answer is not None:
            answered = result.value.answer
        if action == "personalize":
            pathway.named += [s for s in result.value.statements if s not in pathway.named]
        if action == "finalize":
            pathway.finalized = True
            break
    pathway.response = answered
    if answered is None and pathway.stopped is None:
        pathway.stopped = f"no answer in {own.max_actions} steps"
    return pathway


@dataclass
class Aggregate:
    response: ParsedResponse | None
    statements: list[str]
    aspects: list[str]
    method: str
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0


def aggregate(job: ResponseJob, pathways: Sequence[Pathway], settings: RespondSettings, asker: Asker) -> Aggregate:
    """The turn's answer from its pathways' responses (see the module doc); ``aggregate`` is a key of the chosen
    responder's own (``pathways:MODEL``'s, or a model's best-of-N)."""
    method: str = settings.options.aggregate
    turn = job.turn.turn_id
    done = [p for p in pathways if p.response is not None]
    if not done:
        reasons = "; ".join(f"pathway {p.index}: {p.stopped}" for p in pathways)
        return Aggregate(None, [], [], method, f"no pathway gave an answer ({reasons})")
    spent: list[Answer[Any]] = []
    if len(done) == 1:
        only = done[0]
        assert only.response is not None
        return Aggregate(only.response, only.named, [], "single")
    found = asker.ask(turn, "aspects", pp.aspects_messages(job), pp.parse_aspects, pp.ASPECTS_SCHEMA)
    spent.append(found)
    aspects = found.value or []
    responses = [p.response.text for p in done if p.response is not None]
    if method == "mixture":
        merged = asker.ask(turn, "mixture", pp.mixture_messages(job, responses, aspects, settings.max_words),
                           partial(parse_answer, job=job, max_words=settings.max_words),
                           pp.output_schema(), grammar=grammar_schema(job, settings.max_words))
        spent.append(merged)
        named = list(dict.fromkeys(s for p in done for s in p.named))
        result = Aggregate(merged.value, named, aspects, "mixture",
                           None if merged.value is not None else f"the mixture request failed: {merged.error}")
    else:
        picked = asker.ask(turn, "best", pp.best_messages(job, responses, aspects),
                           partial(pp.parse_best, count=len(responses)), pp.best_schema(len(responses)))
        spent.append(picked)
        chosen = done[picked.value - 1] if picked.value is not None else None
        result = Aggregate(chosen.response if chosen else None, chosen.named if chosen else [], aspects, "best",
                           None if chosen else f"the best-of request failed: {picked.error}")
    result.usage = Usage(requests=sum(a.usage.requests for a in spent),
                         input_tokens=sum(a.usage.input_tokens for a in spent),
                         output_tokens=sum(a.usage.output_tokens for a in spent))
    result.seconds = sum(a.seconds for a in spent)
    return result


def finished_record(job: ResponseJob, settings: RespondSettings, pathways: Sequence[Pathway],
                    final: Aggregate) -> ResponseRecord:
    """The turn's record from its pathways (or samples) and their aggregate; failed when there is no answer."""
    usage = Usage(requests=final.usage.requests + sum(p.usage.requests for p in pathways),
                  input_tokens=final.usage.input_tokens + sum(p.usage.input_tokens for p in pathways),
                  output_tokens=final.usage.output_tokens + sum(p.usage.output_tokens for p in pathways))
    seconds = round(final.seconds + sum(p.seconds for p in pathways), 3)
    without = sum(1 for p in pathways if p.response is None)
    what = "sample" if pathways and pathways[0].actions == ["sample"] else "pathway"
    notes = [f"{without} of {len(pathways)} {what}(s) gave no answer"] if without else []
    if final.response is None:
        record = failed_record(job, settings.responder, str(final.error))
        return record.model_copy(update={"usage": usage, "seconds": seconds, "notes": [*record.notes, *notes]})
    response = final.response
    return ResponseRecord(turn_id=job.turn.turn_id, responder=settings.responder, status="ok", text=response.text,
                          passages=job.passage_ids, citations=[job.passages[n - 1][0] for n in response.numbers],
                          ptkb_used=final.statements, usage=usage, seconds=seconds, notes=[*job.notes, *notes])


def answer_each(jobs: Sequence[ResponseJob], count: int, unit: Callable[[ResponseJob, int], Pathway],
                settings: RespondSettings, asker: Asker, emit: Callable[[ResponseRecord], None], *,
                done_with: Callable[[ResponseJob, list[Pathway], Aggregate], None] | None = None) -> None:
    """Run ``count`` units of every job (its pathways, or a model's best-of-N samples: ``unit(job, index)``) in a pool
    of the client's concurrency; as soon as a job's are all in, aggregate them in index order (:func:`aggregate`),
    say a failure, hand them to ``done_with`` (the trace) and emit the turn's record."""
    by_id = {job.turn.turn_id: job for job in jobs}
    done: dict[str, list[Pathway]] = {turn: [] for turn in by_id}
    with ThreadPoolExecutor(max_workers=settings.llm_settings().effective_concurrency()) as pool:
        owner = {pool.submit(unit, job, i): job.turn.turn_id for job in jobs for i in range(count)}
        for future in as_completed(owner):
            turn = owner[future]
            done[turn].append(future.result())
            if len(done[turn]) < count:
                continue
            job, units = by_id[turn], sorted(done[turn], key=lambda unit: unit.index)
            final = aggregate(job, units, settings, asker)
            if final.response is None:
                warn(f"turn {turn} failed: {final.error}")
            if done_with is not None:
                done_with(job, units, final)
            emit(finished_record(job, settings, units, final))


def _trace_lines(job: ResponseJob, pathways: Sequence[Pathway], final: Aggregate,
                 usage: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = [
        {"turn_id": job.turn.turn_id, "pathway": p.index, "actions": p.actions, "finalized": p.finalized,
         "response": p.response.text if p.response is not None else None, "stopped": p.stopped}
        for p in sorted(pathways, key=lambda p: p.index)]
    lines.append({"turn_id": job.turn.turn_id, "aspects": final.aspects, "method": final.method, "usage": usage})
    return lines


def produce(
    jobs: Sequence[ResponseJob],
    settings: RespondSettings,
    emit: Callable[[ResponseRecord], None],
    *,
    accounting: Accounting,
    refresh: bool = False,
    trace: Path | None = None,
) -> str | None:
    """Answer every job by Pathways of Thoughts, emitting each turn's record (and trace lines) when it is done."""
    own = settings.own(PathwaysOptions)
    asker = Asker(settings.model_name, settings.llm_settings(), accounting, refresh)
    askable = askable_jobs(jobs, settings.responder, emit)
    if not askable:
        return None
    handle = trace.open("a", encoding="utf-8") if trace is not None else None

    def traced(job: ResponseJob, pathways: list[Pathway], final: Aggregate) -> None:
        if handle is not None:
            for line in _trace_lines(job, pathways, final, asker.by_turn.get(job.turn.turn_id, {})):
                handle.write(json.dumps(line, ensure_ascii=False) + "\n")
            handle.flush()

    try:
        answer_each(askable, own.pathways, partial(run_pathway, settings=settings, asker=asker), settings, asker,
                    emit, done_with=traced)
    finally:
        if handle is not None:
            handle.close()
    return asker.mode


def identity(settings: RespondSettings) -> dict[str, Any]:
    """What identifies the records: the prompt code, the model, the generation and pathway settings."""
    from apcir.responses.registry import llm_identity

    # the profile in context, one run of pathways: as the identity said when these were shared keys
    return {**llm_identity(settings), "personalisation": "in-context", "best_of": 1, "code": _code(),
            **settings.own(PathwaysOptions).model_dump()}


def _code() -> str:
    from apcir.responses.registry import code_digest

    return code_digest("pathways.py", "pathway_prompts.py", "prompt.py", "job.py", "text.py")
