"""One per-turn pipeline: how a turn is answered, written once.

A turn goes through five stage objects, composed by :class:`TurnPipeline`::

    Reformulation -> ListRetrieval (the three lists) -> LevelFusion (min-max + level weights)
                  -> Reranking (optional, the submitted ``[[rerank]]`` entries) -> Responding

Each stage object calls the same stage function as ``apcir run``'s ledger stage
(:mod:`apcir.experiment.plan`): :func:`apcir.reformulation.stage.reformulate`,
:func:`apcir.retrieval.stage.retrieve_lists`, :func:`apcir.fusion.linear.fuse_linear`,
:func:`apcir.reranking.stage.rerank_run` and :func:`apcir.responses.stage.respond`.
``apcir converse`` (:mod:`apcir.live.converse`, one turn at a time with its history), the Python API
(:meth:`apcir.Experiment.answer`, and the stage functions :func:`apcir.rerank` and :func:`apcir.respond`)
and the PyTerrier ``Answer`` transformer answer through it; ``apcir run`` runs the same functions over all
turns, each writing its artifact. A test (tests/experiment/test_front_doors.py) answers one turn through
each of the four and gets the same ranking and response.

:func:`open_turn_pipeline` builds the pipeline from an experiment's config: the index (built when missing),
the weights (a weights file, or tuned on other topics: the tuning leg of ``apcir run``) and the passages.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apcir.contract.records import Run, Turn
from apcir.contract.reformulations import LIST_NAMES, QueryInput, ReformulationRecord
from apcir.contract.responses import ResponseRecord
from apcir.contract.weights import WeightsFile
from apcir.errors import ApcirError
from apcir.experiment.config import ExperimentConfig
from apcir.reformulation.settings import ReformulatorOptions
from apcir.reranking.settings import RerankSettings
from apcir.responses.settings import RespondSettings

Texts = Callable[[set[str]], Mapping[str, str]]
"""The texts of the passages asked for (only these are read)."""

Skip = Callable[[float, str], bool]
"""Whether to skip an optional stage (``rerank``, ``respond``) of a turn started at ``perf_counter()`` time."""


def no_texts(ids: set[str]) -> dict[str, str]:
    return {}


# ---- the stage objects --------------------------------------------------------------------------------
@dataclass
class Reformulation:
    """Each turn's level and three rewrites (resumable in ``out``; a failed turn falls back to its utterance)."""

    options: ReformulatorOptions
    out: Path
    redo_stale: bool = False

    def __call__(self, turns: Sequence[Turn]) -> dict[str, ReformulationRecord]:
        from apcir.contract.reformulations import load_reformulations, with_fallbacks
        from apcir.reformulation.stage import reformulate

        chosen = list(turns)
        reformulate(chosen, self.options, self.out, progress=False, redo_stale=self.redo_stale)
        wanted = {t.turn_id for t in chosen}
        return with_fallbacks({k: v for k, v in load_reformulations(self.out).items() if k in wanted}, chosen)


@dataclass
class ListRetrieval:
    """The three lists (q', q'+r', third) of every record, from an open index; nothing written."""

    backend: Any
    k: int
    progress: bool = False

    def __call__(self, records: Mapping[str, ReformulationRecord],
                 names: Sequence[str] = LIST_NAMES) -> dict[str, Run]:
        from apcir.retrieval.stage import list_queries

        return self.search({name: list_queries(records, name) for name in names})

    def search(self, queries: Mapping[str, Mapping[str, QueryInput]]) -> dict[str, Run]:
        """``{list: {turn: query}}`` searched, a run per list."""
        from apcir.retrieval.stage import retrieve_lists

        return retrieve_lists(self.backend, queries, {n: Path(f"{n}.run") for n in queries},
                              dict.fromkeys(queries, "turn"), k=self.k, progress=self.progress,
                              write=lambda *_: None)


@dataclass
class LevelFusion:
    """Each turn's lists normalised (min-max unless ``norm`` says otherwise) and summed with its level's weights."""

    weights: WeightsFile
    norm: str | None
    depth: int | None
    missing_level: str | None = "a"

    def __call__(self, lists: Sequence[Run], levels: Mapping[str, str]) -> Run:
        from apcir.fusion.linear import fuse_linear

        return fuse_linear(list(lists), levels, self.weights, self.norm, self.depth, missing_level=self.missing_level)


@dataclass
class Reranking:
    """One ``[[rerank]]`` entry over a run's top ``depth`` passages (the model loaded once, on first use)."""

    settings: RerankSettings
    texts: Texts = no_texts
    progress: bool = False
    _model: Any = field(default=None, repr=False)

    def __call__(self, run: Run, queries: Mapping[str, str]) -> Run:
        from apcir.reranking.stage import candidate_ids, load_reranker, rerank_run

        if self._model is None:
            self._model = load_reranker(self.settings)
        texts = self.texts(candidate_ids(run, self.settings.depth))
        result, _ = rerank_run(run, queries, texts, self.settings, reranker=self._model, progress=self.progress)
        return result

    def of_records(self, run: Run, records: Mapping[str, ReformulationRecord]) -> Run:
        """Re-ranked with each record's ``field`` as the query."""
        from apcir.reranking.stage import record_queries

        return self(run, record_queries(records, self.settings.field))


@dataclass
class Responding:
    """One grounded response per turn from a run's top passages, with the PTKB statements ranked by ``similarity``
    (resumable in ``out``)."""

    settings: RespondSettings
    similarity: Any
    """A :class:`apcir.responses.ptkb.SimilaritySpec` (bm25, or the retrieval encoder's)."""
    out: Path
    texts: Texts = no_texts
    redo_stale: bool = False
    progress: bool = False

    @property
    def offline(self) -> bool:
        from apcir.responses.registry import responder_for

        return bool(responder_for(self.settings.responder).offline)

    def __call__(self, turns: Sequence[Turn], records: Mapping[str, ReformulationRecord],
                 run: Run) -> dict[str, ResponseRecord]:
        from apcir.contract.responses import load_responses
        from apcir.responses.job import build_jobs, needed_passages
        from apcir.responses.ptkb import rank_statements
        from apcir.responses.stage import respond

        chosen = list(turns)
        top_k = self.settings.top_k
        texts = dict(self.texts(needed_passages(run, chosen, top_k)))
        ptkb = rank_statements(chosen, dict(records), self.similarity)
        jobs = build_jobs(chosen, dict(records), run, texts, ptkb, top_k)
        respond(jobs, self.settings, self.out, progress=self.progress, redo_stale=self.redo_stale)
        return load_responses(self.out)

    def extractive(self, out: Path) -> Responding:
        """The extractive responder with the same passages and budget: what answers when a model cannot in time."""
        from apcir.responses.registry import EXTRACTIVE

        settings = RespondSettings.model_validate({"responder": EXTRACTIVE, "top_k": self.settings.top_k,
                                                   "max_words": self.settings.max_words})
        return Responding(settings, self.similarity, out, self.texts, self.redo_stale, self.progress)


# ---- the composition ----------------------------------------------------------------------------------
@dataclass
class TurnAnswer:
    """What the pipeline made of one turn."""

    turn: Turn
    record: ReformulationRecord
    lists: dict[str, dict[str, float]]
    ranking: dict[str, float]
    """The fused ranking, re-ranked by the submitted re-rankers: what a submission holds and the response cites."""
    response: ResponseRecord | None
    seconds: dict[str, float] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    """``stage:name`` of the optional stages skipped (a turn budget)."""

    @property
    def level(self) -> str:
        return self.record.output.level if self.record.output is not None else "a"

    @property
    def text(self) -> str:
        """The response: the responder's text, else (its turn failed) the reformulator's pseudo-response."""
        if self.response is not None and self.response.status == "ok" and self.response.text:
            return self.response.text
        return self.record.output.response if self.record.output is not None else ""

    @property
    def ptkb_used(self) -> list[str]:
        """The ids of the statements the response relied on (else the ones the reformulator used)."""
        used = list(self.response.ptkb_used) if self.response is not None else []
        return used or (list(self.record.output.ptkb_used) if self.record.output is not None else [])


@dataclass
class TurnPipeline:
    """Reformulate -> the three lists -> level-weighted fusion -> re-rank (optional) -> respond, for given turns."""

    reformulation: Reformulation
    retrieval: ListRetrieval
    fusion: LevelFusion
    rerankers: list[Reranking]
    responding: Responding
    fallback: Responding | None = None
    """What answers when ``skip`` says the responder would overrun (None: the responder always runs)."""

    def answer(self, turns: Sequence[Turn], *, skip: Skip | None = None) -> dict[str, TurnAnswer]:
        """Every turn answered (one, for a live turn; many, for a topic set), by turn id."""
        chosen = list(turns)
        seconds: dict[str, float] = {}
        skipped: list[str] = []
        started = mark = time.perf_counter()

        def lap(stage: str) -> None:
            nonlocal mark
            now = time.perf_counter()
            seconds[stage] = now - mark
            mark = now

        records = self.reformulation(chosen)
        lap("reformulate")
        lists = self.retrieval(records)
        lap("retrieve")
        levels = {t.turn_id: records[t.turn_id].output.level  # type: ignore[union-attr]
                  if records[t.turn_id].output is not None else "a" for t in chosen}
        fused = self.fusion([lists[n] for n in LIST_NAMES], levels)
        lap("fuse")
        for reranker in self.rerankers:
            if skip is not None and skip(started, "rerank"):
                skipped.append(f"rerank:{reranker.settings.label}")
                continue
            mark = time.perf_counter()
            fused = reranker.of_records(fused, records)
            lap("rerank")
        mark = time.perf_counter()
        responding = self.responding
        if (self.fallback is not None and skip is not None and not responding.offline
                and skip(started, "respond")):
            skipped.append(f"respond:{responding.settings.responder}")
            responding = self.fallback
        responses = responding(chosen, records, fused)
        lap("respond")
        seconds["turn"] = time.perf_counter() - started
        return {t.turn_id: TurnAnswer(t, records[t.turn_id], {n: lists[n].get(t.turn_id, {}) for n in LIST_NAMES},
                                      fused.get(t.turn_id, {}), responses.get(t.turn_id), dict(seconds),
                                      list(skipped)) for t in chosen}


def weights_for(config: ExperimentConfig, workdir: Path, *, progress: bool = False) -> WeightsFile:
    """The weights a turn is fused with: ``[fusion.weights]``'s file, or tuned on other topics (the tuning leg of
    ``apcir run``, in ``workdir/tuning``). Cross-validation needs the turns' own judgements: refused."""
    weights = config.fusion.weights
    if weights.source == "cv":
        raise ApcirError("answering turns one at a time cannot cross-validate its weights: set [fusion.weights] "
                         "source = \"file\" (a weights.json) or \"tune\" (tuned on other topics first)")
    if weights.source == "file":
        from apcir.contract.weights import load_weights

        if not weights.file:
            raise ApcirError("fusion.weights.source = 'file' needs fusion.weights.file (a weights.json)")
        return load_weights(weights.file)
    from rich.console import Console

    from apcir.experiment.pipeline import Experiment

    exp = Experiment(config.model_copy(update={"output_dir": str(workdir / "tuning")}), Console(quiet=True), progress)
    index = exp.index()
    return exp.tune(index, config.fusion.baseline_names())["apcir"]


def open_turn_pipeline(config: ExperimentConfig, workdir: Path, *, progress: bool = False,
                       reformulator: ReformulatorOptions | None = None, redo_stale: bool = False) -> TurnPipeline:
    """The per-turn pipeline of ``config``: the index opened (built when missing), the weights resolved
    (:func:`weights_for`); reformulations and responses are kept in ``workdir`` (``reformulations.jsonl``,
    ``responses.jsonl``, ``responses-fallback.jsonl``), so that answering again asks no model again.
    ``reformulator``: other options than the config's (``apcir converse --track-persona`` asks for the
    persona too)."""
    from apcir.responses.ptkb import similarity_for
    from apcir.retrieval.stage import ensure_index, open_backend, passage_texts_for, resolved_dtype

    settings = config.retrieval
    weights = weights_for(config, workdir, progress=progress)  # a missing weights file: said before any index build
    index, _ = ensure_index(settings, progress=progress)
    backend = open_backend(settings, index)
    store = passage_texts_for(settings, index)
    texts: Texts = store.texts if store is not None else no_texts
    similarity = similarity_for(settings.encoder if settings.uses_encoder else None, settings.encoder_kind,
                                resolved_dtype(settings))
    responding = Responding(config.respond, similarity, workdir / "responses.jsonl", texts, redo_stale)
    return TurnPipeline(
        Reformulation(reformulator or config.reformulator, workdir / "reformulations.jsonl", redo_stale),
        ListRetrieval(backend, settings.k),
        LevelFusion(weights, config.fusion.norm, config.fusion.depth),
        [Reranking(entry, texts) for entry in config.rerank if entry.submit],
        responding,
        responding.extractive(workdir / "responses-fallback.jsonl"))
