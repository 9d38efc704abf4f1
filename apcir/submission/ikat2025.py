"""The iKAT 2025 JSONL run, and its checks.

One line per turn: ``metadata`` (``team_id``, ``run_id``, ``run_type``),
``turn_id``, ``references`` (passage id -> score, at most 1,000, in the ranking
order) and ``responses``: ``text`` (inline citations ``[n]`` are the n-th
reference as written), ``citations`` (the cited references, id -> score) and
``ptkb_provenance`` (the texts of the statements the response used, verbatim
from the profile, as the 2025 guidelines' sample and the topics'
``relevant_ptkbs`` have them).

The checks (:func:`check`) rewrite every check of the organisers'
``2025/scripts/validate_trec_ikat25.py`` (the comments cite its lines) and of
its built-in fixer, which apcir treats as errors because the fixer changes the
run silently (it deletes responses over 250 words); plus apcir's own
(``[apcir]``, ``[guidelines]``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from apcir.contract.records import Turn
from apcir.io import iter_lines
from apcir.responses.text import count_words
from apcir.submission.common import (
    CLUEWEB_ID,
    MAX_PROVENANCE,
    SubmissionInputs,
    coverage_problems,
    inline_citation_problems,
    is_number,
    plan,
    score_problems,
    submitted_turn_id,
    word_problem,
)
from apcir.submission.formats import FALLBACK, FORMATS, SURE, Sample

ERROR, WARNING = " [2025 validator: error]", " [2025 validator: warning]"


def build(inputs: SubmissionInputs) -> list[dict[str, Any]]:
    plans = plan(inputs)
    entries = []
    for turn in inputs.turns:
        p = plans[turn.turn_id]
        references = dict(p.hits)
        entries.append({
            "metadata": {"team_id": inputs.team_id, "run_id": inputs.run_name, "run_type": inputs.run_type},
            "turn_id": turn.turn_id,
            "references": references,
            "responses": [{
                "text": p.text,
                "citations": {pid: references[pid] for pid in p.used},
                "ptkb_provenance": [turn.ptkb[sid] for sid in p.selected],
            }],
        })
    return entries


def sniff(sample: Sample) -> float:
    """Sure when the (first) object has ``references`` and no ``turns``; JSONL of anything else is 2025's shape
    when no other format claims it (so a line that does not parse is still validated as 2025's)."""
    first = sample.first_record if sample.json_lines else sample.document
    if isinstance(first, dict) and "references" in first and "turns" not in first:
        return SURE
    return FALLBACK if sample.json_lines else 0.0


def check(path: Path, turns: list[Turn]) -> list[str]:
    by_id = {t.turn_id: t for t in turns}
    entries: list[tuple[int, dict[str, Any]]] = []
    problems: list[str] = []
    submitted: list[str] = []
    for number, line in iter_lines(path, "submission"):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:  # l.207-220: a line that is not JSON (error)
            problems.append(f"line {number}: malformed JSON ({getattr(exc, 'msg', 'nested too deeply')}){ERROR}")
            continue
        if not isinstance(entry, dict):
            problems.append(f"line {number}: not a JSON object{ERROR}")
            continue
        entries.append((number, entry))
        turn_id = entry.get("turn_id")
        if isinstance(turn_id, str):  # l.214-216: only a string turn_id counts as submitted
            submitted.append(submitted_turn_id(turn_id))
        else:
            problems.append(f"line {number}: turn_id {turn_id!r} is not a string{ERROR}")
    for number, entry in entries:
        problems.extend(_check_entry(entry, number, by_id))
    # l.266-280: every topic turn present, none outside the topics (error); apcir also reports repeated lines
    return coverage_problems(submitted, turns, ERROR) + problems


def _check_entry(entry: dict[str, Any], line: int, by_id: dict[str, Turn]) -> list[str]:
    at = f"line {line} (turn {entry.get('turn_id')})"
    problems = []
    metadata = entry.get("metadata")
    if not isinstance(metadata, dict):  # l.123-125
        problems.append(f"{at}: metadata must be an object{ERROR}")
    else:
        missing = {"team_id", "run_id", "run_type"} - set(metadata)
        if missing:  # l.127-129 (and l.138-139 warns once more for run_type)
            problems.append(f"{at}: metadata lacks {sorted(missing)}{ERROR}")
        run_types = FORMATS.get("ikat25").run_types
        if "run_type" in metadata and metadata.get("run_type") not in run_types:  # l.11, 135-136
            problems.append(f"{at}: run_type {metadata.get('run_type')!r} is not one of {', '.join(run_types)}{ERROR}")
    references = entry.get("references")
    # l.141-149: references must be an object id -> score whose scores sort (error)
    if not isinstance(references, dict) or not all(is_number(v) for v in references.values()):
        return [*problems, f"{at}: references must be an object passage id -> score{ERROR}"]
    # fixer l.13, 89-117: more than 1000 references are cut, and the cut file fails the checks again
    if len(references) > MAX_PROVENANCE:
        problems.append(f"{at}: {len(references)} references, at most {MAX_PROVENANCE} allowed{ERROR}")
    for pid in references:  # l.9, 150-153: the ClueWeb22 passage id form (warning)
        if not CLUEWEB_ID.match(pid):
            problems.append(f"{at}: reference {pid!r} is not of the form clueweb22-enXXXX-XX-XXXXX:N{WARNING}")
    # apcir: references in the ranking order, so that [n] in a text is the n-th best (generate_run.py sorts them)
    problems += score_problems(list(references.values()), at, "reference", " [apcir]")
    responses = entry.get("responses", [])
    if not isinstance(responses, list):  # l.155-157
        return [*problems, f"{at}: responses must be a list{ERROR}"]
    if not responses:  # apcir: theirs accepts a turn without a response, which the guidelines do not (l.345-348)
        return [*problems, f"{at}: no responses [apcir]"]
    topic = by_id.get(submitted_turn_id(entry.get("turn_id", "")))
    reference_ids = list(references)
    words = 0
    for index, response in enumerate(responses, start=1):
        where = f"{at}, response {index}"
        if not isinstance(response, dict):  # l.160-162
            problems.append(f"{where}: not an object{ERROR}")
            continue
        text = response.get("text")
        if not isinstance(text, str):  # l.163-164
            problems.append(f"{where}: text missing or not a string{ERROR}")
            text = ""
        elif not text.strip():  # apcir: theirs accepts an empty text
            problems.append(f"{where}: empty text [apcir]")
        words += count_words(text)
        citations = response.get("citations")
        if citations is None:  # l.165-166 (and l.170 crashes on it when ptkb_provenance is there)
            problems.append(f"{where}: citations missing{ERROR}")
        elif not isinstance(citations, dict) or not all(is_number(v) for v in citations.values()):  # l.171-177
            problems.append(f"{where}: citations must be an object passage id -> score{ERROR}")
        else:
            # l.181-184: every citation is a reference (error)
            problems += [f"{where}: citation {c} is not among the references{ERROR}" for c in citations
                         if c not in references]
            # apcir: a citation's score is a reference score, so a finite number (as score_problems wants them)
            problems += [f"{where}: citation {c} score {v!r} is not a finite number" for c, v in citations.items()
                         if not math.isfinite(v)]
            if not citations:  # guidelines l.348: a response without citations is not evaluated
                problems.append(f"{where}: no citations [guidelines]")
            cited = [reference_ids.index(c) + 1 for c in citations if c in references]
            problems += [f"{p} [apcir]" for p in inline_citation_problems(text, len(references), cited, where,
                                                                          "reference")]
        problems += _check_ptkb(response.get("ptkb_provenance"), where, topic)
    # the fixer (l.35-59, 232-236) deletes responses from the end until the entry has at most 250 words (summed over
    # its responses), silently; apcir makes that an error
    if (long := word_problem(words, at, " [2025 validator: the fixer deletes responses]")) is not None:
        problems.append(long)
    return problems


def _check_ptkb(items: Any, where: str, topic: Turn | None) -> list[str]:
    if items is None:  # l.167-168
        return [f"{where}: ptkb_provenance missing{ERROR}"]
    if not isinstance(items, list):
        return [f"{where}: ptkb_provenance must be a list of statement texts [guidelines]"]
    problems = []
    texts = set(topic.ptkb.values()) if topic is not None else set()
    seen: set[str] = set()
    for position, item in enumerate(items, start=1):
        # guidelines l.638-641 and the topics' relevant_ptkbs: statement texts, verbatim from the profile (theirs
        # never looks inside the list)
        if not isinstance(item, str):
            problems.append(f"{where}: PTKB #{position} is {item!r}, not a statement text [guidelines]")
        elif topic is not None and item not in texts:
            problems.append(f"{where}: PTKB #{position} {item[:60]!r} is not a statement of the profile [guidelines]")
        elif item in seen:
            problems.append(f"{where}: PTKB #{position} is listed twice [apcir]")
        if isinstance(item, str):
            seen.add(item)
    return problems
