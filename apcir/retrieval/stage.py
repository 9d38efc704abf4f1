"""The retrieval stage: an index (built if missing), then one run per retrieval input.

``apcir index build`` / ``apcir retrieve`` and ``apcir run`` call these functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from apcir.console import warn
from apcir.contract.records import Run
from apcir.contract.reformulations import QueryInput, ReformulationRecord
from apcir.contract.runs import write_run
from apcir.errors import ApcirError
from apcir.retrieval.backends import Backend, open_index
from apcir.retrieval.manifest import is_foreign_lucene
from apcir.retrieval.settings import RetrievalSettings


def ensure_index(settings: RetrievalSettings, *, progress: bool = True) -> tuple[Path, str]:
    """The index directory of ``settings``, built from ``collection`` if missing; and what was done.

    A Lucene index apcir did not build (the organisers') is used as it is and
    never built into; without a collection the index must exist.
    """
    from apcir.retrieval.build import build_index

    index_dir = Path(settings.index).expanduser()
    if is_foreign_lucene(index_dir):
        return index_dir, f"{index_dir} is a Lucene index apcir did not build; used as it is"
    if settings.collection is None:
        if not index_dir.exists():
            raise ApcirError("index directory not found and no collection configured to build it", path=index_dir)
        return index_dir, f"{index_dir} (no collection configured: used as it is)"
    result = build_index(settings.collection, settings.backend, index_dir, settings.encoder, progress=progress)
    return index_dir, result.message


def open_backend(settings: RetrievalSettings, index_dir: Path) -> Backend:
    """The index opened with the configured backend and, if it has one, encoder."""
    return open_index(index_dir, settings.encoder if settings.uses_encoder else None, backend=settings.backend)


def list_queries(records: Mapping[str, ReformulationRecord], field: str) -> dict[str, QueryInput]:
    """The retrieval input ``field`` (rewrite, rewrite_response, third) of every record that has an output."""
    return {turn: record.list_inputs()[field] for turn, record in records.items() if record.output is not None}


def retrieve_lists(
    backend: Backend,
    queries: Mapping[str, Mapping[str, QueryInput]],
    outs: Mapping[str, Path],
    tags: Mapping[str, str],
    *,
    k: int,
    progress: bool = True,
) -> dict[str, Run]:
    """Search every field's queries (``{field: {turn: input}}``), write ``outs[field]`` with run tag ``tags[field]``.

    The index and its encoder are loaded once for all fields. Returns the runs by field.
    """
    runs: dict[str, Run] = {}
    for field, field_queries in queries.items():
        empty = sorted(turn for turn, query in field_queries.items() if not _text_of(query).strip())
        if empty:
            shown = ", ".join(empty[:10]) + (" ..." if len(empty) > 10 else "")
            warn(f"{field}: {len(empty)} turn(s) have an empty query and get no passages: {shown}")
        asked = {turn: query for turn, query in field_queries.items() if turn not in set(empty)}
        runs[field] = backend.search(asked, k, progress=progress) if asked else {}
        runs[field].update({turn: {} for turn in empty})
        write_run(runs[field], outs[field], tag=tags[field], depth=k)
    return runs


def _text_of(query: QueryInput) -> str:
    return query if isinstance(query, str) else f"{query[0]} {query[1] or ''}"
