"""Personalisation-aware linear fusion of N ranked lists (the paper uses three).

For a turn with candidate passages ``p`` (the union of the lists) and
normalised scores ``s_l(p)`` (0 when list ``l`` lacks ``p``), the fused score is
``w1*s1 + w2*s2 + w3*s3``, computed left to right in float64 exactly the same
way here and in the grid search (:mod:`apcir.fusion.grid`), so a tuned point
reproduces its tuning score when applied.

The fused ranking is cut at ``depth`` in apcir's one ranking order, which is
trec_eval's (:mod:`apcir.contract.runs`); passages below the cut are dropped,
so the run a user writes is the run that was evaluated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from apcir.console import shown
from apcir.contract.records import Run
from apcir.contract.runs import trec_order
from apcir.contract.weights import WeightsFile
from apcir.errors import ApcirError
from apcir.fusion.normalise import check_norm, normalise_array

WeightVector = Sequence[float]


@dataclass(frozen=True)
class RunAlignment:
    """Which turns the runs share and which run lacks which turn."""

    turns: list[str]
    missing: dict[str, list[int]] = field(
        default_factory=dict
    )  # turn -> indices of runs without it

    def describe(self, names: Sequence[str] | None = None, *, strict: bool = False) -> str:
        """One line naming the turns that some runs lack, and how they are handled."""
        if not self.missing:
            return ""
        label = (lambda i: names[i]) if names else (lambda i: f"run {i + 1}")
        parts = [
            f"{t} (not in {', '.join(label(i) for i in idx)})"
            for t, idx in sorted(self.missing.items())
        ]
        listed = "; ".join(parts[:10]) + (" ..." if len(parts) > 10 else "")
        if strict:
            return f"{len(self.missing)} turn(s) are missing from some runs (--strict refuses that): {listed}"
        return (
            f"{len(self.missing)} turn(s) are missing from some runs and are fused with that list empty "
            f"(it contributes 0): {listed}"
        )


def check_runs(runs: Sequence[Run], expected: int | None = None) -> None:
    """At least two runs (or exactly ``expected``)."""
    if expected is not None and len(runs) != expected:
        raise ApcirError(f"expected {expected} runs (one per weight), got {len(runs)}")
    if len(runs) < 2:
        raise ApcirError(f"fusion needs at least 2 runs, got {len(runs)} (the paper fuses 3)")


def align_runs(runs: Sequence[Run], *, strict: bool = False, names: Sequence[str] | None = None) -> RunAlignment:
    """The union of the runs' turns; with ``strict`` a turn missing from any run is an error."""
    turns = sorted(set().union(*(set(r) for r in runs))) if runs else []
    missing = {t: [i for i, r in enumerate(runs) if t not in r] for t in turns}
    missing = {t: idx for t, idx in missing.items() if idx}
    alignment = RunAlignment(turns=turns, missing=missing)
    if strict and missing:
        raise ApcirError(alignment.describe(names, strict=True))
    return alignment


def turn_matrix(
    runs: Sequence[Run], turn: str, norm: str = "minmax"
) -> tuple[list[str], np.ndarray]:
    """Candidates of one turn (sorted ids) and their normalised scores, shape (n, len(runs)); 0 = missing."""
    lists = [r.get(turn, {}) for r in runs]
    ids = sorted(set().union(*(set(h) for h in lists)))
    index = {p: i for i, p in enumerate(ids)}
    matrix = np.zeros((len(ids), len(runs)), dtype=np.float64)
    for col, hits in enumerate(lists):
        if hits:
            keys = list(hits)
            values = normalise_array(
                np.fromiter((hits[p] for p in keys), dtype=np.float64, count=len(keys)), norm
            )
            matrix[[index[p] for p in keys], col] = values
    return ids, matrix


def fuse_scores(matrix: np.ndarray, weights: WeightVector) -> np.ndarray:
    """``w1*s1 + w2*s2 + ...`` left to right in float64 (the grid search does the same operations)."""
    w = [float(x) for x in weights]
    if len(w) != matrix.shape[1]:
        raise ApcirError(f"{len(w)} weights for {matrix.shape[1]} runs")
    acc = w[0] * matrix[:, 0]
    for col in range(1, len(w)):
        acc = acc + w[col] * matrix[:, col]
    return acc


def top_hits(ids: list[str], scores: np.ndarray, depth: int | None) -> dict[str, float]:
    """The first ``depth`` candidates in trec_eval's order, as a ``{passage: score}`` dict."""
    order = trec_order(scores)
    if depth is not None:
        order = order[:depth]
    return {ids[i]: float(scores[i]) for i in order}


def fuse_per_turn(
    runs: Sequence[Run],
    turn_weights: Mapping[str, WeightVector],
    *,
    norm: str = "minmax",
    depth: int = 1000,
    strict: bool = False,
    alignment: RunAlignment | None = None,
) -> Run:
    """Fuse every turn that has a weight vector; a turn with no candidates gets an empty ranking. ``alignment``:
    the runs' :func:`align_runs`, when the caller has it already."""
    check_norm(norm)
    _check_depth(depth)
    alignment = alignment or align_runs(runs, strict=strict)
    missing = [t for t in alignment.turns if t not in turn_weights]
    if missing:
        listed = shown(missing)
        raise ApcirError(f"{len(missing)} turn(s) have no weights: {listed}")
    fused: Run = {}
    for turn in alignment.turns:
        ids, matrix = turn_matrix(runs, turn, norm)
        fused[turn] = top_hits(ids, fuse_scores(matrix, turn_weights[turn]), depth)
    return fused


def fuse_linear(
    runs: Sequence[Run],
    levels: Mapping[str, str],
    weights: WeightsFile | Mapping[str, WeightVector],
    norm: str | None = None,
    depth: int | None = None,
    *,
    strict: bool = False,
    missing_level: str | None = None,
) -> Run:
    """Fuse each turn with its level's weight vector.

    ``norm`` and ``depth`` default to the weights file's (else minmax, 1000).
    A turn of the runs without a level is an error unless ``missing_level``
    names the level to use for it.
    """
    if isinstance(weights, WeightsFile):
        table = {lv: tuple(lw.weights) for lv, lw in weights.levels.items()}
        norm = norm or weights.norm
        depth = depth if depth is not None else weights.depth
    else:
        table = {lv: tuple(w) for lv, w in weights.items()}
    norm = norm or "minmax"
    depth = 1000 if depth is None else depth
    sizes = {len(w) for w in table.values()}
    if sizes != {len(runs)}:
        raise ApcirError(
            f"the weights have {'/'.join(str(s) for s in sorted(sizes))} entries but {len(runs)} runs were given"
        )
    check_runs(runs)
    alignment = align_runs(runs, strict=strict)
    turn_weights: dict[str, WeightVector] = {}
    no_level: list[str] = []
    for turn in alignment.turns:
        level = levels.get(turn, missing_level)
        if level is None:
            no_level.append(turn)
            continue
        if level not in table:
            raise ApcirError(
                f"turn {turn} has level {level!r} but the weights cover only {', '.join(sorted(table))}"
            )
        turn_weights[turn] = table[level]
    if no_level:
        listed = shown(no_level)
        raise ApcirError(
            f"{len(no_level)} turn(s) of the runs have no level: {listed} (add them to the levels file, "
            "or give them one with --missing-level)"
        )
    return fuse_per_turn(runs, turn_weights, norm=norm, depth=depth, alignment=alignment)


def _check_depth(depth: int) -> None:
    if depth < 1:
        raise ApcirError(f"depth must be at least 1, got {depth}")
