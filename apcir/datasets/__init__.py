"""Bundled iKAT topics, qrels and the provenance mini-collection, and their loaders."""

from __future__ import annotations

from pathlib import Path

from apcir.datasets.collection import iter_collection, load_collection
from apcir.datasets.qrels import load_qrels, write_qrels
from apcir.datasets.registry import COLLECTIONS, QRELS, TOPICS, collection_path, qrels_path, topics_path
from apcir.datasets.topics import load_topics
from apcir.models import Qrels, Turn


def topics(name_or_path: str | Path) -> list[Turn]:
    """Turns of a bundled topic set (``ikat23-test``) or of a topic file."""
    return load_topics(topics_path(name_or_path))


def qrels(name_or_path: str | Path) -> Qrels:
    """Judgements of bundled qrels (``ikat23-test``) or of a qrels file."""
    return load_qrels(qrels_path(name_or_path))


__all__ = [
    "COLLECTIONS",
    "QRELS",
    "TOPICS",
    "collection_path",
    "iter_collection",
    "load_collection",
    "load_qrels",
    "load_topics",
    "qrels",
    "qrels_path",
    "topics",
    "topics_path",
    "write_qrels",
]
