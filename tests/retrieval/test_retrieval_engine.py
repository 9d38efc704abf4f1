"""The exact numba engine against brute force.

How results are compared: the engine sums float32 products in float32 (in
ascending term order, as scipy's CSR product does), the reference is a float64
dense dot product. So (1) every returned score equals the float64 score within
float32 rounding (rtol 1e-5), (2) the returned set equals the float64 top k
except for passages whose float64 score lies within that tolerance of the k-th
score (ties and near-ties at the cut), (3) the order is score descending, then
passage index descending, and (4) scores equal scipy's float32 product bit for bit.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
import scipy.sparse as sp

from apcir.errors import ApcirError
from apcir.retrieval.engine import SparseEngine, canonical_query, search_runs

N_PASSAGES = 20_000
VOCAB = 3_000


def zipf_matrix(rng, rows, low, high, vocab):
    """Rows of low..high Zipf-drawn terms with log-normal weights (SPLADE-like skew)."""
    counts = rng.integers(low, high + 1, size=rows)
    ranks = np.minimum(rng.zipf(1.3, size=counts.sum()) - 1, vocab - 1)
    terms = rng.permutation(vocab)[ranks]
    row_ids = np.repeat(np.arange(rows), counts)
    weights = rng.lognormal(-0.5, 0.8, size=counts.sum()).astype(np.float32)
    matrix = sp.coo_matrix((weights, (row_ids, terms)), shape=(rows, vocab)).tocsr()
    matrix.sum_duplicates()
    return sp.csr_matrix(matrix, dtype=np.float32)


@pytest.fixture(scope="module")
def collection():
    rng = np.random.default_rng(7)
    docs = zipf_matrix(rng, N_PASSAGES, 20, 80, VOCAB)
    postings = sp.csr_matrix(docs.T, dtype=np.float32)
    postings.sort_indices()
    queries = zipf_matrix(rng, 25, 5, 40, VOCAB)
    queries.sort_indices()
    docs64 = sp.csr_matrix(docs, dtype=np.float64)  # the float64 brute force: docs64 @ query
    return postings, queries, docs64


def check_against_brute_force(passages, scores, exact, k):
    positive = np.flatnonzero(exact > 0)
    expected_count = min(k, positive.size)
    assert passages.size == expected_count
    if expected_count == 0:
        return
    np.testing.assert_allclose(scores, exact[passages], rtol=1e-5, atol=0)
    # order: score descending, then passage index descending
    assert np.all((scores[:-1] > scores[1:]) | ((scores[:-1] == scores[1:]) & (passages[:-1] > passages[1:])))
    kth = np.sort(exact[positive])[::-1][expected_count - 1]
    tolerance = 1e-5 * kth
    best = set(positive[exact[positive] > kth + tolerance].tolist())
    assert best <= set(passages.tolist()), "a passage clearly above the cut is missing"
    assert np.all(exact[passages] >= kth - tolerance), "a passage clearly below the cut was returned"


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("block", [65_536, 1_000])
def test_top1000_matches_brute_force(collection, parallel, block):
    postings, queries, docs64 = collection
    engine = SparseEngine.from_csr(postings, block=block)
    top = engine.search_matrix(queries, 1000, parallel=parallel)
    exact_all = (docs64 @ sp.csr_matrix(queries, dtype=np.float64).T).toarray()
    for q in range(queries.shape[0]):
        passages, scores = top.row(q)
        check_against_brute_force(passages, scores, exact_all[:, q], 1000)


def test_scores_equal_scipy_float32_product(collection):
    postings, queries, _ = collection
    engine = SparseEngine.from_csr(postings)
    top = engine.search_matrix(queries, 1000)
    product = (queries @ postings).toarray()  # float32, scipy's accumulation
    for q in range(queries.shape[0]):
        passages, scores = top.row(q)
        assert np.array_equal(scores, product[q, passages])


def test_single_query_paths_agree(collection):
    postings, queries, _ = collection
    engine = SparseEngine.from_csr(postings, block=4_096)
    batch = engine.search_matrix(queries, 300, parallel=False)
    for q in range(queries.shape[0]):
        terms = queries.indices[queries.indptr[q] : queries.indptr[q + 1]]
        weights = queries.data[queries.indptr[q] : queries.indptr[q + 1]]
        for parallel in (False, True):
            passages, scores = engine.search(terms, weights, 300, parallel=parallel)
            expected_p, expected_s = batch.row(q)
            assert np.array_equal(passages, expected_p) and np.array_equal(scores, expected_s)


def test_edge_cases(collection):
    postings, queries, docs64 = collection
    engine = SparseEngine.from_csr(postings)
    empty = np.zeros(0, np.int64), np.zeros(0, np.float32)
    assert engine.search(*empty, k=10)[0].size == 0
    # terms outside the vocabulary, and a vocabulary term no passage has
    unused = np.flatnonzero(np.diff(postings.indptr) == 0)
    absent = np.array([VOCAB + 5, -1, *unused[:1]], dtype=np.int64)
    passages, scores = engine.search(absent, np.ones(absent.size, np.float32), 10)
    assert passages.size == 0 and scores.size == 0
    # k larger than the matches: a rare term
    rare = int(np.flatnonzero(np.diff(postings.indptr) == 3)[0])
    passages, scores = engine.search(np.array([rare]), np.array([2.0], np.float32), 1000)
    assert sorted(passages.tolist()) == sorted(postings.indices[postings.indptr[rare] : postings.indptr[rare + 1]].tolist())
    # k = 1
    terms = queries.indices[: queries.indptr[1]]
    weights = queries.data[: queries.indptr[1]]
    passages, scores = engine.search(terms, weights, 1)
    exact = docs64[:, terms] @ weights.astype(np.float64)
    exact = np.asarray(exact).ravel()
    check_against_brute_force(passages, scores, exact, 1)
    # k up to 10,000 and beyond the number of passages
    passages, _ = engine.search(terms, weights, 10_000)
    check_against_brute_force(passages, engine.search(terms, weights, 10_000)[1], exact, 10_000)
    # a batch with an empty query in the middle
    mixed = sp.vstack([queries[:1], sp.csr_matrix((1, VOCAB), dtype=np.float32), queries[1:2]]).tocsr()
    top = engine.search_matrix(mixed, 50)
    assert top.counts[1] == 0 and top.counts[0] == 50 and top.counts[2] == 50
    with pytest.raises(ApcirError):
        engine.search(terms, weights, 0)


def test_repeated_terms_add_up_and_zero_weights_drop():
    terms, weights, absent = canonical_query(
        np.array([5, 2, 5, 7, 1, 9]), np.array([1, 2, 3, 0, 4, 1], np.float32), 8
    )
    assert terms.tolist() == [1, 2, 5] and weights.tolist() == [4.0, 2.0, 4.0] and absent == 1


def test_ties_rank_by_passage_index_descending():
    # four identical passages, one better
    docs = sp.csr_matrix(np.array([[1, 1], [1, 1], [2, 1], [1, 1], [1, 1]], dtype=np.float32))
    engine = SparseEngine.from_csr(sp.csr_matrix(docs.T))
    passages, scores = engine.search(np.array([0, 1]), np.array([1.0, 1.0], np.float32), 3)
    assert passages.tolist() == [2, 4, 3]
    assert scores.tolist() == [3.0, 2.0, 2.0]
    ids = ["a", "b", "c", "d", "e"]
    run = search_runs(engine, ids, sp.csr_matrix(np.array([[1.0, 1.0]], dtype=np.float32)), 2)
    assert list(run[0]) == ["c", "e"]


def test_unsorted_or_bad_postings_are_refused():
    postings = sp.csr_matrix(np.eye(3, dtype=np.float32))
    with pytest.raises(ApcirError, match="sorted"):
        SparseEngine(np.array([0, 2]), np.array([1, 0]), np.ones(2, np.float32), 3)
    with pytest.raises(ApcirError, match="outside"):
        SparseEngine(postings.indptr, postings.indices, postings.data, 2)
    unsorted = sp.csr_matrix((np.ones(2, np.float32), np.array([1, 0]), np.array([0, 2])), shape=(1, 3))
    unsorted.has_sorted_indices = False
    passages, _ = SparseEngine.from_csr(unsorted).search(np.array([0]), np.array([1.0], np.float32), 5)
    assert passages.tolist() == [1, 0]


def test_threads_setting_is_respected(collection):
    postings, queries, _ = collection
    engine = SparseEngine.from_csr(postings)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = engine.search_matrix(queries, 100)
    finally:
        numba.set_num_threads(before)
    many = engine.search_matrix(queries, 100)
    assert np.array_equal(one.passages, many.passages) and np.array_equal(one.scores, many.scores)


def test_query_representation_fusion_sums_weighted_rows_left_to_right():
    from apcir.retrieval.representation import weighted_sum

    rng = np.random.default_rng(3)
    blocks = [sp.random(4, 30, density=0.2, format="csr", random_state=rng, dtype=np.float32) for _ in range(3)]
    weights = rng.dirichlet([1, 1, 1], size=4)
    total = weighted_sum(blocks, weights)
    expected = sum(weights[:, i, None].astype(np.float32) * blocks[i].toarray() for i in range(3))
    assert sp.issparse(total) and total.has_sorted_indices and np.all(total.data != 0)
    assert np.allclose(total.toarray(), expected, rtol=1e-6)
    dense = weighted_sum([b.toarray() for b in blocks], weights)
    assert isinstance(dense, np.ndarray) and np.allclose(dense, expected, rtol=1e-6)
    with pytest.raises(ValueError, match="no vectors"):
        weighted_sum([], weights)
