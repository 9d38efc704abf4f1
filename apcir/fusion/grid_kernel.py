"""The grid search's kernel: every tuning turn packed into flat arrays (:func:`pack`), and the numba kernel that
scores every simplex point on them (:func:`run_kernel`), exactly as :mod:`apcir.fusion.grid` describes (the
snake order, the preselection by the previous point's top-K threshold, trec_eval's ties and measures)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numba
import numpy as np

from apcir.contract.records import Qrels, Run
from apcir.fusion.linear import turn_matrix
from apcir.metrics.measures import Measure

# Measure kinds understood by the kernel.
_RR, _P, _RECALL, _NDCG, _MAP = 0, 1, 2, 3, 4
KINDS = {
    "recip_rank": _RR,
    "P": _P,
    "recall": _RECALL,
    "ndcg_cut": _NDCG,
    "ndcg": _NDCG,
    "map_cut": _MAP,
    "map": _MAP,
}


@dataclass
class Packed:
    offsets: np.ndarray  # (T+1,)
    scores: np.ndarray  # (L, sum n): one row per list, so the fusion loops vectorise
    gains: np.ndarray  # (sum n,) grade if > 0 else 0
    relevant: np.ndarray  # (sum n,) grade >= threshold
    judged_offsets: np.ndarray  # (T+1,)
    judged: np.ndarray  # indices (within the turn) of candidates with gain > 0
    num_rel: np.ndarray  # (T,)
    ideal: np.ndarray  # (T, M) ideal DCG at each measure's cutoff (nDCG only)
    maxabs: np.ndarray  # (T, L)


def pack(
    runs: Sequence[Run],
    qrels: Qrels,
    turns: Sequence[str],
    measures: Sequence[Measure],
    norm: str,
    depth: int,
    threshold: int,
) -> Packed:
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
            if KINDS[str(m.family)] == _NDCG:
                cut = len(positive) if m.cutoff is None else m.cutoff
                total = 0.0
                for i, grade in enumerate(positive[:cut]):
                    total += grade / math.log2(i + 2)
                ideal[t, j] = total
    n_lists = len(runs)
    return Packed(
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
    kinds = np.array([KINDS[str(m.family)] for m in measures], dtype=np.int64)
    cutoffs = np.array(
        [min(m.cutoff if m.cutoff is not None else depth, depth) for m in measures], dtype=np.int64
    )
    ranked = [int(c) for k, c in zip(kinds, cutoffs) if k != _RR]
    return kinds, cutoffs, max(ranked) if ranked else 0


def run_kernel(
    weights: np.ndarray, packed: Packed, measures: Sequence[Measure], depth: int, progress: bool
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
