"""The evaluation stage: trec_eval's numbers for every system of an experiment, and for several runs at once.

``apcir evaluate`` and ``apcir run`` call these functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from apcir.contract.records import Qrels, Run, Turn
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
