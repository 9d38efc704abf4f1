"""The manifest every apcir index carries (``manifest.json``), and whether an index is up to date.

The manifest is written last, so a directory with a manifest holds a complete
index. It records the backend, the SPLADE model, its length budgets and the precision it
encoded the passages in, the collection (path, size, modification time, SHA-256) and counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from apcir.datasets.collection import collection_fingerprint
from apcir.errors import ApcirError
from apcir.io import read_text, timestamp, write_json

MANIFEST = "manifest.json"


class CollectionInfo(BaseModel):
    """Which collection file an index was built from."""

    name: str
    path: str
    size: int
    mtime_ns: int
    sha256: str

    @classmethod
    def of(cls, name: str, path: Path) -> CollectionInfo:
        stat = path.stat()
        return cls(
            name=name,
            path=str(path.resolve()),
            size=stat.st_size,
            mtime_ns=stat.st_mtime_ns,
            sha256=collection_fingerprint(path),
        )

    def same_file_contents(self, path: Path) -> bool:
        """True when ``path`` has the recorded bytes (size and mtime as a shortcut, else SHA-256)."""
        stat = path.stat()
        if stat.st_size != self.size:
            return False
        if stat.st_mtime_ns == self.mtime_ns and str(path.resolve()) == self.path:
            return True
        return collection_fingerprint(path) == self.sha256


class IndexManifest(BaseModel):
    format: Literal["apcir-index"] = "apcir-index"
    version: int = 1
    backend: str
    model: str | None = None
    query_max_length: int | None = None
    response_max_length: int | None = None
    doc_max_length: int | None = None
    vocab_size: int | None = None
    dimension: int | None = Field(None, description="dense backends: embedding size")
    dtype: str | None = None
    """The precision the passages were encoded in (float32, bfloat16, float16); None: an index from before apcir
    recorded it (float32), or one not encoded by apcir (BM25, precomputed vectors)."""
    collection: CollectionInfo
    passages: int
    nonzeros: int | None = None
    quantization_scale: int | None = None
    source: Literal["texts", "vectors"] = "texts"
    """``vectors``: built from a JsonVectorCollection, without encoding (``apcir index build --vectors``)."""
    weights: Literal["float", "integer"] | None = None
    """For an index built from vectors: whether the file's weights were quantised (every weight a JSON integer)."""
    location: str | None = None
    """Where a database backend keeps the vectors (``milvus:PATH.db``, ``milvus://HOST:PORT/COLLECTION``; no token)."""
    bm25_k1: float | None = None
    bm25_b: float | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    """The backend's own options that shaped the index (its options model's ``BUILD_KEYS``: ``pisa``'s
    ``quantization_scale``); opening it takes these values."""
    build_seconds: float = 0.0
    created: str = ""
    apcir_version: str = ""

    def describe(self) -> str:
        if self.model:
            what = self.model
        elif self.weights is not None:
            what = f"precomputed {self.weights} vectors in the file's own vocabulary"
        else:
            what = f"BM25 k1={self.bm25_k1} b={self.bm25_b}"
        if self.dtype not in (None, "float32"):
            what += f", encoded in {self.dtype}"
        where = f" at {self.location}" if self.location else ""
        return f"{self.backend} index of {self.collection.name}{where} ({self.passages} passages, {what})"


def is_foreign_lucene(folder: Path) -> bool:
    """A Lucene index directory without an apcir manifest (e.g. one the iKAT organisers distribute)."""
    return folder.is_dir() and not (folder / MANIFEST).exists() and any(folder.glob("segments_*"))


def foreign_pyterrier(folder: Path) -> str | None:
    """The kind of a PyTerrier index apcir did not build in ``folder`` (no manifest): ``Terrier`` (its
    ``data.properties``: the iKAT organisers' DeepCT and SPLADE++ indexes are such) or ``PISA`` (pyterrier-pisa's
    ``pt_meta.json``), else None."""
    if not folder.is_dir() or (folder / MANIFEST).exists():
        return None
    if (folder / "data.properties").is_file():
        return "Terrier"
    if (folder / "pt_meta.json").is_file():
        return "PISA"
    return None


def now_iso() -> str:
    return timestamp()


def read_manifest(index_dir: Path) -> IndexManifest:
    path = index_dir / MANIFEST
    if not index_dir.exists():
        raise ApcirError("index directory not found", path=index_dir)
    if not path.exists():
        raise ApcirError(
            "not an apcir index (no manifest.json); build one with `apcir index build`", path=index_dir
        )
    try:
        return IndexManifest.model_validate_json(read_text(path, "index manifest"))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ApcirError(f"malformed index manifest: {where}: {first['msg']}", path=path) from None


def write_manifest(index_dir: Path, manifest: IndexManifest) -> None:
    write_json(index_dir / MANIFEST, manifest.model_dump(), indent=2)


@dataclass(frozen=True)
class IndexStatus:
    """Whether an index can be reused for (collection, backend, model); ``reason`` says why not."""

    up_to_date: bool
    reason: str
    manifest: IndexManifest | None = None


def index_status(
    index_dir: str | Path,
    collection: str | Path,
    backend: str = "embedded",
    model: str | None = None,
    doc_max_length: int = 256,
    options: Mapping[str, Any] | None = None,
) -> IndexStatus:
    """Is the index at ``index_dir`` complete and built from this collection with this model?

    ``collection`` is a bundled name or a JSONL path; ``model`` a SPLADE model
    name (ignored for ``lucene-bm25``). The collection's bytes are compared
    (size, then modification time, then SHA-256), so a moved copy still matches. ``options``: the backend's
    options that shape an index (``quantization_scale``), compared with those the manifest records.
    """
    from apcir.datasets.registry import collection_path
    from apcir.retrieval.encoder import canonical_model_name
    from apcir.retrieval.registry import BACKENDS

    folder = Path(index_dir)
    if not (folder / MANIFEST).exists():
        return IndexStatus(False, f"no complete index at {folder}")
    manifest = read_manifest(folder)
    if manifest.backend != backend:
        return IndexStatus(False, f"index backend is {manifest.backend}, not {backend}", manifest)
    path = collection_path(collection)
    if not manifest.collection.same_file_contents(path):
        return IndexStatus(
            False, f"index was built from {manifest.collection.path}, whose contents differ from {path}", manifest
        )
    if BACKENDS.get(backend).encoder is not None:
        wanted = canonical_model_name(model) if model else None
        if wanted is not None and manifest.model != wanted:
            return IndexStatus(False, f"index was built with {manifest.model}, not {wanted}", manifest)
        if manifest.source == "texts" and manifest.doc_max_length != doc_max_length:
            return IndexStatus(
                False, f"index cut passages at {manifest.doc_max_length} tokens, not {doc_max_length}", manifest
            )
    for key, value in (options or {}).items():
        recorded = manifest.options.get(key)
        if recorded is not None and recorded != value:
            return IndexStatus(False, f"index was built with {key} {recorded}, not {value}", manifest)
    return IndexStatus(True, "up to date", manifest)


def index_dependencies(index_dir: Path) -> list[Path]:
    """The files an index reads at search time besides its own folder (its collection, for passage texts);
    an output must never be one of them. Empty for a folder without a readable manifest."""
    try:
        manifest = read_manifest(Path(index_dir))
    except ApcirError:
        return []
    return [Path(manifest.collection.path)] if manifest.collection.path else []
