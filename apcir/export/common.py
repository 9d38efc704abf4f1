"""What every iKAT submission format shares: the inputs, the response text, and the checks of the organisers' validators.

The response ``text`` is chosen by ``mode``: ``pseudo`` uses the LLM's
pseudo-response for the turn (the personalised one, ``third_response``, at
levels b/c; ``response`` at level a), ``passage`` uses the text of the
top-ranked passage when the collection is at hand. Either falls back to the
other, then to the rewrite.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from apcir.contract.records import Run, Turn
from apcir.contract.reformulations import ReformulationRecord
from apcir.contract.runs import ranking
from apcir.errors import ApcirError
from apcir.ids import canonical_turn_id

CLUEWEB_ID = re.compile(r"^clueweb22-en\d{4}-\d{2}-\d{5}:\d+$")
MAX_PROVENANCE = 1000
TextMode = Literal["pseudo", "passage"]


@dataclass
class SubmissionInputs:
    """Everything a format needs to write a submission."""

    run: Run
    turns: list[Turn]
    run_name: str
    run_type: str = "automatic"
    team_id: str = "apcir"
    reformulations: Mapping[str, ReformulationRecord] = field(default_factory=dict)
    passages: Mapping[str, str] = field(default_factory=dict)
    mode: TextMode = "pseudo"
    used_top: int = 5
    depth: int = MAX_PROVENANCE


def response_text(
    turn_id: str,
    hits: list[tuple[str, float]],
    record: ReformulationRecord | None,
    passages: Mapping[str, str],
    mode: TextMode,
) -> str:
    """The text a response carries: the pseudo-response or the top passage (see module docstring)."""
    pseudo = ""
    if record is not None and record.output is not None:
        out = record.output
        pseudo = (out.third_response if out.level in ("b", "c") else out.response) or out.response
    top = passages.get(hits[0][0], "") if hits else ""
    for text in ((pseudo, top) if mode == "pseudo" else (top, pseudo)):
        if text.strip():
            return text.strip()
    if record is not None and record.output is not None and record.output.rewrite.strip():
        return record.output.rewrite.strip()
    return ""  # nothing to say: `apcir validate` flags the empty text


def submitted_hits(run: Run, turn_id: str, depth: int) -> list[tuple[str, float]]:
    """A turn's passages in the ranking order, with scores as trec_eval reads them (32-bit floats).

    Two passages whose scores tie for trec_eval then tie in the file too, so the
    order (ties by passage id descending) is visibly non-increasing to any reader.
    """
    return [(pid, float(np.float32(score))) for pid, score in ranking(run.get(turn_id, {}), min(depth, MAX_PROVENANCE))]


def ptkb_used(turn: Turn, record: ReformulationRecord | None) -> list[str]:
    """Statement ids the reformulation relied on, kept only if they are in the profile, in order."""
    if record is None or record.output is None:
        return []
    seen: list[str] = []
    for statement in record.output.ptkb_used:
        key = str(statement).strip()
        if key in turn.ptkb and key not in seen:
            seen.append(key)
    return seen


# ---- checks shared by the formats ----------------------------------------------------------------
def submitted_turn_id(raw: Any) -> str:
    """A submission's turn id in apcir's form (``9-1_3``; ``9-1-3`` is accepted), or as written if it is neither."""
    try:
        return canonical_turn_id(str(raw))
    except ApcirError:
        return str(raw)


def score_problems(scores: list[Any], at: str, what: str) -> list[str]:
    """Scores must be finite numbers, non-increasing in the order given (one problem per break, not per item)."""
    problems = []
    previous = float("inf")
    for position, score in enumerate(scores, start=1):
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            problems.append(f"{at}: {what} #{position} score {score!r} is not a finite number")
            continue
        if score > previous:
            problems.append(f"{at}: {what} #{position} score {score} is higher than the one before ({previous})")
        previous = float(score)
    return problems


def coverage_problems(submitted: list[str], turns: list[Turn]) -> list[str]:
    """Repeated turns, turns not in the topics, and topic turns missing, per conversation."""
    problems = []
    expected = {t.turn_id for t in turns}
    counts = Counter(submitted)
    for turn_id, count in sorted(counts.items()):
        if count > 1:
            problems.append(f"turn {turn_id} appears {count} times")
    for turn_id in sorted(set(submitted) - expected):
        problems.append(f"turn {turn_id!r} is not in the topics")
    conversations: dict[str, list[str]] = {}
    for turn in turns:
        if turn.turn_id not in counts:
            conversations.setdefault(turn.conversation_id, []).append(turn.turn_id)
    for conversation, missing in conversations.items():
        problems.append(f"conversation {conversation}: missing turn(s) {', '.join(missing)}")
    return problems


def ptkb_problems(items: Any, at: str, topic: Turn | None, objects: bool) -> list[str]:
    """PTKB provenance: a list of statement ids (``objects``: ``{id, text, score}``) within the profile."""
    if items is None:
        return [f"{at}: ptkb_provenance missing"]
    if not isinstance(items, list):
        return [f"{at}: ptkb_provenance is not a list"]
    problems = []
    for item in items:
        statement = str(item.get("id", "")) if isinstance(item, dict) else str(item)
        if objects and not isinstance(item, dict):
            problems.append(f"{at}: 2023 PTKB provenance must be {{id, text, score}} objects")
            continue
        if topic is not None and statement not in topic.ptkb:
            problems.append(f"{at}: PTKB id {statement!r} is not in the profile (ids 1-{len(topic.ptkb)})")
        elif topic is not None and isinstance(item, dict) and item.get("text") not in (None, topic.ptkb[statement]):
            problems.append(f"{at}: PTKB {statement} text does not match the profile")
    return problems
