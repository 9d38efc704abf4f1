"""Evaluate a run against qrels with trec_eval's numbers (via pytrec_eval).

Averaging follows trec_eval and exposes both of its conventions:

- ``complete=False`` (trec_eval's default): the mean is over turns that are
  both in the run and judged. Judged turns the run lacks are left out.
- ``complete=True`` (trec_eval ``-c``): judged turns the run lacks count as 0
  for every measure, so the mean is over all judged turns.

In both, run turns without judgements are ignored (trec_eval cannot score
them); the result says how many there were.
"""

from __future__ import annotations

import pytrec_eval
from pydantic import BaseModel

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
) -> Evaluation:
    """trec_eval's numbers for ``run``; see the module docstring for averaging."""
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
    evaluator = pytrec_eval.RelevanceEvaluator(
        qrels, pytrec_eval_spec(chosen), relevance_level=int(rel_threshold)
    )
    raw = evaluator.evaluate({turn: {p: float(s) for p, s in hits.items()} for turn, hits in run.items()})
    per_turn = {turn: {m.name: float(values[m.trec_key]) for m in chosen} for turn, values in raw.items()}
    missing = sorted(set(qrels) - set(raw))
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


def _measures(measures: list[Measure] | list[str] | str) -> list[Measure]:
    if isinstance(measures, str):
        return parse_measures(measures)
    return [m if isinstance(m, Measure) else parse_measures(m)[0] for m in measures]
