"""The ``learned`` matcher: a logistic regression over the signals of :mod:`apcir.evaluation.nuggets.features`,
fitted on human labels, covered at a probability >= τ.

Its settings (the L2 strength λ and τ) are chosen by cross-validation over turns on the training labels; its
agreement with people is measured by *nested* cross-validation: each outer fold's turns are held out, λ and τ
are chosen by an inner cross-validation on the other turns, the model is fitted on those, and only then scores
the held-out turns. Every split is checked: a turn both trained on and evaluated is an error, never a figure.

apcir ships no weights: the labels it was measured on (the iKAT 2024 human study) carry no licence. ``apcir
nuggets train`` fits a model on a user's own copy and writes it as JSON (:class:`LearnedModel`), which
``--matcher learned --learned-model FILE`` then uses.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from scipy.optimize import minimize

from apcir.errors import ApcirError
from apcir.evaluation.nuggets import cv
from apcir.evaluation.nuggets.cv import best_tau, check_disjoint, kappa_of
from apcir.evaluation.nuggets.features import FEATURES, IDF_CORPUS, pair_features
from apcir.evaluation.nuggets.matchers import EmbeddingOptions, Pair, ThresholdOptions
from apcir.io import read_json, write_text

LAMBDAS = (0.1, 1.0, 10.0, 100.0)
"""The L2 strengths cross-validation chooses among."""
FORMAT = "apcir-learned-matcher/1"


@dataclass(frozen=True)
class Logistic:
    """A fitted logistic regression on standardised signals."""

    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    intercept: float

    def predict(self, features: np.ndarray) -> np.ndarray:
        z = self.intercept + (((features - self.mean) / self.scale) * self.weights).sum(axis=1)
        return np.asarray(1.0 / (1.0 + np.exp(-z)))


def fit_logistic(features: np.ndarray, truth: np.ndarray, lam: float) -> Logistic:
    """L2-penalised logistic regression (the intercept unpenalised), fitted by L-BFGS.

    The products are numpy's element-wise products and sums, not matrix products: a matrix product goes to BLAS,
    whose threads may split a sum differently from one machine's thread count to another's; a trained model is
    meant to be the same bytes every time (docs/guide/responses.md)."""
    mean = features.mean(axis=0)
    scale = features.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    z = np.column_stack([np.ones(len(features)), (features - mean) / scale])
    y = truth.astype(np.float64)

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        margin = (z * w).sum(axis=1)
        value = float((np.logaddexp(0.0, margin) - y * margin).sum() + lam * (w[1:] * w[1:]).sum() / 2)
        residual = 1.0 / (1.0 + np.exp(-margin)) - y
        gradient = (z * residual[:, None]).sum(axis=0) + lam * np.concatenate([[0.0], w[1:]])
        return value, gradient

    w = minimize(loss, np.zeros(z.shape[1]), jac=True, method="L-BFGS-B").x
    return Logistic(mean=mean, scale=scale, weights=w[1:], intercept=float(w[0]))


def choose_settings(features: np.ndarray, truth: np.ndarray, turns: Sequence[str], *, folds: int = 4, seed: int = 0,
                    lambdas: Sequence[float] = LAMBDAS) -> tuple[float, float, float]:
    """(λ, τ, κ): for each λ, out-of-fold probabilities over ``folds`` folds of turns and the τ maximising κ on
    them; the λ with the best κ."""
    turns = list(turns)
    k = min(folds, len(set(turns)))
    if k < 2:
        raise ApcirError("training the learned matcher needs labels on at least 2 turns")
    fold = cv.row_folds(turns, k, seed)
    best: tuple[float, float, float] | None = None
    for lam in lambdas:
        scores = np.zeros(len(truth))
        for j in range(k):
            held = fold == j
            check_disjoint([t for t, h in zip(turns, held) if not h], [t for t, h in zip(turns, held) if h])
            scores[held] = fit_logistic(features[~held], truth[~held], lam).predict(features[held])
        tau = best_tau(scores, truth)
        kappa = kappa_of(scores >= tau, truth)
        if best is None or kappa > best[2] + 1e-12:
            best = (lam, tau, kappa)
    assert best is not None
    return best


@dataclass(frozen=True)
class NestedResult:
    scores: np.ndarray
    """Each row's out-of-fold probability."""
    decisions: np.ndarray
    lambdas: list[float]
    taus: list[float]


def nested_problem(turns: Sequence[str], folds: int, seed: int) -> str | None:
    """Why nested cross-validation over ``folds`` folds of these turns cannot run, or None: every outer fold's
    training turns must leave at least 2 turns for the inner cross-validation that chooses λ and τ (so at least 3
    turns in all, and with few turns, enough folds)."""
    distinct = sorted(set(turns))
    if len(distinct) < 3:
        return (f"measuring the learned matcher by nested cross-validation needs labels on at least 3 turns (these "
                f"are on {len(distinct)}: {', '.join(distinct)}): each outer fold holds a turn out, and the inner "
                "cross-validation that chooses λ and τ needs 2 of the turns left")
    k = min(folds, len(distinct))
    fold = cv.row_folds(list(distinct), k, seed)
    for j in range(k):
        left = int((fold != j).sum())
        if left < 2:
            return (f"nested cross-validation over {k} folds of {len(distinct)} turns trains outer fold {j + 1} on "
                    f"{left} turn; the inner cross-validation that chooses λ and τ needs 2: give --folds "
                    f"{len(distinct)} or labels on more turns")
    return None


def nested_cv(features: np.ndarray, truth: np.ndarray, turns: Sequence[str], *, folds: int = 5, seed: int = 0,
              inner_folds: int = 4) -> NestedResult:
    """Out-of-fold decisions of the learned matcher (module doc): no row is scored by a model whose training,
    or whose choice of λ and τ, saw its turn."""
    turns = list(turns)
    problem = nested_problem(turns, folds, seed)
    if problem is not None:
        raise ApcirError(problem)
    k = min(folds, len(set(turns)))
    fold = cv.row_folds(turns, k, seed)
    scores = np.zeros(len(truth))
    decisions = np.zeros(len(truth), dtype=bool)
    lambdas, taus = [], []
    for j in range(k):
        held = fold == j
        train_turns = [t for t, h in zip(turns, held) if not h]
        check_disjoint(train_turns, [t for t, h in zip(turns, held) if h])
        lam, tau, _ = choose_settings(features[~held], truth[~held], train_turns, folds=inner_folds, seed=seed + 1)
        scores[held] = fit_logistic(features[~held], truth[~held], lam).predict(features[held])
        decisions[held] = scores[held] >= tau
        lambdas.append(lam)
        taus.append(tau)
    return NestedResult(scores=scores, decisions=decisions, lambdas=lambdas, taus=taus)


class LearnedOptions(ThresholdOptions):
    """The learned matcher's options: its model file, and (without one) the bi-encoder of its cosine signal."""

    learned_model: str | None = Field(None, description="the model file apcir nuggets train wrote (apcir nuggets "
                                                        "agreement without one: nested cross-validation)")
    encoder: str | None = Field(None, description="without learned_model only (apcir nuggets agreement's nested "
                                                  "cross-validation): the bi-encoder of the cosine signal (default "
                                                  "minilm); a model file names its own")

    @classmethod
    def unread_with(cls, given: Mapping[str, Any]) -> frozenset[str]:
        return frozenset({"encoder"}) if given.get("learned_model") else frozenset()

    @model_validator(mode="after")
    def _encoder_without_a_model(self) -> LearnedOptions:
        if self.encoder is not None and self.learned_model is not None:
            raise ValueError("encoder: not used by the learned nugget matcher with a model file (learned_model names "
                             "the encoder it was trained with); embedding reads it, and learned without a model "
                             "(apcir nuggets agreement); remove it")
        return self

    @property
    def signals_encoder(self) -> str:
        """The bi-encoder of the cosine signal when no model file names one (the embedding matcher's default)."""
        return self.encoder or str(EmbeddingOptions.model_fields["encoder"].default)


# ---- the model file ------------------------------------------------------------------------------------------
class TrainedOn(BaseModel):
    labels_file: str = Field(description="the labels file's name (not its path)")
    labels_sha256: str
    labels: int
    positives: int
    turns: list[str] = Field(description="the turns trained on: figures on them are not out-of-fold")


class LearnedModel(BaseModel):
    """What ``apcir nuggets train`` writes: the fitted regression, its τ, and what it was trained on. Every number
    is finite (a NaN or an infinity, which JSON as Python writes it can hold, would score every pair NaN, covered
    by no τ: the file is refused, naming the field) and every scale positive (it divides)."""

    model_config = ConfigDict(allow_inf_nan=False)

    format: Literal["apcir-learned-matcher/1"] = "apcir-learned-matcher/1"
    features: list[str]
    encoder: str = Field(description="the bi-encoder of the cosine signal")
    idf_corpus: str = IDF_CORPUS
    mean: list[float]
    scale: list[float]
    weights: list[float]
    intercept: float
    lam: float
    tau: float
    trained_on: TrainedOn
    nested_kappa: float | None = Field(None, description="κ of nested cross-validation over the training turns")

    @field_validator("scale")
    @classmethod
    def _positive(cls, value: list[float]) -> list[float]:
        bad = [i for i, v in enumerate(value) if v <= 0]
        if bad:
            raise ValueError(f"scale {value[bad[0]]!r} at position {bad[0]} is not positive (it divides the signal)")
        return value

    def logistic(self) -> Logistic:
        return Logistic(mean=np.array(self.mean), scale=np.array(self.scale), weights=np.array(self.weights),
                        intercept=self.intercept)


def train_model(features: np.ndarray, truth: np.ndarray, turns: Sequence[str], *, encoder: str, labels_path: Path,
                folds: int = 5, seed: int = 0) -> LearnedModel:
    """λ and τ by cross-validation over all the labelled turns, then one fit on all of them; its nested
    cross-validation κ when the turns allow one (:func:`nested_problem`; otherwise None)."""
    if truth.all() or not truth.any():
        raise ApcirError(f"training the learned matcher needs labels of both kinds: all {len(truth)} labels used say "
                         f"{'covered' if truth.any() else 'not covered'}", path=labels_path)
    lam, tau, _ = choose_settings(features, truth, turns, folds=folds, seed=seed)
    fitted = fit_logistic(features, truth, lam)
    nested = None if nested_problem(turns, folds, seed) else nested_cv(features, truth, turns, folds=folds, seed=seed)
    return LearnedModel(
        features=list(FEATURES), encoder=encoder, mean=fitted.mean.tolist(), scale=fitted.scale.tolist(),
        weights=fitted.weights.tolist(), intercept=fitted.intercept, lam=lam, tau=tau,
        trained_on=TrainedOn(labels_file=labels_path.name,
                             labels_sha256=hashlib.sha256(labels_path.read_bytes()).hexdigest(),
                             labels=len(truth), positives=int(truth.sum()), turns=sorted(set(turns))),
        nested_kappa=kappa_of(nested.decisions, truth) if nested is not None else None)


def save_model(path: Path, model: LearnedModel) -> None:
    write_text(path, model.model_dump_json(indent=1))


def load_model(path: str | Path) -> LearnedModel:
    """A model file ``apcir nuggets train`` wrote; anything else is one line naming the file."""
    path = Path(path).expanduser()
    data = read_json(path, "learned matcher model")
    try:
        model = LearnedModel.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        given = first.get("input")
        got = f" (got {given!r})" if isinstance(given, float) else ""
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ApcirError(f"not a learned matcher model (apcir nuggets train writes one): {where}: {message}{got}",
                         path=path) from None
    if model.features != list(FEATURES) or not (len(model.mean) == len(model.scale) == len(model.weights)
                                                 == len(FEATURES)):
        raise ApcirError(f"the model's signals {model.features} are not this apcir's {list(FEATURES)}: train it "
                         "again with apcir nuggets train", path=path)
    return model


@dataclass
class LearnedMatcher:
    """Scores a pair with a trained model's probability that people would say covered."""

    model: LearnedModel

    def scores(self, pairs: Sequence[Pair]) -> list[float | None]:
        if not pairs:
            return []
        features = pair_features(pairs, self.model.encoder)
        return [float(p) for p in self.model.logistic().predict(features)]
