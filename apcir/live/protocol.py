"""The iKAT interactive task's simulation API: its records, each year's field names and limits.

As documented for 2025 ("TREC iKAT Simulation API") and as described by the organisers' server
(``marcel-gohsen/user-simulation-api``): every request carries ``Authorization: Bearer <token>``;
``run/start`` answers the first utterance, ``run/continue`` takes the answer to the current one and
answers the next. After an utterance flagged ``last_response_of_session`` (the user's closing words),
the next ``continue`` (its response ignored, may be empty) gets the next topic's first utterance;
after ``last_response_of_run`` the run is over. Errors are ``{"detail"}`` with the status codes of
:data:`ERRORS`.

The years differ in field names (:class:`Protocol`): 2025 sends ``track_persona`` and
``ptkb_provenance`` at the top level, 2026 under ``extra`` / ``meta``, and its status counts
user-topic pairs; 2026 replies carry the user's PTKB in ``user_meta.ptkb``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

RESPONSE_TOKENS = 250
"""The server refuses a longer response (HTTP 422), counted by spaCy's blank English tokenizer; both years'
API documentation says 250 (the 2026 guidelines say 512: the server's check is what a run meets)."""

ERRORS = {
    400: "bad request: no more topics, or an empty run id or description",
    401: "the token is missing or not valid",
    403: "forbidden: another team's run, or the debug budget is spent",
    412: "the run id is taken or the run is completed",
    422: "invalid body (e.g. a response over the token limit)",
    428: "no such active run",
}


@dataclass(frozen=True)
class Protocol:
    """One year's field names and limits."""

    year: int
    citations: int
    """Citations sent at most (2025: 1,000; 2026: 10, the depth the 2026 guidelines assess)."""
    response_tokens: int = RESPONSE_TOKENS
    nested: bool = False
    """2026: ``extra.track_persona`` and ``meta.ptkb_provenance`` (2025: top-level fields)."""

    def start_body(self, run_id: str, description: str, track_persona: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"run_id": run_id, "description": description}
        if self.nested:
            body["extra"] = {"track_persona": track_persona}
        else:
            body["track_persona"] = track_persona
        return body

    def continue_body(self, run_id: str, response: str, citations: dict[str, float],
                      ptkb_provenance: list[str]) -> dict[str, Any]:
        body: dict[str, Any] = {"run_id": run_id, "response": response,
                                "citations": {str(k): float(v) for k, v in citations.items()}}
        if self.nested:
            body["meta"] = {"ptkb_provenance": list(ptkb_provenance)}
        else:
            body["ptkb_provenance"] = list(ptkb_provenance)
        return body

    def track_persona(self, body: dict[str, Any]) -> bool:
        return bool((body.get("extra") or {}).get("track_persona") if self.nested else body.get("track_persona"))

    def ptkb_provenance(self, body: dict[str, Any]) -> list[str]:
        raw = (body.get("meta") or {}).get("ptkb_provenance") if self.nested else body.get("ptkb_provenance")
        return [str(x) for x in raw or []]

    def status(self, open_pairs: list[list[str]], done_pairs: list[list[str]], status: str) -> dict[str, Any]:
        if self.nested:
            return {"status": status, "open_user_topic_pairs": open_pairs, "done_user_topic_pairs": done_pairs}
        return {"status": status, "open_topics": [t for _, t in open_pairs], "done_topics": [t for _, t in done_pairs]}


PROTOCOLS = {2025: Protocol(2025, citations=1000), 2026: Protocol(2026, citations=10, nested=True)}


class HistoryMessage(BaseModel):
    role: str
    content: str


class UserMeta(BaseModel):
    model_config = ConfigDict(extra="allow")

    ptkb: list[str] | dict[str, str] | None = None


class Utterance(BaseModel):
    """One reply of the server: the user's current utterance and where the conversation stands."""

    model_config = ConfigDict(extra="allow")

    timestamp: str = ""
    run_id: str
    topic_id: str
    user_id: str
    utterance: str
    history: list[HistoryMessage] = Field(default_factory=list)
    last_response_of_session: bool = False
    last_response_of_run: bool = False
    user_meta: UserMeta | None = None

    def ptkb(self) -> dict[str, str] | None:
        """The user's PTKB as statement id -> text, when the reply carries it (ids: 1-based positions)."""
        if self.user_meta is None or self.user_meta.ptkb is None:
            return None
        given = self.user_meta.ptkb
        return dict(given) if isinstance(given, dict) else {str(i): s for i, s in enumerate(given, 1)}


@lru_cache(maxsize=1)
def _tokenizer() -> Any:
    try:
        import spacy
    except ImportError:  # pragma: no cover - depends on the environment
        from apcir.errors import ApcirError

        raise ApcirError("counting tokens as the server does needs spaCy: pip install 'apcir[live]'") from None
    return spacy.blank("en").tokenizer


def count_tokens(text: str) -> int:
    """Tokens as the server counts them: spaCy's blank English tokenizer (no model to download)."""
    return len(_tokenizer()(text))


def fit_tokens(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to at most ``limit`` tokens at a sentence end when one fits (else at a word), and whether it
    was cut. Counted as the server counts."""
    if count_tokens(text) <= limit:
        return text, False
    doc = _tokenizer()(text)
    cut = doc[:limit].text
    ends = [i for i in range(len(cut)) if cut[i] in ".!?" and (i + 1 == len(cut) or cut[i + 1] == " ")]
    kept = cut[: ends[-1] + 1] if ends else cut
    while count_tokens(kept) > limit and " " in kept:  # never over the limit, whatever the re-tokenisation does
        kept = kept.rsplit(" ", 1)[0]
    return kept.rstrip(), True
