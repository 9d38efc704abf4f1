"""``apcir run``: every stage of an experiment, reusing whatever has not changed.

Run directory layout (``runs/<name>/`` by default)::

    config.json            the config as resolved (plus the overrides given on the command line)
    environment.json       apcir, Python and library versions, models, git commit
    stages.json            per stage: fingerprint of its inputs, finished?, seconds
    timings.json           seconds per stage in the last invocation (0 when reused)
    reformulations.jsonl   one LLM (or offline) record per turn; .summary.json holds usage and cost
    reformulations-manual.jsonl   the annotators' rewrites (HumanQR baseline)
    levels.tsv             turn_id <TAB> level
    lists/<list>.run       the three per-turn runs (rewrite, rewrite_response, third) and manual.run
    weights.json           per-level weights (all judged turns under CV; the tuning set otherwise)
    weights-folds.json     per-fold weights under cross-validation
    systems/<system>.run   APCIR and every baseline, as evaluated
    fused.run              the APCIR run for every turn (what the submission holds)
    submission.json(l)     the iKAT submission
    metrics.json           trec_eval numbers per system and turn (with qrels)
"""

from __future__ import annotations

import json
import platform
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from apcir import __version__, datasets
from apcir.config import ExperimentConfig
from apcir.errors import ApcirError
from apcir.evaluation import evaluate, parse_measures
from apcir.evaluation.results import RunMetrics, SystemResult, TurnInfo, write_metrics
from apcir.export.ikat import build_submission, write_submission
from apcir.export.trec import load_run, sorted_hits, write_run
from apcir.fusion import WeightsFile, load_weights, tune_weights
from apcir.fusion.levels import load_levels, write_levels
from apcir.fusion.tuning import no_third, tuned_on_overlap
from apcir.llm.schema import LIST_NAMES, ReformulationRecord, load_reformulations
from apcir.models import Run, Turn
from apcir.stages import StageLedger, StageOutcome
from apcir.systems import SYSTEMS, Tuned, cross_validated, untuned_baselines, with_weights

CONFIGS = Path(__file__).resolve().parent / "configs"


@dataclass
class RunReport:
    """What one invocation of ``apcir run`` did."""

    run_dir: Path
    outcomes: list[StageOutcome] = field(default_factory=list)
    llm_requests: int = 0
    retrieval_calls: int = 0
    failed_turns: list[str] = field(default_factory=list)
    metrics: RunMetrics | None = None
    submission_problems: list[str] = field(default_factory=list)


def resolve_config_path(value: str) -> Path:
    """A config file, or the name of a bundled one (``demo``)."""
    path = Path(value)
    if path.exists():
        return path
    bundled = CONFIGS / f"{value}.toml"
    if bundled.exists():
        return bundled
    names = ", ".join(sorted(p.stem for p in CONFIGS.glob("*.toml")))
    raise ApcirError(f"config {value!r} is neither a file nor a bundled config ({names})")


class Experiment:
    """One experiment: its config, run directory, stage ledger and console."""

    def __init__(self, config: ExperimentConfig, console: Console, progress: bool = True):
        self.config = config
        self.console = console
        self.progress = progress
        self.run_dir = config.run_dir
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.ledger = StageLedger(self.run_dir)
        self.report = RunReport(self.run_dir)
        self._backend: Any = None

    # ---- stage plumbing -----------------------------------------------------------------------
    def stage(self, name: str, inputs: dict[str, Any], outputs: list[Path], work: Callable[[], str | None]) -> None:
        self.console.print(f"[bold]{name}[/] ...", highlight=False)
        outcome = self.ledger.run(name, inputs, outputs, work)
        self.report.outcomes.append(outcome)
        state = f"done in {outcome.seconds:.1f}s" if outcome.ran else "reused (inputs unchanged)"
        detail = f": {outcome.detail}" if outcome.detail and outcome.ran else ""
        self.console.print(f"  {name}: {state}{detail}", highlight=False)

    # ---- stages -------------------------------------------------------------------------------
    def reformulate(self, turns: list[Turn], topics: str, llm: str, out: Path) -> None:
        from apcir.llm.offline import HEURISTIC_VERSION, MANUAL_VERSION
        from apcir.llm.prompt import PROMPT_VERSION
        from apcir.llm.reformulate import is_offline, reformulate

        cfg = self.config.reformulator
        version = {"heuristic": HEURISTIC_VERSION, "manual": MANUAL_VERSION}.get(llm, PROMPT_VERSION)
        inputs = {"topics": datasets.topics_path(topics), "turns": [t.turn_id for t in turns], "llm": llm,
                  "version": version, "base_url": None if is_offline(llm) else cfg.base_url}
        failed: list[str] = []

        def work() -> str:
            summary = reformulate(
                turns, llm, out, cache_dir=Path(cfg.cache_dir) if cfg.cache_dir else None,
                base_url=cfg.base_url, concurrency=cfg.concurrency, progress=self.progress,
            )
            self.report.llm_requests += summary.requests
            failed.extend(summary.failed_turns)
            return (f"{summary.ok} turns ok, {summary.failed} failed, {summary.requests} LLM requests, "
                    f"{summary.cache_hits} cache hits")

        name = f"reformulate:{out.stem}"
        self.stage(name, inputs, [out], work)
        if failed:
            # Left unfinished: the next run asks the failed turns again (finished ones are kept).
            self.ledger.mark_unfinished(name)
            self.report.failed_turns.extend(failed)

    def index(self) -> Path:
        from apcir.retrieval.build import build_index

        cfg = self.config.retrieval
        index_dir = Path(cfg.index)
        if index_dir.is_dir() and not (index_dir / "manifest.json").exists() and any(index_dir.glob("segments_*")):
            self.console.print(f"  index: {index_dir} is a Lucene index apcir did not build; used as it is",
                               highlight=False)
            return index_dir
        if cfg.collection is None:
            if not index_dir.exists():
                raise ApcirError("index directory not found and no collection configured to build it", path=index_dir)
            return index_dir
        self.console.print("[bold]index[/] ...")
        result = build_index(cfg.collection, cfg.backend, index_dir, cfg.encoder, progress=self.progress)
        self.console.print(f"  index: {result.message}", highlight=False)
        return index_dir

    def backend(self, index_dir: Path) -> Any:
        if self._backend is None:
            from apcir.retrieval.backends import open_index

            cfg = self.config.retrieval
            encoder = None if cfg.backend == "lucene-bm25" else cfg.encoder
            self._backend = open_index(index_dir, encoder, backend=cfg.backend)
        return self._backend

    def retrieve(self, index_dir: Path, records: dict[str, ReformulationRecord], field_name: str, out: Path) -> None:
        cfg = self.config.retrieval
        source = out.parent.parent / ("reformulations-manual.jsonl" if field_name == "manual" else "reformulations.jsonl")
        inputs = {"reformulations": source, "index": index_dir, "k": cfg.k, "field": field_name,
                  "backend": cfg.backend, "encoder": cfg.encoder}

        def work() -> str:
            queries = {}
            for turn_id, record in records.items():
                key = "rewrite" if field_name == "manual" else field_name
                queries[turn_id] = record.list_inputs()[key]
            run = self.backend(index_dir).search(queries, cfg.k, progress=self.progress)
            self.report.retrieval_calls += len(queries)
            write_run(run, out, tag=f"{self.config.name}-{field_name}")
            return f"{len(queries)} queries"

        self.stage(f"retrieve:{field_name}", inputs, [out], work)


def _fallback_records(records: dict[str, ReformulationRecord], turns: list[Turn]) -> dict[str, ReformulationRecord]:
    """Records for every turn: a failed or missing turn is searched with its utterance at level a."""
    from apcir.llm.schema import ReformulationOutput

    filled = {}
    for turn in turns:
        record = records.get(turn.turn_id)
        if record is None or record.output is None:
            output = ReformulationOutput(reasoning="fallback: the reformulator failed on this turn", level="a",
                                         rewrite=turn.utterance, response="", third_rewrite=turn.utterance,
                                         third_response="")
            record = ReformulationRecord(turn_id=turn.turn_id, model=record.model if record else "none",
                                         status="failed", output=output,
                                         error=record.error if record else "no record")
        filled[turn.turn_id] = record
    return filled


def environment(config: ExperimentConfig) -> dict[str, Any]:
    """Versions of apcir, Python and the libraries that shape the numbers, plus the git commit."""
    packages: dict[str, str | None] = {}
    for name in ("torch", "sentence-transformers", "transformers", "pyserini", "openai", "pytrec-eval-terrier",
                 "numpy", "scipy", "ranx", "numba"):
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                                cwd=Path(__file__).resolve().parent).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"apcir": __version__, "python": platform.python_version(), "platform": platform.platform(),
            "packages": packages, "git_commit": commit, "reformulator": config.reformulator.llm,
            "encoder": config.retrieval.encoder, "backend": config.retrieval.backend}


def _record_index(run_dir: Path, index_dir: Path) -> None:
    """Add the index's manifest (model, length budgets, collection hash, counts) to environment.json."""
    from apcir.retrieval.manifest import MANIFEST

    manifest = index_dir / MANIFEST
    info = json.loads(manifest.read_text(encoding="utf-8")) if manifest.exists() else {"path": str(index_dir)}
    env_path = run_dir / "environment.json"
    _write_json(env_path, json.loads(env_path.read_text(encoding="utf-8")) | {"index": info})


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def run_experiment(config: ExperimentConfig, console: Console | None = None, progress: bool = True) -> RunReport:
    """Run (or resume, or confirm) every stage of ``config``; see the module docstring for outputs."""
    console = console or Console()
    exp = Experiment(config, console, progress)
    run_dir = exp.run_dir
    started = time.perf_counter()
    _write_json(run_dir / "config.json", config.model_dump(mode="json"))
    _write_json(run_dir / "environment.json", environment(config))
    console.print(f"experiment [bold]{config.name}[/] -> {run_dir}", highlight=False)

    turns = _select_turns(config.topics, config.turns)
    refs_path = run_dir / "reformulations.jsonl"
    exp.reformulate(turns, config.topics, config.reformulator.llm, refs_path)
    records = _fallback_records(load_reformulations(refs_path), turns)
    failed = sorted(t for t, r in records.items() if r.status == "failed")
    if failed:
        console.print(f"[yellow]warning:[/] {len(failed)} turn(s) failed in the LLM stage and are searched with "
                      f"their raw utterance at level a: {', '.join(failed[:10])}{' ...' if len(failed) > 10 else ''}")
    baselines = config.fusion.baselines
    manual_records: dict[str, ReformulationRecord] = {}
    if baselines:
        manual_path = run_dir / "reformulations-manual.jsonl"
        exp.reformulate(turns, config.topics, "manual", manual_path)
        manual_records = load_reformulations(manual_path)

    index_dir = exp.index()
    _record_index(run_dir, index_dir)
    list_paths = [run_dir / "lists" / f"{name}.run" for name in LIST_NAMES]
    for name, path in zip(LIST_NAMES, list_paths):
        exp.retrieve(index_dir, records, name, path)
    if baselines:
        exp.retrieve(index_dir, manual_records, "manual", run_dir / "lists" / "manual.run")
    levels: dict[str, str] = {t: r.output.level for t, r in records.items() if r.output is not None}
    write_levels(levels, run_dir / "levels.tsv")

    _fuse_and_evaluate(exp, turns, records, list_paths, index_dir)
    _check_outputs(exp, turns)
    _write_json(run_dir / "timings.json", {o.name: round(o.seconds, 3) for o in exp.report.outcomes}
                | {"total": round(time.perf_counter() - started, 3)})
    return exp.report


def _check_outputs(exp: Experiment, turns: list[Turn]) -> None:
    """Validate the submission as the organisers would, and write the report when there are metrics."""
    from apcir.evaluation.report import write_report
    from apcir.export.validate import validate_submission

    suffix = ".jsonl" if exp.config.export.format == "ikat25" else ".json"
    submission = exp.run_dir / f"submission{suffix}"
    problems = validate_submission(submission, turns, exp.config.export.format)
    exp.report.submission_problems = problems
    if problems:
        exp.console.print(f"[yellow]warning:[/] {submission} has {len(problems)} problem(s):")
        for problem in problems[:20]:
            exp.console.print(f"  {problem}", highlight=False)
    else:
        exp.console.print(f"submission {submission} passes the offline iKAT checks ({len(turns)} turns)",
                          highlight=False)
    if exp.report.metrics is not None:
        report = write_report([exp.report.metrics], exp.run_dir / "report")
        exp.console.print(f"report: {report}", highlight=False)


def _select_turns(topics: str, wanted: list[str] | None) -> list[Turn]:
    turns = datasets.topics(topics)
    if not wanted:
        return turns
    from apcir.ids import canonical_turn_id

    keep = {canonical_turn_id(t) for t in wanted}
    unknown = sorted(keep - {t.turn_id for t in turns})
    if unknown:
        raise ApcirError(f"turns {', '.join(unknown)} are not in the topics {topics}")
    return [t for t in turns if t.turn_id in keep]


def _tuning_weights(exp: Experiment, index_dir: Path) -> tuple[WeightsFile, WeightsFile | None, str]:
    """Weights of the ``tune`` protocol: run reformulation and retrieval on the tuning topics, then tune."""
    cfg = exp.config
    weights_cfg = cfg.fusion.weights
    if not weights_cfg.tune_topics or not weights_cfg.tune_qrels:
        raise ApcirError("fusion.weights.source = 'tune' needs tune_topics and tune_qrels")
    tune_dir = exp.run_dir / "tune"
    turns = datasets.topics(weights_cfg.tune_topics)
    refs = tune_dir / "reformulations.jsonl"
    tune_dir.mkdir(parents=True, exist_ok=True)
    exp.reformulate(turns, weights_cfg.tune_topics, cfg.reformulator.llm, refs)
    records = _fallback_records(load_reformulations(refs), turns)
    paths = [tune_dir / "lists" / f"{name}.run" for name in LIST_NAMES]
    for name, path in zip(LIST_NAMES, paths):
        exp.retrieve(index_dir, records, name, path)
    lists = [load_run(p) for p in paths]
    levels = {t: r.output.level for t, r in records.items() if r.output is not None}
    qrels = datasets.qrels(weights_cfg.tune_qrels)
    common: dict[str, Any] = {"step": weights_cfg.step, "objective": weights_cfg.objective, "norm": cfg.fusion.norm,
                                  "depth": cfg.fusion.depth, "rel_threshold": cfg.evaluation.rel_threshold,
                                  "missing_level": "a", "qrels_name": weights_cfg.tune_qrels}
    weights = tune_weights(lists, levels, qrels, **common)
    no_p = tune_weights(lists, levels, qrels, constraint=no_third, **common) if cfg.fusion.baselines else None
    return weights, no_p, f"tuned on {weights_cfg.tune_topics} / {weights_cfg.tune_qrels}"


def _fuse_and_evaluate(
    exp: Experiment, turns: list[Turn], records: dict[str, ReformulationRecord], list_paths: list[Path], index_dir: Path
) -> None:
    cfg = exp.config
    run_dir = exp.run_dir
    weights_cfg = cfg.fusion.weights
    qrels_name = cfg.evaluation.qrels
    if weights_cfg.source == "cv" and qrels_name is None:
        raise ApcirError("fusion.weights.source = 'cv' needs evaluation.qrels (cross-validation tunes on them)")
    passages_source = cfg.retrieval.passages or cfg.retrieval.collection
    inputs: dict[str, Any] = {
        "name": cfg.name,  # names the run tags, the submission and the metrics
        "lists": list_paths, "levels": run_dir / "levels.tsv", "fusion": cfg.fusion.model_dump(mode="json"),
        "qrels": datasets.qrels_path(qrels_name) if qrels_name else None,
        "evaluation": cfg.evaluation.model_dump(mode="json"), "export": cfg.export.model_dump(mode="json"),
        "reformulations": run_dir / "reformulations.jsonl",
        "passages": datasets.collection_path(passages_source) if passages_source else None,
    }
    if weights_cfg.source == "file":
        inputs["weights_file"] = Path(str(weights_cfg.file))
    suffix = ".jsonl" if cfg.export.format == "ikat25" else ".json"
    outputs = [run_dir / "fused.run", run_dir / "weights.json", run_dir / f"submission{suffix}"]
    if qrels_name:
        outputs.append(run_dir / "metrics.json")

    tuned_source: tuple[WeightsFile, WeightsFile | None, str] | None = None
    if weights_cfg.source == "tune":
        tuned_source = _tuning_weights(exp, index_dir)
        inputs["tune_lists"] = [run_dir / "tune" / "lists" / f"{n}.run" for n in LIST_NAMES]

    def work() -> str:
        lists = [load_run(p) for p in list_paths]
        levels = load_levels(run_dir / "levels.tsv")
        qrels = datasets.qrels(qrels_name) if qrels_name else None
        fusion = cfg.fusion
        tuned = _apcir_systems(exp, lists, levels, qrels, tuned_source)
        passages = ({p.id: p.contents for p in datasets.iter_collection(datasets.collection_path(passages_source))}
                    if passages_source else {})
        systems = dict(tuned.runs)
        if fusion.baselines:
            profiles = {t.turn_id: list(t.ptkb.values()) for t in turns}
            personalised = {t: f"{r.output.third_rewrite} {r.output.third_response}".strip()
                            for t, r in records.items() if r.output is not None}
            statements = [s for st in profiles.values() for s in st]
            encode = _dense_encoder(cfg, statements + list(passages.values()))
            if isinstance(encode, _MemoEncoder):
                # One batch for everything entropy and DEPS will ask for: statements, personalised
                # inputs, and the top-10 passages of the q'+r' list.
                top = {p for hits in lists[1].values() for p, _ in sorted_hits(hits, 10) if p in passages}
                encode.prime(statements + list(personalised.values()) + [passages[p] for p in top])
            systems.update(untuned_baselines(
                lists, norm=fusion.norm, depth=fusion.depth, seed=weights_cfg.seed, profiles=profiles,
                personalised=personalised, passages=passages, encode=encode,
            ))
            manual = run_dir / "lists" / "manual.run"
            if manual.exists():
                systems["manual"] = load_run(manual)
        for name, run in systems.items():
            write_run(run, run_dir / "systems" / f"{name}.run", tag=f"{cfg.name}-{name}", depth=fusion.depth)
        write_run(tuned.submission, run_dir / "fused.run", tag=cfg.name, depth=fusion.depth)
        tuned.weights.save(run_dir / "weights.json")
        if tuned.folds:
            _write_json(run_dir / "weights-folds.json", [w.model_dump(mode="json") for w in tuned.folds])
        submission = build_submission(
            tuned.submission, turns, fmt=cfg.export.format, run_name=cfg.name, run_type=cfg.export.run_type,
            team_id=cfg.export.team_id, reformulations=records, passages=passages, mode=cfg.export.text,
        )
        write_submission(submission, run_dir / f"submission{suffix}")
        if qrels is not None:
            exp.report.metrics = _evaluate_systems(cfg, systems, qrels, turns, levels, tuned)
            write_metrics(exp.report.metrics, run_dir)
        return f"{len(systems)} systems fused; weights: {tuned.protocol}"

    exp.stage("fuse+evaluate", inputs, outputs, work)
    if qrels_name and exp.report.metrics is None:
        from apcir.evaluation.results import read_metrics

        exp.report.metrics = read_metrics(run_dir)


def _apcir_systems(
    exp: Experiment, lists: list[Run], levels: dict[str, str], qrels: Any,
    tuned_source: tuple[WeightsFile, WeightsFile | None, str] | None,
) -> Tuned:
    cfg = exp.config
    fusion = cfg.fusion
    weights_cfg = fusion.weights
    if weights_cfg.source == "cv":
        return cross_validated(
            lists, levels, qrels, folds=weights_cfg.folds, seed=weights_cfg.seed, step=weights_cfg.step,
            objective=weights_cfg.objective, norm=fusion.norm, depth=fusion.depth,
            rel_threshold=cfg.evaluation.rel_threshold, with_baselines=fusion.baselines,
        )
    if weights_cfg.source == "tune":
        assert tuned_source is not None
        weights, no_p, protocol = tuned_source
    else:
        if not weights_cfg.file:
            raise ApcirError("fusion.weights.source = 'file' needs fusion.weights.file (a weights.json)")
        weights, no_p, protocol = load_weights(weights_cfg.file), None, f"weights from {weights_cfg.file}"
    # Tuned on test when an evaluated turn, with the same judgements, was a tuning turn.
    evaluated = {t: qrels[t] for t in levels if qrels and t in qrels}
    overlap = tuned_on_overlap(weights, evaluated) if qrels else 0
    if overlap is None:
        protocol += " (tuning turns unknown)"
    return with_weights(lists, levels, weights, no_personalisation=no_p, norm=fusion.norm, depth=fusion.depth,
                        protocol=protocol, tuned_on_test=bool(overlap))


class _MemoEncoder:
    """Dense vectors of texts, encoded once each: ``prime`` encodes many texts in one batch."""

    def __init__(self, encode_batch: Callable[[list[str]], Any]):
        self.encode_batch = encode_batch
        self.vectors: dict[str, Any] = {}

    def prime(self, texts: list[str]) -> None:
        new = sorted({t for t in texts if t not in self.vectors})
        if new:
            for text, vector in zip(new, self.encode_batch(new)):
                self.vectors[text] = vector

    def __call__(self, texts: list[str]) -> Any:
        import numpy as np

        self.prime(texts)
        return np.vstack([self.vectors[t] for t in texts])


def _dense_encoder(config: ExperimentConfig, corpus: list[str]) -> Callable[[list[str]], Any]:
    """The encoder E of the entropy and DEPS baselines: the index's SPLADE model, densified.

    For a BM25 index there is no SPLADE model; a TF-IDF encoder with IDF from
    ``corpus`` (profile statements and passages) stands in.
    """
    if config.retrieval.backend == "lucene-bm25":
        from apcir.fusion.baselines import tfidf_encoder

        return tfidf_encoder(corpus)
    from apcir.retrieval.encoder import SpladeEncoder

    encoder = SpladeEncoder(config.retrieval.encoder)
    return _MemoEncoder(lambda texts: encoder.encode_documents(texts, progress=False).toarray())


def _evaluate_systems(
    config: ExperimentConfig, systems: dict[str, Run], qrels: Any, turns: list[Turn], levels: dict[str, str],
    tuned: Tuned,
) -> RunMetrics:
    ev = config.evaluation
    measures = parse_measures(ev.measures)
    results = {}
    for name, run in systems.items():
        result = evaluate(run, qrels, measures, rel_threshold=ev.rel_threshold, complete=ev.complete)
        spec = SYSTEMS[name]
        results[name] = SystemResult(
            label=spec.label, groups=list(spec.groups), description=spec.description, means=result.measures,
            per_turn=result.per_turn, tuned_on_test=tuned.tuned_on_test and name in tuned.runs,
        )
    return RunMetrics(
        name=config.name, topics=config.topics, qrels=str(ev.qrels), measures=[m.name for m in measures],
        rel_threshold=ev.rel_threshold, complete=ev.complete, baseline=ev.baseline, protocol=tuned.protocol,
        systems=results,
        turns={t.turn_id: TurnInfo(level=levels.get(t.turn_id), human_personalised=bool(t.ptkb_provenance))
               for t in turns},
    )


def comparison_table(metrics: RunMetrics) -> Table:
    """The table ``apcir run`` ends with: every system, the configured measures (x100)."""
    table = Table(title=f"{metrics.name}: {metrics.topics} vs {metrics.qrels} (weights: {metrics.protocol})")
    table.add_column("system")
    for measure in metrics.measures:
        table.add_column(measure, justify="right")
    order = [s for s in SYSTEMS if s in metrics.systems]
    for name in order:
        result = metrics.systems[name]
        label = result.label + (" [tuned on test]" if result.tuned_on_test else "")
        table.add_row(label, *(f"{100 * result.means[m]:.1f}" for m in metrics.measures))
    return table
