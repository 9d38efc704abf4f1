"""A third-party re-ranker with an option of its own (``favour``), as a package outside apcir would ship it:
its spec names its options model, so ``[rerank] favour = "long"`` and ``apcir rerank --favour long`` reach it
and the reference pages list it, with no edit to apcir; a responder with an option of its own (``passage``:
``[respond] passage = 2``, ``apcir respond --passage 2``) and a nugget matcher with an option of its own
(``min_letters``: ``[evaluation] nugget_min_letters``, ``apcir evaluate-responses --min-letters``), through the
``apcir.responders`` and ``apcir.matchers`` groups (see knob_apcir_plugin-0.1.dist-info/entry_points.txt)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from apcir.evaluation.nuggets.matchers import ThresholdOptions
from apcir.evaluation.nuggets.registry import MatcherSpec
from apcir.options import Options
from apcir.reranking.base import Ranked, RerankStats
from apcir.reranking.registry import RerankerSpec
from apcir.responses.registry import ResponderSpec


class WordCountOptions(Options):
    favour: Literal["short", "long"] = Field("short", description="which passages come first: short or long ones")
    min_words: int = Field(0, ge=0, description="passages with fewer words go below the others")


class WordCount:
    name = "wordcount"
    model = "none"

    def __init__(self, options: WordCountOptions) -> None:
        self.options = options

    def rank(self, candidates, *, progress=True):
        ranked = {}
        stats = RerankStats()
        sign = 1 if self.options.favour == "short" else -1
        for c in candidates:
            words = [len(text.split()) for text in c.texts]
            order = sorted(range(len(c.ids)),
                           key=lambda i: (words[i] < self.options.min_words, sign * words[i], c.ids[i]))
            ranked[c.turn] = Ranked([c.ids[i] for i in order], [float(len(order) - n) for n in range(len(order))])
            stats.pairs_scored += len(order)
        return ranked, stats


def load_reranker(settings):
    return WordCount(settings.own(WordCountOptions))


RERANKER = RerankerSpec("wordcount", "+wordcount", "passages ordered by their length (a plugin with an option)",
                        "pointwise", "none", "knob_apcir_plugin:load_reranker", WordCountOptions)


# ---- a responder (offline) with an option of its own: the passage at rank ``passage`` given, cited ----------
class FirstOptions(Options):
    passage: int = Field(1, ge=1, description="the rank of the passage cited (1: the first)")


def produce_first(jobs, settings, emit, **_):
    from apcir.contract.responses import ResponseRecord

    rank = settings.own(FirstOptions).passage
    for job in jobs:
        pid, text = job.passages[min(rank, len(job.passages)) - 1]
        emit(ResponseRecord(turn_id=job.turn.turn_id, responder="first", prompt_hash="first-v1",
                            text=f"{' '.join(text.split()[:settings.max_words - 1])} [{rank}]", passages=job.passage_ids,
                            citations=[pid]))


RESPONDER = ResponderSpec("first", "the passage at a rank, cited (a plugin with an option)", "first", True,
                          lambda settings: {"code": "first-v1", "passage": settings.own(FirstOptions).passage},
                          produce_first, options=FirstOptions)


# ---- a nugget matcher with an option (offline, so a run's [evaluation] may name it): the share of the nugget's
# letters found in the response, over the words of at least min_letters letters ------------------------------
class LettersOptions(ThresholdOptions):
    min_letters: int = Field(1, ge=1, description="words shorter than this are left out of the nugget and the "
                                                  "response")


def letters(text, min_letters):
    return set("".join(w for w in text.lower().split() if len(w) >= min_letters))


class Letters:
    def __init__(self, options: LettersOptions) -> None:
        self.min_letters = options.min_letters

    def scores(self, pairs):
        out = []
        for nugget, response in pairs:
            wanted = letters(nugget.text, self.min_letters)
            out.append(len(wanted & letters(response, self.min_letters)) / max(len(wanted), 1))
        return out


MATCHER = MatcherSpec("letters", "letter overlap", "share of the nugget's letters in the response (a plugin)", True,
                      0.9, "free", lambda settings: Letters(settings.own(LettersOptions)), in_runs=True,
                      options=LettersOptions)
