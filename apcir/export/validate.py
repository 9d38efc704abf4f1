"""Offline checks of iKAT submissions, after the organisers' validators.

Checked, for every turn and response, and all reported (not just the first):
the run name and type; coverage of the topics' turns per conversation (missing,
unknown, repeated turns); passage ids of the ClueWeb22 form
``clueweb22-enXXXX-XX-XXXXX:N``; response ranks above 0 and increasing;
provenance scores non-increasing; at most 1,000 provenance passages and at
least one; at least one passage marked ``used`` (2024); non-empty text; PTKB
provenance ids within the conversation's profile (and, in 2023, texts that
match it); 2025 citations that appear among the references.
The passage-id lookup against the full collection needs the organisers'
hash list and is not done here.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from apcir.datasets.jsonio import read_json
from apcir.errors import ApcirError
from apcir.models import Turn

CLUEWEB_ID = re.compile(r"^clueweb22-en\d{4}-\d{2}-\d{5}:\d+$")
RUN_TYPES = {"automatic", "manual", "only_response", "generation-only"}
MAX_PROVENANCE = 1000


def detect_format(path: Path) -> str:
    """``ikat25`` for JSONL, otherwise ``ikat23`` or ``ikat24`` by the shape of PTKB provenance."""
    text = path.read_text(encoding="utf-8").lstrip() if path.exists() else ""
    if not text:
        raise ApcirError("submission file is missing or empty", path=path)
    if text.startswith("{") and "\n{" in text.strip():
        return "ikat25"
    data = read_json(path)
    if isinstance(data, dict) and "turns" in data:
        for turn in data.get("turns") or []:
            for response in turn.get("responses") or []:
                for item in response.get("ptkb_provenance") or []:
                    return "ikat23" if isinstance(item, dict) else "ikat24"
        return "ikat24"
    if isinstance(data, dict) and "references" in data:
        return "ikat25"
    raise ApcirError("not an iKAT submission: expected a JSON object with 'turns' or JSONL lines", path=path)


def validate_submission(path: Path, turns: list[Turn], fmt: str | None = None) -> list[str]:
    """Every problem found in the submission at ``path`` against the topics ``turns``."""
    fmt = fmt or detect_format(path)
    by_id = {t.turn_id: t for t in turns}
    if fmt == "ikat25":
        entries, problems = _read_jsonl(path)
        submitted = [str(e.get("turn_id", "")) for e in entries]
        for line, entry in enumerate(entries, start=1):
            problems.extend(_check_2025_entry(entry, line, by_id))
    else:
        data = read_json(path)
        problems = []
        if not isinstance(data, dict):
            return ["the file is not a JSON object with run_name, run_type and turns"]
        if not str(data.get("run_name", "")).strip():
            problems.append("run_name is missing or empty")
        if data.get("run_type") not in RUN_TYPES:
            problems.append(f"run_type {data.get('run_type')!r} is not one of {sorted(RUN_TYPES)}")
        raw_turns = data.get("turns")
        if not isinstance(raw_turns, list) or not raw_turns:
            return [*problems, "turns is missing or empty"]
        submitted = [str(t.get("turn_id", "")) if isinstance(t, dict) else "" for t in raw_turns]
        for raw in raw_turns:
            problems.extend(_check_turn(raw, by_id, fmt))
    return _coverage_problems(submitted, turns) + problems


def _read_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    entries: list[dict[str, Any]] = []
    problems: list[str] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"line {number}: malformed JSON ({exc.msg})")
            continue
        if isinstance(entry, dict):
            entries.append(entry)
        else:
            problems.append(f"line {number}: not a JSON object")
    return entries, problems


def _coverage_problems(submitted: list[str], turns: list[Turn]) -> list[str]:
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


def _check_turn(raw: Any, by_id: dict[str, Turn], fmt: str) -> list[str]:
    if not isinstance(raw, dict):
        return ["a turn entry is not an object"]
    turn_id = str(raw.get("turn_id", ""))
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
        problems.extend(_check_provenance(response.get("passage_provenance"), at, fmt))
        problems.extend(_check_ptkb(response.get("ptkb_provenance"), at, topic, fmt))
    return problems


def _check_provenance(items: Any, at: str, fmt: str) -> list[str]:
    if not isinstance(items, list) or not items:
        return [f"{at}: no passage provenance"]
    problems = []
    if len(items) > MAX_PROVENANCE:
        problems.append(f"{at}: {len(items)} provenance passages, at most {MAX_PROVENANCE} allowed")
    previous = float("inf")
    for position, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            problems.append(f"{at}: provenance #{position} is not an object")
            continue
        pid = item.get("id")
        if not isinstance(pid, str) or not CLUEWEB_ID.match(pid):
            problems.append(f"{at}: provenance #{position} id {pid!r} is not of the form clueweb22-enXXXX-XX-XXXXX:N")
        score = item.get("score")
        if not isinstance(score, (int, float)):
            problems.append(f"{at}: provenance #{position} score {score!r} is not a number")
        elif score > previous:
            problems.append(f"{at}: provenance #{position} score {score} is higher than the one before ({previous})")
        else:
            previous = float(score)
    if fmt == "ikat24" and not any(isinstance(i, dict) and i.get("used") is True for i in items):
        problems.append(f"{at}: no passage marked used")
    return problems


def _check_ptkb(items: Any, at: str, topic: Turn | None, fmt: str) -> list[str]:
    if items is None:
        return [f"{at}: ptkb_provenance missing"]
    if not isinstance(items, list):
        return [f"{at}: ptkb_provenance is not a list"]
    problems = []
    for item in items:
        statement = str(item.get("id", "")) if isinstance(item, dict) else str(item)
        if fmt == "ikat23" and not isinstance(item, dict):
            problems.append(f"{at}: 2023 PTKB provenance must be {{id, text, score}} objects")
            continue
        if topic is not None and statement not in topic.ptkb:
            problems.append(f"{at}: PTKB id {statement!r} is not in the profile (ids 1-{len(topic.ptkb)})")
        elif topic is not None and isinstance(item, dict) and item.get("text") not in (None, topic.ptkb[statement]):
            problems.append(f"{at}: PTKB {statement} text does not match the profile")
    return problems


def _check_2025_entry(entry: dict[str, Any], line: int, by_id: dict[str, Turn]) -> list[str]:
    at = f"line {line} (turn {entry.get('turn_id')})"
    problems = []
    metadata = entry.get("metadata")
    if not isinstance(metadata, dict):
        problems.append(f"{at}: metadata must be an object")
    else:
        missing = {"team_id", "run_id", "run_type"} - set(metadata)
        if missing:
            problems.append(f"{at}: metadata lacks {sorted(missing)}")
        if metadata.get("run_type") not in {"manual", "automatic", "generation-only"}:
            problems.append(f"{at}: run_type {metadata.get('run_type')!r} is not manual, automatic or generation-only")
    references = entry.get("references")
    if not isinstance(references, dict):
        return [*problems, f"{at}: references must be an object passage id -> score"]
    if len(references) > MAX_PROVENANCE:
        problems.append(f"{at}: {len(references)} references, at most {MAX_PROVENANCE} allowed")
    for pid in references:
        if not CLUEWEB_ID.match(pid):
            problems.append(f"{at}: reference {pid!r} is not of the form clueweb22-enXXXX-XX-XXXXX:N")
    responses = entry.get("responses")
    if not isinstance(responses, list) or not responses:
        return [*problems, f"{at}: no responses"]
    topic = by_id.get(str(entry.get("turn_id", "")))
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
        problems.extend(_check_ptkb(response.get("ptkb_provenance"), where, topic, "ikat25"))
    return problems
