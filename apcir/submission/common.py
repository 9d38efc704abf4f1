"""What every iKAT submission format shares: the inputs, what each turn's entry says, and shared checks.

Each turn's response (:func:`plan`) comes from the response records of the
response stage when they are given: its text, with the inline citations
``[n]`` renumbered to the position of the cited passage in the turn's submitted
passage list (``passage_provenance`` in 2023/2024, ``references`` in 2025, both
in the ranking order), and the cited passages as the ``used`` ones
(``citations`` in 2025). Without a record for a turn (or with a failed one), the
text falls back to the LLM's pseudo-response (``text = "pseudo"``: the
personalised one, ``third_response``, at levels b/c; ``response`` at level a) or
the top passage (``text = "passage"``), each falling back to the other, then to
the rewrite; the top ``used_top`` passages are then marked used, and the export
says how many turns fell back. Every text is cut to the organisers' 250-word
limit at a sentence boundary (:func:`apcir.responses.text.cut_to_words`): the
2025 validator deletes a longer response whole.

PTKB provenance comes from the PTKB ranking (:mod:`apcir.responses.ptkb`), given,
or made here (the reformulation's ptkb_used first, then BM25 over the profile)
for the turns it lacks: 2023 gets every statement ranked ``{id, text, score}``;
2024 and 2025 the statements the response used (the record's ``ptkb_used``,
else the reformulation's) in ranking order, or every statement with
``ptkb_mode = "ranked"``; 2024 gets the top-ranked statement when the response
used none (its validator warns on an empty list). These are the year's rules, which its format gives
:func:`plan` (``ptkb``, ``at_least_one``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from apcir.contract.records import Run, Turn
from apcir.contract.reformulations import ReformulationRecord
from apcir.contract.responses import CITATION, ResponseRecord, cited_numbers
from apcir.contract.runs import ranking
from apcir.errors import ApcirError
from apcir.ids import canonical_turn_id
from apcir.responses.core import StatementRanking
from apcir.responses.ptkb import PtkbRanking, statements_used
from apcir.responses.text import count_words, cut_to_words

CLUEWEB_ID = re.compile(r"^clueweb22-en\d{4}-\d{2}-\d{5}:\d+$")
MAX_PROVENANCE = 1000
USED_TOP = 5
"""Without a response's citations, the top passages marked used (and whose texts the export reads)."""
MAX_WORDS = 250  # guidelines 2023 l.96, 2024 l.122; 2025 validator RESPONSE_LIMIT (validate_trec_ikat25.py:12)
TextMode = Literal["pseudo", "passage"]
PtkbMode = Literal["auto", "used", "ranked"]
PtkbDefault = Literal["ranked", "used"]
"""What ``ptkb_mode = "auto"`` means: the format's year's own PTKB provenance."""


@dataclass
class SubmissionInputs:
    """Everything a format needs to write a submission."""

    run: Run
    turns: list[Turn]
    run_name: str
    run_type: str = "automatic"
    team_id: str = "apcir"
    reformulations: Mapping[str, ReformulationRecord] = field(default_factory=dict)
    passages: Mapping[str, str] = field(default_factory=dict)
    mode: TextMode = "pseudo"
    used_top: int = USED_TOP
    depth: int = MAX_PROVENANCE
    responses: Mapping[str, ResponseRecord] | None = None
    """Response records by turn (the response stage's output); None: no responses given."""
    ptkb: PtkbRanking | None = None
    """The PTKB ranking by turn; None (or a turn it lacks): ranked here, ptkb_used first, then BM25 over the profile."""
    ptkb_mode: PtkbMode = "auto"
    eval_response: bool = True
    """2024: have the organisers judge the responses (their proto's default, false, means retrieval only)."""
    year: int | None = None
    """The topics' iKAT year; a format of another year is refused (its validator cannot read the file)."""


@dataclass
class TurnPlan:
    """What one turn's entry says."""

    hits: list[tuple[str, float]]
    """The submitted passages in the ranking order, scores as trec_eval reads them."""
    text: str
    used: list[str]
    """Cited passage ids, in the order of their position in ``hits``."""
    ranked: list[tuple[str, float]]
    """Every profile statement, best first, with its score."""
    selected: list[str]
    """The statements to submit in 2024/2025, in ranking order."""
    fallback: str | None = None
    """Why the text is not a response record's (no record, a failed one), or None."""
    dropped: int = 0
    """Citations of the record that point at passages not in ``hits`` (removed from the text)."""
    cut: bool = False
    """The text was cut to the word limit."""


def response_text(
    turn_id: str,
    hits: list[tuple[str, float]],
    record: ReformulationRecord | None,
    passages: Mapping[str, str],
    mode: TextMode,
) -> str:
    """The fallback text: the pseudo-response or the top passage (see module docstring)."""
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
    return ""  # nothing to say: `apcir validate` flags the empty text


def submitted_hits(run: Run, turn_id: str, depth: int) -> list[tuple[str, float]]:
    """A turn's passages in the ranking order, with scores as trec_eval reads them (32-bit floats).

    Two passages whose scores tie for trec_eval then tie in the file too, so the
    order (ties by passage id descending) is visibly non-increasing to any reader.
    """
    return [(pid, float(np.float32(score))) for pid, score in ranking(run.get(turn_id, {}), min(depth, MAX_PROVENANCE))]


def renumber(text: str, record: ResponseRecord, position: Mapping[str, int]) -> tuple[str, int]:
    """``text`` with each ``[n]`` (the record's n-th passage) made that passage's position; and how many were dropped
    (cited passages that are not in the submitted list)."""
    dropped = 0

    def swap(match: re.Match[str]) -> str:
        nonlocal dropped
        out = []
        for part in match.group(1).split(","):
            n = int(part)
            pid = record.passages[n - 1] if 1 <= n <= len(record.passages) else None
            if pid is not None and pid in position:
                out.append(f"[{position[pid]}]")
            else:
                dropped += 1
        return "".join(out)

    new = CITATION.sub(swap, text)
    return re.sub(r"[ \t]{2,}", " ", new).strip(), dropped


def ptkb_ranking(inputs: SubmissionInputs) -> PtkbRanking:
    """The given ranking, completed for the turns it lacks (the reformulation's ptkb_used first, then BM25)."""
    ranked: PtkbRanking = dict(inputs.ptkb or {})
    missing = [t for t in inputs.turns if t.turn_id not in ranked and t.ptkb]
    if missing:
        ranked.update(StatementRanking()(missing, inputs.reformulations))
    return ranked


def plan(inputs: SubmissionInputs, *, ptkb: PtkbDefault = "used",
         at_least_one: bool = False) -> dict[str, TurnPlan]:
    """Every turn's entry (see the module docstring), by turn id, in the topics' order.

    The format says what its year wants: ``ptkb``, the PTKB provenance of ``ptkb_mode = "auto"`` (every statement
    ranked, or the statements the response used); ``at_least_one``, the top-ranked statement when the response
    used none."""
    ranked_all = ptkb_ranking(inputs)
    mode = inputs.ptkb_mode if inputs.ptkb_mode != "auto" else ptkb
    plans: dict[str, TurnPlan] = {}
    for turn in inputs.turns:
        hits = submitted_hits(inputs.run, turn.turn_id, inputs.depth)
        position = {pid: i for i, (pid, _) in enumerate(hits, start=1)}
        reformulation = inputs.reformulations.get(turn.turn_id)
        record = (inputs.responses or {}).get(turn.turn_id)
        fallback, dropped = None, 0
        if record is not None and record.status == "ok" and record.text.strip():
            text, dropped = renumber(record.text, record, position)
            statements = [s for s in record.ptkb_used if s in turn.ptkb]  # never a statement the profile lacks
        else:
            if inputs.responses is None:
                fallback = "no responses given"
            elif record is None:
                fallback = "no response record"
            else:
                fallback = f"the response failed ({record.error or 'empty text'})"
            text = response_text(turn.turn_id, hits, reformulation, inputs.passages, inputs.mode) \
                if hits or reformulation else ""
            statements = statements_used(turn, reformulation)
        cut = count_words(text) > MAX_WORDS
        text = cut_to_words(text, MAX_WORDS)
        numbers = sorted(n for n in cited_numbers(text) if 1 <= n <= len(hits))
        if not numbers and record is not None and fallback is None:  # the cut took every marker
            numbers = sorted(position[p] for p in record.citations if p in position)
        if not numbers:  # nothing cited: the top passages, the organisers' own default (main.py:139-143)
            numbers = list(range(1, min(inputs.used_top, len(hits)) + 1))
        ranked = ranked_all.get(turn.turn_id, [])
        order = {sid: i for i, (sid, _) in enumerate(ranked)}
        if mode == "ranked":
            selected = [sid for sid, _ in ranked]
        else:
            selected = sorted((s for s in dict.fromkeys(statements) if s in order), key=order.__getitem__)
            if not selected and at_least_one and ranked:
                selected = [ranked[0][0]]
        plans[turn.turn_id] = TurnPlan(hits=hits, text=text, used=[hits[n - 1][0] for n in numbers], ranked=ranked,
                                       selected=selected, fallback=fallback, dropped=dropped, cut=cut)
    return plans


# ---- checks shared by the formats ----------------------------------------------------------------
def submitted_turn_id(raw: Any) -> str:
    """A submission's turn id in apcir's form (``9-1_3``; ``9-1-3`` is accepted), or as written if it is neither."""
    try:
        return canonical_turn_id(str(raw))
    except ApcirError:
        return str(raw)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def score_problems(scores: list[Any], at: str, what: str, rule: str = "") -> list[str]:
    """Scores must be finite numbers, non-increasing in the order given (one problem per break, not per item)."""
    problems = []
    previous = float("inf")
    for position, score in enumerate(scores, start=1):
        if not is_number(score) or not math.isfinite(score):
            problems.append(f"{at}: {what} #{position} score {score!r} is not a finite number")
            continue
        if score > previous:
            problems.append(f"{at}: {what} #{position} score {score} is higher than the one before ({previous}){rule}")
        previous = float(score)
    return problems


def coverage_problems(submitted: list[str], turns: list[Turn], rule: str = "") -> list[str]:
    """Repeated turns, turns not in the topics, and topic turns missing, per conversation."""
    problems = []
    expected = {t.turn_id for t in turns}
    counts = Counter(submitted)
    for turn_id, count in sorted(counts.items()):
        if count > 1:
            problems.append(f"turn {turn_id} appears {count} times")
    for turn_id in sorted(set(submitted) - expected):
        problems.append(f"turn {turn_id!r} is not in the topics{rule}")
    conversations: dict[str, list[str]] = {}
    for turn in turns:
        if turn.turn_id not in counts:
            conversations.setdefault(turn.conversation_id, []).append(turn.turn_id)
    for conversation, missing in conversations.items():
        problems.append(f"conversation {conversation}: missing turn(s) {', '.join(missing)}{rule}")
    return problems


def inline_citation_problems(text: str, n_listed: int, cited: Sequence[int], at: str, what: str) -> list[str]:
    """apcir's rule for a text that cites inline: every ``[n]`` is one of the ``n_listed`` passages and is marked
    cited (``cited``: the 1-based positions marked), and every passage marked cited is cited in the text."""
    numbers = cited_numbers(text)
    if not numbers:
        return []
    problems = [f"{at}: citation [{n}] in the text points outside the {n_listed} {what}s listed"
                for n in numbers if not 1 <= n <= n_listed]
    inside = [n for n in numbers if 1 <= n <= n_listed]
    problems += [f"{at}: citation [{n}] in the text is {what} #{n}, which is not marked as cited"
                 for n in inside if n not in cited]
    problems += [f"{at}: {what} #{n} is marked as cited but the text never cites [{n}]" for n in cited
                 if n not in inside]
    return problems


def word_problem(words: int, at: str, rule: str) -> str | None:
    if words > MAX_WORDS:
        return f"{at}: {words} words, more than the {MAX_WORDS} allowed{rule}"
    return None
