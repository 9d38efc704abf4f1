"""Turn identifiers.

iKAT qrels and the official submission format use ``<conversation>_<turn>``
(``9-1_3``, ``0_8``); many tools write ``9-1-3``. The canonical form in apcir
is the official one. Conversation ids themselves may contain ``-`` (``9-1``),
so the dashed form is split at its last dash.

Every id that ends up in a TREC run line (a turn id, a passage id) must be a
non-empty string without whitespace, since the line's fields are separated by
whitespace: :func:`check_run_id` is the one check the readers share.
"""

from __future__ import annotations

import re
from pathlib import Path

from apcir.errors import ApcirError

_CANONICAL = re.compile(r"^(?P<conv>[A-Za-z0-9-]+)_(?P<turn>\d+)$")
_DASHED = re.compile(r"^(?P<conv>[A-Za-z0-9-]+)-(?P<turn>\d+)$")


def make_turn_id(conversation_id: str | int, turn_number: str | int) -> str:
    """The canonical turn id of a conversation and a turn number."""
    return f"{conversation_id}_{turn_number}"


def split_turn_id(turn_id: str) -> tuple[str, int]:
    """``(conversation_id, turn_number)`` of a canonical or dashed turn id."""
    text = str(turn_id).strip()
    match = _CANONICAL.match(text) or _DASHED.match(text)
    if match is None:
        raise ApcirError(
            f"turn id {turn_id!r} is not of the form <conversation>_<turn> (9-1_3) "
            "or <conversation>-<turn> (9-1-3)"
        )
    return match["conv"], int(match["turn"])


def canonical_turn_id(turn_id: str) -> str:
    """``9-1-3`` and ``9-1_3`` both become ``9-1_3``."""
    conv, turn = split_turn_id(turn_id)
    return make_turn_id(conv, turn)


def dashed_turn_id(turn_id: str) -> str:
    """``9-1_3`` and ``9-1-3`` both become ``9-1-3``."""
    conv, turn = split_turn_id(turn_id)
    return f"{conv}-{turn}"


def run_id_problem(value: str) -> str | None:
    """Why ``value`` cannot be a field of a TREC run line (``"is empty"``, ``"contains whitespace, ..."``), or None."""
    if not value:
        return "is empty"
    if any(c.isspace() for c in value):
        return "contains whitespace, which TREC run files cannot hold"
    return None


def check_run_id(value: str, what: str, path: str | Path | None = None, line: int | None = None) -> str:
    """``value`` if it can be a turn or passage id of a run file; otherwise a user error ``<what> '<value>' ...``."""
    problem = run_id_problem(value)
    if problem is not None:
        raise ApcirError(f"{what} {value!r} {problem}", path=path, line=line)
    return value


def natural_key(turn_id: str) -> tuple[tuple[int, int | str], ...]:
    """A sort key that orders turn ids as people read them: ``10-1_2`` before ``10-1_14``, ``9-1`` before ``10-1``."""
    import re

    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", turn_id) if part)
