"""Local simulated users that speak the simulation API (``apcir simulate-user``), to test a live run against.

``replay``: a topic's recorded utterances, in order, whatever the answers; after the last one the user
closes the session ("Thank you, that is all.", flagged ``last_response_of_session``). Topic ids are the
conversation ids of the topics, so the live run's turn ids (``{topic_id}_{n}``) are the qrels' ids. A user
is a persona: the conversations of one iKAT persona (``9-1`` and ``9-2`` share persona ``9``) come from the
same ``user_id``, with the same PTKB, sent as ``user_meta.ptkb`` (2026) when asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from apcir.contract.records import Turn

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

    @property
    def closing(self) -> bool:
        """The current utterance is the user's closing words (its response is ignored)."""
        return self.position >= len(self.utterances)

    def current(self) -> str:
        return CLOSING if self.closing else self.utterances[self.position]


def persona_of(conversation_id: str) -> str:
    """iKAT conversations of one persona share the number before the dash (``9-1``, ``9-2``: user ``9``)."""
    return conversation_id.split("-", 1)[0]


def replay_sessions(turns: list[Turn], conversations: int | None = None) -> list[Session]:
    """One session per conversation of ``turns`` (in the topics' order), its utterances as recorded."""
    by_conversation: dict[str, list[Turn]] = {}
    for turn in turns:
        by_conversation.setdefault(turn.conversation_id, []).append(turn)
    sessions = [Session(cid, persona_of(cid), [t.utterance for t in sorted(ts, key=lambda t: t.turn_number)],
                        dict(ts[0].ptkb)) for cid, ts in by_conversation.items()]
    return sessions[:conversations] if conversations else sessions
