"""JsonVectorCollection JSONL: streaming reader checks, vocabularies, writer round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from apcir.errors import ApcirError
from apcir.retrieval.vectors import VectorStats, read_matrix, read_vectors, write_vectors


def write_lines(path, *lines: str):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_reads_float_and_int_weights_and_builds_vocabulary(tmp_path):
    path = write_lines(
        tmp_path / "c.jsonl",
        json.dumps({"id": "a", "contents": "text a", "vector": {"x": 1.5, "y": 2}}),
        "",
        json.dumps({"id": 7, "vector": {"y": 3, "z": 0.25}}),
    )
    stats = VectorStats()
    records = list(read_vectors(path, stats=stats))
    assert [r.id for r in records] == ["a", "7"]
    assert records[0].contents == "text a" and records[1].contents == ""
    assert stats.vocabulary == {"x": 0, "y": 1, "z": 2}
    assert records[1].terms.tolist() == [1, 2]
    assert records[1].weights.dtype == np.float32
    assert records[1].weights.tolist() == [3.0, 0.25]
    assert stats.lines == 2 and stats.unknown_total == 0


def test_given_vocabulary_counts_unknown_tokens(tmp_path):
    path = write_lines(
        tmp_path / "c.jsonl",
        json.dumps({"id": "a", "vector": {"x": 1, "new": 2}}),
        json.dumps({"id": "b", "vector": {"new": 1, "other": 1}}),
    )
    stats = VectorStats()
    records = list(read_vectors(path, {"x": 5, "y": 9}, stats))
    assert records[0].terms.tolist() == [5]
    assert records[1].terms.size == 0
    assert stats.unknown == {"new": 2, "other": 1}
    assert stats.unknown_total == 3
    assert stats.vocabulary == {}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"id": "a", "vector": {"x": "1.0"}}', "not a number"),
        ('{"id": "a", "vector": {"x": true}}', "not a number"),
        ('{"id": "a", "vector": {"x": null}}', "not a number"),
        ('{"id": "a", "vector": {"x": -0.5}}', "negative"),
        ('{"id": "a", "vector": {"x": NaN}}', "finite"),
        ('{"id": "a", "vector": {"x": Infinity}}', "finite"),
        ('{"id": "a", "vector": {}}', "empty vector"),
        ('{"id": "a", "vector": {"x": 0, "y": 0.0}}', "empty vector \\(every weight is 0\\)"),
        ('{"id": "a", "vector": {"x": 1e39}}', "too large for a 32-bit float"),
        ('{"id": "a", "vector": {"x": 1' + "0" * 400 + '}}', "too large for a 32-bit float"),
        ('{"id": "a b", "vector": {"x": 1}}', "passage id 'a b' contains whitespace"),
        ('{"id": "a\\tb", "vector": {"x": 1}}', "contains whitespace"),
        ('{"id": "", "vector": {"x": 1}}', "passage id '' is empty"),
        ('{"id": null, "vector": {"x": 1}}', "missing \"id\""),
        ('{"id": [1], "vector": {"x": 1}}', "neither a string nor an integer"),
        ('{"id": "a", "vector": {"x": 1' + "0" * 5000 + '}}', "malformed JSON"),
        ("[" * 100_000 + "]" * 100_000, "malformed JSON"),
        ('{"id": "a"}', "missing \"vector\""),
        ('{"vector": {"x": 1}}', "missing \"id\""),
        ('[1, 2]', "JSON object"),
        ('{"id": "a", "vector": {"x": 1}', "malformed JSON"),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path, line, message):
    path = write_lines(tmp_path / "bad.jsonl", json.dumps({"id": "ok", "vector": {"x": 1}}), line)
    with pytest.raises(ApcirError, match=message) as info:
        list(read_vectors(path))
    assert info.value.path == str(path)
    assert info.value.line == 2
    assert "bad.jsonl:2: " in str(info.value)


def test_weights_are_integers_only_when_written_as_json_integers(tmp_path):
    for vector, integral in [({"x": 1, "y": 37}, True), ({"x": 1.0, "y": 2.0}, False), ({"x": 1, "y": 2.0}, False),
                             ({"x": 1e2}, False)]:
        stats = VectorStats()
        list(read_vectors(write_lines(tmp_path / "c.jsonl", json.dumps({"id": "a", "vector": vector})), stats=stats))
        assert stats.integral is integral, vector


def test_a_query_file_names_its_records_queries(tmp_path):
    path = write_lines(tmp_path / "q.jsonl", json.dumps({"id": "foo bar", "vector": {"x": 1}}))
    with pytest.raises(ApcirError, match="q.jsonl:1: query id 'foo bar' contains whitespace"):
        read_matrix(path, what="query")


def test_missing_file(tmp_path):
    with pytest.raises(ApcirError, match="not found"):
        list(read_vectors(tmp_path / "none.jsonl"))


def test_is_streaming(tmp_path):
    path = write_lines(tmp_path / "c.jsonl", json.dumps({"id": "a", "vector": {"x": 1}}), "not json")
    reader = read_vectors(path)
    assert next(reader).id == "a"  # the bad second line is not read yet
    with pytest.raises(ApcirError):
        next(reader)


def test_write_then_read_round_trip_float_and_integer(tmp_path):
    rng = np.random.default_rng(1)
    matrix = sp.random(30, 50, density=0.2, format="csr", dtype=np.float32, random_state=rng)
    matrix.data += 0.01
    vocabulary = [f"tok{i}" for i in range(50)]
    ids = [f"p{i}" for i in range(30)]
    path = tmp_path / "out.jsonl"
    assert write_vectors(path, ids, matrix, vocabulary) == 30
    back, back_ids, stats = read_matrix(path, {t: i for i, t in enumerate(vocabulary)})
    assert back_ids == ids and stats.unknown_total == 0
    assert back.shape == matrix.shape
    assert np.array_equal(back.toarray(), matrix.toarray())  # float32 survives the JSON round trip exactly

    ints = tmp_path / "impacts.jsonl"
    write_vectors(ints, ids, matrix, vocabulary, integer_scale=100)
    first = json.loads(ints.read_text().splitlines()[0])
    assert all(isinstance(v, int) for v in first["vector"].values())
    back, _, _ = read_matrix(ints, {t: i for i, t in enumerate(vocabulary)})
    expected = np.rint(matrix.toarray() * 100)
    assert np.array_equal(back.toarray(), expected)


def test_writer_refuses_empty_and_negative(tmp_path):
    vocabulary = ["a", "b"]
    empty = sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 0.0]], dtype=np.float32))
    with pytest.raises(ApcirError, match="empty vector"):
        write_vectors(tmp_path / "x.jsonl", ["p", "q"], empty, vocabulary)
    tiny = sp.csr_matrix(np.array([[0.001, 0.0]], dtype=np.float32))
    with pytest.raises(ApcirError, match="empty vector"):  # rounds to 0 at scale 100
        write_vectors(tmp_path / "x.jsonl", ["p"], tiny, vocabulary, integer_scale=100)
    negative = sp.csr_matrix(np.array([[1.0, -1.0]], dtype=np.float32))
    with pytest.raises(ApcirError, match="negative"):
        write_vectors(tmp_path / "x.jsonl", ["p"], negative, vocabulary)
    assert not (tmp_path / "x.jsonl").exists()


def test_read_matrix_builds_its_own_vocabulary_across_files(tmp_path):
    one = write_lines(tmp_path / "1.jsonl", json.dumps({"id": "a", "vector": {"x": 1, "y": 2}}))
    two = write_lines(tmp_path / "2.jsonl", json.dumps({"id": "b", "vector": {"z": 3, "x": 4}}))
    matrix, ids, stats = read_matrix([one, two])
    assert ids == ["a", "b"]
    assert stats.vocabulary == {"x": 0, "y": 1, "z": 2}
    assert matrix.toarray().tolist() == [[1, 2, 0], [4, 0, 3]]
