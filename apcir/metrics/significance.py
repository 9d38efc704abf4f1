"""Paired significance tests on per-turn trec_eval values, with multiple-comparison corrections.

The APCIR paper marks significant differences with a paired t-test at p < 0.05 with Bonferroni correction;
that stays the default. ranx and PyTerrier offer more, and so does apcir, on the per-turn values that
:func:`apcir.metrics.trec_eval` returns (so every number stays trec_eval's):

* tests: ``t-test`` (scipy's paired t-test), ``randomisation`` (Fisher's paired randomisation test: the signs
  of the per-turn differences flipped at random, ``trials`` times, seeded), ``bootstrap`` (the paired bootstrap
  test: the centred per-turn differences resampled with replacement, ``trials`` times, seeded); all two-sided;
* corrections over one family: ``none``, ``bonferroni`` (p x m) or ``holm`` (Holm's step-down, which keeps the
  family-wise error rate of Bonferroni with more power). The family is every system compared with the
  baseline on one measure, so a report that draws several tables from one family marks a pair the same in each;
* ``alpha`` (default 0.05), and the effect size: Cohen's d of the paired differences (their mean over their
  standard deviation; 0 when they do not vary).

Systems are paired on the turns both were evaluated on. Identical per-turn values give p = 1, not NaN.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

TestName = Literal["t-test", "randomisation", "bootstrap"]
CorrectionName = Literal["none", "bonferroni", "holm"]
TESTS: tuple[str, ...] = ("t-test", "randomisation", "bootstrap")
CORRECTIONS: tuple[str, ...] = ("none", "bonferroni", "holm")
TEST_LABELS = {"t-test": "paired t-test", "randomisation": "paired randomisation test",
               "bootstrap": "paired bootstrap test"}


class SignificanceSettings(BaseModel):
    """How systems are compared with the baseline (``[evaluation]``: test, correction, alpha; the same options
    on ``apcir evaluate`` and ``apcir report``)."""

    model_config = ConfigDict(extra="forbid")

    test: TestName = Field("t-test", description="t-test (the paper's), randomisation or bootstrap")
    correction: CorrectionName = Field("bonferroni", description="none, bonferroni (the paper's) or holm")
    alpha: float = Field(0.05, gt=0, lt=1, description="significance level")
    trials: int = Field(10_000, ge=100, description="randomisation/bootstrap: resamples")
    seed: int = Field(0, ge=0, description="randomisation/bootstrap: the random seed")

    def caption(self, family: int) -> str:
        """How the marks were made, for a table's caption."""
        correction = {"none": "no correction", "bonferroni": f"Bonferroni over {family} comparison(s)",
                      "holm": f"Holm over {family} comparison(s)"}[self.correction]
        extra = f", {self.trials:,} resamples, seed {self.seed}" if self.test != "t-test" else ""
        return f"{TEST_LABELS[self.test]}{extra}, p < {self.alpha:g}, {correction}"


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
    effect_size: float = Field(0.0, description="Cohen's d of the paired differences")
    test: str = "t-test"
    correction: str = "bonferroni"

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
    """Every other system against ``baseline`` on each measure: t-test, Bonferroni (the paper's protocol)."""
    return compare_with(per_turn, baseline, measures, SignificanceSettings(alpha=alpha))


def compare_with(
    per_turn: dict[str, dict[str, dict[str, float]]],
    baseline: str,
    measures: list[str],
    settings: SignificanceSettings | None = None,
) -> list[Comparison]:
    """Every other system of ``per_turn`` (``{system: {turn: {measure: value}}}``) against ``baseline`` on each
    measure; one correction family per measure (all the systems)."""
    settings = settings or SignificanceSettings()
    others = [s for s in per_turn if s != baseline]
    results: list[Comparison] = []
    for measure in measures:
        raw = []
        for system in others:
            turns = sorted(set(per_turn[system]) & set(per_turn[baseline]))
            a = np.array([per_turn[system][t][measure] for t in turns], dtype=float)
            b = np.array([per_turn[baseline][t][measure] for t in turns], dtype=float)
            raw.append((system, a, b, paired_p(a, b, settings)))
        corrected = correct([p for *_, p in raw], settings.correction)
        for (system, a, b, p), adjusted in zip(raw, corrected):
            results.append(Comparison(
                system=system, baseline=baseline, measure=measure,
                mean_system=float(a.mean()) if a.size else 0.0, mean_baseline=float(b.mean()) if b.size else 0.0,
                n_turns=int(a.size), p_value=p, p_corrected=adjusted, significant=adjusted < settings.alpha,
                effect_size=effect_size(a, b), test=settings.test, correction=settings.correction,
            ))
    order = {s: i for i, s in enumerate(others)}
    return sorted(results, key=lambda c: (order[c.system], measures.index(c.measure)))


def effect_size(a: np.ndarray, b: np.ndarray) -> float:
    """Cohen's d of paired values: mean difference over the differences' standard deviation (0 if constant)."""
    if a.size < 2:
        return 0.0
    diff = a - b
    spread = float(diff.std(ddof=1))
    return 0.0 if spread == 0 else float(diff.mean()) / spread


def paired_p(a: np.ndarray, b: np.ndarray, settings: SignificanceSettings) -> float:
    """The two-sided p-value of ``settings.test`` for paired samples ``a`` and ``b``."""
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if diff.size < 2 or not np.any(diff):
        return 1.0
    if settings.test == "t-test":
        from scipy import stats  # here, not at import: scipy.stats takes about a second to import

        p = float(stats.ttest_rel(a, b).pvalue)
        return 1.0 if math.isnan(p) else p
    rng = np.random.default_rng(settings.seed)
    observed = abs(float(diff.mean()))
    if settings.test == "randomisation":
        signs = rng.choice(np.array([-1.0, 1.0]), size=(settings.trials, diff.size))
        means = np.abs((signs * diff).mean(axis=1))
    else:  # bootstrap: resample the centred differences (the null hypothesis: mean difference 0)
        centred = diff - diff.mean()
        picks = rng.integers(0, diff.size, size=(settings.trials, diff.size))
        means = np.abs(centred[picks].mean(axis=1))
    exceed = int(np.count_nonzero(means >= observed - 1e-12))
    return (exceed + 1) / (settings.trials + 1)


def correct(p_values: list[float], method: str) -> list[float]:
    """``p_values`` of one family, corrected: none, Bonferroni (p x m) or Holm (step-down), capped at 1."""
    m = len(p_values)
    if method == "none" or m == 0:
        return list(p_values)
    if method == "bonferroni":
        return [min(1.0, p * m) for p in p_values]
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted
