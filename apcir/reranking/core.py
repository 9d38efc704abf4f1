"""The re-ranking stage's core object: a run and each turn's query in, the run re-ranked out.

:class:`Reranking` is what every front door re-ranks with: ``apcir run``'s ledger stage
(:class:`apcir.reranking.stage.RerankStage`), ``apcir rerank``, the per-turn pipeline
(:mod:`apcir.experiment.turns`), :func:`apcir.rerank` and PyTerrier's ``Rerank``. The model is loaded once, on
first use; the passage texts come from ``texts`` (only those of the candidates are asked for).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from apcir.contract.records import Run
from apcir.contract.reformulations import ReformulationRecord
from apcir.reranking.settings import RerankSettings

Texts = Callable[[set[str]], Mapping[str, str]]
"""The texts of the passages asked for (only these are read)."""


def no_texts(ids: set[str]) -> dict[str, str]:
    return {}


@dataclass
class Reranking:
    """One ``[[rerank]]`` entry over a run's top ``depth`` passages (:func:`~apcir.reranking.stage.rerank_run`)."""

    settings: RerankSettings
    texts: Texts = no_texts
    progress: bool = False
    _model: Any = field(default=None, repr=False)

    def model(self) -> Any:
        """The re-ranker, loaded on first use."""
        from apcir.reranking.stage import load_reranker

        if self._model is None:
            self._model = load_reranker(self.settings)
        return self._model

    def with_summary(self, run: Run, queries: Mapping[str, str]) -> tuple[Run, Any]:
        """The re-ranked run and what was done (a :class:`~apcir.reranking.stage.RerankSummary`)."""
        from apcir.reranking.stage import candidate_ids, rerank_run

        texts = self.texts(candidate_ids(run, self.settings.depth)) if run else {}
        return rerank_run(run, queries, texts, self.settings, load=self.model, progress=self.progress)

    def __call__(self, run: Run, queries: Mapping[str, str]) -> Run:
        return self.with_summary(run, queries)[0]

    def of_records(self, run: Run, records: Mapping[str, ReformulationRecord]) -> Run:
        """Re-ranked with each record's ``field`` as the query."""
        from apcir.reranking.stage import record_queries

        return self(run, record_queries(records, self.settings.field))
