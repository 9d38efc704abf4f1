"""Reading TREC qrels: ``turn_id iteration passage_id grade`` per line."""

from __future__ import annotations

from pathlib import Path

from apcir.console import warn
from apcir.contract.records import Qrels
from apcir.errors import ApcirError
from apcir.ids import canonical_turn_id
from apcir.io import atomic_write, columns, iter_lines

MAX_GRADE = 4


def load_qrels(path: Path) -> Qrels:
    """Judgements by canonical turn id; any whitespace separates the four fields.

    Turn ids in either form (``9-1_3`` or ``9-1-3``) are read as canonical ids.
    A passage judged twice for one turn is an error (the grades could disagree).
    """
    qrels: Qrels = {}
    repeated = 0
    unusual: dict[int, int] = {}
    for number, fields in columns(iter_lines(path, "qrels file"), path, "turn_id iteration passage_id grade"):
        turn, _, passage, grade_text = fields
        try:
            grade = int(grade_text)
        except ValueError:
            raise ApcirError(f"grade {grade_text!r} is not an integer", path=path, line=number) from None
        try:
            turn_id = canonical_turn_id(turn)
        except ApcirError as exc:
            raise ApcirError(str(exc), path=path, line=number) from None
        judged = qrels.setdefault(turn_id, {})
        if passage in judged and judged[passage] != grade:
            raise ApcirError(
                f"passage {passage} judged twice for turn {turn_id} ({judged[passage]} and {grade})",
                path=path,
                line=number,
            )
        if passage in judged:
            repeated += 1
        if not 0 <= grade <= MAX_GRADE:
            unusual[grade] = unusual.get(grade, 0) + 1
        judged[passage] = grade
    if not qrels:
        raise ApcirError("qrels file has no judgements", path=path)
    if repeated:
        warn(f"{path}: {repeated} judgement(s) repeat an earlier line with the same grade (kept once)")
    if unusual:
        counts = ", ".join(f"{count} of grade {grade}" for grade, count in sorted(unusual.items()))
        warn(f"{path}: grades outside iKAT's 0-{MAX_GRADE} scale ({counts}); trec_eval counts negative grades "
             "as not relevant and uses the others as gains")
    return qrels


def write_qrels(qrels: Qrels, path: Path) -> None:
    """Write qrels in TREC format, turns and passages sorted."""
    with atomic_write(path) as out:
        for turn_id in sorted(qrels):
            for passage, grade in sorted(qrels[turn_id].items()):
                out.write(f"{turn_id} 0 {passage} {grade}\n")

