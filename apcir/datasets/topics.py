"""Loaders for the iKAT topic files of 2023, 2024 and 2025.

2023/2024: a list of ``{number, title, ptkb: {"1": ...}, turns: [{turn_id,
utterance, resolved_utterance, response, ptkb_provenance, response_provenance}]}``
(2024 writes ``number`` as an int). 2025: ``ptkb`` is a list whose 1-based
positions are the statement ids, and turns sit under ``responses`` with
``user_utterance``, ``relevant_ptkbs`` (statement texts) and ``citations``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apcir.console import shown, warn
from apcir.contract.records import HistoryEntry, Turn
from apcir.errors import ApcirError
from apcir.ids import make_turn_id
from apcir.io import read_json
from apcir.settings import whole_number


@dataclass(frozen=True)
class TopicYear:
    """An iKAT year's topic schema, as its organisers' validator tells it: the conversations of a topic file
    ``fit`` the year or not."""

    year: int
    fits: Callable[[list[dict[str, Any]]], bool]
    description: str


def _turn_number(number: Any) -> int | None:
    """A turn's number as a topic file writes it (an integer, or its ASCII digits as text: ``str.isdigit`` also
    takes ``²``, which ``int`` refuses), or None when it is not a number from 1."""
    if isinstance(number, str):
        text = number.strip()
        number = int(text) if whole_number(text) and len(text) <= 18 else None
    return number if isinstance(number, int) and not isinstance(number, bool) and 1 <= number < 10**18 else None


def _integer_numbers(conversations: list[dict[str, Any]]) -> bool:
    numbers = [c.get("number") for c in conversations]
    return bool(numbers) and all(isinstance(n, int) and not isinstance(n, bool)
                                 or (isinstance(n, str) and whole_number(n.strip())) for n in numbers)


TOPIC_YEARS: tuple[TopicYear, ...] = (
    TopicYear(2025, lambda conversations: any("responses" in c for c in conversations),
              "the 2025 schema: turns under 'responses'"),
    TopicYear(2024, _integer_numbers, "conversation numbers that are all integers (17; the 2024 files write them as "
                                      "JSON numbers), whose validator parses turn ids as <int>_<int>"),
    TopicYear(2023, lambda conversations: True, "anything else (9-1)"),
)
"""The years a topic file is told by, the most particular first: the first that fits is the file's year."""


def year_of_topics(data: Any) -> int:
    """The iKAT year of a topic file's content (:data:`TOPIC_YEARS`)."""
    conversations = [c for c in data if isinstance(c, dict)] if isinstance(data, list) else []
    return next(y.year for y in TOPIC_YEARS if y.fits(conversations))


def load_topics(path: Path) -> list[Turn]:
    """All turns of a topic file, in conversation order, each with its history.

    Malformed conversations and turns are errors naming the conversation and
    turn; a repeated conversation or turn id is an error (it would silently
    replace the other); empty utterances are accepted with a warning (a
    reformulator then fails those turns rather than searching nothing), and so
    are empty PTKB statements. A conversation without turns is skipped with a
    warning naming it; a file without any turn is an error.
    """
    data = read_json(path, "topic file")
    if not isinstance(data, list) or not data:
        raise ApcirError("expected a non-empty JSON list of conversations (iKAT topic file)", path=path)
    turns: list[Turn] = []
    seen: dict[str, int] = {}
    without_turns: list[str] = []
    for index, conversation in enumerate(data):
        conv_id, conv_turns = _conversation_turns(conversation, index, path)
        if conv_id in seen:
            raise ApcirError(
                f"conversation {conv_id} appears twice (conversations #{seen[conv_id] + 1} and #{index + 1})",
                path=path,
            )
        seen[conv_id] = index
        if not conv_turns:
            without_turns.append(conv_id)
        turns.extend(conv_turns)
    if not turns:
        raise ApcirError(f"no conversation has a turn ({len(data)} conversation(s), every 'turns' / 'responses' list "
                         "is empty): nothing to work on", path=path)
    if without_turns:
        warn(f"{path}: {len(without_turns)} conversation(s) have no turns and are skipped: {shown(without_turns)}")
    empty = [t.turn_id for t in turns if not t.utterance.strip()]
    if empty:
        warn(f"{path}: {len(empty)} turn(s) have an empty utterance: {shown(empty)}")
    return turns



def _conversation_turns(conv: Any, index: int, path: Path) -> tuple[str, list[Turn]]:
    if not isinstance(conv, dict) or "number" not in conv:
        raise ApcirError(
            f"conversation #{index + 1} is not an object with a 'number' field; "
            "expected the iKAT 2023/2024 schema (turns) or the 2025 schema (responses)",
            path=path,
        )
    if not isinstance(conv["number"], (str, int)) or isinstance(conv["number"], bool) or not str(conv["number"]).strip():
        raise ApcirError(f"conversation #{index + 1}: 'number' must be a string or an integer", path=path)
    conv_id = str(conv["number"]).strip()
    if any(c.isspace() or c == "_" for c in conv_id):
        raise ApcirError(f"conversation {conv_id!r}: its number may not contain spaces or '_'", path=path)
    if "turns" in conv:
        ptkb = _ptkb_from_mapping(conv.get("ptkb", {}), conv_id, path)
        raw_turns, schema = conv["turns"], "2023"
    elif "responses" in conv:
        ptkb = _ptkb_from_list(conv.get("ptkb", []), conv_id, path)
        raw_turns, schema = conv["responses"], "2025"
    else:
        raise ApcirError(
            f"conversation {conv_id} has neither 'turns' (iKAT 2023/2024 schema) nor "
            "'responses' (iKAT 2025 schema): unknown topic schema",
            path=path,
        )
    if not isinstance(raw_turns, list):
        raise ApcirError(f"conversation {conv_id}: expected a list of turns", path=path)
    turns: list[Turn] = []
    history: list[HistoryEntry] = []
    for raw in raw_turns:
        turn = _turn(raw, schema, conv_id, _text(conv.get("title"), f"conversation {conv_id}: title", path), ptkb,
                     history, path)
        if any(t.turn_id == turn.turn_id for t in turns):
            raise ApcirError(f"conversation {conv_id}: turn {turn.turn_number} appears twice", path=path)
        turns.append(turn)
        history = [*history, HistoryEntry(turn_id=turn.turn_id, utterance=turn.utterance, response=turn.response)]
    blank = [sid for sid, statement in ptkb.items() if not statement.strip()]
    if blank and turns:
        warn(f"{path}: conversation {conv_id}: {len(blank)} PTKB statement(s) are empty: {shown(blank)}")
    return conv_id, turns


def _turn(
    raw: Any,
    schema: str,
    conv_id: str,
    title: str,
    ptkb: dict[str, str],
    history: list[HistoryEntry],
    path: Path,
) -> Turn:
    utterance_key = "utterance" if schema == "2023" else "user_utterance"
    if not isinstance(raw, dict) or "turn_id" not in raw or utterance_key not in raw:
        raise ApcirError(
            f"conversation {conv_id}: a turn lacks 'turn_id' or '{utterance_key}' "
            f"(iKAT {'2023/2024' if schema == '2023' else '2025'} schema)",
            path=path,
        )
    number = _turn_number(raw["turn_id"])
    if number is None:
        shown = raw["turn_id"] if not isinstance(raw["turn_id"], str) or len(raw["turn_id"]) <= 40 else \
            f"{raw['turn_id'][:20]}...({len(raw['turn_id'])} characters)"
        raise ApcirError(f"conversation {conv_id}: turn_id {shown!r} is not a turn number (1, 2, ...)", path=path)
    turn_id = make_turn_id(conv_id, number)
    utterance = raw[utterance_key]
    if not isinstance(utterance, str):
        raise ApcirError(f"turn {turn_id}: '{utterance_key}' must be text, found {type(utterance).__name__}", path=path)
    if schema == "2023":
        ptkb_ids = [str(i) for i in _list(raw.get("ptkb_provenance"), f"turn {turn_id}: ptkb_provenance", path)]
        provenance = [str(p) for p in _list(raw.get("response_provenance"), f"turn {turn_id}: response_provenance",
                                            path)]
    else:
        ptkb_ids = [_ptkb_id_of_text(t, ptkb, turn_id, path)
                    for t in _list(raw.get("relevant_ptkbs"), f"turn {turn_id}: relevant_ptkbs", path)]
        provenance = [str(p) for p in _list(raw.get("citations"), f"turn {turn_id}: citations", path)]
    unknown = [i for i in ptkb_ids if i not in ptkb]
    if unknown:
        raise ApcirError(f"turn {turn_id}: PTKB provenance {unknown} not in the profile", path=path)
    return Turn(
        turn_id=turn_id,
        conversation_id=conv_id,
        turn_number=number,
        title=title,
        utterance=utterance,
        manual_rewrite=_text(raw.get("resolved_utterance"), f"turn {turn_id}: resolved_utterance", path),
        response=_text(raw.get("response"), f"turn {turn_id}: response", path),
        ptkb=ptkb,
        ptkb_provenance=ptkb_ids,
        response_provenance=provenance,
        history=history,
    )


def _text(value: Any, what: str, path: Path) -> str:
    """An optional text field: missing or null is empty; anything but text is an error."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ApcirError(f"{what} must be text, found {type(value).__name__}", path=path)
    return value


def _list(value: Any, what: str, path: Path) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ApcirError(f"{what} must be a list, found {type(value).__name__}", path=path)
    return value


def _ptkb_from_mapping(raw: Any, conv_id: str, path: Path) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ApcirError(f"conversation {conv_id}: 'ptkb' should be an object id -> statement", path=path)
    return {str(k).strip(): _text(v, f"conversation {conv_id}: PTKB statement {k}", path) for k, v in raw.items()}


def _ptkb_from_list(raw: Any, conv_id: str, path: Path) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise ApcirError(f"conversation {conv_id}: 'ptkb' should be a list of statements", path=path)
    return {str(i): _text(v, f"conversation {conv_id}: PTKB statement {i}", path) for i, v in enumerate(raw, start=1)}


def _ptkb_id_of_text(text: str, ptkb: dict[str, str], turn_id: str, path: Path) -> str:
    for statement_id, statement in ptkb.items():
        if statement.strip() == str(text).strip():
            return statement_id
    raise ApcirError(f"turn {turn_id}: relevant PTKB statement {text!r} is not in the profile", path=path)
