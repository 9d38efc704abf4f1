"""Exact, vectorised evaluation of every simplex point of a linear fusion.

:class:`GridSearch` scores every weight vector ``i/N`` (``sum i = N``) on every
tuning turn at once and returns, per point, turn and measure, the value
trec_eval would give the fused run of that point. "Exact" means: the fused
scores are the same float64 operations as :func:`apcir.fusion.linear.fuse_scores`,
ties are broken as trec_eval breaks them (passage id descending), the run is
cut at ``depth``, and the measures follow trec_eval's definitions. trec_eval
(hence pytrec_eval) stores a run's scores as 32-bit floats, so the ranking
compares the fused float64 scores rounded to float32; two passages whose
float64 scores differ only beyond float32 precision tie, and the tie goes
to the larger passage id. The measures:

- ``MRR`` (recip_rank): 1/rank of the first passage with grade >= threshold;
- ``P@k``: relevant in the top k, divided by k;
- ``Recall@k``: relevant in the top k / relevant judged for the turn (0 if none);
- ``nDCG@k``: gain = grade (grades <= 0 gain nothing), discount log2(rank+1),
  ideal from all the turn's judged grades; 0 if the ideal is 0; ``nDCG``
  without cutoff sums to ``depth``;
- ``MAP@k``: sum of precision at each relevant rank <= k / relevant judged.

A judged tuning turn whose lists are all empty scores 0 on every measure
(pytrec_eval scores an empty ranking 0), and the means are over the tuning
turns, as :func:`apcir.metrics.trec_eval` averages the fused run.

How it is fast: per turn, the points are visited in a reflected ("snake")
order so neighbours differ by one step in two weights; the top-K threshold of
the previous point, lowered by the most any score can move, preselects the
few candidates that can reach the top K (K = the largest cutoff), and the ranks
of the relevant passages are counted within them. Whether the preselection
holds is checked at every point (it must keep at least K candidates), with a
full pass as the fallback, so the speed-up never changes a result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from apcir.contract.records import Qrels, Run
from apcir.errors import ApcirError
from apcir.fusion.grid_kernel import KINDS, pack, run_kernel
from apcir.metrics import parse_measures
from apcir.metrics.measures import Measure

Objective = str | Sequence[str] | Sequence[Measure]

# Objective values closer than this are a tie, settled by the tie rule.
SCORE_TOLERANCE = 1e-9
TIE_RULE = (
    "highest objective (values within 1e-9 are equal); among equals the point closest to equal weights "
    "(Euclidean), then the larger w1, then the larger w2, ..."
)
_MAX_VALUES_BYTES = 4 * 1024**3


def divisions(step: float | str | Fraction) -> int:
    """N = 1/step as an exact integer; a step that does not divide 1 is a user error."""
    try:
        frac = Fraction(str(step)) if not isinstance(step, Fraction) else step
    except (ValueError, ZeroDivisionError):
        raise ApcirError(f"step {step!r} is not a number") from None
    if frac <= 0 or frac > 1:
        raise ApcirError(f"step {step} must be in (0, 1]")
    n = 1 / frac
    if n.denominator != 1:
        raise ApcirError(
            f"step {step} does not divide 1 exactly (1/step = {float(n):g}); use e.g. 0.01, 0.02, 0.05, 0.1"
        )
    return int(n)


def simplex_points(n: int, parts: int = 3) -> np.ndarray:
    """Every composition of ``n`` into ``parts`` non-negative integers, shape (C(n+parts-1, parts-1), parts).

    Ordered so consecutive rows differ by moving one unit between two parts
    (a reflected order: the inner parts sweep up, then down).
    """
    if parts < 1:
        raise ApcirError("need at least one part")
    rows: list[tuple[int, ...]] = []

    def walk(prefix: tuple[int, ...], remaining: int, left: int, reverse: bool) -> None:
        if left == 1:
            rows.append(prefix + (remaining,))
            return
        values = range(remaining, -1, -1) if reverse else range(remaining + 1)
        flip = reverse
        for i, value in enumerate(values):
            walk(prefix + (value,), remaining - value, left - 1, flip if i % 2 == 0 else not flip)

    walk((), n, parts, False)
    return np.array(rows, dtype=np.int64).reshape(len(rows), parts)


def objective_measures(objective: Objective) -> list[Measure]:
    """Measures of an objective: a set name (``paper``), a name (``nDCG@3``) or a list of them."""
    if isinstance(objective, str):
        return parse_measures(objective)
    items = list(objective)
    if items and all(isinstance(m, Measure) for m in items):
        return [m for m in items if isinstance(m, Measure)]
    return parse_measures([str(m) for m in items])


@dataclass(frozen=True)
class BestPoint:
    """The chosen point of a search over some turns."""

    index: int
    composition: tuple[int, ...]
    weights: tuple[float, ...]
    score: float
    measures: dict[str, float]
    n_turns: int


class GridSearch:
    """Per-point, per-turn, per-measure values of linear fusion over the simplex.

    ``values[t, p, m]`` is measure ``m`` of turn ``turns[t]`` for the fused run
    of point ``compositions[p] / divisions``. The measures are those of ``objective``
    (:func:`objective_measures`): the one constructor of the search that tuning,
    cross-validation, the fusion protocol and the plots use.
    """

    def __init__(
        self,
        runs: Sequence[Run],
        qrels: Qrels,
        turns: Sequence[str],
        objective: Objective,
        *,
        step: float | str = 0.01,
        norm: str = "minmax",
        depth: int = 1000,
        rel_threshold: int = 1,
        progress: bool = False,
    ) -> None:
        if rel_threshold < 1:
            raise ApcirError(
                f"relevance threshold must be at least 1 (trec_eval), got {rel_threshold}"
            )
        if depth < 1:
            raise ApcirError(f"depth must be at least 1, got {depth}")
        measures = objective_measures(objective)
        unsupported = [m.name for m in measures if m.family not in KINDS or m.rel is not None]
        if unsupported:
            raise ApcirError(f"the weight search cannot maximise {', '.join(unsupported)}: it computes MRR, nDCG, P, "
                             "Recall and MAP (at the evaluation's relevance threshold), as trec_eval does")
        self.turns = list(turns)
        self.measures = list(measures)
        self.divisions = divisions(step)
        self.step = step
        self.norm = norm
        self.depth = depth
        self.rel_threshold = rel_threshold
        self.compositions = simplex_points(self.divisions, len(runs))
        self.weights = (
            self.compositions / self.divisions
        )  # correctly rounded i/N, as json round-trips it
        size = len(self.turns) * len(self.compositions) * len(self.measures) * 8
        if size > _MAX_VALUES_BYTES:
            raise ApcirError(
                f"step {step} over {len(runs)} runs gives {len(self.compositions)} points; with "
                f"{len(self.turns)} turns that needs {size / 1e9:.1f} GB; use a coarser step"
            )
        packed = pack(runs, qrels, self.turns, self.measures, norm, depth, rel_threshold)
        self.values = run_kernel(self.weights, packed, self.measures, depth, progress)

    def turn_index(self, turns: Sequence[str]) -> np.ndarray:
        position = {t: i for i, t in enumerate(self.turns)}
        return np.array([position[t] for t in turns], dtype=np.int64)

    def means(self, turns: Sequence[str]) -> np.ndarray:
        """Mean of each measure over ``turns`` at every point, shape (P, M)."""
        idx = self.turn_index(turns)
        if idx.size == 0:
            return np.zeros((len(self.compositions), len(self.measures)))
        return self.values[idx].sum(axis=0) / idx.size

    def best(self, turns: Sequence[str], allowed: np.ndarray | None = None) -> BestPoint:
        """The best point for ``turns`` (optionally among ``allowed`` points), by :data:`TIE_RULE`."""
        means = self.means(turns)
        index = select_best(self.compositions, means.sum(axis=1), allowed)
        return BestPoint(
            index=index,
            composition=tuple(int(c) for c in self.compositions[index]),
            weights=tuple(float(w) for w in self.weights[index]),
            score=float(means[index].sum()),
            measures={m.name: float(means[index, j]) for j, m in enumerate(self.measures)},
            n_turns=len(turns),
        )


def select_best(
    compositions: np.ndarray, scores: np.ndarray, allowed: np.ndarray | None = None
) -> int:
    """Index of the best point by :data:`TIE_RULE` (``allowed``: boolean mask of eligible points)."""
    eligible = (
        np.ones(len(scores), dtype=bool) if allowed is None else np.asarray(allowed, dtype=bool)
    )
    if not eligible.any():
        raise ApcirError("no grid point satisfies the constraint")
    top = scores[eligible].max()
    candidates = np.flatnonzero(eligible & (scores >= top - SCORE_TOLERANCE))
    comps = compositions[candidates]
    n = int(compositions[0].sum())
    distance = ((comps * comps.shape[1] - n) ** 2).sum(axis=1)
    # np.lexsort sorts by its last key first: distance, then w1 descending, then w2 descending, ...
    keys = [distance] + [-comps[:, j] for j in range(comps.shape[1])]
    order = np.lexsort(tuple(reversed(keys)))
    return int(candidates[order[0]])
