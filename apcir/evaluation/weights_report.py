"""The report's section on the fusion weights: how each tuned system chose them (λ, the select rule, ε) and
the bootstrap evidence per level (the 95% interval of each weight, and how often a level's own weights beat
the pooled ones on held-out turns). It reads ``weights.json`` and ``systems/<name>.weights.json``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from apcir.contract.layout import RunLayout
from apcir.contract.weights import WeightsFile, load_weights
from apcir.fusion.systems import PRIMARY, SYSTEMS


def tuned_weights(run_dir: Path) -> dict[str, WeightsFile]:
    """APCIR's weights and every other tuned system's kept in a run directory, by system name."""
    layout = RunLayout(run_dir)
    found = {PRIMARY: layout.weights} if layout.weights.exists() else {}
    for name in SYSTEMS.names():
        path = layout.system_weights(name)
        if name != PRIMARY and path.exists():
            found[name] = path
    return {name: load_weights(path) for name, path in found.items()}


def _label(name: str) -> str:
    return SYSTEMS.get(name).label if name in SYSTEMS else name


def weights_rows(weights: dict[str, WeightsFile]) -> list[list[str]]:
    """One row per (system, level): weights, how they were chosen, and the evidence."""
    rows = []
    for name, file in weights.items():
        chosen = file.selection
        rule = f"λ = {chosen.shrinkage:g}" + (" (inner CV)" if chosen.grid else "") + f", {chosen.select}"
        for level, lw in file.levels.items():
            evidence = file.evidence.levels.get(level) if file.evidence is not None else None
            intervals = (" ".join(f"[{low:.2f}, {high:.2f}]" for low, high in evidence.intervals)
                         if evidence is not None and evidence.intervals else "-")
            beats = (f"{100 * evidence.beats_pooled:.0f}% (ties {100 * (evidence.ties_pooled or 0):.0f}%)"
                     if evidence is not None and evidence.beats_pooled is not None else "-")
            epsilon = f"{lw.plateau.epsilon:.3f} ({lw.plateau.points} points)" if lw.plateau is not None else "-"
            weights_text = "(" + ", ".join(f"{w:.2f}" for w in lw.weights) + ")" + (" fallback" if lw.fallback else "")
            rows.append([_label(name), level, str(lw.n_turns), weights_text, rule, epsilon, intervals, beats])
    return rows


WEIGHTS_HEADER = ["system", "level", "turns", "weights (w1, w2, w3)", "chosen by", "plateau ε",
                  "95% bootstrap interval per weight", "beats pooled (held-out)"]


def weights_section(run_names: Sequence[str], run_dirs: Sequence[Path]) -> list[str | list[list[str]]]:
    """The section's paragraphs, each run's rows (a table under :data:`WEIGHTS_HEADER`) after its paragraph;
    empty when no run directory keeps weights."""
    parts: list[str | list[list[str]]] = []
    for name, run_dir in zip(run_names, run_dirs):
        weights = tuned_weights(run_dir)
        if not weights:
            continue
        resamples = next((w.evidence.resamples for w in weights.values() if w.evidence is not None), 0)
        parts += [f"**{name}**: the weights each tuned system would submit (tuned on every judged turn); "
                  f"{resamples} bootstrap resamples of the tuning turns, λ and ε held at their chosen values. "
                  "`beats pooled`: share of resamples in which the level's own weights score higher than the "
                  "pooled (no-levels) weights on the resample's held-out turns of that level.", "",
                  weights_rows(weights)]
    return parts
