"""Several runs' responses evaluated side by side without nuggets (issue 49): two real responses files written by
``apcir respond`` (the extractive responder over the bundled collection, from two runs that put the judged
relevant passages first or last), one table naming both runs, JSON and --out with every run, paired tests against
--baseline, per-level rows, and the LLM judge's requests and cache hits counted per run."""

from __future__ import annotations

import json
import re

import pytest
from fake_openai import FakeOpenAI

from apcir import datasets
from apcir.contract.responses import ResponseRecord
from apcir.evaluation.responses import JUDGE, PRECISION, ROUGE


def _turns_with_both_grades() -> dict[str, tuple[list[str], list[str]]]:
    """Turns of ikat23-test with a canonical response and at least two relevant and two non-relevant judged
    passages in the bundled collection: turn -> (relevant, not relevant)."""
    present = {p.id for p in datasets.iter_collection(datasets.collection_path("ikat23-provenance"))}
    qrels = datasets.qrels("ikat23-test")
    chosen = {}
    for turn in datasets.topics("ikat23-test"):
        grades = {p: g for p, g in qrels.get(turn.turn_id, {}).items() if p in present}
        relevant = sorted(p for p, g in grades.items() if g >= 1)
        other = sorted(p for p, g in grades.items() if g == 0)
        if turn.response.strip() and len(relevant) >= 2 and len(other) >= 2:
            chosen[turn.turn_id] = (relevant, other)
    return chosen


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """a/responses.jsonl and b/responses.jsonl by ``apcir respond`` (extractive, the top 2 passages): a from a run
    ranking the relevant passages first, b from one ranking them last; the topics are ikat23-test cut to the
    chosen turns (the others have no passages in these runs)."""
    from apcir.cli.main import main

    root = tmp_path_factory.mktemp("response-runs")
    chosen = _turns_with_both_grades()
    topics = []
    for conversation in json.loads(datasets.topics_path("ikat23-test").read_text()):
        number = conversation["number"]
        conversation["turns"] = [t for t in conversation["turns"] if f"{number}_{t['turn_id']}" in chosen]
        topics += [conversation] if conversation["turns"] else []
    (root / "topics.json").write_text(json.dumps(topics))
    for name, order in (("a", lambda rel, other: rel + other), ("b", lambda rel, other: other + rel)):
        lines = [f"{turn} Q0 {p} {rank} {100 - rank} {name}\n" for turn, (rel, other) in chosen.items()
                 for rank, p in enumerate(order(rel, other), start=1)]
        (root / f"{name}.run").write_text("".join(lines))
        try:
            main(["respond", str(root / f"{name}.run"), "--topics", str(root / "topics.json"), "--collection",
                  "ikat23-provenance", "-k", "2", "-o", str(root / name / "responses.jsonl")])
        except SystemExit as exc:
            assert not exc.code, f"apcir respond failed for run {name}"
    return root, chosen


def _rows(out: str) -> dict[str, list[str]]:
    """The first table's data rows by their first cell (the run)."""
    rows = {}
    for line in out.split("└")[0].splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line)[1:-1]]
        if cells and cells[0] and cells[0] != "run":
            rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.slow  # two apcir respond runs, ROUGE-L's first import (nltk, scipy.stats)
def test_two_runs_side_by_side_in_one_table(two_runs, run_cli, monkeypatch):
    root, chosen = two_runs
    monkeypatch.chdir(root)
    code, out, err = run_cli("evaluate-responses", "a/responses.jsonl", "b/responses.jsonl", "--topics", "ikat23-test")
    assert code == 0, err
    assert "give one responses file" not in err and "Traceback" not in err
    assert " ".join(out.split()).count("responses of 2 runs on ikat23-test (x100)") == 1, out
    rows = _rows(out)
    assert set(rows) == {"a", "b"}, out
    # each run's cell is that run's own ROUGE-L, as one-run evaluate-responses gives it, over the chosen turns
    alone = {}
    for name in "ab":
        code, single, err = run_cli("evaluate-responses", f"{name}/responses.jsonl", "--topics", "ikat23-test",
                                    "--json")
        assert code == 0, err
        alone[name] = json.loads(single)
        assert alone[name]["turns"][ROUGE] == len(chosen)
        assert rows[name] == ["all", f"{100 * alone[name]['measures'][ROUGE]:.1f} (n={len(chosen)})"]
    assert alone["a"]["measures"][ROUGE] != alone["b"]["measures"][ROUGE], "the runs differ"
    assert "--baseline RUN tests every other run" in out


@pytest.mark.slow
def test_every_run_in_json_and_out_with_citations_and_paired_tests(two_runs, run_cli, monkeypatch):
    root, chosen = two_runs
    monkeypatch.chdir(root)
    args = ("evaluate-responses", "a/responses.jsonl", "mine=b/responses.jsonl", "--topics", "ikat23-test",
            "--qrels", "ikat23-test", "--baseline", "a")
    code, out, err = run_cli(*args, "--json", "--out", "all.json")
    assert code == 0, err
    printed = json.loads(out)
    assert printed == json.loads((root / "all.json").read_text())
    assert list(printed["runs"]) == ["a", "mine"] and printed["baseline"] == "a"
    a, b = printed["runs"]["a"], printed["runs"]["mine"]
    assert a["measures"][PRECISION] == 1.0 and b["measures"][PRECISION] == 0.0  # relevant first, relevant last
    assert set(a["per_turn"]) == set(b["per_turn"]) == set(chosen)
    tests = {t["measure"]: t for t in printed["tests"]}
    assert set(tests) == {ROUGE, PRECISION, "relevant citation"} and all(t["system"] == "mine" for t in tests.values())
    assert tests[PRECISION]["n_turns"] == len(chosen) and tests[PRECISION]["significant"]
    assert tests[PRECISION]["mean_system"] == 0.0 and tests[PRECISION]["mean_baseline"] == 1.0
    code, out, err = run_cli(*args)
    assert code == 0, err
    rows = _rows(out)
    assert rows["a (baseline)"][2] == f"100.0 (n={len(chosen)})" and rows["mine"][2] == f"0.0↓ (n={len(chosen)})"
    assert "each run against a, over the turns both scored" in out
    code, _, err = run_cli("evaluate-responses", "a/responses.jsonl", "b/responses.jsonl", "--topics", "ikat23-test",
                           "--baseline", "c")
    assert code == 2 and "--baseline 'c' is not one of the runs: a, b" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_per_level_rows_of_every_run(two_runs, run_cli, monkeypatch):
    root, chosen = two_runs
    monkeypatch.chdir(root)
    levels = root / "levels.tsv"
    levels.write_text("".join(f"{t}\t{'ab'[i % 2]}\n" for i, t in enumerate(chosen)))
    code, out, err = run_cli("evaluate-responses", "a/responses.jsonl", "b/responses.jsonl", "--topics",
                             "ikat23-test", "--levels", str(levels), "--json")
    assert code == 0, err
    runs = json.loads(out)["runs"]
    for run in runs.values():
        assert set(run["per_level"]) == {"a", "b"}
        assert run["level_turns"]["a"][ROUGE] + run["level_turns"]["b"][ROUGE] == len(chosen)
    code, out, err = run_cli("evaluate-responses", "a/responses.jsonl", "b/responses.jsonl", "--topics",
                             "ikat23-test", "--levels", str(levels))
    assert code == 0, err
    flat = [re.sub(r"\s+", " ", line) for line in out.splitlines()]
    assert sum("│ level a │" in line for line in flat) == 2 and sum("│ level b │" in line for line in flat) == 2


def _records(turns, texts):
    return "".join(ResponseRecord(turn_id=t.turn_id, responder="r", text=text, passages=["p"], citations=["p"])
                   .model_dump_json() + "\n" for t, text in zip(turns, texts))


def test_the_judge_runs_per_run_and_counts_each_runs_requests_and_cache_hits(run_cli, tmp_path, monkeypatch):
    """Two runs sharing one response text: the second run's request for it is the first's, from the cache; every
    other request is sent once; each run reports its own requests and cache hits."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-judge")
    monkeypatch.delenv("APCIR_CACHE_DIR", raising=False)
    turns = [t for t in datasets.topics("ikat23-test") if t.response.strip()][:3]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "responses.jsonl").write_text(_records(turns, ["Alpha one [1].", "Alpha two [1].", "Same [1]."]))
    (tmp_path / "b" / "responses.jsonl").write_text(_records(turns, ["Beta one [1].", "Beta two [1].", "Same [1]."]))
    answer = json.dumps({"aspects": [{"aspect": "x", "score": 2}, {"aspect": "y", "score": 1}]})
    with FakeOpenAI(content=lambda body: answer) as server:
        code, out, err = run_cli("evaluate-responses", str(tmp_path / "a" / "responses.jsonl"),
                                 str(tmp_path / "b" / "responses.jsonl"), "--topics", "ikat23-test", "--judge",
                                 "judge-x", "--base-url", server.url, "--cache-dir", str(tmp_path / "cache"),
                                 "--retry-delay", "0.001", "--json")
        assert code == 0, err
        assert server.count == 5, "3 requests for a, 2 for b: its third is a's, from the cache"
    runs = json.loads(out)["runs"]
    assert (runs["a"]["judge"]["requests"], runs["a"]["judge"]["cache_hits"]) == (3, 0)
    assert (runs["b"]["judge"]["requests"], runs["b"]["judge"]["cache_hits"]) == (2, 1)
    assert runs["a"]["measures"][JUDGE] == runs["b"]["measures"][JUDGE] == pytest.approx(0.75)
    with FakeOpenAI(content=lambda body: answer) as server:  # again: everything from the cache
        code, out, err = run_cli("evaluate-responses", str(tmp_path / "a" / "responses.jsonl"),
                                 str(tmp_path / "b" / "responses.jsonl"), "--topics", "ikat23-test", "--judge",
                                 "judge-x", "--base-url", server.url, "--cache-dir", str(tmp_path / "cache"))
        assert code == 0 and server.count == 0, err
    text = " ".join(out.split())
    assert "a: judge judge-x: 3 turns judged, 0 unjudged, 0 requests, 3 from the cache" in text
    assert "b: judge judge-x: 3 turns judged, 0 unjudged, 0 requests, 3 from the cache" in text


def test_bad_runs_are_one_line(run_cli, tmp_path):
    turns = [t for t in datasets.topics("ikat23-test") if t.response.strip()][:2]
    for folder in ("x", "y"):
        (tmp_path / folder / "same").mkdir(parents=True)
        (tmp_path / folder / "same" / "responses.jsonl").write_text(_records(turns, ["An answer [1].", "More [1]."]))
    a, b = (str(tmp_path / f / "same" / "responses.jsonl") for f in ("x", "y"))
    code, _, err = run_cli("evaluate-responses", a, b, "--topics", "ikat23-test")
    assert code == 2 and "two responses files hold a run named 'same': name them NAME=PATH" in " ".join(err.split())
    code, out, err = run_cli("evaluate-responses", a, f"other={b}", "--topics", "ikat23-test", "--json")
    assert code == 0 and set(json.loads(out)["runs"]) == {"same", "other"}, err
    bergen = tmp_path / "run.json"
    bergen.write_text(json.dumps([{"q_id": turns[0].turn_id, "response": "text"}]))
    code, _, err = run_cli("evaluate-responses", str(bergen), "--topics", "ikat23-test")
    assert code == 2 and "--nuggets" in err and len(err.strip().splitlines()) == 1


def test_a_turn_answered_twice_is_refused_and_empty_responses_are_named(run_cli, tmp_path):
    """`11-1_6` and `11-1-6` are one turn: both lines are named, whichever form (issue 49); an ok record after a
    failed one is a resumed run's log and is read as before. Empty responses are not scored, with a warning."""
    turns = [t for t in datasets.topics("ikat23-test") if t.response.strip()][:3]
    first = turns[0].turn_id
    conversation, number = first.rsplit("_", 1)
    twice = tmp_path / "twice.jsonl"
    twice.write_text(_records(turns, ["One [1].", "Two [1].", "Three [1]."])
                     + ResponseRecord(turn_id=f"{conversation}-{number}", responder="r", text="Other [1].",
                                      passages=["p"], citations=["p"]).model_dump_json() + "\n")
    code, _, err = run_cli("evaluate-responses", str(twice), "--topics", "ikat23-test")
    flat = " ".join(err.split())
    assert code == 2 and f"two responses for turn {first}: line 1 ('{first}') and line 4 ('{conversation}-{number}')" \
        in flat and len(err.strip().splitlines()) <= 2, err
    resumed = tmp_path / "resumed.jsonl"
    resumed.write_text(ResponseRecord(turn_id=first, responder="r", status="failed", error="x").model_dump_json()
                       + "\n" + _records(turns, ["One [1].", "Two [1].", "Three [1]."]))
    code, out, err = run_cli("evaluate-responses", str(resumed), "--topics", "ikat23-test", "--json")
    assert code == 0 and json.loads(out)["turns"]["ok"] == 3, err
    empty = tmp_path / "empty.jsonl"
    empty.write_text(_records(turns, ["One [1].", "  ", "[1]"]))
    code, out, err = run_cli("evaluate-responses", str(empty), "--topics", "ikat23-test", "--json")
    assert code == 0, err
    counts = json.loads(out)["turns"]
    assert counts["ok"] == 1 and counts["empty"] == 2 and counts["failed"] == 0 and counts[ROUGE] == 1
    assert f"2 empty response(s) (turns {turns[1].turn_id}, {turns[2].turn_id}): not scored" in " ".join(err.split())
