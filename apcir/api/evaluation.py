"""Evaluation of runs: trec_eval's numbers and significance tests against a baseline, as tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from apcir.api.data import PathLike, judgements_of
from apcir.api.experiments import RunDirectory
from apcir.api.runs import Run, is_run, one_run
from apcir.api.tables import Table
from apcir.contract.records import Qrels


def named_runs(runs: Any) -> dict[str, Run]:
    """Named runs from a run (file, dict or Run), a sequence of them, a mapping name -> run, or a RunDirectory."""
    if isinstance(runs, RunDirectory):
        return dict(runs.systems)
    if isinstance(runs, (str, Path, Run)) or is_run(runs):
        one = one_run(runs, "run")
        return {one.name: one}
    if isinstance(runs, Mapping):
        return {str(name): one_run(value, str(name)) for name, value in runs.items()}
    out: dict[str, Run] = {}
    for item in runs:
        loaded = one_run(item, f"run{len(out) + 1}")
        out[loaded.name if loaded.name not in out else f"{loaded.name}-{len(out) + 1}"] = loaded
    return out


def evaluate(runs: Any, qrels: PathLike | Mapping[str, Mapping[str, int]], measures: str | Sequence[str] = "paper",
             *, rel_threshold: int = 1, complete: bool = False, per_turn: bool = False) -> Table:
    """trec_eval's numbers (ir-measures' for measures trec_eval lacks) of one or more runs, a row per run (or per
    run and turn with ``per_turn=True``), with ``turns``, the judged turns each mean is over. Values are fractions,
    as trec_eval gives them (the display shows them x100). A run scored on turns its fusion weights were tuned on is
    said so (a warning, and the ``tuned on test`` column: how many), and so are runs averaged over different
    judged turns."""
    from apcir.console import warn
    from apcir.evaluation.stage import coverage_warning
    from apcir.metrics.measures import parse_measures
    from apcir.metrics.trec_eval import evaluate as _evaluate

    named = named_runs(runs)
    judgements, qrels_name = judgements_of(qrels)
    chosen = parse_measures(list(measures) if not isinstance(measures, str) else measures)
    names = [m.name for m in chosen]
    rows: list[dict[str, Any]] = []
    results = {}
    tuned = tuned_on_test(named, judgements)
    for label, run in named.items():
        result = results[label] = _evaluate(run, judgements, chosen, rel_threshold=rel_threshold, complete=complete,
                                            qrels_name=qrels_name, run_name=label if len(named) > 1 else None)
        if per_turn:
            rows += [{"run": label, "turn": turn, **values} for turn, values in result.per_turn.items()]
        else:
            rows.append({"run": label, **result.measures, "turns": result.evaluated_turns}
                        | ({"tuned on test": tuned[label].turns if label in tuned else 0} if tuned else {}))
    columns = ["run", "turn", *names] if per_turn else ["run", *names, "turns", *(["tuned on test"] if tuned else [])]
    for label, found in tuned.items():
        warn(found.note(label))
    coverage = coverage_warning(results)
    if coverage is not None and not per_turn:
        warn(coverage)
    return Table(columns, rows, caption=f"on {qrels_name}, relevance threshold {rel_threshold}; x100; turns: judged "
                 "turns averaged", scaled=tuple(names))


def tuned_on_test(runs: Mapping[str, Run], judgements: Qrels) -> dict[str, Any]:
    """The runs whose fusion weights were tuned on some of the judged turns they are scored on."""
    from apcir.evaluation.tuned import tuned_turns

    found = {}
    for label, run in runs.items():
        weights = getattr(run, "weights", None)
        if weights is not None and (hit := tuned_turns(weights, run, judgements, run.weights_source)) is not None:
            found[label] = hit
    return found


def compare(runs: Any, qrels: PathLike | Mapping[str, Mapping[str, int]], measures: str | Sequence[str] = "paper",
            *, baseline: str | None = None, test: str = "t-test", correction: str = "bonferroni",
            alpha: float = 0.05, rel_threshold: int = 1, complete: bool = False) -> Table:
    """Each run against ``baseline`` (default: the first) on every measure: means, difference, p-value, corrected
    p-value and whether it is significant (``test``: t-test, randomisation or bootstrap; ``correction``: none,
    bonferroni or holm, one family per measure), as ``apcir evaluate --baseline`` reports it."""
    from apcir.evaluation.stage import compare_runs
    from apcir.metrics.significance import SignificanceSettings

    named = named_runs(runs)
    judgements, qrels_name = judgements_of(qrels)
    settings = SignificanceSettings.model_validate({"test": test, "correction": correction, "alpha": alpha})
    result = compare_runs(named, judgements, list(measures) if not isinstance(measures, str) else measures,
                          baseline=baseline, rel_threshold=rel_threshold, complete=complete, qrels_name=qrels_name,
                          significance=settings)
    from apcir.console import warn

    tuned = tuned_on_test(named, judgements)
    rows = [{"run": t.system, "baseline": t.baseline, "measure": t.measure, "mean": t.mean_system,
             "baseline mean": t.mean_baseline, "difference": t.mean_system - t.mean_baseline, "p": t.p_value,
             "p corrected": t.p_corrected, "significant": t.significant, "effect size": t.effect_size,
             "turns": t.n_turns} | ({"tuned on test": t.system in tuned} if tuned else {}) for t in result.tests]
    columns = ["run", "baseline", "measure", "mean", "baseline mean", "difference", "p", "p corrected", "significant",
               "effect size", "turns", *(["tuned on test"] if tuned else [])]
    for label, found in tuned.items():
        warn(found.note(label))
    marks = {(i, "mean"): t.marker for i, t in enumerate(result.tests) if t.marker}
    return Table(columns, rows, caption=f"{test}, {correction} correction, alpha {alpha}, on {qrels_name}; means "
                 "x100; turns: the turns both runs are scored on", scaled=("mean", "baseline mean", "difference"),
                 marks=marks)

