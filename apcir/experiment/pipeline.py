"""``apcir run``: every stage of an experiment, reusing whatever has not changed.

Each stage is the same function its own command calls, run through the stage
ledger (:mod:`apcir.experiment.ledger`): skipped when its inputs did not
change, resumed when it was interrupted, redone when they did. Run directory
layout (``runs/<name>/`` by default)::

    config.json            the config as resolved (plus the overrides given on the command line)
    environment.json       apcir, Python and library versions, models, git commit, the index manifest
    stages.json            per stage: fingerprint of its inputs, finished?, seconds
    timings.json           seconds per stage in the last invocation (0 when reused)
    reformulations.jsonl   one record per turn; .summary.json holds usage and cost
    reformulations-manual.jsonl   the annotators' rewrites (HumanQR baseline)
    levels.tsv             turn_id <TAB> level
    lists/<list>.run       the three per-turn runs (rewrite, rewrite_response, third) and manual.run
    tune/                  the tuning leg (weights source "tune"): its reformulations, lists and weights
    weights.json           per-level weights (all judged turns under CV; the tuning set otherwise)
    weights-folds.json     per-fold weights under cross-validation
    systems/<system>.run   APCIR and every baseline, as evaluated; systems/fusion.json says how
    systems/<system>+<re-ranker>.run   with [rerank]: those systems re-ranked (evaluated too)
    fused.run              the APCIR run for every turn (what the submission holds)
    fused+<re-ranker>.run  with [rerank] submit = true: fused.run re-ranked (the responses cite it, the submission
                           holds it)
    ptkb.run               every turn's PTKB statements ranked (TREC run over statement ids); ptkb/ its baselines
    responses.jsonl        one cited response per turn; .summary.json holds usage and cost
    submission.json(l)     the iKAT submission
    metrics.json           trec_eval numbers per system and turn (with qrels), the responses' and the PTKB ranking's
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from apcir import datasets
from apcir.console import warn
from apcir.contract.levels import load_levels, write_levels
from apcir.contract.records import Run, Turn
from apcir.contract.reformulations import (
    LIST_NAMES,
    ReformulationRecord,
    levels_of,
    load_reformulations,
    with_fallbacks,
)
from apcir.contract.runs import load_run, write_run
from apcir.contract.weights import WeightsFile, load_weights
from apcir.errors import ApcirError, set_crash_log_dir
from apcir.evaluation.results import RerankerInfo, RunMetrics, read_metrics, write_metrics
from apcir.experiment.config import ExperimentConfig
from apcir.experiment.environment import environment, record_index
from apcir.experiment.ledger import StageLedger, StageOutcome
from apcir.io import exclusive, read_json, refuse_inputs_inside, remove_stale_temporaries, write_json
from apcir.llm.settings import redact_urls
from apcir.reformulation.settings import ReformulatorOptions
from apcir.reformulation.stage import reformulate, stage_identity
from apcir.reranking.registry import RERANKERS
from apcir.reranking.settings import RerankSettings

FUSION_FILE = "fusion.json"
_PACKAGE = Path(__file__).resolve().parent.parent


def _code_digest(*files: str) -> str:
    """A hash of some of apcir's own source files: a stage whose output they decide is redone when they change."""
    import hashlib

    digest = hashlib.sha256()
    for name in files:
        digest.update((_PACKAGE / name).read_bytes())
    return digest.hexdigest()[:16]


def query_vectors_path(run_path: Path) -> Path:
    """Where the query vectors of a list's run are kept (``lists/third.run`` -> ``lists/third.qvec.npz``)."""
    return run_path.with_suffix(".qvec.npz")


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


@dataclass
class RunReport:
    """What one invocation of ``apcir run`` did."""

    run_dir: Path
    outcomes: list[StageOutcome] = field(default_factory=list)
    llm_requests: int = 0
    retrieval_calls: int = 0
    failed_turns: list[str] = field(default_factory=list)
    failed_windows: list[str] = field(default_factory=list)
    """Re-ranking requests whose answer could not be used (``turn#window``); asked again by the next run."""
    unjudged_turns: list[str] = field(default_factory=list)
    """Turns the response judge could not score (request failed, or answer unusable); asked again by the next run."""
    metrics: RunMetrics | None = None
    submission_problems: list[str] = field(default_factory=list)


class Experiment:
    """One experiment: its config, run directory, stage ledger and console; each method is one stage."""

    def __init__(self, config: ExperimentConfig, console: Console, progress: bool = True):
        self.config = config
        self.console = console
        self.progress = progress
        self.run_dir = config.run_dir
        self.ledger = StageLedger(self.run_dir)
        self.report = RunReport(self.run_dir)
        self._backend: Any = None
        self._written: dict[Path, Run] = {}

    # ---- runs: what a stage wrote in this process is handed on without reading it back ----------
    def write_run(self, run: Run, path: Path, tag: str, depth: int | None = None) -> None:
        self._written[path] = write_run(run, path, tag=tag, depth=depth)

    def read_run(self, path: Path) -> Run:
        """The run at ``path``: as written by this process (the same content), else read from disk."""
        return self._written[path] if path in self._written else load_run(path)

    def say(self, message: str) -> None:
        self.console.print(message, highlight=False, soft_wrap=True)

    def stage(self, name: str, inputs: dict[str, Any], outputs: list[Path], work: Callable[[], str | None]) -> bool:
        """Run one stage through the ledger; True when it ran (False: reused)."""
        self.say(f"[bold]{name}[/] ...")
        outcome = self.ledger.run(name, inputs, outputs, work)
        self.report.outcomes.append(outcome)
        state = f"done in {outcome.seconds:.1f}s" if outcome.ran else "reused (inputs unchanged)"
        detail = f": {outcome.detail}" if outcome.detail and outcome.ran else ""
        self.say(f"  {name}: {state}{detail}")
        return outcome.ran

    # ---- stage 1: reformulation -------------------------------------------------------------
    def reformulate(
        self, name: str, turns: list[Turn], topics: str, options: ReformulatorOptions, out: Path
    ) -> dict[str, ReformulationRecord]:
        """Records for every turn (failed or missing ones searched with their utterance at level a)."""
        inputs = {"topics": datasets.topics_path(topics), "turns": [t.turn_id for t in turns],
                  **stage_identity(turns, options)}
        failed: list[str] = []

        def work() -> str:
            summary = reformulate(turns, options, out, progress=self.progress, redo_stale=True)
            self.report.llm_requests += summary.requests
            failed.extend(summary.failed_turns)
            return (f"{summary.ok} turns ok, {summary.failed} failed, {summary.requests} LLM requests, "
                    f"{summary.cache_hits} cache hits")

        self.stage(name, inputs, [out], work)
        if failed:
            # Left unfinished: the next run asks the failed turns again (finished ones are kept).
            self.ledger.mark_unfinished(name)
            self.report.failed_turns.extend(failed)
        records = with_fallbacks(load_reformulations(out), turns)
        from apcir.responses.ptkb import reformulation_statements, warn_unknown_statements

        warn_unknown_statements(turns, reformulation_statements(records), f"{name} ({out.name})")
        fallen = sorted(t for t, r in records.items() if r.status == "failed")
        if fallen:
            shown = ", ".join(fallen[:10]) + (" ..." if len(fallen) > 10 else "")
            self.say(f"[yellow]warning:[/] {len(fallen)} turn(s) have no reformulation ({name}) and are searched "
                     f"with their raw utterance at level a: {shown}")
        return records

    # ---- stage 2: index and retrieval -------------------------------------------------------
    def index(self) -> Path:
        from apcir.retrieval.stage import ensure_index

        self.say("[bold]index[/] ...")
        started = time.perf_counter()
        index_dir, message = ensure_index(self.config.retrieval, progress=self.progress)
        seconds = time.perf_counter() - started
        reused = "up to date" in message or "used as it is" in message
        self.report.outcomes.append(StageOutcome("index", not reused, seconds, message))
        state = "reused (up to date)" if reused else f"done in {seconds:.1f}s"
        self.say(f"  index: {state}: {message}")
        return index_dir

    def backend(self, index_dir: Path) -> Any:
        if self._backend is None:
            from apcir.retrieval.stage import open_backend

            self._backend = open_backend(self.config.retrieval, index_dir)
        return self._backend

    def retrieve(
        self, name: str, index_dir: Path, records: dict[str, ReformulationRecord], source: Path,
        fields: dict[str, str], outs: dict[str, Path],
    ) -> None:
        """One run per ``outs`` key, retrieving the record input ``fields[key]`` (rewrite, rewrite_response, third)."""
        from apcir.retrieval.stage import list_queries, retrieve_lists

        cfg = self.config.retrieval
        inputs = {"reformulations": source, "index": index_dir, "k": cfg.k, "fields": fields,
                  "backend": cfg.backend, "encoder": cfg.encoder if cfg.uses_encoder else None}

        vectors = {key: query_vectors_path(path) for key, path in outs.items()} if cfg.uses_encoder else {}

        def work() -> str:
            queries = {key: list_queries(records, field) for key, field in fields.items()}
            tags = {key: f"{self.config.name}-{key}" for key in fields}
            retrieve_lists(self.backend(index_dir), queries, outs, tags, k=cfg.k, progress=self.progress,
                           save_vectors=vectors, write=self.write_run)
            count = sum(len(q) for q in queries.values())
            self.report.retrieval_calls += count
            return f"{count} queries"

        self.stage(name, inputs, [*outs.values(), *vectors.values()], work)

    def passage_texts(self, index_dir: Path) -> Any:
        from apcir.retrieval.stage import passage_texts_for

        return passage_texts_for(self.config.retrieval, index_dir)

    # ---- the tuning leg (weights source "tune") ---------------------------------------------
    def tune(self, index_dir: Path, names: list[str]) -> dict[str, WeightsFile]:
        """Reformulate and retrieve the tuning topics, then tune every tuned system's weights on them."""
        from apcir.fusion.protocol import FusionInputs, tune_variants
        from apcir.fusion.systems import tuned_names

        cfg = self.config
        weights_cfg = cfg.fusion.weights
        if not weights_cfg.tune_topics or not weights_cfg.tune_qrels:
            raise ApcirError("fusion.weights.source = 'tune' needs tune_topics and tune_qrels")
        tune_topics, tune_qrels = weights_cfg.tune_topics, weights_cfg.tune_qrels
        tune_dir = self.run_dir / "tune"
        turns = datasets.topics(weights_cfg.tune_topics)
        refs = tune_dir / "reformulations.jsonl"
        tuner = cfg.reformulator if not weights_cfg.tune_method else \
            cfg.reformulator.model_copy(update={"method": weights_cfg.tune_method})
        records = self.reformulate("reformulate:tune", turns, weights_cfg.tune_topics, tuner, refs)
        failed = [t.turn_id for t in turns if records.get(t.turn_id) is None or records[t.turn_id].status == "failed"]
        if turns and len(failed) == len(turns):
            raise ApcirError(f"every one of the {len(turns)} tuning turns ({tune_topics}) failed to reformulate, so "
                             f"there is nothing to tune on: give the tuning leg a reformulator that covers them "
                             f"(fusion.weights.tune_method), or other tune_topics; first error: "
                             f"{records[failed[0]].error if failed[0] in records else 'no record'}")
        lists = {name: tune_dir / "lists" / f"{name}.run" for name in LIST_NAMES}
        self.retrieve("retrieve:tune", index_dir, records, refs, {n: n for n in LIST_NAMES}, lists)
        variants = [n for n in tuned_names(["apcir", *names]) if n != "no-levels"]
        outs = {n: tune_dir / ("weights.json" if n == "apcir" else f"weights-{n}.json") for n in variants}
        qrels_path = datasets.qrels_path(weights_cfg.tune_qrels)
        inputs = {"lists": list(lists.values()), "reformulations": refs, "qrels": qrels_path,
                  "tuning": weights_cfg.model_dump(include={"step", "objective", "min_turns"}),
                  "norm": cfg.fusion.norm, "depth": cfg.fusion.depth, "rel_threshold": cfg.evaluation.rel_threshold,
                  "variants": variants}

        def work() -> str:
            self.refuse_unjudged_tuning(turns, [self.read_run(p) for p in lists.values()], tune_qrels, index_dir)
            target = FusionInputs(
                lists=[self.read_run(p) for p in lists.values()], levels=levels_of(records),
                qrels=datasets.qrels(tune_qrels), qrels_name=tune_qrels,
                run_names=[str(p) for p in lists.values()], levels_name=str(refs),
            )
            tuned = tune_variants(target, weights_cfg, variants, norm=cfg.fusion.norm, depth=cfg.fusion.depth,
                                  rel_threshold=cfg.evaluation.rel_threshold, missing_level="a")
            for name, weights in tuned.items():
                weights.save(outs[name])
            return f"weights of {', '.join(tuned)} tuned on {tune_topics} / {tune_qrels}"

        self.stage("tune", inputs, list(outs.values()), work)
        return {name: load_weights(path) for name, path in outs.items()}

    def refuse_unjudged_tuning(self, turns: list[Turn], lists: list[Run], qrels_name: str, index_dir: Path) -> None:
        """Refuse, before the search, tuning lists in which no passage is judged (every weight would score 0 and
        the tie rule would choose), with the likely cause: the collection lacks the judged passages."""
        qrels = datasets.qrels(qrels_name)
        judged_turns = [t.turn_id for t in turns if t.turn_id in qrels]
        if not judged_turns:
            raise ApcirError(f"none of the tuning topics' {len(turns)} turns is judged in {qrels_name}: nothing to "
                             "tune on (are these the tuning topics' qrels?)")
        judged = {p for t in judged_turns for p in qrels[t]}
        retrieved = {p for run in lists for t in judged_turns for p in run.get(t, {})}
        if retrieved & judged:
            return
        store = self.passage_texts(index_dir)
        found = len(store.texts(judged)) if store is not None else None
        cause = (f"the collection holds {found} of the {len(judged)} passages {qrels_name} judges for these turns"
                 if found is not None else "the collection likely lacks the passages these qrels judge")
        raise ApcirError(f"no passage retrieved for the {len(judged_turns)} judged tuning turns is judged in "
                         f"{qrels_name}: {cause}; tuning would score every weight 0. Tune on topics whose passages "
                         "the collection holds, or index the collection that holds them")

    # ---- stage 3: fusion ---------------------------------------------------------------------
    def fuse(self, turns: list[Turn], records: dict[str, ReformulationRecord], list_paths: list[Path],
             given: dict[str, WeightsFile] | None, tuning_inputs: list[Path], index_dir: Path) -> None:
        """Every system's run (``systems/``), the run to submit (``fused.run``) and the weights."""
        from apcir.fusion.protocol import FusionInputs, tuned_systems
        from apcir.fusion.systems import SystemInputs, fixed_systems

        cfg = self.config
        run_dir = self.run_dir
        weights_cfg = cfg.fusion.weights
        names = cfg.fusion.baseline_names()
        qrels_name = cfg.evaluation.qrels
        if weights_cfg.source == "cv" and qrels_name is None:
            raise ApcirError("fusion.weights.source = 'cv' needs evaluation.qrels (cross-validation tunes on them)")
        third_vectors = query_vectors_path(run_dir / "lists" / "third.run")
        passages_source = cfg.retrieval.passages_source
        inputs: dict[str, Any] = {
            "name": cfg.name,
            "lists": list_paths, "levels": run_dir / "levels.tsv", "fusion": cfg.fusion.model_dump(mode="json"),
            "qrels": datasets.qrels_path(qrels_name) if qrels_name else None,
            "rel_threshold": cfg.evaluation.rel_threshold,
            "reformulations": run_dir / "reformulations.jsonl", "topics": datasets.topics_path(cfg.topics),
            "weights": tuning_inputs,
            # what entropy and DEPS read: the index (its vectors and encoder), the personalised query vectors, texts
            "index": index_dir, "encoder": cfg.retrieval.encoder if cfg.retrieval.uses_encoder else "tfidf",
            "query_vectors": third_vectors if third_vectors.exists() else None,
            "passages": datasets.collection_path(passages_source) if passages_source else None,
        }
        if "qr-fusion" in names:  # it searches the index with fused query vectors
            inputs["qr-fusion"] = {"index": index_dir, "backend": cfg.retrieval.backend}
        outputs = [run_dir / "fused.run", run_dir / "weights.json", run_dir / "systems" / FUSION_FILE]

        def work() -> str:
            lists = [self.read_run(p) for p in list_paths]
            levels = load_levels(run_dir / "levels.tsv")
            qrels = datasets.qrels(qrels_name) if qrels_name else None
            target = FusionInputs(lists=lists, levels=levels, qrels=qrels, qrels_name=qrels_name or "",
                                  run_names=[str(p) for p in list_paths], levels_name=str(run_dir / "levels.tsv"))
            protocol = ("tuned on " f"{weights_cfg.tune_topics} / {weights_cfg.tune_qrels}"
                        if weights_cfg.source == "tune" else f"weights from {weights_cfg.file}")
            tuned = tuned_systems(weights_cfg.source, target, names, settings=weights_cfg, norm=cfg.fusion.norm,
                                  depth=cfg.fusion.depth, rel_threshold=cfg.evaluation.rel_threshold,
                                  folds=weights_cfg.folds, seed=weights_cfg.seed, given=given, protocol=protocol)
            systems = dict(tuned.runs)
            fixed = [n for n in names if n not in systems]
            if fixed:
                system_inputs = SystemInputs(lists=lists, norm=cfg.fusion.norm, depth=cfg.fusion.depth,
                                             seed=weights_cfg.seed, rrf_k=cfg.fusion.rrf_k)
                if any(n in ("entropy", "deps") for n in fixed):
                    self._text_inputs(system_inputs, turns, records, index_dir, third_vectors, "deps" in fixed)
                systems.update(fixed_systems(system_inputs, fixed))
            manual = run_dir / "lists" / "manual.run"
            if "manual" in names and manual.exists():
                systems["manual"] = self.read_run(manual)
            if "qr-fusion" in names:
                qr = self._qr_fusion(index_dir, records, tuned.turn_weights)
                if qr is not None:
                    systems["qr-fusion"] = qr
            for name, run in systems.items():
                self.write_run(run, run_dir / "systems" / f"{name}.run", f"{cfg.name}-{name}", cfg.fusion.depth)
            self.write_run(tuned.submission, run_dir / "fused.run", cfg.name, cfg.fusion.depth)
            tuned.weights.save(run_dir / "weights.json")
            if tuned.folds:
                write_json(run_dir / "weights-folds.json", [w.model_dump(mode="json") for w in tuned.folds])
            tuned_on_test = [n for n in tuned.runs if tuned.tuned_on_test]
            write_json(run_dir / "systems" / FUSION_FILE, {"systems": list(systems), "protocol": tuned.protocol,
                                                           "tuned_on_test": tuned_on_test})
            return f"{len(systems)} systems fused; weights: {tuned.protocol}"

        self.stage("fuse", inputs, outputs, work)

    def _qr_fusion(self, index_dir: Path, records: dict[str, ReformulationRecord],
                   turn_weights: dict[str, tuple[float, ...]]) -> Run | None:
        """Query-representation fusion: each turn's three query vectors summed with its APCIR weights, one search."""
        from apcir.console import warn
        from apcir.retrieval.representation import search_fused_representation

        backend = self.backend(index_dir)
        if not hasattr(backend, "search_vectors") or not hasattr(getattr(backend, "encoder", None), "encode_queries"):
            warn(f"not built: qr-fusion (the {self.config.retrieval.backend} index has no query encoder whose "
                 "vectors could be summed)")
            return None
        inputs = {t: [r.list_inputs()[name] for name in LIST_NAMES] for t, r in records.items()
                  if r.output is not None and t in turn_weights}
        run = search_fused_representation(backend, inputs, turn_weights, k=self.config.fusion.depth,
                                          progress=self.progress)
        self.report.retrieval_calls += len(run)
        return run

    # ---- stage 3b: re-ranking -----------------------------------------------------------------
    def rerank(self, records: dict[str, ReformulationRecord], manual_records: dict[str, ReformulationRecord],
               index_dir: Path) -> tuple[dict[str, tuple[str, str]], Path | None]:
        """Every ``[[rerank]]`` entry over its systems; returns {re-ranked system: (base, key)} and the run to submit."""
        from apcir.console import warn
        from apcir.reranking.stage import candidate_ids, load_reranker, record_queries, rerank_run

        cfg = self.config
        run_dir = self.run_dir
        built = read_json(run_dir / "systems" / FUSION_FILE, "fusion record")["systems"]
        passages_source = cfg.retrieval.passages_source
        collection = datasets.collection_path(passages_source) if passages_source else index_dir
        reranked: dict[str, tuple[str, str]] = {}
        submission: Path | None = None
        for settings in cfg.rerank:
            key = settings.label
            wanted = list(built) if settings.systems == "all" else list(settings.systems)
            absent = [name for name in wanted if name not in built]
            if absent:
                warn(f"[rerank] {key}: not re-ranked, not built in this experiment: {', '.join(absent)}")
            sources = {f"{name}+{key}": (name, run_dir / "systems" / f"{name}.run") for name in wanted
                       if name in built}
            outs = {target: run_dir / "systems" / f"{target}.run" for target in sources}
            if settings.submit:
                sources[f"fused+{key}"] = ("fused", run_dir / "fused.run")
                outs[f"fused+{key}"] = submission = run_dir / f"fused+{key}.run"
            model = Path(settings.model_name).expanduser()
            inputs: dict[str, Any] = {
                "runs": {target: path for target, (_, path) in sources.items()},
                "settings": settings.model_dump(mode="json", exclude={"llm", "systems", "submit"}),
                "model": model if model.exists() else settings.model_name,
                "reformulations": run_dir / "reformulations.jsonl", "passages": collection,
            }
            if any(base == "manual" for base, _ in sources.values()):
                inputs["manual"] = run_dir / "reformulations-manual.jsonl"
            if RERANKERS.get(settings.reranker).kind == "listwise":
                from apcir.llm.settings import public_url

                inputs["llm"] = {"params": settings.llm.params(), "max_answer_bytes": settings.llm.max_answer_bytes,
                                 "base_url": public_url(settings.llm.resolved_base_url())}
            failed: list[str] = []

            def work(settings: RerankSettings = settings, sources: dict[str, tuple[str, Path]] = sources,
                     outs: dict[str, Path] = outs, failed: list[str] = failed) -> str:
                runs = {target: self.read_run(path) for target, (_, path) in sources.items()}
                needed = set().union(*(candidate_ids(r, settings.depth) for r in runs.values())) if runs else set()
                store = self.passage_texts(index_dir)
                if store is None:
                    raise ApcirError("re-ranking needs the passage texts: set retrieval.passages or "
                                     "retrieval.collection")
                texts = store.texts(needed)
                queries = record_queries(records, settings.field)
                manual_queries = record_queries(manual_records, settings.field) if manual_records else {}
                reranker = load_reranker(settings)
                done, requests, passages, windows, hits = [], 0, 0, 0, 0
                for target, (base, _) in sources.items():
                    chosen = manual_queries if base == "manual" else queries
                    result, summary = rerank_run(runs[target], chosen, texts, settings, reranker=reranker,
                                                 progress=self.progress)
                    self.write_run(result, outs[target], f"{cfg.name}-{target}")
                    requests += summary.requests
                    passages += summary.passages_reranked
                    windows += summary.windows
                    hits += summary.cache_hits
                    failed.extend(f"{target}:{w}" for w in summary.failed)
                    done.append(target)
                self.report.llm_requests += requests
                detail = f"{', '.join(done)} by {settings.reranker} ({settings.model_name}), depth {settings.depth}; " \
                         f"{passages} passages"
                if RERANKERS.get(settings.reranker).kind == "listwise":
                    detail += f", {windows} windows: {requests} LLM requests, {hits} answers from the cache"
                if failed:
                    detail += f", {len(failed)} windows failed (order kept)"
                return detail

            self.stage(f"rerank:{key}", inputs, list(outs.values()), work)
            if failed:
                self.ledger.mark_unfinished(f"rerank:{key}")  # the next run asks the failed windows again
                self.report.failed_windows.extend(failed)
            reranked.update({target: (base, key) for target, (base, _) in sources.items() if base != "fused"})
        return reranked, submission

    def _text_inputs(self, inputs: Any, turns: list[Turn], records: dict[str, ReformulationRecord],
                     index_dir: Path, third_vectors: Path, deps: bool) -> None:
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

        inputs.profiles = {t.turn_id: list(t.ptkb.values()) for t in turns}
        backend = self.backend(index_dir)
        if getattr(getattr(backend, "encoder", None), "kind", None) == "dense":
            # a dense index: its bi-encoder's embeddings (DEPS encodes the personalised inputs and passages)
            dense: Any = backend.encoder
            inputs.encode = MemoEncoder(lambda texts: dense.encode_documents(texts, progress=False))
            if deps:
                inputs.personalised = {t: r.output.personalised_text for t, r in records.items()
                                       if r.output is not None}
                store = self.passage_texts(index_dir)
                inputs.passages = store.texts(deps_passage_ids(inputs.lists)) if store is not None else {}
            return
        if isinstance(backend, VectorBackend) and can_encode(backend):
            encoder: Any = backend.encoder
            inputs.encode = MemoEncoder(lambda texts: encoder.encode_documents(texts, progress=False).toarray())
            if deps:
                inputs.vectors = StoredVectors(backend, third_vectors, records, self.passage_texts(index_dir))
            return
        from apcir.fusion.baselines import tfidf_encoder

        inputs.personalised = {t: r.output.personalised_text for t, r in records.items() if r.output is not None}
        store = self.passage_texts(index_dir)
        inputs.passages = store.texts(deps_passage_ids(inputs.lists)) if deps and store is not None else {}
        corpus = [s for statements in inputs.profiles.values() for s in statements] + list(inputs.passages.values())
        inputs.encode = tfidf_encoder(corpus)

    # ---- stage 4: PTKB statement ranking and responses ---------------------------------------
    def rank_ptkb(self, turns: list[Turn], records: dict[str, ReformulationRecord]) -> Path:
        """``ptkb.run`` (apcir's ranking, what the responses and the submission use) and its two baselines."""
        from apcir.responses.ptkb import (
            BM25,
            heuristic_order,
            profile_order,
            rank_statements,
            similarity_for,
            write_ptkb_run,
        )

        cfg = self.config
        out = self.run_dir / "ptkb.run"
        baselines = {name: self.run_dir / "ptkb" / f"{name}.run" for name in ("heuristic", "profile")}
        encoder = cfg.retrieval.encoder if cfg.retrieval.uses_encoder else BM25
        inputs = {"reformulations": self.run_dir / "reformulations.jsonl", "topics": datasets.topics_path(cfg.topics),
                  "turns": [t.turn_id for t in turns], "encoder": encoder, "code": _code_digest("responses/ptkb.py",
                                                                                              "responses/text.py")}

        def work() -> str:
            from apcir.retrieval.registry import BACKENDS

            spec = similarity_for(encoder, BACKENDS.get(cfg.retrieval.backend).encoder)
            write_ptkb_run(rank_statements(turns, records, spec), out, tag=f"{cfg.name}-ptkb")
            write_ptkb_run(heuristic_order(turns), baselines["heuristic"], tag=f"{cfg.name}-ptkb-heuristic")
            write_ptkb_run(profile_order(turns), baselines["profile"], tag=f"{cfg.name}-ptkb-profile")
            return f"statements of {len(turns)} turns ranked (ptkb_used first, then {spec.name} similarity)"

        self.stage("ptkb", inputs, [out, *baselines.values()], work)
        return out

    def respond(self, turns: list[Turn], records: dict[str, ReformulationRecord], final_run: Path,
                ptkb_run: Path, index_dir: Path) -> Path:
        """``responses.jsonl``: one response per turn from the final run's top passages (resumable)."""
        from apcir.responses.job import build_jobs, needed_passages
        from apcir.responses.ptkb import load_ptkb_run
        from apcir.responses.stage import respond, stage_identity

        cfg = self.config
        out = self.run_dir / "responses.jsonl"
        passages_source = cfg.retrieval.passages_source
        inputs = {"run": final_run, "reformulations": self.run_dir / "reformulations.jsonl", "ptkb": ptkb_run,
                  "topics": datasets.topics_path(cfg.topics), "turns": [t.turn_id for t in turns],
                  "passages": datasets.collection_path(passages_source) if passages_source else None,
                  **stage_identity(cfg.respond)}
        failed: list[str] = []

        def work() -> str:
            run = self.read_run(final_run)
            store = self.passage_texts(index_dir)
            texts = store.texts(needed_passages(run, turns, cfg.respond.top_k)) if store is not None else {}
            jobs = build_jobs(turns, records, run, texts, load_ptkb_run(ptkb_run, turns), cfg.respond.top_k)
            summary = respond(jobs, cfg.respond, out, progress=self.progress, redo_stale=True)
            self.report.llm_requests += summary.requests
            failed.extend(summary.failed_turns)
            return (f"{summary.ok} responses ok, {summary.failed} failed ({summary.responder}), "
                    f"{summary.requests} LLM requests, {summary.cache_hits} cache hits")

        self.stage("respond", inputs, [out], work)
        if failed:
            self.ledger.mark_unfinished("respond")  # the next run asks the failed turns again
            self.report.failed_turns.extend(failed)
            shown = ", ".join(failed[:10]) + (" ..." if len(failed) > 10 else "")
            self.say(f"[yellow]warning:[/] {len(failed)} turn(s) have no response (their records keep the error and "
                     f"the raw answer; the submission falls back to the pseudo-response): {shown}")
        return out

    # ---- stage 5: export ---------------------------------------------------------------------
    def export(self, turns: list[Turn], records: dict[str, ReformulationRecord], final_run: Path, responses: Path,
               ptkb_run: Path, index_dir: Path) -> Path:
        from apcir.contract.responses import load_responses
        from apcir.responses.ptkb import load_ptkb_run
        from apcir.submission.common import SubmissionInputs
        from apcir.submission.stage import text_ids, write_submission

        cfg = self.config
        fmt = cfg.export.format
        assert fmt is not None  # resolved by the config from the topics
        out = self.run_dir / f"submission{cfg.export.suffix}"
        passages_source = cfg.retrieval.passages_source
        inputs = {"name": cfg.name, "fused": final_run, "topics": datasets.topics_path(cfg.topics),
                  "turns": [t.turn_id for t in turns], "reformulations": self.run_dir / "reformulations.jsonl",
                  "responses": responses, "ptkb": ptkb_run,
                  "passages": datasets.collection_path(passages_source) if passages_source else None,
                  "export": cfg.export.model_dump(mode="json"), "code": _code_digest("submission/common.py")}

        def work() -> str:
            run = self.read_run(final_run)
            used_top = 5
            answers = load_responses(responses)
            store = self.passage_texts(index_dir)
            passages = store.texts(text_ids(run, answers, used_top)) if store is not None else {}
            inputs_ = SubmissionInputs(run=run, turns=turns, run_name=cfg.name, run_type=cfg.export.run_type,
                                       team_id=cfg.export.team_id, reformulations=records, passages=passages,
                                       mode=cfg.export.text, used_top=used_top, responses=answers,
                                       ptkb=load_ptkb_run(ptkb_run, turns), ptkb_mode=cfg.export.ptkb,
                                       eval_response=cfg.export.eval_response,
                                       year=datasets.topics_year(cfg.topics))
            write_submission(inputs_, fmt, out, allow_missing_text=cfg.export.allow_missing_text)
            return f"{fmt} submission of {len(turns)} turns"

        self.stage("export", inputs, [out], work)
        return out

    # ---- stage 6: evaluation -----------------------------------------------------------------
    def evaluate(self, turns: list[Turn], responses: Path, ptkb_run: Path,
                 reranked: dict[str, tuple[str, str]] | None = None) -> None:
        from apcir.contract.responses import load_responses
        from apcir.evaluation.responses import evaluate_responses
        from apcir.evaluation.stage import evaluate_ptkb, evaluate_systems

        cfg = self.config
        qrels_name = cfg.evaluation.qrels
        if qrels_name is None:
            return
        reranked = reranked or {}
        fusion = read_json(self.run_dir / "systems" / FUSION_FILE, "fusion record")
        system_files = {name: self.run_dir / "systems" / f"{name}.run" for name in [*fusion["systems"], *reranked]}
        rerankers = reranker_infos(cfg.rerank)
        retrieval = {"backend": cfg.retrieval.backend,
                     "encoder": cfg.retrieval.encoder if cfg.retrieval.uses_encoder else None}
        ptkb_runs = {"apcir": ptkb_run, "heuristic": self.run_dir / "ptkb" / "heuristic.run",
                     "profile": self.run_dir / "ptkb" / "profile.run"}
        ptkb_qrels = cfg.evaluation.ptkb_qrels
        judge = cfg.evaluation.judge
        inputs = {"systems": system_files, "fusion": self.run_dir / "systems" / FUSION_FILE,
                  "qrels": datasets.qrels_path(qrels_name), "evaluation": cfg.evaluation.model_dump(mode="json"),
                  "levels": self.run_dir / "levels.tsv", "topics": datasets.topics_path(cfg.topics),
                  "turns": [t.turn_id for t in turns], "name": cfg.name, "responses": responses,
                  "ptkb": ptkb_runs if ptkb_qrels else None,
                  "ptkb_qrels": datasets.qrels_path(ptkb_qrels) if ptkb_qrels else None,
                  "code": _code_digest("evaluation/responses.py", "evaluation/judge.py"), "retrieval": retrieval}
        if reranked:
            inputs["reranked"] = {"systems": reranked, "rerankers": {k: v.model_dump() for k, v in rerankers.items()}}

        def work() -> str:
            metrics = evaluate_systems(
                {name: self.read_run(path) for name, path in system_files.items()}, datasets.qrels(qrels_name), turns,
                load_levels(self.run_dir / "levels.tsv"), cfg.evaluation, name=cfg.name, topics=cfg.topics,
                protocol=fusion["protocol"], tuned_on_test=fusion["tuned_on_test"], reranked=reranked,
                rerankers=rerankers, **retrieval,
            )
            levels = load_levels(self.run_dir / "levels.tsv")
            metrics.responses = evaluate_responses(
                load_responses(responses), turns, topics=cfg.topics, qrels=datasets.qrels(qrels_name),
                qrels_name=qrels_name, rel_threshold=cfg.evaluation.rel_threshold, levels=levels,
                judge_model=judge.model, judge_settings=judge,
            )
            if metrics.responses.judge is not None:
                self.report.llm_requests += metrics.responses.judge.requests
            if ptkb_qrels:
                metrics.ptkb = evaluate_ptkb({name: load_run(path) for name, path in ptkb_runs.items()},
                                             datasets.qrels(ptkb_qrels), ptkb_qrels, cfg.evaluation.ptkb_measures)
            write_metrics(metrics, self.run_dir)
            self.report.metrics = metrics
            return f"{len(system_files)} systems on {qrels_name}"

        self.stage("evaluate", inputs, [self.run_dir / "metrics.json"], work)
        if self.report.metrics is None:
            self.report.metrics = read_metrics(self.run_dir)
        judged = self.report.metrics.responses.judge if self.report.metrics.responses is not None else None
        if judged is not None and judged.unjudged:
            # Left unfinished: the next run asks the judge again (answers it already gave come from the cache).
            self.ledger.mark_unfinished("evaluate")
            self.report.unjudged_turns.extend(sorted(judged.unjudged))


def reranker_infos(entries: list[RerankSettings]) -> dict[str, RerankerInfo]:
    """What the report says about each re-ranker of a config, by key."""
    return {r.label: RerankerInfo(reranker=r.reranker, label=r.name or RERANKERS.get(r.reranker).label,
                                  model=r.model_name, depth=r.depth, field=r.field) for r in entries}


LOCK_FILE = ".apcir.lock"


def config_inputs(config: ExperimentConfig) -> list[str | None]:
    """The files a config reads (names of bundled data resolve to nothing and are skipped by the checks)."""
    llm = config.reformulator.method
    weights = config.fusion.weights
    return [config.topics, config.evaluation.qrels, config.evaluation.ptkb_qrels, config.retrieval.collection,
            config.retrieval.passages, llm.removeprefix("file:") if llm.startswith("file:") else None, weights.file,
            weights.tune_topics, weights.tune_qrels]


def run_experiment(config: ExperimentConfig, console: Console | None = None, progress: bool = True) -> RunReport:
    """Run (or resume, or confirm) every stage of ``config``; see the module docstring for outputs.

    One ``apcir run`` at a time per run directory: a second one fails at once,
    naming the first. An internal error's traceback goes to ``error.log`` there.
    """
    refuse_inputs_inside(config.run_dir, config_inputs(config), "run directory")
    with exclusive(config.run_dir / LOCK_FILE, f"run directory {config.run_dir}"):
        set_crash_log_dir(config.run_dir)
        for stale in remove_stale_temporaries(config.run_dir, recursive=True):
            warn(f"removed {stale}, a temporary file left by an apcir process that was killed")
        # Left set when _run raises: whoever reports the crash writes its traceback there.
        report = _run(config, console or Console(), progress)
        set_crash_log_dir(None)
        return report


def _run(config: ExperimentConfig, console: Console, progress: bool) -> RunReport:
    exp = Experiment(config, console, progress)
    run_dir = exp.run_dir
    started = time.perf_counter()
    write_json(run_dir / "config.json", redact_urls(config.model_dump(mode="json")))  # no credentials on disk
    write_json(run_dir / "environment.json", environment(config))
    exp.say(f"experiment [bold]{config.name}[/] -> {run_dir}")

    turns = datasets.select_turns(config.topics, config.turns)
    names = config.fusion.baseline_names()
    refs = run_dir / "reformulations.jsonl"
    records = exp.reformulate("reformulate", turns, config.topics, config.reformulator, refs)
    manual_refs = run_dir / "reformulations-manual.jsonl"
    manual_records: dict[str, ReformulationRecord] = {}
    if "manual" in names:
        manual = config.reformulator.model_copy(update={"method": "manual"})
        manual_records = exp.reformulate("reformulate:manual", turns, config.topics, manual, manual_refs)

    index_dir = exp.index()
    record_index(run_dir, index_dir)
    list_paths = {name: run_dir / "lists" / f"{name}.run" for name in LIST_NAMES}
    exp.retrieve("retrieve", index_dir, records, refs, {n: n for n in LIST_NAMES}, list_paths)
    if "manual" in names:
        exp.retrieve("retrieve:manual", index_dir, manual_records, manual_refs, {"manual": "rewrite"},
                     {"manual": run_dir / "lists" / "manual.run"})
    write_levels(levels_of(records), run_dir / "levels.tsv")

    weights_cfg = config.fusion.weights
    given: dict[str, WeightsFile] | None = None
    tuning_inputs: list[Path] = []
    if weights_cfg.source == "tune":
        given = exp.tune(index_dir, names)
        tuning_inputs = sorted((run_dir / "tune").glob("weights*.json"))
    elif weights_cfg.source == "file":
        if not weights_cfg.file:
            raise ApcirError("fusion.weights.source = 'file' needs fusion.weights.file (a weights.json)")
        given = {"apcir": load_weights(weights_cfg.file)}
        tuning_inputs = [Path(weights_cfg.file)]
    exp.fuse(turns, records, list(list_paths.values()), given, tuning_inputs, index_dir)
    reranked: dict[str, tuple[str, str]] = {}
    reranked_fused: Path | None = None
    if config.rerank:
        reranked, reranked_fused = exp.rerank(records, manual_records, index_dir)
    # the run the responses cite and the submission holds: fused.run, or it re-ranked ([rerank] submit = true)
    final_run = reranked_fused or run_dir / "fused.run"
    ptkb_run = exp.rank_ptkb(turns, records)
    responses = exp.respond(turns, records, final_run, ptkb_run, index_dir)
    submission = exp.export(turns, records, final_run, responses, ptkb_run, index_dir)
    exp.evaluate(turns, responses, ptkb_run, reranked)
    _check_outputs(exp, turns, submission)
    write_json(run_dir / "timings.json", {o.name: round(o.seconds, 3) for o in exp.report.outcomes}
               | {"total": round(time.perf_counter() - started, 3)})
    return exp.report


def _check_outputs(exp: Experiment, turns: list[Turn], submission: Path) -> None:
    """Validate the submission as the organisers would, and write the report when there are metrics."""
    from apcir.evaluation.report import write_report
    from apcir.submission.stage import validate_submission

    problems = validate_submission(submission, turns, exp.config.export.format,
                                   datasets.topics_year(exp.config.topics))
    exp.report.submission_problems = problems
    if problems:
        exp.say(f"[yellow]warning:[/] {submission} has {len(problems)} problem(s):")
        for problem in problems[:20]:
            exp.say(f"  {problem}")
    else:
        exp.say(f"submission {submission} passes the offline iKAT checks ({len(turns)} turns)")
    if exp.report.metrics is not None:
        report = write_report([exp.report.metrics], exp.run_dir / "report", run_dirs=[exp.run_dir])
        exp.say(f"report: {report}")
    from apcir.evaluation.inspector import INSPECT_FILE, write_inspector

    run_dir = exp.run_dir
    page = run_dir / INSPECT_FILE
    sources = [run_dir / name for name in ("metrics.json", "reformulations.jsonl", "responses.jsonl", "fused.run")]
    sources += sorted((run_dir / "lists").glob("*.run")) + sorted((run_dir / "systems").glob("*.run"))
    inputs = {"files": [p for p in sources if p.exists()], "code": _code_digest("evaluation/inspector.py",
                                                                                 "evaluation/inspector.html")}
    exp.stage("inspect", inputs, [page], lambda: str(write_inspector([run_dir], page)))
