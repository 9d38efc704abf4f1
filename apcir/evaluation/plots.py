"""The report's figures, fit for a paper: PNG (200 dpi) and PDF each, axes on the tables' x100 scale with their
labels, one distinct colour per system from a colour-blind-safe palette (Okabe and Ito's), legends outside
the bars, and n and 95% confidence intervals where a mean is shown.

* :func:`turn_differences`: APCIR minus a baseline on every judged turn, sorted (where the gain comes from);
* :func:`levels_with_ci`: a measure per personalisation level with n and 95% t intervals (level a with a few
  turns no longer looks as solid as level b with many);
* :func:`weight_landscape`: for each level, the tuning objective over the whole simplex as a ternary heat map,
  with the chosen, equal and paper's weights marked: a peak or a plateau;
* :func:`tuned_vs_equal`: each turn's value under the tuned weights against equal weights.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from apcir.evaluation.results import RunMetrics
from apcir.io import atomic_write
from apcir.settings import source_date_epoch

# Okabe & Ito (2008), then Paul Tol's muted scheme: 16 colours, all distinguishable with colour-blindness.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000",
           "#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#CC6677", "#882255"]
PAPER_WEIGHTS = {"a": (0.36, 0.17, 0.47), "b": (0.35, 0.20, 0.45), "c": (0.25, 0.20, 0.55)}  # iKAT-23, Table 3
LEVELS = ("a", "b", "c")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_figure(fig: Any, path: Path, **options: Any) -> Path:
    """``fig`` saved to ``path`` in the format its suffix names, the same bytes for the same figure: no creation
    date in a PDF (or ``SOURCE_DATE_EPOCH``'s, when it is set), a fixed salt for an SVG's ids; a PNG carries no
    date anyway. Every figure apcir writes goes through here."""
    plt = _pyplot()
    fmt = path.suffix[1:].lower()
    undated = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}.get(fmt)
    if source_date_epoch() is not None:  # checked here: matplotlib itself fails on a malformed value
        undated = None  # matplotlib dates the file SOURCE_DATE_EPOCH
    with plt.rc_context({"svg.hashsalt": "apcir"}), atomic_write(path, "wb") as handle:
        fig.savefig(handle, format=fmt, metadata=undated, **options)
    return path


def save(fig: Any, out: Path, stem: str) -> list[Path]:
    """``stem.png`` and ``stem.pdf`` in ``out``."""
    plt = _pyplot()
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("_")
    paths = [write_figure(fig, out / f"{stem}.png", dpi=200, bbox_inches="tight"),
             write_figure(fig, out / f"{stem}.pdf", bbox_inches="tight")]
    plt.close(fig)
    return paths


def colour(n: int) -> str:
    return PALETTE[n % len(PALETTE)]


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t interval (0 for fewer than 2 values)."""
    from scipy import stats

    if not values:
        return 0.0, 0.0
    mean = float(np.mean(values))
    if len(values) < 2:
        return mean, 0.0
    half = float(stats.t.ppf(0.975, len(values) - 1) * np.std(values, ddof=1) / math.sqrt(len(values)))
    return mean, half


def turn_differences(run: RunMetrics, out: Path, system: str, baseline: str, measure: str) -> list[Path]:
    plt = _pyplot()
    a, b = run.systems[system].per_turn, run.systems[baseline].per_turn
    diffs = sorted(100 * (a[t][measure] - b[t][measure]) for t in set(a) & set(b))
    fig, axis = plt.subplots(figsize=(7, 3.2))
    axis.bar(range(len(diffs)), diffs, color=[PALETTE[0] if d >= 0 else PALETTE[5] for d in diffs], width=1.0)
    axis.axhline(0, color="black", linewidth=0.6)
    wins, losses = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    axis.set_xlabel(f"judged turns, sorted (n = {len(diffs)}: {wins} better, {losses} worse, "
                    f"{len(diffs) - wins - losses} tied)")
    axis.set_ylabel(f"{measure} difference (x100)")
    axis.set_title(f"{run.systems[system].label} minus {run.systems[baseline].label}, per turn")
    return save(fig, out, f"{run.name}-turn-differences")


def levels_with_ci(run: RunMetrics, out: Path, systems: Sequence[str], measure: str) -> list[Path]:
    plt = _pyplot()
    fig, axis = plt.subplots(figsize=(7, 3.6))
    width = 0.8 / max(len(systems), 1)
    counts = {}
    for n, system in enumerate(systems):
        per_turn = run.systems[system].per_turn
        means, halves = [], []
        for level in LEVELS:
            values = [100 * v[measure] for t, v in per_turn.items() if t in run.turns and run.turns[t].level == level]
            counts[level] = len(values)
            mean, half = mean_ci(values)
            means.append(mean)
            halves.append(half)
        axis.bar([i + n * width for i in range(3)], means, width=width, yerr=halves, capsize=2,
                 label=run.systems[system].label, color=colour(n))
    axis.set_xticks([i + 0.4 - width / 2 for i in range(3)], [f"level {lv}\n(n = {counts.get(lv, 0)})"
                                                               for lv in LEVELS])
    axis.set_ylabel(f"{measure} (x100), mean and 95% CI")
    axis.set_xlabel("personalisation level of the turn (judged turns)")
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return save(fig, out, f"{run.name}-levels-ci")


def tuned_vs_equal(run: RunMetrics, out: Path, measure: str, tuned: str = "apcir", equal: str = "equal") -> list[Path]:
    plt = _pyplot()
    a, b = run.systems[tuned].per_turn, run.systems[equal].per_turn
    turns = sorted(set(a) & set(b))
    fig, axis = plt.subplots(figsize=(4.2, 4.2))
    for n, level in enumerate(LEVELS):
        chosen = [t for t in turns if t in run.turns and run.turns[t].level == level]
        axis.scatter([100 * b[t][measure] for t in chosen], [100 * a[t][measure] for t in chosen], s=14,
                     color=colour(n), label=f"level {level} (n = {len(chosen)})", alpha=0.8)
    axis.plot([0, 100], [0, 100], color="grey", linewidth=0.6)
    axis.set_xlabel(f"{measure} with equal weights (x100)")
    axis.set_ylabel(f"{measure} with tuned weights (x100)")
    axis.set_title(f"{run.systems[tuned].label} vs {run.systems[equal].label}", fontsize=9)
    axis.legend(fontsize=7, frameon=False)
    return save(fig, out, f"{run.name}-tuned-vs-equal")


def _xy(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Barycentric (w1, w2, w3) to the plane: w1 at the bottom left, w2 at the bottom right, w3 at the top."""
    return weights[:, 1] + weights[:, 2] / 2, weights[:, 2] * math.sqrt(3) / 2


def weight_landscape(run: RunMetrics, run_dir: Path, out: Path, step: str = "0.02",
                     read_run: Callable[[Path], Any] | None = None) -> list[Path]:
    """The tuning objective per level over the simplex (every judged turn of the level: a tuned-on-test view of
    the surface), with the weights of ``weights.json``, equal weights and the paper's marked, and the weights
    chosen in the bootstrap resamples of ``weights.json``'s evidence (dot size: how often). ``read_run`` reads
    the three lists (default: from their files; an experiment's stage passes the runs it holds)."""
    from apcir import datasets
    from apcir.contract.fusion import load_fusion_record
    from apcir.contract.layout import RunLayout
    from apcir.contract.levels import load_levels
    from apcir.contract.runs import load_run
    from apcir.contract.weights import load_weights
    from apcir.fusion.grid import GridSearch

    layout = RunLayout(run_dir)
    lists = list(layout.lists().values())
    if not all(p.exists() for p in lists) or not (run_dir / "weights.json").exists():
        return []
    weights = load_weights(run_dir / "weights.json")
    # the levels the fusion used: levels.tsv (a failed reformulation's fallback level included), or the
    # annotators' under [fusion] levels = "annotators"
    oracle = layout.fusion_record.exists() and load_fusion_record(layout.fusion_record).levels == "annotators"
    levels_file = layout.annotator_levels if oracle else layout.levels
    if not levels_file.exists():
        return []
    levels = load_levels(levels_file)
    qrels = datasets.qrels(run.qrels)
    runs = [(read_run or load_run)(p) for p in lists]
    turns = sorted(t for t in set().union(*runs) if t in qrels)
    search = GridSearch(runs, qrels, turns, ",".join(weights.objective), step=step, norm=weights.norm,
                        depth=weights.depth, rel_threshold=weights.rel_threshold)
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.9))
    x, y = _xy(search.weights)
    for axis, level in zip(axes, LEVELS):
        chosen = [t for t in turns if levels.get(t) == level]
        axis.set_aspect("equal")
        axis.axis("off")
        if not chosen:
            axis.set_title(f"level {level}: no judged turn")
            continue
        surface = 100 * search.means(chosen).sum(axis=1) / len(search.measures)
        shading = axis.tricontourf(x, y, surface, levels=20, cmap="viridis")
        fig.colorbar(shading, ax=axis, shrink=0.7).set_label("objective: mean of the measures (x100)", fontsize=7)
        marks: list[tuple[str, tuple[float, ...], str, str]] = [
            ("equal", (1 / 3, 1 / 3, 1 / 3), "o", "white"), ("paper", PAPER_WEIGHTS[level], "s", "#E69F00")]
        if level in weights.levels:
            marks.insert(0, ("chosen", tuple(weights.levels[level].weights), "*", "#D55E00"))
        evidence = weights.evidence.levels.get(level) if weights.evidence is not None else None
        if evidence is not None and evidence.points:
            cloud = np.array(evidence.points)
            bx, by = _xy(cloud[:, :3])
            axis.scatter(bx, by, s=4 + 60 * cloud[:, 3] / cloud[:, 3].max(), color="white", alpha=0.55,
                         edgecolor="none", label=f"bootstrap choices ({evidence.resamples})", zorder=2)
        for label, point, marker, face in marks:
            px, py = _xy(np.array([point]))
            axis.scatter(px, py, marker=marker, s=90, color=face, edgecolor="black", label=label, zorder=3)
        axis.text(0, -0.06, "q'", ha="center", va="top", fontsize=8)
        axis.text(1, -0.06, "q'+r'", ha="center", va="top", fontsize=8)
        axis.text(0.5, math.sqrt(3) / 2 + 0.03, "third", ha="center", va="bottom", fontsize=8)
        axis.set_title(f"level {level} (n = {len(chosen)} judged turns)", fontsize=9, pad=18)
    handles, labels = next((a.get_legend_handles_labels() for a in axes if a.get_legend_handles_labels()[0]), ([], []))
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(f"{run.name}: the tuning objective over the weight simplex ({', '.join(weights.objective)})",
                 fontsize=10)
    return save(fig, out, f"{run.name}-weight-landscape")
