"""Bundled datasets by name; any name may also be a path to a file.

Topics live in ``apcir/datasets/topics/``, collections in
``apcir/datasets/collections/`` and qrels in the repository's ``qrels/`` folder
(shipped inside the wheel as ``apcir/datasets/qrels/``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from apcir.errors import ApcirError

_HERE = Path(__file__).resolve().parent
_REPO_QRELS = _HERE.parent.parent / "qrels"


@dataclass(frozen=True)
class BundledDataset:
    name: str
    description: str
    source: str
    year: int | None = None
    """The iKAT year of a topic set (whose submission format fits it)."""


IKAT25_SOURCE = ("irlabamsterdam/ikat2025 (CC BY 4.0; TREC iKAT 2025: A Test Collection for the Offline and "
                 "Interactive Evaluation of Conversational Search, Abbasiantaeb, Lupart et al.)")

TOPICS: dict[str, BundledDataset] = {
    "ikat23-train": BundledDataset("ikat23-train", "iKAT 2023 train conversations", "irlabamsterdam/iKAT (MIT)",
                                   2023),
    "ikat23-test": BundledDataset("ikat23-test", "iKAT 2023 test conversations", "irlabamsterdam/iKAT (MIT)", 2023),
    "ikat24-test": BundledDataset("ikat24-test", "iKAT 2024 test conversations", "irlabamsterdam/iKAT (MIT)", 2024),
    "ikat25-test": BundledDataset("ikat25-test", "iKAT 2025 test conversations", "irlabamsterdam/iKAT (MIT)", 2025),
}

QRELS: dict[str, BundledDataset] = {
    "ikat23-test": BundledDataset("ikat23-test", "iKAT 2023 passage qrels, grades 0-4", "NIST, TREC iKAT 2023"),
    "ikat24-test": BundledDataset("ikat24-test", "iKAT 2024 passage qrels, grades 0-4", "NIST, TREC iKAT 2024"),
    "ikat23-test-ptkb": BundledDataset(
        "ikat23-test-ptkb", "iKAT 2023 PTKB-statement qrels, grades 0/1", "irlabamsterdam/iKAT (MIT)"
    ),
    "ikat25-test": BundledDataset("ikat25-test", "iKAT 2025 passage qrels (NIST), grades 0-4, 45 turns",
                                  IKAT25_SOURCE),
    "ikat25-test-ptkb": BundledDataset(
        "ikat25-test-ptkb", "iKAT 2025 PTKB-statement qrels (NIST), grades 0-4, 45 turns; statement ids as apcir "
        "numbers them (1-based positions; apcir.datasets.ikat25_ptkb)", IKAT25_SOURCE),
    "ikat23-test-provenance": BundledDataset(
        "ikat23-test-provenance",
        "iKAT 2023 passage qrels restricted to the ikat23-provenance collection (74 turns with a relevant "
        "passage in it; not comparable with full-collection numbers)",
        "NIST, TREC iKAT 2023 (apcir.retrieval.provenance_qrels)",
    ),
}

NUGGETS: dict[str, BundledDataset] = {
    "ikat25-test": BundledDataset("ikat25-test", "iKAT 2025 gold nuggets extracted by NIST assessors: 2,241 over 45 "
                                  "turns, each a span of a relevant passage or a PTKB statement", IKAT25_SOURCE),
}

RESPONSE_RUNS: dict[str, BundledDataset] = {
    "ikat25-runs": BundledDataset("ikat25-runs", "three iKAT 2025 runs' generated responses (cfda-auto-1, "
                                  "UCSC-base-ensemble, the organisers' baseline), 45 judged turns", IKAT25_SOURCE),
}

REFERENCES: dict[str, BundledDataset] = {
    "ikat25-test": BundledDataset("ikat25-test", "iKAT 2025 gold responses written by NIST assessors (45 turns): the "
                                  "canonical responses ROUGE-L compares with", IKAT25_SOURCE),
}

COLLECTIONS: dict[str, BundledDataset] = {
    "ikat23-provenance": BundledDataset(
        "ikat23-provenance",
        "the 894 ClueWeb22 passages cited as provenance in the iKAT 2023 train and test topics",
        "irlabamsterdam/iKAT (MIT)",
    ),
}


@dataclass(frozen=True)
class IrDatasetsId:
    """An ir_datasets id apcir serves from its bundled data (``import apcir.irds`` registers them)."""

    topics: str
    qrels: str | None = None
    collection: str | None = None
    judged_only: bool = False
    """Only the turns the qrels judge (the ``/judged`` ids of ir_datasets PR #264)."""
    description: str = ""


# The ids ir_datasets PR #264 proposes (trec-ikat/2023, /judged, /judged/ptkb) and the per-split ids apcir adds.
IR_DATASETS: dict[str, IrDatasetsId] = {
    "trec-ikat/2023": IrDatasetsId("ikat23-test", "ikat23-test", description="iKAT 2023 test topics and qrels"),
    "trec-ikat/2023/judged": IrDatasetsId("ikat23-test", "ikat23-test", judged_only=True,
                                          description="iKAT 2023 test turns that NIST judged, with their qrels"),
    "trec-ikat/2023/judged/ptkb": IrDatasetsId("ikat23-test", "ikat23-test-ptkb", judged_only=True,
                                               description="iKAT 2023 judged turns with the PTKB-statement qrels"),
    "trec-ikat/2023/train": IrDatasetsId("ikat23-train", description="iKAT 2023 train topics (no qrels)"),
    "trec-ikat/2023/test": IrDatasetsId("ikat23-test", "ikat23-test", description="iKAT 2023 test topics and qrels"),
    "trec-ikat/2023/test/ptkb": IrDatasetsId("ikat23-test", "ikat23-test-ptkb",
                                             description="iKAT 2023 test topics with the PTKB-statement qrels"),
    "trec-ikat/2023/test/provenance": IrDatasetsId(
        "ikat23-test", "ikat23-test-provenance", "ikat23-provenance",
        description="iKAT 2023 test topics, the 894 provenance passages as documents, qrels restricted to them"),
    "trec-ikat/2024/test": IrDatasetsId("ikat24-test", "ikat24-test", description="iKAT 2024 test topics and qrels"),
    "trec-ikat/2025/test": IrDatasetsId("ikat25-test", "ikat25-test",
                                        description="iKAT 2025 test topics and NIST qrels (45 judged turns)"),
}


def _looks_like_path(value: str) -> bool:
    return "/" in value or "\\" in value or Path(value).suffix != "" or Path(value).exists()


def _resolve(
    value: str | Path, known: dict[str, BundledDataset], kind: str, locate: Callable[[str], Path]
) -> Path:
    text = str(value).removeprefix("irds:")  # PyTerrier's spelling of an ir_datasets id
    if text in IR_DATASETS:
        entry = IR_DATASETS[text]
        bundled = {"topic set": entry.topics, "qrels": entry.qrels, "collection": entry.collection}[kind]
        if bundled is None:
            raise ApcirError(f"the ir_datasets id {text!r} has no {kind}")
        text = bundled
    if text in known:
        return locate(text)
    if _looks_like_path(text):
        path = Path(text).expanduser()
        if not path.exists():
            raise ApcirError(f"{kind} file not found", path=path)
        return path
    from apcir.registry import unknown_name

    raise ApcirError(unknown_name(kind, text, sorted(known), hint=", or a path to a file"))


def _topics_file(name: str) -> Path:
    return _HERE / "topics" / f"{name}.json"


def _qrels_file(name: str) -> Path:
    for folder in (_HERE / "qrels", _REPO_QRELS):
        candidate = folder / f"{name}.qrels"
        if candidate.exists():
            return candidate
    raise ApcirError(f"bundled qrels {name!r} are missing from this installation (looked in {_HERE / 'qrels'})")


IKAT25 = _HERE / "ikat25"
"""The bundled iKAT 2025 judgments beside the qrels: nuggets, gold responses, three runs' responses (CC BY 4.0)."""


def nuggets_file(name: str) -> Path:
    return {"ikat25-test": IKAT25 / "nuggets-nist.json"}[name]


def response_run_files(name: str) -> list[Path]:
    return {"ikat25-runs": sorted((IKAT25 / "responses").glob("*.json"))}[name]


def references_file(name: str) -> Path:
    return {"ikat25-test": IKAT25 / "gold-response-nist.json"}[name]


def _collection_file(name: str) -> Path:
    return _HERE / "collections" / f"{name}.jsonl"


def topics_path(value: str | Path) -> Path:
    """Path of bundled topics by name, or the given path."""
    return _resolve(value, TOPICS, "topic set", _topics_file)


def qrels_path(value: str | Path) -> Path:
    """Path of bundled qrels by name, or the given path."""
    return _resolve(value, QRELS, "qrels", _qrels_file)


def collection_path(value: str | Path) -> Path:
    """Path of a bundled collection by name, or the given path."""
    return _resolve(value, COLLECTIONS, "collection", _collection_file)
