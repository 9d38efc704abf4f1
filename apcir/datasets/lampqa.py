"""LaMP-QA (Salemi and Zamani, 2025) as a topic set: personalised long-form questions judged against given
rubric aspects, with no retrieval.

A LaMP-QA file is a JSON list (or JSONL) of questions, with the fields the LaMP-QA repository describes: the
question (``question``), the user's earlier questions with their descriptions as the profile (``profile``, a
list of ``{"text"|"question", "description"|"detail"}`` or strings), the hidden narrative (``narrative``) and
its rubric aspects (``rubric_aspects``, a list of ``{"aspect", "reason", "evidence"}`` or strings), and an id
(``id``). The field names follow that description; the published files were not at hand on the machine this
was written on, so a file whose names differ is refused with the names found.

Each question becomes one :class:`~apcir.contract.records.Turn` (conversation ``lampqa-<id>``, turn 1): its
utterance the question, its PTKB the profile entries (``question — description``), no history, no canonical
response. :func:`rubric_aspects` gives the aspects the judge scores (0-2 each, normalised by 2 and averaged,
LaMP-QA section 3.2). apcir does not bundle LaMP-QA: pass the file (``--topics lampqa:FILE``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from apcir.contract.records import Turn
from apcir.errors import ApcirError
from apcir.io import iter_jsonl, read_json

PREFIX = "lampqa:"
FIELDS = ("id", "question", "profile", "rubric_aspects")


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        raise ApcirError("LaMP-QA file not found", path=path)
    if path.suffix == ".jsonl":
        return [row for _, row in iter_jsonl(path, "LaMP-QA file")]
    data = read_json(path, "LaMP-QA file")
    if not isinstance(data, list):
        raise ApcirError("expected a JSON list of LaMP-QA questions", path=path)
    return data


def _check(row: Any, n: int, path: Path) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise ApcirError(f"question #{n} is not an object", path=path)
    missing = [f for f in FIELDS if f not in row]
    if missing:
        raise ApcirError(f"question #{n} lacks {', '.join(missing)} (has {', '.join(sorted(row))}); expected the "
                         "LaMP-QA fields id, question, profile, narrative, rubric_aspects", path=path)
    if not isinstance(row["question"], str) or not row["question"].strip():
        raise ApcirError(f"question #{n}: empty question", path=path)
    return row


def _profile_entry(entry: Any) -> str:
    if isinstance(entry, str):
        return entry.strip()
    if isinstance(entry, dict):
        question = str(entry.get("text") or entry.get("question") or "").strip()
        description = str(entry.get("description") or entry.get("detail") or "").strip()
        return f"{question} — {description}" if question and description else question or description
    return ""


def _aspect(entry: Any) -> str:
    if isinstance(entry, str):
        return entry.strip()
    if isinstance(entry, dict):
        return str(entry.get("aspect") or entry.get("title") or "").strip()
    return ""


def turn_id(question_id: Any) -> str:
    return f"lampqa-{str(question_id).strip().replace('_', '-').replace(' ', '-')}_1"


def load_lampqa(path: str | Path) -> list[Turn]:
    """The questions of a LaMP-QA file as turns (see the module doc)."""
    path = Path(str(path).removeprefix(PREFIX)).expanduser()
    turns, seen = [], set()
    for n, raw in enumerate(_records(path), start=1):
        row = _check(raw, n, path)
        tid = turn_id(row["id"])
        if tid in seen:
            raise ApcirError(f"question id {row['id']!r} appears twice", path=path)
        seen.add(tid)
        profile = row["profile"] if isinstance(row["profile"], list) else []
        statements = [s for s in (_profile_entry(e) for e in profile) if s]
        conversation = tid.rpartition("_")[0]
        turns.append(Turn(turn_id=tid, conversation_id=conversation, turn_number=1, title=str(row.get("category", "")),
                          utterance=row["question"].strip(), ptkb={str(i): s for i, s in enumerate(statements, 1)}))
    if not turns:
        raise ApcirError("no questions in the file", path=path)
    return turns


def rubric_aspects(path: str | Path) -> dict[str, list[str]]:
    """Turn id -> its rubric aspects (a question without any is an error: nothing to judge it by)."""
    path = Path(str(path).removeprefix(PREFIX)).expanduser()
    aspects: dict[str, list[str]] = {}
    for n, raw in enumerate(_records(path), start=1):
        row = _check(raw, n, path)
        items = [a for a in (_aspect(e) for e in (row["rubric_aspects"] or [])) if a]
        if not items:
            raise ApcirError(f"question {row['id']!r} has no rubric aspect", path=path)
        aspects[turn_id(row["id"])] = items
    return aspects
