"""Markdown and PNG reports in the layout of the APCIR paper's tables.

The paper's Table 1 (overall), Table 2 (weight identification), Table 4 (fusion
strategies), Table 5 (LLM levels against the annotators' PTKB provenance) and
Table 6 (nDCG@3 per level), numbered in the report as they come (Table 1 to 5,
each saying which of the paper's it is), with significance tests against a named baseline
(the paper's paired t-test with Bonferroni by default; randomisation and bootstrap
tests, Holm's correction, any alpha): ``†`` marks a significant improvement, ``↓``
a significant loss. One correction family serves the whole report (every system
of a run against the baseline, per measure), so a pair is marked the same in
every table. Every table is also written under ``tables/`` as CSV (raw 0-1 values, marks and n in columns of their
own) and LaTeX (booktabs, as shown: x100 with marks). Every passage-measure table says over how many judged turns
(n) each mean is.
With re-ranked systems, Table 1's "+Reranking" rows (each system before and
after re-ranking) and the retriever x re-ranker grid of the paper's Fig. 5 (one
row per run directory, i.e. per retriever; one column per re-ranker; APCIR's
numbers), as tables and a plot.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from apcir.evaluation.plots import write_figure
from apcir.evaluation.responses import ResponseMetrics
from apcir.evaluation.results import GROUPS, RunMetrics
from apcir.evaluation.weights_report import WEIGHTS_HEADER, weights_section
from apcir.fusion.systems import EQUAL, SYSTEMS
from apcir.io import write_text
from apcir.metrics.significance import Comparison, SignificanceSettings, compare_with
from apcir.reranking.registry import RERANKERS
from apcir.retrieval.registry import BACKENDS

LEVEL_NAMES = {"a": "a (none)", "b": "b (bonus)", "c": "c (indispensable)"}


def _qualified(runs: list[RunMetrics]) -> dict[str, tuple[RunMetrics, str]]:
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
        per_turn = {(k if len(runs) > 1 else s): run.systems[s].per_turn for k, (r, s) in _qualified(runs).items()
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
    keys = {k: v for k, v in _qualified(runs).items() if group in v[0].systems[v[1]].groups}
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
    for (run, system) in _qualified(runs).values():
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


def plot_levels(runs: list[RunMetrics], out: Path, measure: str = "nDCG@3") -> list[Path]:
    """PNG plots: level distribution and ``measure`` per level; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for run in runs:
        fig, (left, right) = plt.subplots(1, 2, figsize=(14, 4.5), gridspec_kw={"width_ratios": [1, 2]})
        levels = list(LEVEL_NAMES)
        personalised = [sum(1 for i in run.turns.values() if i.level == lv and i.human_personalised) for lv in levels]
        neutral = [sum(1 for i in run.turns.values() if i.level == lv and not i.human_personalised) for lv in levels]
        left.bar(levels, personalised, label="annotators: personalised")
        left.bar(levels, neutral, bottom=personalised, label="annotators: not")
        left.set_title("Turns per level (all topic turns)")
        left.legend()
        systems = [s for s in run.systems if measure in run.systems[s].means]
        width = 0.8 / max(len(systems), 1)
        colours = plt.get_cmap("tab20")
        for n, system in enumerate(systems):
            per_turn = run.systems[system].per_turn
            values = []
            for level in levels:
                vals = [v[measure] for t, v in per_turn.items() if t in run.turns and run.turns[t].level == level]
                values.append(sum(vals) / len(vals) if vals else 0.0)
            right.bar([i + n * width for i in range(3)], values, width=width, label=run.systems[system].label,
                      color=colours(n % 20))
        right.set_xticks([i + 0.4 - width / 2 for i in range(3)], levels)
        right.set_title(f"{measure} per level (judged turns)")
        right.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        fig.suptitle(run.name)
        fig.tight_layout()
        path = write_figure(fig, out / (re.sub(r"[^A-Za-z0-9._-]+", "_", run.name).strip("_") + "-levels.png"),
                            dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def retriever_label(run: RunMetrics) -> str:
    """The grid's row name: the kind of retriever and its model (``SPLADE (splade-tiny)``, ``BM25``, ``dense (...)``)."""
    if run.backend is None:
        return run.name
    kind = BACKENDS.get(run.backend).encoder if run.backend in BACKENDS else None
    name = {"splade": "SPLADE", "dense": "dense", None: "BM25" if "bm25" in run.backend else run.backend}[kind]
    return f"{name} ({Path(run.encoder).name if run.encoder else ''})".replace(" ()", "")


def grid_columns(runs: list[RunMetrics]) -> list[tuple[str, str]]:
    """(re-ranker key, column title) over every run: registered re-rankers first, in the registry's order."""
    found: dict[str, str] = {}
    for run in runs:
        for key, info in run.rerankers.items():
            found.setdefault(key, info.label)
    order = [r.name for r in RERANKERS]
    keys = sorted(found, key=lambda k: (order.index(k) if k in order else len(order), k))
    return [(k, found[k]) for k in keys]


def has_grid(runs: list[RunMetrics], system: str = "apcir") -> bool:
    """A grid is worth showing when some run has a re-ranked ``system`` or the runs use several retrievers."""
    reranked = any(s.base == system for run in runs for s in run.systems.values())
    retrievers = {retriever_label(r) for r in runs if r.backend}
    return reranked or len(retrievers) > 1


def _grid_rows(runs: list[RunMetrics]) -> list[tuple[str, RunMetrics]]:
    labels = [retriever_label(r) for r in runs]
    return [(label if labels.count(label) == 1 else f"{label} [{run.name}]", run) for label, run in zip(labels, runs)]


def grid_value(run: RunMetrics, key: str | None, measure: str, system: str = "apcir") -> float | None:
    name = system if key is None else next((s for s, r in run.systems.items() if r.base == system
                                             and r.reranker == key), None)
    if name is None or name not in run.systems or measure not in run.systems[name].means:
        return None
    return run.systems[name].means[measure]


def grid_table(runs: list[RunMetrics], measure: str, system: str = "apcir") -> str:
    """Fig. 5 as a table: rows are retrievers (runs), columns no re-ranker and each re-ranker."""
    columns = grid_columns(runs)
    lines = ["| retriever | no re-ranker | " + " | ".join(f"+{title}" for _, title in columns) + " | n |",
             "|---" * (len(columns) + 3) + "|"]
    for label, run in _grid_rows(runs):
        cells = []
        for key in [None, *(k for k, _ in columns)]:
            value = grid_value(run, key, measure, system)
            cells.append("-" if value is None else f"{100 * value:.1f}")
        n = len(run.systems[system].per_turn) if system in run.systems else 0
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {n} |")
    return "\n".join(lines) + "\n"


def plot_grid(runs: list[RunMetrics], out: Path, system: str = "apcir") -> Path:
    """Fig. 5 as grouped bars: one panel per measure, one group per retriever, one bar per re-ranker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measures = runs[0].measures
    columns = [(None, "no re-ranker"), *((k, f"+{t}") for k, t in grid_columns(runs))]
    rows = _grid_rows(runs)
    fig, axes = plt.subplots(1, len(measures), figsize=(4.2 * len(measures), 4), squeeze=False)
    width = 0.8 / len(columns)
    for axis, measure in zip(axes[0], measures):
        for n, (key, title) in enumerate(columns):
            values = [grid_value(run, key, measure, system) for _, run in rows]
            axis.bar([i + n * width for i in range(len(rows))], [100 * (v or 0.0) for v in values], width=width,
                     label=title)
        axis.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))], [label for label, _ in rows], fontsize=7,
                        rotation=15)
        axis.set_title(measure)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("retriever x re-ranker (APCIR)")
    fig.tight_layout()
    path = write_figure(fig, out / "retriever-x-reranker.png", dpi=110)
    plt.close(fig)
    return path


def figures(runs: list[RunMetrics], out: Path, baseline: str, run_dirs: Sequence[Path],
            read_run: Callable[[Path], Any] | None = None) -> list[str]:
    """The paper-ready figures (PNG and PDF) of each run, as Markdown lines (``read_run``: how the weight
    landscape reads the lists; default from their files)."""
    from apcir.evaluation import plots

    parts = ["## Figures (PNG and PDF)", ""]
    measure = "nDCG@3"
    for n, run in enumerate(runs):
        if measure not in run.measures:
            continue
        drawn: list[Path] = []
        primary = run.primary
        if primary in run.systems and baseline in run.systems:
            drawn += plots.turn_differences(run, out, primary, baseline, measure)
        drawn_systems = [primary, baseline, *(s.name for s in SYSTEMS if s.in_figures)]
        drawn += plots.levels_with_ci(run, out, [s for s in dict.fromkeys(drawn_systems) if s in run.systems],
                                      measure)
        if primary in run.systems and EQUAL in run.systems:
            drawn += plots.tuned_vs_equal(run, out, measure)
        if n < len(run_dirs):
            drawn += plots.weight_landscape(run, run_dirs[n], out, read_run=read_run)
        parts += [f"![{p.stem}]({p.name})" for p in drawn if p.suffix == ".png"] + [""]
    return parts


def _save_table(out: Path, name: str, header: list[str], rows: list[list[str]], caption: str,
                raw: tuple[list[str], list[list[str]]] | None = None) -> None:
    """``name.tex`` as shown (x100, marks), ``name.csv`` raw (0-1, marks and n in their own columns) when ``raw``
    is given, else as shown (a table without measures, such as the weights)."""
    if not rows:
        return
    write_text(out / "tables" / f"{name}.csv", csv_text(*(raw or (header, rows))))
    write_text(out / "tables" / f"{name}.tex", latex(header, rows, caption))


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


def response_section(runs: list[RunMetrics], out: Path | None = None) -> list[str]:
    """The responses' measures x100, overall and per LLM level (as Table 6 does for retrieval); with ``out``, each
    run's table is also saved under ``tables/``."""
    parts: list[str] = []
    for run in runs:
        metrics = run.responses
        if metrics is None:
            continue
        measures = list(metrics.measures)
        parts += [f"**{run.name}**: responses of `{metrics.responder}`"
                  + (f"; citations against `{metrics.qrels}` (grade >= {metrics.rel_threshold})" if metrics.qrels
                     else "")
                  + (f"; judge `{metrics.judge.model}`" if metrics.judge else ""), ""]
        if not measures:
            parts += ["_no response could be scored_", ""]
        else:
            header, rows = response_rows(metrics)
            parts += [markdown(header, rows)]
            if out is not None:
                _save_table(out, _per_run("responses", run, runs), header, rows,
                            f"Responses of {metrics.responder} ({run.name}), x100", response_rows(metrics, raw=True))
        parts += [f"- {note}" for note in metrics.notes] + ([""] if metrics.notes else [])
    return parts


def ptkb_rows(run: RunMetrics, raw: bool = False) -> tuple[list[str], list[list[str]]]:
    """The PTKB statement rankings: x100, or (``raw``) fractions."""
    assert run.ptkb is not None
    measures = run.ptkb.measures
    rows = [[r.label, *(repr(r.means[m]) if raw else f"{100 * r.means[m]:.1f}" for m in measures), str(len(r.per_turn))]
            for r in run.ptkb.systems.values()]
    return ["ranking", *measures, "n"], rows


def ptkb_section(runs: list[RunMetrics], out: Path | None = None) -> list[str]:
    """The PTKB statement rankings against the PTKB qrels, x100 (saved under ``tables/`` with ``out``)."""
    parts: list[str] = []
    for run in runs:
        if run.ptkb is None:
            continue
        header, rows = ptkb_rows(run)
        parts += [f"**{run.name}** vs `{run.ptkb.qrels}`", "", markdown(header, rows)]
        if out is not None:
            _save_table(out, _per_run("ptkb", run, runs), header, rows,
                        f"PTKB statement ranking ({run.name}) vs {run.ptkb.qrels}, x100", ptkb_rows(run, raw=True))
    return parts


def _per_run(name: str, run: RunMetrics, runs: list[RunMetrics]) -> str:
    """A table's file name: ``name``, or ``name-RUN`` when several runs are reported."""
    if len(runs) == 1:
        return name
    return f"{name}-{runs.index(run) + 1}-" + re.sub(r"[^A-Za-z0-9._-]+", "_", run.name).strip("_")


def systems_legend(runs: list[RunMetrics]) -> list[str]:
    """What each system's label stands for (``third alone``, ``DEPS``, ...), from the systems registry."""
    seen: dict[str, str] = {}
    for run in runs:
        for result in run.systems.values():
            if result.description and result.label not in seen:
                seen[result.label] = result.description
    return [f"- **{label}**: {description}" for label, description in seen.items()]


class _Numbering:
    """The report's tables numbered as they come: ``Table 4: fusion strategies`` (the paper's number) becomes
    ``Table 3: fusion strategies (the paper's Table 4)`` when it is the third numbered table."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, title: str) -> str:
        match = re.match(r"Table (\d+): (.*)", title)
        if match is None:
            return title
        self.count += 1
        paper = int(match[1])
        return f"Table {self.count}: {match[2]}" + (f" (the paper's Table {paper})" if paper != self.count else "")


def write_report(runs: list[RunMetrics], out: Path, baseline: str | None = None,
                 significance: SignificanceSettings | None = None, run_dirs: Sequence[Path] = (),
                 read_run: Callable[[Path], Any] | None = None) -> Path:
    """Write ``report.md`` (its tables also as CSV and LaTeX under ``tables/``, and plots) into ``out``; returns
    the Markdown file. ``significance``: the test, correction and alpha (default: the first run's config's);
    ``read_run``: how run files are read (default from disk; an experiment's stage passes the runs it holds)."""
    out.mkdir(parents=True, exist_ok=True)
    baseline = baseline or runs[0].baseline
    settings = significance or runs[0].significance
    markers = family_tests(runs, baseline, settings)
    caption = (f"x100; †/↓: significantly better/worse than {baseline} ({settings.caption(family_size(markers))}; "
               "one correction family for the whole report)")
    numbered = _Numbering()
    parts = ["# apcir report", ""]
    for run in runs:
        parts.append(
            f"- **{run.name}**: topics `{run.topics}`, qrels `{run.qrels}`, weights: {run.protocol}; "
            f"binary relevance at grade >= {run.rel_threshold}; "
            + ("judged turns missing from a run count as 0." if run.complete else "mean over evaluated turns.")
        )
    parts += [
        "",
        f"Numbers are trec_eval's x100. `†`/`↓`: significantly better/worse than `{baseline}` "
        f"({settings.caption(family_size(markers))}); the correction family is every system of a run against "
        "it, per measure, the same in every table. `n`: the judged turns a mean is over. Tables are numbered as "
        "they come, each naming the paper's table it follows. Each table is also in `tables/` as LaTeX "
        "(booktabs, x100 as shown) and CSV (the raw 0-1 values, each mark and n in a column of its own).",
        "",
    ]
    legend = systems_legend(runs)
    if legend:
        parts += ["**Systems.**", "", *legend, ""]
    for group, title in GROUPS.items():
        if group == "rerank" and not any(s.reranker for run in runs for s in run.systems.values()):
            continue
        header, rows = metric_rows(runs, group, baseline, markers)
        title = numbered(title)
        parts += [f"## {title}", "", markdown(header, rows)]
        _save_table(out, f"table-{group}", header, rows, f"{title} ({caption})",
                    metric_rows(runs, group, baseline, markers, raw=True))
    if markers:
        header, rows = significance_rows(markers)
        parts += ["## Significance against the baseline", "",
                  f"Every test of the report: {settings.caption(family_size(markers))}; the p-values before and "
                  "after the correction, and the effect size (Cohen's d of the per-turn differences).", "",
                  markdown(header, rows)]
        _save_table(out, "significance", header, rows, f"Significance against {baseline}: "
                    f"{settings.caption(family_size(markers))}", significance_raw(markers))
    if has_grid(runs):
        parts += ["## Retriever x re-ranker (Fig. 5)", "",
                  "APCIR's numbers for each retriever (one run directory each) without and with each re-ranker "
                  "(x100; `-`: not run).", ""]
        for measure in runs[0].measures:
            parts += [f"**{measure}**", "", grid_table(runs, measure)]
        plot = plot_grid(runs, out)
        parts += [f"![{plot.stem}]({plot.name})", ""]
    title = numbered("Table 5: LLM levels against the annotators' PTKB provenance")
    parts += [f"## {title}", ""]
    for run in runs:
        header, rows = agreement_rows(run)
        parts += [f"**{run.name}**", "", markdown(header, rows)]
        _save_table(out, _per_run("table-levels", run, runs), header, rows, f"{title} ({run.name})",
                    agreement_rows(run, raw=True))
    title = numbered("Table 6: nDCG@3 per personalisation level")
    header, rows = level_rows(runs)
    parts += [f"## {title}", "", markdown(header, rows)]
    _save_table(out, "table-per-level", header, rows, f"{title} (x100, n turns each)", level_rows(runs, raw=True))
    chosen = [(run, weights_section([run.name], [run_dir])) for run, run_dir in zip(runs, run_dirs)]
    if any(part for _, part in chosen):
        parts += ["## Fusion weights: how they were chosen, and the bootstrap evidence", ""]
        for run, section in chosen:
            for part in section:
                if isinstance(part, list):
                    parts.append(markdown(WEIGHTS_HEADER, part))
                    _save_table(out, _per_run("weights", run, runs), WEIGHTS_HEADER, part,
                                f"Fusion weights ({run.name})")
                else:
                    parts.append(part)
    if any(run.responses is not None for run in runs):
        parts += ["## Responses: ROUGE-L, citations and judge per personalisation level", "",
                  "x100; ROUGE-L (F, stemmed) against the canonical responses; citation precision: share of cited "
                  "passages judged relevant; relevant citation: share of judged turns citing a relevant passage.", "",
                  *response_section(runs, out)]
    if any(run.ptkb is not None for run in runs):
        parts += ["## PTKB statement ranking", "", *ptkb_section(runs, out)]
    for path in plot_levels(runs, out):
        parts += [f"![{path.stem}]({path.name})", ""]
    parts += figures(runs, out, baseline, run_dirs, read_run)
    report = out / "report.md"
    write_text(report, "\n".join(parts))
    return report
