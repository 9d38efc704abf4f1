"""Stage 2, retrieval: SPLADE encoding, the embedded index, and pyserini's Lucene backends.

Heavy dependencies (torch, sentence-transformers, pyserini) load only when used.

    from apcir.retrieval import build_index, open_index, index_status
    build_index("ikat23-provenance", "embedded", "indexes/demo", encoder="splade-tiny")
    run = open_index("indexes/demo").search({"9-1_3": ("query", "pseudo-response")}, k=1000)

Backends are registered in :data:`apcir.retrieval.registry.BACKENDS`.
"""

from __future__ import annotations

from apcir.retrieval.backends import Backend, open_index
from apcir.retrieval.build import BuildResult, build_index
from apcir.retrieval.encoder import DEFAULT_MODEL, SPLADE_TINY, SpladeEncoder, splade_tiny_path
from apcir.retrieval.manifest import IndexManifest, IndexStatus, index_status, read_manifest
from apcir.retrieval.registry import BACKENDS
from apcir.retrieval.shards import parse_shard

__all__ = [
    "BACKENDS",
    "DEFAULT_MODEL",
    "SPLADE_TINY",
    "Backend",
    "BuildResult",
    "IndexManifest",
    "IndexStatus",
    "SpladeEncoder",
    "build_index",
    "index_status",
    "open_index",
    "parse_shard",
    "read_manifest",
    "splade_tiny_path",
]
