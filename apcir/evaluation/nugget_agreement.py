"""How far a matcher's covered/not-covered decisions are from people's: accuracy, Cohen's κ, and precision and
recall of "covered", each with a bootstrap 95% interval (resampling turns), and τ chosen without peeking.

**Labels** are one human decision per (turn, run, nugget). apcir reads them as JSONL
``{"turn_id", "run", "nugget_id", "label"}`` or as TSV ``turn_id<TAB>run<TAB>nugget_id<TAB>label`` (an
optional header line), ``label`` 1/0, yes/no or true/false. A label whose turn, run or nugget is not in the
nuggets and responses given is not used, and the report counts such rows by reason; none is dropped silently.

**τ** of a thresholded matcher is chosen by cross-validation over turns (k folds, seeded): on the training
folds' labels, the τ maximising κ among the midpoints between their distinct scores; the held-out fold's
decisions use it, and every figure is out-of-fold. κ, not accuracy: most labels are 0, and the τ maximising
accuracy tends to "never covered".
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from apcir.errors import ApcirError
from apcir.evaluation.nugget_matchers import MATCHERS, MatcherSettings
from apcir.evaluation.nugget_scores import MatcherInfo, match
from apcir.evaluation.nuggets import NuggetSet
from apcir.ids import canonical_turn_id
from apcir.io import iter_lines

Label = tuple[str, str, str, int]
"""(turn_id, run, nugget_id, 0 or 1)."""

_TRUE, _FALSE = {"1", "yes", "true", "y"}, {"0", "no", "false", "n"}


def load_labels(path: str | Path) -> list[Label]:
    """Human labels from JSONL or TSV (module doc); a malformed line is an error naming it."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ApcirError("labels file not found", path=path)
    labels: list[Label] = []
    for number, line in iter_lines(path, "labels file"):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        if path.suffix == ".jsonl":
            try:
                row = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ApcirError(f"not JSON: {exc.msg}", path=path, line=number) from None
            if not isinstance(row, dict) or not {"turn_id", "run", "nugget_id", "label"} <= set(row):
                raise ApcirError('expected {"turn_id", "run", "nugget_id", "label"}', path=path, line=number)
            fields = [str(row["turn_id"]), str(row["run"]), str(row["nugget_id"]), str(row["label"])]
        else:
            fields = text.split("\t")
            if len(fields) != 4:
                raise ApcirError(f"expected turn_id<TAB>run<TAB>nugget_id<TAB>label, found {len(fields)} field(s)",
                                 path=path, line=number)
            if number == 1 and fields[0].lower() in {"turn_id", "turn", "qid"}:
                continue
        value = fields[3].strip().lower()
        if value not in _TRUE | _FALSE:
            raise ApcirError(f"label {fields[3]!r} is not 1/0, yes/no or true/false", path=path, line=number)
        try:
            turn = canonical_turn_id(fields[0].strip())
        except ApcirError as exc:
            raise ApcirError(exc.message, path=path, line=number) from None
        labels.append((turn, fields[1].strip(), fields[2].strip().strip("[]"), 1 if value in _TRUE else 0))
    if not labels:
        raise ApcirError("no labels in the file", path=path)
    return labels


class Figure(BaseModel):
    value: float
    low: float
    high: float


class AgreementReport(BaseModel):
    matcher: MatcherInfo
    labels: int = Field(description="labels read")
    used: int = Field(description="labels matched to a nugget and a response")
    unmapped: dict[str, int] = Field(default_factory=dict, description="labels not used, by reason")
    positives: float = Field(description="share of used labels that say covered")
    accuracy: Figure
    kappa: Figure
    precision: Figure
    recall: Figure
    folds: int = 0
    taus: list[float] = Field(default_factory=list, description="τ chosen on each fold's training turns")
    resamples: int = 1000
    seed: int = 0


def cohen_kappa(tp: float, fp: float, fn: float, tn: float) -> float:
    """Cohen's κ of a 2x2 table (0 when chance agreement is total)."""
    n = tp + fp + fn + tn
    if n == 0:
        return 0.0
    observed = (tp + tn) / n
    chance = ((tp + fp) * (tp + fn) + (fn + tn) * (fp + tn)) / (n * n)
    return 0.0 if chance >= 1 else (observed - chance) / (1 - chance)


def _figures(counts: np.ndarray) -> tuple[float, float, float, float]:
    """(accuracy, κ, precision, recall) of summed per-turn counts [tp, fp, fn, tn]."""
    tp, fp, fn, tn = counts
    n = tp + fp + fn + tn
    return ((tp + tn) / n if n else 0.0, cohen_kappa(tp, fp, fn, tn), tp / (tp + fp) if tp + fp else 0.0,
            tp / (tp + fn) if tp + fn else 0.0)


def best_tau(scores: np.ndarray, truth: np.ndarray) -> float:
    """The τ maximising κ on (scores, truth): midpoints between distinct scores, ties to the larger τ."""
    values = np.unique(scores)
    candidates = np.concatenate([[values[0] - 1e-9], (values[:-1] + values[1:]) / 2, [values[-1] + 1e-9]])
    best, chosen = -np.inf, float(candidates[0])
    for tau in candidates:
        covered = scores >= tau
        kappa = cohen_kappa(float((covered & truth).sum()), float((covered & ~truth).sum()),
                            float((~covered & truth).sum()), float((~covered & ~truth).sum()))
        if kappa >= best - 1e-12:
            best, chosen = kappa, float(tau)
    return chosen


def agreement(nuggets: NuggetSet, runs: Mapping[str, Mapping[str, str]], labels: Sequence[Label], matcher: str,
              settings: MatcherSettings | None = None, *, folds: int = 5, seed: int = 0,
              resamples: int = 1000) -> AgreementReport:
    """The matcher's agreement with ``labels`` (module doc)."""
    settings = settings or MatcherSettings()
    spec = MATCHERS.get(matcher)
    index = {(n.turn_id, n.nugget_id): n for items in nuggets.by_turn.values() for n in items}
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
    if not kept:
        raise ApcirError(f"none of the {len(labels)} labels matches a nugget and a response: "
                         + "; ".join(f"{n} {why}" for why, n in unmapped.items()))
    labelled = {(turn, nugget_id) for turn, _, nugget_id, _ in kept}
    by_turn = {t: [n for n in items if (t, n.nugget_id) in labelled] for t, items in nuggets.by_turn.items()}
    subset = NuggetSet(name=nuggets.name, by_turn={t: v for t, v in by_turn.items() if v})
    scored, info = match(subset, {run: {t: runs[run][t] for t in runs[run] if t in subset.by_turn}
                                  for run in {k[1] for k in kept}}, matcher, settings)
    position = {(t, n.nugget_id): i for t, items in subset.by_turn.items() for i, n in enumerate(items)}
    rows = [(turn, scored[run][turn][position[(turn, nugget_id)]], label) for turn, run, nugget_id, label in kept]
    undecided = sum(1 for _, s, _ in rows if s is None)
    if undecided:
        unmapped["the matcher could not decide"] = undecided
        rows = [r for r in rows if r[1] is not None]
    turns = sorted({r[0] for r in rows})
    truth = np.array([r[2] == 1 for r in rows])
    scores = np.array([float(r[1]) for r in rows])  # type: ignore[arg-type]
    decisions = np.zeros(len(rows), dtype=bool)
    taus: list[float] = []
    k = 0
    if spec.thresholded and settings.tau is None:
        k = min(folds, len(turns))
        if k < 2:
            raise ApcirError("choosing τ by cross-validation needs labels on at least 2 turns (or give --tau)")
        order = np.random.default_rng(seed).permutation(len(turns))
        fold_of = {turns[i]: position_ % k for position_, i in enumerate(order)}
        turn_fold = np.array([fold_of[r[0]] for r in rows])
        for fold in range(k):
            train = turn_fold != fold
            tau = best_tau(scores[train], truth[train])
            taus.append(tau)
            decisions[~train] = scores[~train] >= tau
        info.tau = float(np.median(taus))
    else:
        decisions = scores >= spec.tau(settings)
    # per-turn confusion counts, then a bootstrap over turns
    turn_row = {t: i for i, t in enumerate(turns)}
    counts = np.zeros((len(turns), 4))
    for (turn, _, _), said, truly in zip(rows, decisions, truth):
        counts[turn_row[turn], (0 if said else 2) + (0 if truly else 1)] += 1  # tp, fp, fn, tn
    point = _figures(counts.sum(axis=0))
    draws = np.random.default_rng(seed).integers(0, len(turns), size=(resamples, len(turns)))
    spread = np.array([_figures(counts[d].sum(axis=0)) for d in draws]) if resamples else np.zeros((0, 4))

    def figure(j: int) -> Figure:
        if not len(spread):
            return Figure(value=point[j], low=point[j], high=point[j])
        low, high = np.percentile(spread[:, j], [2.5, 97.5])
        return Figure(value=point[j], low=float(low), high=float(high))

    return AgreementReport(matcher=info, labels=len(labels), used=len(rows), unmapped=unmapped,
                           positives=float(truth.mean()), accuracy=figure(0), kappa=figure(1), precision=figure(2),
                           recall=figure(3), folds=k, taus=taus, resamples=resamples, seed=seed)
