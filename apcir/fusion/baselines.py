"""The paper's baselines and ablations (Tables 2 and 4), all returning a fused run.

Weight baselines go through :func:`apcir.fusion.linear.fuse_per_turn` with
the same normalisation, fusion arithmetic, tie order and depth cut as the
tuned fusion. Entropy and DEPS give only the personalisation weight w3; the
other two weights share the rest equally (``w1 = w2 = (1 - w3) / 2``), as the
paper does not say how to split it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from apcir.contract.records import Run
from apcir.contract.runs import trec_order
from apcir.errors import ApcirError
from apcir.fusion.linear import align_runs, check_runs, fuse_per_turn

Encoder = Callable[[list[str]], np.ndarray]


def single_list(runs: Sequence[Run], index: int, *, norm: str = "minmax", depth: int = 1000) -> Run:
    """List ``index`` alone (weight 1 on it, 0 on the others)."""
    check_runs(runs)
    if not 0 <= index < len(runs):
        raise ApcirError(f"list {index + 1} does not exist: {len(runs)} runs were given")
    vector = tuple(1.0 if i == index else 0.0 for i in range(len(runs)))
    return fuse_per_turn(runs, dict.fromkeys(align_runs(runs).turns, vector), norm=norm, depth=depth)


def equal_weights(runs: Sequence[Run], *, norm: str = "minmax", depth: int = 1000) -> Run:
    """Every list weighted 1/N."""
    check_runs(runs)
    vector = tuple(1.0 / len(runs) for _ in runs)
    return fuse_per_turn(runs, dict.fromkeys(align_runs(runs).turns, vector), norm=norm, depth=depth)


def random_weights(runs: Sequence[Run], seed: int = 0) -> dict[str, tuple[float, ...]]:
    """Per-turn weights drawn uniformly from [0, 1) and scaled to sum 1, seeded; turns in sorted order."""
    check_runs(runs)
    rng = np.random.default_rng(seed)
    weights = {}
    for turn in align_runs(runs).turns:
        draw = rng.random(len(runs))
        total = draw.sum()
        weights[turn] = (
            tuple(float(x / total) for x in draw)
            if total > 0
            else tuple(1.0 / len(runs) for _ in runs)
        )
    return weights


def random_fusion(
    runs: Sequence[Run], seed: int = 0, *, norm: str = "minmax", depth: int = 1000
) -> Run:
    """Random personalisation: each turn fused with seeded random weights."""
    return fuse_per_turn(runs, random_weights(runs, seed), norm=norm, depth=depth)


def split_third(w3: float, n_lists: int = 3) -> tuple[float, ...]:
    """A personalisation weight w3 for the last list; the others share 1 - w3 equally."""
    if not 0.0 <= w3 <= 1.0 or math.isnan(w3):
        raise ApcirError(f"personalisation weight {w3} is not in [0, 1]")
    rest = (1.0 - w3) / (n_lists - 1)
    return tuple([rest] * (n_lists - 1) + [w3])


def profile_entropy(statements: Sequence[str], encode: Encoder) -> float:
    """User-profile topic entropy (paper Sec. 5.3), the w3 of the user-based entropy baseline.

    Statement vectors are L2-normalised (so ``v_k . v_j`` is a cosine);
    ``p_k = (1 - mean_j v_k.v_j) / sum_i (1 - mean_j v_i.v_j)`` and
    ``w3 = -sum p_k log p_k / log K``. Fewer than two statements give 0 (no
    spread to measure); if all statements encode identically every ``p_k`` is
    taken as 1/K (w3 = 1, the limit of equally spread aspects).
    """
    k = len(statements)
    if k < 2:
        return 0.0
    vectors = _unit(np.asarray(encode(list(statements)), dtype=np.float64))
    similarity = vectors @ vectors.T
    spread = np.clip(1.0 - similarity.mean(axis=1), 0.0, None)
    total = spread.sum()
    p = spread / total if total > 0 else np.full(k, 1.0 / k)
    nonzero = p[p > 0]
    return float(min(1.0, max(0.0, -(nonzero * np.log(nonzero)).sum() / math.log(k))))


def entropy_weights(
    profiles: Mapping[str, Sequence[str]], encode: Encoder, n_lists: int = 3
) -> dict[str, tuple[float, ...]]:
    """Per-turn weights from each turn's profile statements (profiles are per conversation: cached)."""
    cache: dict[tuple[str, ...], float] = {}
    weights = {}
    for turn, statements in profiles.items():
        key = tuple(statements)
        if key not in cache:
            cache[key] = profile_entropy(key, encode)
        weights[turn] = split_third(cache[key], n_lists)
    return weights


def deps_from_vectors(personalised: np.ndarray, documents: np.ndarray) -> float:
    """DEPS (paper Sec. 5.3) on vectors: ``w3 = sigmoid(|| E(q^u + r^u) - E(D_agg) ||_2)``.

    ``documents`` (one row per passage retrieved for the non-personalised input
    ``q' + r'``) are L2-normalised and averaged into ``E(D_agg)``; the
    personalised vector is L2-normalised too, so the distance is in [0, 2] and
    w3 in [0.5, 0.88]. No documents: w3 = 0.5.
    """
    if documents.shape[0] == 0:
        return 0.5
    vectors = _unit(np.vstack([np.asarray(personalised, dtype=np.float64).reshape(1, -1),
                               np.asarray(documents, dtype=np.float64)]))
    distance = float(np.linalg.norm(vectors[0] - vectors[1:].mean(axis=0)))
    return 1.0 / (1.0 + math.exp(-distance))


def deps_weight(personalised: str, documents: Sequence[str], encode: Encoder) -> float:
    """DEPS on texts: encode the personalised input and the passages with ``encode`` (see :func:`deps_from_vectors`)."""
    if not documents:
        return 0.5
    vectors = np.asarray(encode([personalised, *documents]), dtype=np.float64)
    return deps_from_vectors(vectors[0], vectors[1:])


def deps_top(runs: Sequence[Run], turn: str, top: int = 10, non_personalised: int = 1) -> list[str]:
    """The passages DEPS reads for ``turn``: the first ``top`` of list ``non_personalised`` (0-based; q'+r')."""
    hits = runs[non_personalised].get(turn, {})
    ids = sorted(hits)
    values = np.array([hits[p] for p in ids], dtype=np.float64)
    return [ids[i] for i in trec_order(values)[:top]]


def deps_weights(
    personalised: Mapping[str, str],
    runs: Sequence[Run],
    passages: Mapping[str, str] | Callable[[str], str],
    encode: Encoder,
    *,
    top: int = 10,
    non_personalised: int = 1,
) -> dict[str, tuple[float, ...]]:
    """Per-turn DEPS weights from texts: the top ``top`` passages of list ``non_personalised`` (0-based; q'+r')."""
    check_runs(runs)
    text = passages if callable(passages) else passages.__getitem__
    weights = {}
    for turn in align_runs(runs).turns:
        if turn not in personalised:
            raise ApcirError(f"turn {turn}: no personalised query text for DEPS")
        try:
            documents = [text(pid) for pid in deps_top(runs, turn, top, non_personalised)]
        except KeyError as exc:
            raise ApcirError(
                f"turn {turn}: passage {exc.args[0]} is not in the collection given to DEPS"
            ) from None
        weights[turn] = split_third(deps_weight(personalised[turn], documents, encode), len(runs))
    return weights


def deps_weights_from_vectors(
    personalised: Mapping[str, np.ndarray],
    runs: Sequence[Run],
    passage_vectors: Callable[[list[str]], np.ndarray],
    *,
    top: int = 10,
    non_personalised: int = 1,
) -> dict[str, tuple[float, ...]]:
    """Per-turn DEPS weights from stored vectors: the personalised query as retrieved, the passages as indexed."""
    check_runs(runs)
    turns = align_runs(runs).turns
    tops = {turn: deps_top(runs, turn, top, non_personalised) for turn in turns}
    needed = sorted({pid for ids in tops.values() for pid in ids})
    row = {pid: i for i, pid in enumerate(needed)}
    matrix = passage_vectors(needed) if needed else np.zeros((0, 0))  # one look-up for every turn
    weights = {}
    for turn in turns:
        if turn not in personalised:
            raise ApcirError(f"turn {turn}: no personalised query vector for DEPS")
        documents = matrix[[row[pid] for pid in tops[turn]]] if tops[turn] else np.zeros((0, 0))
        weights[turn] = split_third(deps_from_vectors(personalised[turn], documents), len(runs))
    return weights


def rrf(runs: Sequence[Run], k: int = 60, depth: int = 1000) -> Run:
    """Reciprocal rank fusion: ``sum 1/(k + rank)`` over the lists (ranks in trec_eval's order)."""
    check_runs(runs)
    if k < 0:
        raise ApcirError(f"RRF k must be >= 0, got {k}")
    fused: Run = {}
    for turn in align_runs(runs).turns:
        scores: dict[str, float] = {}
        for run in runs:
            hits = run.get(turn, {})
            ids = sorted(hits)
            for rank, i in enumerate(
                trec_order(np.array([hits[p] for p in ids], dtype=np.float64)), start=1
            ):
                scores[ids[i]] = scores.get(ids[i], 0.0) + 1.0 / (k + rank)
        fused[turn] = _cut(scores, depth)
    return fused


def round_robin(runs: Sequence[Run], depth: int = 1000) -> Run:
    """Round-robin: rank 1 of each list in order, then rank 2, ...; a passage already taken is skipped.

    Scores are ``depth - position`` (distinct, so no ties).
    """
    check_runs(runs)
    fused: Run = {}
    for turn in align_runs(runs).turns:
        ranked = []
        for run in runs:
            hits = run.get(turn, {})
            ids = sorted(hits)
            ranked.append(
                [ids[i] for i in trec_order(np.array([hits[p] for p in ids], dtype=np.float64))]
            )
        taken: dict[str, float] = {}
        for position in range(max((len(r) for r in ranked), default=0)):
            for ranking in ranked:
                if (
                    position < len(ranking)
                    and ranking[position] not in taken
                    and len(taken) < depth
                ):
                    taken[ranking[position]] = float(depth - len(taken))
        fused[turn] = taken
    return fused


def _cut(scores: dict[str, float], depth: int) -> dict[str, float]:
    ids = sorted(scores)
    values = np.array([scores[p] for p in ids], dtype=np.float64)
    return {ids[i]: float(values[i]) for i in trec_order(values)[:depth]}


def _unit(vectors: np.ndarray) -> np.ndarray:
    if vectors.ndim != 2:
        raise ApcirError(
            f"the encoder must return a 2-d array (texts x dims), got shape {vectors.shape}"
        )
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


def tfidf_encoder(corpus: Sequence[str] | None = None) -> Encoder:
    """A bag-of-words TF-IDF encoder (numpy only), the fallback when no SPLADE encoder is available.

    IDF comes from ``corpus`` when given, else from the texts of each call.
    """
    import re

    token = re.compile(r"[a-z0-9]+")

    def tokens(text: str) -> list[str]:
        return token.findall(text.lower())

    def idf_from(texts: Sequence[str]) -> dict[str, float]:
        df: dict[str, int] = {}
        for text in texts:
            for word in set(tokens(text)):
                df[word] = df.get(word, 0) + 1
        n = len(texts)
        return {w: math.log((1 + n) / (1 + d)) + 1.0 for w, d in df.items()}

    fixed = idf_from(corpus) if corpus is not None else None

    def encode(texts: list[str]) -> np.ndarray:
        idf = fixed if fixed is not None else idf_from(texts)
        vocab = {w: i for i, w in enumerate(sorted(idf))}
        matrix = np.zeros((len(texts), max(1, len(vocab))))
        for row, text in enumerate(texts):
            for word in tokens(text):
                if word in vocab:
                    matrix[row, vocab[word]] += idf[word]
        return matrix

    return encode
