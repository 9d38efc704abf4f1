"""The retrieval stage's core object: queries in, one run per list out, from an open index; nothing written.

:class:`ListRetrieval` is what every front door searches with: ``apcir run``'s ledger stage
(:class:`apcir.retrieval.stage.RetrieveStage`, which writes the runs and keeps the query vectors), ``apcir
retrieve``, the per-turn pipeline (:mod:`apcir.experiment.turns`), :func:`apcir.retrieve` and PyTerrier's
``Retrieve``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import scipy.sparse as sp

from apcir.console import shown, warn
from apcir.contract.records import Run
from apcir.contract.reformulations import LIST_NAMES, QueryInput, ReformulationRecord
from apcir.retrieval.backends import Backend, VectorBackend, can_encode

QueryVectors = tuple[list[str], sp.csr_matrix]
"""One list's query vectors as searched: the turn ids and their rows."""


def list_queries(records: Mapping[str, ReformulationRecord], field: str) -> dict[str, QueryInput]:
    """The retrieval input ``field`` (rewrite, rewrite_response, third) of every record that has an output."""
    return {turn: record.list_inputs()[field] for turn, record in records.items() if record.output is not None}


def _text_of(query: QueryInput) -> str:
    return query if isinstance(query, str) else f"{query[0]} {query[1] or ''}"


@dataclass
class ListRetrieval:
    """The top ``k`` passages of every query from ``backend`` (an open index; its encoder loaded once)."""

    backend: Backend
    k: int
    progress: bool = False

    def __call__(self, records: Mapping[str, ReformulationRecord],
                 names: Sequence[str] = LIST_NAMES) -> dict[str, Run]:
        """The lists ``names`` (q', q'+r', third) of every record with an output, a run per list."""
        return self.search({name: list_queries(records, name) for name in names})

    def search(self, queries: Mapping[str, Mapping[str, QueryInput]]) -> dict[str, Run]:
        """``{list: {turn: query}}`` searched, a run per list."""
        return self.search_keeping_vectors(queries)[0]

    def search_keeping_vectors(self, queries: Mapping[str, Mapping[str, QueryInput]]
                               ) -> tuple[dict[str, Run], dict[str, QueryVectors]]:
        """The runs, and each list's query vectors as searched (a SPLADE backend encodes each list's queries once;
        a backend without an encoder gives none). A turn with an empty query gets no passages (said once a list)."""
        runs: dict[str, Run] = {}
        vectors: dict[str, QueryVectors] = {}
        for field, field_queries in queries.items():
            empty = sorted(turn for turn, query in field_queries.items() if not _text_of(query).strip())
            if empty:
                warn(f"{field}: {len(empty)} turn(s) have an empty query and get no passages: {shown(empty)}")
            asked = {turn: query for turn, query in field_queries.items() if turn not in set(empty)}
            if not asked:
                runs[field] = {}
            elif isinstance(self.backend, VectorBackend) and can_encode(self.backend):
                turn_ids = list(asked)
                encoder: Any = self.backend.encoder
                matrix = encoder.encode_queries([asked[t] for t in turn_ids], progress=self.progress)
                vectors[field] = (turn_ids, matrix)
                runs[field] = self.backend.search_vectors(turn_ids, matrix, self.k, progress=self.progress)
            else:
                runs[field] = self.backend.search(asked, self.k, progress=self.progress)
            runs[field].update({turn: {} for turn in empty})
        return runs, vectors
