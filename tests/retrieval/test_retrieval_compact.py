"""The embedded index's compact layout (`postings = "compact"`, apcir/retrieval/compact.py): the encoding decodes to
the quantised impacts (codes and exceptions, a block's last offset), the search returns the exact top k of the
quantised scores in apcir's ranking order (serial, parallel and batched alike), what it recalls of the exact top
1000, its manifest and refusals, and `apcir index build` + `apcir retrieve` on the demo collection."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from apcir.contract.layout import RunLayout
from apcir.contract.reformulations import LIST_NAMES
from apcir.contract.runs import load_run
from apcir.errors import ApcirError
from apcir.retrieval import open_index
from apcir.retrieval.backends import passage_vectors
from apcir.retrieval.compact import LEVELS, CompactEngine, compact_arrays
from apcir.retrieval.embedded import compact_postings, open_arrays, write_index
from apcir.retrieval.engine import BLOCK, SparseEngine
from apcir.retrieval.manifest import read_manifest
from apcir.retrieval.options import EmbeddedOptions


class _Vocabulary:
    vocab_size = 300


def _collection(n: int = 70_000, seed: int = 3) -> tuple[sp.csr_matrix, list[str]]:
    documents = sp.random(n, _Vocabulary.vocab_size, density=0.04, format="csr", dtype=np.float32,
                          random_state=seed)
    documents.data = (documents.data * 2.5 + 0.01).astype(np.float32)
    return documents, [f"p{i:07d}" for i in range(n)]


def _build(folder: Path, documents: sp.csr_matrix, ids: list[str], postings: str) -> dict[str, np.ndarray]:
    chunks = [(ids[i:i + 9000], documents[i:i + 9000]) for i in range(0, len(ids), 9000)]
    write_index(folder, chunks, _Vocabulary(), threads=1, work=folder.parent / f"work-{folder.name}",
                options=EmbeddedOptions(postings=postings))  # type: ignore[arg-type]
    return open_arrays(folder)


def _quantised(documents: sp.csr_matrix) -> tuple[sp.csr_matrix, np.ndarray]:
    """The impacts the compact layout stores, per passage (float64), and each term's step."""
    columns = sp.csc_matrix(documents, dtype=np.float64)
    step = np.zeros(documents.shape[1])
    for t in range(documents.shape[1]):
        column = columns.data[columns.indptr[t]:columns.indptr[t + 1]]
        if column.size:
            step[t] = np.float32(np.float32(column.max()) / np.float32(LEVELS))
    codes = columns.copy()
    per_posting = np.repeat(step, np.diff(columns.indptr))
    codes.data = np.clip(np.floor(columns.data.astype(np.float32) / per_posting.astype(np.float32) + 0.5), 1, LEVELS)
    return sp.csr_matrix(codes), step


def test_the_encoding_decodes_to_the_quantised_impacts_in_both_forms() -> None:
    """One term with passages at block-local offsets 0, 127 (a gap of 127: in the code), 255 (gap 128: an exception),
    32,767 (the block's last) and, in the next block, 5: decoding (a query of weight 1 on that term) gives each passage its
    impact q = round(w / step) times the step."""
    n = BLOCK + 10
    passages = np.array([0, 127, 255, BLOCK - 1, BLOCK + 5])
    weights = np.array([0.5, 1.1, 0.001, 2.0, 1.5], dtype=np.float32)  # q = 128, 281, 1, 511, 383
    postings = compact_arrays(np.array([0, passages.size]), passages.astype(np.int32), weights, n)
    # block 0: offsets 0 (gap 1) and 127 (gap 127) in their codes; 255 (gap 128) and 32,767 exceptions; block 1: 5
    assert postings.codes.tolist() == [(1 << 9) | 128, (127 << 9) | 281, 0 | 1, 0 | 511, (6 << 9) | 383]
    assert postings.exceptions.tolist() == [255, BLOCK - 1]
    assert postings.cbounds.tolist() == [[0, 4, 5]] and postings.ebounds.tolist() == [[0, 2, 2]]
    assert postings.ebase.tolist() == [0, 2]
    scale = postings.scale
    engine = CompactEngine(postings, n, BLOCK)
    found, scores = engine.search(np.array([0]), np.array([1.0], dtype=np.float32), k=10)
    expected = {int(p): float(np.clip(np.floor(w / scale[0] + np.float32(0.5)), 1, LEVELS) * scale[0])
                for p, w in zip(passages, weights)}
    assert dict(zip(found.tolist(), scores.tolist())) == pytest.approx(expected, rel=1e-6)
    assert expected[255] == pytest.approx(float(scale[0]))  # a weight that rounds to 0 is kept as the smallest step


def test_compact_search_is_the_exact_top_k_of_the_quantised_scores(tmp_path) -> None:
    documents, ids = _collection()
    arrays = _build(tmp_path / "compact", documents, ids, "compact")
    engine = CompactEngine(compact_postings(arrays), len(ids), BLOCK)
    codes, step = _quantised(documents)
    rng = np.random.default_rng(7)
    for _ in range(12):
        terms = rng.choice(_Vocabulary.vocab_size, 25, replace=False)
        weights = rng.random(25).astype(np.float32) + 0.05
        query = np.zeros(_Vocabulary.vocab_size)
        query[terms] = weights.astype(np.float64) * step[terms]
        reference = codes @ query
        found, scores = engine.search(terms, weights, k=100)
        assert found.size == 100
        assert scores.tolist() == sorted(scores.tolist(), reverse=True)
        np.testing.assert_allclose(scores, reference[found], rtol=2e-6)
        cut = np.sort(reference)[-100]
        assert set(np.flatnonzero(reference > cut + 1e-5 * cut)) <= set(found.tolist())
        parallel = engine.search(terms, weights, k=100, parallel=True)
        assert parallel[0].tolist() == found.tolist() and parallel[1].tolist() == scores.tolist()
    batch = engine.search_matrix(sp.csr_matrix(documents[:6]), k=20)
    for q in range(6):
        one = engine.search(documents[q].indices, documents[q].data, k=20)
        assert batch.row(q)[0].tolist() == one[0].tolist()


def test_compact_keeps_the_exact_top_1000_and_a_third_of_the_bytes(tmp_path) -> None:
    documents, ids = _collection()
    exact = _build(tmp_path / "exact", documents, ids, "exact")
    compact = _build(tmp_path / "compact", documents, ids, "compact")
    reference = SparseEngine.mapped(exact["bounds"], exact["local"], exact["data"], len(ids))
    engine = CompactEngine(compact_postings(compact), len(ids), BLOCK)
    per_posting = engine.nbytes / documents.nnz
    assert 2 <= per_posting < 2.5, per_posting
    rng = np.random.default_rng(11)
    kept = []
    for _ in range(10):
        terms = rng.choice(_Vocabulary.vocab_size, 30, replace=False)
        weights = rng.random(30).astype(np.float32)
        truth = reference.search(terms, weights, k=1000)[0]
        kept.append(len(np.intersect1d(truth, engine.search(terms, weights, k=1000)[0])) / truth.size)
    assert np.mean(kept) >= 0.99, kept
    assert not (tmp_path / "compact" / "postings.data.npy").exists()
    assert not (tmp_path / "work-compact" / "embedded-scratch").exists()


@pytest.mark.slow
def test_apcir_builds_and_retrieves_with_compact_postings_on_the_demo(demo, run_cli, tmp_path) -> None:
    """`apcir index build --postings compact` on the demo collection, then `apcir retrieve` of the demo's three lists:
    each keeps at least 0.99 of the exact index's top 1000; the manifest records the layout; an explicit other
    layout at search time, and passage vectors, are refused in one line."""
    out = tmp_path / "compact"
    code, printed, err = run_cli("index", "build", "--backend", "embedded", "--postings", "compact", "--collection",
                                 "ikat23-provenance", "--encoder", "splade-tiny", "--vectors-from", str(demo.index),
                                 "--out", str(out), "--json")
    assert code == 0, err
    manifest = json.loads(printed)["manifest"]
    assert manifest["options"] == {"postings": "compact"} and manifest["passages"] == 894
    reformulations = RunLayout(demo.run_dir).reformulations
    runs = {}
    for name, index in (("compact", out), ("exact", demo.index)):
        code, _, err = run_cli("retrieve", "--index", str(index), "--queries", str(reformulations), "--field",
                               ",".join(LIST_NAMES), "--k", "1000", "--out", str(tmp_path / f"runs-{name}"))
        assert code == 0, err
        runs[name] = {field: load_run(tmp_path / f"runs-{name}" / f"{field}.run") for field in LIST_NAMES}
    for field in LIST_NAMES:
        exact, ours = runs["exact"][field], runs["compact"][field]
        assert exact.keys() == ours.keys() and len(exact) > 300
        found = sum(len(set(exact[t]) & set(ours[t])) for t in exact)
        assert found / sum(len(exact[t]) for t in exact) >= 0.99
    code, _, err = run_cli("retrieve", "--index", str(out), "--queries", str(reformulations), "--field", "rewrite",
                           "--postings", "exact", "--out", str(tmp_path / "refused"))
    assert code != 0 and "built with postings compact" in err and len(err.strip().splitlines()) == 1
    index = open_index(out)
    some = list(index.ids.take(np.arange(3)))
    with pytest.raises(ApcirError, match="keeps only quantised postings"):
        index.passage_vectors(some)
    assert passage_vectors(index, some) is None  # what DEPS asks: it then encodes the passages' texts
    assert passage_vectors(open_index(demo.index), some).shape[0] == 3
    assert read_manifest(out).options == {"postings": "compact"}
    copy = tmp_path / "damaged"
    shutil.copytree(out, copy)
    (copy / "postings.exceptions.npy").unlink()
    with pytest.raises(ApcirError, match="incomplete: postings.exceptions.npy missing"):
        open_index(copy)


@pytest.mark.slow
def test_sharded_and_resumed_compact_builds_equal_a_plain_build_byte_for_byte(tmp_path) -> None:
    """`postings = "compact"` built in 3 shards (one of them resumed after losing a chunk) gives the same files as a
    build in one go; an index built the other way is not up to date for the option."""
    from apcir import datasets
    from apcir.retrieval import build_index, index_status
    from apcir.retrieval.embedded import COMPACT_ARRAYS, array_path
    from apcir.retrieval.encoder import SpladeEncoder

    encoder = SpladeEncoder("splade-tiny", device="cpu")
    passages = list(datasets.iter_collection(datasets.collection_path("ikat23-provenance")))[:31]
    collection = tmp_path / "small.jsonl"
    collection.write_text("".join(json.dumps({"id": p.id, "contents": p.contents}) + "\n" for p in passages))
    compact = {"postings": "compact"}
    plain = tmp_path / "plain"
    build_index(collection, "embedded", plain, encoder=encoder, chunk_size=4, progress=False, options=compact)
    sharded = tmp_path / "sharded"
    for i in (2, 0, 1):
        build_index(collection, "embedded", sharded, encoder=encoder, shard=f"{i}/3", chunk_size=4, progress=False,
                    options=compact)
    shard1 = sharded / "_build" / "shard-00001-of-00003"
    sorted(shard1.glob("chunk-*.npz"))[-1].unlink()
    (shard1 / "done.json").unlink()
    assert build_index(collection, "embedded", sharded, encoder=encoder, progress=False,
                       options=compact).status == "built"
    for name in ("indptr", *COMPACT_ARRAYS):
        assert array_path(sharded, name).read_bytes() == array_path(plain, name).read_bytes(), name
    assert (sharded / "ids.npy").read_bytes() == (plain / "ids.npy").read_bytes()
    assert not array_path(sharded, "data").exists() and not (sharded / "_build").exists()
    status = index_status(plain, collection, "embedded", "splade-tiny", options={"postings": "exact"})
    assert not status.up_to_date and "postings compact, not exact" in status.reason
