"""How far a matcher's covered/not-covered decisions are from people's: accuracy, Cohen's κ, and precision and
recall of "covered", each with a bootstrap 95% interval (resampling turns), every figure out-of-fold.

**Labels** are one human decision per (turn, run, nugget), in apcir's layout or as the iKAT 2024 human study
publishes them (:mod:`apcir.evaluation.nuggets.labels`). A label whose turn, run or nugget is not in the nuggets
and responses given (or whose alias the alias table lacks) is not used, and the report counts such rows by
reason; none is dropped silently. An alias with two candidate runs is measured under each: the report's
``alternatives`` give κ with the labels of that alias read as either run's.

**τ** of a thresholded matcher is chosen by cross-validation over turns (k folds, seeded): on the training
folds' labels, the τ maximising κ; the held-out fold's decisions use it. κ, not accuracy: most labels are 0, and
the τ maximising accuracy tends to "never covered". The **learned** matcher is measured by nested
cross-validation (:mod:`apcir.evaluation.nuggets.learned`), or, given a model file, with the model's τ on labels
of turns it was not trained on. ``splits`` repeats the cross-validation with other random fold assignments:
the spread of κ over them shows how much the split alone moves the figure.

A figure that the labels leave **undefined** is None (JSON null) with the reason (``why``), never 0: κ when every
label used is of one class (κ is then 0 whatever the matcher decides), precision when the matcher says covered
for no pair, recall when no label says covered. An interval is over the resamples where the figure is defined.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, Field

from apcir.errors import ApcirError
from apcir.evaluation.nuggets import cv
from apcir.evaluation.nuggets.cv import best_tau, cohen_kappa, kappa_of
from apcir.evaluation.nuggets.gold import Nugget, NuggetSet
from apcir.evaluation.nuggets.labels import HumanLabels, Label, LabelRow, load_labels
from apcir.evaluation.nuggets.registry import MATCHERS
from apcir.evaluation.nuggets.scores import MatcherInfo, match
from apcir.evaluation.nuggets.settings import MatcherSettings

__all__ = ["AgreementReport", "Figure", "Label", "agreement", "best_tau", "cohen_kappa", "load_labels"]


class Figure(BaseModel):
    """A figure with its bootstrap 95% interval; ``value`` None (JSON null) where it is undefined, and ``why``."""

    value: float | None
    low: float | None
    high: float | None
    why: str | None = Field(None, description="why the figure is undefined")

    def text(self) -> str:
        """``0.383 [0.254, 0.475]``, or ``undefined``."""
        if self.value is None:
            return "undefined"
        if self.low is None or self.high is None:
            return f"{self.value:.3f}"
        return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}]"


class Spread(BaseModel):
    """κ over ``splits`` random fold assignments (the same labels, other splits)."""

    splits: int
    low: float
    median: float
    high: float
    sd: float


class Alternative(BaseModel):
    """κ with one ambiguous alias's labels read as one of its candidate runs."""

    alias: str
    run: str
    used: int
    kappa: Figure


class AgreementReport(BaseModel):
    matcher: MatcherInfo
    labels: int = Field(description="labels read")
    used: int = Field(description="labels matched to a nugget and a response")
    turns: int = Field(0, description="turns of the labels used")
    unmapped: dict[str, int] = Field(default_factory=dict, description="labels not used, by reason")
    layout: str = "apcir"
    mapping: dict[str, list[str]] = Field(default_factory=dict, description="alias -> candidate runs (first used)")
    positives: float = Field(description="share of used labels that say covered")
    accuracy: Figure
    kappa: Figure
    precision: Figure
    recall: Figure
    folds: int = 0
    taus: list[float] = Field(default_factory=list, description="τ chosen on each fold's training turns")
    lambdas: list[float] = Field(default_factory=list, description="learned: the L2 strength chosen per fold")
    spread: Spread | None = None
    alternatives: list[Alternative] = Field(default_factory=list)
    resamples: int = 1000
    seed: int = 0


@dataclass(frozen=True)
class _Rows:
    keys: list[tuple[str, str, str]]
    truth: np.ndarray
    turns: list[str]


def _figures(counts: np.ndarray) -> tuple[float, float, float, float]:
    """(accuracy, κ, precision, recall) of summed per-turn counts [tp, fp, fn, tn]; NaN where undefined
    (:func:`_undefined`)."""
    tp, fp, fn, tn = counts
    n = tp + fp + fn + tn
    nan = float("nan")
    return ((tp + tn) / n if n else nan, cohen_kappa(tp, fp, fn, tn) if tp + fn and fp + tn else nan,
            tp / (tp + fp) if tp + fp else nan, tp / (tp + fn) if tp + fn else nan)


def _undefined(counts: np.ndarray) -> list[str | None]:
    """Why each of (accuracy, κ, precision, recall) is undefined on these counts [tp, fp, fn, tn], or None.

    κ on labels of one class is 0 whatever the matcher decides (the agreement expected by chance is then the
    agreement observed), or 0/0 when the matcher agrees on every pair: it says nothing of the matcher, so it is
    undefined rather than 0."""
    tp, fp, fn, tn = (int(c) for c in counts)
    n = tp + fp + fn + tn
    one_class = (f"every one of the {n} labels used says {'covered' if tp + fn else 'not covered'}, so κ is 0 "
                 "whatever the matcher decides (chance agreement is then the observed agreement)")
    return [None if n else "no labels",
            None if tp + fn and fp + tn else one_class,
            None if tp + fp else "the matcher said covered for none of the labelled pairs",
            None if tp + fn else "no label says covered"]


def _kept(nuggets: NuggetSet, runs: Mapping[str, Mapping[str, str]], labels: Sequence[Label],
          index: Mapping[tuple[str, str], Nugget]) -> tuple[list[Label], dict[str, int]]:
    unmapped: dict[str, int] = {}
    kept: list[Label] = []
    for turn, run, nugget_id, label in labels:
        reason = ("turn not in the nuggets" if turn not in nuggets.by_turn
                  else "nugget id not in the nuggets" if (turn, nugget_id) not in index
                  else "run not in the responses" if run not in runs
                  else "the run has no response for the turn" if turn not in runs[run] else None)
        if reason is None:
            kept.append((turn, run, nugget_id, label))
        else:
            unmapped[reason] = unmapped.get(reason, 0) + 1
    return kept, unmapped


def agreement(nuggets: NuggetSet, runs: Mapping[str, Mapping[str, str]], labels: HumanLabels | Sequence[Label],
              matcher: str, settings: MatcherSettings | None = None, *, folds: int = 5, seed: int = 0,
              resamples: int = 1000, splits: int = 0) -> AgreementReport:
    """The matcher's agreement with ``labels`` (module doc)."""
    spec = MATCHERS.get(matcher)
    settings = (settings or MatcherSettings(matcher=matcher)).for_matcher(matcher)
    learned_model = getattr(settings.options, "learned_model", None)
    human = labels if isinstance(labels, HumanLabels) else HumanLabels(
        path="", layout="apcir", rows=tuple(LabelRow(*label) for label in labels))
    index = {(n.turn_id, n.nugget_id): n for items in nuggets.by_turn.values() for n in items}
    choices: list[dict[str, str]] = [{}] + [{alias: run} for alias, candidates in human.ambiguous.items()
                                            for run in candidates[1:]]
    resolutions = []
    for choice in choices:
        resolved, unmapped = human.resolved(choice)
        kept, missing = _kept(nuggets, runs, resolved, index)
        for why, count in missing.items():
            unmapped[why] = unmapped.get(why, 0) + count
        resolutions.append((choice, kept, unmapped))
    primary, unmapped = resolutions[0][1], dict(resolutions[0][2])
    if not primary:
        raise ApcirError(f"none of the {len(human.rows)} labels matches a nugget and a response: "
                         + "; ".join(f"{n} {why}" for why, n in unmapped.items()))
    needed = sorted({label[:3] for _, kept, _ in resolutions for label in kept})
    nested = spec.trained and not learned_model
    values, info = _values(nuggets, runs, needed, index, matcher, settings, nested)
    model_turns: set[str] = set()
    if spec.trained and learned_model:
        from apcir.evaluation.nuggets.learned import load_model

        model_turns = set(load_model(learned_model).trained_on.turns)

    def rows_of(kept: list[Label]) -> tuple[_Rows, int]:
        usable = [label for label in kept if values.get(label[:3]) is not None]
        return _Rows(keys=[label[:3] for label in usable], truth=np.array([label[3] == 1 for label in usable]),
                     turns=[label[0] for label in usable]), len(kept) - len(usable)

    rows, undecided = rows_of(primary)
    if undecided:
        unmapped["the matcher could not decide"] = undecided
    if not rows.keys:
        raise ApcirError("the matcher decided none of the labelled pairs")
    shared = sorted(model_turns & set(rows.turns))
    if shared:
        raise ApcirError(f"the learned model was trained on {len(shared)} of these labels' turns ({', '.join(shared[:3])}"
                         "): its figures on them would not be out-of-fold; measure it on other turns, or leave "
                         "--learned-model out (nested cross-validation)")
    fixed = not spec.thresholded or getattr(settings.options, "tau", None) is not None or spec.trained
    mode = "nested" if nested else "fixed" if fixed else "cv"
    fixed_tau = spec.tau(settings) if mode == "fixed" else 0.0

    def decide(r: _Rows, split_seed: int) -> tuple[np.ndarray, list[float], list[float], int]:
        if mode == "fixed":
            scores = np.array([float(values[k]) for k in r.keys])  # type: ignore[arg-type]
            return scores >= fixed_tau, [], [], 0
        k = min(folds, len(set(r.turns)))
        if mode == "nested":  # its own limit: at least 3 turns (a fold held out, 2 left for the inner folds)
            from apcir.evaluation.nuggets.learned import nested_cv, nested_problem

            problem = nested_problem(r.turns, folds, split_seed)
            if problem is not None:
                raise ApcirError(f"{problem}; label more turns, or measure a model trained on other turns "
                                 "(--learned-model FILE)")
            features = np.array([values[key] for key in r.keys])
            result = nested_cv(features, r.truth, r.turns, folds=folds, seed=split_seed)
            return result.decisions, result.taus, result.lambdas, k
        if k < 2:
            raise ApcirError(f"choosing τ by cross-validation needs labels on at least 2 turns (these are on {k}), "
                             "or give --tau")
        scores = np.array([float(values[key]) for key in r.keys])  # type: ignore[arg-type]
        fold = cv.row_folds(r.turns, k, split_seed)
        decisions = np.zeros(len(scores), dtype=bool)
        taus = []
        for j in range(k):
            held = fold == j
            cv.check_disjoint({t for t, h in zip(r.turns, held) if not h},
                                     {t for t, h in zip(r.turns, held) if h})
            tau = best_tau(scores[~held], r.truth[~held])
            taus.append(tau)
            decisions[held] = scores[held] >= tau
        return decisions, taus, [], k

    def spread_of(r: _Rows) -> Spread | None:
        if mode == "fixed" or splits < 2 or r.truth.all() or not r.truth.any():  # κ of one class is undefined
            return None
        kappas = np.array([kappa_of(decide(r, seed + s)[0], r.truth) for s in range(splits)])
        return Spread(splits=splits, low=float(kappas.min()), median=float(np.median(kappas)),
                      high=float(kappas.max()), sd=float(kappas.std(ddof=1)))

    decisions, taus, lambdas, k = decide(rows, seed)
    figures = _bootstrap(rows, decisions, resamples, seed)
    if taus and mode == "cv":
        info.tau = float(np.median(taus))
    alternatives = []
    if len(resolutions) > 1:
        for alias in human.ambiguous:
            for run in human.aliases[alias]:
                choice = {alias: run}
                kept = next(kept for c, kept, _ in resolutions if c == choice) if choice in choices[1:] else primary
                alt_rows, _ = rows_of(kept)
                alt_decisions = decide(alt_rows, seed)[0]
                alternatives.append(Alternative(alias=alias, run=run, used=len(alt_rows.keys),
                                                kappa=_bootstrap(alt_rows, alt_decisions, resamples, seed)[1]))
    return AgreementReport(
        matcher=info, labels=len(human.rows), used=len(rows.keys), turns=len(set(rows.turns)), unmapped=unmapped,
        layout=human.layout, mapping={a: list(r) for a, r in human.mapping().items()},
        positives=float(rows.truth.mean()), accuracy=figures[0], kappa=figures[1], precision=figures[2],
        recall=figures[3], folds=k, taus=taus, lambdas=lambdas, spread=spread_of(rows), alternatives=alternatives,
        resamples=resamples, seed=seed)


def _values(nuggets: NuggetSet, runs: Mapping[str, Mapping[str, str]], needed: list[tuple[str, str, str]],
            index: Mapping[tuple[str, str], Nugget], matcher: str, settings: MatcherSettings,
            nested: bool) -> tuple[dict[tuple[str, str, str], object], MatcherInfo]:
    """Each labelled (turn, run, nugget)'s score (the learned matcher without a model: its signals), in one pass."""
    if nested:
        from apcir.evaluation.nuggets.features import pair_features
        from apcir.evaluation.nuggets.learned import LearnedOptions

        encoder = settings.own(LearnedOptions).signals_encoder
        matrix = pair_features([(index[(t, n)], runs[r][t]) for t, r, n in needed], encoder)
        return {key: matrix[i] for i, key in enumerate(needed)}, MatcherInfo(name=matcher, tau=0.0)
    labelled = {(t, n) for t, _, n in needed}
    subset = NuggetSet(name=nuggets.name, by_turn={t: [n for n in items if (t, n.nugget_id) in labelled]
                                                   for t, items in nuggets.by_turn.items()})
    subset.by_turn = {t: v for t, v in subset.by_turn.items() if v}
    wanted = {r for _, r, _ in needed}
    scored, info = match(subset, {run: {t: runs[run][t] for t in runs[run] if t in subset.by_turn}
                                  for run in sorted(wanted)}, matcher, settings)
    position = {(t, n.nugget_id): i for t, items in subset.by_turn.items() for i, n in enumerate(items)}
    return {(t, r, n): scored[r][t][position[(t, n)]] for t, r, n in needed}, info


def _bootstrap(rows: _Rows, decisions: np.ndarray, resamples: int, seed: int) -> list[Figure]:
    """Accuracy, κ, precision and recall with 95% intervals from resampling turns."""
    turns = sorted(set(rows.turns))
    turn_row = {t: i for i, t in enumerate(turns)}
    counts = np.zeros((len(turns), 4))
    for turn, said, truly in zip(rows.turns, decisions, rows.truth):
        counts[turn_row[turn], (0 if said else 2) + (0 if truly else 1)] += 1  # tp, fp, fn, tn
    total = counts.sum(axis=0)
    point, why = _figures(total), _undefined(total)
    draws = np.random.default_rng(seed).integers(0, len(turns), size=(resamples, len(turns)))
    spread = np.array([_figures(counts[d].sum(axis=0)) for d in draws]) if resamples else np.zeros((0, 4))
    out = []
    for j in range(4):
        if why[j] is not None:
            out.append(Figure(value=None, low=None, high=None, why=why[j]))
            continue
        defined = spread[~np.isnan(spread[:, j]), j] if len(spread) else spread[:, j]
        if not len(defined):  # no resample (or none where it is defined): the point alone
            out.append(Figure(value=float(point[j]), low=float(point[j]), high=float(point[j])))
            continue
        low, high = np.percentile(defined, [2.5, 97.5])  # over the resamples where it is defined
        out.append(Figure(value=float(point[j]), low=float(low), high=float(high)))
    return out
