"""The re-ranking stage: the top ``depth`` of a run re-ordered by a re-ranker, the rest kept beneath.

``apcir rerank`` and ``apcir run`` (a ``[rerank]`` section) call :func:`rerank_run`.

For each turn of the run, in trec_eval's order:

* the first ``depth`` passages are the candidates; those whose text is not in
  the collection cannot be scored and **keep their place** (their rank), the
  others are re-ordered by the re-ranker in the remaining places;
* the passages below the cut keep their order beneath the re-ranked ones;
* a turn without a query is left as it is (and named in a warning).

Scores written: the re-ranker's own (monoT5's log P(true), a cross-encoder's
logit, RankGPT's ``n - position``) for the re-ranked passages; a passage that
kept its place gets a score between its neighbours'; the passages below the
cut get ``lowest re-ranked score - 1 - i``. Whenever that would not reproduce
the intended order exactly as trec_eval reads it (32-bit floats, ties by
passage id), e.g. two re-ranked passages with equal scores, the turn's scores
are written as ``N - position`` instead (counted in the summary), so the order
in the file is always the order intended.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from apcir.console import shown, warn
from apcir.contract.records import Run
from apcir.contract.reformulations import QueryInput, ReformulationRecord
from apcir.contract.runs import ranking
from apcir.contract.stage import Stage, StageContext, StageResult, an_output, not_an_input
from apcir.datasets import collection_path
from apcir.errors import ApcirError
from apcir.fusion.systems import SYSTEMS
from apcir.reranking.base import Candidates, Ranked, Reranker, RerankStats
from apcir.reranking.registry import RERANKERS
from apcir.reranking.settings import RerankSettings


class RerankSummary(RerankStats):
    """What one re-ranking did (``apcir rerank --json``; the pipeline's stage detail): the re-ranker's counters
    (:class:`RerankStats`) and the stage's own."""

    reranker: str
    model: str
    depth: int
    field: str | None = None
    turns: int = Field(0, description="turns in the run")
    turns_reranked: int = 0
    turns_without_query: list[str] = Field(default_factory=list)
    short_turns: int = Field(0, description="turns with fewer than depth passages (all of them re-ranked)")
    passages_reranked: int = 0
    missing_passages: int = Field(0, description="candidates whose text is not in the collection (kept in place)")
    missing_example: str | None = None
    rank_score_turns: int = Field(0, description="turns written with N - position scores (see the module doc)")
    seconds: float = 0.0

    @property
    def passages_per_second(self) -> float:
        return self.passages_reranked / self.seconds if self.seconds > 0 else 0.0

    def describe(self) -> str:
        parts = [f"{self.turns_reranked} turns, {self.passages_reranked} passages re-ranked by {self.reranker} "
                 f"({self.model}) at depth {self.depth}"]
        if self.windows:
            parts.append(f"{self.windows} windows, {self.requests} LLM requests, {self.cache_hits} cache hits")
        if self.missing_ids or self.duplicate_ids or self.unknown_ids:
            parts.append(f"answers: {self.missing_ids} ids missing, {self.duplicate_ids} duplicates, "
                         f"{self.unknown_ids} unknown")
        if self.failed_windows:
            parts.append(f"{self.failed_windows} windows failed (kept their order)")
        if self.missing_passages:
            parts.append(f"{self.missing_passages} passages without text kept their place")
        return "; ".join(parts)


def load_reranker(settings: RerankSettings) -> Reranker:
    """The configured re-ranker with its model loaded (an unloadable hub model is an error saying what to do)."""
    return RERANKERS.get(settings.reranker).call(settings)  # type: ignore[no-any-return]


def query_text(query: QueryInput) -> str:
    """A retrieval input as one text (query and pseudo-response joined by a space)."""
    if isinstance(query, str):
        return query
    text, response = query
    return text if not response else f"{text} {response}"


def record_queries(records: Mapping[str, ReformulationRecord], field: str) -> dict[str, str]:
    """The re-ranking query of every record with an output: the retrieval input ``field`` as one text."""
    return {turn: query_text(record.list_inputs()[field]) for turn, record in records.items()
            if record.output is not None}


def candidate_ids(run: Run, depth: int) -> set[str]:
    """The passages whose texts a re-ranking at ``depth`` needs."""
    return {p for hits in run.values() for p, _ in ranking(hits, depth)}


def texts_for(run: Run, depth: int, collection: str | Path) -> dict[str, str]:
    """The texts of the run's top-``depth`` passages, read by byte offset (:mod:`apcir.datasets.store`)."""
    from apcir.datasets.store import store_for

    return store_for(collection_path(collection)).texts(candidate_ids(run, depth))


def check_depth(run: Run, depth: int) -> None:
    """Refuse an empty run or a depth below 1; say so when the depth is above every turn's length."""
    if depth < 1:
        raise ApcirError(f"depth must be at least 1, got {depth}")
    longest = max((len(h) for h in run.values()), default=0)
    if longest == 0:
        raise ApcirError("the run holds no passage: nothing to re-rank")
    if depth > longest:
        warn(f"depth {depth} is above the run's length (its longest turn has {longest} passages): every passage "
             "of every turn is re-ranked")


def rerank_run(
    run: Run,
    queries: Mapping[str, str],
    texts: Mapping[str, str],
    settings: RerankSettings,
    *,
    reranker: Reranker | None = None,
    load: Callable[[], Reranker] | None = None,
    progress: bool = True,
) -> tuple[Run, RerankSummary]:
    """The re-ranked run (see the module doc) and what was done. The re-ranker: ``reranker``, else ``load()``'s,
    else the settings' loaded here (after the run and its texts were checked)."""
    started = time.perf_counter()
    check_depth(run, settings.depth)
    summary = RerankSummary(reranker=settings.reranker, model=settings.model_name, depth=settings.depth,
                            field=settings.field, turns=len(run))
    tops: dict[str, list[tuple[str, float]]] = {}
    candidates: list[Candidates] = []
    missing: set[str] = set()
    known = 0
    for turn in sorted(run):
        ordered = ranking(run[turn])
        tops[turn] = ordered
        if turn not in queries:
            summary.turns_without_query.append(turn)
            continue
        top = [p for p, _ in ordered[: settings.depth]]
        if len(ordered) < settings.depth:
            summary.short_turns += 1
        found = [p for p in top if p in texts]
        known += len(found)
        missing.update(p for p in top if p not in texts)
        summary.missing_passages += len(top) - len(found)
        candidates.append(Candidates(turn, queries[turn], found, [texts[p] for p in found]))
    if candidates and known == 0:
        raise ApcirError("none of the run's passages to re-rank is in the collection (is it the collection the run "
                         f"was retrieved from?), e.g. {next(iter(sorted(missing)))}")
    if not candidates:
        raise ApcirError("no turn of the run has a query (do the turn ids of the run and the queries match?)")
    if missing:
        summary.missing_example = sorted(missing)[0]
        warn(f"{summary.missing_passages} passage(s) to re-rank are not in the collection (e.g. "
             f"{summary.missing_example}); they keep their place")
    if summary.turns_without_query:
        listed = shown(summary.turns_without_query)
        warn(f"{len(summary.turns_without_query)} turn(s) of the run have no query and keep their order: {listed}")
    reranker = reranker or (load or (lambda: load_reranker(settings)))()
    ranked, stats = reranker.rank(candidates, progress=progress)
    _add_stats(summary, stats)
    out: Run = {}
    for turn, ordered in tops.items():
        if turn not in ranked:
            out[turn] = dict(ordered)
            continue
        hits, fell_back = assemble(ordered, settings.depth, ranked[turn], texts)
        out[turn] = hits
        summary.rank_score_turns += fell_back
        summary.turns_reranked += 1
        summary.passages_reranked += len(ranked[turn].ids)
    summary.seconds = round(time.perf_counter() - started, 3)
    return out, summary


def _add_stats(summary: RerankSummary, stats: RerankStats) -> None:
    for name, value in stats.model_dump().items():
        setattr(summary, name, value)


def assemble(ordered: Sequence[tuple[str, float]], depth: int, ranked: Ranked,
             texts: Mapping[str, str]) -> tuple[dict[str, float], bool]:
    """One turn's final hits: the re-ranked top (unscorable passages in their places), then the rest.

    Returns the hits and whether the ``N - position`` scores had to be used.
    """
    top, rest = list(ordered[:depth]), list(ordered[depth:])
    new = iter(zip(ranked.ids, ranked.scores))
    order: list[str] = []
    values: list[float | None] = []
    for pid, _ in top:
        if pid in texts:
            nxt, score = next(new)
            order.append(nxt)
            values.append(score)
        else:
            order.append(pid)
            values.append(None)
    filled = _fill_between(values)
    lowest = min(filled) if filled else 0.0
    order += [pid for pid, _ in rest]
    filled += [lowest - 1.0 - i for i in range(len(rest))]
    hits = dict(zip(order, filled))
    if [p for p, _ in ranking(hits)] == order:
        return hits, False
    return {pid: float(len(order) - i) for i, pid in enumerate(order)}, True


def _fill_between(values: list[float | None]) -> list[float]:
    """Scores for the places without one, between their neighbours' (or above / below the ends)."""
    out: list[Any] = list(values)
    i = 0
    while i < len(out):
        if out[i] is not None:
            i += 1
            continue
        j = i
        while j < len(out) and out[j] is None:
            j += 1
        above = out[i - 1] if i > 0 else None
        below = out[j] if j < len(out) else None
        gap = j - i
        for offset in range(gap):
            if above is not None and below is not None:
                out[i + offset] = above + (below - above) * (offset + 1) / (gap + 1)
            elif below is not None:
                out[i + offset] = below + (gap - offset)
            elif above is not None:
                out[i + offset] = above - (offset + 1)
            else:
                out[i + offset] = float(gap - offset)
        i = j
    return [float(v) for v in out]


@dataclass
class RerankStage(Stage):
    """One ``[[rerank]]`` entry of ``apcir run``: its systems (and, with ``submit``, the fused run) re-ranked."""

    key: str
    settings: RerankSettings
    model: Path | str
    """A local model folder stands for its content."""
    runs: dict[str, Path]
    """Each re-ranked run (``<system>+<key>``) by the run it re-ranks."""
    bases: dict[str, str]
    """Each re-ranked run's base system (``manual`` ones are asked with the manual rewrites)."""
    reformulations: Path
    manual: Path | None
    passages: Path
    experiment: str
    outs: dict[str, Path] = an_output()
    records: dict[str, ReformulationRecord] = not_an_input()
    manual_records: dict[str, ReformulationRecord] = not_an_input()

    @property
    def name(self) -> str:
        return f"rerank:{self.key}"

    def run(self, context: StageContext) -> StageResult:
        runs = {target: context.read_run(path) for target, path in self.runs.items()}
        needed = set().union(*(candidate_ids(r, self.settings.depth) for r in runs.values())) if runs else set()
        store = context.passage_texts()
        if store is None:
            raise ApcirError("re-ranking needs the passage texts: set retrieval.passages or retrieval.collection")
        texts = store.texts(needed)
        queries = record_queries(self.records, self.settings.field)
        manual_queries = record_queries(self.manual_records, self.settings.field) if self.manual_records else {}
        reranker = load_reranker(self.settings)
        spec = RERANKERS.get(self.settings.reranker)
        done: list[str] = []
        failed: list[str] = []
        requests = passages = windows = hits = 0
        for target, run in runs.items():
            base = self.bases[target]
            own = SYSTEMS.get(base).reformulator if base in SYSTEMS else None  # a system of its own rewrites
            chosen = manual_queries if own else queries
            result, summary = rerank_run(run, chosen, texts, self.settings, reranker=reranker,
                                         progress=context.progress)
            context.write_run(result, self.outs[target], f"{self.experiment}-{target}", None)
            requests += summary.requests
            passages += summary.passages_reranked
            windows += summary.windows
            hits += summary.cache_hits
            failed.extend(f"{target}:{w}" for w in summary.failed)
            done.append(target)
        context.counts.llm_requests += requests
        context.counts.failed_windows.extend(failed)
        detail = (f"{', '.join(done)} by {self.settings.reranker} ({self.settings.model_name}), depth "
                  f"{self.settings.depth}; {passages} passages")
        if spec.kind == "listwise":
            detail += f", {windows} windows: {requests} LLM requests, {hits} answers from the cache"
        if failed:
            detail += f", {len(failed)} windows failed (order kept)"
        return StageResult(detail, unfinished=bool(failed))
