"""Precomputed vectors in and out: index a JsonVectorCollection, search pre-encoded queries, export an index's vectors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from apcir.contract.runs import load_run, ranking

VOCAB = [f"tok{i}" for i in range(400)]


def random_vectors(rng: np.random.Generator, n: int, terms: tuple[int, int], integer: bool) -> list[dict[str, float]]:
    vectors = []
    for _ in range(n):
        size = int(rng.integers(*terms))
        chosen = rng.choice(len(VOCAB), size=size, replace=False, p=_zipf())
        weights = rng.integers(1, 300, size=size) if integer else rng.lognormal(-0.5, 0.8, size=size)
        vectors.append({VOCAB[t]: (int(w) if integer else float(w)) for t, w in zip(chosen, weights)})
    return vectors


def _zipf() -> np.ndarray:
    p = 1.0 / np.arange(1, len(VOCAB) + 1)
    return p / p.sum()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("vectors")
    rng = np.random.default_rng(7)
    passages = random_vectors(rng, 3000, (20, 60), integer=True)
    collection = root / "collection.jsonl"
    collection.write_text("".join(json.dumps({"id": f"p{i:05d}", "contents": f"passage {i}", "vector": v}) + "\n"
                                  for i, v in enumerate(passages)))
    queries = random_vectors(rng, 25, (5, 30), integer=True)
    query_file = root / "queries.jsonl"
    query_file.write_text("".join(json.dumps({"id": f"1-1_{i + 1}", "vector": v}) + "\n"
                                  for i, v in enumerate(queries)))
    return root, collection, query_file, passages, queries


def brute_force(passages, queries, k):
    run = {}
    for i, query in enumerate(queries):
        scores = {}
        for j, vector in enumerate(passages):
            score = sum(np.float32(w) * np.float32(vector[t]) for t, w in query.items() if t in vector)
            if score > 0:
                scores[f"p{j:05d}"] = float(score)
        run[f"1-1_{i + 1}"] = dict(ranking(scores, k))
    return run


def test_an_index_of_precomputed_vectors_searched_with_precomputed_queries_is_exact(run_cli, files):
    root, collection, query_file, passages, queries = files
    code, _, err = run_cli("index", "build", "--collection", str(collection), "--vectors", "--out",
                           str(root / "idx"))
    assert code == 0, err
    manifest = json.loads((root / "idx" / "manifest.json").read_text())
    assert manifest["source"] == "vectors" and manifest["weights"] == "integer" and manifest["model"] is None
    code, _, err = run_cli("retrieve", "--index", str(root / "idx"), "--query-vectors", str(query_file), "--k", "50",
                           "--out", str(root / "run.trec"))
    assert code == 0, err
    got = load_run(root / "run.trec")
    expected = brute_force(passages, queries, 50)
    assert set(got) == set(expected)
    for turn in expected:
        assert list(got[turn]) == list(expected[turn]), turn
        assert np.allclose(list(got[turn].values()), list(expected[turn].values()), rtol=1e-6)
    # the same index cannot encode text queries
    tsv = root / "q.tsv"
    tsv.write_text("1-1_1\tsome text\n")
    code, _, err = run_cli("retrieve", "--index", str(root / "idx"), "--queries", str(tsv), "--out",
                           str(root / "x.trec"))
    assert code == 2 and "--query-vectors" in err


@pytest.mark.slow
def test_pyserini_indexes_the_same_file_and_agrees_on_the_top_10(files):
    from apcir.retrieval.java import lucene
    from apcir.retrieval.lucene import LUCENE_DIR, run_index_collection

    root, collection, query_file, passages, queries = files
    folder = root / "pyserini-input"
    folder.mkdir()
    (folder / "part.jsonl").write_bytes(collection.read_bytes())
    target = root / "lucene-idx" / LUCENE_DIR
    run_index_collection(folder, target, "impact", 2, root / "lucene.log")  # Anserini's IndexCollection, -impact

    class Precomputed:
        def __init__(self, vectors):
            self.vectors = vectors

        def encode(self, text):
            return self.vectors[text]

    encoder = Precomputed({f"1-1_{i + 1}": q for i, q in enumerate(queries)})
    searcher = lucene().LuceneImpactSearcher(str(target), encoder, min_idf=-1)
    expected = brute_force(passages, queries, 10)
    for i in range(len(queries)):
        turn = f"1-1_{i + 1}"
        hits = searcher.search(turn, k=10)
        lucene_top = dict(ranking({h.docid: float(h.score) for h in hits}, 10))
        assert list(lucene_top) == list(expected[turn]), turn
        assert np.allclose(list(lucene_top.values()), list(expected[turn].values()))


def test_float_queries_against_an_integer_index_are_refused(run_cli, files):
    root, collection, _, _, _ = files
    run_cli("index", "build", "--collection", str(collection), "--vectors", "--out", str(root / "idx2"))
    floats = root / "float-queries.jsonl"
    floats.write_text(json.dumps({"id": "1-1_1", "vector": {"tok1": 0.5, "tok2": 1.25}}) + "\n")
    code, _, err = run_cli("retrieve", "--index", str(root / "idx2"), "--query-vectors", str(floats), "--out",
                           str(root / "x.trec"))
    assert code == 2 and "quantised (integer) weights but the queries have float weights" in err


@pytest.mark.parametrize("vector, expected", [
    ({"tok1": "high"}, "is not a number"),
    ({"tok1": -1.0}, "is negative"),
    ({}, "has an empty vector"),
    ({"tok1": 0, "tok2": 0.0}, "has an empty vector (every weight is 0)"),
    ({"tok1": 1e39}, "is 1e+39, too large for a 32-bit float"),
])
def test_bad_vector_files_name_the_line(run_cli, tmp_path, vector, expected):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": "a", "vector": {"tok0": 1}}) + "\n" + json.dumps({"id": "b", "vector": vector})
                    + "\n")
    code, _, err = run_cli("index", "build", "--collection", str(path), "--vectors", "--out", str(tmp_path / "idx"))
    assert code == 2 and "bad.jsonl:2: " in err and expected in err and "Traceback" not in err


@pytest.mark.parametrize("pid, expected", [
    ("a b", "passage id 'a b' contains whitespace, which TREC run files cannot hold"),
    ("", "passage id '' is empty"),
])
def test_passage_ids_a_run_file_cannot_hold_are_refused(run_cli, tmp_path, pid, expected):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": "a", "vector": {"tok0": 1}}) + "\n"
                    + json.dumps({"id": pid, "vector": {"tok0": 2}}) + "\n")
    code, _, err = run_cli("index", "build", "--collection", str(path), "--vectors", "--out", str(tmp_path / "idx"))
    assert code == 2 and f"bad.jsonl:2: {expected}" in err
    assert not (tmp_path / "idx" / "manifest.json").exists()


@pytest.fixture(scope="module")
def float_index(tmp_path_factory):
    """An index of 200 float-weight passages over VOCAB[:50], and the passages."""
    from apcir.retrieval.build import build_from_vectors

    root = tmp_path_factory.mktemp("float-vectors")
    rng = np.random.default_rng(11)
    passages = [{VOCAB[t]: float(w) for t, w in zip(rng.choice(50, size=10, replace=False),
                                                    rng.lognormal(-0.5, 0.8, size=10))} for _ in range(200)]
    collection = root / "collection.jsonl"
    collection.write_text("".join(json.dumps({"id": f"p{i:05d}", "contents": "", "vector": v}) + "\n"
                                  for i, v in enumerate(passages)))
    build_from_vectors(collection, "embedded", root / "idx")
    return root, passages


def search(run_cli, root, *queries):
    path = root / "q.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in queries))
    code, _, err = run_cli("retrieve", "--index", str(root / "idx"), "--query-vectors", str(path), "--k", "20",
                           "--out", str(root / "run.trec"))
    return code, err


def test_whole_float_query_weights_are_float_weights(run_cli, float_index):
    root, passages = float_index
    assert json.loads((root / "idx" / "manifest.json").read_text())["weights"] == "float"
    query = {"tok1": 1.0, "tok2": 2.0}  # whole numbers, but written as floats
    code, err = search(run_cli, root, {"id": "1-1_1", "vector": query})
    assert code == 0, err
    assert list(load_run(root / "run.trec")["1-1_1"]) == list(brute_force(passages, [query], 20)["1-1_1"])
    code, err = search(run_cli, root, {"id": "1-1_1", "vector": {"tok1": 1, "tok2": 2}})
    assert code == 2 and "the index holds float weights but the queries have integer weights" in err


def test_a_query_with_no_known_token_gets_no_passages_and_a_warning(run_cli, float_index):
    root, _ = float_index
    code, err = search(run_cli, root, {"id": "1-1_1", "vector": {"tok1": 0.5}},
                       {"id": "1-1_2", "vector": {"nope": 1.0}})
    assert code == 0, err
    assert "1 turn(s) have no query token left in the index's vocabulary and get no passages: 1-1_2" in err
    assert set(load_run(root / "run.trec")) == {"1-1_1"}
    code, err = search(run_cli, root, {"id": "1-1_1", "vector": {"nope": 1.0}})
    assert code == 2 and "no query has a token in the index's vocabulary: nothing to search" in err
    assert "integer weights" not in err


@pytest.mark.parametrize("query, expected", [
    ({"id": "foo bar", "vector": {"tok1": 0.5}}, "q.jsonl:2: query id 'foo bar' contains whitespace"),
    ({"id": "1-1_2", "vector": {"tok1": 1e39}}, "q.jsonl:2: weight of token 'tok1' is 1e+39, too large"),
    ({"id": "1-1_2", "vector": {"tok1": 0.0}}, "q.jsonl:2: query '1-1_2' has an empty vector (every weight is 0)"),
])
def test_bad_query_vectors_name_the_line(run_cli, float_index, query, expected):
    root, _ = float_index
    code, err = search(run_cli, root, {"id": "1-1_1", "vector": {"tok1": 0.5}}, query)
    assert code == 2 and expected in err and "Traceback" not in err


@pytest.mark.slow
def test_export_then_index_the_vectors_again_gives_the_same_runs(run_cli, small, tmp_path):
    root, collection, index, chosen = small
    exported = tmp_path / "vectors.jsonl"
    code, _, err = run_cli("index", "export-vectors", str(index), "--out", str(exported), "--with-text")
    assert code == 0, err
    first = json.loads(exported.read_text().splitlines()[0])
    assert first["contents"] and first["vector"]
    # with the model: its vocabulary, text queries still work; an unknown token is counted
    with exported.open("a") as handle:
        handle.write(json.dumps({"id": "extra:1", "contents": "x", "vector": {"not-a-bert-token-xyz": 1.0,
                                                                              "tea": 0.5}}) + "\n")
    code, _, err = run_cli("index", "build", "--collection", str(exported), "--vectors", "--encoder", "splade-tiny",
                           "--out", str(tmp_path / "again"))
    assert code == 0, err
    lines = len(exported.read_text().splitlines())
    assert (f"1 token occurrence(s) (1 distinct) not in the vocabulary, the first on line {lines}, e.g. "
            "'not-a-bert-token-xyz'") in err
    queries = tmp_path / "q.tsv"
    queries.write_text("10-1_1\tcomputer science universities in the netherlands\n10-1_2\tdo they teach ai\n")
    for folder, out in ((index, "a.trec"), (tmp_path / "again", "b.trec")):
        code, _, err = run_cli("retrieve", "--index", str(folder), "--queries", str(queries), "--out", str(tmp_path / out),
                               "--k", "20")
        assert code == 0, err
    original, rebuilt = load_run(tmp_path / "a.trec"), load_run(tmp_path / "b.trec")
    for turn in original:
        assert list(original[turn]) == list(rebuilt[turn])
        assert np.allclose(list(original[turn].values()), list(rebuilt[turn].values()), rtol=1e-6)
