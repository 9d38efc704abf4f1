"""iKAT submission formats.

- ``ikat24``: the 2024 JSON run (``run_name``, ``run_type``, ``turns`` ->
  ``responses`` with ``rank``, ``text``, ``ptkb_provenance`` as statement ids
  and ``passage_provenance`` as ``{id, text, score, used}``), per the
  organisers' 2024 protocol buffer.
- ``ikat23``: the 2023 JSON run; same shape, but ``ptkb_provenance`` entries
  are ``{id, text, score}`` objects and passage provenance has no ``used`` flag
  (2023 protocol buffer).
- ``ikat25``: the 2025 JSONL, one line per turn: ``metadata`` (``team_id``,
  ``run_id``, ``run_type``), ``turn_id``, ``references`` (passage id -> score,
  at most 1,000), ``responses`` with ``text``, ``citations`` (id -> score) and
  ``ptkb_provenance`` (statement ids).

apcir has no response generator yet. The response ``text`` is chosen by
``response_text``: ``pseudo`` uses the LLM's pseudo-response for the turn
(the personalised one, ``third_response``, at levels b/c; ``response`` at
level a), ``passage`` uses the text of the top-ranked passage when the
collection is at hand. Either falls back to the other, then to the rewrite.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from apcir.errors import ApcirError
from apcir.export.trec import sorted_hits
from apcir.llm.schema import ReformulationRecord
from apcir.models import Run, Turn

SubmissionFormat = Literal["ikat23", "ikat24", "ikat25"]
FORMATS: tuple[str, ...] = ("ikat23", "ikat24", "ikat25")
MAX_PROVENANCE = 1000


def response_text(
    turn_id: str,
    hits: list[tuple[str, float]],
    record: ReformulationRecord | None,
    passages: Mapping[str, str],
    mode: Literal["pseudo", "passage"],
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
    raise ApcirError(f"turn {turn_id}: no response text (no pseudo-response, no passage text, no rewrite)")


def build_submission(
    run: Run,
    turns: list[Turn],
    *,
    fmt: SubmissionFormat,
    run_name: str,
    run_type: str = "automatic",
    team_id: str = "apcir",
    reformulations: Mapping[str, ReformulationRecord] | None = None,
    passages: Mapping[str, str] | None = None,
    mode: Literal["pseudo", "passage"] = "pseudo",
    used_top: int = 5,
    depth: int = MAX_PROVENANCE,
) -> list[dict[str, Any]] | dict[str, Any]:
    """The submission as JSON-ready data: a dict (2023/2024) or a list of JSONL lines (2025).

    Every topic turn appears, in topic order; a turn the run lacks gets an
    empty ranking and is reported by :func:`apcir.export.validate.validate_submission`.
    """
    if fmt not in FORMATS:
        raise ApcirError(f"unknown submission format {fmt!r}: expected one of {', '.join(FORMATS)}")
    reformulations = reformulations or {}
    passages = passages or {}
    depth = min(depth, MAX_PROVENANCE)
    entries = []
    for turn in turns:
        hits = sorted_hits(run.get(turn.turn_id, {}), depth)
        record = reformulations.get(turn.turn_id)
        text = response_text(turn.turn_id, hits, record, passages, mode) if hits or record else ""
        ptkb_ids = _ptkb_used(turn, record)
        if fmt == "ikat25":
            references = dict(hits)
            entries.append(
                {
                    "metadata": {"team_id": team_id, "run_id": run_name, "run_type": run_type},
                    "turn_id": turn.turn_id,
                    "references": references,
                    "responses": [
                        {
                            "text": text,
                            "citations": dict(hits[:used_top]),
                            "ptkb_provenance": [int(i) for i in ptkb_ids],
                        }
                    ],
                }
            )
            continue
        provenance = []
        for rank, (pid, score) in enumerate(hits, start=1):
            item: dict[str, Any] = {"id": pid, "score": score}
            if rank <= used_top and pid in passages:
                item["text"] = passages[pid]  # only the passages the response uses: keeps the file small
            if fmt == "ikat24":
                item["used"] = rank <= used_top
            provenance.append(item)
        ptkb: list[Any]
        if fmt == "ikat24":
            ptkb = [int(i) for i in ptkb_ids]
        else:
            ptkb = [
                {"id": i, "text": turn.ptkb[i], "score": 1.0 - n / max(len(ptkb_ids), 1)}
                for n, i in enumerate(ptkb_ids)
            ]
        entries.append(
            {
                "turn_id": turn.turn_id,
                "responses": [{"rank": 1, "text": text, "ptkb_provenance": ptkb, "passage_provenance": provenance}],
            }
        )
    if fmt == "ikat25":
        return entries
    return {"run_name": run_name, "run_type": run_type, "turns": entries}


def write_submission(data: list[dict[str, Any]] | dict[str, Any], path: Path) -> None:
    """Write a submission atomically: JSONL for a list (2025), indented JSON otherwise."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        if isinstance(data, list):
            for entry in data:
                out.write(json.dumps(entry, ensure_ascii=False) + "\n")
        else:
            json.dump(data, out, ensure_ascii=False, indent=1)
            out.write("\n")
    tmp.replace(path)


def _ptkb_used(turn: Turn, record: ReformulationRecord | None) -> list[str]:
    """Statement ids the reformulation relied on, kept only if they are in the profile, in order."""
    if record is None or record.output is None:
        return []
    seen: list[str] = []
    for statement in record.output.ptkb_used:
        key = str(statement).strip()
        if key in turn.ptkb and key not in seen:
            seen.append(key)
    return seen
