"""``apcir rerank`` end to end with a tiny monoT5, and its answers to bad input (issue 10)."""

from __future__ import annotations

import json

import pytest
from tiny_models import tiny_t5, write_collection

from apcir.contract.reformulations import ReformulationOutput, ReformulationRecord
from apcir.contract.runs import ranking, read_run_file

TURNS = ["9-1_1", "9-1_2"]
TEXTS = ["Delft and Eindhoven are known for engineering and computer science.", "Short one.",
         "The price of cheese in Amsterdam rose again this year.", "Utrecht offers an exchange programme.",
         "A passage about vegetarian recipes and lasagne.", "Computer science rankings list Leiden.",
         "Nothing relevant here at all.", "Football clubs in Rotterdam and their stadiums."]


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    return tiny_t5(tmp_path_factory.mktemp("t5cli") / "model")


@pytest.fixture
def files(tmp_path):
    passages = {f"clueweb22-en0000-00-{i:05d}:{j}": f"{TEXTS[(i + j) % len(TEXTS)]} ({i}, {j})"
                for i in range(12) for j in range(2)}
    ids = sorted(passages)
    lines = []
    for t, turn in enumerate(TURNS):
        for rank, pid in enumerate(ids[t : t + 20], start=1):
            lines.append(f"{turn} Q0 {pid} {rank} {30.0 - rank} first\n")
    (tmp_path / "in.run").write_text("".join(lines))
    (tmp_path / "q.tsv").write_text("9-1_1\tcomputer science in the netherlands\n9-1-2\tcheese prices\n")
    write_collection(tmp_path / "c.jsonl", passages)
    records = [ReformulationRecord(turn_id=turn, model="test", output=ReformulationOutput(
        reasoning="", level="a", rewrite=f"rewrite of {turn}", response=f"response of {turn}",
        third_rewrite="third", third_response="third response")) for turn in TURNS]
    (tmp_path / "refs.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records))
    return tmp_path


def args(files, t5, *extra):
    return ["rerank", "--run", str(files / "in.run"), "--queries", str(files / "q.tsv"), "--collection",
            str(files / "c.jsonl"), "--reranker", "monot5", "--model", str(t5), "--device", "cpu", "--no-progress",
            *extra]


def test_rerank_monot5_cli_writes_a_run_and_keeps_the_order_below_the_cut(files, t5, run_cli):
    code, out, err = run_cli(*args(files, t5, "--depth", "10", "--out", str(files / "out.run"), "--json"))
    assert code == 0, err
    summary = json.loads(out)
    assert summary["turns_reranked"] == 2 and summary["passages_reranked"] == 20 and summary["depth"] == 10
    before = read_run_file(files / "in.run").run
    after = read_run_file(files / "out.run")
    assert after.tag == "first+monot5" and not after.problems
    for turn in TURNS:
        old = [p for p, _ in ranking(before[turn])]
        new = [p for p, _ in ranking(after.run[turn])]
        assert sorted(new[:10]) == sorted(old[:10]) and new[10:] == old[10:]
        assert all(after.run[turn][p] <= 0 for p in new[:10])  # log P(true)


def test_reformulations_jsonl_with_a_field_and_the_reranker_model_alias(files, t5, run_cli):
    for field in ("rewrite", "rewrite_response", "third"):
        code, _, err = run_cli("rerank", "--run", str(files / "in.run"), "--queries", str(files / "refs.jsonl"),
                               "--field", field, "--collection", str(files / "c.jsonl"), "--reranker-model", str(t5),
                               "--device", "cpu", "--depth", "5", "--out", str(files / f"{field}.run"),
                               "--no-progress")
        assert code == 0, err
    runs = [read_run_file(files / f"{field}.run").run for field in ("rewrite", "rewrite_response", "third")]
    assert runs[0] != runs[1] != runs[2]  # three different queries


def test_a_rankgpt_window_smaller_than_its_step_is_refused(files, run_cli):
    code, _, err = run_cli("rerank", "--run", str(files / "in.run"), "--queries", str(files / "q.tsv"),
                           "--collection", str(files / "c.jsonl"), "--reranker", "rankgpt", "--window", "5", "--step",
                           "8", "--out", str(files / "out.run"))
    assert code == 2 and "step 8 is larger than window 5" in err


@pytest.mark.parametrize("extra, message", [
    (["--depth", "0"], "--depth 0: Input should be greater than or equal to 1"),
    (["--reranker", "monobert"], "--reranker: unknown re-ranker 'monobert': did you mean 'monot5'? (expected one of "
                                  "monot5, cross-encoder, rankgpt)"),
    (["--field", "rewrite"], "--field rewrite applies to a reformulations JSONL file, not a TSV"),
    (["--window", "5", "--step", "8"], "window: not used by the monot5 re-ranker"),
    (["--window", "5"], "window: not used by the monot5 re-ranker"),
])
def test_bad_options_exit_2_with_one_line(files, t5, run_cli, extra, message):
    code, _, err = run_cli(*args(files, t5, "--out", str(files / "out.run"), *extra))
    assert code == 2 and message in err and "Traceback" not in err
    assert not (files / "out.run").exists()


def test_a_hub_model_offline_names_the_way_out(files, run_cli, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = run_cli("rerank", "--run", str(files / "in.run"), "--queries", str(files / "q.tsv"),
                           "--collection", str(files / "c.jsonl"), "--device", "cpu", "--out",
                           str(files / "out.run"), "--no-progress")
    assert code == 2
    assert "castorini/monot5-base-msmarco-10k" in err and "--model PATH" in err and "network" in err


def test_passages_missing_from_the_collection_are_counted_and_keep_their_place(files, t5, run_cli):
    lines = (files / "in.run").read_text().splitlines()
    lines[2] = "9-1_1 Q0 clueweb22-en9999-99-99999:9 3 27.0 first"  # rank 3: not in the collection
    (files / "in.run").write_text("\n".join(lines) + "\n")
    code, out, err = run_cli(*args(files, t5, "--depth", "10", "--out", str(files / "out.run"), "--json"))
    assert code == 0, err
    assert "1 passage(s) to re-rank are not in the collection (e.g. clueweb22-en9999-99-99999:9)" in err
    assert json.loads(out)["missing_passages"] == 1
    order = [p for p, _ in ranking(read_run_file(files / "out.run").run["9-1_1"])]
    assert order[2] == "clueweb22-en9999-99-99999:9"


def test_a_run_from_another_collection_is_refused(files, t5, run_cli, tmp_path):
    write_collection(tmp_path / "other.jsonl", {"x:1": "something else"})
    code, _, err = run_cli("rerank", "--run", str(files / "in.run"), "--queries", str(files / "q.tsv"),
                           "--collection", str(tmp_path / "other.jsonl"), "--model", str(t5), "--device", "cpu",
                           "--out", str(files / "out.run"), "--no-progress")
    assert code == 2 and "none of the run's passages to re-rank is in the collection" in err


def test_a_depth_above_the_run_length_warns_and_reranks_everything(files, t5, run_cli):
    code, out, err = run_cli(*args(files, t5, "--depth", "500", "--out", str(files / "out.run"), "--json"))
    assert code == 0, err
    assert "depth 500 is above the run's length (its longest turn has 20 passages)" in err
    assert json.loads(out)["passages_reranked"] == 40


def test_an_empty_run_is_refused(files, t5, run_cli):
    (files / "in.run").write_text("")
    code, _, err = run_cli(*args(files, t5, "--out", str(files / "out.run")))
    assert code == 2 and "the run holds no passage" in err


def test_a_directory_given_as_queries_is_named_as_one(files, t5, run_cli):
    (files / "qdir").mkdir()
    code, _, err = run_cli("rerank", "--run", str(files / "in.run"), "--queries", str(files / "qdir"),
                           "--collection", str(files / "c.jsonl"), "--model", str(t5), "--device", "cpu",
                           "--out", str(files / "out.run"), "--no-progress")
    assert code == 2 and "qdir: " in err and "is a directory, not a file" in err and "not found" not in err


def test_rerank_takes_a_precision_from_the_command_line(files, t5, run_cli):
    code, out, err = run_cli(*args(files, t5, "--depth", "5", "--out", str(files / "half.run"), "--dtype",
                                   "bfloat16", "--json"))
    assert code == 0, err
    assert json.loads(out)["passages_reranked"] == 10
    code, _, err = run_cli(*args(files, t5, "--out", str(files / "bad.run"), "--dtype", "half"))
    assert code == 2 and "--dtype 'half'" in err and "'auto', 'float32', 'bfloat16' or 'float16'" in err


def test_with_the_topics_a_failed_reformulation_is_reranked_with_the_utterance(files, t5, run_cli):
    """``--topics``: the reformulations read as apcir run reads them, so a turn whose reformulation failed is asked
    with its utterance (as a TSV of that utterance asks it) instead of keeping its order; a TSV with --topics is
    refused."""
    from apcir import datasets

    records = [json.loads(line) for line in (files / "refs.jsonl").read_text().splitlines()]
    records[1] = {"turn_id": TURNS[1], "model": "test", "status": "failed", "error": "timeout"}
    (files / "refs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    common = ["--collection", str(files / "c.jsonl"), "--reranker-model", str(t5), "--device", "cpu", "--depth",
              "5", "--no-progress"]
    code, _, err = run_cli("rerank", "--run", str(files / "in.run"), "--queries", str(files / "refs.jsonl"),
                           "--out", str(files / "kept.run"), *common)
    assert code == 0 and f"turn {TURNS[1]} has no query" in err
    code, _, err = run_cli("rerank", "--run", str(files / "in.run"), "--queries", str(files / "refs.jsonl"),
                           "--topics", "ikat23-test", "--out", str(files / "filled.run"), *common)
    assert code == 0, err
    assert f"1 turn(s) have no reformulation and are searched with their raw utterance at level a: {TURNS[1]}" in \
        " ".join(err.split())
    utterance = {t.turn_id: t.utterance for t in datasets.topics("ikat23-test")}[TURNS[1]]
    (files / "u.tsv").write_text(f"{TURNS[1]}\t{utterance}\n")
    assert run_cli("rerank", "--run", str(files / "in.run"), "--queries", str(files / "u.tsv"), "--out",
                   str(files / "u.run"), *common)[0] == 0
    filled, kept = read_run_file(files / "filled.run").run, read_run_file(files / "kept.run").run
    assert filled[TURNS[1]] == read_run_file(files / "u.run").run[TURNS[1]] != kept[TURNS[1]]
    assert filled[TURNS[0]] == kept[TURNS[0]]
    code, _, err = run_cli("rerank", "--run", str(files / "in.run"), "--queries", str(files / "u.tsv"),
                           "--topics", "ikat23-test", "--out", str(files / "x.run"), *common)
    assert code == 2 and "--topics goes with a reformulations JSONL" in err
    topics = files / "topics.json"
    topics.write_text("[]")
    code, _, err = run_cli("rerank", "--run", str(files / "in.run"), "--queries", str(files / "refs.jsonl"),
                           "--topics", str(topics), "--out", str(topics), *common)
    assert code == 2 and topics.read_text() == "[]", err  # the topics named as the output: refused, kept
