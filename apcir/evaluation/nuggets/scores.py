"""Nugget recall of responses, one run or many (a leaderboard), as iKAT scores responses from 2024 on.

Per turn: **recall** = covered nuggets / the turn's nuggets; **weighted recall** = the covered nuggets'
weights / all its nuggets' weights (equal to recall when every weight is 1, as in 2025). A run's means are
over the nuggets' turns it was scored on: a turn with nuggets and no response from the run scores 0 (it is
counted as ``missing``); so does an empty response (nothing but white space once citations are removed): it is
not sent to the matcher, is listed as ``empty`` among the missing, and a warning names the turns; a turn
with a nugget the matcher could not decide (an LLM answer that stayed unusable) is left out of that run's means
and listed, never scored 0.

Many runs: a paired significance test of each run against a baseline run (:mod:`apcir.metrics.significance`,
over the turns both were scored on), and, with a second matcher, Kendall's τ between the two matchers'
orderings of the runs (does a cheap matcher rank systems as an expensive one does?).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, Field

from apcir.errors import ApcirError
from apcir.evaluation.nuggets.gold import NuggetSet, check_runs_against
from apcir.evaluation.nuggets.matchers import LLMMatcher, Pair
from apcir.evaluation.nuggets.registry import DEFAULT_MATCHER, MATCHERS
from apcir.evaluation.nuggets.settings import MatcherSettings
from apcir.metrics.significance import Comparison, SignificanceSettings, compare_with

RECALL, WEIGHTED = "nugget recall", "weighted nugget recall"


class TurnNuggets(BaseModel):
    covered: list[str] = Field(description="ids of the nuggets the response covers")
    total: int
    recall: float
    weighted_recall: float
    scores: list[float] = Field(default_factory=list, description="the matcher's score of each nugget, in order")


class RunNuggets(BaseModel):
    run: str
    recall: float = Field(description="mean nugget recall over the scored turns")
    weighted_recall: float
    turns: int = Field(description="turns scored (missing ones included, at 0)")
    missing: list[str] = Field(default_factory=list, description="turns with nuggets and no response: scored 0")
    empty: list[str] = Field(default_factory=list, description="of the missing turns, those whose response is empty")
    unscored: dict[str, str] = Field(default_factory=dict, description="turn -> why the matcher left it undecided")
    per_turn: dict[str, TurnNuggets] = Field(default_factory=dict)
    per_level: dict[str, dict[str, float]] = Field(default_factory=dict)


class MatcherInfo(BaseModel):
    name: str
    tau: float
    model: str | None = None
    batched: bool | None = None
    requests: int = 0
    cache_hits: int = 0


class NuggetReport(BaseModel):
    nuggets: str
    matcher: MatcherInfo
    runs: dict[str, RunNuggets]
    baseline: str | None = None
    tests: list[Comparison] = Field(default_factory=list)
    compare_matcher: MatcherInfo | None = None
    compare_recall: dict[str, float] = Field(default_factory=dict, description="each run's recall, second matcher")
    kendall_tau: float | None = None
    kendall_p: float | None = None
    notes: list[str] = Field(default_factory=list)

    def ranking(self) -> list[str]:
        """Runs by mean recall, best first (ties by name)."""
        return sorted(self.runs, key=lambda r: (-self.runs[r].recall, r))


def match(nuggets: NuggetSet, runs: Mapping[str, Mapping[str, str]], matcher: str,
          settings: MatcherSettings) -> tuple[dict[str, dict[str, list[float | None]]], MatcherInfo]:
    """Each run's matcher scores per turn (one list per turn, in the nuggets' order), in one matcher call
    (``settings`` are taken for ``matcher``: :meth:`MatcherSettings.for_matcher`)."""
    spec = MATCHERS.get(matcher)
    settings = settings.for_matcher(matcher)
    built = spec.build(settings)
    pairs: list[Pair] = []
    where: list[tuple[str, str]] = []
    for run, responses in runs.items():
        for turn, nuggets_of_turn in nuggets.by_turn.items():
            if turn in responses:
                for nugget in nuggets_of_turn:
                    pairs.append((nugget, responses[turn]))
                    where.append((run, turn))
    scores = built.scores(pairs)
    out: dict[str, dict[str, list[float | None]]] = {run: {} for run in runs}
    for (run, turn), score in zip(where, scores):
        out[run].setdefault(turn, []).append(score)
    info = MatcherInfo(name=matcher, tau=spec.tau(settings))
    if isinstance(built, LLMMatcher):
        usage = built.accounting.summary()
        info.model, info.batched = built.model, built.batched
        info.requests, info.cache_hits = sum(u.requests for u in usage), sum(u.cache_hits for u in usage)
    return out, info


def run_scores(run: str, nuggets: NuggetSet, scores: Mapping[str, Sequence[float | None]], tau: float,
               levels: Mapping[str, str] | None = None) -> RunNuggets:
    """One run's recall per turn and its means (see the module doc)."""
    per_turn: dict[str, TurnNuggets] = {}
    missing, unscored = [], {}
    for turn, items in nuggets.by_turn.items():
        if turn not in scores:
            missing.append(turn)
            per_turn[turn] = TurnNuggets(covered=[], total=len(items), recall=0.0, weighted_recall=0.0)
            continue
        values = list(scores[turn])
        if any(v is None for v in values):
            unscored[turn] = f"{sum(v is None for v in values)} of {len(values)} nugget(s) undecided"
            continue
        covered = [n for n, v in zip(items, values) if v is not None and v >= tau]
        total_weight = sum(n.weight for n in items)
        per_turn[turn] = TurnNuggets(
            covered=[n.nugget_id for n in covered], total=len(items), recall=len(covered) / len(items),
            weighted_recall=sum(n.weight for n in covered) / total_weight if total_weight > 0 else 0.0,
            scores=[float(v) for v in values if v is not None])
    if not per_turn:
        raise ApcirError(f"run {run!r}: no turn could be scored")
    result = RunNuggets(run=run, recall=_mean(t.recall for t in per_turn.values()),
                        weighted_recall=_mean(t.weighted_recall for t in per_turn.values()), turns=len(per_turn),
                        missing=missing, unscored=unscored, per_turn=per_turn)
    if levels:
        for level in sorted({levels[t] for t in per_turn if t in levels}):
            chosen = [v for t, v in per_turn.items() if levels.get(t) == level]
            result.per_level[level] = {RECALL: _mean(v.recall for v in chosen),
                                       WEIGHTED: _mean(v.weighted_recall for v in chosen), "turns": len(chosen)}
    return result


def score_runs(nuggets: NuggetSet, runs: Mapping[str, Mapping[str, str]], matcher: str = DEFAULT_MATCHER,
               settings: MatcherSettings | None = None, *, baseline: str | None = None,
               compare_matcher: str | None = None, levels: Mapping[str, str] | None = None,
               significance: SignificanceSettings | None = None,
               compare_settings: MatcherSettings | None = None) -> NuggetReport:
    """Every run's nugget recall under ``matcher`` (and ``compare_matcher``, with ``compare_settings``, by default
    ``settings``' keys it reads but τ), with tests against ``baseline``."""
    settings = settings or MatcherSettings(matcher=matcher)
    check_runs_against(runs, nuggets)
    if baseline is not None and baseline not in runs:
        raise ApcirError(f"--baseline {baseline!r} is not one of the runs: {', '.join(sorted(runs))}")
    empty = _empty_responses(runs, nuggets)
    answered = {run: {t: text for t, text in responses.items() if text.strip()} for run, responses in runs.items()}
    scores, info = match(nuggets, answered, matcher, settings)
    report = NuggetReport(nuggets=nuggets.name, matcher=info, runs={
        run: run_scores(run, nuggets, scores[run], info.tau, levels) for run in runs}, baseline=baseline)
    for run in report.runs.values():
        run.empty = empty.get(run.run, [])
        if run.missing:
            report.notes.append(f"{run.run}: {len(run.missing)} turn(s) with nuggets have no response (scored 0"
                                + (f"; {len(run.empty)} of them empty" if run.empty else "") + ")")
        if run.unscored:
            report.notes.append(f"{run.run}: {len(run.unscored)} turn(s) left out, the matcher could not decide "
                                f"every nugget (e.g. {next(iter(run.unscored))})")
    if baseline is not None and len(runs) > 1:
        per_turn = {r: {t: {RECALL: v.recall} for t, v in s.per_turn.items()} for r, s in report.runs.items()}
        report.tests = compare_with(per_turn, baseline, [RECALL], significance)
    if compare_matcher is not None:
        other = compare_settings or settings.for_matcher(compare_matcher, keep_tau=False)
        other_scores, other_info = match(nuggets, answered, compare_matcher, other)
        report.compare_matcher = other_info
        report.compare_recall = {run: run_scores(run, nuggets, other_scores[run], other_info.tau).recall
                                 for run in runs}
        if len(runs) > 2:
            from scipy.stats import kendalltau

            names = sorted(runs)
            result = kendalltau([report.runs[r].recall for r in names], [report.compare_recall[r] for r in names])
            report.kendall_tau, report.kendall_p = float(result.statistic), float(result.pvalue)
        else:
            report.notes.append("Kendall's τ needs at least 3 runs")
    return report


def _empty_responses(runs: Mapping[str, Mapping[str, str]], nuggets: NuggetSet) -> dict[str, list[str]]:
    """Each run's turns with nuggets whose response is empty, named in one warning per run: they score 0 as turns
    without a response (an empty text answers nothing; the matcher is not asked about it)."""
    from apcir.console import shown, warn
    from apcir.ids import natural_key

    empty = {run: sorted((t for t, text in responses.items() if t in nuggets.by_turn and not text.strip()),
                         key=natural_key) for run, responses in runs.items()}
    for run, turns in empty.items():
        if turns:
            warn(f"run {run}: {len(turns)} empty response(s) (turns {shown(turns, 5)}): each scores 0, as a turn "
                 "without a response does (counted among the missing)")
    return {run: turns for run, turns in empty.items() if turns}


def _mean(values: object) -> float:
    items = list(values)  # type: ignore[call-overload]
    return sum(items) / len(items) if items else 0.0
