"""Reformulators that need no model and no network: ``manual`` and ``heuristic``.

``manual`` (the paper's HumanQR): the annotators' manual rewrite is the query
of every list; the level comes from the annotators' ``ptkb_provenance`` (none:
``a``, any: ``c``; the annotations do not distinguish ``b``). The
pseudo-response is the *previous* turn's canonical response (empty on the
first turn): the current turn's own canonical response is the answer being
searched for and would leak it. The third pair is the manual rewrite again
with, for level c, the provenance statements as its response. Note the manual
rewrite is already personalised, so ``rewrite`` is not profile-free here.

``heuristic``: a real, model-free baseline.

* rewrite: the utterance followed by context terms: the content words of the
  conversation's first utterance and of the previous utterance that the
  current one lacks (up to :data:`MAX_CONTEXT_TERMS`), then the
  :data:`MAX_RESPONSE_TERMS` highest tf-idf words of the previous response
  (idf over the utterances and responses of the history);
* response: the previous canonical response (empty on the first turn);
* profile: every PTKB statement scored by tf-idf cosine similarity (idf over
  the profile's statements, light suffix stemming, stop words removed), once
  with the utterance alone and once with the utterance (weight 1) plus its
  context terms (weight 0.5);
* level: two signals, a personal cue in the utterance (``my``, ``me``,
  ``should I``, ``can I``, ``am I``, ... see :data:`PERSONAL_CUE`) and lexical
  overlap of the utterance with a statement (utterance-only similarity
  ``>= SIMILARITY_THRESHOLD`` = 0.15). Both: ``c``; the overlap alone, or the
  cue with any statement matching the utterance plus context: ``b``; else ``a``.
  The statements with a positive similarity (utterance plus context), best
  :data:`MAX_PTKB_USED` first, are ``ptkb_used`` for levels b and c;
* third pair: for b/c the rewrite followed by the chosen statements; for a, a
  broader neutral variant (the utterance with the top tf-idf terms of the whole
  history); its response is the previous response.

The rule was chosen by looking at iKAT-23 *train* turns (turns with
annotated provenance against turns without), never at the test topics. It is
a weak signal: lexical overlap alone hardly separates the annotated turns,
the personal cue does better (on train: 50% of turns with provenance carry
one, 30% of those without).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from apcir.contract.records import Turn
from apcir.contract.reformulations import Level, ReformulationOutput, ReformulationRecord, Usage
from apcir.options import Options


class HeuristicOptions(Options):
    """The heuristic reformulator's own ``[reformulator]`` keys: none."""


class ManualOptions(Options):
    """The manual reformulator's own ``[reformulator]`` keys: none."""

HEURISTIC_VERSION = "heuristic-v1"
MANUAL_VERSION = "manual-v1"

SIMILARITY_THRESHOLD = 0.15
PERSONAL_CUE = re.compile(
    r"\b(me|my|myself|for me|should i|can i|could i|do i|am i|would i|will i|suits? me|near me)\b",
    re.IGNORECASE,
)
MAX_CONTEXT_TERMS = 8
MAX_RESPONSE_TERMS = 5
MAX_PTKB_USED = 3

_STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "aren't",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "can't",
        "could",
        "did",
        "didn't",
        "do",
        "does",
        "doesn't",
        "doing",
        "don't",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "get",
        "got",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "i'd",
        "i'll",
        "i'm",
        "i've",
        "if",
        "in",
        "into",
        "is",
        "isn't",
        "it",
        "it's",
        "its",
        "itself",
        "just",
        "know",
        "let's",
        "like",
        "me",
        "more",
        "most",
        "much",
        "my",
        "myself",
        "need",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "ok",
        "okay",
        "on",
        "once",
        "one",
        "only",
        "or",
        "other",
        "ought",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "please",
        "really",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "sure",
        "tell",
        "than",
        "thank",
        "thanks",
        "that",
        "that's",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "there's",
        "these",
        "they",
        "they're",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "us",
        "very",
        "want",
        "was",
        "wasn't",
        "we",
        "we're",
        "well",
        "were",
        "what",
        "what's",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "yes",
        "you",
        "you're",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "great",
        "good",
        "nice",
        "wow",
        "hi",
        "hello",
        "hey",
        "think",
        "thing",
        "things",
        "okay",
        "maybe",
    ]
)

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def _words(text: str) -> list[str]:
    """Content words of ``text`` in order (lower case, stop words and 1-letter words removed)."""
    return [w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS and len(w) > 1]


def stem(word: str) -> str:
    """A light stem: one of the suffixes -ies (to -y), -ing, -ed, -es, -s cut where three letters stay."""
    for suffix in ("ies", "ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def _stems(text: str) -> list[str]:
    return [stem(w) for w in _words(text)]


def _idf(documents: list[list[str]]) -> dict[str, float]:
    df: Counter[str] = Counter()
    for doc in documents:
        df.update(set(doc))
    n = len(documents)
    return {term: math.log((n + 1) / (count + 1)) + 1.0 for term, count in df.items()}


def _unique(words: list[str], exclude: set[str]) -> list[str]:
    seen = set(exclude)
    out = []
    for w in words:
        if stem(w) not in seen:
            seen.add(stem(w))
            out.append(w)
    return out


def _top_tfidf(text: str, idf: dict[str, float], count: int, exclude: set[str]) -> list[str]:
    words = _words(text)
    tf = Counter(stem(w) for w in words)
    surface: dict[str, str] = {}
    for w in words:
        surface.setdefault(stem(w), w)
    ranked = sorted(
        (s for s in tf if s not in exclude),
        key=lambda s: (-tf[s] * idf.get(s, 1.0), words.index(surface[s])),
    )
    return [surface[s] for s in ranked[:count]]


def _context_terms(turn: Turn) -> list[str]:
    if not turn.history:
        return []
    own = set(_stems(turn.utterance))
    first, previous = turn.history[0], turn.history[-1]
    terms = _unique(_words(first.utterance) + _words(previous.utterance), own)[:MAX_CONTEXT_TERMS]
    docs = [_stems(h.utterance) for h in turn.history] + [_stems(h.response) for h in turn.history]
    idf = _idf(docs)
    taken = own | {stem(t) for t in terms}
    terms += _top_tfidf(previous.response, idf, MAX_RESPONSE_TERMS, taken)
    return terms


def _broad_terms(turn: Turn) -> list[str]:
    text = " ".join(f"{h.utterance} {h.response}" for h in turn.history)
    docs = [_stems(h.utterance) + _stems(h.response) for h in turn.history]
    return _top_tfidf(text, _idf(docs), MAX_CONTEXT_TERMS, set(_stems(turn.utterance)))


def ptkb_similarities(turn: Turn, context: list[str] | None = None) -> dict[str, float]:
    """Cosine similarity (tf-idf over the profile) of every PTKB statement with the turn."""
    if not turn.ptkb:
        return {}
    statements = {sid: _stems(text) for sid, text in turn.ptkb.items()}
    idf = _idf(list(statements.values()))
    query: dict[str, float] = {}
    for s in _stems(turn.utterance):
        query[s] = query.get(s, 0.0) + 1.0
    for s in (stem(w) for w in (context if context is not None else _context_terms(turn))):
        query[s] = query.get(s, 0.0) + 0.5
    qvec = {t: w * idf[t] for t, w in query.items() if t in idf}
    qnorm = math.sqrt(sum(v * v for v in qvec.values()))
    sims: dict[str, float] = {}
    for sid, stems in statements.items():
        svec = {t: c * idf[t] for t, c in Counter(stems).items()}
        snorm = math.sqrt(sum(v * v for v in svec.values()))
        dot = sum(w * svec.get(t, 0.0) for t, w in qvec.items())
        sims[sid] = dot / (qnorm * snorm) if qnorm and snorm else 0.0
    return sims


def heuristic_level(turn: Turn, context: list[str]) -> tuple[Level, list[str], str]:
    """Level, statements used (ids) and a one-line explanation for ``turn``."""
    utterance_sims = ptkb_similarities(turn, [])
    full_sims = ptkb_similarities(turn, context)
    best_utterance = max(utterance_sims.values(), default=0.0)
    ranked = sorted(
        ((sid, sim) for sid, sim in full_sims.items() if sim > 0), key=lambda kv: (-kv[1], kv[0])
    )
    cue_match = PERSONAL_CUE.search(turn.utterance)
    overlap = best_utterance >= SIMILARITY_THRESHOLD
    level: Level
    if cue_match and overlap:
        level = "c"
    elif overlap or (cue_match and ranked):
        level = "b"
    else:
        level = "a"
    used = [sid for sid, _ in ranked[:MAX_PTKB_USED]] if level != "a" else []
    cue = f"personal cue {cue_match.group(0)!r}" if cue_match else "no personal cue"
    why = (
        f"{cue}; best utterance-statement similarity {best_utterance:.2f} "
        f"({'>=' if overlap else '<'} {SIMILARITY_THRESHOLD}) -> level {level}"
    )
    return level, used, why


def heuristic_output(turn: Turn) -> ReformulationOutput:
    context = _context_terms(turn)
    rewrite = " ".join([turn.utterance, *context]).strip()
    response = turn.history[-1].response if turn.history else ""
    level, used, why = heuristic_level(turn, context)
    if level == "a":
        third_rewrite = " ".join([turn.utterance, *_broad_terms(turn)]).strip()
    else:
        third_rewrite = " ".join([rewrite, *(turn.ptkb[sid] for sid in used)])
    reasoning = (
        f"{HEURISTIC_VERSION}: {len(context)} context terms from the history; {why}; "
        f"statements used: {', '.join(used) or 'none'}."
    )
    return ReformulationOutput(
        reasoning=reasoning,
        level=level,
        rewrite=rewrite,
        response=response,
        third_rewrite=third_rewrite,
        third_response=response,
        ptkb_used=used,
    )


def manual_output(turn: Turn) -> ReformulationOutput:
    rewrite = turn.manual_rewrite.strip() or turn.utterance
    response = turn.history[-1].response if turn.history else ""
    level: Level = "c" if turn.ptkb_provenance else "a"
    statements = " ".join(turn.ptkb[sid] for sid in turn.ptkb_provenance)
    source = (
        "manual rewrite"
        if turn.manual_rewrite.strip()
        else "utterance (no manual rewrite in the topics)"
    )
    return ReformulationOutput(
        reasoning=(
            f"{MANUAL_VERSION}: {source}; annotated PTKB provenance "
            f"[{', '.join(turn.ptkb_provenance)}] -> level {level}."
        ),
        level=level,
        rewrite=rewrite,
        response=response,
        third_rewrite=rewrite,
        third_response=statements if level == "c" else response,
        ptkb_used=list(turn.ptkb_provenance),
    )


def offline_record(turn: Turn, model: str, make: Callable[[Turn], ReformulationOutput],
                   version: str) -> ReformulationRecord:
    """The record of ``turn`` by an offline reformulator (``make`` gives its output; ``version`` names its code)."""
    output = make(turn)
    if not turn.utterance.strip() or not output.rewrite.strip():
        return ReformulationRecord(turn_id=turn.turn_id, model=model, prompt_hash=version, status="failed",
                                   error="the utterance is empty: nothing to reformulate")
    return ReformulationRecord(
        turn_id=turn.turn_id,
        model=model,
        prompt_hash=version,
        status="ok",
        output=output,
        usage=Usage(),
    )


def source_identity() -> str:
    """A hash of this module's code: what the offline reformulators write changes only when it does."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def identity(turns: Sequence[Turn], options: Any) -> dict[str, Any]:
    """What identifies an offline reformulator's records: this module's code."""
    return {"code": source_identity()}


def produce_heuristic(turns: Sequence[Turn], options: Any, emit: Callable[[ReformulationRecord], None],
                      **_: Any) -> None:
    for turn in turns:
        emit(offline_record(turn, options.method, heuristic_output, HEURISTIC_VERSION))


def produce_manual(turns: Sequence[Turn], options: Any, emit: Callable[[ReformulationRecord], None],
                   **_: Any) -> None:
    for turn in turns:
        emit(offline_record(turn, options.method, manual_output, MANUAL_VERSION))


def heuristic_record(turn: Turn) -> ReformulationRecord:
    """The heuristic reformulator's record of one turn."""
    return offline_record(turn, "heuristic", heuristic_output, HEURISTIC_VERSION)
