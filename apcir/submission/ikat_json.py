"""The iKAT 2023 and 2024 JSON runs, and their checks.

Both follow the organisers' protocol buffer ``run.proto``: ``run_name``,
``run_type`` (2024 also ``eval_response``), ``turns`` -> ``responses`` with
``rank``, ``text``, ``passage_provenance`` as ``{id, text, score, used}`` and
``ptkb_provenance``: ``{id, text, score}`` objects in 2023, statement ids (ints)
in 2024. ``used`` marks the passages the response cites; provenance text is
written only for them (with every text, a 332-turn submission was 428 MB).

The checks (:func:`check_2023`, :func:`check_2024`) are apcir's own rewrite of
every check the organisers' validators make offline
(``irlabamsterdam/iKAT``, ``2023/scripts/run_validation`` and
``2024/scripts/run_validation``, ``main.py``, ``utils.py``, ``run.proto``; the
comments cite the file and line each rule comes from), plus apcir's own
(marked ``apcir``): what the guidelines require but their script does not
check, and what it misses by a bug. Each problem names the rule's source in
brackets: ``[2023 validator: error]`` stops their validator, ``[... warning]``
is counted in its warnings, ``[guidelines]`` and ``[apcir]`` are apcir's.
The one check of theirs apcir cannot make is the lookup of every passage id
in the licensed collection (``utils.py:102-130``, skipped by their ``-S``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apcir.contract.records import Turn
from apcir.io import read_json
from apcir.responses.text import count_words
from apcir.submission.common import (
    CLUEWEB_ID,
    MAX_PROVENANCE,
    PtkbDefault,
    SubmissionInputs,
    coverage_problems,
    inline_citation_problems,
    is_number,
    plan,
    score_problems,
    submitted_turn_id,
    word_problem,
)
from apcir.submission.formats import FALLBACK, FORMATS, SHARED, SURE, Sample


def _build(inputs: SubmissionInputs, year: JsonYear) -> dict[str, Any]:
    plans = plan(inputs, ptkb=year.ptkb, at_least_one=year.at_least_one)
    entries = []
    for turn in inputs.turns:
        p = plans[turn.turn_id]
        used = set(p.used)
        provenance = []
        for pid, score in p.hits:
            item: dict[str, Any] = {"id": pid, "score": score}
            if pid in used and pid in inputs.passages:
                item["text"] = inputs.passages[pid]
            item["used"] = pid in used
            provenance.append(item)
        ptkb: list[Any]
        if year.ptkb_ids:
            ptkb = [int(sid) for sid in p.selected]
        else:
            ptkb = [{"id": sid, "text": turn.ptkb[sid], "score": score} for sid, score in p.ranked]
        entries.append({
            "turn_id": turn.turn_id,
            "responses": [{"rank": 1, "text": p.text, "ptkb_provenance": ptkb, "passage_provenance": provenance}],
        })
    head: dict[str, Any] = {"run_name": inputs.run_name, "run_type": inputs.run_type}
    if year.eval_response:
        head["eval_response"] = inputs.eval_response
    return {**head, "turns": entries}


def build_2023(inputs: SubmissionInputs) -> dict[str, Any]:
    return _build(inputs, IKAT23)


def build_2024(inputs: SubmissionInputs) -> dict[str, Any]:
    return _build(inputs, IKAT24)


def sniff_2023(sample: Sample) -> float:
    return _sniff(sample, IKAT23)


def sniff_2024(sample: Sample) -> float:
    return _sniff(sample, IKAT24)


def _sniff(sample: Sample, year: JsonYear) -> float:
    """A JSON object with ``turns``: sure by ``eval_response`` or the first PTKB provenance item (an id or an
    object); else the turn ids' form (``<int>_<int>``) tells 2024; else it is 2023's."""
    data = sample.document
    if not isinstance(data, dict) or "turns" not in data:
        return 0.0
    if "eval_response" in data:
        return SURE if year.eval_response else 0.0
    turns = [t for t in _items(data.get("turns")) if isinstance(t, dict)]
    for turn in turns:
        for response in _items(turn.get("responses")):
            for item in _items(response.get("ptkb_provenance")) if isinstance(response, dict) else []:
                return SURE if isinstance(item, dict) != year.ptkb_ids else 0.0
    first = turns[0].get("turn_id") if turns else None
    numbered = isinstance(first, str) and re.match(r"^\d+_\d+$", first) is not None
    if year.numbered_conversations:
        return SHARED if numbered else 0.0
    return FALLBACK


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


# ---- checks --------------------------------------------------------------------------------------
# The fields of run.proto (2023 l.5-41, 2024 l.5-37): json_format.ParseDict rejects any other key, and a value
# of the wrong type, and the validator stops (main.py:100-103 / 109-112). apcir also refuses null, and a
# number given as a string, which ParseDict would read as the proto default or convert.
_STR, _INT, _NUM, _BOOL, _LIST = ("a string", "an integer (int32)", "a number (within float32)",
                                  "true or false", "a list")
FIELDS_2023 = {
    "run": {"run_name": _STR, "run_type": _STR, "turns": _LIST},
    "turn": {"turn_id": _STR, "responses": _LIST},
    "response": {"text": _STR, "rank": _INT, "passage_provenance": _LIST, "ptkb_provenance": _LIST},
    "passage": {"id": _STR, "text": _STR, "score": _NUM, "used": _BOOL},
    "ptkb": {"id": _STR, "text": _STR, "score": _NUM},
}
FIELDS_2024 = {
    "run": {"run_name": _STR, "run_type": _STR, "eval_response": _BOOL, "turns": _LIST},
    "turn": {"turn_id": _STR, "responses": _LIST},
    "response": {"text": _STR, "rank": _INT, "passage_provenance": _LIST, "ptkb_provenance": _LIST},
    "passage": {"id": _STR, "text": _STR, "score": _NUM, "used": _BOOL},
}


@dataclass(frozen=True)
class JsonYear:
    """What differs between the 2023 and the 2024 JSON run: each year's rules, read by build and check alike."""

    year: int
    name: str
    """Its entry in :data:`apcir.submission.formats.FORMATS`."""
    fields: dict[str, dict[str, str]]
    """run.proto's messages and their fields."""
    ptkb: PtkbDefault
    """The PTKB provenance written by default: every statement ranked (2023) or those the response used."""
    ptkb_ids: bool
    """PTKB provenance as statement ids (int32, 2024) rather than ``{id, text, score}`` objects (2023)."""
    at_least_one: bool
    """The top-ranked statement when the response used none (the 2024 validator warns on an empty list,
    main.py:168-171)."""
    eval_response: bool
    """The run says whether the responses are judged (2024 run.proto:8)."""
    numbered_conversations: bool
    """Turn ids are ``<int>_<int>`` (2024 main.py:200-207); else ``<conversation>_<turn>``."""
    textless_run_type: str | None
    """A run type whose responses may have no text (2024: only_response, utils.py:38-40)."""


IKAT23 = JsonYear(2023, "ikat23", FIELDS_2023, ptkb="ranked", ptkb_ids=False, at_least_one=False, eval_response=False,
                  numbered_conversations=False, textless_run_type=None)
IKAT24 = JsonYear(2024, "ikat24", FIELDS_2024, ptkb="used", ptkb_ids=True, at_least_one=True, eval_response=True,
                  numbered_conversations=True, textless_run_type="only_response")


# run.proto's types: `int32 rank` and `float score` (32-bit); ParseDict refuses a value out of their range.
INT32 = (-(2**31), 2**31 - 1)
FLOAT32_MAX = 3.4028234663852886e38


def _fits(value: Any, kind: str) -> bool:
    if kind == _STR:
        return isinstance(value, str)
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool) and INT32[0] <= value <= INT32[1]
    if kind == _NUM:
        return is_number(value) and math.isfinite(value) and abs(value) <= FLOAT32_MAX
    if kind == _BOOL:
        return isinstance(value, bool)
    return isinstance(value, list)


def _schema(obj: dict[str, Any], message: str, year: JsonYear, at: str) -> list[str]:
    """Unknown keys and values of the wrong type in one object of run.proto (main.py:100 / 109: error)."""
    fields = year.fields[message]
    rule = f" [{year.year} validator: error, run.proto]"
    problems = [f"{at}: unknown field {key!r} (the {year.year} {message} has {', '.join(fields)}){rule}"
                for key in obj if key not in fields]
    problems += [f"{at}: {key} must be {kind}, found {_shown(obj[key])}{rule}"
                 for key, kind in fields.items() if key in obj and not _fits(obj[key], kind)]
    return problems


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check(path: Path, turns: list[Turn], year: JsonYear) -> list[str]:
    data = read_json(path, "submission")
    by_id = {t.turn_id: t for t in turns}
    v_error, v_warning = f" [{year.year} validator: error]", f" [{year.year} validator: warning]"
    if not isinstance(data, dict):
        return [f"the file is not a JSON object with run_name, run_type and turns{v_error}"]
    problems = _schema(data, "run", year, "top level")
    # main.py:94-98 / 103-107: run_name, run_type and turns must be there (error)
    problems += [f"top level: {key} is missing{v_error}" for key in ("run_name", "run_type", "turns") if key not in data]
    # main.py:227-229 / 248-250: empty run_name (warning)
    if isinstance(data.get("run_name"), str) and not data["run_name"].strip():
        problems.append(f"run_name is empty{v_warning}")
    # main.py:230-235 / 251-256: run_type empty or not one of the year's types (warning)
    run_type = data.get("run_type")
    run_types = FORMATS.get(year.name).run_types
    if isinstance(run_type, str) and run_type not in run_types:
        problems.append(f"run_type {run_type!r} is not one of {', '.join(run_types)}{v_warning}")
    # 2024 run.proto:8: a missing eval_response is false, "only retrieval": the responses are not judged (2024
    # guidelines l.115, 341, 494); apcir always writes it
    if year.eval_response and "eval_response" not in data:
        problems.append("top level: eval_response is missing: the organisers read it as false, and then do not "
                        "judge the responses [guidelines]")
    raw_turns = data.get("turns")
    if not isinstance(raw_turns, list) or not raw_turns:
        # main.py:289-291 / 314-316: a run with no turns is not validated (error)
        return [*problems, f"turns is missing or empty{v_error}"]
    submitted = []
    for index, raw in enumerate(raw_turns, start=1):
        if not isinstance(raw, dict):
            problems.append(f"turn entry #{index} is not an object{v_error}")
            continue
        submitted.append(submitted_turn_id(raw.get("turn_id", "")))
        problems.extend(_check_turn(raw, index, by_id, year, str(run_type)))
    # main.py:181-216, 244-247 / 194-230, 264-267: exactly the topics' turns, per conversation (error); apcir also
    # reports repeated turns, which theirs lets through
    return coverage_problems(submitted, turns, v_error) + problems


def check_2023(path: Path, turns: list[Turn]) -> list[str]:
    return _check(path, turns, IKAT23)


def check_2024(path: Path, turns: list[Turn]) -> list[str]:
    return _check(path, turns, IKAT24)


def _turn_id_problem(turn_id: Any, year: JsonYear) -> str | None:
    """main.py:187-193 / 200-207: '<conversation>_<int>' (2024: '<int>_<int>'), else the validator stops."""
    if not isinstance(turn_id, str):
        return None  # reported by the schema check
    parts = turn_id.split("_")
    numbered = year.numbered_conversations
    ok = len(parts) == 2 and parts[1].isdigit() and (parts[0].isdigit() if numbered else bool(parts[0]))
    if ok:
        return None
    form = "<int>_<int>, e.g. 0_3" if numbered else "<conversation>_<turn>, e.g. 9-1_3"
    return f"turn id {turn_id!r} is not of the form {form} [{year.year} validator: error]"


def _check_turn(raw: dict[str, Any], index: int, by_id: dict[str, Turn], year: JsonYear, run_type: str) -> list[str]:
    v_warning = f" [{year.year} validator: warning]"
    turn_id = submitted_turn_id(raw.get("turn_id", ""))
    topic = by_id.get(turn_id)
    where = f"turn {turn_id}" if isinstance(raw.get("turn_id"), str) else f"turn entry #{index}"
    problems = _schema(raw, "turn", year, where)
    if (id_problem := _turn_id_problem(raw.get("turn_id"), year)) is not None:
        problems.append(f"{where}: {id_problem}")
    responses = raw.get("responses")
    if not isinstance(responses, list) or not responses:
        return [*problems, f"{where}: no responses [apcir]"]  # theirs says nothing of a turn without responses
    previous_rank = 0
    for number, response in enumerate(responses, start=1):
        at = f"{where}, response {number}"
        if not isinstance(response, dict):
            problems.append(f"{at}: not an object [{year.year} validator: error, run.proto]")
            continue
        problems += _schema(response, "response", year, at)
        rank = response.get("rank", 0)
        if isinstance(rank, int) and not isinstance(rank, bool):
            if rank <= 0:  # utils.py:25-32 / 26-35: rank missing, 0 or negative (warning)
                problems.append(f"{at}: rank {rank} is not a positive integer{v_warning}")
            elif rank <= previous_rank:  # apcir: their previous_rank is never updated (main.py:116 / 128)
                problems.append(f"{at}: rank {rank} does not increase (previous {previous_rank}) [apcir]")
            else:
                previous_rank = rank
        text = response.get("text")
        # utils.py:35-37 / 38-40: empty text (warning; 2024: allowed for only_response runs)
        if not isinstance(text, str) or not text.strip():
            if run_type != year.textless_run_type:
                problems.append(f"{at}: empty text{v_warning}")
            text = ""
        # guidelines 2023 l.96, 2024 l.122: at most 250 words
        if (long := word_problem(count_words(text), at, " [guidelines]")) is not None:
            problems.append(long)
        problems += _check_provenance(response.get("passage_provenance"), text, at, year)
        problems += _check_ptkb(response.get("ptkb_provenance"), at, topic, year)
    return problems


def _check_provenance(items: Any, text: str, at: str, year: JsonYear) -> list[str]:
    v_warning = f" [{year.year} validator: warning]"
    # main.py:145-147 / 161-163: no passage provenance (warning), which also means none used (main.py:139-143)
    if not isinstance(items, list) or not items:
        return [f"{at}: no passage provenance{v_warning}"]
    problems = []
    # main.py:148-150 / 164-166: more than 1000 passages (warning)
    if len(items) > MAX_PROVENANCE:
        problems.append(f"{at}: {len(items)} provenance passages, at most {MAX_PROVENANCE} allowed{v_warning}")
    seen: set[str] = set()
    for position, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            problems.append(f"{at}: provenance #{position} is not an object [{year.year} validator: error, run.proto]")
            continue
        problems += _schema(item, "passage", year, f"{at}, provenance #{position}")
        pid = item.get("id")
        # utils.py:60-66 / 66-72: a 'clueweb22-' prefix and one ':' (warning); apcir checks the whole id form
        if not isinstance(pid, str) or not CLUEWEB_ID.match(pid):
            problems.append(f"{at}: provenance #{position} id {pid!r} is not of the form "
                            f"clueweb22-enXXXX-XX-XXXXX:N{v_warning}")
        elif pid in seen:  # apcir: theirs lets a repeated passage through
            problems.append(f"{at}: provenance #{position} {pid} is listed twice [apcir]")
        if isinstance(pid, str):
            seen.add(pid)
    # utils.py:55-57 / 59-63: scores must not increase down the list (warning)
    problems += score_problems([i.get("score") if isinstance(i, dict) else None for i in items], at, "provenance",
                               v_warning)
    used = [n for n, i in enumerate(items, start=1) if isinstance(i, dict) and i.get("used") is True]
    # main.py:139-143 / 153-159: no passage marked used (warning: they then take the top 5)
    if not used:
        problems.append(f"{at}: no passage marked used{v_warning}")
    for n in used:  # apcir: a used passage must carry its text (the assessors read it)
        if not str(items[n - 1].get("text") or "").strip():
            problems.append(f"{at}: provenance #{n} ({items[n - 1].get('id')}) is used but has no text [apcir]")
    # apcir: inline citations [n] are the n-th provenance passage, which must be marked used, and vice versa
    problems += [f"{p} [apcir]" for p in inline_citation_problems(text, len(items), used, at, "provenance passage")]
    return problems


def _check_ptkb(items: Any, at: str, topic: Turn | None, year: JsonYear) -> list[str]:
    v_error, v_warning = f" [{year.year} validator: error]", f" [{year.year} validator: warning]"
    # main.py:152-155 / 168-171: no PTKB provenance (warning)
    if not isinstance(items, list) or not items:
        return [f"{at}: no PTKB provenance{v_warning}"]
    problems = []
    seen: set[str] = set()
    previous = math.inf
    for position, item in enumerate(items, start=1):
        where = f"{at}, PTKB #{position}"
        if year.ptkb_ids:
            # run.proto:27: a list of int32 (error otherwise); utils.py:91-93: 0..len(ptkb) (error); apcir also
            # rejects 0, which theirs lets through although statement ids start at 1
            if not isinstance(item, int) or isinstance(item, bool):
                problems.append(f"{where}: {_shown(item)} is not a statement id (an integer){v_error}")
                continue
            statement = str(item)
            if topic is not None and statement not in topic.ptkb:
                tag = " [apcir]" if item == 0 else v_error  # theirs accepts 0 (an off-by-one, utils.py:91)
                problems.append(f"{where}: statement {item} is not in the profile (ids 1-{len(topic.ptkb)}){tag}")
        else:
            if not isinstance(item, dict):  # run.proto:24, 37-41: {id, text, score} objects (error)
                problems.append(f"{where}: {year.year} PTKB provenance must be {{id, text, score}} objects{v_error}")
                continue
            problems += _schema(item, "ptkb", year, where)
            statement = str(item.get("id", "")) if isinstance(item.get("id", ""), str) else ""
            if not statement:  # utils.py:84-86: empty id (error)
                problems.append(f"{where}: the statement id is empty or missing{v_error}")
                continue
            if topic is not None and statement not in topic.ptkb:  # utils.py:88-90: id not in the profile (error)
                problems.append(f"{where}: statement {statement!r} is not in the profile "
                                f"(ids {', '.join(topic.ptkb) or 'none'}){v_error}")
            # utils.py:92-94: text exactly the profile's (error; a missing text is "" and fails too)
            elif topic is not None and item.get("text") != topic.ptkb[statement]:
                problems.append(f"{where}: the text of statement {statement} is "
                                f"{'missing' if 'text' not in item else 'not the profile text'}{v_error}")
            score = item.get("score", 0.0)
            # utils.py:96-98: scores must not increase down the list (warning)
            if is_number(score) and math.isfinite(score):
                if score > previous:
                    problems.append(f"{where}: score {score} is higher than the one before ({previous}){v_warning}")
                previous = float(score)
        if statement in seen:  # apcir: theirs accepts a repeated statement
            problems.append(f"{where}: statement {statement} is listed twice [apcir]")
        seen.add(statement)
    return problems
