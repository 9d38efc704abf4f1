"""Embedded and Lucene SPLADE indexes on the demo collection; sharded, resumable builds; reuse checks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

pytest.importorskip("sentence_transformers")

from apcir import datasets
from apcir.contract.runs import write_run
from apcir.errors import ApcirError
from apcir.retrieval import build_index, index_status, open_index
from apcir.retrieval.core import ListRetrieval
from apcir.retrieval.embedded import array_path, load_embedded, search_matrix
from apcir.retrieval.encoder import SpladeEncoder
from apcir.retrieval.lucene import QUANTIZATION_SCALE, quantize


@pytest.fixture(scope="module")
def encoder() -> SpladeEncoder:
    return SpladeEncoder("splade-tiny", device="cpu")


@pytest.fixture(scope="module")
def demo_indexes(tmp_path_factory, encoder, demo) -> tuple[Path, Path]:
    """The demo collection's embedded splade-tiny index (a copy of the suite's demo run's: the same build, made
    once per run) and a Lucene impact index from its vectors."""
    root = tmp_path_factory.mktemp("demo")
    embedded, impact = root / "embedded", root / "lucene-splade"
    shutil.copytree(demo.index, embedded)
    build_index(
        "ikat23-provenance", "lucene-splade", impact, encoder=encoder, progress=False, vectors_from=embedded
    )
    return embedded, impact


def demo_queries(n: int = 40) -> dict[str, tuple[str, str | None]]:
    turns = [t for t in datasets.topics("ikat23-test") if t.manual_rewrite][:n]
    return {t.turn_id: (t.manual_rewrite, t.response or None) for t in turns}


@pytest.mark.slow
def test_embedded_and_lucene_impact_agree_on_top10(demo_indexes, encoder):
    embedded_dir, impact_dir = demo_indexes
    queries = demo_queries()
    embedded = open_index(embedded_dir, encoder).search(queries, k=10, progress=False)
    lucene = open_index(impact_dir, encoder).search(queries, k=10, progress=False)

    # Exact and quantised scores of every passage, to tell real disagreements from quantisation ties.
    postings, ids = load_embedded(embedded_dir)
    column = {pid: i for i, pid in enumerate(ids)}
    q = encoder.encode_queries(list(queries.values()), progress=False)
    exact = (q @ postings).toarray()
    docs = sp.csr_matrix(postings.T)
    # |q.d - Q.D/s^2| <= sum over shared terms of (|q|/2 + |d|/2 + 1/4s)/s: a per-passage bound
    bound = ((abs(q) > 0).astype(np.float32) @ abs(docs).T.astype(np.float32) * 0.5
             + abs(q) @ (abs(docs) > 0).T.astype(np.float32) * 0.5
             + (abs(q) > 0).astype(np.float32) @ (abs(docs) > 0).T.astype(np.float32) / (4 * QUANTIZATION_SCALE))
    bound = np.asarray(bound.todense()) / QUANTIZATION_SCALE
    quantised = (quantize(q) @ quantize(docs).T).toarray() / QUANTIZATION_SCALE**2

    identical = 0
    for row, turn in enumerate(queries):
        ours, theirs = list(embedded[turn]), list(lucene[turn])
        assert len(ours) == len(theirs) == 10
        # the Lucene scores are the quantised dot products of the same vectors
        for pid, score in lucene[turn].items():
            assert score == pytest.approx(quantised[row, column[pid]], abs=1e-6)
        # embedded scores are the exact dot products
        for pid, score in embedded[turn].items():
            assert score == pytest.approx(exact[row, column[pid]], rel=1e-5)
        identical += ours == theirs
        tenth = column[ours[-1]]
        for pid in set(ours) ^ set(theirs):
            c = column[pid]
            gap = abs(exact[row, c] - exact[row, tenth])
            assert gap <= bound[row, c] + bound[row, tenth], f"{turn}: {pid} differs beyond quantisation"
    assert identical >= len(queries) // 2  # most lists are identical even in order


@pytest.mark.slow
def test_demo_index_manifest_and_reuse(demo_indexes, encoder):
    embedded_dir, impact_dir = demo_indexes
    manifest = json.loads((embedded_dir / "manifest.json").read_text())
    assert manifest["passages"] == 894 and manifest["model"] == "splade-tiny"
    assert (manifest["query_max_length"], manifest["response_max_length"], manifest["doc_max_length"]) == (64, 256, 256)
    assert manifest["collection"]["sha256"] and manifest["nonzeros"] > 894
    status = index_status(embedded_dir, "ikat23-provenance", "embedded", "splade-tiny")
    assert status.up_to_date, status.reason
    assert not index_status(embedded_dir, "ikat23-provenance", "embedded", "other/model").up_to_date
    assert not index_status(embedded_dir, "ikat23-provenance", "lucene-splade", "splade-tiny").up_to_date
    again = build_index("ikat23-provenance", "embedded", embedded_dir, encoder="splade-tiny", progress=False)
    assert again.status == "up-to-date" and again.passages_encoded == 0
    assert json.loads((impact_dir / "manifest.json").read_text())["quantization_scale"] == QUANTIZATION_SCALE


@pytest.fixture
def small_collection(tmp_path) -> Path:
    passages = list(datasets.iter_collection(datasets.collection_path("ikat23-provenance")))[:37]
    path = tmp_path / "small.jsonl"
    with path.open("w") as out:
        for p in passages:  # the iKAT layout for the first half, pyserini's for the rest
            doc, part = p.id.rsplit(":", 1)
            record = {"doc_id": doc, "passage_id": part, "passage_text": p.contents} if len(p.id) % 2 else {
                "id": p.id, "contents": p.contents}
            out.write(json.dumps(record) + "\n")
    return path


@pytest.mark.slow
def test_sharded_and_resumed_builds_equal_a_plain_build(tmp_path, small_collection, encoder):
    plain = tmp_path / "plain"
    build_index(small_collection, "embedded", plain, encoder=encoder, chunk_size=5, progress=False)

    sharded = tmp_path / "sharded"
    results = [
        build_index(small_collection, "embedded", sharded, encoder=encoder, shard=f"{i}/3", chunk_size=5, progress=False)
        for i in (2, 0)
    ]
    assert [r.status for r in results] == ["shard-done", "shard-done"]
    assert "waiting for shard(s) 1" in results[-1].message
    assert not (sharded / "manifest.json").exists()
    # interrupt shard 0: drop its last chunk and its completion mark
    shard0 = sharded / "_build" / "shard-00000-of-00003"
    chunks = sorted(shard0.glob("chunk-*.npz"))
    last_size = len(chunks[-1].with_suffix(".ids").read_text().splitlines())
    chunks[-1].unlink()
    (shard0 / "done.json").unlink()
    merged = build_index(small_collection, "embedded", sharded, encoder=encoder, progress=False)
    assert merged.status == "built"
    # only the lost chunk of shard 0 and the never-run shard 1 are encoded again
    assert merged.passages_encoded == last_size + _count_shard(small_collection, 1)
    total = 37
    a, ids_a = load_embedded(plain)
    b, ids_b = load_embedded(sharded)
    assert ids_a == ids_b and len(ids_a) == total
    assert not (sharded / "_build").exists()
    # byte-identical, not merely close: a passage's vector does not depend on the passages batched with it
    for name in ("indptr", "indices", "data", "local", "bounds"):
        assert array_path(sharded, name).read_bytes() == array_path(plain, name).read_bytes(), name
    assert (sharded / "ids.npy").read_bytes() == (plain / "ids.npy").read_bytes()
    queries = {p.id.replace(":", "_"): p.contents[:80] for p in datasets.iter_collection(small_collection)}
    runs = {}
    for name, index in (("plain", plain), ("sharded", sharded)):
        runs[name] = tmp_path / f"{name}.run"
        run = ListRetrieval(open_index(index, encoder), 20).search({"run": queries})["run"]
        write_run(run, runs[name], tag="t", depth=20)
    assert runs["plain"].read_bytes() == runs["sharded"].read_bytes()


def _count_shard(path: Path, index: int) -> int:
    from apcir.retrieval.shards import count_shard

    return count_shard(path, index, 3)


def test_shards_partition_the_collection(small_collection):
    from apcir.retrieval.shards import iter_shard

    whole = [p.id for _, p in iter_shard(small_collection, 0, 1)]
    for n in (1, 2, 5, 37, 50):
        parts = [p.id for i in range(n) for _, p in iter_shard(small_collection, i, n)]
        assert parts == whole
    assert len(whole) == 37


def test_existing_different_index_is_not_replaced_without_overwrite(tmp_path, small_collection, encoder):
    out = tmp_path / "idx"
    build_index(small_collection, "embedded", out, encoder=encoder, progress=False)
    with small_collection.open("a") as handle:
        handle.write(json.dumps({"id": "extra:1", "contents": "one more passage"}) + "\n")
    assert "differ" in index_status(out, small_collection, "embedded", "splade-tiny").reason
    with pytest.raises(ApcirError, match="--overwrite"):
        build_index(small_collection, "embedded", out, encoder=encoder, progress=False)
    (out / "keep.txt").write_text("not apcir's")
    rebuilt = build_index(small_collection, "embedded", out, encoder=encoder, overwrite=True, progress=False)
    assert rebuilt.manifest is not None and rebuilt.manifest.passages == 38
    assert (out / "keep.txt").exists()


def test_unfinished_build_with_other_settings_is_refused(tmp_path, small_collection, encoder):
    out = tmp_path / "idx"
    build_index(small_collection, "embedded", out, encoder=encoder, shard="0/2", progress=False)
    with pytest.raises(ApcirError, match="unfinished build"):
        build_index(small_collection, "embedded", out, encoder=encoder, shard="1/3", progress=False)


def test_exact_top_k_breaks_ties_by_passage_id_as_trec_eval_does():
    postings = sp.csr_matrix(np.array([[1.0, 2.0, 2.0, 0.0, 2.0]], dtype=np.float32))
    ids = ["e", "d", "c", "b", "a"]
    query = sp.csr_matrix(np.array([[1.0]], dtype=np.float32))
    assert list(search_matrix(postings, ids, query, 2)[0].items()) == [("d", 2.0), ("c", 2.0)]
    assert list(search_matrix(postings, ids, query, 10)[0].items()) == [("d", 2.0), ("c", 2.0), ("a", 2.0),
                                                                         ("e", 1.0)]


@pytest.mark.parametrize("text", ["x", "1/0", "3/3", "-1/2", "a/b"])
def test_bad_shard_spec(text):
    from apcir.retrieval.shards import parse_shard

    with pytest.raises(ApcirError, match="shard"):
        parse_shard(text)


def test_a_model_that_failed_to_load_does_not_block_the_next_build(tmp_path, small_collection, encoder):
    out = tmp_path / "idx"
    with pytest.raises(ApcirError, match="could not load SPLADE model"):
        build_index(small_collection, "embedded", out, encoder="no-such-org/no-such-splade", progress=False)
    result = build_index(small_collection, "embedded", out, encoder=encoder, progress=False)
    assert result.status == "built" and result.manifest is not None and result.manifest.model == "splade-tiny"


@pytest.mark.slow
def test_an_impact_index_without_manifest_opens_with_a_named_encoder(tmp_path, demo_indexes, encoder):
    """The iKAT organisers' SPLADE index has no apcir manifest: --backend lucene-splade plus the encoder."""
    _, impact = demo_indexes
    foreign = tmp_path / "organisers-index"
    import shutil

    shutil.copytree(impact / "lucene", foreign)  # a bare Lucene directory, as distributed
    queries = demo_queries(10)
    ours = open_index(impact, encoder).search(queries, 20, progress=False)
    theirs = open_index(foreign, encoder, backend="lucene-splade").search(queries, 20, progress=False)
    assert theirs == ours
    with pytest.raises(ApcirError, match="needs the query encoder"):
        open_index(foreign, None, backend="lucene-splade")


def test_postings_are_memory_mapped_and_an_index_in_the_older_layout_is_converted(tmp_path, small_collection, encoder):
    import mmap

    from apcir.retrieval.embedded import ARRAYS, POSTINGS, array_path

    index = tmp_path / "idx"
    build_index(small_collection, "embedded", index, encoder, progress=False)
    opened = open_index(index, encoder)
    for name in ("data", "local", "bounds", "ids"):  # views of the files, not copies in memory
        base = opened.arrays[name].base
        while base is not None and not isinstance(base, mmap.mmap):
            base = getattr(base, "base", None)
        assert isinstance(base, mmap.mmap), name
    queries = {"1-1_1": "tea passage", "1-1_2": "garden"}
    expected = opened.search(queries, 20, progress=False)

    postings, ids = load_embedded(index)  # write the layout before memory-mapped arrays: postings.npz
    sp.save_npz(index / POSTINGS, sp.csr_matrix(postings, copy=True), compressed=False)
    for name in ARRAYS:
        array_path(index, name).unlink()
    (index / "ids.npy").unlink()
    assert open_index(index, encoder).search(queries, 20, progress=False) == expected
    assert not (index / POSTINGS).exists() and all(array_path(index, n).is_file() for n in ARRAYS)
