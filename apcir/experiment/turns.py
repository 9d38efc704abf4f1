"""One per-turn pipeline: how a turn is answered, written once.

A turn goes through the stages' core objects, composed by :class:`TurnPipeline`::

    Reformulation -> ListRetrieval (the three lists) -> LevelFusion (min-max + level weights)
                  -> Reranking (optional, the submitted ``[[rerank]]`` entries) -> Responding (PTKB ranked by
                     StatementRanking)

Each core object lives in its stage's package (:mod:`apcir.reformulation.core`, :mod:`apcir.retrieval.core`,
:mod:`apcir.fusion.core`, :mod:`apcir.reranking.core`, :mod:`apcir.responses.core`) and is the one every front door
calls: ``apcir run``'s ledger stages (:mod:`apcir.experiment.plan`), the stage commands, the Python API's stage
functions and the PyTerrier transformers. ``apcir converse`` (:mod:`apcir.live.converse`, one turn at a time with
its history), :meth:`apcir.Experiment.answer` and the PyTerrier ``Answer`` transformer answer through this
pipeline. A test (tests/experiment/test_front_doors*.py) answers turns through each front door and gets the same
ranking and response.

:func:`open_turn_pipeline` builds the pipeline from an experiment's config: the index (built when missing), the
weights (:func:`apcir.experiment.weights.resolve_weights`, as ``apcir run`` resolves them) and the passages.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from apcir.contract.records import Turn
from apcir.contract.reformulations import LIST_NAMES, ReformulationRecord
from apcir.contract.responses import ResponseRecord
from apcir.experiment.config import ExperimentConfig
from apcir.fusion.core import LevelFusion
from apcir.reformulation.core import Reformulation
from apcir.reformulation.settings import ReformulatorOptions
from apcir.reranking.core import Reranking
from apcir.responses.core import Responding
from apcir.retrieval.core import ListRetrieval

Skip = Callable[[float, str], bool]
"""Whether to skip an optional stage (``rerank``, ``respond``) of a turn started at ``perf_counter()`` time."""


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


def open_turn_pipeline(config: ExperimentConfig, workdir: Path, *, progress: bool = False,
                       reformulator: ReformulatorOptions | None = None, redo_stale: bool = False) -> TurnPipeline:
    """The per-turn pipeline of ``config``: the weights resolved as ``apcir run`` resolves them (a weights file, or
    tuned on other topics in ``workdir/tuning``; a missing file is said before any index is built), the index
    opened (built when missing, once); reformulations and responses are kept in ``workdir``
    (``reformulations.jsonl``, ``responses.jsonl``, ``responses-fallback.jsonl``), so that answering again asks no
    model again. ``reformulator``: other options than the config's (``apcir converse --track-persona`` asks for the
    persona too)."""
    from rich.console import Console

    from apcir.experiment.runner import StageRunner
    from apcir.experiment.weights import resolve_weights
    from apcir.responses.core import StatementRanking, no_texts
    from apcir.retrieval.stage import resolved_dtype

    settings = config.retrieval
    runner = StageRunner(config.model_copy(update={"output_dir": str(workdir / "tuning")}), Console(quiet=True),
                         progress)
    weights = resolve_weights(runner, runner.index, one_turn_at_a_time=True).primary
    store = runner.passage_texts()
    texts = store.texts if store is not None else no_texts
    ranking = StatementRanking.of(settings.encoder if settings.uses_encoder else None, settings.encoder_kind,
                                  resolved_dtype(settings))
    responding = Responding(config.respond, workdir / "responses.jsonl", ranking, texts, redo_stale)
    return TurnPipeline(
        Reformulation(reformulator or config.reformulator, workdir / "reformulations.jsonl", redo_stale),
        ListRetrieval(runner.backend(), settings.k),
        LevelFusion(weights, config.fusion.norm, config.fusion.depth),
        [Reranking(entry, texts) for entry in config.rerank if entry.submit],
        responding,
        responding.extractive(workdir / "responses-fallback.jsonl"))
