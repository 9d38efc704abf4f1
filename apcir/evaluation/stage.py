"""The evaluation stage: trec_eval's numbers for every system of an experiment, and for several runs at once.

``apcir evaluate`` and ``apcir run`` call these functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from apcir.contract.records import Qrels, Run, Turn
from apcir.contract.stage import Stage, StageContext, StageResult, an_output, not_an_input
from apcir.errors import ApcirError
from apcir.evaluation.results import PtkbMetrics, RerankerInfo, RunMetrics, SystemResult, TurnInfo
from apcir.evaluation.settings import EvaluationSettings
from apcir.fusion.systems import SYSTEMS
from apcir.metrics import (
    Comparison,
    Evaluation,
    SignificanceSettings,
    check_judged,
    compare_with,
    evaluate,
    parse_measures,
)

ANNOTATED = " [annotator levels]"
"""Appended to the label of a system whose weights were picked by the annotators' levels (``levels = "annotators"``)."""


def system_result(name: str, evaluation: Evaluation, tuned_on_test: bool = False,
                  reranked: tuple[str, str, RerankerInfo] | None = None) -> SystemResult:
    """One system's numbers, labelled from the systems registry (any other run is labelled by its name).

    ``reranked``: (base system, re-ranker key, re-ranker) for a re-ranked system, labelled ``<base> +<re-ranker>``.
    """
    if reranked is not None:
        base, key, info = reranked
        base_label = SYSTEMS.get(base).label if base in SYSTEMS else base
        return SystemResult(label=f"{base_label} +{info.label}", groups=["rerank"],
                            description=f"{base} re-ranked by {info.reranker} ({info.model}), top {info.depth}",
                            means=evaluation.measures, per_turn=evaluation.per_turn, tuned_on_test=tuned_on_test,
                            base=base, reranker=key)
    if name in SYSTEMS:
        spec = SYSTEMS.get(name)
        label, groups, description = spec.label, list(spec.groups), spec.description
    else:
        label, groups, description = name, [], ""
    return SystemResult(label=label, groups=groups, description=description, means=evaluation.measures,
                        per_turn=evaluation.per_turn, tuned_on_test=tuned_on_test)


def evaluate_systems(
    systems: Mapping[str, Run],
    qrels: Qrels,
    turns: Sequence[Turn],
    levels: Mapping[str, str],
    settings: EvaluationSettings,
    *,
    name: str,
    topics: str,
    protocol: str,
    tuned_on_test: Sequence[str] = (),
    reranked: Mapping[str, tuple[str, str]] | None = None,
    rerankers: Mapping[str, RerankerInfo] | None = None,
    backend: str | None = None,
    encoder: str | None = None,
) -> RunMetrics:
    """``metrics.json`` of an experiment: every system's means and per-turn values, and each turn's level.

    ``reranked``: re-ranked system -> (the system it re-ranks, the key of its re-ranker in ``rerankers``); a
    re-ranked system inherits its base's "tuned on test", and the base joins the "+Reranking" table.
    """
    measures = parse_measures(settings.measures)
    reranked = dict(reranked or {})
    rerankers = dict(rerankers or {})
    results = {}
    check_judged(list(systems.values()), qrels, str(settings.qrels), f"the {len(systems)} systems'")
    for system, run in systems.items():
        origin = reranked.get(system)
        base = origin[0] if origin else system
        results[system] = system_result(
            system,
            evaluate(run, qrels, measures, rel_threshold=settings.rel_threshold, complete=settings.complete,
                     check=False),
            base in tuned_on_test,
            (origin[0], origin[1], rerankers[origin[1]]) if origin else None,
        )
    for base, _ in reranked.values():
        if base in results and "rerank" not in results[base].groups:
            results[base].groups.append("rerank")
    order = []  # each re-ranked system right after the system it re-ranks
    for system in results:
        if system not in reranked:
            order += [system] + [r for r, (base, _) in reranked.items() if base == system and r in results]
    order += [r for r in results if r not in order]
    results = {system: results[system] for system in order}
    return RunMetrics(
        name=name, topics=topics, qrels=str(settings.qrels), measures=[m.name for m in measures],
        rel_threshold=settings.rel_threshold, complete=settings.complete, baseline=settings.baseline,
        protocol=protocol, systems=results,
        turns={t.turn_id: TurnInfo(level=levels.get(t.turn_id), human_personalised=bool(t.ptkb_provenance))
               for t in turns},
        backend=backend, encoder=encoder, rerankers=rerankers, significance=settings.significance(),
    )


PTKB_RANKINGS = {
    "apcir": ("APCIR statement ranking", "the reformulation's ptkb_used first, then similarity to the personalised "
                                         "rewrite (the index's encoder, or BM25)"),
    "heuristic": ("heuristic tf-idf order", "the heuristic reformulator's tf-idf cosine with the utterance and context"),
    "profile": ("profile order", "the statements in the profile's own order"),
}


def evaluate_ptkb(rankings: Mapping[str, Run], qrels: Qrels, qrels_name: str, measures: list[str]) -> PtkbMetrics:
    """The PTKB rankings (runs over statement ids) against PTKB qrels; names from :data:`PTKB_RANKINGS`."""
    chosen = parse_measures(measures)
    systems = {}
    check_judged(list(rankings.values()), qrels, qrels_name, "the PTKB rankings'", "statement ids")
    for name, run in rankings.items():
        evaluation = evaluate(run, qrels, chosen, check=False)
        label, description = PTKB_RANKINGS.get(name, (name, ""))
        systems[name] = SystemResult(label=label, groups=["ptkb"], description=description,
                                     means=evaluation.measures, per_turn=evaluation.per_turn)
    return PtkbMetrics(qrels=qrels_name, measures=[m.name for m in chosen], systems=systems)


@dataclass
class RunComparison:
    """Several runs on the same qrels: each run's evaluation and paired t-tests against a baseline run."""

    evaluations: dict[str, Evaluation]
    baseline: str
    tests: list[Comparison]
    measures: list[str]
    significance: SignificanceSettings = field(default_factory=SignificanceSettings)


def compare_runs(
    runs: Mapping[str, Run],
    qrels: Qrels,
    measures: list[str] | str,
    *,
    baseline: str | None = None,
    rel_threshold: int = 1,
    complete: bool = False,
    qrels_name: str = "the qrels",
    significance: SignificanceSettings | None = None,
) -> RunComparison:
    """Evaluate every run; test each against ``baseline`` (default: the first), one correction family per measure
    (the paper's t-test and Bonferroni unless ``significance`` says otherwise)."""
    if not runs:
        raise ApcirError("no run to evaluate")
    chosen = parse_measures(measures)
    base = baseline if baseline is not None else next(iter(runs))
    if base not in runs:
        raise ApcirError(f"--baseline {base!r} is not one of the runs ({', '.join(runs)})")
    evaluations = {label: evaluate(run, qrels, chosen, rel_threshold=rel_threshold, complete=complete,
                                   qrels_name=qrels_name, run_name=label if len(runs) > 1 else None)
                   for label, run in runs.items()}
    names = [m.name for m in chosen]
    settings = significance or SignificanceSettings()
    tests = compare_with({label: e.per_turn for label, e in evaluations.items()}, base, names, settings) \
        if len(runs) > 1 else []
    return RunComparison(evaluations, base, tests, names, settings)


def coverage_warning(evaluations: Mapping[str, Evaluation]) -> str | None:
    """One line when the runs' means are over different judged turns (so not comparable), suggesting
    ``--complete``; None when every run averages the same turns."""
    turns = {label: frozenset(e.per_turn) for label, e in evaluations.items()}
    if len(set(turns.values())) <= 1:
        return None
    common = frozenset.intersection(*turns.values())
    counts = ", ".join(f"{label} {len(t)}" for label, t in turns.items())
    return (f"the runs are averaged over different judged turns ({counts}; {len(common)} in common), so their "
            "means are not comparable; --complete (complete=True in Python) counts a judged turn missing from a run as 0, "
            "which scores every run on every judged turn")


@dataclass
class EvaluateStage(Stage):
    """``metrics.json``: every system's trec_eval numbers, the responses' measures and the PTKB rankings'."""

    code: ClassVar[tuple[str, ...]] = ("apcir.evaluation.responses", "apcir.evaluation.judge")
    experiment: str
    topics_name: str
    topics: Path
    turns: list[Turn]
    systems: dict[str, Path]
    fusion_record: Path
    levels: Path
    qrels: Path
    evaluation: EvaluationSettings
    responses: Path
    ptkb_runs: dict[str, Path] | None
    ptkb_qrels: Path | None
    retrieval: dict[str, str | None]
    """The backend and its encoder (the report's grid rows)."""
    reranked: dict[str, tuple[str, str]]
    """Each re-ranked system: (the system it re-ranks, its re-ranker's key)."""
    rerankers: dict[str, RerankerInfo]
    out: Path = an_output()
    nuggets: Path | None = None
    """The nugget file of ``evaluation.nuggets`` (fingerprinted by content)."""
    metrics: RunMetrics | None = not_an_input(None)
    """Set by :meth:`run`."""

    @property
    def name(self) -> str:
        return "evaluate"

    def _nuggets(self) -> dict[str, Any]:
        """The nugget arguments of the response evaluation (none without ``evaluation.nuggets``)."""
        from apcir.evaluation.nuggets.gold import load_nuggets

        settings = self.evaluation
        if settings.nuggets is None:
            return {}
        from apcir import datasets

        gold = load_nuggets(self.nuggets or settings.nuggets, {t.turn_id for t in datasets.topics(self.topics)})
        gold.name = settings.nuggets
        return {"nuggets": gold, "matcher": settings.nugget_matcher, "matcher_settings": settings.matcher_settings()}

    def run(self, context: StageContext) -> StageResult:
        from apcir import datasets
        from apcir.contract.fusion import load_fusion_record
        from apcir.contract.levels import load_levels
        from apcir.contract.responses import load_responses
        from apcir.contract.runs import load_run
        from apcir.evaluation.responses import evaluate_responses
        from apcir.evaluation.results import write_metrics

        settings = self.evaluation
        qrels_name = str(settings.qrels)
        fusion = load_fusion_record(self.fusion_record)
        levels = load_levels(self.levels)
        qrels = datasets.qrels(self.qrels)
        metrics = evaluate_systems(
            {name: context.read_run(path) for name, path in self.systems.items()}, qrels, self.turns, levels,
            settings, name=self.experiment, topics=self.topics_name, protocol=fusion.protocol,
            tuned_on_test=fusion.tuned_on_test, reranked=self.reranked, rerankers=self.rerankers,
            backend=self.retrieval.get("backend"), encoder=self.retrieval.get("encoder"))
        for name, result in metrics.systems.items():  # an oracle: say so wherever the system is shown
            if name in fusion.annotated or result.base in fusion.annotated:
                result.label += ANNOTATED
                result.description += "; levels from the annotators' PTKB provenance (an oracle, uses annotations)"
        judge = settings.judge
        metrics.responses = evaluate_responses(
            load_responses(self.responses), self.turns, topics=self.topics_name, qrels=qrels, qrels_name=qrels_name,
            rel_threshold=settings.rel_threshold, levels=levels, judge_model=judge.model, judge_settings=judge,
            references=datasets.reference_responses(self.topics_name), **self._nuggets())
        unjudged = False
        if metrics.responses.judge is not None:
            context.counts.llm_requests += metrics.responses.judge.requests
            unjudged = bool(metrics.responses.judge.unjudged)
        if self.ptkb_qrels is not None and self.ptkb_runs is not None:
            metrics.ptkb = evaluate_ptkb({name: load_run(path) for name, path in self.ptkb_runs.items()},
                                         datasets.qrels(self.ptkb_qrels), str(settings.ptkb_qrels),
                                         settings.ptkb_measures)
        write_metrics(metrics, self.out.parent)
        self.metrics = metrics
        # unjudged turns: the next run asks the judge again (answers it already gave come from the cache)
        return StageResult(f"{len(self.systems)} systems on {qrels_name}", unfinished=unjudged)


@dataclass
class RunPageStage(Stage):
    """A page of one run directory (``run_dir``), written to ``out`` and redone when the files it reads (``files``)
    change."""

    files: list[Path]
    _: KW_ONLY
    run_dir: Path = not_an_input()
    out: Path = an_output()


@dataclass
class ReportStage(RunPageStage):
    """``report/``: the report of one run directory (:func:`apcir.evaluation.report.write_report`), whose files are
    the metrics, the fusion record, the levels, the weights and the lists (the weight landscape)."""

    code: ClassVar[tuple[str, ...]] = ("apcir.fusion.systems", "apcir.metrics.significance")
    metrics: RunMetrics = not_an_input()

    @property
    def name(self) -> str:
        return "report"

    def run(self, context: StageContext) -> StageResult:
        from apcir.evaluation.report import write_report

        return StageResult(str(write_report([self.metrics], self.out.parent, run_dirs=[self.run_dir],
                                            read_run=context.read_run)))
