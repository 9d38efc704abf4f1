"""Expected scores (pyserini's 2CR style): every system's means of a config, kept beside it and re-checked.

``apcir/configs/demo.expected.json`` holds the demo's numbers; ``make test`` re-runs the demo and compares.
A change of numbers is then a deliberate edit of that file (``APCIR_UPDATE_EXPECTED=1`` rewrites it from the
run), explained in the commit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from apcir.evaluation.results import RunMetrics
from apcir.io import read_json, write_json

TOLERANCE = 1e-6
"""Absolute, on fractions (a measure's 0.4798 may read 0.4797995 on another BLAS; a change of 0.005 fails)."""


def expected_scores(metrics: RunMetrics) -> dict[str, Any]:
    """The numbers a config promises: each system's, each PTKB ranking's and the responses' means."""
    scores: dict[str, Any] = {
        "config": metrics.name, "topics": metrics.topics, "qrels": metrics.qrels, "tolerance": TOLERANCE,
        "systems": {name: dict(result.means) for name, result in metrics.systems.items()},
    }
    if metrics.ptkb is not None:
        scores["ptkb"] = {name: dict(result.means) for name, result in metrics.ptkb.systems.items()}
    if metrics.responses is not None:
        scores["responses"] = dict(metrics.responses.measures)
    return scores


def differences(metrics: RunMetrics, expected: dict[str, Any]) -> list[str]:
    """Every number that moved beyond the file's tolerance, and every system added or gone."""
    actual = expected_scores(metrics)
    tolerance = float(expected.get("tolerance", TOLERANCE))
    problems: list[str] = []

    def walk(path: str, want: Any, got: Any) -> None:
        if isinstance(want, dict) and isinstance(got, dict):
            for key in sorted(set(want) | set(got)):
                if key not in got:
                    problems.append(f"{path}{key}: expected, not produced")
                elif key not in want:
                    problems.append(f"{path}{key}: produced, not in the expected file")
                else:
                    walk(f"{path}{key}.", want[key], got[key])
        elif isinstance(want, float) or isinstance(got, float):
            if abs(float(want) - float(got)) > tolerance:
                problems.append(f"{path.rstrip('.')}: expected {want:.6f}, got {got:.6f}")
        elif want != got:
            problems.append(f"{path.rstrip('.')}: expected {want!r}, got {got!r}")

    walk("", {k: v for k, v in expected.items() if k != "tolerance"}, {k: v for k, v in actual.items()
                                                                       if k != "tolerance"})
    return problems


def read_expected(path: Path) -> dict[str, Any]:
    return dict(read_json(path, "expected scores"))


def write_expected(metrics: RunMetrics, path: Path) -> Path:
    write_json(path, expected_scores(metrics), indent=1)
    return path
