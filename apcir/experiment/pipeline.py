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
from pathlib import Path

from rich.console import Console

from apcir import datasets
from apcir.console import warn
from apcir.contract.fusion import load_fusion_record
from apcir.contract.layout import RunLayout
from apcir.contract.levels import ANNOTATORS, annotator_levels, write_levels
from apcir.contract.records import Turn
from apcir.contract.reformulations import ReformulationRecord, levels_of
from apcir.errors import ApcirError, set_crash_log_dir
from apcir.evaluation.results import read_metrics
from apcir.experiment import plan
from apcir.experiment.config import ExperimentConfig
from apcir.experiment.environment import environment, record_index
from apcir.experiment.runner import RunReport, StageRunner
from apcir.experiment.weights import resolve_weights
from apcir.fusion.systems import SYSTEMS
from apcir.io import exclusive, refuse_inputs_inside, remove_stale_temporaries, write_json
from apcir.llm.settings import redact_urls


class Experiment(StageRunner):
    """One experiment: the stages of ``apcir run`` over every turn, through the stage ledger
    (:class:`~apcir.experiment.runner.StageRunner`)."""

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

    weights = resolve_weights(exp, lambda: index)
    exp.run(plan.fuse(config, layout, index, turns, records, weights.files, weights.given))
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
