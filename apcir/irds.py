"""iKAT in ir_datasets, served offline from apcir's bundled data.

``import apcir.irds`` registers the ids of :data:`apcir.datasets.IR_DATASETS`
with ir_datasets (as ir_datasets' extension packages do, on import)::

    import ir_datasets
    import apcir.irds  # noqa: F401

    dataset = ir_datasets.load("trec-ikat/2023/test")
    for query in dataset.queries_iter():  # IkatQuery: utterance, manual rewrite, history, PTKB
        ...
    qrels = list(dataset.qrels_iter())  # exactly apcir.qrels("ikat23-test")

PyTerrier reaches the same ids as ``pt.get_dataset("irds:trec-ikat/2023/test")``.
The ClueWeb22 documents are licensed and not served; ``trec-ikat/2023/test/provenance``
serves the 894 bundled provenance passages as its documents. apcir itself accepts
every id (with or without ``irds:``) wherever it accepts a dataset name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from apcir import datasets
from apcir.contract.records import Turn
from apcir.datasets.registry import IR_DATASETS, IrDatasetsId


class IkatHistoryTurn(NamedTuple):
    """An earlier turn of the conversation: its utterance and the canonical response."""

    turn_id: str
    utterance: str
    response: str


class IkatQuery(NamedTuple):
    """One iKAT turn as an ir_datasets query; ``text`` is the raw utterance."""

    query_id: str
    text: str
    manual_rewrite: str
    conversation_id: str
    turn_number: int
    title: str
    response: str
    history: tuple[IkatHistoryTurn, ...]
    ptkb: tuple[tuple[str, str], ...]
    """The user's PTKB statements as (statement id, text), in the profile's order."""
    ptkb_provenance: tuple[str, ...]
    response_provenance: tuple[str, ...]


class IkatDoc(NamedTuple):
    doc_id: str
    text: str


class IkatQrel(NamedTuple):
    query_id: str
    doc_id: str
    relevance: int
    iteration: str


def ikat_query(turn: Turn) -> IkatQuery:
    """The ir_datasets query of one turn."""
    return IkatQuery(
        turn.turn_id, turn.utterance, turn.manual_rewrite, turn.conversation_id, turn.turn_number, turn.title,
        turn.response, tuple(IkatHistoryTurn(h.turn_id, h.utterance, h.response) for h in turn.history),
        tuple(turn.ptkb.items()), tuple(turn.ptkb_provenance), tuple(turn.response_provenance),
    )


def _base(kind: str) -> Any:
    from ir_datasets import formats

    return getattr(formats, kind)


class _Ikat:
    """What every iKAT provider says of itself (ir_datasets asks each kind: ``queries_lang``, ``docs_lang``, ...)."""

    def queries_namespace(self) -> str:
        return "trec-ikat"

    def queries_lang(self) -> str:
        return "en"

    docs_namespace = queries_namespace
    docs_lang = queries_lang


def _queries(dataset_id: str) -> Any:
    class Queries(_Ikat, _base("BaseQueries")):  # type: ignore[misc]
        def queries_iter(self) -> Iterator[IkatQuery]:
            return (ikat_query(t) for t in datasets.topics(dataset_id))

        def queries_cls(self) -> type:
            return IkatQuery

    return Queries()


def _qrels(name: str) -> Any:
    class Qrels(_base("BaseQrels")):  # type: ignore[misc]
        def qrels_iter(self) -> Iterator[IkatQrel]:
            for turn, grades in datasets.qrels(name).items():
                for doc, grade in grades.items():
                    yield IkatQrel(turn, doc, grade, "0")

        def qrels_cls(self) -> type:
            return IkatQrel

        def qrels_defs(self) -> dict[int, str]:
            if name.endswith("-ptkb"):
                return {0: "the statement is not relevant to the turn", 1: "the statement is relevant to the turn"}
            return {0: "not relevant", 1: "slightly relevant", 2: "relevant", 3: "highly relevant",
                    4: "fully relevant"}

    return Qrels()


def _docs(name: str) -> Any:
    class Docs(_Ikat, _base("BaseDocs")):  # type: ignore[misc]
        def docs_iter(self) -> Iterator[IkatDoc]:
            return (IkatDoc(p.id, p.contents) for p in datasets.iter_collection(datasets.collection_path(name)))

        def docs_count(self) -> int:
            return sum(1 for _ in datasets.iter_collection(datasets.collection_path(name)))

        def docs_cls(self) -> type:
            return IkatDoc

    return Docs()


def dataset(dataset_id: str, entry: IrDatasetsId) -> Any:
    """The ir_datasets ``Dataset`` of one id."""
    from ir_datasets.datasets.base import Dataset

    parts: list[Any] = [_queries(dataset_id)]
    if entry.qrels:
        parts.append(_qrels(entry.qrels))
    if entry.collection:
        parts.append(_docs(entry.collection))
    return Dataset(*parts)


def register() -> list[str]:
    """Register every id with ir_datasets (again: a no-op); returns the ids."""
    import ir_datasets

    for dataset_id, entry in IR_DATASETS.items():
        if dataset_id not in ir_datasets.registry:
            ir_datasets.registry.register(dataset_id, dataset(dataset_id, entry))
    return list(IR_DATASETS)


register()
