"""Passage collections in JSONL.

Two layouts are read: pyserini's ``{"id": ..., "contents": ...}`` and the iKAT
provenance layout ``{"doc_id", "passage_id", "passage_text"}``, whose passage
id is ``<doc_id>:<passage_id>`` as in the iKAT qrels.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from apcir.contract.records import Passage
from apcir.errors import ApcirError
from apcir.ids import check_run_id
from apcir.io import iter_jsonl


def iter_collection(path: Path) -> Iterator[Passage]:
    """Yield passages in file order; a line without an id or text, an id with whitespace, or a repeated id, is an
    error."""
    seen: set[str] = set()
    for number, record in iter_jsonl(path):
        passage = _passage(record, path, number)
        if passage.id in seen:
            raise ApcirError(f"duplicate passage id {passage.id!r}", path=path, line=number)
        seen.add(passage.id)
        yield passage


def passage_texts(path: Path, ids: Iterable[str]) -> dict[str, str]:
    """The texts of the passages ``ids`` only, read in one pass over the collection (the rest is not kept)."""
    wanted = set(ids)
    found: dict[str, str] = {}
    if not wanted:
        return found
    for passage in iter_collection(path):
        if passage.id in wanted:
            found[passage.id] = passage.contents
            if len(found) == len(wanted):
                break
    return found


def load_collection(path: Path) -> list[Passage]:
    return list(iter_collection(path))


def collection_fingerprint(path: Path) -> str:
    """SHA-256 of the collection file's bytes (recorded in index manifests)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _passage(record: dict[str, Any], path: Path, number: int) -> Passage:
    if "id" in record or "contents" in record:
        pid, text = record.get("id"), record.get("contents")
        expected = "'id' and 'contents'"
    elif "doc_id" in record or "passage_text" in record:
        doc, part = record.get("doc_id"), record.get("passage_id")
        pid = None if doc is None or part is None else f"{doc}:{part}"
        text = record.get("passage_text")
        expected = "'doc_id', 'passage_id' and 'passage_text'"
    else:
        raise ApcirError(
            "a passage needs {'id', 'contents'} (pyserini layout) or "
            "{'doc_id', 'passage_id', 'passage_text'} (iKAT layout); found keys "
            f"{sorted(record)}",
            path=path,
            line=number,
        )
    if pid is None or str(pid).strip() == "" or not isinstance(text, str):
        raise ApcirError(f"passage without id or text: expected {expected}", path=path, line=number)
    return Passage(id=check_run_id(str(pid), "passage id", path, number), contents=text.strip())
