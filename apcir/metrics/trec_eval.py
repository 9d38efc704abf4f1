"""Evaluate a run against qrels with trec_eval's numbers (via pytrec_eval).

Averaging follows trec_eval and exposes both of its conventions:

- ``complete=False`` (trec_eval's default): the mean is over turns that are
  both in the run and judged. Judged turns the run lacks are left out.
- ``complete=True`` (trec_eval ``-c``): judged turns the run lacks count as 0
  for every measure, so the mean is over all judged turns.

In both, run turns without judgements are ignored (trec_eval cannot score
them); the result says how many there were.

Qrels of the wrong kind (PTKB qrels for a passage run, or the reverse) judge
the run's turns but none of its documents, so every number is 0:
:func:`check_judged` says so in a warning, for every evaluation against qrels
(``evaluate``, the weight search, the response citations).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytrec_eval
from pydantic import BaseModel

from apcir.console import warn
from apcir.contract.records import Qrels, Run
from apcir.errors import ApcirError
from apcir.metrics.measures import Measure, parse_measures, pytrec_eval_spec


class Evaluation(BaseModel):
    """Means, per-turn values and the bookkeeping that says what was averaged."""

    measures: dict[str, float]
    per_turn: dict[str, dict[str, float]]
    rel_threshold: int
    complete: bool
    evaluated_turns: int
    unjudged_run_turns: list[str]
    missing_judged_turns: list[str]


def evaluate(
    run: Run,
    qrels: Qrels,
    measures: list[Measure] | list[str] | str = "paper",
    *,
    rel_threshold: int = 1,
    complete: bool = False,
    qrels_name: str = "the qrels",
    run_name: str | None = None,
    check: bool = True,
) -> Evaluation:
    """trec_eval's numbers for ``run``; see the module docstring for averaging.

    ``qrels_name`` and ``run_name`` name them in the warning of :func:`check_judged` (``check=False``: the caller
    checked already, e.g. once for several runs).
    """
    chosen = _measures(measures)
    if not complete and not run:
        raise ApcirError("the run is empty: trec_eval has nothing to average (with --complete / "
                         "evaluation.complete every judged turn counts 0)")
    if not complete and not any(turn in qrels for turn in run):
        raise ApcirError(
            f"no turn of the run ({len(run)} turns) is judged in the qrels ({len(qrels)} judged turns): trec_eval "
            "has nothing to average; check that the qrels belong to these topics (with --complete / "
            "evaluation.complete every judged turn counts 0)"
        )
    if check:
        check_judged(run, qrels, qrels_name, "the run's" if run_name is None else f"{run_name}'s")
    scored = {turn: {p: float(s) for p, s in hits.items()} for turn, hits in run.items()}
    evaluated = sorted(set(run) & set(qrels))
    per_turn: dict[str, dict[str, float]] = {turn: {} for turn in evaluated}
    by_level: dict[int, list[Measure]] = {}
    for m in chosen:
        if m.by_trec_eval:
            by_level.setdefault(int(m.rel if m.rel is not None else rel_threshold), []).append(m)
    for level, group in by_level.items():  # trec_eval's -l is one per evaluator: one evaluator per threshold
        raw = pytrec_eval.RelevanceEvaluator(qrels, pytrec_eval_spec(group), relevance_level=level).evaluate(scored)
        for turn, values in raw.items():
            per_turn[turn].update({m.name: float(values[m.trec_key]) for m in group})
    others = [m for m in chosen if not m.by_trec_eval]
    if others:
        _ir_measures_values(others, qrels, scored, rel_threshold, per_turn)
    per_turn = {turn: {m.name: values.get(m.name, 0.0) for m in chosen} for turn, values in per_turn.items()}
    missing = sorted(set(qrels) - set(run))
    if complete:
        for turn in missing:
            per_turn[turn] = {m.name: 0.0 for m in chosen}
    n = len(per_turn)
    means = {m.name: (sum(v[m.name] for v in per_turn.values()) / n if n else 0.0) for m in chosen}
    return Evaluation(
        measures=means,
        per_turn=dict(sorted(per_turn.items())),
        rel_threshold=rel_threshold,
        complete=complete,
        evaluated_turns=n,
        unjudged_run_turns=sorted(set(run) - set(qrels)),
        missing_judged_turns=missing,
    )


def _ir_measures_values(measures: list[Measure], qrels: Qrels, run: dict[str, dict[str, float]], rel_threshold: int,
                        per_turn: dict[str, dict[str, float]]) -> None:
    """Measures trec_eval does not compute (``Judged@10``, ``RR@10``), by ir-measures, into ``per_turn`` (a turn
    it reports nothing for keeps 0, as trec_eval's measures do)."""
    import ir_measures

    objects = {m.ir_measure(rel_threshold): m.name for m in measures}
    for metric in ir_measures.iter_calc(list(objects), qrels, run):
        if metric.query_id in per_turn:
            per_turn[metric.query_id][objects[metric.measure]] = float(metric.value)


def check_judged(runs: Run | Sequence[Run], qrels: Qrels, qrels_name: str = "the qrels", owner: str = "the run's",
                 noun: str = "documents") -> bool:
    """Warn when ``qrels`` judge some turns of the run (or runs, taken together) but none of its documents at all
    (every number would be 0: qrels of another kind, passage vs PTKB); True when it warned."""
    together = [runs] if isinstance(runs, Mapping) else list(runs)
    documents = {doc for run in together for hits in run.values() for doc in hits}
    if not documents or not any(turn in qrels for run in together for turn in run):
        return False
    if any(not documents.isdisjoint(grades) for grades in qrels.values()):
        return False
    judged = {doc for grades in qrels.values() for doc in grades}
    if _statement_ids(documents) != _statement_ids(judged):  # PTKB statement ids on one side, passages on the other
        warn(f"none of {owner} {len(documents)} {noun} is judged in {qrels_name}; are these the right qrels (passage "
             "vs PTKB)?")
    else:
        warn(f"none of {owner} {len(documents)} {noun} is judged in {qrels_name}; the likely cause: the collection "
             "does not hold the passages these qrels judge (a sample collection of other topics)")
    return True


def _statement_ids(ids: set[str]) -> bool:
    """Whether ``ids`` look like PTKB statement ids (short numbers) rather than passage ids."""
    return bool(ids) and all(i.isdigit() and len(i) <= 4 for i in ids)


def _measures(measures: list[Measure] | list[str] | str) -> list[Measure]:
    if isinstance(measures, str):
        return parse_measures(measures)
    return [m if isinstance(m, Measure) else parse_measures(m)[0] for m in measures]
