"""How a level's weights are chosen from the grid's scores: shrinkage toward the pooled weights, a
plateau-aware optimum, and the bootstrap evidence of how stable the choice is.

All of it reads the per-point, per-turn values a :class:`apcir.fusion.grid.GridSearch` already computed;
nothing here fuses a run again.

* **Shrinkage.** Level ℓ with turns T_ℓ out of all tuning turns T takes
  ``argmax_w Σ_{t∈T_ℓ} m_t(w) + λ·(|T_ℓ|/|T|)·Σ_{t∈T} m_t(w)``, i.e. the point maximising
  ``mean_ℓ(w) + λ·mean_T(w)``. λ = 0 is the paper's per-level argmax; a large λ gives the pooled
  (no-levels) argmax. λ is fixed, or chosen by an inner cross-validation by conversation over
  :data:`LAMBDAS` (the λ whose weights score best on the inner held-out turns; ties go to the larger λ,
  the simpler model).
* **Plateau.** Instead of the argmax: the plateau (the argmax's connected region of grid points within ε of
  the maximum, neighbours being one step apart), its centroid, and the plateau point nearest to it (so the
  chosen weights are a grid point whose objective is known exactly and within ε of the best). ε is fixed,
  or, per point, one bootstrap standard error of the point's objective difference from the argmax over the
  tuning turns (paired: the turns' own difficulty cancels; see :func:`paired_standard_errors`).
* **Evidence.** B bootstrap resamples of the tuning turns: per level, the 95% percentile interval of each
  chosen weight, and the share of resamples in which the level's own weights beat the pooled weights on
  the resample's out-of-bag turns of that level (λ and ε held at the values chosen on all turns).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from apcir.contract.weights import Evidence, LevelEvidence, Plateau, Selection
from apcir.errors import ApcirError
from apcir.fusion.folds import conversation_folds
from apcir.fusion.grid import SCORE_TOLERANCE, GridSearch, select_best
from apcir.ids import split_turn_id

LAMBDAS: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0)
"""The λ grid of the inner cross-validation (64: within a hair of the pooled weights on iKAT-sized levels)."""


class SelectionRule(BaseModel):
    """How the weights of a level are chosen from the grid (the default is the paper's: per-level argmax)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    shrinkage: float | Literal["cv"] = Field(
        0.0, description="λ: 0 = per-level argmax (the paper), large = the pooled weights, 'cv' = inner CV")
    select: Literal["argmax", "plateau"] = Field(
        "argmax", description="argmax, or the centroid of the points within epsilon of the maximum")
    epsilon: float | None = Field(
        None, ge=0, description="plateau width (objective units); None: per point, the bootstrap standard error "
                                "of its difference from the argmax")
    inner_folds: int = Field(5, ge=2, description="folds (by conversation) of the inner CV that chooses λ")
    bootstrap: int = Field(1000, ge=0, description="B: resamples of the tuning turns for the evidence (0: none)")
    seed: int = Field(0, ge=0, description="seed of the inner folds and the bootstraps")


@dataclass(frozen=True)
class Choice:
    """The chosen grid point of one level, with the plateau that gave it (if any)."""

    index: int
    plateau: Plateau | None = None
    epsilon: float | np.ndarray | None = None
    """The plateau width used (one number, or one per point), for the bootstrap to hold it fixed."""


class Surface:
    """A finished search's objective per turn and point, and the turns' conversations and levels."""

    def __init__(self, search: GridSearch, turns: Sequence[str], levels: Mapping[str, str]) -> None:
        self.search = search
        self.turns = list(turns)
        self.levels = [levels[t] for t in self.turns]
        self.rows = search.turn_index(self.turns)
        self.compositions = search.compositions
        self.weights = search.weights

    def objective(self) -> np.ndarray:
        """(T, P): each turn's objective (the sum of the measures) at every point, cached on first use."""
        if not hasattr(self, "_objective"):
            self._objective = self.search.values[self.rows].sum(axis=2)
        return self._objective

    def neighbours(self) -> np.ndarray:
        """The grid's neighbour table (:func:`grid_neighbours`), computed once per search."""
        cached = getattr(self.search, "_neighbours", None)
        if cached is None:
            cached = grid_neighbours(self.compositions)
            self.search._neighbours = cached  # type: ignore[attr-defined]
        return cached

    def scores(self, turns: Sequence[str]) -> np.ndarray:
        """The objective (sum of the measures' means over ``turns``) at every point, as the tuning reports it."""
        return np.asarray(self.search.means(turns).sum(axis=1))


def choose(surface: Surface, scores: np.ndarray, allowed: np.ndarray | None, rule: SelectionRule,
           epsilon: float | np.ndarray | None) -> Choice:
    """The point ``rule.select`` picks on ``scores``; ``epsilon``: the plateau width (one number, or one per point).

    The plateau is the argmax's connected region of points within ε of the maximum: grid neighbours (one
    step moved between two weights) within ε, and theirs, and so on. A point as good but on another hill is
    not on this plateau, so the centroid cannot fall between two hills."""
    if rule.select == "argmax":
        return Choice(select_best(surface.compositions, scores, allowed))
    assert epsilon is not None
    eligible = np.ones(len(scores), dtype=bool) if allowed is None else np.asarray(allowed, dtype=bool)
    if not eligible.any():
        raise ApcirError("no grid point satisfies the constraint")
    best = select_best(surface.compositions, scores, allowed)
    within = eligible & (scores >= scores[best] - epsilon - SCORE_TOLERANCE)
    plateau = connected(surface.neighbours(), within, best)
    centroid = surface.weights[plateau].mean(axis=0)
    distance = ((surface.weights - centroid) ** 2).sum(axis=1)
    index = select_best(surface.compositions, -distance, plateau)
    width = float(np.max(np.broadcast_to(epsilon, scores.shape)[plateau]))
    return Choice(index, Plateau(epsilon=width, points=int(plateau.sum()), centroid=[float(c) for c in centroid]),
                  epsilon)


def grid_neighbours(compositions: np.ndarray) -> np.ndarray:
    """(P, k·(k-1)): each point's neighbours, one unit moved from one weight to another (-1: off the simplex)."""
    index = {tuple(int(x) for x in c): i for i, c in enumerate(compositions)}
    parts = compositions.shape[1]
    moves = [(i, j) for i in range(parts) for j in range(parts) if i != j]
    out = np.full((len(compositions), len(moves)), -1, dtype=np.int64)
    for p, composition in enumerate(compositions):
        for m, (i, j) in enumerate(moves):
            if composition[j] > 0:
                moved = [int(x) for x in composition]
                moved[i] += 1
                moved[j] -= 1
                out[p, m] = index.get(tuple(moved), -1)
    return out


def connected(neighbours: np.ndarray, members: np.ndarray, start: int) -> np.ndarray:
    """The points of ``members`` reachable from ``start`` through neighbours in ``members`` (a boolean mask)."""
    reached = np.zeros(len(members), dtype=bool)
    reached[start] = True
    frontier = np.array([start])
    while frontier.size:
        candidates = np.unique(neighbours[frontier].ravel())
        candidates = candidates[candidates >= 0]
        candidates = candidates[members[candidates] & ~reached[candidates]]
        reached[candidates] = True
        frontier = candidates
    return reached


def combined_scores(surface: Surface, level_turns: Sequence[str], pooled: np.ndarray, lam: float) -> np.ndarray:
    """``mean_ℓ(w) + λ·mean_T(w)`` at every point (exactly the level's scores when λ = 0)."""
    own = surface.scores(level_turns)
    return own if lam == 0 else own + lam * pooled


def paired_standard_errors(surface: Surface, level_turns: Sequence[str], all_turns: Sequence[str], best: int,
                           lam: float) -> np.ndarray:
    """Per point, the bootstrap standard error of its objective's difference from the argmax ``best``.

    The objective ``mean_ℓ(w) + λ·mean_T(w)`` is ``Σ_t a_t·m_t(w)`` over the turns that enter it (the level's
    when λ = 0, all when λ > 0); resampling those n turns with replacement, the standard error of
    ``Σ_t a_t·(m_t(p) - m_t(best))`` is ``√n · sd(a_t·(m_t(p) - m_t(best)))`` (population sd): the bootstrap's
    B → ∞ value in closed form, so no Monte Carlo noise and no cost per resample. Paired, because what varies
    between two weight vectors is far smaller than what varies between turns.
    """
    support = list(all_turns) if lam > 0 else list(level_turns)
    mine = set(level_turns)
    coefficients = np.array([(1 / len(level_turns) if t in mine else 0.0) + (lam / len(all_turns) if lam else 0.0)
                             for t in support])
    objective = surface.objective()
    position = {t: i for i, t in enumerate(surface.turns)}
    values = objective[[position[t] for t in support]]
    differences = coefficients[:, None] * (values - values[:, [best]])
    return np.sqrt(len(support)) * differences.std(axis=0)


def level_choice(surface: Surface, level_turns: Sequence[str], all_turns: Sequence[str], pooled: np.ndarray,
                 allowed: np.ndarray | None, lam: float, rule: SelectionRule) -> Choice:
    """One level's point under ``rule`` with shrinkage ``lam``."""
    scores = combined_scores(surface, level_turns, pooled, lam)
    epsilon: float | np.ndarray | None = rule.epsilon
    if rule.select == "plateau" and epsilon is None:
        best = select_best(surface.compositions, scores, allowed)
        epsilon = paired_standard_errors(surface, level_turns, all_turns, best, lam)
    return choose(surface, scores, allowed, rule, epsilon)


def pooled_choice(surface: Surface, turns: Sequence[str], allowed: np.ndarray | None, rule: SelectionRule) -> Choice:
    """The one vector for every turn (no levels), under the same select rule."""
    return level_choice(surface, turns, turns, surface.scores(turns), allowed, 0.0, rule)


def inner_lambda(surface: Surface, turns: Sequence[str], levels: Mapping[str, str], allowed: np.ndarray | None,
                 rule: SelectionRule, min_turns: int) -> tuple[float, list[float], int]:
    """λ by inner cross-validation by conversation over ``turns``: (λ, held-out objective per λ, folds).

    Each inner fold's turns are scored with the weights of their level chosen on the other folds (a level
    with fewer than ``min_turns`` training turns uses the pooled weights); the λ with the best mean
    held-out objective wins, ties to the larger λ. Fewer than two conversations: λ = the largest of the grid.
    """
    conversations = {split_turn_id(t)[0] for t in turns}
    if len(conversations) < 2:
        return LAMBDAS[-1], [], 0
    k = min(rule.inner_folds, len(conversations))
    objective = surface.objective()
    row = {t: i for i, t in enumerate(surface.turns)}
    held_out = np.zeros(len(LAMBDAS))
    for fold in conversation_folds(turns, k, rule.seed):
        test = [t for t in turns if split_turn_id(t)[0] in set(fold)]
        train = [t for t in turns if split_turn_id(t)[0] not in set(fold)]
        pooled = surface.scores(train)
        fallback = pooled_choice(surface, train, allowed, rule).index
        for level in sorted({levels[t] for t in test}):
            level_test = [row[t] for t in test if levels[t] == level]
            level_train = [t for t in train if levels[t] == level]
            for j, lam in enumerate(LAMBDAS):
                if not level_train or len(level_train) < min_turns:
                    index = fallback
                else:
                    index = level_choice(surface, level_train, train, pooled, allowed, lam, rule).index
                held_out[j] += objective[level_test, index].sum()
    means = held_out / len(turns)
    best = max(j for j in range(len(LAMBDAS)) if means[j] >= means.max() - SCORE_TOLERANCE)  # ties: larger λ
    return LAMBDAS[best], [float(m) for m in means], k


def resolve_lambda(surface: Surface, turns: Sequence[str], levels: Mapping[str, str], allowed: np.ndarray | None,
                   rule: SelectionRule, min_turns: int) -> Selection:
    """λ (fixed or by inner CV) and how it was obtained, for ``weights.json``."""
    epsilon = ("per point, one bootstrap standard error of its objective's difference from the argmax (paired, "
               "over the tuning turns; each level's plateau.epsilon is the widest used)"
               if rule.epsilon is None else f"fixed {rule.epsilon:g}")
    common = {"select": rule.select, "epsilon": epsilon if rule.select == "plateau" else "",
              "seed": rule.seed}
    if rule.shrinkage == "cv":
        lam, held, folds = inner_lambda(surface, turns, levels, allowed, rule, min_turns)
        return Selection(shrinkage=lam, shrinkage_by="inner cross-validation by conversation" if folds else
                         "the largest of the grid (one conversation: no inner cross-validation)",
                         grid=list(LAMBDAS), held_out=held, inner_folds=folds, **common)
    return Selection(shrinkage=float(rule.shrinkage),
                     shrinkage_by="fixed (0: the paper's per-level argmax)" if rule.shrinkage == 0 else "fixed",
                     **common)


def evidence(surface: Surface, turns: Sequence[str], levels: Mapping[str, str], allowed: np.ndarray | None,
             rule: SelectionRule, lam: float, epsilons: Mapping[str, float | np.ndarray | None],
             min_turns: int) -> Evidence | None:
    """The bootstrap evidence per level (see the module doc); ``None`` when ``rule.bootstrap`` is 0."""
    if rule.bootstrap == 0:
        return None
    objective = surface.objective()
    position = {t: i for i, t in enumerate(surface.turns)}
    rows = np.array([position[t] for t in turns], dtype=np.int64)
    table = objective[rows]  # (T, P) in the order of ``turns``
    n = len(turns)
    rng = np.random.default_rng(rule.seed)
    counts = rng.multinomial(n, np.full(n, 1.0 / n), size=rule.bootstrap).astype(np.float64)  # (B, T)
    pooled_means = counts @ table / n
    pooled_index = np.array([_pick(surface, pooled_means[b], allowed, rule, epsilons.get("all"))
                             for b in range(rule.bootstrap)])
    out: dict[str, LevelEvidence] = {}
    for level in sorted({levels[t] for t in turns}):
        mask = np.array([levels[t] == level for t in turns])
        level_counts = counts[:, mask]
        in_bag = level_counts.sum(axis=1)
        valid = (in_bag >= max(1, min_turns)) & ((level_counts == 0).any(axis=1))
        level_means = np.divide(level_counts @ table[mask], in_bag[:, None], out=np.zeros((len(counts), table.shape[1])),
                                where=in_bag[:, None] > 0)
        chosen, wins, ties = [], 0, 0
        for b in np.flatnonzero(valid):
            scores = level_means[b] if lam == 0 else level_means[b] + lam * pooled_means[b]
            index = _pick(surface, scores, allowed, rule, epsilons.get(level))
            chosen.append(index)
            held = table[mask][level_counts[b] == 0]
            own, pooled = held[:, index].sum(), held[:, pooled_index[b]].sum()
            wins += own > pooled + SCORE_TOLERANCE
            ties += abs(own - pooled) <= SCORE_TOLERANCE
        used = len(chosen)
        if used == 0:
            out[level] = LevelEvidence(resamples=0, note=f"no resample left both in-bag and out-of-bag turns of "
                                                         f"level {level}")
            continue
        points = surface.weights[np.array(chosen)]
        low, high = np.quantile(points, [0.025, 0.975], axis=0, method="inverted_cdf")  # grid values
        unique, frequency = np.unique(surface.compositions[np.array(chosen)], axis=0, return_counts=True)
        divisions = int(surface.compositions[0].sum())
        out[level] = LevelEvidence(
            resamples=used, intervals=[[float(a), float(b)] for a, b in zip(low, high)],
            beats_pooled=wins / used, ties_pooled=ties / used,
            points=[[*(float(c) / divisions for c in u), float(f)] for u, f in zip(unique, frequency)])
    return Evidence(resamples=rule.bootstrap, seed=rule.seed, shrinkage=lam, levels=out)


def _pick(surface: Surface, scores: np.ndarray, allowed: np.ndarray | None, rule: SelectionRule,
          epsilon: float | np.ndarray | None) -> int:
    if rule.select == "plateau" and epsilon is None:
        epsilon = 0.0
    return choose(surface, scores, allowed, rule, epsilon).index
