"""The server's record of a live run (``run/dump``, saved as ``dump.jsonl``) against the run's journal, answer by
answer: what ``apcir converse`` reports at the end of a run (:mod:`apcir.live.converse`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apcir.errors import ApcirError
from apcir.live.client import SimulationClient
from apcir.live.journal import Journal
from apcir.live.protocol import Utterance

DUMP_FILE = "dump.jsonl"


@dataclass
class RecordCheck:
    """The server's record of the run (``run/dump``) against the journal, answer by answer."""

    total: int = 0
    matched: int = 0
    differences: list[str] = field(default_factory=list)
    error: str | None = None
    """Why the record could not be read (then nothing was compared)."""

    @property
    def ok(self) -> bool:
        return self.error is None and not self.differences

    def line(self) -> str:
        if self.error is not None:
            return f"recorded: not checked ({self.error})"
        return f"recorded: {self.matched} of {self.total} answers match"


def check_record(client: SimulationClient, run_id: str, out: Path, journal: Journal, track_persona: bool
                 ) -> RecordCheck:
    """The server's record (``run/dump``, saved as ``dump.jsonl``) against the journal, per answered
    utterance: the utterance, the text, the citations and the PTKB provenance, and the persona flag of the
    run. A record a year's form could not get stored (``--protocol 2025``'s top-level fields) is named."""
    from apcir.io import write_jsonl

    try:
        records = client.dump(run_id)
    except ApcirError as exc:
        return RecordCheck(error=f"run/dump: {exc}")
    write_jsonl(out / DUMP_FILE, records)
    theirs: dict[str, list[dict[str, Any]]] = {}
    extra: Any = None
    for record in records:
        meta = record.get("metadata") or {}
        extra = meta.get("extra", extra)
        response = (record.get("responses") or [{}])[0]
        if response.get("assistant_text") is None:  # the user's closing words
            continue
        theirs.setdefault(str(meta.get("topic_id", "")).rpartition("_")[0], []).append(
            {**response, "topic_id": meta.get("topic_id")})
    mine: dict[str, list[tuple[Utterance, dict[str, Any]]]] = {}
    for reply, entry in journal.answered():
        mine.setdefault(reply.topic_id, []).append((reply, entry))
    check = RecordCheck(total=sum(len(v) for v in mine.values()))
    unstored = client.protocol.unstored
    for topic in dict.fromkeys([*mine, *theirs]):
        ours, recorded = mine.get(topic, []), theirs.get(topic, [])
        for i in range(max(len(ours), len(recorded))):
            if i >= len(recorded):
                check.differences.append(f"{ours[i][1]['turn_id']}: the server has no record of this answer")
                continue
            if i >= len(ours):
                check.differences.append(f"{recorded[i]['topic_id']}: the server recorded an answer the journal "
                                         "does not hold")
                continue
            problems = _differences(ours[i][0], ours[i][1], recorded[i], unstored)
            if problems:
                check.differences.append(f"{ours[i][1]['turn_id']}: {'; '.join(problems)}")
            else:
                check.matched += 1
    stored = (extra or {}).get("track_persona") if isinstance(extra, dict) else None
    if bool(stored) != track_persona:
        how = f" ({unstored})" if unstored else ""
        check.differences.append(f"track_persona: sent {str(track_persona).lower()}, the server stored "
                                 f"{json.dumps(extra)}{how}")
    return check


def _differences(reply: Utterance, entry: dict[str, Any], recorded: dict[str, Any], unstored: str) -> list[str]:
    problems = []
    if recorded.get("user_utterance") != reply.utterance:
        problems.append("the server recorded another utterance")
    if recorded.get("assistant_text") != entry["response"]:
        problems.append("the server's text differs from the one sent")
    if not _same_citations(entry["citations"], recorded.get("assistant_citations")):
        stored = recorded.get("assistant_citations")
        problems.append(f"the citations differ ({len(entry['citations'])} sent, "
                        f"{len(stored) if isinstance(stored, dict) else 0} recorded)")
    meta = recorded.get("assistant_meta")
    provenance = meta.get("ptkb_provenance") if isinstance(meta, dict) else None
    sent = list(entry["provenance"])
    if provenance is None and sent:
        how = f" ({unstored})" if unstored else ""
        problems.append(f"the PTKB provenance ({len(sent)} statement{'s' if len(sent) != 1 else ''}) was not "
                        f"stored{how}")
    elif provenance is not None and list(provenance) != sent:
        problems.append("the PTKB provenance differs")
    return problems


def _same_citations(sent: dict[str, float], stored: Any) -> bool:
    if not isinstance(stored, dict) or set(stored) != set(sent):
        return False
    return all(abs(float(stored[k]) - float(v)) <= 1e-9 * max(1.0, abs(float(v))) for k, v in sent.items())
