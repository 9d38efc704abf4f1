"""``apcir run``: every stage of an experiment, reusing whatever has not changed.

An experiment is a composition of stages (:mod:`apcir.contract.stage`), built
from the config by :mod:`apcir.experiment.plan` and run in the data's order
through the stage ledger (:mod:`apcir.experiment.ledger`): a stage is skipped
when its declared inputs did not change, resumed when it was interrupted,
redone when they did. The run directory's layout is
:class:`apcir.contract.layout.RunLayout` (``runs/<name>/`` by default)::

    config.json, environment.json, stages.json, timings.json
    reformulations.jsonl (+ reformulations-manual.jsonl), levels.tsv
    lists/<list>.run       the three per-turn runs (rewrite, rewrite_response, third) and manual.run
    tune/                  the tuning leg (weights source "tune"): its reformulations, lists and weights
    weights.json (+ weights-folds.json under cross-validation)
    systems/<system>.run   APCIR and every baseline (and, with [rerank], them re-ranked); systems/fusion.json
    fused.run (+ fused+<re-ranker>.run with [rerank] submit = true): the run the submission holds
    ptkb.run (+ ptkb/ its reference orders), responses.jsonl, submission.json(l), metrics.json, report/,
    inspect.html
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from apcir import datasets
from apcir.console import warn
from apcir.contract.fusion import load_fusion_record
from apcir.contract.layout import RunLayout
from apcir.contract.levels import ANNOTATORS, annotator_levels, write_levels
from apcir.contract.records import Run, Turn
from apcir.contract.reformulations import ReformulationRecord, levels_of
from apcir.contract.runs import load_run, write_run
from apcir.contract.stage import Stage, StageContext
from apcir.contract.weights import WeightsFile, load_weights
from apcir.errors import ApcirError, set_crash_log_dir
from apcir.evaluation.results import RunMetrics, read_metrics
from apcir.experiment import plan
from apcir.experiment.config import ExperimentConfig
from apcir.experiment.environment import environment, record_index
from apcir.experiment.ledger import StageLedger, StageOutcome
from apcir.fusion.systems import PRIMARY, SYSTEMS
from apcir.io import exclusive, refuse_inputs_inside, remove_stale_temporaries, write_json
from apcir.llm.settings import redact_urls


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
    """One experiment: its config, run directory, stage ledger and the context its stages share."""

    def __init__(self, config: ExperimentConfig, console: Console, progress: bool = True):
        self.config = config
        self.console = console
        self.layout = RunLayout(config.run_dir)
        self.ledger = StageLedger(self.layout.root)
        self.report = RunReport(self.layout.root)
        self._backend: Any = None
        self._index: Path | None = None
        self._written: dict[Path, Run] = {}
        self.context = StageContext(self.layout, config.name, progress, self._write_run, self._read_run,
                                    self._open_backend, self._passage_texts)

    # ---- what the stages share ------------------------------------------------------------------
    def _write_run(self, run: Run, path: Path, tag: str, depth: int | None = None) -> None:
        """Written once; handed on to later stages of this process without reading it back."""
        self._written[path] = write_run(run, path, tag=tag, depth=depth)

    def _read_run(self, path: Path) -> Run:
        return self._written[path] if path in self._written else load_run(path)

    def _open_backend(self) -> Any:
        if self._backend is None:
            from apcir.retrieval.stage import open_backend

            assert self._index is not None
            self._backend = open_backend(self.config.retrieval, self._index)
        return self._backend

    def _passage_texts(self) -> Any:
        from apcir.retrieval.stage import passage_texts_for

        assert self._index is not None
        return passage_texts_for(self.config.retrieval, self._index)

    def say(self, message: str) -> None:
        self.console.print(message, highlight=False, soft_wrap=True)

    # ---- running stages ---------------------------------------------------------------------------
    def run(self, stage: Stage) -> bool:
        """Run one stage through the ledger (True: it ran; False: reused); an unfinished one resumes next time."""
        self.say(f"[bold]{stage.name}[/] ...")
        result: list[Any] = []

        def work() -> str:
            result.append(stage.run(self.context))
            return str(result[0].detail)

        outcome = self.ledger.run(stage.name, stage.declared_inputs(), stage.outputs(), work)
        self.report.outcomes.append(outcome)
        if result and result[0].unfinished:
            self.ledger.mark_unfinished(stage.name)
        state = f"done in {outcome.seconds:.1f}s" if outcome.ran else "reused (inputs unchanged)"
        detail = f": {outcome.detail}" if outcome.detail and outcome.ran else ""
        self.say(f"  {stage.name}: {state}{detail}")
        return outcome.ran

    def reformulate(self, label: str, turns: list[Turn], options: Any, out: Path) -> dict[str, ReformulationRecord]:
        stage = plan.reformulate(self.config, label, turns, options, out)
        self.run(stage)
        return stage.records()

    def index(self) -> Path:
        """The index (built when missing or out of date; not a ledger stage: the index keeps its own manifest)."""
        from apcir.retrieval.stage import ensure_index

        self.say("[bold]index[/] ...")
        started = time.perf_counter()
        index_dir, message = ensure_index(self.config.retrieval, progress=self.context.progress)
        seconds = time.perf_counter() - started
        reused = "up to date" in message or "used as it is" in message
        self.report.outcomes.append(StageOutcome("index", not reused, seconds, message))
        self.say(f"  index: {'reused (up to date)' if reused else f'done in {seconds:.1f}s'}: {message}")
        self._index = index_dir
        return index_dir

    def tune(self, index: Path, names: list[str]) -> dict[str, WeightsFile]:
        """The tuning leg: reformulate and retrieve the tuning topics, then tune every tuned system on them."""
        config, weights = self.config, self.config.fusion.weights
        if not weights.tune_topics or not weights.tune_qrels:
            raise ApcirError("fusion.weights.source = 'tune' needs tune_topics and tune_qrels")
        turns = datasets.topics(weights.tune_topics)
        refs = self.layout.tune_dir / "reformulations.jsonl"
        tuner = config.reformulator if not weights.tune_method else config.reformulator.with_method(weights.tune_method)
        records = self.reformulate("reformulate:tune", turns, tuner, refs)
        failed = [t.turn_id for t in turns if t.turn_id not in records or records[t.turn_id].status == "failed"]
        if turns and len(failed) == len(turns):
            raise ApcirError(f"every one of the {len(turns)} tuning turns ({weights.tune_topics}) failed to "
                             "reformulate, so there is nothing to tune on: give the tuning leg a reformulator that "
                             "covers them (fusion.weights.tune_method), or other tune_topics; first error: "
                             f"{records[failed[0]].error if failed[0] in records else 'no record'}")
        lists = {name: self.layout.tune_dir / "lists" / path.name for name, path in self.layout.lists().items()}
        self.run(plan.retrieve(config, "retrieve:tune", index, refs, records, {n: n for n in lists}, lists))
        stage = plan.tune(config, self.layout, config.fusion.baseline_names(), turns, records, lists)
        self.run(stage)
        return {name: load_weights(path) for name, path in stage.outs.items()}

    def given_weights(self, index: Path) -> tuple[dict[str, WeightsFile] | None, list[Path]]:
        """The weights the fusion applies (None: it tunes them by cross-validation), and their files."""
        weights = self.config.fusion.weights
        if weights.source == "tune":
            given = self.tune(index, self.config.fusion.baseline_names())
            return given, sorted(self.layout.tune_dir.glob("weights*.json"))
        if weights.source == "file":
            if not weights.file:
                raise ApcirError("fusion.weights.source = 'file' needs fusion.weights.file (a weights.json)")
            return {PRIMARY: load_weights(weights.file)}, [Path(weights.file)]
        return None, []

    def rerank(self, index: Path, records: dict[str, ReformulationRecord],
               manual_records: dict[str, ReformulationRecord]) -> tuple[dict[str, tuple[str, str]], Path | None]:
        """Every ``[[rerank]]`` entry over its systems; returns {re-ranked system: (base, key)} and the run to submit."""
        built = load_fusion_record(self.layout.fusion_record)
        reranked: dict[str, tuple[str, str]] = {}
        submission: Path | None = None
        for settings in self.config.rerank:
            stage, absent = plan.rerank(self.config, self.layout, settings, built, index, records, manual_records)
            if absent:
                warn(f"[rerank] {stage.key}: not re-ranked, not built in this experiment: {', '.join(absent)}")
            self.run(stage)
            if settings.submit:
                submission = self.layout.reranked_fused(stage.key)
            reranked.update({t: (base, stage.key) for t, base in stage.bases.items() if t in stage.outs
                             and stage.outs[t].parent == self.layout.systems_dir})
        return reranked, submission

    def evaluate(self, turns: list[Turn], reranked: dict[str, tuple[str, str]]) -> None:
        stage = plan.evaluate(self.config, self.layout, turns, load_fusion_record(self.layout.fusion_record), reranked)
        if stage is None:
            return
        self.run(stage)
        self.report.metrics = stage.metrics or read_metrics(self.layout.root)
        judged = self.report.metrics.responses.judge if self.report.metrics.responses is not None else None
        if judged is not None and judged.unjudged:
            self.ledger.mark_unfinished("evaluate")  # the next run asks the judge again (the cache keeps answers)
            self.report.unjudged_turns.extend(sorted(judged.unjudged))


def config_inputs(config: ExperimentConfig) -> list[str | None]:
    """The files a config reads (names of bundled data resolve to nothing and are skipped by the checks)."""
    weights = config.fusion.weights
    return [config.topics, config.evaluation.qrels, config.evaluation.ptkb_qrels, config.retrieval.collection,
            config.retrieval.passages, *config.reformulator.inputs(),
            weights.file, weights.tune_topics, weights.tune_qrels]


def run_experiment(config: ExperimentConfig, console: Console | None = None, progress: bool = True) -> RunReport:
    """Run (or resume, or confirm) every stage of ``config``; see the module docstring for outputs.

    One ``apcir run`` at a time per run directory: a second one fails at once,
    naming the first. An internal error's traceback goes to ``error.log`` there.
    """
    layout = RunLayout(config.run_dir)
    refuse_inputs_inside(layout.root, config_inputs(config), "run directory")
    with exclusive(layout.lock, f"run directory {layout.root}"):
        set_crash_log_dir(layout.root)
        for stale in remove_stale_temporaries(layout.root, recursive=True):
            warn(f"removed {stale}, a temporary file left by an apcir process that was killed")
        try:
            report = _run(Experiment(config, console or Console(), progress))
        except (ApcirError, KeyboardInterrupt):
            set_crash_log_dir(None)  # the user's to fix, or an interrupt: no traceback to keep here
            raise
        # Left set when _run raises anything else (a bug): whoever reports the crash writes its traceback there.
        set_crash_log_dir(None)
        return report


def _run(exp: Experiment) -> RunReport:
    config, layout = exp.config, exp.layout
    started = time.perf_counter()
    write_json(layout.config, redact_urls(config.model_dump(mode="json")))  # no credentials on disk
    write_json(layout.environment, environment(config))
    exp.say(f"experiment [bold]{config.name}[/] -> {layout.root}")

    turns = datasets.select_turns(config.topics, config.turns)
    names = config.fusion.baseline_names()
    records = exp.reformulate("reformulate", turns, config.reformulator, layout.reformulations)
    own = {n: SYSTEMS.get(n).reformulator for n in SYSTEMS.names() if n in names}
    manual_records: dict[str, ReformulationRecord] = {}
    for method in {m for m in own.values() if m}:  # systems of their own rewrites (the annotators': manual)
        options = config.reformulator.model_copy(update={"method": method})
        manual_records = exp.reformulate(f"reformulate:{method}", turns, options, layout.manual_reformulations)

    index = exp.index()
    record_index(layout.root, index)
    lists = plan.list_outs(layout)
    exp.run(plan.retrieve(config, "retrieve", index, layout.reformulations, records, {n: n for n in lists}, lists))
    for system, rewrites in own.items():
        if rewrites:
            exp.run(plan.retrieve(config, f"retrieve:{rewrites}", index, layout.manual_reformulations, manual_records,
                                  {system: "rewrite"}, {system: layout.list_run(system)}))
    write_levels(levels_of(records), layout.levels)
    if config.fusion.levels == ANNOTATORS:
        write_levels(annotator_levels(turns), layout.annotator_levels)

    given, weights_files = exp.given_weights(index)
    exp.run(plan.fuse(config, layout, index, turns, records, weights_files, given))
    reranked, reranked_fused = exp.rerank(index, records, manual_records) if config.rerank else ({}, None)
    final_run = reranked_fused or layout.fused  # what the responses cite and the submission holds
    exp.run(plan.ptkb(config, layout, turns, records))
    exp.run(plan.respond(config, layout, turns, records, final_run))
    exp.run(plan.export(config, layout, turns, records, final_run))
    exp.evaluate(turns, reranked)
    _check_outputs(exp, turns)
    counts = exp.context.counts
    exp.report.llm_requests, exp.report.retrieval_calls = counts.llm_requests, counts.retrieval_calls
    exp.report.failed_turns, exp.report.failed_windows = list(counts.failed_turns), list(counts.failed_windows)
    write_json(layout.timings, {o.name: round(o.seconds, 3) for o in exp.report.outcomes}
               | {"total": round(time.perf_counter() - started, 3)})
    return exp.report


def _check_outputs(exp: Experiment, turns: list[Turn]) -> None:
    """Validate the submission as the organisers would, write the report when there are metrics, and the page
    (each a stage: reused while what it reads is unchanged)."""
    config = exp.config
    validation = plan.validate(config, exp.layout, turns)
    exp.run(validation)
    problems = validation.problems
    exp.report.submission_problems = problems
    if problems:
        exp.say(f"[yellow]warning:[/] {validation.submission} has {len(problems)} problem(s):")
        for problem in problems[:20]:
            exp.say(f"  {problem}")
    else:
        exp.say(f"submission {validation.submission} passes the offline iKAT checks ({len(turns)} turns)")
    if exp.report.metrics is not None:
        stage = plan.report(exp.layout, exp.report.metrics)
        exp.run(stage)
        exp.say(f"report: {stage.out}")
    exp.run(plan.inspect(exp.layout))
