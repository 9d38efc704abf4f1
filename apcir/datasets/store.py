"""Passage texts by id without holding the collection in memory: a byte-offset index over the JSONL.

:func:`build_offsets` reads a collection once and writes, for every passage,
a 64-bit hash of its id and the byte offset of its line, sorted by hash
(16 bytes a passage: 1.9 GB for the 116M passages of ClueWeb22, memory-mapped
when read). :class:`PassageStore` then fetches a text by seeking to its line;
a hash collision is resolved by reading the candidate lines and comparing ids.
The index build writes the offsets beside apcir's index, so a stage that needs
a few thousand texts (the submission's cited passages, a re-ranker's top 100)
reads just those lines.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import numpy as np

from apcir.datasets.collection import _passage
from apcir.errors import ApcirError
from apcir.io import atomic_write, json_loads, parse_json_line

OFFSETS = "passages.offsets.npz"


def id_hash(passage_id: str) -> int:
    """A stable signed 64-bit hash of a passage id."""
    return int.from_bytes(hashlib.blake2b(passage_id.encode("utf-8"), digest_size=8).digest(), "little", signed=True)


def build_offsets(collection: Path, out: Path) -> int:
    """Write the offset index of ``collection`` to ``out``; returns the number of passages."""
    hashes: list[int] = []
    offsets: list[int] = []
    with Path(collection).open("rb") as handle:
        number = 0
        while True:
            offset = handle.tell()
            raw = handle.readline()
            if not raw:
                break
            number += 1
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ApcirError("not UTF-8 text", path=collection, line=number) from None
            passage = _passage(parse_json_line(text, collection, number), collection, number)
            hashes.append(id_hash(passage.id))
            offsets.append(offset)
    keys = np.array(hashes, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    _refuse_duplicates(collection, keys[order], np.array(offsets, dtype=np.int64)[order])
    with atomic_write(out, "wb") as handle:
        np.savez(handle, hashes=keys[order], offsets=np.array(offsets, dtype=np.int64)[order])
    return int(keys.size)


def _refuse_duplicates(collection: Path, keys: np.ndarray, offsets: np.ndarray) -> None:
    """A passage id twice in the collection is an error (which text would be read is undefined). Only passages
    whose id hashes collide are read again, so this costs nothing on a collection without repeats."""
    same = np.flatnonzero(keys[1:] == keys[:-1])
    if not same.size:
        return
    with Path(collection).open("rb") as handle:
        def id_at(offset: int) -> str:
            handle.seek(int(offset))
            return _passage(parse_json_line(handle.readline().decode("utf-8"), collection, 0), collection, 0).id

        for i in same:
            first, second = id_at(offsets[i]), id_at(offsets[i + 1])
            if first == second:
                raise ApcirError(f"passage id {first!r} appears more than once (at byte offsets {int(offsets[i])} "
                                 f"and {int(offsets[i + 1])}); each passage needs its own id", path=collection)


class PassageStore(Mapping[str, str]):
    """A collection's texts by passage id, read line by line through an offset index (see the module doc)."""

    def __init__(self, collection: Path, offsets: Path):
        self.collection = Path(collection)
        try:
            data = np.load(offsets, mmap_mode="r")
            self._hashes = data["hashes"]
            self._offsets = data["offsets"]
        except (OSError, ValueError, KeyError) as exc:
            raise ApcirError(f"unreadable passage offsets ({exc}); rebuild the index", path=offsets) from None

    def _candidates(self, passage_id: str) -> np.ndarray:
        key = id_hash(passage_id)
        lo = int(np.searchsorted(self._hashes, key, side="left"))
        hi = int(np.searchsorted(self._hashes, key, side="right"))
        return np.asarray(self._offsets[lo:hi])

    def texts(self, ids: Iterable[str]) -> dict[str, str]:
        """The texts of ``ids`` that are in the collection (one seek and one line read each)."""
        found: dict[str, str] = {}
        wanted = sorted(set(ids))
        with self.collection.open("rb") as handle:
            for passage_id in wanted:
                for offset in self._candidates(passage_id):
                    handle.seek(int(offset))
                    raw = handle.readline()
                    try:
                        passage = _passage(json_loads(raw, self.collection), self.collection, 0)
                    except (ValueError, ApcirError):
                        raise ApcirError("the collection changed since its offsets were written; rebuild the index",
                                         path=self.collection) from None
                    if passage.id == passage_id:
                        found[passage_id] = passage.contents
                        break
        return found

    def __getitem__(self, passage_id: str) -> str:
        texts = self.texts([passage_id])
        if passage_id not in texts:
            raise KeyError(passage_id)
        return texts[passage_id]

    def __iter__(self) -> Iterator[str]:
        raise TypeError("a PassageStore looks passages up by id; it does not list the collection")

    def __len__(self) -> int:
        return int(self._hashes.shape[0])


def offsets_cache_dir() -> Path:
    """Where offsets of collections not indexed by apcir are kept: ``$APCIR_CACHE_DIR/../offsets`` or ~/.cache."""
    env = os.environ.get("APCIR_CACHE_DIR")
    base = Path(env).expanduser().parent if env else Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "apcir"
    return base / "offsets"


def store_for(collection: Path, offsets: Path | None = None) -> PassageStore:
    """A :class:`PassageStore` over ``collection``: ``offsets`` if given and present, else offsets cached by
    the file's path, size and modification time (built on first use, in one pass over the file)."""
    collection = Path(collection)
    if offsets is not None and offsets.exists():
        return PassageStore(collection, offsets)
    stat = collection.stat()
    key = hashlib.sha256(f"{collection.resolve()} {stat.st_size} {stat.st_mtime_ns}".encode()).hexdigest()[:24]
    cached = offsets_cache_dir() / f"{key}.npz"
    if not cached.exists():
        build_offsets(collection, cached)
    return PassageStore(collection, cached)
