"""The report's tables: their rows (x100 with significance marks, or raw for CSV), the one correction family
every table takes its marks from, and the formats a table is written in (Markdown, CSV, LaTeX booktabs)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from apcir.evaluation.responses import ResponseMetrics
from apcir.evaluation.results import RunMetrics
from apcir.io import write_text
from apcir.metrics.significance import Comparison, SignificanceSettings, compare_with

LEVEL_NAMES = {"a": "a (none)", "b": "b (bonus)", "c": "c (indispensable)"}


def qualified(runs: list[RunMetrics]) -> dict[str, tuple[RunMetrics, str]]:
    """System keys, prefixed with the run name when several runs are reported together."""
    keys: dict[str, tuple[RunMetrics, str]] = {}
    for run in runs:
        for system in run.systems:
            key = system if len(runs) == 1 else f"{run.name}/{system}"
            keys[key] = (run, system)
    return keys



def family_tests(runs: list[RunMetrics], baseline: str | None,
                 settings: SignificanceSettings) -> dict[tuple[str, str], Comparison]:
    """The report's one correction family: every system of a run against that run's ``baseline``, per measure.
    Every table of the report takes its marks from here, so a pair is marked the same wherever it appears."""
    markers: dict[tuple[str, str], Comparison] = {}
    if baseline is None:
        return markers
    for run in runs:
        if baseline not in run.systems:
            continue
        per_turn = {(k if len(runs) > 1 else s): run.systems[s].per_turn for k, (r, s) in qualified(runs).items()
                    if r is run}
        base_key = baseline if len(runs) == 1 else f"{run.name}/{baseline}"
        for tested in compare_with(per_turn, base_key, run.measures, settings):
            markers[(tested.system, tested.measure)] = tested
    return markers



def family_size(markers: dict[tuple[str, str], Comparison]) -> int:
    return len({system for system, _ in markers})



def metric_rows(runs: list[RunMetrics], group: str, baseline: str | None,
                markers: dict[tuple[str, str], Comparison], raw: bool = False) -> tuple[list[str], list[list[str]]]:
    """The header and rows of the systems in ``group``: x100 with marks, or (``raw``) the raw means with the
    marks in columns of their own (for CSV)."""
    measures = runs[0].measures
    keys = {k: v for k, v in qualified(runs).items() if group in v[0].systems[v[1]].groups}
    base_key = None
    for run in runs:
        if baseline is not None and baseline in run.systems:
            base_key = baseline if len(runs) == 1 else f"{run.name}/{baseline}"
    rows = []
    for key, (run, system) in keys.items():
        result = run.systems[system]
        label = result.label + (" (tuned on test)" if result.tuned_on_test else "")
        if len(runs) > 1:
            label = f"{run.name}: {label}"
        if key == base_key:
            label += " (baseline)"
        cells = []
        for measure in measures:
            comparison = markers.get((key, measure))
            mark = comparison.marker if comparison else ""
            cells.append(f"{result.means[measure]!r}|{mark}" if raw else f"{100 * result.means[measure]:.1f}{mark}")
        rows.append([label, *cells, str(len(result.per_turn))])
    if raw:  # raw means, and each measure's mark in a column of its own
        rows = [[row[0], *(c.split("|")[0] for c in row[1:-1]), row[-1], *(c.split("|")[1] for c in row[1:-1])]
                for row in rows]
        return ["system", *measures, "n", *(f"mark {m}" for m in measures)], rows
    return ["system", *measures, "n"], rows



def markdown(header: list[str], rows: list[list[str]]) -> str:
    if not rows:
        return "_no system in this group_\n"
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"



def csv_text(header: list[str], rows: list[list[str]]) -> str:
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()



def latex(header: list[str], rows: list[list[str]], caption: str) -> str:
    """A booktabs table; marks become LaTeX (``$^\\dagger$``, ``$\\downarrow$``)."""
    def cell(text: str) -> str:
        text = text.replace("\\", "\\textbackslash{}")
        for char in "&%$#_{}":
            text = text.replace(char, "\\" + char)
        return text.replace("†", "$^\\dagger$").replace("↓", "$^\\downarrow$").replace("x100", "$\\times$100")

    columns = "l" + "r" * (len(header) - 1)
    lines = ["\\begin{table}[t]", "\\centering", f"\\caption{{{cell(caption)}}}", f"\\begin{{tabular}}{{{columns}}}",
             "\\toprule", " & ".join(cell(h) for h in header) + " \\\\", "\\midrule"]
    lines += [" & ".join(cell(c) for c in row) + " \\\\" for row in rows]
    lines += ["\\bottomrule", "\\end{tabular}", "\\end{table}"]
    return "\n".join(lines) + "\n"



def significance_rows(markers: dict[tuple[str, str], Comparison]) -> tuple[list[str], list[list[str]]]:
    rows = [[key[0], key[1], f"{100 * (c.mean_system - c.mean_baseline):+.1f}", f"{c.p_value:.3g}",
             f"{c.p_corrected:.3g}", f"{c.effect_size:+.2f}", c.marker or "-", str(c.n_turns)]
            for key, c in markers.items()]
    return ["system", "measure", "difference x100", "p", "p corrected", "Cohen's d", "mark", "n"], rows



def significance_raw(markers: dict[tuple[str, str], Comparison]) -> tuple[list[str], list[list[str]]]:
    rows = [[key[0], key[1], repr(c.mean_system - c.mean_baseline), repr(c.p_value), repr(c.p_corrected),
             repr(c.effect_size), c.marker, str(c.n_turns)] for key, c in markers.items()]
    return ["system", "measure", "difference", "p", "p corrected", "cohens d", "mark", "n"], rows



def level_rows(runs: list[RunMetrics], measure: str = "nDCG@3",
               raw: bool = False) -> tuple[list[str], list[list[str]]]:
    """Table 6's header and rows: ``measure`` per LLM level for every system, x100 with each cell's n, or (``raw``)
    the raw means with the n in columns of their own (for CSV)."""
    rows = []
    for (run, system) in qualified(runs).values():
        result = run.systems[system]
        if measure not in run.measures:
            continue
        cells, raw_cells, counts = [], [], []
        for level in LEVEL_NAMES:
            values = [v[measure] for t, v in result.per_turn.items() if t in run.turns and run.turns[t].level == level]
            cells.append(f"{100 * sum(values) / len(values):.1f} (n={len(values)})" if values else "-")
            raw_cells.append(repr(sum(values) / len(values)) if values else "")
            counts.append(str(len(values)))
        label = result.label if len(runs) == 1 else f"{run.name}: {result.label}"
        n = len(result.per_turn)
        rows.append([label, *raw_cells, repr(result.means[measure]), *counts, str(n)] if raw else
                    [label, *cells, f"{100 * result.means[measure]:.1f} (n={n})"])
    if raw:
        return ["system", *LEVEL_NAMES, "all", *(f"n {level}" for level in LEVEL_NAMES), "n all"], rows
    return ["system", *LEVEL_NAMES.values(), "all"], rows



def agreement_rows(run: RunMetrics, raw: bool = False) -> tuple[list[str], list[list[str]]]:
    """Table 5's header and rows: levels of all topic turns against the annotators' PTKB provenance (personalised =
    some statement relevant); ``raw``: the agreement as a fraction (for CSV)."""
    counts = Counter((info.level, info.human_personalised) for info in run.turns.values() if info.level)
    rows = []
    for level, label in LEVEL_NAMES.items():
        yes, no = counts[(level, True)], counts[(level, False)]
        total = yes + no
        agree = (no if level == "a" else yes) / total if total else 0.0
        rows.append([label, str(total), str(yes), str(no), repr(agree) if raw else f"{100 * agree:.1f}%"])
    return ["LLM level", "turns", "annotators: personalised", "annotators: not", "agreement"], rows



def response_rows(metrics: ResponseMetrics, raw: bool = False) -> tuple[list[str], list[list[str]]]:
    """The responses' measures x100 with each cell's n, overall and per LLM level; ``raw``: fractions, the n in
    columns of their own (for CSV)."""
    measures = list(metrics.measures)
    rows = []
    for label, means, counts in [("all", metrics.measures, metrics.turns)] + [
            (LEVEL_NAMES.get(level, level), metrics.per_level[level], metrics.level_turns[level])
            for level in metrics.per_level]:
        if raw:
            rows.append([label, *(repr(means[m]) if m in means else "" for m in measures),
                         *(str(counts[m]) if m in counts else "" for m in measures)])
        else:
            rows.append([label, *(f"{100 * means[m]:.1f} (n={counts[m]})" if m in means else "-" for m in measures)])
    return (["turns", *measures, *(f"n {m}" for m in measures)] if raw else ["turns", *measures]), rows



def ptkb_rows(run: RunMetrics, raw: bool = False) -> tuple[list[str], list[list[str]]]:
    """The PTKB statement rankings: x100, or (``raw``) fractions."""
    assert run.ptkb is not None
    measures = run.ptkb.measures
    rows = [[r.label, *(repr(r.means[m]) if raw else f"{100 * r.means[m]:.1f}" for m in measures), str(len(r.per_turn))]
            for r in run.ptkb.systems.values()]
    return ["ranking", *measures, "n"], rows



def save_table(out: Path, name: str, header: list[str], rows: list[list[str]], caption: str,
                raw: tuple[list[str], list[list[str]]] | None = None) -> None:
    """``name.tex`` as shown (x100, marks), ``name.csv`` raw (0-1, marks and n in their own columns) when ``raw``
    is given, else as shown (a table without measures, such as the weights)."""
    if not rows:
        return
    write_text(out / "tables" / f"{name}.csv", csv_text(*(raw or (header, rows))))
    write_text(out / "tables" / f"{name}.tex", latex(header, rows, caption))



def per_run_name(name: str, run: RunMetrics, runs: list[RunMetrics]) -> str:
    """A table's file name: ``name``, or ``name-RUN`` when several runs are reported."""
    if len(runs) == 1:
        return name
    return f"{name}-{runs.index(run) + 1}-" + re.sub(r"[^A-Za-z0-9._-]+", "_", run.name).strip("_")
