"""The iKAT 2025 JSONL run: one line per turn with ``metadata`` (``team_id``,
``run_id``, ``run_type``), ``turn_id``, ``references`` (passage id -> score, at
most 1,000) and ``responses`` with ``text``, ``citations`` (id -> score) and
``ptkb_provenance`` (statement ids)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from apcir.contract.records import Turn
from apcir.export.common import (
    CLUEWEB_ID,
    MAX_PROVENANCE,
    SubmissionInputs,
    coverage_problems,
    ptkb_problems,
    ptkb_used,
    response_text,
    score_problems,
    submitted_hits,
    submitted_turn_id,
)
from apcir.export.formats import FORMATS
from apcir.io import iter_lines


def build(inputs: SubmissionInputs) -> list[dict[str, Any]]:
    entries = []
    for turn in inputs.turns:
        hits = submitted_hits(inputs.run, turn.turn_id, inputs.depth)
        record = inputs.reformulations.get(turn.turn_id)
        text = response_text(turn.turn_id, hits, record, inputs.passages, inputs.mode) if hits or record else ""
        entries.append({
            "metadata": {"team_id": inputs.team_id, "run_id": inputs.run_name, "run_type": inputs.run_type},
            "turn_id": turn.turn_id,
            "references": dict(hits),
            "responses": [{
                "text": text,
                "citations": dict(hits[: inputs.used_top]),
                "ptkb_provenance": [int(i) for i in ptkb_used(turn, record)],
            }],
        })
    return entries


def check(path: Path, turns: list[Turn]) -> list[str]:
    by_id = {t.turn_id: t for t in turns}
    entries: list[tuple[int, dict[str, Any]]] = []
    problems: list[str] = []
    for number, line in iter_lines(path, "submission"):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"line {number}: malformed JSON ({exc.msg})")
            continue
        if isinstance(entry, dict):
            entries.append((number, entry))
        else:
            problems.append(f"line {number}: not a JSON object")
    submitted = [submitted_turn_id(e.get("turn_id", "")) for _, e in entries]
    for number, entry in entries:
        problems.extend(_check_entry(entry, number, by_id))
    return coverage_problems(submitted, turns) + problems


def _check_entry(entry: dict[str, Any], line: int, by_id: dict[str, Turn]) -> list[str]:
    at = f"line {line} (turn {entry.get('turn_id')})"
    problems = []
    metadata = entry.get("metadata")
    if not isinstance(metadata, dict):
        problems.append(f"{at}: metadata must be an object")
    else:
        missing = {"team_id", "run_id", "run_type"} - set(metadata)
        if missing:
            problems.append(f"{at}: metadata lacks {sorted(missing)}")
        run_types = FORMATS.get("ikat25").run_types
        if metadata.get("run_type") not in run_types:
            problems.append(f"{at}: run_type {metadata.get('run_type')!r} is not one of {', '.join(run_types)}")
    references = entry.get("references")
    if not isinstance(references, dict):
        return [*problems, f"{at}: references must be an object passage id -> score"]
    if len(references) > MAX_PROVENANCE:
        problems.append(f"{at}: {len(references)} references, at most {MAX_PROVENANCE} allowed")
    for pid in references:
        if not CLUEWEB_ID.match(pid):
            problems.append(f"{at}: reference {pid!r} is not of the form clueweb22-enXXXX-XX-XXXXX:N")
    problems += score_problems(list(references.values()), at, "reference")
    responses = entry.get("responses")
    if not isinstance(responses, list) or not responses:
        return [*problems, f"{at}: no responses"]
    topic = by_id.get(submitted_turn_id(entry.get("turn_id", "")))
    for index, response in enumerate(responses, start=1):
        where = f"{at}, response {index}"
        if not isinstance(response, dict):
            problems.append(f"{where}: not an object")
            continue
        if not str(response.get("text", "")).strip():
            problems.append(f"{where}: empty text")
        citations = response.get("citations")
        if not isinstance(citations, dict):
            problems.append(f"{where}: citations must be an object passage id -> score")
        else:
            problems.extend(f"{where}: citation {c} is not among the references" for c in citations if c not in references)
        problems.extend(ptkb_problems(response.get("ptkb_provenance"), where, topic, objects=False))
    return problems
