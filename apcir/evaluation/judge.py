"""The LLM judge of responses, rubric style (as LaMP-QA does), in one request per turn.

The judge is given the user's question (the annotators' resolved utterance),
the profile statements the annotators marked relevant, the canonical response
and the system's response (citations removed). In one JSON answer it lists the
aspects a good answer covers (2 to 6, derived from the canonical response and
the relevant statements) and scores the response on each: 0 missing or wrong,
1 partly, 2 fully. The turn's score is the mean aspect score divided by 2 (0 to
1). The request goes through :func:`apcir.llm.jobs.ask_all` (cache,
concurrency, retries, accounting); an answer that is not that JSON gets one
repair request, and if that fails too the turn is *unjudged*: counted and
listed, never scored 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from pydantic import BaseModel

from apcir.contract.records import Turn
from apcir.contract.responses import ResponseRecord, strip_citations
from apcir.llm.accounting import Accounting
from apcir.llm.answers import InvalidAnswer, extract_json
from apcir.llm.jobs import Answer, Ask, ask_all
from apcir.llm.settings import LLMSettings

SCHEMA_NAME = "apcir_judgement"
MAX_ASPECTS = 10

SYSTEM = (
    "You grade the answer a conversational assistant gave a user, against a reference answer written by an expert. "
    "Work in two steps, in one reply.\n"
    "1. List the key aspects a good answer to this user's question covers: 2 to 6 short aspects, each a piece of "
    "information or a personal constraint, taken from the reference answer and from the user's relevant profile "
    "statements.\n"
    "2. Score how well the assistant's answer covers each aspect: 2 = fully and correctly, 1 = partly or vaguely, "
    "0 = missing or wrong.\n"
    "Judge content only, not style or length.\n"
    'Reply with a JSON object only: {"aspects": [{"aspect": "<short aspect>", "score": <0, 1 or 2>}, ...]}'
)


class Judgement(BaseModel):
    aspects: list[tuple[str, int]]

    @property
    def score(self) -> float:
        """The normalised mean aspect score, 0 to 1."""
        return sum(s for _, s in self.aspects) / (2 * len(self.aspects))


def messages(turn: Turn, response: ResponseRecord) -> list[dict[str, str]]:
    question = turn.manual_rewrite.strip() or turn.utterance
    statements = [turn.ptkb[s] for s in turn.ptkb_provenance if s in turn.ptkb]
    user = "\n".join([
        f"User's question: {question}",
        "Relevant profile statements of the user: " + ("; ".join(statements) if statements else "(none)"),
        "",
        f"Reference answer: {turn.response.strip()}",
        "",
        f"Assistant's answer: {strip_citations(response.text)}",
    ])
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


GIVEN_SYSTEM = (
    "You grade the answer an assistant gave a user against the aspects this user expects an answer to address. "
    "Score each aspect, in the order given: 2 = fully addressed, 1 = partly or vaguely, 0 = not addressed or "
    "wrong. Judge content only, not style or length.\n"
    'Reply with a JSON object only: {"scores": [<one score, 0, 1 or 2, per aspect, in order>]}'
)


def given_messages(turn: Turn, response: ResponseRecord, aspects: Sequence[str]) -> list[dict[str, str]]:
    """The judge's request when the dataset gives the aspects (LaMP-QA): score each one 0-2."""
    listed = "\n".join(f"{i}. {a}" for i, a in enumerate(aspects, start=1))
    user = f"User's question: {turn.utterance}\n\nAspects:\n{listed}\n\nAssistant's answer: {strip_citations(response.text)}"
    return [{"role": "system", "content": GIVEN_SYSTEM}, {"role": "user", "content": user}]


def given_schema(count: int) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "required": ["scores"],
            "properties": {"scores": {"type": "array", "minItems": count, "maxItems": count,
                                      "items": {"type": "integer", "enum": [0, 1, 2]}}}}


def parse_given(raw: str, aspects: Sequence[str]) -> Judgement:
    """Scores of the given aspects, one each, in order; raises :class:`InvalidAnswer` otherwise."""
    data = extract_json(raw)
    scores = data.get("scores") if isinstance(data, dict) else None
    if not isinstance(scores, list) or len(scores) != len(aspects):
        raise InvalidAnswer(f'expected {{"scores": [...]}} with {len(aspects)} scores, one per aspect')
    if not all(isinstance(x, int) and not isinstance(x, bool) and x in (0, 1, 2) for x in scores):
        raise InvalidAnswer(f"every score is 0, 1 or 2; got {scores}")
    return Judgement(aspects=[(a, int(x)) for a, x in zip(aspects, scores)])


def output_schema() -> dict[str, Any]:
    aspect = {"type": "object", "properties": {"aspect": {"type": "string"}, "score": {"type": "integer",
                                                                                      "enum": [0, 1, 2]}},
              "required": ["aspect", "score"], "additionalProperties": False}
    return {"type": "object", "properties": {"aspects": {"type": "array", "items": aspect}},
            "required": ["aspects"], "additionalProperties": False}


def grammar_schema() -> dict[str, Any]:
    """:func:`output_schema` with what constrained decoding (llama.cpp) can enforce beyond strict mode: 2 to 6
    aspects of at most 12 words each, so that a small model cannot ramble past ``max_tokens``."""
    schema = output_schema()
    word = '[^"\\\\\\n\\r\\t ]+'
    item = schema["properties"]["aspects"]["items"]
    item["properties"]["aspect"] = {"type": "string", "pattern": f"^({word} ){{0,11}}{word}$"}
    schema["properties"]["aspects"].update(minItems=2, maxItems=6)
    return schema


def parse_judgement(raw: str) -> Judgement:
    """The aspects and scores of an answer; raises :class:`InvalidAnswer` saying what is wrong."""
    data = extract_json(raw)
    if not isinstance(data, dict) or not isinstance(data.get("aspects"), list):
        raise InvalidAnswer('expected a JSON object {"aspects": [{"aspect": ..., "score": 0|1|2}, ...]}')
    items = data["aspects"]
    if not 1 <= len(items) <= MAX_ASPECTS:
        raise InvalidAnswer(f"expected 1 to {MAX_ASPECTS} aspects, found {len(items)}")
    aspects = []
    for n, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            raise InvalidAnswer(f"aspect #{n} is not an object")
        name, score = item.get("aspect"), item.get("score")
        if not isinstance(name, str) or not name.strip():
            raise InvalidAnswer(f"aspect #{n} has no text")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or score not in (0, 1, 2):
            raise InvalidAnswer(f"aspect #{n} has score {score!r}; a score is 0, 1 or 2")
        aspects.append((name.strip(), int(score)))
    return Judgement(aspects=aspects)


def _repair(first: list[dict[str, str]], raw: str, problem: str) -> list[dict[str, str]]:
    return [*first, {"role": "assistant", "content": raw},
            {"role": "user", "content": f"Your answer could not be used: {problem}. Reply again with only the JSON "
                                        'object {"aspects": [{"aspect": ..., "score": 0, 1 or 2}, ...]}.'}]


@dataclass
class JudgeRun:
    model: str
    judgements: dict[str, Judgement]
    unjudged: dict[str, str]
    """Turn -> why it could not be judged (the raw answer is in the error)."""
    accounting: Accounting


def judge_all(pairs: Sequence[tuple[Turn, ResponseRecord]], model: str, settings: LLMSettings,
              aspects: Mapping[str, Sequence[str]] | None = None) -> JudgeRun:
    """Judge every (turn, response) pair, one request each (cached). A turn with ``aspects`` given (LaMP-QA's
    rubric) is scored on those, 0-2 each, normalised by 2 and averaged (LaMP-QA section 3.2)."""
    accounting = Accounting(settings.price_table())
    result = JudgeRun(model, {}, {}, accounting)
    asks = []
    for turn, response in pairs:
        given = (aspects or {}).get(turn.turn_id)
        if given:
            first = given_messages(turn, response, given)
            asks.append(Ask(key=turn.turn_id, messages=first, parse=partial(parse_given, aspects=list(given)),
                            repair=partial(_repair, first), schema=given_schema(len(given)),
                            schema_name="apcir_judgement_given"))
            continue
        first = messages(turn, response)
        asks.append(Ask(key=turn.turn_id, messages=first, parse=parse_judgement, repair=partial(_repair, first),
                        schema=output_schema(), schema_name=SCHEMA_NAME, grammar=grammar_schema()))

    def on_answer(ask: Ask[Judgement], answer: Answer[Judgement]) -> None:
        if answer.value is not None:
            result.judgements[ask.key] = answer.value
        else:
            raw = f"; raw answer: {answer.raw[:200]!r}" if answer.raw else ""
            result.unjudged[ask.key] = f"{answer.error}{raw}"

    if asks:
        ask_all(asks, model=model, settings=settings, accounting=accounting, on_answer=on_answer)
    return result
