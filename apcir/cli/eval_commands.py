"""``apcir evaluate``: trec_eval numbers for one run, or a comparison of several with paired t-tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from apcir import datasets
from apcir.cli.common import (
    checked,
    console,
    entry_flag,
    err_console,
    llm_options,
    llm_values,
    means_table,
    measure_columns,
    print_json,
    settings,
)
from apcir.cli.matcher_options import matcher_options, matcher_settings
from apcir.contract.runs import read_run_file
from apcir.errors import ApcirError
from apcir.evaluation.nuggets.registry import DEFAULT_MATCHER, MATCHERS
from apcir.evaluation.responses import (
    MEASURES,
    JudgeInfo,
    ResponseMetrics,
    ResponseRuns,
    compare_response_runs,
    evaluate_responses,
    warn_outside_topics,
)
from apcir.evaluation.settings import JudgeSettings
from apcir.evaluation.stage import compare_runs
from apcir.ids import natural_key
from apcir.io import check_writable, refuse_inputs_as_outputs, write_text


def _labels(paths: list[Path]) -> list[str]:
    """Short, distinct labels: file names, or the paths when two runs share a name."""
    names = [p.name for p in paths]
    return names if len(set(names)) == len(names) else [str(p) for p in paths]


def evaluate_command(
    runs: list[Path] = typer.Argument(..., help="One or more TREC run files; the first is the baseline by default."),
    qrels: str = typer.Option(..., "--qrels", "-q", help="Bundled qrels name (ikat23-test) or a qrels file."),
    measures: list[str] = typer.Option(
        ["paper"], "--measures", "-m", help="Set names (paper, ikat) or measures as ir-measures or trec_eval name them (nDCG@3, RR, P(rel=2)@10, Judged@10, ndcg_cut_3, ...)."
    ),
    rel_threshold: int = typer.Option(
        1, "--rel-threshold", "-l", min=1, help="Lowest grade counted relevant by binary measures (trec_eval -l)."
    ),
    complete: bool = typer.Option(
        False, "--complete", "-c", help="Judged turns missing from the run count as 0 (trec_eval -c)."
    ),
    baseline: Path | None = typer.Option(
        None, "--baseline", "-b", help="With several runs: the run the others are tested against (default: the first)."
    ),
    per_turn: bool = typer.Option(False, "--per-turn", help="Also report every turn's values."),
    test: str = typer.Option("t-test", "--test", help="Significance test: t-test (the paper's), randomisation or "
                                                     "bootstrap (paired, two-sided)."),
    correction: str = typer.Option("bonferroni", "--correction", help="Over the runs compared: none, bonferroni "
                                                                     "(the paper's) or holm."),
    alpha: float = typer.Option(0.05, "--alpha", help="Significance level."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Evaluate runs with trec_eval's measures (through pytrec_eval); several runs are compared in one table."""
    from apcir.metrics import SignificanceSettings

    significance = settings(SignificanceSettings, test=test, correction=correction, alpha=alpha)
    paths = list(runs)
    if baseline is not None and baseline not in paths:
        paths.insert(0, baseline)
    labels = _labels(paths)
    loaded = {}
    for label, path in zip(labels, paths):
        run_file = read_run_file(path)
        for problem in run_file.problems:
            err_console.print(f"[yellow]warning:[/] {path}: {problem}", highlight=False)
        loaded[label] = run_file.run
    base = labels[paths.index(baseline)] if baseline is not None else labels[0]
    judgements = datasets.qrels(qrels)
    comparison = compare_runs(loaded, judgements, measures, baseline=base, rel_threshold=rel_threshold,
                              complete=complete, qrels_name=qrels, significance=significance)
    from apcir.evaluation.stage import coverage_warning
    from apcir.evaluation.tuned import run_tuned_on_test

    tuned = {label: found for label, path in zip(labels, paths)
             if (found := run_tuned_on_test(path, loaded[label], judgements)) is not None}
    if as_json:
        _print_json(comparison, labels, per_turn, rel_threshold, complete, tuned)
        return
    if per_turn:
        for label, result in comparison.evaluations.items():
            table = Table(title=f"{label} per turn (x100)")
            table.add_column("turn")
            for name in result.measures:
                table.add_column(name, justify="right")
            for turn, values in sorted(result.per_turn.items(), key=lambda item: natural_key(item[0])):
                table.add_row(turn, *(f"{100 * v:.2f}" for v in values.values()))
            console.print(table)
    if len(loaded) == 1:
        only = next(iter(comparison.evaluations.values()))
        console.print(means_table(f"{labels[0]}{' [tuned on test]' if tuned else ''} vs {qrels}", only.measures,
                                  n=only.evaluated_turns))
    else:
        console.print(_comparison_table(comparison, qrels, set(tuned)))
        console.print(_tests_table(comparison))
    averaging = (
        "judged turns missing from the run count as 0 (trec_eval -c)"
        if complete
        else "mean over turns both in the run and judged (trec_eval default)"
    )
    for label, result in comparison.evaluations.items():
        console.print(
            f"{label}: {result.evaluated_turns} turns averaged, {len(result.missing_judged_turns)} judged turns "
            f"not in the run, {len(result.unjudged_run_turns)} run turns unjudged",
            highlight=False,
        )
    console.print(f"relevance threshold for binary measures: grade >= {rel_threshold}; {averaging}", highlight=False)
    for label, found in tuned.items():
        err_console.print(f"[yellow]warning:[/] {found.note(label)}", highlight=False)
    warning = coverage_warning(comparison.evaluations)
    if warning is not None:
        err_console.print(f"[yellow]warning:[/] {warning}", highlight=False)


def _tests_table(comparison) -> Table:  # type: ignore[no-untyped-def]
    table = Table(title=f"each run against {comparison.baseline}: difference, p-values and effect size "
                        f"({comparison.significance.caption(len(comparison.evaluations) - 1)})")
    for column in ("run", "measure", "difference x100", "p", "p corrected", "Cohen's d", ""):
        table.add_column(column, justify="left" if column in ("run", "measure") else "right")
    for test in comparison.tests:
        table.add_row(test.system, test.measure, f"{100 * (test.mean_system - test.mean_baseline):+.2f}",
                      f"{test.p_value:.4g}", f"{test.p_corrected:.4g}", f"{test.effect_size:+.2f}", test.marker)
    return table


def _comparison_table(comparison, qrels: str, tuned: set[str]) -> Table:  # type: ignore[no-untyped-def]
    others = len(comparison.evaluations) - 1
    table = measure_columns(f"runs vs {qrels} (x100; n: judged turns averaged); † / ↓: significantly better / worse "
                            f"than {comparison.baseline} ({comparison.significance.caption(others)})", "run",
                            comparison.measures)
    marks = {(t.system, t.measure): t for t in comparison.tests}
    for label, result in comparison.evaluations.items():
        cells = []
        for name in comparison.measures:
            test = marks.get((label, name))
            cells.append(f"{100 * result.measures[name]:.2f}{test.marker if test else ''}")
        table.add_row(escape(label + (" [tuned on test]" if label in tuned else "")
                             + (" (baseline)" if label == comparison.baseline else "")), *cells,
                      str(result.evaluated_turns))
    return table


def _print_json(comparison, labels, per_turn, rel_threshold, complete, tuned) -> None:  # type: ignore[no-untyped-def]
    def one(label, result) -> dict[str, object]:  # type: ignore[no-untyped-def]
        payload: dict[str, object] = {"measures": result.measures}
        if per_turn:
            payload["per_turn"] = result.per_turn
        payload.update(rel_threshold=rel_threshold, complete=complete, evaluated_turns=result.evaluated_turns,
                       unjudged_run_turns=len(result.unjudged_run_turns),
                       missing_judged_turns=len(result.missing_judged_turns),
                       tuned_on_test_turns=tuned[label].turns if label in tuned else 0)
        return payload

    if len(labels) == 1:
        print_json(one(labels[0], comparison.evaluations[labels[0]]))
        return
    print_json({
        "baseline": comparison.baseline,
        "runs": {label: one(label, result) for label, result in comparison.evaluations.items()},
        "tests": [t.model_dump() for t in comparison.tests],
    })


@matcher_options
@llm_options("Judge and llm matcher: ", exclude=("temperature", "max_tokens"))
def evaluate_responses_command(
    responses: list[str] = typer.Argument(
        ..., help="Responses: apcir respond's JSONL, one file per run (several: side by side in one table); with "
                  "--nuggets also {turn_id: {run: text}} (iKAT 2024), BERGEN [{q_id, response}] files (iKAT 2025) "
                  "or ikat25-runs (bundled). NAME=PATH names a run (default: a responses.jsonl's directory, else the "
                  "file's name)."),
    topics: str = typer.Option(..., "--topics", "-t", help="Topics with the canonical responses (name or file; "
                                                          "lampqa:FILE: judged on its rubric aspects)."),
    qrels: str | None = typer.Option(None, "--qrels", "-q", help="Passage qrels: citation precision (name or file)."),
    levels: Path | None = typer.Option(
        None, "--levels", help="Levels per turn (reformulations JSONL or turn_id<TAB>level): a per-level breakdown."
    ),
    rel_threshold: int = typer.Option(1, "--rel-threshold", "-l", min=1, help="Lowest grade of a relevant passage."),
    judge: str | None = typer.Option(None, "--judge", help="LLM judge model (gpt-4o, ...); default: no judge."),
    nuggets: str | None = typer.Option(None, "--nuggets", help="Gold nuggets (ikat25-test, or a file): nugget recall "
                                                              "of every run, a leaderboard."),
    matcher: str = typer.Option(DEFAULT_MATCHER, "--matcher", help="Nugget matcher: " + ", ".join(MATCHERS.names())
                                + " (default: the one that agreed best with people among those needing no training)."),
    baseline: str | None = typer.Option(None, "--baseline", help="Run the others are tested against (paired, over "
                                                                 "the turns both scored)."),
    compare_matcher: str | None = typer.Option(None, "--compare-matcher",
                                               help="A second matcher: Kendall's τ between the two run orderings."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write every number (per turn too) as JSON here."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    llm: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
) -> None:
    """Evaluate responses: ROUGE-L, citation precision and an LLM judge, of one run or several side by side; with
    --nuggets, nugget recall of one or many runs (a leaderboard)."""
    from apcir.evaluation.nuggets.gold import load_response_records, run_name_and_path

    given, own = llm or {}, options or {}
    if out is not None:
        check_writable(out, "response metrics")
        refuse_inputs_as_outputs([out], [*(run_name_and_path(r)[1] for r in responses), topics, qrels, levels,
                                        nuggets, own.get("learned_model"), given.get("prices"), given.get("cache_dir")])
    if nuggets is not None:
        _nugget_leaderboard(responses, topics, nuggets, matcher, baseline, compare_matcher, levels, out, as_json,
                            given, own)
        return
    if own:
        flags = ", ".join(entry_flag(MATCHERS, key, value) for key, value in own.items())
        raise ApcirError(f"{flags}: nugget matcher option{'s' if len(own) > 1 else ''}, used only with --nuggets")
    judge_settings = settings(JudgeSettings, model=judge, **llm_values(given))
    runs = load_response_records(responses)
    turns, gold = datasets.topics(topics), datasets.qrels(qrels) if qrels else None
    by_level = datasets.levels(levels) if levels else None
    references, aspects = datasets.reference_responses(topics), datasets.given_aspects(topics)
    if baseline is not None and baseline not in runs:
        raise ApcirError(f"--baseline {baseline!r} is not one of the runs: {', '.join(runs)}")
    scored = {}
    for name, records in runs.items():
        scored[name] = evaluate_responses(
            records, turns, topics=topics, qrels=gold, qrels_name=qrels, rel_threshold=rel_threshold,
            levels=by_level, judge_model=judge_settings.model, judge_settings=judge_settings, references=references,
            aspects=aspects, run_name=name if len(runs) > 1 else None)
    if len(scored) == 1:
        _one_run(next(iter(scored.values())), out, as_json)
        return
    comparison = compare_response_runs(scored, baseline)
    if out is not None:
        write_text(out, comparison.model_dump_json(indent=1))
    if as_json:
        print_json(comparison.model_dump(mode="json"))
        _fail_if_unjudged(*scored.values())
        return
    console.print(runs_table(comparison, topics, qrels, rel_threshold))
    if comparison.tests:
        console.print(_response_tests_table(comparison))
    elif baseline is None:
        console.print("note: --baseline RUN tests every other run against RUN, turn by turn (paired)", highlight=False,
                      markup=False)
    shared = set.intersection(*(set(metrics.notes) for metrics in scored.values()))
    for line in dict.fromkeys(line for metrics in scored.values() for line in metrics.notes if line in shared):
        console.print(f"note: every run: {line}", highlight=False, markup=False)
    for name, metrics in scored.items():
        for line in metrics.notes:
            if line not in shared:
                console.print(f"note: {name}: {line}", highlight=False, markup=False)
        if metrics.judge is not None:
            console.print(f"{name}: {_judge_line(metrics.judge)}", highlight=False)
    if out is not None:
        console.print(f"every number, per run and per turn too: {out}", highlight=False)
    _fail_if_unjudged(*scored.values())


def _one_run(metrics: ResponseMetrics, out: Path | None, as_json: bool) -> None:
    if out is not None:
        write_text(out, metrics.model_dump_json(indent=1))
    if as_json:
        print_json(metrics.model_dump(mode="json"))
        _fail_if_unjudged(metrics)
        return
    console.print(response_table(metrics))
    for note in metrics.notes:
        console.print(f"note: {note}", highlight=False, markup=False)
    if metrics.judge is not None:
        console.print(_judge_line(metrics.judge), highlight=False)
    if out is not None:
        console.print(f"every number, per turn too: {out}", highlight=False)
    _fail_if_unjudged(metrics)


def _judge_line(j: JudgeInfo) -> str:
    return (f"judge {j.model}: {j.judged} turns judged, {len(j.unjudged)} unjudged, {j.requests} requests, "
            f"{j.cache_hits} from the cache")


def _nugget_leaderboard(responses: list[str], topics: str, nuggets: str, matcher: str, baseline: str | None,
                        compare_matcher: str | None, levels: Path | None, out: Path | None, as_json: bool,
                        given: dict[str, Any], own: dict[str, Any]) -> None:
    from apcir.evaluation.nuggets.gold import load_nuggets, load_response_runs
    from apcir.evaluation.nuggets.scores import score_runs
    from apcir.retrieval.settings import check_encoder

    for option, name in (("--matcher", matcher), ("--compare-matcher", compare_matcher)):
        checked(option, MATCHERS.validate, name)
    used = matcher_settings([matcher, *([compare_matcher] if compare_matcher else [])], own, given, tau_of=matcher)
    checked("--encoder", check_encoder, own.get("encoder"))
    topic_ids = {t.turn_id for t in datasets.topics(topics)}
    gold = load_nuggets(nuggets, topic_ids)
    runs = load_response_runs(responses)
    warn_outside_topics({run: list(texts) for run, texts in runs.items()}, topic_ids, topics)
    report = score_runs(gold, runs, matcher, used[matcher], baseline=baseline, compare_matcher=compare_matcher,
                        compare_settings=used.get(compare_matcher or ""),
                        levels=datasets.levels(levels) if levels else None)
    if out is not None:
        write_text(out, report.model_dump_json(indent=1))
    if as_json:
        print_json(report.model_dump(mode="json"))
        return
    info = report.matcher
    title = (f"nugget recall on {report.nuggets} ({sum(len(v) for v in gold.by_turn.values())} nuggets, "
             f"{len(gold.by_turn)} turns), matcher {info.name}"
             + (f" (τ = {info.tau:g})" if MATCHERS.get(info.name).thresholded else f" ({info.model})"))
    table = Table(title=title)
    for column in ("rank", "run", "recall x100", "weighted x100", "turns", "missing"):
        table.add_column(column, justify="left" if column == "run" else "right")
    tests = {t.system: t for t in report.tests}
    if baseline:
        table.add_column(f"vs {baseline}", justify="right")
    if report.compare_matcher is not None:
        table.add_column(f"recall x100, {report.compare_matcher.name}", justify="right")
    for rank, name in enumerate(report.ranking(), start=1):
        run = report.runs[name]
        cells = [str(rank), name, f"{100 * run.recall:.1f}", f"{100 * run.weighted_recall:.1f}", str(run.turns),
                 str(len(run.missing))]
        if baseline:
            test = tests.get(name)
            cells.append("baseline" if name == baseline else
                         f"p = {test.p_corrected:.3g}{' †' if test.significant else ''}" if test else "")
        if report.compare_matcher is not None:
            cells.append(f"{100 * report.compare_recall[name]:.1f}")
        table.add_row(*cells)
    console.print(table)
    if len(runs) == 1:
        only = next(iter(report.runs.values()))
        for level, values in only.per_level.items():
            console.print(f"level {level}: recall {100 * values['nugget recall']:.1f}, weighted "
                          f"{100 * values['weighted nugget recall']:.1f} ({int(values['turns'])} turns)",
                          highlight=False)
    if report.kendall_tau is not None and report.compare_matcher is not None:
        console.print(f"Kendall's τ between the run orderings of {info.name} and {report.compare_matcher.name}: "
                      f"{report.kendall_tau:.3f} (p = {report.kendall_p:.3g})", highlight=False)
    if info.requests or info.cache_hits:
        console.print(f"llm matcher: {info.requests} requests, {info.cache_hits} from the cache", highlight=False)
    for note in report.notes:
        console.print(f"note: {note}", highlight=False, markup=False)
    if any(str(r).endswith(".jsonl") for r in responses):
        console.print("note: apcir's responses cite the passages of the collection they were made over; over the "
                      "894-passage demo collection they are not comparable with runs over the full ClueWeb22",
                      highlight=False, markup=False)


def _fail_if_unjudged(*runs: ResponseMetrics) -> None:
    """Exit 1 when the judge left turns of a run unscored (as failed turns do); a re-run asks the judge again for
    them."""
    if any(metrics.judge is not None and metrics.judge.unjudged for metrics in runs):
        raise typer.Exit(1)


def response_table(metrics: ResponseMetrics) -> Table:
    """Response measures x100, overall and per level, each with the number of turns it is over."""
    table = Table(title=f"responses of {metrics.responder} on {metrics.topics}"
                        + (f" (citations vs {metrics.qrels}, grade >= {metrics.rel_threshold})" if metrics.qrels else ""))
    table.add_column("turns")
    measures = list(metrics.measures)
    for name in measures:
        table.add_column(name, justify="right")
    rows = [("all", metrics.measures, metrics.turns)] + [
        (f"level {level}", metrics.per_level[level], metrics.level_turns[level]) for level in metrics.per_level]
    for label, means, counts in rows:
        table.add_row(label, *(f"{100 * means[m]:.1f} (n={counts[m]})" if m in means else "-" for m in measures))
    return table


def runs_table(comparison: ResponseRuns, topics: str, qrels: str | None, rel_threshold: int) -> Table:
    """Several runs' response measures x100 in one table: a row per run (and per run and level), each cell with the
    number of turns its mean is over, and the marks of the paired tests against the baseline."""
    runs = comparison.runs
    measures = [m for m in MEASURES if any(m in metrics.measures for metrics in runs.values())]
    title = (f"responses of {len(runs)} runs on {topics}"
             + (f" (citations vs {qrels}, grade >= {rel_threshold})" if qrels else "") + " (x100)")
    if comparison.tests:
        title += (f"; † / ↓: significantly better / worse than {comparison.baseline} "
                  f"({comparison.significance.caption(len(runs) - 1)})")
    table = Table(title=escape(title))
    table.add_column("run")
    table.add_column("turns")
    for name in measures:
        table.add_column(name, justify="right")
    marks = {(t.system, t.measure): t.marker for t in comparison.tests}
    for run, metrics in runs.items():
        label = run + (" (baseline)" if run == comparison.baseline else "")
        rows = [("all", metrics.measures, metrics.turns)] + [
            (f"level {level}", metrics.per_level[level], metrics.level_turns[level]) for level in metrics.per_level]
        for scope, means, counts in rows:
            table.add_row(escape(label if scope == "all" else ""), scope, *(
                f"{100 * means[m]:.1f}{marks.get((run, m), '') if scope == 'all' else ''} (n={counts[m]})"
                if m in means else "-" for m in measures))
        table.add_section()
    return table


def _response_tests_table(comparison: ResponseRuns) -> Table:
    table = Table(title=f"each run against {comparison.baseline}, over the turns both scored: difference, p-values "
                        "and effect size")
    for column in ("run", "measure", "turns", "difference x100", "p", "p corrected", "Cohen's d", ""):
        table.add_column(column, justify="left" if column in ("run", "measure") else "right")
    for test in comparison.tests:
        table.add_row(escape(test.system), test.measure, str(test.n_turns),
                      f"{100 * (test.mean_system - test.mean_baseline):+.2f}", f"{test.p_value:.4g}",
                      f"{test.p_corrected:.4g}", f"{test.effect_size:+.2f}", test.marker)
    return table


def register(app: typer.Typer) -> None:
    app.command("evaluate")(evaluate_command)
    app.command("evaluate-responses")(evaluate_responses_command)
