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

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from apcir.registry import Registry


@dataclass(frozen=True)
class NormSpec:
    """A normalisation: ``apply`` maps a non-empty array of one list's scores to new float64 values."""

    name: str
    description: str
    apply: Callable[[np.ndarray], np.ndarray]


def _minmax(x: np.ndarray) -> np.ndarray:
    lo, hi = x.min(), x.max()
    if hi == lo:
        return np.ones_like(x)
    return (x - lo) / (hi - lo)


def _max(x: np.ndarray) -> np.ndarray:
    top = np.abs(x).max()
    if top == 0:
        return np.ones_like(x)
    return x / top


def _zscore(x: np.ndarray) -> np.ndarray:
    mean = x.mean()
    std = x.std()
    if std == 0:
        return np.zeros_like(x)
    return (x - mean) / std


NORMS: Registry[NormSpec] = Registry("normalisation")
"""The per-list normalisations: the single source of the names ``fusion.norm`` and ``--norm`` accept."""
NORMS.add(NormSpec("minmax", "(s - min) / (max - min); equal scores all 1", _minmax))
NORMS.add(NormSpec("max", "s / max|s|; all 0 gives 1", _max))
NORMS.add(NormSpec("zscore", "(s - mean) / std; equal scores all 0", _zscore))
NORMS.add(NormSpec("none", "scores unchanged", lambda x: x.copy()))


def norm_help() -> str:
    """``minmax ((s - min) / ...); max (...); ...``: the help of a setting or option naming a normalisation."""
    return NORMS.help()


def check_norm(method: str) -> str:
    """The method name, or an :class:`ApcirError` naming the choices."""
    return NORMS.check(method)


def normalise_array(values: np.ndarray, method: str = "minmax") -> np.ndarray:
    """Normalised copy of one list's scores (float64); see the module docstring."""
    spec = NORMS.get(method)
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return x.copy()
    return spec.apply(x)


def normalise(scores: dict[str, float], method: str = "minmax") -> dict[str, float]:
    """One turn's ``{passage: score}`` normalised with ``method``."""
    ids = list(scores)
    values = normalise_array(
        np.fromiter((scores[p] for p in ids), dtype=np.float64, count=len(ids)), method
    )
    return {p: float(v) for p, v in zip(ids, values)}
