"""The tables of ``apcir live-report`` (its records: :mod:`apcir.live.verdicts`)."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from apcir.cli.common import console
from apcir.console import note, warn
from apcir.live.verdicts import KIND_LABELS, RubricComparison, RunReport


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _share(part: int, whole: int) -> str:
    return f"{part} of {whole} ({100 * part / whole:.0f}%)" if whole else "-"


def _mean(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def print_report(run: RunReport) -> None:
    """One run: a row per topic, the totals, and what the totals mean."""
    totals = run.totals
    where = KIND_LABELS[run.kind]
    if not run.scored:
        console.print(f"{escape(run.name)} ({where}, {run.path}): {_n(totals.answers, 'answer')} over "
                      f"{_n(totals.topics, 'topic')}; the run carries no rubric scores (its records have no "
                      "rubric_score / user_rubrik_score: the simulated user scored nothing), so there is no verdict "
                      "to report",
                      highlight=False)
        return
    table = Table(title=escape(f"{run.name}: the simulated user's verdicts ({where}; scores 0-5, covered: scored "
                               f"above {run.threshold})"))
    for column in ("topic", "rubrics reached", "covered", "tries per rubric", "turns", "answers", "mean score",
                   f"answers > {run.threshold}", "no score", "closed"):
        table.add_column(column, justify="left" if column in ("topic", "tries per rubric") else "right")
    for topic in run.topics.values():
        total = "?" if topic.rubrics_total is None else str(topic.rubrics_total)
        table.add_row(escape(topic.topic), f"{topic.rubrics_reached} of {total}", str(topic.rubrics_covered),
                      " ".join(str(n) for n in topic.tries.values()), str(topic.turns), str(topic.answers),
                      _mean(topic.mean_score),
                      _share(topic.above, topic.scored), str(topic.nulls), "yes" if topic.closed else "no")
    table.add_section()
    table.add_row("all", f"{totals.rubrics_reached} of {totals.rubrics_total}", str(totals.rubrics_covered), "",
                  str(sum(t.turns for t in run.topics.values())), str(totals.answers), _mean(totals.mean_score), _share(totals.above, totals.scored),
                  str(totals.nulls), f"{sum(t.closed for t in run.topics.values())} of {totals.topics}")
    console.print(table)
    reached = _share(totals.rubrics_reached, totals.rubrics_total)
    console.print(f"coverage: {reached} rubrics reached (pursued at least once), {totals.rubrics_covered} covered "
                  f"(scored above {run.threshold}); score: mean {_mean(totals.mean_score)} over {totals.scored} "
                  f"scored answers ({totals.nulls} without a score: tries, not in the mean)", highlight=False)
    console.print(f"best score per rubric: {_mean(totals.mean_best_reached)} over the rubrics reached and scored; "
                  f"{_mean(totals.mean_best_unreached_as_0)} over all {totals.rubrics_total} rubrics with an unreached "
                  "one counted as 0 (the 2026 results' total: it favours longer conversations, read it beside the "
                  "coverage)", highlight=False)
    console.print(f"scores read from: {run.source}", highlight=False)
    for topic in run.topics.values():
        if topic.rubrics_total is None:
            warn(f"{run.name}: topic {topic.topic} is not in the rubrics file (--rubrics): its coverage is not "
                 "known, and it is left out of the coverage totals")
        for rubric in topic.unlisted:
            warn(f"{run.name}: topic {topic.topic}: the user pursued a rubric the rubrics file does not list: "
                 f"{rubric!r} (counted as one more)")
        if not topic.closed:
            note(f"{run.name}: topic {topic.topic}: no closing words recorded (the user had not ended it)")


def print_comparison(comparison: RubricComparison) -> None:
    table = Table(title=escape(
        f"each run against {comparison.baseline}, paired over {_n(comparison.rubrics, 'rubric')} (those any run "
        f"reached on the {_n(len(comparison.topics), 'topic')} every run played; a rubric a run did not reach "
        f"counts as 0, not covered); {comparison.caption}"))
    for column in ("run", "measure", "mean", "baseline", "difference", "p", "p corrected", "Cohen's d", ""):
        table.add_column(column, justify="left" if column in ("run", "measure") else "right")
    for test in comparison.tests:
        table.add_row(escape(test.system), test.measure, f"{test.mean_system:.3f}", f"{test.mean_baseline:.3f}",
                      f"{test.mean_system - test.mean_baseline:+.3f}", f"{test.p_value:.4g}",
                      f"{test.p_corrected:.4g}", f"{test.effect_size:+.2f}", test.marker)
    console.print(table)
