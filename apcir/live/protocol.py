"""The iKAT interactive task's simulation API: its records, each year's field names and limits.

The reference is the organisers' server (Sim.API, ``marcel-gohsen/user-simulation-api``; its snapshot of
2026-04-20, commit 1072413, is what apcir's tests run against). Where its documentation (its README) and its
code disagree, this module follows the code, and keeps a documented form only where a deployed server is known
to have used it:

- every request carries ``Authorization: Bearer <token>`` (a base64 token: anything else is 400, a wrong one 401);
- ``run/start`` answers the first utterance, ``run/continue`` takes the answer to the current one and answers the
  next; after an utterance flagged ``last_response_of_session`` (the user's closing words) the next ``continue``
  (its response ignored, sent empty) opens the next topic; after ``last_response_of_run`` the run is over, and a
  further ``continue`` is 400 ("No more open topics");
- ``history`` holds the current and prior utterances: its **last entry is the current utterance** (README and
  code agree): the earlier turns are the entries before it (:meth:`Utterance.earlier`);
- ``run/session`` answers the open session's current utterance (flags always false); with no session open
  (between topics, after the run) it answers **500**, and for a run it does not hold 428; a debug run has
  ``debug/session`` and no status or dump;
- ``run/status`` is ``{"status", "done_topics", "open_topics"}`` with ``status`` ``active``, ``inactive`` or
  ``complete`` (the README's list says ``completed``; its example and the code say ``complete``, and both are
  read). A topic is "done" as soon as its session opened, so ``complete`` alone does not mean the last answer was
  recorded: with no session open as well, it does. The 2026 guidelines' ``open_user_topic_pairs`` is read only
  where a server sends it (none known does);
- ``run/dump`` is NDJSON (``application/x-ndjson``; the README shows a JSON list with other field names, which
  the code does not write): one record per request, ``metadata.topic_id`` = ``{topic}_{i}``, the user's closing
  words included with a null ``assistant_text`` (:func:`parse_dump`);
- bodies: start takes ``run_id``, ``description``, ``extra`` (an object) and an optional ``team_id``; continue
  takes ``run_id``, ``response``, ``citations`` (``{passage_id: score}`` or null, no count limit) and ``meta``
  (an object); any other field is ignored. A response over 250 tokens (spaCy's blank English tokenizer) is 422,
  its detail naming the limit ("Response exceeds limit of 250 tokens": :func:`named_limit`);
- replies carry no ``user_meta`` (the 2026 guidelines' ``user_meta.ptkb`` is read where a server sends it);
- ``auth/verify`` answers ``{"team_id"}``, ``budget/check`` ``{"remaining": {"debug": {"remaining", "unit"},
  "run": {...}}}`` (:class:`Budget`).

The 2026 deployment differs from the snapshot where its OpenAPI description (fetched 2026-06-10; quoted in the
APCIR authors' client, ``src/apcir/interactive/sim_client.py`` of ``YuchenHui22314/TREC_iKAT_2024``) says so:
``continue`` takes a response of **at most 512 tokens** (the 2026 guidelines say 512 too) and replies carry
``user_meta``. Each year's record holds its limit (2025: 250, 2026: 512); a server that refuses an answer for
its length and names a lower limit is followed (:mod:`apcir.live.converse` learns it), so a 2026 run against the
snapshot (250) completes.

The years differ in where the persona flag and the PTKB provenance go (:class:`Protocol`, one record per year,
with the builders of those fields): **2026** puts them
in ``extra.track_persona`` and ``meta.ptkb_provenance``, the fields the server's code stores; **2025** sends them
at the top level, the form the 2025 deployment documented (its README's examples of May 2025) and its code once
read (a ``ptkb_provenance`` field, now commented out). The current server ignores the 2025 fields:
``apcir converse`` checks the server's record after a run and says what it did not store.
Statuses: :data:`apcir.live.errors.STATUS`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

RESPONSE_TOKENS = 250
"""The snapshot's check (and the 2025 deployment's documented limit): a longer response is refused (HTTP 422),
counted by spaCy's blank English tokenizer. ``apcir simulate-user`` checks the same."""
RESPONSE_TOKENS_2026 = 512
"""The 2026 deployment's limit (its OpenAPI description of ``continue``, fetched 2026-06-10, and the 2026
guidelines)."""

_NAMED_LIMIT = re.compile(r"exceeds\s+(?:the\s+)?limit\s+of\s+(\d[\d,]*)\s+tokens?", re.IGNORECASE)


def named_limit(detail: str) -> int | None:
    """The token limit a refusal's detail names ("Response exceeds limit of 250 tokens." -> 250), else None."""
    match = _NAMED_LIMIT.search(detail or "")
    if match is None:
        return None
    limit = int(match.group(1).replace(",", ""))
    return limit if limit > 0 else None


def top_level_persona(track_persona: bool) -> dict[str, Any]:
    return {"track_persona": track_persona}


def top_level_provenance(statements: list[str]) -> dict[str, Any]:
    return {"ptkb_provenance": statements}


def extra_persona(track_persona: bool) -> dict[str, Any]:
    return {"extra": {"track_persona": track_persona}}


def meta_provenance(statements: list[str]) -> dict[str, Any]:
    return {"meta": {"ptkb_provenance": statements}}


@dataclass(frozen=True)
class Protocol:
    """One year's field names and limits: the year's record, with the builders of what its bodies add."""

    year: int
    citations: int
    """Citations sent at most (2025: 1,000; 2026: 10, the depth the 2026 guidelines assess)."""
    persona: Callable[[bool], dict[str, Any]]
    """The fields ``run/start`` adds for the persona flag (2026: ``extra.track_persona``; 2025: top level)."""
    provenance: Callable[[list[str]], dict[str, Any]]
    """The fields ``run/continue`` adds for the PTKB provenance (2026: ``meta.ptkb_provenance``; 2025: top level)."""
    response_tokens: int
    """The longest response the year's server takes, in its tokens (2025: 250; 2026: 512, as deployed); a
    longer one is cut at a sentence end before it is sent (:func:`fit_tokens`)."""
    unstored: str = ""
    """Why the server stores neither the persona flag nor the PTKB provenance sent in this year's form, said
    where its record lacks them ("" where it stores them)."""

    def start_body(self, run_id: str, description: str, track_persona: bool) -> dict[str, Any]:
        return {"run_id": run_id, "description": description, **self.persona(track_persona)}

    def continue_body(self, run_id: str, response: str, citations: dict[str, float],
                      ptkb_provenance: list[str]) -> dict[str, Any]:
        return {"run_id": run_id, "response": response,
                "citations": {str(k): float(v) for k, v in citations.items()},
                **self.provenance(list(ptkb_provenance))}


IKAT_2025 = Protocol(2025, citations=1000, persona=top_level_persona, provenance=top_level_provenance,
                     response_tokens=RESPONSE_TOKENS,
                     unstored="--protocol 2025 sends it at the top level, which the server ignores")
IKAT_2026 = Protocol(2026, citations=10, persona=extra_persona, provenance=meta_provenance,
                     response_tokens=RESPONSE_TOKENS_2026)
PROTOCOLS = {p.year: p for p in (IKAT_2025, IKAT_2026)}
"""The years by number: a new year is one record here."""


def protocol_for(year: int) -> Protocol:
    """The year's record; a year none is of is an error naming those there are."""
    if year not in PROTOCOLS:
        from apcir.errors import ApcirError

        raise ApcirError(f"--protocol {year}: expected one of {', '.join(map(str, PROTOCOLS))}")
    return PROTOCOLS[year]


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

    def earlier(self) -> list[HistoryMessage]:
        """The history before the current utterance: the server's ``history`` ends with it (a history that ends
        with an answer, which no server is known to send, would hold earlier turns only)."""
        if self.history and self.history[-1].role == "user":
            return list(self.history[:-1])
        return list(self.history)

    def ptkb(self) -> dict[str, str] | None:
        """The user's PTKB as statement id -> text, when the reply carries it (ids: 1-based positions)."""
        if self.user_meta is None or self.user_meta.ptkb is None:
            return None
        given = self.user_meta.ptkb
        return dict(given) if isinstance(given, dict) else {str(i): s for i, s in enumerate(given, 1)}


class RunStatus(BaseModel):
    """``run/status``: where a run stands, in the names the server used."""

    model_config = ConfigDict(extra="allow")

    status: str
    done_topics: list[str] = Field(default_factory=list)
    open_topics: list[str] = Field(default_factory=list)

    @classmethod
    def read(cls, payload: Any) -> RunStatus:
        data = dict(payload) if isinstance(payload, dict) else {"status": str(payload)}
        for field, pairs in (("open_topics", "open_user_topic_pairs"), ("done_topics", "done_user_topic_pairs")):
            if field not in data and pairs in data:  # the 2026 guidelines' names, where a server sends them
                data[field] = [str(p[-1]) if isinstance(p, list) else str(p) for p in data[pairs] or []]
        return cls.model_validate(data)

    @property
    def complete(self) -> bool:
        """Every topic has been started (``complete``; ``completed`` in the README's list)."""
        return self.status in ("complete", "completed")


class Remaining(BaseModel):
    """One kind of budget left: how many, of what (``sessions``: debug conversations; ``runs``: official runs)."""

    model_config = ConfigDict(extra="allow")

    remaining: int
    unit: str = ""


class Budget(BaseModel):
    """``budget/check``: what the team has left, by kind (``debug``, ``run``), as the server names them."""

    remaining: dict[str, Remaining]

    @classmethod
    def read(cls, payload: Any) -> Budget:
        """The server's answer; one it words otherwise is one line naming what came."""
        from pydantic import ValidationError

        from apcir.errors import ApcirError

        try:
            return cls.model_validate(payload)
        except ValidationError:
            shown = json.dumps(payload, ensure_ascii=False)
            raise ApcirError("budget/check answered " + (shown if len(shown) <= 200 else shown[:200] + "...") +
                             '; expected {"remaining": {"debug": {"remaining": N, "unit": ...}, "run": {...}}}'
                             ) from None

    def line(self) -> str:
        """``debug: 100 sessions, run: 6 runs`` (the server's kinds and units, in its order)."""
        return ", ".join(f"{kind}: {left.remaining} {left.unit}".rstrip() for kind, left in self.remaining.items())


def parse_dump(text: str) -> list[dict[str, Any]]:
    """``run/dump``'s NDJSON, one record per line (a blank line skipped)."""
    from apcir.errors import ApcirError

    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ApcirError(f"run/dump line {number} is not JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise ApcirError(f"run/dump line {number} is not a JSON object")
        records.append(record)
    return records


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
