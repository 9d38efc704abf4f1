"""Paired significance tests on per-turn trec_eval values.

The APCIR paper marks significant differences with a paired t-test at
p < 0.05 with Bonferroni correction. ranx implements the same test, but on its
own metric implementations; apcir keeps every number trec_eval's, so the test
runs here with scipy on the per-turn values that :func:`apcir.metrics.trec_eval`
returns. Systems are paired on the turns both were evaluated on.
"""

from __future__ import annotations

import math

from pydantic import BaseModel
from scipy import stats


class Comparison(BaseModel):
    """One system against the baseline on one measure."""

    system: str
    baseline: str
    measure: str
    mean_system: float
    mean_baseline: float
    n_turns: int
    p_value: float
    p_corrected: float
    significant: bool

    @property
    def marker(self) -> str:
        """``†`` significantly better than the baseline, ``↓`` significantly worse, ``""`` otherwise."""
        if not self.significant:
            return ""
        return "†" if self.mean_system > self.mean_baseline else "↓"


def paired_t_tests(
    per_turn: dict[str, dict[str, dict[str, float]]],
    baseline: str,
    measures: list[str],
    *,
    alpha: float = 0.05,
) -> list[Comparison]:
    """Every other system against ``baseline`` on each measure, Bonferroni-corrected over the systems.

    ``per_turn`` is ``{system: {turn: {measure: value}}}``. Identical per-turn
    values give p = 1 (no difference), not NaN.
    """
    others = [s for s in per_turn if s != baseline]
    corrections = max(len(others), 1)
    results = []
    for system in others:
        turns = sorted(set(per_turn[system]) & set(per_turn[baseline]))
        for measure in measures:
            a = [per_turn[system][t][measure] for t in turns]
            b = [per_turn[baseline][t][measure] for t in turns]
            p = _paired_p(a, b)
            corrected = min(1.0, p * corrections)
            results.append(
                Comparison(
                    system=system,
                    baseline=baseline,
                    measure=measure,
                    mean_system=sum(a) / len(a) if a else 0.0,
                    mean_baseline=sum(b) / len(b) if b else 0.0,
                    n_turns=len(turns),
                    p_value=p,
                    p_corrected=corrected,
                    significant=corrected < alpha,
                )
            )
    return results


def _paired_p(a: list[float], b: list[float]) -> float:
    if len(a) < 2 or all(x == y for x, y in zip(a, b)):
        return 1.0
    p = float(stats.ttest_rel(a, b).pvalue)
    return 1.0 if math.isnan(p) else p
