"""The ``extractive`` responder: a deterministic baseline that needs no model. It is not an LLM.

For each turn it splits the top-k passages into sentences, scores every
sentence by tf-idf cosine similarity with the personalised rewrite (IDF over
those sentences; :func:`apcir.responses.text.tfidf_similarities`), and takes the
best ones (ties: the higher-ranked passage, then the earlier sentence; repeated
sentences once) while they fit the word budget, at most ``max_sentences``.
Each sentence carries the number of its passage, ``[n]``, before its final
punctuation; citation markers count as words. When no sentence shares a term
with the rewrite, the first sentences of the top passage are taken. The
statements it reports as used are the reformulation's ``ptkb_used`` (the
sentences were chosen for the rewrite those statements personalised).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import Field

from apcir.contract.responses import ResponseRecord, cited_numbers
from apcir.options import Options
from apcir.responses.job import ResponseJob, failed_record, unusable
from apcir.responses.registry import EXTRACTIVE as NAME
from apcir.responses.settings import RespondSettings
from apcir.responses.text import cite, count_words, cut_to_words, sentences, tfidf_similarities

MIN_SENTENCE_WORDS = 3


class ExtractiveOptions(Options):
    """The extractive responder's own ``[respond]`` keys."""

    max_sentences: int = Field(5, ge=1, le=50, description="most sentences taken")


def extractive_record(job: ResponseJob, settings: RespondSettings) -> ResponseRecord:
    """The response of one turn (see the module docstring); a failed record when no passage has text."""
    problem = unusable(job)
    if problem is not None:
        return failed_record(job, NAME, problem)
    notes = list(job.notes)
    candidates: list[tuple[int, int, str]] = []  # (passage number, position, sentence)
    seen: set[str] = set()
    for number, (pid, text) in enumerate(job.passages, start=1):
        if not text:
            notes.append(f"passage [{number}] {pid} has no text and was skipped")
            continue
        for position, sentence in enumerate(sentences(text)):
            key = " ".join(sentence.lower().split())
            if len(sentence.split()) >= MIN_SENTENCE_WORDS and key not in seen:
                seen.add(key)
                candidates.append((number, position, sentence))
    if not candidates:  # only very short sentences: take the top passage with text as one
        number, (_, text) = next((n, p) for n, p in enumerate(job.passages, start=1) if p[1])
        candidates = [(number, 0, text)]
    scores = tfidf_similarities(job.rewrite, [s for _, _, s in candidates])
    order = sorted(range(len(candidates)), key=lambda i: (-scores[i], candidates[i][0], candidates[i][1]))
    if scores[order[0]] <= 0:
        notes.append("no sentence shares a term with the rewrite: the first sentences of the top passage")
    chosen: list[str] = []
    words = 0
    for i in order:
        number, _, sentence = candidates[i]
        piece = cite(sentence, number)
        size = count_words(piece)
        if words + size <= settings.max_words:
            chosen.append(piece)
            words += size
        elif not chosen:  # the best sentence alone is over the budget: its first words
            chosen.append(cut_to_words(piece, settings.max_words - 1) + f" [{number}]")
            words = settings.max_words
        if len(chosen) >= settings.own(ExtractiveOptions).max_sentences or words >= settings.max_words:
            break
    text = " ".join(chosen)
    numbers = sorted(cited_numbers(text))
    return ResponseRecord(
        turn_id=job.turn.turn_id, responder=NAME, prompt_hash="", status="ok", text=text,
        passages=job.passage_ids, citations=[job.passages[n - 1][0] for n in numbers], ptkb_used=list(job.used),
        notes=notes,
    )


__all__ = ["NAME", "extractive_record", "failed_record"]


def produce(jobs: Sequence[ResponseJob], settings: RespondSettings, emit: Callable[[ResponseRecord], None],
            **_: Any) -> None:
    for job in jobs:
        emit(extractive_record(job, settings))


def identity(settings: RespondSettings) -> dict[str, Any]:
    from apcir.responses.registry import code_digest

    return {"code": code_digest("extractive.py", "job.py", "text.py"),
            **settings.model_dump(include={"top_k", "max_words"}), **settings.own(ExtractiveOptions).model_dump()}
