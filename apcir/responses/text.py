"""Text helpers of the response stage: the word budget, sentences, citation markers, terms.

Words are counted as the organisers' 2025 validator counts them
(``validate_trec_ikat25.py``, ``compute_response_length``): the text is
NFKC-normalised and split on whitespace, so an inline citation ``[1]`` standing
alone counts as a word. Its built-in fixer deletes whole responses from an entry
whose responses total more than 250 such words, so every response apcir writes
is cut to its budget by :func:`cut_to_words` first.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter

from apcir.contract.responses import CITATION
from apcir.reformulation.offline import stem

_SENTENCE_END = re.compile(r"[.!?]+[\"'”’)\]]*$")
_SPLIT = re.compile(r"(?<=[.!?])[\"'”’)]*\s+(?=[\"'“‘(\[]?[A-Z0-9])|\n+")
_MARKER_WORD = re.compile(r"^(?:\[\d+(?:,\d+)*\])+[.,;:!?]*$")


def count_words(text: str) -> int:
    """Whitespace words after NFKC normalisation (the 2025 validator's count)."""
    return len(unicodedata.normalize("NFKC", text.strip()).split())


def normalise_citations(text: str) -> str:
    """``[1, 3]`` -> ``[1][3]``: one number per marker."""
    return CITATION.sub(lambda m: "".join(f"[{int(n)}]" for n in m.group(1).split(",")), text)


def cut_to_words(text: str, max_words: int) -> str:
    """``text`` if it has at most ``max_words`` words, else its longest prefix of whole sentences that fits.

    Words are :func:`count_words` words; a sentence ends after a word ending in
    ``.``, ``!`` or ``?`` (citation markers right after it stay with it). When
    even the first sentence is too long, the first ``max_words`` words.
    """
    if count_words(text) <= max_words:
        return text.strip()
    words = unicodedata.normalize("NFKC", text.strip()).split()
    ends = _sentence_ends(words)
    fitting = [end for end in ends if end <= max_words]
    return " ".join(words[: fitting[-1] if fitting else max_words])


def _sentence_ends(words: list[str]) -> list[int]:
    """Word counts at which a sentence ends (after its punctuation and any citation markers following it)."""
    ends = []
    pending = False  # the last word that is not a marker ended a sentence
    for i, word in enumerate(words):
        if _MARKER_WORD.match(word):
            closes = pending or bool(_SENTENCE_END.search(word))
        else:
            closes = pending = bool(_SENTENCE_END.search(word))
        if closes and not (i + 1 < len(words) and _MARKER_WORD.match(words[i + 1])):
            ends.append(i + 1)
            pending = False
    return ends


def sentences(text: str) -> list[str]:
    """The sentences of a passage (a light rule: ``.!?`` then a capital or digit, and line breaks)."""
    return [s.strip() for s in _SPLIT.split(text) if s and s.strip()]


def cite(sentence: str, number: int) -> str:
    """``sentence`` with the marker ``[number]`` before its final punctuation (or at its end)."""
    match = _SENTENCE_END.search(sentence)
    if match is None:
        return f"{sentence} [{number}]"
    return f"{sentence[: match.start()].rstrip()} [{number}]{match.group(0)}"


# ---- terms, for the similarity of texts without a model ---------------------------------------------
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a about above after again against all also am an and any are as at be because been before being below "
    "between both but by can could did do does doing down during each few for from further get got had has have "
    "having he her here hers him his how i if in into is it its itself just me more most much my myself no nor "
    "not now of off on once one only or other our ours out over own please same she should so some such than "
    "that the their theirs them then there these they this those through to too under until up us very was we "
    "were what when where which while who whom why will with would you your yours".split()
)


def terms(text: str) -> list[str]:
    """Lower-case content words of ``text``, stop words removed, lightly stemmed."""
    return [stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1]


def tfidf_similarities(query: str, texts: list[str]) -> list[float]:
    """Cosine similarity of ``query`` with each text, tf-idf with the IDF of ``texts`` (0 when nothing is shared)."""
    docs = [Counter(terms(t)) for t in texts]
    df: Counter[str] = Counter()
    for doc in docs:
        df.update(doc.keys())
    n = len(docs)
    idf = {t: math.log((n + 1) / (c + 1)) + 1.0 for t, c in df.items()}
    q = {t: c * idf[t] for t, c in Counter(terms(query)).items() if t in idf}
    q_norm = math.sqrt(sum(v * v for v in q.values()))
    sims = []
    for doc in docs:
        vec = {t: c * idf[t] for t, c in doc.items()}
        norm = math.sqrt(sum(v * v for v in vec.values()))
        dot = sum(w * vec.get(t, 0.0) for t, w in q.items())
        sims.append(dot / (q_norm * norm) if q_norm and norm else 0.0)
    return sims


def bm25_scores(query: str, texts: list[str], k1: float = 0.9, b: float = 0.4) -> list[float]:
    """BM25 of ``query`` against each text, statistics from ``texts`` alone (Lucene's IDF; k1, b as Anserini's)."""
    docs = [Counter(terms(t)) for t in texts]
    n = len(docs)
    if not n:
        return []
    lengths = [sum(d.values()) for d in docs]
    average = sum(lengths) / n or 1.0
    df: Counter[str] = Counter()
    for doc in docs:
        df.update(doc.keys())
    scores = []
    for doc, length in zip(docs, lengths):
        score = 0.0
        for term in set(terms(query)):
            tf = doc.get(term, 0)
            if tf:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average))
        scores.append(score)
    return scores
