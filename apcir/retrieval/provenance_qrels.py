"""The qrels of the demo collection: ``qrels/ikat23-test-provenance.qrels``.

The iKAT-23 test qrels restricted to passages of the ``ikat23-provenance``
collection (894 passages). Kept: every judgement (any grade, 0 included) of a
passage in the collection, for the turns that have at least one passage of
grade >= 1 in the collection. Turns whose in-collection judgements are all 0
are left out: no run can score on them, so they would only pull every mean
towards 0. Numbers on this collection are NOT comparable with full-collection
(ClueWeb22) numbers.

Regenerate with ``python -m apcir.retrieval.provenance_qrels [OUT]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from apcir.contract.records import Qrels

SOURCE_QRELS = "ikat23-test"
COLLECTION = "ikat23-provenance"
MIN_GRADE = 1


def restrict_qrels(qrels: Qrels, passage_ids: set[str], min_grade: int = MIN_GRADE) -> Qrels:
    """Judgements of passages in ``passage_ids``, for turns with one of grade >= ``min_grade`` among them."""
    restricted: Qrels = {}
    for turn, judged in qrels.items():
        kept = {pid: grade for pid, grade in judged.items() if pid in passage_ids}
        if any(grade >= min_grade for grade in kept.values()):
            restricted[turn] = kept
    return restricted


def provenance_qrels() -> Qrels:
    from apcir import datasets

    ids = {p.id for p in datasets.iter_collection(datasets.collection_path(COLLECTION))}
    return restrict_qrels(datasets.qrels(SOURCE_QRELS), ids)


def main(argv: list[str] | None = None) -> None:
    from apcir.datasets import write_qrels

    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else Path(__file__).resolve().parents[2] / "qrels" / "ikat23-test-provenance.qrels"
    qrels = provenance_qrels()
    write_qrels(qrels, out)
    relevant = sum(1 for j in qrels.values() for g in j.values() if g >= MIN_GRADE)
    print(f"wrote {out}: {len(qrels)} turns, {sum(len(j) for j in qrels.values())} judgements, {relevant} relevant")


if __name__ == "__main__":
    main()
