"""Data by name, id, file or in memory: topics, qrels, collections, and what the stage functions take either way."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from apcir import datasets
from apcir.console import set_quiet
from apcir.contract.records import Passage, Qrels, Turn

PathLike = str | Path


def topics(name_or_path: PathLike) -> list[Turn]:
    """The turns of a bundled topic set (``ikat23-test``), an ir_datasets id (``trec-ikat/2023/test``) or a topic
    file (any iKAT year's schema), each with its history and the user's PTKB."""
    return datasets.topics(name_or_path)


def qrels(name_or_path: PathLike) -> Qrels:
    """Judgements ``{turn_id: {passage_id: grade}}`` of bundled qrels (``ikat23-test``), an ir_datasets id or a
    TREC qrels file."""
    return datasets.qrels(name_or_path)


def collection(name_or_path: PathLike) -> Iterator[Passage]:
    """The passages of a bundled collection (``ikat23-provenance``) or a JSONL/TSV collection file, one at a time."""
    return datasets.iter_collection(datasets.collection_path(name_or_path))


def quiet(on: bool = True) -> None:
    """Silence (``on=True``) or restore everything apcir says: warnings, notes and progress bars."""
    set_quiet(on)


def turn_list(value: PathLike | Sequence[Turn]) -> list[Turn]:
    """Turns given as topics (a name, id or file) or as a sequence of :class:`Turn` records."""
    return topics(value) if isinstance(value, (str, Path)) else list(value)


def judgements_of(value: PathLike | Mapping[str, Mapping[str, int]]) -> tuple[Qrels, str]:
    """Qrels given by name, id or file, or in memory; with the name a table's caption gives them."""
    if isinstance(value, Mapping):
        return {t: dict(g) for t, g in value.items()}, "the qrels"
    return datasets.qrels(value), str(value)


def passage_texts(passages: PathLike | Mapping[str, str], ids: set[str]) -> dict[str, str]:
    """The texts of ``ids`` from ``{passage_id: text}`` or a collection (only these are read)."""
    if isinstance(passages, Mapping):
        return {p: passages[p] for p in ids if p in passages}
    return datasets.passage_texts(datasets.collection_path(passages), ids)
