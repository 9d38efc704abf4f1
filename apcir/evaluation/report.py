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

The tables' rows and formats are :mod:`apcir.evaluation.tables`, the grid :mod:`apcir.evaluation.rerank_grid`;
this module writes the report from them, with its plots and figures.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from apcir.evaluation.plots import write_figure
from apcir.evaluation.rerank_grid import grid_table, has_grid, plot_grid
from apcir.evaluation.results import GROUPS, RunMetrics
from apcir.evaluation.tables import (
    LEVEL_NAMES,
    agreement_rows,
    family_size,
    family_tests,
    level_rows,
    markdown,
    metric_rows,
    per_run_name,
    ptkb_rows,
    response_rows,
    save_table,
    significance_raw,
    significance_rows,
)
from apcir.evaluation.weights_report import WEIGHTS_HEADER, weights_section
from apcir.fusion.systems import EQUAL, SYSTEMS
from apcir.io import write_text
from apcir.metrics.significance import SignificanceSettings


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
                save_table(out, per_run_name("responses", run, runs), header, rows,
                            f"Responses of {metrics.responder} ({run.name}), x100", response_rows(metrics, raw=True))
        parts += [f"- {note}" for note in metrics.notes] + ([""] if metrics.notes else [])
    return parts


def ptkb_section(runs: list[RunMetrics], out: Path | None = None) -> list[str]:
    """The PTKB statement rankings against the PTKB qrels, x100 (saved under ``tables/`` with ``out``)."""
    parts: list[str] = []
    for run in runs:
        if run.ptkb is None:
            continue
        header, rows = ptkb_rows(run)
        parts += [f"**{run.name}** vs `{run.ptkb.qrels}`", "", markdown(header, rows)]
        if out is not None:
            save_table(out, per_run_name("ptkb", run, runs), header, rows,
                        f"PTKB statement ranking ({run.name}) vs {run.ptkb.qrels}, x100", ptkb_rows(run, raw=True))
    return parts


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
        save_table(out, f"table-{group}", header, rows, f"{title} ({caption})",
                    metric_rows(runs, group, baseline, markers, raw=True))
    if markers:
        header, rows = significance_rows(markers)
        parts += ["## Significance against the baseline", "",
                  f"Every test of the report: {settings.caption(family_size(markers))}; the p-values before and "
                  "after the correction, and the effect size (Cohen's d of the per-turn differences).", "",
                  markdown(header, rows)]
        save_table(out, "significance", header, rows, f"Significance against {baseline}: "
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
        save_table(out, per_run_name("table-levels", run, runs), header, rows, f"{title} ({run.name})",
                    agreement_rows(run, raw=True))
    title = numbered("Table 6: nDCG@3 per personalisation level")
    header, rows = level_rows(runs)
    parts += [f"## {title}", "", markdown(header, rows)]
    save_table(out, "table-per-level", header, rows, f"{title} (x100, n turns each)", level_rows(runs, raw=True))
    chosen = [(run, weights_section([run.name], [run_dir])) for run, run_dir in zip(runs, run_dirs)]
    if any(part for _, part in chosen):
        parts += ["## Fusion weights: how they were chosen, and the bootstrap evidence", ""]
        for run, section in chosen:
            for part in section:
                if isinstance(part, list):
                    parts.append(markdown(WEIGHTS_HEADER, part))
                    save_table(out, per_run_name("weights", run, runs), WEIGHTS_HEADER, part,
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
