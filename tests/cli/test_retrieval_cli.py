"""`apcir index build` and `apcir retrieve`: happy paths on a small collection, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("sentence_transformers")

from apcir import datasets
from apcir.contract.runs import load_run


def write_collection(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture(scope="module")
def small_index(tmp_path_factory) -> tuple[Path, Path]:
    from apcir.retrieval import build_index

    root = tmp_path_factory.mktemp("cli")
    passages = list(datasets.iter_collection(datasets.collection_path("ikat23-provenance")))[:30]
    collection = write_collection(root / "c.jsonl", [{"id": p.id, "contents": p.contents} for p in passages])
    build_index(collection, "embedded", root / "idx", encoder="splade-tiny", progress=False)
    return collection, root / "idx"


def test_build_then_retrieve_from_tsv(run_cli, small_index, tmp_path):
    collection, _ = small_index
    out = tmp_path / "idx"
    code, stdout, stderr = run_cli(
        "index", "build", "--collection", str(collection), "--backend", "embedded", "--encoder", "splade-tiny",
        "--out", str(out),
    )
    assert code == 0, stderr
    assert "built embedded index" in stdout and (out / "manifest.json").exists()
    code, stdout, _ = run_cli(
        "index", "build", "--collection", str(collection), "--encoder", "splade-tiny", "--out", str(out)
    )
    assert code == 0 and "up to date" in stdout
    queries = tmp_path / "q.tsv"
    queries.write_text("9-1-3\tcomputer science universities\n9-1_4\tcheap flights\tTry budget airlines.\n")
    code, stdout, stderr = run_cli("retrieve", "--index", str(out), "--queries", str(queries), "--k", "7",
                                   "--out", str(tmp_path / "run.trec"))
    assert code == 0, stderr
    run = load_run(tmp_path / "run.trec")
    assert set(run) == {"9-1_3", "9-1_4"} and all(0 < len(h) <= 7 for h in run.values())


def test_retrieve_from_reformulations_jsonl(run_cli, small_index, tmp_path):
    _, index = small_index
    records = [
        {"turn_id": "9-1_3", "model": "m", "output": {
            "reasoning": "r", "level": "b", "rewrite": "computer science universities", "response": "Delft and Utrecht",
            "third_rewrite": "computer science in the Netherlands", "third_response": "Eindhoven"}},
        {"turn_id": "9-1_4", "model": "m", "status": "failed", "error": "timeout"},
    ]
    path = tmp_path / "reformulations.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    code, _, stderr = run_cli("retrieve", "--index", str(index), "--queries", str(path), "--out", str(tmp_path / "r"))
    assert code == 2 and "--field" in stderr
    code, stdout, stderr = run_cli("retrieve", "--index", str(index), "--queries", str(path), "--field",
                                   "rewrite_response", "--out", str(tmp_path / "r"))
    assert code == 0, stderr
    assert "9-1_4 skipped: timeout" in stderr and "1 turn(s) skipped" in stdout
    assert set(load_run(tmp_path / "r")) == {"9-1_3"}
    # several fields in one call: the encoder and index load once, one run per field
    code, stdout, stderr = run_cli("retrieve", "--index", str(index), "--queries", str(path), "--field",
                                   "rewrite,rewrite_response,third", "--out", str(tmp_path / "lists"), "--tag", "x")
    assert code == 0, stderr
    for field in ("rewrite", "rewrite_response", "third"):
        assert set(load_run(tmp_path / "lists" / f"{field}.run")) == {"9-1_3"}
        assert f" x-{field}\n" in (tmp_path / "lists" / f"{field}.run").read_text()
    assert load_run(tmp_path / "lists" / "rewrite_response.run") == load_run(tmp_path / "r")
    code, stdout, stderr = run_cli("retrieve", "--index", str(index), "--queries", str(path), "--field",
                                   "rewrite,third", "--out", str(tmp_path / "pattern-{field}.trec"))
    assert code == 0, stderr
    assert (tmp_path / "pattern-third.trec").exists() and (tmp_path / "pattern-rewrite.trec").exists()
    # with the topics, as apcir run reads its reformulations: the failed turn is searched with its utterance
    topics = tmp_path / "topics.json"
    chosen = [t for t in datasets.topics("ikat23-test") if t.turn_id in {"9-1_3", "9-1_4"}]
    topics.write_text(json.dumps([{"number": "9-1", "ptkb": chosen[0].ptkb, "turns": [
        {"turn_id": t.turn_number, "utterance": t.utterance} for t in chosen]}]))
    code, stdout, stderr = run_cli("retrieve", "--index", str(index), "--queries", str(path), "--topics", str(topics),
                                   "--field", "rewrite", "--out", str(tmp_path / "filled.run"))
    assert code == 0, stderr
    assert "1 turn(s) have no reformulation and are searched with their raw utterance at level a: 9-1_4" in \
        " ".join(stderr.split())
    filled = load_run(tmp_path / "filled.run")
    assert set(filled) == {"9-1_3", "9-1_4"} and filled["9-1_3"] == load_run(tmp_path / "lists" / "rewrite.run")["9-1_3"]
    utterance = tmp_path / "utterance.tsv"
    utterance.write_text(f"9-1_4\t{chosen[1].utterance}\n")
    assert run_cli("retrieve", "--index", str(index), "--queries", str(utterance), "--out",
                   str(tmp_path / "u.run"))[0] == 0
    assert filled["9-1_4"] == load_run(tmp_path / "u.run")["9-1_4"]
    code, _, stderr = run_cli("retrieve", "--index", str(index), "--queries", str(utterance), "--topics", str(topics),
                              "--out", str(tmp_path / "x.run"))
    assert code == 2 and "--topics goes with a reformulations JSONL" in stderr
    before = topics.read_bytes()
    code, _, stderr = run_cli("retrieve", "--index", str(index), "--queries", str(path), "--topics", str(topics),
                              "--field", "rewrite", "--out", str(topics))
    assert code == 2 and topics.read_bytes() == before, stderr  # the topics named as the output: refused, kept


@pytest.mark.parametrize(
    "records, expected",
    [
        ([{"id": "a:1", "contents": "x"}, {"contents": "no id here"}], "bad.jsonl:2:"),
        ([{"id": "a:1", "contents": "x"}, {"id": "a:2"}], "bad.jsonl:2:"),
        ([{"doc_id": "d", "passage_id": "1", "passage_text": "x"}, {"doc_id": "d", "passage_text": "y"}], "bad.jsonl:2:"),
        ([{"id": "a:1", "contents": "x"}, {"id": "b:1", "contents": "y"}, {"id": "a:1", "contents": "z"}],
         "bad.jsonl:3: duplicate passage id 'a:1'"),
        ([{"id": "a 1", "contents": "x"}], "whitespace"),
    ],
)
def test_bad_collection_lines(run_cli, tmp_path, records, expected):
    collection = write_collection(tmp_path / "bad.jsonl", records)
    code, _, stderr = run_cli("index", "build", "--collection", str(collection), "--encoder", "splade-tiny",
                              "--out", str(tmp_path / "idx"))
    assert code == 2
    assert expected in stderr and "Traceback" not in stderr
    assert not (tmp_path / "idx" / "manifest.json").exists()


def test_duplicate_ids_across_shards_are_refused(tmp_path):
    from apcir.errors import ApcirError
    from apcir.retrieval import build_index

    records = [{"id": f"p:{i}", "contents": f"passage number {i}"} for i in range(6)] + [{"id": "p:0", "contents": "again"}]
    collection = write_collection(tmp_path / "dup.jsonl", records)
    for shard in ("0/2", "1/2"):
        build_index(collection, "embedded", tmp_path / "idx", encoder="splade-tiny", shard=shard, progress=False)
    with pytest.raises(ApcirError, match="duplicate passage id 'p:0'"):
        build_index(collection, "embedded", tmp_path / "idx", encoder="splade-tiny", progress=False)


def test_index_of_another_model_is_refused(run_cli, small_index, tmp_path):
    _, index = small_index
    queries = tmp_path / "q.tsv"
    queries.write_text("9-1_3\tcomputer science\n")
    code, _, stderr = run_cli("retrieve", "--index", str(index), "--queries", str(queries), "--out",
                              str(tmp_path / "r"), "--encoder", "naver/splade-cocondenser-ensembledistil")
    assert code == 2
    assert "splade-tiny" in stderr and "naver/splade-cocondenser-ensembledistil" in stderr


def test_index_of_another_model_is_refused_for_a_loaded_encoder(small_index, tmp_path):
    import torch
    import transformers

    from apcir.errors import ApcirError
    from apcir.retrieval import SpladeEncoder, open_index, splade_tiny_path

    folder = tmp_path / "other-model"
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(splade_tiny_path()))
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=1, intermediate_size=32)
    transformers.BertForMaskedLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    with pytest.raises(ApcirError) as caught:
        open_index(small_index[1], SpladeEncoder(str(folder), device="cpu"))
    assert "splade-tiny" in str(caught.value) and str(folder) in str(caught.value)


def test_missing_index_directory(run_cli, tmp_path):
    queries = tmp_path / "q.tsv"
    queries.write_text("9-1_3\tcomputer science\n")
    code, _, stderr = run_cli("retrieve", "--index", str(tmp_path / "nope"), "--queries", str(queries),
                              "--out", str(tmp_path / "r"))
    assert code == 2 and "index directory not found" in stderr and "nope" in stderr
    (tmp_path / "empty").mkdir()
    code, _, stderr = run_cli("retrieve", "--index", str(tmp_path / "empty"), "--queries", str(queries),
                              "--out", str(tmp_path / "r"))
    assert code == 2 and "not an apcir index" in stderr


@pytest.mark.parametrize(
    "content, expected",
    [("9-1_3 no tab here\n", "found 1 field"), ("9-1_3\tq\n9-1-3\tagain\n", "appears twice"), ("", "no queries")],
)
def test_bad_queries_file(run_cli, small_index, tmp_path, content, expected):
    queries = tmp_path / "q.tsv"
    queries.write_text(content)
    code, _, stderr = run_cli("retrieve", "--index", str(small_index[1]), "--queries", str(queries),
                              "--out", str(tmp_path / "r"))
    assert code == 2 and expected in stderr


def test_provenance_qrels_are_reproducible(tmp_path):
    from apcir.retrieval.provenance_qrels import main, restrict_qrels

    main([str(tmp_path / "q.qrels")])
    bundled = Path(datasets.qrels_path("ikat23-test-provenance")).read_text()
    assert (tmp_path / "q.qrels").read_text() == bundled
    qrels = datasets.qrels("ikat23-test-provenance")
    ids = {p.id for p in datasets.iter_collection(datasets.collection_path("ikat23-provenance"))}
    assert all(pid in ids for judged in qrels.values() for pid in judged)
    assert all(any(g >= 1 for g in judged.values()) for judged in qrels.values())
    assert restrict_qrels({"t_1": {"a": 0, "b": 2, "c": 3}, "t_2": {"a": 0}}, {"a", "b"}) == {"t_1": {"a": 0, "b": 2}}


def test_dtype_from_the_command_line_reaches_the_index_and_the_query_encoder(run_cli, small_index, tmp_path):
    collection, _ = small_index
    few = write_collection(tmp_path / "few.jsonl", [json.loads(line) for line in collection.read_text().splitlines()[:6]])
    out = tmp_path / "half"
    code, stdout, stderr = run_cli("index", "build", "--collection", str(few), "--encoder", "splade-tiny",
                                   "--out", str(out), "--dtype", "bfloat16", "--device", "cpu")
    assert code == 0, stderr
    assert json.loads((out / "manifest.json").read_text())["dtype"] == "bfloat16"
    assert "encoded in bfloat16" in stdout
    queries = tmp_path / "q.tsv"
    queries.write_text("9-1_3\tcomputer science universities\n")
    code, _, stderr = run_cli("retrieve", "--index", str(out), "--queries", str(queries), "--k", "3",
                              "--out", str(tmp_path / "run.trec"), "--device", "cpu")
    assert code == 0 and "passages were encoded in bfloat16 and the queries are encoded in float32" in stderr
    code, _, stderr = run_cli("retrieve", "--index", str(out), "--queries", str(queries), "--k", "3",
                              "--out", str(tmp_path / "run2.trec"), "--device", "cpu", "--dtype", "bfloat16")
    assert code == 0 and "encoded in" not in stderr
    code, _, stderr = run_cli("index", "build", "--collection", str(few), "--encoder", "splade-tiny",
                              "--out", str(out), "--dtype", "float32")
    assert code == 2 and "encoded in bfloat16, not float32; pass --overwrite" in stderr


@pytest.mark.parametrize("command", [["index", "build", "--collection", "c.jsonl", "--out", "x"],
                                     ["retrieve", "--index", "x", "--queries", "q.tsv", "--out", "r"],
                                     ["rank-ptkb", "--topics", "ikat23-test", "--out", "p.run"],
                                     ["baseline", "entropy", "--runs", "a.run", "--out", "b.run"]])
def test_an_unknown_dtype_is_one_line_before_any_work(run_cli, tmp_path, command, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, stderr = run_cli(*command, "--dtype", "half")
    assert code == 2 and "dtype 'half' is not a precision apcir knows" in stderr
    assert len([line for line in stderr.splitlines() if line.strip()]) == 1
