"""The iKAT 2023 and 2024 JSON runs.

- ``ikat24``: ``run_name``, ``run_type``, ``turns`` -> ``responses`` with
  ``rank``, ``text``, ``ptkb_provenance`` as statement ids and
  ``passage_provenance`` as ``{id, text, score, used}``, per the organisers'
  2024 protocol buffer.
- ``ikat23``: the same shape, but ``ptkb_provenance`` entries are ``{id, text,
  score}`` objects and passage provenance has no ``used`` flag (2023 protocol buffer).

Provenance text is written only for the passages the response uses (the top
``used_top``): with every text, a 332-turn submission was 428 MB.
"""

from __future__ import annotations

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
from apcir.io import read_json


def _build(inputs: SubmissionInputs, year: int) -> dict[str, Any]:
    entries = []
    for turn in inputs.turns:
        hits = submitted_hits(inputs.run, turn.turn_id, inputs.depth)
        record = inputs.reformulations.get(turn.turn_id)
        text = response_text(turn.turn_id, hits, record, inputs.passages, inputs.mode) if hits or record else ""
        ids = ptkb_used(turn, record)
        provenance = []
        for rank, (pid, score) in enumerate(hits, start=1):
            item: dict[str, Any] = {"id": pid, "score": score}
            if rank <= inputs.used_top and pid in inputs.passages:
                item["text"] = inputs.passages[pid]
            if year == 2024:
                item["used"] = rank <= inputs.used_top
            provenance.append(item)
        ptkb: list[Any]
        if year == 2024:
            ptkb = [int(i) for i in ids]
        else:
            ptkb = [{"id": i, "text": turn.ptkb[i], "score": 1.0 - n / max(len(ids), 1)} for n, i in enumerate(ids)]
        entries.append({
            "turn_id": turn.turn_id,
            "responses": [{"rank": 1, "text": text, "ptkb_provenance": ptkb, "passage_provenance": provenance}],
        })
    return {"run_name": inputs.run_name, "run_type": inputs.run_type, "turns": entries}


def build_2023(inputs: SubmissionInputs) -> dict[str, Any]:
    return _build(inputs, 2023)


def build_2024(inputs: SubmissionInputs) -> dict[str, Any]:
    return _build(inputs, 2024)


def _check(path: Path, turns: list[Turn], year: int) -> list[str]:
    data = read_json(path, "submission")
    by_id = {t.turn_id: t for t in turns}
    problems: list[str] = []
    if not isinstance(data, dict):
        return ["the file is not a JSON object with run_name, run_type and turns"]
    if not str(data.get("run_name", "")).strip():
        problems.append("run_name is missing or empty")
    run_types = FORMATS.get(f"ikat{year % 100}").run_types
    if data.get("run_type") not in run_types:
        problems.append(f"run_type {data.get('run_type')!r} is not one of {', '.join(run_types)}")
    raw_turns = data.get("turns")
    if not isinstance(raw_turns, list) or not raw_turns:
        return [*problems, "turns is missing or empty"]
    submitted = [submitted_turn_id(t.get("turn_id", "")) if isinstance(t, dict) else "" for t in raw_turns]
    for raw in raw_turns:
        problems.extend(_check_turn(raw, by_id, year))
    return coverage_problems(submitted, turns) + problems


def check_2023(path: Path, turns: list[Turn]) -> list[str]:
    return _check(path, turns, 2023)


def check_2024(path: Path, turns: list[Turn]) -> list[str]:
    return _check(path, turns, 2024)


def _check_turn(raw: Any, by_id: dict[str, Turn], year: int) -> list[str]:
    if not isinstance(raw, dict):
        return ["a turn entry is not an object"]
    turn_id = submitted_turn_id(raw.get("turn_id", ""))
    topic = by_id.get(turn_id)
    where = f"turn {turn_id}"
    responses = raw.get("responses")
    if not isinstance(responses, list) or not responses:
        return [f"{where}: no responses"]
    problems = []
    previous_rank = 0
    for index, response in enumerate(responses, start=1):
        at = f"{where}, response {index}"
        if not isinstance(response, dict):
            problems.append(f"{at}: not an object")
            continue
        rank = response.get("rank")
        if not isinstance(rank, int) or rank <= 0:
            problems.append(f"{at}: rank {rank!r} is not a positive integer")
        elif rank <= previous_rank:
            problems.append(f"{at}: rank {rank} does not increase (previous {previous_rank})")
        else:
            previous_rank = rank
        if not str(response.get("text", "")).strip():
            problems.append(f"{at}: empty text")
        problems.extend(_check_provenance(response.get("passage_provenance"), at, year))
        problems.extend(ptkb_problems(response.get("ptkb_provenance"), at, topic, objects=year == 2023))
    return problems


def _check_provenance(items: Any, at: str, year: int) -> list[str]:
    if not isinstance(items, list) or not items:
        return [f"{at}: no passage provenance"]
    problems = []
    if len(items) > MAX_PROVENANCE:
        problems.append(f"{at}: {len(items)} provenance passages, at most {MAX_PROVENANCE} allowed")
    for position, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            problems.append(f"{at}: provenance #{position} is not an object")
            continue
        pid = item.get("id")
        if not isinstance(pid, str) or not CLUEWEB_ID.match(pid):
            problems.append(f"{at}: provenance #{position} id {pid!r} is not of the form clueweb22-enXXXX-XX-XXXXX:N")
    problems += score_problems([i.get("score") if isinstance(i, dict) else None for i in items], at, "provenance")
    if year == 2024 and not any(isinstance(i, dict) and i.get("used") is True for i in items):
        problems.append(f"{at}: no passage marked used")
    for position, item in enumerate(items, start=1):
        if isinstance(item, dict) and item.get("used") is True and not str(item.get("text") or "").strip():
            problems.append(f"{at}: provenance #{position} ({item.get('id')}) is used but has no text")
    return problems
