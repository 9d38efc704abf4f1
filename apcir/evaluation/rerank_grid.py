"""The retriever x re-ranker grid of the APCIR paper's Fig. 5: one row per run directory (i.e. per retriever), one
column per re-ranker, APCIR's numbers; as a Markdown table and as grouped bars."""

from __future__ import annotations

from pathlib import Path

from apcir.evaluation.plots import write_figure
from apcir.evaluation.results import RunMetrics
from apcir.reranking.registry import RERANKERS
from apcir.retrieval.registry import BACKENDS


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
