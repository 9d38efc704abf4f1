"""Loaders for the iKAT topic files of 2023, 2024 and 2025.

2023/2024: a list of ``{number, title, ptkb: {"1": ...}, turns: [{turn_id,
utterance, resolved_utterance, response, ptkb_provenance, response_provenance}]}``
(2024 writes ``number`` as an int). 2025: ``ptkb`` is a list whose 1-based
positions are the statement ids, and turns sit under ``responses`` with
``user_utterance``, ``relevant_ptkbs`` (statement texts) and ``citations``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from apcir.contract.records import HistoryEntry, Turn
from apcir.errors import ApcirError
from apcir.ids import make_turn_id
from apcir.io import read_json


def load_topics(path: Path) -> list[Turn]:
    """All turns of a topic file, in conversation order, each with its history."""
    data = read_json(path)
    if not isinstance(data, list) or not data:
        raise ApcirError("expected a non-empty JSON list of conversations (iKAT topic file)", path=path)
    turns: list[Turn] = []
    for index, conversation in enumerate(data):
        turns.extend(_conversation_turns(conversation, index, path))
    return turns


def _conversation_turns(conv: Any, index: int, path: Path) -> list[Turn]:
    if not isinstance(conv, dict) or "number" not in conv:
        raise ApcirError(
            f"conversation #{index + 1} is not an object with a 'number' field; "
            "expected the iKAT 2023/2024 schema (turns) or the 2025 schema (responses)",
            path=path,
        )
    conv_id = str(conv["number"])
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
        turn = _turn(raw, schema, conv_id, str(conv.get("title", "")), ptkb, history, path)
        turns.append(turn)
        history = [*history, HistoryEntry(turn_id=turn.turn_id, utterance=turn.utterance, response=turn.response)]
    return turns


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
    turn_id = make_turn_id(conv_id, raw["turn_id"])
    if schema == "2023":
        ptkb_ids = [str(i) for i in raw.get("ptkb_provenance", [])]
        provenance = [str(p) for p in raw.get("response_provenance", [])]
    else:
        ptkb_ids = [_ptkb_id_of_text(t, ptkb, turn_id, path) for t in raw.get("relevant_ptkbs", [])]
        provenance = [str(p) for p in raw.get("citations", [])]
    unknown = [i for i in ptkb_ids if i not in ptkb]
    if unknown:
        raise ApcirError(f"turn {turn_id}: PTKB provenance {unknown} not in the profile", path=path)
    return Turn(
        turn_id=turn_id,
        conversation_id=conv_id,
        turn_number=int(raw["turn_id"]),
        title=title,
        utterance=str(raw[utterance_key]),
        manual_rewrite=str(raw.get("resolved_utterance", "")),
        response=str(raw.get("response", "")),
        ptkb=ptkb,
        ptkb_provenance=ptkb_ids,
        response_provenance=provenance,
        history=history,
    )


def _ptkb_from_mapping(raw: Any, conv_id: str, path: Path) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise ApcirError(f"conversation {conv_id}: 'ptkb' should be an object id -> statement", path=path)
    return {str(k): str(v) for k, v in raw.items()}


def _ptkb_from_list(raw: Any, conv_id: str, path: Path) -> dict[str, str]:
    if not isinstance(raw, list):
        raise ApcirError(f"conversation {conv_id}: 'ptkb' should be a list of statements", path=path)
    return {str(i): str(v) for i, v in enumerate(raw, start=1)}


def _ptkb_id_of_text(text: str, ptkb: dict[str, str], turn_id: str, path: Path) -> str:
    for statement_id, statement in ptkb.items():
        if statement.strip() == str(text).strip():
            return statement_id
    raise ApcirError(f"turn {turn_id}: relevant PTKB statement {text!r} is not in the profile", path=path)
