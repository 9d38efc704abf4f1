"""Per-turn score normalisation of one ranked list.

Every method maps a list's scores into comparable values before fusion; a
passage missing from a list contributes 0 to the fused score, whatever the
method (the same in tuning and in applying weights).

Edge cases, defined once here and used everywhere:

- empty list: stays empty;
- ``minmax``: ``(s - min) / (max - min)``; one hit or all scores equal gives
  every hit 1.0 (a retrieved passage ranks above one the list did not return);
- ``max``: ``s / max|s|``; all scores 0 gives every hit 1.0;
- ``zscore``: ``(s - mean) / std`` (population std); one hit or all scores
  equal gives every hit 0.0;
- ``none``: scores unchanged.
"""

from __future__ import annotations

import numpy as np

from apcir.errors import ApcirError

NORMS: tuple[str, ...] = ("minmax", "max", "zscore", "none")


def check_norm(method: str) -> str:
    """The method name, or an :class:`ApcirError` naming the choices."""
    if method not in NORMS:
        from apcir.registry import unknown_name

        raise ApcirError(unknown_name("normalisation", method, NORMS))
    return method


def normalise_array(values: np.ndarray, method: str = "minmax") -> np.ndarray:
    """Normalised copy of one list's scores (float64); see the module docstring."""
    check_norm(method)
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0 or method == "none":
        return x.copy()
    if method == "minmax":
        lo, hi = x.min(), x.max()
        if hi == lo:
            return np.ones_like(x)
        return (x - lo) / (hi - lo)
    if method == "max":
        top = np.abs(x).max()
        if top == 0:
            return np.ones_like(x)
        return x / top
    mean = x.mean()
    std = x.std()
    if std == 0:
        return np.zeros_like(x)
    return (x - mean) / std


def normalise(scores: dict[str, float], method: str = "minmax") -> dict[str, float]:
    """One turn's ``{passage: score}`` normalised with ``method``."""
    ids = list(scores)
    values = normalise_array(
        np.fromiter((scores[p] for p in ids), dtype=np.float64, count=len(ids)), method
    )
    return {p: float(v) for p, v in zip(ids, values)}
