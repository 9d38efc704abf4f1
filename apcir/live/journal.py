"""The journal of a live run (``conversation.jsonl``, every line flushed to disk before the next request), and the
answers read back from it: what makes a killed ``apcir converse`` resumable (:mod:`apcir.live.converse`)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apcir.live.protocol import Utterance

JOURNAL = "conversation.jsonl"


@dataclass
class Answer:
    turn_id: str
    response: str
    citations: dict[str, float]
    ptkb_provenance: list[str]
    trimmed: bool
    seconds: dict[str, float]


def utterance_key(reply: Utterance) -> tuple[str, str, int]:
    """Where a reply stands: topic, user and the length of its history."""
    return reply.topic_id, reply.user_id, len(reply.history)


class Journal:
    """``conversation.jsonl``: appended and flushed to disk line by line."""

    def __init__(self, path: Path):
        self.path = path
        self.entries: list[dict[str, Any]] = []
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    self.entries.append(json.loads(line))
                except json.JSONDecodeError:  # a torn last line of a killed run
                    break

    def add(self, event: str, **data: Any) -> None:
        entry = {"event": event, "time": time.time(), **data}
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.entries.append(entry)

    def last(self, event: str) -> dict[str, Any] | None:
        return next((e for e in reversed(self.entries) if e["event"] == event), None)

    def answer_for(self, reply: Utterance) -> tuple[Answer, dict[str, Any]] | None:
        """The latest answer computed for this utterance (sent or not), and its journal entry: it is sent again,
        never recomputed."""
        key = utterance_key(reply)
        for entry in reversed(self.entries):
            if entry["event"] == "answer" and tuple(entry["key"]) == key:
                return Answer(entry["turn_id"], entry["response"], entry["citations"], entry["provenance"],
                              entry["trimmed"], entry["seconds"]), entry
        return None

    def answered(self) -> list[tuple[Utterance, dict[str, Any]]]:
        """Each question of the journal (closing words left out), once, in order, with its latest answer."""
        seen: set[tuple[str, str, int]] = set()
        found = []
        for entry in self.entries:
            if entry["event"] != "utterance":
                continue
            reply = Utterance.model_validate(entry["reply"])
            if reply.last_response_of_session or utterance_key(reply) in seen:
                continue
            seen.add(utterance_key(reply))
            done = self.answer_for(reply)
            if done is not None:
                found.append((reply, done[1]))
        return found
