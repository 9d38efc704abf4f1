"""Local simulated users that speak the simulation API (``apcir simulate-user``), to test a live run against.

``rubric``: the organisers' design (a planning user): the user of a 2025 topic (its PTKB) works through the
topic's grading-rubric questions (bundled, CC BY 4.0), one at a time. An LLM scores each answer 0-5 against
the current question; above 3 the user moves to the next one, and after 3 tries it moves on anyway; when the
questions are done (or its patience, the most turns, runs out) it thanks and ends. Knobs after the 2026
guidelines: ``patience``, ``cooperative`` (an uncooperative user does not restate the question when an answer
misses it) and ``style`` (terse or verbose wording). Each utterance's ``user_meta`` is the organisers' user's
(:meth:`RubricSession.meta`: ``rubric`` and ``rubric_score``), which the server stores in its record as theirs
does (:mod:`apcir.live.server`) and :mod:`apcir.live.verdicts` reads.

``replay``: a topic's recorded utterances, in order, whatever the answers; after the last one the user
closes the session (:data:`CLOSING`, flagged ``last_response_of_session``). Topic ids are the
conversation ids of the topics, so the live run's turn ids (``{topic_id}_{n}``) are the qrels' ids. A user
is a persona: the conversations of one iKAT persona (``9-1`` and ``9-2`` share persona ``9``) come from the
same ``user_id``, with the same PTKB, sent as ``user_meta.ptkb`` only when asked (``--send-ptkb``: the
organisers' server sends none).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apcir.contract.records import Turn
from apcir.io import read_json

CLOSING = "Thank you, that is all I wanted to know."


@dataclass
class Session:
    """One topic with one user: what the user will say, and how far the conversation got."""

    topic_id: str
    user_id: str
    utterances: list[str]
    ptkb: dict[str, str]
    position: int = 0
    history: list[dict[str, str]] = field(default_factory=list)
    closing_words: str = CLOSING

    @property
    def closing(self) -> bool:
        """The current utterance is the user's closing words (its response is ignored)."""
        return self.position >= len(self.utterances)

    def current(self) -> str:
        return self.closing_words if self.closing else self.utterances[self.position]

    def advance(self, response: str) -> dict[str, Any]:
        """Take the system's answer to the current utterance; returns what the user's log adds about it."""
        self.position += 1
        return {}

    def meta(self) -> dict[str, Any]:
        """The current utterance's ``user_meta``, as the organisers' users give it (a replay user: none)."""
        return {}


def persona_of(conversation_id: str) -> str:
    """iKAT conversations of one persona share the number before the dash (``9-1``, ``9-2``: user ``9``)."""
    return conversation_id.split("-", 1)[0]


def replay_sessions(turns: list[Turn], conversations: int | None = None, *, closing: str = CLOSING) -> list[Session]:
    """One session per conversation of ``turns`` (in the topics' order), its utterances as recorded, then
    ``closing``."""
    by_conversation: dict[str, list[Turn]] = {}
    for turn in turns:
        by_conversation.setdefault(turn.conversation_id, []).append(turn)
    sessions = [Session(cid, persona_of(cid), [t.utterance for t in sorted(ts, key=lambda t: t.turn_number)],
                        dict(ts[0].ptkb), closing_words=closing) for cid, ts in by_conversation.items()]
    return sessions[:conversations] if conversations else sessions


RUBRICS = Path(__file__).resolve().parent.parent / "datasets" / "interactive" / "rubrics-2025.json"
PASS_SCORE = 3
"""An answer scored above this covers the question: the user moves on."""
TRIES = 3


@dataclass
class RubricSession(Session):
    """A user working through a topic's rubric questions (see the module docstring)."""

    rubrics: list[str] = field(default_factory=list)
    score: Callable[[str, str], int | None] | None = None
    patience: int = 12
    cooperative: bool = True
    style: str = "terse"
    tries: int = 0
    turns: int = 0
    last_score: int | None = None
    """The score of the last answer (None: grading failed, or no answer yet)."""

    @property
    def closing(self) -> bool:
        return self.position >= len(self.rubrics) or self.turns >= self.patience

    def current(self) -> str:
        if self.closing:
            return self.closing_words
        question = self.rubrics[self.position]
        if self.tries and self.cooperative:
            return f"That does not quite answer it. {question}"
        if self.tries:
            return "Hmm." if self.style == "terse" else "I am not sure that helps me."
        return question if self.style == "terse" else f"I have been wondering about this for a while: {question}"

    def advance(self, response: str) -> dict[str, Any]:
        assert self.score is not None
        question = self.rubrics[self.position]
        value = self.score(question, response)
        self.turns += 1
        self.tries += 1
        self.last_score = value
        entry = {"rubric": question, "score": value, "try": self.tries}
        if (value is not None and value > PASS_SCORE) or self.tries >= TRIES:
            self.position += 1
            self.tries = 0
        return entry

    def meta(self) -> dict[str, Any]:
        """As the organisers' planning user gives it: the opening utterance names its rubric; a later one the
        score of the answer before it and its own rubric; the closing words the score only."""
        if not self.turns:
            return {"rubric": self.rubrics[self.position]}
        if self.closing:
            return {"rubric_score": self.last_score}
        return {"rubric_score": self.last_score, "rubric": self.rubrics[self.position]}


def rubric_sessions(turns: list[Turn], score: Callable[[str, str], int | None], *, conversations: int | None = None,
                    patience: int = 12, cooperative: bool = True, style: str = "terse",
                    rubrics: Path = RUBRICS) -> list[RubricSession]:
    """One rubric user per conversation of the 2025 topics ``turns`` that has rubric questions."""
    questions: dict[str, list[str]] = read_json(rubrics, "rubric questions")
    by_conversation: dict[str, Turn] = {}
    for turn in turns:
        by_conversation.setdefault(turn.conversation_id, turn)
    sessions = [RubricSession(cid, persona_of(cid), [], dict(first.ptkb), rubrics=list(questions[cid]), score=score,
                              patience=patience, cooperative=cooperative, style=style)
                for cid, first in by_conversation.items() if questions.get(cid)]
    return sessions[:conversations] if conversations else sessions


class LLMScorer:
    """Scores an answer 0-5 against a rubric question with a model on an OpenAI-compatible server (one request
    per answer). A reply without a digit 0-5 is no score (None), as the organisers' grading that fails: the user
    asks again, and the try counts."""

    PROMPT = ("You grade how well an answer covers a question. Reply with one digit from 0 (not at all) to 5 "
              "(fully).\nQuestion: {question}\nAnswer: {answer}\nGrade (0-5):")

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None, timeout: float = 120.0):
        from openai import OpenAI

        self.model = model
        self.client = OpenAI(base_url=base_url, api_key=api_key or "unused", timeout=timeout, max_retries=2)

    def __call__(self, question: str, answer: str) -> int | None:
        reply = self.client.chat.completions.create(
            model=self.model, temperature=0.0, max_tokens=4,
            messages=[{"role": "user", "content": self.PROMPT.format(question=question, answer=answer[:2000])}])
        text = reply.choices[0].message.content or ""
        found = re.search(r"[0-5]", text)
        return int(found.group(0)) if found else None
