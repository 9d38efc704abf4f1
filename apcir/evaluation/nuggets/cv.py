"""Cross-validation over turns for nugget matchers: Cohen's κ, the κ-maximising threshold, folds that keep
each turn whole, and the check that a turn is never both trained on and evaluated."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from apcir.errors import ApcirError


def cohen_kappa(tp: float, fp: float, fn: float, tn: float) -> float:
    """Cohen's κ of a 2x2 table (0 when chance agreement is total)."""
    n = tp + fp + fn + tn
    if n == 0:
        return 0.0
    observed = (tp + tn) / n
    chance = ((tp + fp) * (tp + fn) + (fn + tn) * (fp + tn)) / (n * n)
    return 0.0 if chance >= 1 else (observed - chance) / (1 - chance)


def kappa_of(decisions: np.ndarray, truth: np.ndarray) -> float:
    said, truly = decisions.astype(bool), truth.astype(bool)
    return cohen_kappa(float((said & truly).sum()), float((said & ~truly).sum()), float((~said & truly).sum()),
                       float((~said & ~truly).sum()))


def best_tau(scores: np.ndarray, truth: np.ndarray) -> float:
    """The τ maximising κ on (scores, truth): midpoints between distinct scores, ties to the larger τ."""
    scores, truth = np.asarray(scores, dtype=np.float64), np.asarray(truth, dtype=bool)
    values = np.unique(scores)
    candidates = np.concatenate([[values[0] - 1e-9], (values[:-1] + values[1:]) / 2, [values[-1] + 1e-9]])
    n, positives = len(scores), int(truth.sum())
    covered = n - np.searchsorted(np.sort(scores), candidates, side="left")
    tp = positives - np.searchsorted(np.sort(scores[truth]), candidates, side="left")
    fp, fn = covered - tp, positives - tp
    tn = n - positives - fp
    observed = (tp + tn) / n
    chance = ((tp + fp) * (tp + fn) + (fn + tn) * (fp + tn)) / (n * n)
    kappas = np.where(chance >= 1, 0.0, (observed - chance) / np.where(chance >= 1, 1.0, 1 - chance))
    return float(candidates[np.nonzero(kappas >= kappas.max() - 1e-12)[0].max()])


def row_folds(turns: Sequence[str], k: int, seed: int) -> np.ndarray:
    """Each row's fold: the distinct turns are shuffled (seeded) and dealt into ``k`` folds, so that all the rows
    of a turn share a fold."""
    distinct = sorted(set(turns))
    order = np.random.default_rng(seed).permutation(len(distinct))
    fold_of = {distinct[i]: position % k for position, i in enumerate(order)}
    return np.array([fold_of[t] for t in turns], dtype=int)


def check_disjoint(trained: Iterable[str], evaluated: Iterable[str]) -> None:
    """Refuse a split in which a turn is both trained on and evaluated (its figures would not be held out)."""
    shared = sorted(set(trained) & set(evaluated))
    if shared:
        raise ApcirError(f"{len(shared)} turn(s) are both trained on and evaluated ({', '.join(shared[:3])}): the "
                         "figures would not be out-of-fold")
