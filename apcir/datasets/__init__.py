"""Bundled iKAT topics, qrels and the provenance mini-collection, and their loaders."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from apcir.contract.records import Qrels, Turn
from apcir.datasets.collection import iter_collection, load_collection, passage_texts
from apcir.datasets.qrels import load_qrels, write_qrels
from apcir.datasets.registry import (
    COLLECTIONS,
    IR_DATASETS,
    NUGGETS,
    QRELS,
    REFERENCES,
    RESPONSE_RUNS,
    TOPICS,
    collection_path,
    nuggets_file,
    qrels_path,
    references_file,
    response_run_files,
    topics_path,
)
from apcir.datasets.topics import load_topics, year_of_topics
from apcir.errors import ApcirError
from apcir.ids import canonical_turn_id
from apcir.io import read_json


def topics(name_or_path: str | Path) -> list[Turn]:
    """Turns of a bundled topic set (``ikat23-test``), of an ir_datasets id (``trec-ikat/2023/judged``) or of a
    topic file; ``lampqa:FILE``: the questions of a LaMP-QA file (:mod:`apcir.datasets.lampqa`)."""
    from apcir.datasets.lampqa import PREFIX, load_lampqa

    if str(name_or_path).startswith(PREFIX):
        return load_lampqa(name_or_path)
    turns = load_topics(topics_path(name_or_path))
    entry = IR_DATASETS.get(str(name_or_path).removeprefix("irds:"))
    if entry is not None and entry.judged_only and entry.qrels:
        judged = set(qrels(entry.qrels))
        turns = [t for t in turns if t.turn_id in judged]
    return turns


def qrels(name_or_path: str | Path) -> Qrels:
    """Judgements of bundled qrels (``ikat23-test``) or of a qrels file."""
    return load_qrels(qrels_path(name_or_path))


def levels(spec: str | Path) -> dict[str, str]:
    """Per-turn levels from a file (TSV or reformulations JSONL), or ``annotators:TOPICS``: the oracle levels of
    those topics' PTKB provenance (:func:`apcir.contract.levels.annotator_levels`)."""
    from apcir.contract.levels import ANNOTATORS, annotator_levels, load_levels

    text = str(spec)
    if text.startswith(f"{ANNOTATORS}:"):
        return annotator_levels(topics(text.split(":", 1)[1]))
    return load_levels(spec)


def given_aspects(name_or_path: str | Path) -> dict[str, list[str]] | None:
    """The aspects a judge scores each turn by, when the topic set gives them (LaMP-QA's rubric aspects)."""
    from apcir.datasets.lampqa import PREFIX, rubric_aspects

    return rubric_aspects(name_or_path) if str(name_or_path).startswith(PREFIX) else None


def reference_responses(name_or_path: str | Path) -> dict[str, str]:
    """The canonical response of each turn, as ROUGE-L compares with: the topics' ``response``, replaced by the
    NIST assessors' gold response where one is bundled (``ikat25-test``: 45 turns)."""
    references = {t.turn_id: t.response for t in topics(name_or_path)}
    if str(name_or_path).startswith("lampqa:"):
        return references
    name = str(name_or_path)
    if name in REFERENCES:
        gold = read_json(references_file(name), "gold responses")
        references.update({canonical_turn_id(turn): str(text) for turn, text in gold.items()})
    return references


def topics_year(name_or_path: str | Path) -> int:
    """The iKAT year (2023, 2024 or 2025) whose submission format fits these topics.

    A bundled set says its year (``ikat23-test``: 2023). A topic file is told by
    its schema, as the organisers' validators read it
    (:data:`apcir.datasets.topics.TOPIC_YEARS`): the 2025 schema (``responses``)
    is 2025; conversation numbers that are all integers (``17``, the 2024 files
    write them as JSON numbers) are 2024, whose validator parses turn ids as
    ``<int>_<int>``; anything else (``9-1``) is 2023.
    """
    text = str(name_or_path).removeprefix("irds:")
    text = IR_DATASETS[text].topics if text in IR_DATASETS else text
    bundled = TOPICS[text].year if text in TOPICS else None
    if bundled is not None:
        return bundled
    return year_of_topics(read_json(topics_path(name_or_path), "topic file"))


def select_turns(
    name_or_path: str | Path, turns: Sequence[str] | None = None, judged_only: str | Path | None = None
) -> list[Turn]:
    """The turns of a topic set, restricted to ``turns`` (ids; comma-separated items allowed) and judged ones.

    An id that is not in the topics is an error naming it; so is a selection
    that leaves no turn.
    """
    selected = topics(name_or_path)
    if turns:
        wanted = [canonical_turn_id(t) for item in turns for t in str(item).split(",") if t.strip()]
        known = {t.turn_id for t in selected}
        missing = [t for t in wanted if t not in known]
        if missing:
            raise ApcirError(f"turns not in {name_or_path}: {', '.join(missing)}")
        keep = set(wanted)
        selected = [t for t in selected if t.turn_id in keep]
    if judged_only:
        judged = set(qrels(judged_only))
        selected = [t for t in selected if t.turn_id in judged]
        if not selected:
            raise ApcirError(f"no turn of {name_or_path} is judged in {judged_only}")
    return selected


__all__ = [
    "COLLECTIONS",
    "IR_DATASETS",
    "NUGGETS",
    "REFERENCES",
    "RESPONSE_RUNS",
    "QRELS",
    "TOPICS",
    "collection_path",
    "iter_collection",
    "load_collection",
    "load_qrels",
    "load_topics",
    "qrels",
    "passage_texts",
    "qrels_path",
    "nuggets_file",
    "reference_responses",
    "references_file",
    "response_run_files",
    "select_turns",
    "topics",
    "topics_path",
    "topics_year",
    "write_qrels",
]
