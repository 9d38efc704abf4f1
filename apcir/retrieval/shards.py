"""Reading a collection's shards: the passages whose lines start in one of N equal byte ranges of its file.

A shard ``i/N`` (0-based, ``0 <= i < N``) is the passages whose lines start in the i-th of N equal byte ranges of
the collection file, so a shard job of :func:`apcir.retrieval.build.build_index` reads only its part of the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from apcir.console import warn
from apcir.contract.records import Passage
from apcir.datasets.collection import _passage as passage_from_record
from apcir.errors import ApcirError
from apcir.io import json_loads


def parse_shard(text: str | tuple[int, int] | None) -> tuple[int, int] | None:
    """``"3/8"`` -> ``(3, 8)``; shards are numbered from 0 (SLURM array style)."""
    if text is None or isinstance(text, tuple):
        shard = text
    else:
        parts = text.split("/")
        try:
            shard = (int(parts[0]), int(parts[1])) if len(parts) == 2 else None
        except ValueError:
            shard = None
        if shard is None:
            raise ApcirError(f"--shard {text!r}: expected i/N, e.g. 0/8 for the first of eight shards")
    if shard is not None and not (shard[1] >= 1 and 0 <= shard[0] < shard[1]):
        raise ApcirError(f"--shard {shard[0]}/{shard[1]}: need N >= 1 and 0 <= i < N (shards count from 0)")
    return shard


def iter_shard(path: Path, index: int, shards: int) -> Iterator[tuple[str, Passage]]:
    """Passages whose lines start in byte range ``index`` of ``shards``; yields (location, passage)."""
    size = path.stat().st_size
    start, end = size * index // shards, size * (index + 1) // shards
    seen: set[str] = set()
    with path.open("rb") as handle:
        if start > 0:
            handle.seek(start - 1)
            handle.readline()  # finish the line that started before this range
        number = 0
        while True:
            offset = handle.tell()
            if offset >= end:
                break
            raw = handle.readline()
            if not raw:
                break
            number += 1
            where = f"line {number}" if index == 0 else f"shard {index}/{shards}, byte offset {offset}"
            if not raw.strip():
                continue
            line = number if index == 0 else None
            passage = _parse_line(raw, path, line, where)
            if passage.id in seen:
                _fail(f"duplicate passage id {passage.id!r}", path, line, where)
            seen.add(passage.id)
            yield where, passage


def _fail(message: str, path: Path, line: int | None, where: str) -> NoReturn:
    """Raise naming ``file:line`` (shard 0 counts lines) or the shard and byte offset."""
    if line is not None:
        raise ApcirError(message, path=path, line=line)
    raise ApcirError(f"{message} ({where})", path=path)


def _parse_line(raw: bytes, path: Path, line: int | None, where: str) -> Passage:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        _fail(f"not UTF-8 text (byte {raw[exc.start:exc.start + 1]!r})", path, line, where)
    try:
        record: Any = json_loads(text, path, line)
    except ApcirError as exc:
        _fail(exc.message, path, line, where)
    if not isinstance(record, dict):
        _fail(f"expected a JSON object, found {type(record).__name__}", path, line, where)
    try:
        passage = passage_from_record(record, path, line)  # type: ignore[arg-type]
    except ApcirError as exc:
        if line is not None:
            raise
        raise ApcirError(f"{exc} ({where})") from None
    return passage


def count_shard(path: Path, index: int, shards: int) -> int:
    """Passages in a shard; validates every line, and warns about passages with an empty text."""
    total = empty = 0
    first_empty = ""
    for where, passage in iter_shard(path, index, shards):
        total += 1
        if not passage.contents.strip():
            empty += 1
            first_empty = first_empty or f"{passage.id} ({where})"
    if empty:
        warn(f"{path}: {empty} passage(s) have an empty text (first: {first_empty}); they are indexed but "
             "match no query")
    return total
