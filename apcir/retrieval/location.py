"""Where an index lives: a directory, or a collection in a vector database named by a URI.

Most backends keep their index in a directory. The ``milvus`` backends keep it
in Milvus, named by a location::

    milvus:PATH.db                   Milvus Lite, embedded: a local database (a directory Milvus creates)
    milvus:PATH.db#NAME              ... the collection NAME in it (default: apcir)
    milvus://HOST:PORT/COLLECTION    a Milvus server or cluster (gRPC/HTTP on PORT, usually 19530)
    milvus+https://HOST:PORT/COLLECTION   the same over TLS (e.g. Zilliz Cloud)

A token for a server is read from ``$APCIR_MILVUS_TOKEN`` (``user:password`` or
an API key); it is never written into a manifest, a config or a run directory.

Every index also has a local *folder*: for a directory index the directory
itself; for a Milvus index a companion folder holding what apcir keeps beside
the vectors (``manifest.json``, the collection's passage offsets, the
resumable build's chunks): ``PATH.db.apcir/`` next to a Milvus Lite database;
for a server, a folder named by the collection itself, not by the address it
was reached through: ``$APCIR_CACHE_DIR/../milvus/COLLECTION-ID/`` (default
``~/.cache/apcir/milvus/...``; ID is the collection's id in the server), so the
same collection reached through another address or port finds the same
folder. The manifest is also stored in the collection itself, so another
machine pointed at the same cluster restores the folder from it
(:mod:`apcir.retrieval.milvus.collection`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from apcir.errors import ApcirError
from apcir.settings import secret_from_env

SCHEME = "milvus"
TOKEN_ENV = "APCIR_MILVUS_TOKEN"
DEFAULT_COLLECTION = "apcir"
MAX_NAME = 255
"""Milvus's limit on a collection name's length (its ``proxy.maxNameLength``: milvus.io/docs/limitations.md)."""
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class MilvusLocation:
    """A collection in Milvus: the client's ``uri`` (a ``.db`` path for Milvus Lite) and the collection name."""

    uri: str
    collection: str
    lite: bool

    def __str__(self) -> str:
        if self.lite:
            suffix = "" if self.collection == DEFAULT_COLLECTION else f"#{self.collection}"
            return f"{SCHEME}:{self.uri}{suffix}"
        scheme, _, rest = self.uri.partition("://")
        prefix = SCHEME if scheme == "http" else f"{SCHEME}+{scheme}"
        return f"{prefix}://{rest}/{self.collection}"

    @property
    def root(self) -> Path:
        """The local folder its companion folder lives in, known without asking the server: a Milvus Lite
        database's companion folder itself; for a server apcir's Milvus cache folder (the companion folder in it
        is named by the collection's identity: :meth:`companion_folder`)."""
        if self.lite:
            return Path(self.uri + ".apcir")
        return milvus_cache_dir()

    def companion_folder(self, collection_id: int | str) -> Path:
        """The local companion folder of this collection (manifest, offsets, build chunks): ``PATH.db.apcir``
        for Milvus Lite; for a server ``<cache>/milvus/COLLECTION-ID``, the same whatever address reached it."""
        if self.lite:
            return self.root
        return self.root / f"{self.collection}-{collection_id}"

    @staticmethod
    def token() -> str:
        return secret_from_env(TOKEN_ENV)


def is_milvus(text: str | Path) -> bool:
    return str(text).startswith((f"{SCHEME}:", f"{SCHEME}+"))


def parse_milvus(text: str | Path) -> MilvusLocation:
    """A ``milvus:`` location (see the module). A path given through ``pathlib`` (``milvus:/host:port/c``, one
    slash) is read as the server form unless it ends in ``.db``."""
    raw = str(text)
    scheme = raw.split(":", 1)[0]
    rest = raw[len(scheme) + 1:]
    transport = "http"
    if scheme.startswith(f"{SCHEME}+"):
        transport = scheme.split("+", 1)[1]
        if transport not in ("http", "https"):
            raise ApcirError(f"{raw}: unknown transport {transport!r} (milvus:// or milvus+https://)")
    elif scheme != SCHEME:
        raise ApcirError(f"{raw} is not a milvus: location")
    path, _, name = rest.partition("#")
    if path.endswith(".db") and transport == "http" and not path.startswith("//"):
        lite_path = Path(path).expanduser().resolve()
        location = MilvusLocation(str(lite_path), name or DEFAULT_COLLECTION, lite=True)
    else:
        server = path.lstrip("/")
        host, _, collection = server.partition("/")
        if not host or not collection or "/" in collection or name:
            raise ApcirError(f"{raw}: expected milvus:PATH.db (Milvus Lite) or milvus://HOST:PORT/COLLECTION "
                             "(a server)")
        if ":" not in host:
            host += ":19530"
        location = MilvusLocation(f"{transport}://{host}", collection, lite=False)
    name_problem = collection_name_problem(location.collection)
    if name_problem is not None:
        raise ApcirError(f"{raw}: {name_problem}")
    return location


def collection_name_problem(name: str) -> str | None:
    """What Milvus would refuse in a collection name (milvus.io/docs/limitations.md: at most 255 characters,
    ASCII letters, digits and underscores, not starting with a digit), or None."""
    shown = name if len(name) <= 40 else f"{name[:20]}...{name[-8:]}"
    if len(name) > MAX_NAME:
        return f"collection name {shown!r} is {len(name)} characters long; Milvus allows at most {MAX_NAME}"
    if not _NAME.fullmatch(name):
        return (f"collection name {shown!r} must be ASCII letters, digits and _, not starting with a digit "
                "(Milvus's rule)")
    return None


def milvus_cache_dir() -> Path:
    """apcir's Milvus cache folder: the companion folders of server collections, and pymilvus's log."""
    from apcir.datasets.store import offsets_cache_dir  # the cache root apcir's other caches share

    return offsets_cache_dir().parent / "milvus"


def index_folder(index: str | Path) -> Path:
    """The local folder an index's files live under, known without opening it: the directory itself; for a
    Milvus location its :attr:`MilvusLocation.root` (for a server, the cache folder that holds its companion
    folder)."""
    if is_milvus(index):
        return parse_milvus(index).root
    return Path(index).expanduser()
