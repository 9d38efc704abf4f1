"""The signals the ``learned`` matcher combines, per (nugget, response) pair, all of them computed by apcir.

Words are the lexical matcher's content words (lower-cased, Porter-stemmed, stop words out). IDF is
``log((N + 1) / (df + 1))`` over the bundled ``ikat23-provenance`` collection (894 ClueWeb22 passages): a fixed
corpus, so a pair's signals never depend on which other runs or turns are scored beside it.

==================  =====================================================================================
``overlap``         the share of the nugget's content words in the response (the ``lexical`` matcher)
``idf_overlap``     the same, each word weighted by its IDF
``matched``         log(1 + the number of the nugget's content words in the response)
``missing``         log(1 + the number of them not in the response)
``idf_missing``     the IDF mass of the missing words (a rare word missing weighs more than a common one)
``idf_missing_max`` the IDF of the rarest missing word (0 when none is missing)
``numbers_missing`` how many of the nugget's numbers the response does not contain
``idf_matched``     the IDF mass of the matched words
``cosine``          the best cosine between the nugget and a sentence of the response (the ``embedding``
                    matcher's score, with its encoder)
==================  =====================================================================================

Measured on the iKAT 2024 human study (docs/guide/responses.md): the nugget's length and grade, the response's
length and a SPLADE score added nothing out-of-fold, so they are not among the signals.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from apcir.evaluation.nuggets.matchers import EmbeddingMatcher, Pair, content_words

FEATURES = ("overlap", "idf_overlap", "matched", "missing", "idf_missing", "idf_missing_max", "numbers_missing",
            "idf_matched", "cosine")
IDF_CORPUS = "ikat23-provenance"
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")


@lru_cache(maxsize=1)
def _document_frequencies() -> tuple[int, dict[str, int]]:
    from apcir import datasets

    counts: Counter[str] = Counter()
    total = 0
    for passage in datasets.iter_collection(datasets.collection_path(IDF_CORPUS)):
        counts.update(content_words(passage.contents))
        total += 1
    return total, dict(counts)


def idf(word: str) -> float:
    """IDF of a content word over the bundled collection (module doc)."""
    total, counts = _document_frequencies()
    return math.log((total + 1) / (counts.get(word, 0) + 1))


def lexical_features(nugget: str, response: str, response_words: set[str] | None = None) -> list[float]:
    """Every signal but ``cosine``, in :data:`FEATURES` order. The IDF sums are exactly rounded (``math.fsum``) over
    the words in sorted order: a set's order follows the process's string hash seed, and a plain float sum in that
    order differed in its last digits from one process to the next."""
    words = sorted(content_words(nugget))
    present = content_words(response) if response_words is None else response_words
    hit, miss = [w for w in words if w in present], [w for w in words if w not in present]
    weight = {w: idf(w) for w in words}
    total = math.fsum(weight.values())
    numbers = set(_NUMBER.findall(nugget))
    return [len(hit) / len(words) if words else 0.0,
            math.fsum(weight[w] for w in hit) / total if total > 0 else 0.0,
            math.log1p(len(hit)), math.log1p(len(miss)),
            math.fsum(weight[w] for w in miss), max((weight[w] for w in miss), default=0.0),
            float(len(numbers - set(_NUMBER.findall(response)))),
            math.fsum(weight[w] for w in hit)]


def pair_features(pairs: Sequence[Pair], encoder: str = "minilm") -> np.ndarray:
    """A (pairs x :data:`FEATURES`) matrix; ``encoder`` is the ``cosine`` signal's bi-encoder."""
    if not pairs:
        return np.zeros((0, len(FEATURES)))
    cache: dict[str, set[str]] = {}
    rows = []
    for nugget, response in pairs:
        if response not in cache:
            cache[response] = content_words(response)
        rows.append(lexical_features(nugget.text, response, cache[response]))
    cosine = EmbeddingMatcher(encoder).scores(pairs)
    return np.column_stack([np.array(rows, dtype=np.float64), np.array(cosine, dtype=np.float64)])
