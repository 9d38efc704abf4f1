"""``apcir run``'s fusion stages: tuning the weights on other topics, and fusing every system.

:class:`FuseStage` writes APCIR's run and every baseline's (``systems/``), the run to submit (``fused.run``),
the weights and the fusion record. What entropy and DEPS read (:func:`text_inputs`) and query-representation
fusion (:func:`qr_fusion_run`) are decided here, from the retrieval backend's capabilities.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from apcir.console import warn
from apcir.contract.fusion import FusionRecord
from apcir.contract.layout import RunLayout
from apcir.contract.levels import ANNOTATORS, annotator_levels, load_levels
from apcir.contract.records import Qrels, Run, Turn
from apcir.contract.reformulations import LIST_NAMES, ReformulationRecord, levels_of
from apcir.contract.stage import Stage, StageContext, StageResult, an_output, not_an_input
from apcir.contract.weights import WeightsFile
from apcir.errors import ApcirError
from apcir.fusion.protocol import FusionInputs, tune_variants, tuned_systems
from apcir.fusion.settings import FusionParams, FusionSettings, TuningSettings
from apcir.fusion.systems import (
    PRIMARY,
    SYSTEMS,
    SystemInputs,
    fixed_systems,
    needed_inputs,
    of_kind,
    tuned_names,
    uses_levels,
)
from apcir.io import write_json


class StoredVectors:
    """DEPS's vectors from what retrieval already computed: query vectors as searched, passage vectors as indexed."""

    def __init__(self, backend: Any, query_vectors: Path, records: dict[str, ReformulationRecord], texts: Any):
        self.backend = backend
        self.query_vectors = query_vectors
        self.records = records
        self.texts = texts

    def personalised(self, turns: Any) -> dict[str, Any]:
        from apcir.retrieval.stage import load_query_vectors

        stored = load_query_vectors(self.query_vectors) if self.query_vectors.exists() else {}
        missing = [t for t in turns if t not in stored and t in self.records and self.records[t].output is not None]
        if missing:  # run directories from before query vectors were kept: encode those turns once
            matrix = self.backend.encoder.encode_queries([self.records[t].list_inputs()["third"] for t in missing],
                                                         progress=False)
            stored.update({t: matrix[i] for i, t in enumerate(missing)})
        dims = self.backend.vocab_size
        return {t: (stored[t].toarray().ravel() if t in stored else np.zeros(dims, dtype=np.float32)) for t in turns}

    def passages(self, ids: list[str]) -> Any:
        from apcir.retrieval.backends import passage_vectors

        matrix = passage_vectors(self.backend, ids)
        if matrix is None:  # a backend that does not keep vectors: encode the passages' texts
            found = self.texts.texts(ids) if self.texts is not None else {}
            lacking = [p for p in ids if p not in found]
            if lacking:
                raise ApcirError(f"DEPS needs the texts of {len(lacking)} passages the index does not keep, e.g. "
                                 f"{lacking[0]}: configure retrieval.passages (or retrieval.collection)")
            matrix = self.backend.encoder.encode_documents([found[p] for p in ids], progress=False)
        return matrix.toarray()


def text_inputs(inputs: SystemInputs, turns: Sequence[Turn], records: dict[str, ReformulationRecord],
                context: StageContext, query_vectors: Path, needs: set[str]) -> None:
    """What entropy and DEPS read, without encoding anything the retrieval stage already encoded.

    With a SPLADE index: the profile statements are encoded by the index's
    model; DEPS reads the personalised queries' vectors as they were
    retrieved and the passages' vectors as they were indexed. With a dense
    index: the bi-encoder's embeddings of the texts. With BM25:
    TF-IDF vectors, IDF from the statements and the passages DEPS reads.
    """
    from apcir.fusion.encoders import MemoEncoder
    from apcir.fusion.systems import deps_passage_ids
    from apcir.retrieval.backends import VectorBackend, can_encode
    from apcir.retrieval.registry import ENCODER_KINDS

    inputs.profiles = {t.turn_id: list(t.ptkb.values()) for t in turns}
    backend = context.backend()
    encoder: Any = getattr(backend, "encoder", None)
    kind = ENCODER_KINDS.get(encoder.kind) if getattr(encoder, "kind", None) in ENCODER_KINDS else None
    wants_texts = bool(needs & {"personalised", "passages", "vectors"})
    if kind is not None and not kind.sparse:
        # a dense index: its bi-encoder's embeddings (DEPS encodes the personalised inputs and passages)
        inputs.encode = MemoEncoder(lambda texts: encoder.encode_documents(texts, progress=False))
        if wants_texts:
            inputs.personalised = {t: r.output.personalised_text for t, r in records.items() if r.output is not None}
            store = context.passage_texts()
            inputs.passages = store.texts(deps_passage_ids(inputs.lists)) if store is not None else {}
        return
    if isinstance(backend, VectorBackend) and can_encode(backend):
        inputs.encode = MemoEncoder(lambda texts: kind.rows(encoder.encode_documents(texts, progress=False))
                                    if kind is not None else encoder.encode_documents(texts, progress=False))
        if wants_texts:
            inputs.vectors = StoredVectors(backend, query_vectors, records, context.passage_texts())
        return
    from apcir.fusion.baselines import tfidf_encoder

    inputs.personalised = {t: r.output.personalised_text for t, r in records.items() if r.output is not None}
    store = context.passage_texts()
    inputs.passages = store.texts(deps_passage_ids(inputs.lists)) if wants_texts and store is not None else {}
    corpus = [s for statements in inputs.profiles.values() for s in statements] + list(inputs.passages.values())
    inputs.encode = tfidf_encoder(corpus)


def qr_fusion_run(context: StageContext, records: dict[str, ReformulationRecord],
                  turn_weights: dict[str, tuple[float, ...]], depth: int, backend_name: str,
                  list_vectors: Sequence[Path | None] = ()) -> Run | None:
    """Query-representation fusion: each turn's three query vectors summed with its APCIR weights, one search.

    ``list_vectors``: the query vectors each list's retrieval saved (``lists/<name>.qvec.npz``, in the lists'
    order, None where there are none): a SPLADE index sums those instead of encoding the three inputs again."""
    from apcir.retrieval.backends import can_encode
    from apcir.retrieval.representation import search_fused_representation
    from apcir.retrieval.stage import load_query_vectors

    backend = context.backend()
    if not (callable(getattr(backend, "search_vectors", None)) and can_encode(backend)):  # sparse or dense vectors
        warn(f"not built: qr-fusion (the {backend_name} index has no query encoder whose vectors could be summed)")
        return None
    inputs = {t: [r.list_inputs()[name] for name in LIST_NAMES] for t, r in records.items()
              if r.output is not None and t in turn_weights}
    sparse = getattr(getattr(backend, "encoder", None), "kind", "") == "splade"  # the vectors are stored sparse
    stored = [load_query_vectors(p) if sparse and p is not None and p.exists() else None for p in list_vectors]
    run = search_fused_representation(backend, inputs, turn_weights, k=depth, progress=context.progress,
                                      stored=stored)
    context.counts.retrieval_calls += len(run)
    return run


def refuse_unjudged_tuning(turns: list[Turn], lists: list[Run], qrels: Qrels, qrels_name: str, store: Any) -> None:
    """Refuse, before the search, tuning lists in which no passage is judged (every weight would score 0 and
    the tie rule would choose), with the likely cause: the collection lacks the judged passages."""
    judged_turns = [t.turn_id for t in turns if t.turn_id in qrels]
    if not judged_turns:
        raise ApcirError(f"none of the tuning topics' {len(turns)} turns is judged in {qrels_name}: nothing to "
                         "tune on (are these the tuning topics' qrels?)")
    judged = {p for t in judged_turns for p in qrels[t]}
    retrieved = {p for run in lists for t in judged_turns for p in run.get(t, {})}
    if retrieved & judged:
        return
    found = len(store.texts(judged)) if store is not None else None
    cause = (f"the collection holds {found} of the {len(judged)} passages {qrels_name} judges for these turns"
             if found is not None else "the collection likely lacks the passages these qrels judge")
    raise ApcirError(f"no passage retrieved for the {len(judged_turns)} judged tuning turns is judged in "
                     f"{qrels_name}: {cause}; tuning would score every weight 0. Tune on topics whose passages "
                     "the collection holds, or index the collection that holds them")


def tuning_variants(names: Sequence[str]) -> list[str]:
    """The tuned systems whose weights are searched (a pooled one reads APCIR's all-turns vector)."""
    variants = dict.fromkeys(tuned_names([PRIMARY, *names]))
    return [n for n in variants if not SYSTEMS.get(n).variant.pooled]  # type: ignore[union-attr]


@dataclass
class TuneStage(Stage):
    """The tuning leg (weights source ``tune``): every tuned system's weights, tuned on other topics' lists."""

    lists: dict[str, Path]
    reformulations: Path
    qrels: Path
    qrels_name: str
    tune_topics: str
    tuning: TuningSettings
    """The search's settings (step, objective, min_turns)."""
    params: FusionParams
    levels: str
    """Whose levels: ``reformulator`` (the tuning topics' reformulations) or ``annotators`` (their PTKB provenance)."""
    outs: dict[str, Path] = an_output()
    """Weights file per tuned system."""
    turns: list[Turn] = not_an_input()
    records: dict[str, ReformulationRecord] = not_an_input()

    @property
    def name(self) -> str:
        return "tune"

    def run(self, context: StageContext) -> StageResult:
        from apcir import datasets

        lists = [context.read_run(p) for p in self.lists.values()]
        qrels = datasets.qrels(self.qrels)
        refuse_unjudged_tuning(self.turns, lists, qrels, self.qrels_name, context.passage_texts())
        oracle = self.levels == ANNOTATORS
        target = FusionInputs(lists=lists, levels=annotator_levels(self.turns) if oracle else levels_of(self.records),
                              qrels=qrels, qrels_name=self.qrels_name, run_names=[str(p) for p in self.lists.values()],
                              levels_name=f"{ANNOTATORS}:{self.tune_topics}" if oracle else str(self.reformulations))
        tuned = tune_variants(target, self.tuning, list(self.outs), self.params)
        for name, weights in tuned.items():
            weights.save(self.outs[name])
        return StageResult(f"weights of {', '.join(tuned)} tuned on {self.tune_topics} / {self.qrels_name}")


@dataclass
class FuseStage(Stage):
    """Every system's run (``systems/``), the run to submit (``fused.run``), the weights and the fusion record."""

    experiment: str
    lists: list[Path]
    levels: Path
    fusion: FusionSettings
    qrels: Path | None
    qrels_name: str | None
    rel_threshold: int
    reformulations: Path
    topics: Path
    weights_files: list[Path]
    """The weights given (source ``file``) or tuned on other topics (source ``tune``)."""
    index: Path
    backend: str
    encoder: str
    """What encodes texts for entropy and DEPS: the index's model, or ``tfidf``."""
    query_vectors: Path | None
    passages: Path | None
    list_vectors: list[Path | None]
    """The query vectors of each list's retrieval (``lists/<name>.qvec.npz``; None: not saved), summed by
    qr-fusion."""
    layout: RunLayout = not_an_input()
    turns: list[Turn] = not_an_input()
    records: dict[str, ReformulationRecord] = not_an_input()
    given: dict[str, WeightsFile] | None = not_an_input(None)

    @property
    def name(self) -> str:
        return "fuse"

    def outputs(self) -> list[Path]:
        return [self.layout.fused, self.layout.weights, self.layout.fusion_record]

    def run(self, context: StageContext) -> StageResult:
        from apcir import datasets

        weights_cfg, names = self.fusion.weights, self.fusion.baseline_names()
        lists = [context.read_run(p) for p in self.lists]
        qrels = datasets.qrels(self.qrels) if self.qrels else None
        target = FusionInputs(lists=lists, levels=load_levels(self.levels), qrels=qrels,
                              qrels_name=self.qrels_name or "", run_names=[str(p) for p in self.lists],
                              levels_name=str(self.levels))
        protocol = (f"tuned on {weights_cfg.tune_topics} / {weights_cfg.tune_qrels}" if weights_cfg.source == "tune"
                    else f"weights from {weights_cfg.file}")
        tuned = tuned_systems(weights_cfg.source, target, names, self.fusion.params(self.rel_threshold),
                              settings=weights_cfg, folds=weights_cfg.folds, seed=weights_cfg.seed, given=self.given,
                              protocol=protocol)
        systems = dict(tuned.runs)
        oracle = self.fusion.levels == ANNOTATORS
        refers = {name: self.layout.list_run(str(SYSTEMS.get(name).stored_as)) for name in names
                  if SYSTEMS.get(name).stored_as is not None}  # a list's ranking is stored once, in lists/
        refers = {name: path for name, path in refers.items() if path.exists()}
        fixed = [name for name in of_kind(names, "fixed") if name not in refers]
        if fixed:
            inputs = SystemInputs(lists=lists, norm=self.fusion.norm, depth=self.fusion.depth,
                                  seed=weights_cfg.seed, rrf_k=self.fusion.rrf_k)
            needs = needed_inputs(fixed)
            if needs:
                stored = self.layout.query_vectors(self.layout.list_run("third"))
                text_inputs(inputs, self.turns, self.records, context, stored, needs)
            systems.update(fixed_systems(inputs, fixed))
        for name in of_kind(names, "representation"):
            fused_query = qr_fusion_run(context, self.records, tuned.turn_weights, self.fusion.depth, self.backend,
                                        self.list_vectors)
            if fused_query is not None:
                systems[name] = fused_query
        for name, run in systems.items():
            context.write_run(run, self.layout.system(name), f"{self.experiment}-{name}", self.fusion.depth)
        for name in refers:
            self.layout.system(name).unlink(missing_ok=True)  # a copy an earlier version wrote
        context.write_run(tuned.submission, self.layout.fused, self.experiment, self.fusion.depth)
        tuned.weights.save(self.layout.weights)
        if tuned.folds:
            write_json(self.layout.weights_folds, [w.model_dump(mode="json") for w in tuned.folds])
        oracle = self.fusion.levels == ANNOTATORS
        for name in tuned_names(SYSTEMS.names()):  # a system no longer tuned leaves no weights file behind
            if name != PRIMARY and name not in tuned.variant_weights:
                self.layout.system_weights(name).unlink(missing_ok=True)
        for name, variant_weights in tuned.variant_weights.items():
            variant_weights.save(self.layout.system_weights(name))
        protocol = tuned.protocol + ("; levels from the annotators' PTKB provenance (an oracle: uses annotations)"
                                     if oracle else "")
        built = list(tuned.runs) + [name for kind in ("fixed", "retrieved", "representation")
                                    for name in of_kind(names, kind) if name in systems or name in refers]
        FusionRecord(systems=built + [n for n in systems if n not in built], protocol=protocol,
                     refers={name: path.relative_to(self.layout.root).as_posix() for name, path in refers.items()},
                     tuned_on_test=[n for n in tuned.runs if tuned.tuned_on_test], levels=self.fusion.levels,
                     annotated=[n for n in systems if oracle and uses_levels(n)]).save(self.layout.fusion_record)
        return StageResult(f"{len(systems) + len(refers)} systems fused; weights: {protocol}")
