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

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numba
import numpy as np

from apcir.contract.records import Qrels, Run
from apcir.errors import ApcirError
from apcir.fusion.linear import turn_matrix
from apcir.metrics import parse_measures
from apcir.metrics.measures import Measure

Objective = str | Sequence[str] | Sequence[Measure]

# Measure kinds understood by the kernel.
_RR, _P, _RECALL, _NDCG, _MAP = 0, 1, 2, 3, 4
_KINDS = {
    "recip_rank": _RR,
    "P": _P,
    "recall": _RECALL,
    "ndcg_cut": _NDCG,
    "ndcg": _NDCG,
    "map_cut": _MAP,
    "map": _MAP,
}

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
        unsupported = [m.name for m in measures if m.family not in _KINDS or m.rel is not None]
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
        packed = _pack(runs, qrels, self.turns, self.measures, norm, depth, rel_threshold)
        self.values = _run_kernel(self.weights, packed, self.measures, depth, progress)

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


@dataclass
class _Packed:
    offsets: np.ndarray  # (T+1,)
    scores: np.ndarray  # (L, sum n): one row per list, so the fusion loops vectorise
    gains: np.ndarray  # (sum n,) grade if > 0 else 0
    relevant: np.ndarray  # (sum n,) grade >= threshold
    judged_offsets: np.ndarray  # (T+1,)
    judged: np.ndarray  # indices (within the turn) of candidates with gain > 0
    num_rel: np.ndarray  # (T,)
    ideal: np.ndarray  # (T, M) ideal DCG at each measure's cutoff (nDCG only)
    maxabs: np.ndarray  # (T, L)


def _pack(
    runs: Sequence[Run],
    qrels: Qrels,
    turns: Sequence[str],
    measures: Sequence[Measure],
    norm: str,
    depth: int,
    threshold: int,
) -> _Packed:
    offsets = [0]
    judged_offsets = [0]
    blocks, gains, relevant, judged = [], [], [], []
    num_rel = np.zeros(len(turns), dtype=np.int64)
    ideal = np.zeros((len(turns), len(measures)))
    maxabs = np.zeros((len(turns), len(runs)))
    for t, turn in enumerate(turns):
        grades: Mapping[str, int] = qrels.get(turn, {})
        ids, matrix = turn_matrix(runs, turn, norm)
        g = np.array([grades.get(p, 0) for p in ids], dtype=np.int64)
        blocks.append(matrix)
        gains.append(np.where(g > 0, g, 0).astype(np.float64))
        relevant.append(g >= threshold)
        judged.append(np.flatnonzero(g > 0))
        offsets.append(offsets[-1] + len(ids))
        judged_offsets.append(judged_offsets[-1] + judged[-1].size)
        if matrix.size:
            maxabs[t] = np.abs(matrix).max(axis=0)
        num_rel[t] = sum(1 for v in grades.values() if v >= threshold)
        positive = sorted((v for v in grades.values() if v > 0), reverse=True)
        for j, m in enumerate(measures):
            if _KINDS[str(m.family)] == _NDCG:
                cut = len(positive) if m.cutoff is None else m.cutoff
                total = 0.0
                for i, grade in enumerate(positive[:cut]):
                    total += grade / math.log2(i + 2)
                ideal[t, j] = total
    n_lists = len(runs)
    return _Packed(
        offsets=np.array(offsets, dtype=np.int64),
        scores=np.ascontiguousarray((np.vstack(blocks) if blocks else np.zeros((0, n_lists))).T),
        gains=np.concatenate(gains) if gains else np.zeros(0),
        relevant=np.concatenate(relevant) if relevant else np.zeros(0, dtype=bool),
        judged_offsets=np.array(judged_offsets, dtype=np.int64),
        judged=np.concatenate(judged).astype(np.int64) if judged else np.zeros(0, dtype=np.int64),
        num_rel=num_rel,
        ideal=ideal,
        maxabs=maxabs,
    )


def _measure_arrays(measures: Sequence[Measure], depth: int) -> tuple[np.ndarray, np.ndarray, int]:
    kinds = np.array([_KINDS[str(m.family)] for m in measures], dtype=np.int64)
    cutoffs = np.array(
        [min(m.cutoff if m.cutoff is not None else depth, depth) for m in measures], dtype=np.int64
    )
    ranked = [int(c) for k, c in zip(kinds, cutoffs) if k != _RR]
    return kinds, cutoffs, max(ranked) if ranked else 0


def _run_kernel(
    weights: np.ndarray, packed: _Packed, measures: Sequence[Measure], depth: int, progress: bool
) -> np.ndarray:
    kinds, cutoffs, top_k = _measure_arrays(measures, depth)
    n_turns = len(packed.offsets) - 1
    values = np.zeros((n_turns, weights.shape[0], len(measures)))
    if n_turns == 0:
        return values
    chunk = max(2, numba.get_num_threads() * 4)
    starts = list(range(0, n_turns, chunk))
    bar = None
    if progress:
        from rich.progress import Progress

        from apcir.console import err

        bar = Progress(transient=True, console=err)
        bar.start()
        task = bar.add_task(
            f"grid search ({weights.shape[0]} points x {n_turns} turns)", total=n_turns
        )
    try:
        for start in starts:
            stop = min(n_turns, start + chunk)
            _grid_kernel(
                weights,
                start,
                stop,
                packed.offsets,
                packed.scores,
                packed.gains,
                packed.relevant,
                packed.judged_offsets,
                packed.judged,
                packed.num_rel,
                packed.ideal,
                packed.maxabs,
                kinds,
                cutoffs,
                top_k,
                depth,
                values,
            )
            if bar is not None:
                bar.update(task, advance=stop - start)
    finally:
        if bar is not None:
            bar.stop()
    return values


@numba.njit(cache=True, inline="always")
def _beats(fa: float, a: int, fb: float, b: int) -> bool:
    """Does candidate a rank above b? Score descending, then passage id (= index) descending."""
    return fa > fb or (fa == fb and a > b)


@numba.njit(cache=True, parallel=True)
def _grid_kernel(
    weights,
    start,
    stop,
    offsets,
    scores,
    gains,
    relevant,
    judged_offsets,
    judged,
    num_rel,
    ideal,
    maxabs,
    kinds,
    cutoffs,
    top_k,
    depth,
    values,
):
    n_points = weights.shape[0]
    n_lists = weights.shape[1]
    n_measures = kinds.shape[0]
    for t in numba.prange(start, stop):
        lo = offsets[t]
        n = offsets[t + 1] - lo
        if n == 0:
            continue
        s = scores[:, lo : lo + n]
        g = gains[lo : lo + n]
        rel = relevant[lo : lo + n]
        jd = judged[judged_offsets[t] : judged_offsets[t + 1]]
        f = np.empty(n)
        acc = np.empty(n)
        buf = np.empty(n, dtype=np.int64)
        tmp = np.empty(n)
        top = np.empty(jd.shape[0] + 1, dtype=np.int64)
        hist = np.zeros(jd.shape[0] + 2, dtype=np.int64)
        ranks = np.empty(jd.shape[0] + 1, dtype=np.int64)
        k_turn = min(top_k, n)
        tau = -np.inf
        for p in range(n_points):
            # fused scores: w1*s1 + w2*s2 + ... left to right, like fuse_scores
            w0 = weights[p, 0]
            for i in range(n):
                acc[i] = w0 * s[0, i]
            for col in range(1, n_lists):
                wl = weights[p, col]
                for i in range(n):
                    acc[i] = acc[i] + wl * s[col, i]
            for i in range(n):
                f[i] = np.float32(acc[i])  # trec_eval keeps scores as C floats
            n_top = 0
            if k_turn > 0:
                guess = -np.inf
                if p > 0:
                    shift = 1e-6
                    for col in range(n_lists):
                        shift += abs(weights[p, col] - weights[p - 1, col]) * maxabs[t, col]
                    guess = tau - shift
                m = 0
                for i in range(n):  # branch-free compaction
                    buf[m] = i
                    m += 1 if f[i] >= guess else 0
                if m < k_turn:  # the preselection missed: take everything
                    m = n
                    for i in range(n):
                        buf[i] = i
                for i in range(m):
                    tmp[i] = f[buf[i]]
                tau = np.partition(tmp[:m], m - k_turn)[m - k_turn]
                # judged-relevant candidates at or above the threshold, best first
                for j in range(jd.shape[0]):
                    c = jd[j]
                    if f[c] >= tau:
                        pos = n_top
                        while pos > 0 and _beats(f[c], c, f[top[pos - 1]], top[pos - 1]):
                            top[pos] = top[pos - 1]
                            pos -= 1
                        top[pos] = c
                        n_top += 1
                for q in range(n_top + 1):
                    hist[q] = 0
                for x in range(m):
                    i = buf[x]
                    if f[i] < tau or g[i] > 0:
                        continue
                    a, b = 0, n_top
                    while a < b:
                        mid = (a + b) // 2
                        if _beats(f[top[mid]], top[mid], f[i], i):
                            a = mid + 1
                        else:
                            b = mid
                    hist[a] += 1
                above = 0
                for q in range(n_top):
                    above += hist[q]
                    ranks[q] = 1 + q + above
            # reciprocal rank: first relevant in the top list, else count above the best relevant
            rr = 0.0
            found = False
            for q in range(n_top):
                if rel[top[q]]:
                    if ranks[q] <= depth:
                        rr = 1.0 / ranks[q]
                    found = True
                    break
            if not found:
                best = -1
                for j in range(jd.shape[0]):
                    c = jd[j]
                    if rel[c] and (best < 0 or _beats(f[c], c, f[best], best)):
                        best = c
                if best >= 0:
                    count = 0
                    fb = f[best]
                    for i in range(n):
                        if f[i] > fb or (f[i] == fb and i > best):
                            count += 1
                    if count + 1 <= depth:
                        rr = 1.0 / (count + 1)
            for mi in range(n_measures):
                kind = kinds[mi]
                cut = cutoffs[mi]
                if kind == _RR:
                    values[t, p, mi] = rr
                    continue
                nrel = 0
                total = 0.0
                for q in range(n_top):
                    if ranks[q] > cut:
                        break
                    c = top[q]
                    if kind == _NDCG:
                        total += g[c] / math.log2(ranks[q] + 1.0)
                    elif rel[c]:
                        nrel += 1
                        if kind == _MAP:
                            total += nrel / ranks[q]
                if kind == _P:
                    values[t, p, mi] = nrel / cut
                elif kind == _RECALL:
                    values[t, p, mi] = nrel / num_rel[t] if num_rel[t] > 0 else 0.0
                elif kind == _MAP:
                    values[t, p, mi] = total / num_rel[t] if num_rel[t] > 0 else 0.0
                else:
                    values[t, p, mi] = total / ideal[t, mi] if ideal[t, mi] > 0 else 0.0
