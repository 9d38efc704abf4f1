"""No traceback, no silent acceptance, one writer per run directory: one test per class of fault.

Every user error exits 2 with one line naming the file, line or turn; failed
turns exit 1; an internal error prints one line and where its traceback went.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from fake_openai import FakeOpenAI, Reply

from apcir import datasets
from apcir.contract.runs import write_run

ROOT = Path(__file__).resolve().parents[2]
PID = "clueweb22-en0000-00-00000:0"


def one_line_error(code: int, err: str, expected: str, status: int = 2) -> None:
    assert code == status, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and expected in lines[0], err


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "APCIR_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)


# ---- 1. usage errors -------------------------------------------------------------------------------
COMMANDS = ["run", "datasets", "reformulate", "prompt", "retrieve", "tune", "fuse", "baseline", "export", "validate",
            "evaluate", "report", "index build", "index info"]


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_option_is_one_line(run_cli, command):
    code, _, err = run_cli(*command.split(), "--no-such-option")
    one_line_error(code, err, "No such option: --no-such-option")


@pytest.mark.parametrize("args, expected", [
    (["nope"], "No such command 'nope'"),
    (["evaluate"], "Missing argument"),
    (["reformulate", "--topics", "ikat23-test", "--out", "x.jsonl"], "Missing option '--method'"),
    (["reformulate", "--topics", "ikat23-test", "--llm", "m", "--out", "x.jsonl", "--concurrency", "0"],
     "--concurrency"),
    (["retrieve", "--index", "x", "--queries"], "requires an argument"),
    (["evaluate", "r.run", "--qrels", "ikat23-test", "--rel-threshold", "zero"], "--rel-threshold"),
])
def test_usage_errors_are_one_line(run_cli, args, expected):
    code, _, err = run_cli(*args)
    one_line_error(code, err, expected)


# ---- 2. bytes that are not UTF-8 -------------------------------------------------------------------
BAD = b"\xff\xfe bad bytes\n"


@pytest.mark.parametrize("kind", ["qrels", "run", "queries", "submission", "config", "levels", "topics", "weights",
                                  "collection"])
def test_non_utf8_input_names_the_file(run_cli, tmp_path, kind):
    good_run = tmp_path / "good.run"
    write_run({"10-1_1": {PID: 1.0}}, good_run)
    path = tmp_path / {"config": "bad.toml", "submission": "bad.json", "weights": "w.json",
                       "collection": "c.jsonl", "topics": "t.json"}.get(kind, f"bad.{kind}")
    path.write_bytes(b"10-1_1 Q0 x 1 1.0 t\n" + BAD if kind == "run" else BAD)
    args = {
        "qrels": ["evaluate", str(good_run), "--qrels", str(path)],
        "run": ["evaluate", str(path), "--qrels", "ikat23-test"],
        "queries": ["retrieve", "--index", str(tmp_path), "--queries", str(path), "--out", str(tmp_path / "o.run")],
        "submission": ["validate", str(path), "--topics", "ikat23-test"],
        "config": ["run", str(path)],
        "levels": ["tune", "--runs", str(good_run), str(good_run), "--levels", str(path), "--qrels",
                   "ikat23-test", "--out", str(tmp_path / "w.json")],
        "topics": ["reformulate", "--topics", str(path), "--llm", "heuristic", "--out", str(tmp_path / "r.jsonl")],
        "weights": ["fuse", "--runs", str(good_run), str(good_run), "--levels", str(tmp_path / "l.tsv"),
                    "--weights", str(path), "--out", str(tmp_path / "f.run")],
        "collection": ["index", "build", "--collection", str(path), "--backend", "lucene-bm25", "--out",
                       str(tmp_path / "idx")],
    }[kind]
    code, _, err = run_cli(*args)
    one_line_error(code, err, "UTF-8")
    assert path.name in err


# ---- 3. outputs that cannot be written -------------------------------------------------------------
@pytest.fixture
def fusion_files(tmp_path):
    from fusion_cases import random_case

    from apcir.contract.levels import write_levels
    from apcir.datasets import write_qrels

    runs, qrels, levels = random_case(5, turns=8)
    paths = []
    for i, run in enumerate(runs):
        paths.append(str(tmp_path / f"l{i}.run"))
        write_run(run, Path(paths[-1]))
    write_qrels(qrels, tmp_path / "qrels.txt")
    write_levels(levels, tmp_path / "levels.tsv")
    return tmp_path, paths


def test_tune_refuses_an_unwritable_output_before_searching(run_cli, fusion_files):
    tmp, paths = fusion_files
    blocker = tmp / "a-file"
    blocker.write_text("x")
    code, out, err = run_cli("tune", "--runs", *paths, "--levels", str(tmp / "levels.tsv"), "--qrels",
                             str(tmp / "qrels.txt"), "--step", "0.1", "--out", str(blocker / "weights.json"))
    one_line_error(code, err, "cannot create the folder of the weights file")
    assert "grid search" not in err and "TUNED ON TEST" not in out, "refused before the search"
    code, _, err = run_cli("tune", "--runs", *paths, "--levels", str(tmp / "levels.tsv"), "--qrels",
                           str(tmp / "qrels.txt"), "--step", "0.1", "--out", str(tmp))
    one_line_error(code, err, "is a directory")


def test_a_full_disk_keeps_the_tuned_weights_on_stdout(run_cli, fusion_files, monkeypatch):
    import apcir.io.write

    tmp, paths = fusion_files

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    # the disk is full for apcir's writes only: patching os.replace itself would also fail numba's first write of
    # its kernel cache (a fresh clone has none), before the search has a result to keep
    monkeypatch.setattr(apcir.io.write, "os", SimpleNamespace(**{**vars(os), "replace": full}))
    code, out, err = run_cli("tune", "--runs", *paths, "--levels", str(tmp / "levels.tsv"), "--qrels",
                             str(tmp / "qrels.txt"), "--step", "0.1", "--out", str(tmp / "w.json"))
    one_line_error(code, err, "No space left on device")
    assert json.loads(out)["levels"]["a"]["weights"], "the search result is not lost"
    assert not list(tmp.glob(".w.json.*")), "no temporary file left behind"


@pytest.mark.parametrize("command", ["export", "fuse", "retrieve"])
def test_a_directory_given_as_an_output_file(run_cli, fusion_files, command):
    tmp, paths = fusion_files
    outdir = tmp / "outdir"
    outdir.mkdir()
    args = {
        "export": ["export", paths[0], "--topics", "ikat23-test", "--out", str(outdir)],
        "fuse": ["fuse", "--runs", *paths, "--levels", str(tmp / "levels.tsv"), "--weights", str(tmp / "w.json"),
                 "--out", str(outdir)],
        "retrieve": ["retrieve", "--index", str(tmp), "--queries", str(tmp / "levels.tsv"), "--out", str(outdir)],
    }[command]
    if command == "retrieve":
        (tmp / "q.tsv").write_text("10-1_1\tquery\n")
        args[4] = str(tmp / "q.tsv")
    code, _, err = run_cli(*args)
    one_line_error(code, err, "is a directory")


# ---- 4. malformed topics ---------------------------------------------------------------------------
def topics_file(tmp_path: Path, turns: list[dict], extra: list[dict] | None = None) -> Path:
    path = tmp_path / "topics.json"
    conversations = [{"number": "1-1", "title": "t", "ptkb": {"1": "I like tea."}, "turns": turns}, *(extra or [])]
    path.write_text(json.dumps(conversations))
    return path


@pytest.mark.parametrize("turns, extra, expected", [
    ([{"turn_id": "two", "utterance": "hi"}], None, "turn_id 'two' is not a turn number"),
    ([{"turn_id": 1, "utterance": "a"}, {"turn_id": 1, "utterance": "b"}], None, "turn 1 appears twice"),
    ([{"turn_id": 1, "utterance": "a"}], [{"number": "1-1", "ptkb": {}, "turns": [{"turn_id": 2, "utterance": "b"}]}],
     "conversation 1-1 appears twice"),
    ([{"turn_id": 1, "utterance": None}], None, "'utterance' must be text, found NoneType"),
    ([{"turn_id": 1, "utterance": "a", "ptkb_provenance": "1"}], None, "ptkb_provenance must be a list"),
])
def test_malformed_topics_are_refused(run_cli, tmp_path, turns, extra, expected):
    path = topics_file(tmp_path, turns, extra)
    code, _, err = run_cli("reformulate", "--topics", str(path), "--llm", "heuristic", "--out",
                           str(tmp_path / "r.jsonl"))
    one_line_error(code, err, expected)
    assert "topics.json" in err


@pytest.mark.parametrize("turn_id", [0, -1, "0"])
@pytest.mark.parametrize("schema", ["2023", "2025"])
def test_a_turn_number_below_1_is_refused(run_cli, tmp_path, schema, turn_id):
    path = tmp_path / "topics.json"
    if schema == "2023":
        conversation = {"number": "1-1", "ptkb": {"1": "I like tea."}, "turns": [{"turn_id": turn_id, "utterance": "a"}]}
    else:
        conversation = {"number": "1-1", "ptkb": ["I like tea."], "responses": [{"turn_id": turn_id,
                                                                                "user_utterance": "a"}]}
    path.write_text(json.dumps([conversation]))
    code, _, err = run_cli("prompt", "--topics", str(path), "--stats")
    one_line_error(code, err, f"conversation 1-1: turn_id {turn_id!r} is not a turn number (1, 2, ...)")


@pytest.mark.parametrize("command", ["prompt-stats", "prompt-json", "reformulate", "respond", "export"])
@pytest.mark.parametrize("key", ["turns", "responses"])
def test_topics_without_any_turn_are_refused(run_cli, tmp_path, command, key):
    path = tmp_path / "topics.json"
    path.write_text(json.dumps([{"number": "1-1", "ptkb": {"1": "I like tea."} if key == "turns" else ["I like tea."],
                                 key: []}]))
    run = tmp_path / "r.run"
    write_run({"1-1_1": {PID: 1.0}}, run)
    out = tmp_path / "out.jsonl"
    args = {
        "prompt-stats": ["prompt", "--topics", str(path), "--stats"],
        "prompt-json": ["prompt", "--topics", str(path), "--stats", "--json"],
        "reformulate": ["reformulate", "--topics", str(path), "--llm", "heuristic", "--out", str(out)],
        "respond": ["respond", str(run), "--topics", str(path), "--collection", "ikat23-provenance", "--out",
                    str(out)],
        "export": ["export", str(run), "--topics", str(path), "--out", str(tmp_path / "s.json")],
    }[command]
    code, _, err = run_cli(*args)
    one_line_error(code, err, "topics.json: no conversation has a turn")
    assert not out.exists() and not (tmp_path / "s.json").exists()


def test_a_conversation_without_turns_is_skipped_with_a_warning(run_cli, tmp_path):
    path = topics_file(tmp_path, [{"turn_id": 1, "utterance": "tea or coffee?"}],
                       [{"number": "2-1", "ptkb": {}, "turns": []}, {"number": "3-1", "ptkb": {}, "turns": []}])
    code, out, err = run_cli("prompt", "--topics", str(path), "--stats", "--json")
    assert code == 0, err
    assert "2 conversation(s) have no turns and are skipped: 2-1, 3-1" in err
    assert json.loads(out)["turns"] == 1


def test_empty_ptkb_statements_are_named_in_a_warning(run_cli, tmp_path):
    path = tmp_path / "topics.json"
    path.write_text(json.dumps([{"number": "1-1", "ptkb": {"1": "I like tea.", "2": "", "3": "   "},
                                 "turns": [{"turn_id": 1, "utterance": "tea or coffee?"}]}]))
    code, _, err = run_cli("prompt", "--topics", str(path), "--stats")
    assert code == 0, err
    assert "conversation 1-1: 2 PTKB statement(s) are empty: 2, 3" in err


def test_an_empty_utterance_is_warned_about_and_fails_its_turn(run_cli, tmp_path):
    path = topics_file(tmp_path, [{"turn_id": 1, "utterance": "tea or coffee?"}, {"turn_id": 2, "utterance": "  "}])
    out = tmp_path / "r.jsonl"
    code, _, err = run_cli("reformulate", "--topics", str(path), "--llm", "heuristic", "--out", str(out))
    assert code == 1, err
    assert "1 turn(s) have an empty utterance: 1-1_2" in err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["turn_id"], r["status"]) for r in records] == [("1-1_1", "ok"), ("1-1_2", "failed")]
    assert "empty" in records[1]["error"]


# ---- 5. weights ------------------------------------------------------------------------------------
def weights_file(tmp_path: Path, levels: dict) -> Path:
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"step": 0.1, "divisions": 10, "objective": ["MRR"], "levels": levels}))
    return path


@pytest.mark.parametrize("vector, expected, code", [
    ([0.0, 0.0, 0.0], "all weights are 0", 2),
    (["NaN", 0.5, 0.5], "not all finite numbers", 2),
    ([1.0, 0.5, 0.5], "sum to 2, not 1", 0),
    ([-0.5, 1.0, 0.5], "negative weight", 0),
])
def test_weights_are_checked(run_cli, fusion_files, vector, expected, code):
    tmp, paths = fusion_files
    raw = [float(v) if v != "NaN" else float("nan") for v in vector]
    path = weights_file(tmp, {lv: {"weights": raw} for lv in "abc"})
    status, _, err = run_cli("fuse", "--runs", *paths, "--levels", str(tmp / "levels.tsv"), "--weights", str(path),
                             "--out", str(tmp / "f.run"))
    if code:
        one_line_error(status, err, expected)
    else:
        assert status == 0 and f"warning: {path}: level a: " in err and expected in err
        assert "nan" not in (tmp / "f.run").read_text()


def test_weights_without_levels(run_cli, fusion_files):
    tmp, paths = fusion_files
    code, _, err = run_cli("fuse", "--runs", *paths, "--levels", str(tmp / "levels.tsv"), "--weights",
                           str(weights_file(tmp, {})), "--out", str(tmp / "f.run"))
    one_line_error(code, err, "no levels")


@pytest.mark.parametrize(("extra", "expected"), [
    ({"levels": {lv: {"weights": [0.4, 0.3, 0.3]} for lv in "abz"}}, "level(s) 'z' are not personalisation levels"),
    ({"levels": {lv: {"weights": [True, False, False]} for lv in "abc"}}, "levels.a.weights.0: Input should be"),
    ({"levels": {lv: {"weights": ["0.5", "0.3", "0.2"]} for lv in "abc"}}, "levels.a.weights.0: Input should be"),
    ({"version": 99}, "version 99 is newer than this apcir reads (1)"),
])
def test_weights_of_unknown_levels_or_a_newer_version(run_cli, fusion_files, extra, expected):
    tmp, paths = fusion_files
    path = weights_file(tmp, {lv: {"weights": [0.4, 0.3, 0.3]} for lv in "abc"})
    path.write_text(json.dumps({**json.loads(path.read_text()), **extra}))
    code, _, err = run_cli("fuse", "--runs", *paths, "--levels", str(tmp / "levels.tsv"), "--weights", str(path),
                           "--out", str(tmp / "f.run"))
    one_line_error(code, err, expected)


# ---- 6. validate, in both directions ---------------------------------------------------------------
@pytest.fixture(scope="module")
def submission(tmp_path_factory):
    from apcir.contract.reformulations import ReformulationOutput, ReformulationRecord
    from apcir.submission.common import SubmissionInputs
    from apcir.submission.stage import write_submission

    tmp = tmp_path_factory.mktemp("sub")
    turns = datasets.topics("ikat24-test")
    ids = [f"clueweb22-en0000-00-{i:05d}:1" for i in range(40)]
    run = {t.turn_id: {p: 40.0 - n for n, p in enumerate(ids)} for t in turns}
    records = {t.turn_id: ReformulationRecord(turn_id=t.turn_id, model="m", output=ReformulationOutput(
        reasoning="", level="a", rewrite="q", response="r", third_rewrite="q", third_response="r")) for t in turns}
    path = tmp / "sub.json"
    write_submission(SubmissionInputs(run=run, turns=turns, run_name="x", reformulations=records,
                                      passages=dict.fromkeys(ids, "text")), "ikat24", path)
    return path


def edited(path: Path, tmp_path: Path, edit) -> Path:
    data = json.loads(path.read_text())
    edit(data)
    out = tmp_path / "edited.json"
    out.write_text(json.dumps(data))
    return out


def test_validate_flags_a_nan_score(run_cli, submission, tmp_path):
    def nan(data):
        data["turns"][0]["responses"][0]["passage_provenance"][3]["score"] = float("nan")

    code, _, err = run_cli("validate", str(edited(submission, tmp_path, nan)), "--topics", "ikat24-test")
    assert code == 1 and "score nan is not a finite number" in err


def test_one_score_out_of_order_is_one_problem(run_cli, submission, tmp_path):
    def bump(data):
        data["turns"][0]["responses"][0]["passage_provenance"][1]["score"] = 1000.0

    code, _, err = run_cli("validate", str(edited(submission, tmp_path, bump)), "--topics", "ikat24-test")
    problems = [line for line in err.splitlines() if line.startswith("problem:")]
    assert code == 1 and len(problems) == 1 and "higher than the one before" in problems[0], err


def test_dashed_turn_ids_are_flagged_as_the_organisers_flag_them(run_cli, submission, tmp_path):
    def dashed(data):
        for turn in data["turns"]:
            conversation, _, number = turn["turn_id"].rpartition("_")
            turn["turn_id"] = f"{conversation}-{number}"

    # apcir reads 9-1-3 as 9-1_3 everywhere, but the organisers' validator stops on it (2024 main.py:200-207)
    code, out, err = run_cli("validate", str(edited(submission, tmp_path, dashed)), "--topics", "ikat24-test")
    assert code == 1 and "turn id '0-1' is not of the form <int>_<int>" in err
    assert "missing turn" not in err, "the turns themselves are recognised"


# ---- 7. export never writes an incomplete submission silently ---------------------------------------
def test_export_refuses_missing_passage_texts(run_cli, tmp_path):
    run = tmp_path / "r.run"
    turn = datasets.topics("ikat23-test")[0].turn_id
    write_run({turn: {PID: 1.0}}, run)
    out = tmp_path / "s.json"
    code, _, err = run_cli("export", str(run), "--topics", "ikat23-test", "--collection", "ikat23-provenance",
                           "--out", str(out))
    one_line_error(code, err, "have no text in the given collection")
    assert not out.exists()
    code, _, err = run_cli("export", str(run), "--topics", "ikat23-test", "--collection", "ikat23-provenance",
                           "--out", str(out), "--allow-missing-text")
    assert code == 0, err
    code, _, err = run_cli("validate", str(out), "--topics", "ikat23-test")
    assert code == 1 and "is used but has no text" in err


def test_export_names_what_it_leaves_out(run_cli, tmp_path):
    turns = datasets.topics("ikat23-test")
    passages = [p.id for p, _ in zip(datasets.iter_collection(datasets.collection_path("ikat23-provenance")),
                                     range(5))]
    run = tmp_path / "r.run"
    write_run({turns[0].turn_id: dict.fromkeys(passages, 1.0), "99-9_9": dict.fromkeys(passages, 1.0)}, run)
    refs = tmp_path / "refs.jsonl"
    refs.write_text(json.dumps({"turn_id": turns[1].turn_id, "model": "m", "output": {
        "reasoning": "", "level": "a", "rewrite": "q", "response": "r", "third_rewrite": "q",
        "third_response": "r"}}) + "\n")
    code, _, err = run_cli("export", str(run), "--topics", "ikat23-test", "--collection", "ikat23-provenance",
                           "--reformulations", str(refs), "--out", str(tmp_path / "s.json"))
    assert code == 0, err
    assert "1 turn(s) of the run are not in the topics and are not exported: 99-9_9" in err
    assert f"1 turn(s) have no reformulation, so no pseudo-response and no statements used: {turns[0].turn_id}" in err
    code, _, err = run_cli("export", str(run), "--topics", "ikat23-test", "--run-type", "semi-automatic",
                           "--out", str(tmp_path / "s2.json"))
    one_line_error(code, err, "--run-type 'semi-automatic'")
    write_run({"99-9_9": dict.fromkeys(passages, 1.0)}, run)
    code, _, err = run_cli("export", str(run), "--topics", "ikat23-test", "--collection", "ikat23-provenance",
                           "--out", str(tmp_path / "s3.json"))
    one_line_error(code, err, "none of the run's 1 turn(s) is a turn of the topics")
    assert not (tmp_path / "s3.json").exists()


# ---- 8. LLM faults ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ten():
    return [t.turn_id for t in datasets.topics("ikat23-test")[:10]]


def reformulate_args(server, tmp_path, turns, *extra):
    return ["reformulate", "--topics", "ikat23-test", "--turns", ",".join(turns), "--llm", "gpt-test",
            "--base-url", server.url, "--out", str(tmp_path / "r.jsonl"), "--cache-dir", str(tmp_path / "cache"),
            "--retry-delay", "0.01", "--max-retries", "2", "--no-progress", *extra]


def test_a_non_json_200_fails_only_its_turn(run_cli, tmp_path, ten):
    target = datasets.topics("ikat23-test")[3]
    marker = f"Current utterance (turn {target.turn_number}): {target.utterance}"

    def proxy_page(body):
        if marker in body["messages"][-1]["content"]:
            return Reply(raw=b"<html><body>502 Bad Gateway (proxy)</body></html>", content_type="text/html")
        return None

    with FakeOpenAI(reply=proxy_page) as server:
        code, _, err = run_cli(*reformulate_args(server, tmp_path, ten, "--concurrency", "3"))
        count = server.count
    assert code == 1, err
    records = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    status = {r["turn_id"]: r["status"] for r in records}
    assert sum(s == "ok" for s in status.values()) == 9 and status[target.turn_id] == "failed"
    failed = next(r for r in records if r["status"] == "failed")
    assert "unreadable answer after 2 retries" in failed["error"] and "Traceback" not in err
    assert count == 9 + 3, "the broken turn was tried three times, the others once"


def test_a_429_pauses_every_request_to_the_server(run_cli, tmp_path, ten):
    first = {"done": False}

    def limited(body):
        if not first["done"]:
            first["done"] = True
            return Reply(status=429, headers={"retry-after": "1"})
        return Reply(delay=0.3)

    with FakeOpenAI(reply=limited) as server:
        code, _, err = run_cli(*reformulate_args(server, tmp_path, ten[:8], "--concurrency", "4"))
        times, answered = list(server.times), list(server.answered)
    assert code == 0, err
    limited_at = answered[0]  # when the 429 went out
    later = [t for t in times[1:] if t > limited_at + 0.05]  # requests sent after the client saw the 429
    assert later and min(later) >= limited_at + 0.9, (limited_at, later)


def test_an_oversized_answer_fails_its_turn_and_is_not_cached(run_cli, tmp_path, ten):
    big = json.dumps({"reasoning": "x" * 40_000, "level": "a", "rewrite": "r", "response": "r",
                      "third_rewrite": "r", "third_response": "r", "ptkb_used": []})
    with FakeOpenAI() as server:
        server.queue(Reply(content=big))
        code, _, err = run_cli(*reformulate_args(server, tmp_path, ten[:1], "--concurrency", "1"))
    assert code == 1
    record = json.loads((tmp_path / "r.jsonl").read_text().splitlines()[0])
    assert record["status"] == "failed" and "over the cap of 32,000" in record["error"]
    assert not list((tmp_path / "cache").rglob("*.json"))


def test_the_summary_records_a_base_url_from_the_environment(run_cli, tmp_path, ten, monkeypatch):
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        code, _, err = run_cli("reformulate", "--topics", "ikat23-test", "--turns", ten[0], "--llm", "gpt-test",
                               "--out", str(tmp_path / "r.jsonl"), "--no-progress")
    assert code == 0, err
    summary = json.loads((tmp_path / "r.summary.json").read_text())
    assert summary["config"]["base_url"] == server.url


@pytest.mark.parametrize("command", ["reformulate", "respond", "rerank"])
@pytest.mark.parametrize("url", ["notaurl", "ftp://host/v1", "http://", "http://localhost:port/v1"])
def test_a_base_url_that_is_not_http_is_refused_before_any_request(run_cli, tmp_path, ten, command, url):
    run = tmp_path / "in.run"
    write_run({ten[0]: {PID: 1.0}}, run)
    (tmp_path / "q.tsv").write_text(f"{ten[0]}\tquery\n")
    args = {
        "reformulate": ["reformulate", "--topics", "ikat23-test", "--turns", ten[0], "--llm", "gpt-test"],
        "respond": ["respond", str(run), "--topics", "ikat23-test", "--collection", "ikat23-provenance",
                    "--responder", "gpt-test"],
        "rerank": ["rerank", "--run", str(run), "--queries", str(tmp_path / "q.tsv"), "--collection",
                   "ikat23-provenance", "--reranker", "rankgpt"],
    }[command]
    started = time.perf_counter()
    code, _, err = run_cli(*args, "--base-url", url, "--out", str(tmp_path / "out"), "--no-progress")
    one_line_error(code, err, f"--base-url {url!r}: not ")
    assert "http(s)://host" in err and time.perf_counter() - started < 30  # no retries


def test_a_base_url_from_the_environment_or_a_config_is_checked_too(run_cli, tmp_path, ten, monkeypatch):
    from apcir.experiment.config import load_config

    monkeypatch.setenv("OPENAI_BASE_URL", "localhost:8000")
    code, _, err = run_cli("reformulate", "--topics", "ikat23-test", "--turns", ten[0], "--llm", "gpt-test",
                           "--out", str(tmp_path / "r.jsonl"), "--no-progress")
    one_line_error(code, err, "OPENAI_BASE_URL 'localhost:8000': not an http(s):// URL")
    config = tmp_path / "c.toml"
    config.write_text('name = "x"\ntopics = "ikat23-test"\n[reformulator]\nmethod = "gpt-test"\nbase_url = "notaurl"\n')
    with pytest.raises(Exception, match="reformulator.base_url: not an http"):
        load_config(config)


# ---- 9. one writer per run directory ----------------------------------------------------------------
@pytest.mark.slow
def test_a_second_run_on_the_same_directory_stops_at_once(small, tmp_path):
    root, collection, index, all_turns = small
    judged = datasets.qrels("ikat23-test-provenance")
    by_conversation: dict[str, list[str]] = {}
    for turn in all_turns:
        if turn in judged:
            by_conversation.setdefault(turn.rpartition("_")[0], []).append(turn)
    chosen = [t for turns in by_conversation.values() for t in turns[:3]]
    config = tmp_path / "exp.toml"
    with FakeOpenAI(delay=0.25) as server:
        config.write_text(
            f'name = "locked"\nturns = {json.dumps(chosen)}\noutput_dir = "{tmp_path / "run"}"\n'
            f'[reformulator]\nmethod = "gpt-test"\nbase_url = "{server.url}"\nconcurrency = 1\n'
            f'cache_dir = "{tmp_path / "cache"}"\n'
            f'[retrieval]\nindex = "{index}"\ncollection = "{collection}"\n'
            '[fusion]\nbaselines = false\n[fusion.weights]\nsource = "cv"\nfolds = 2\nstep = 0.1\n'
            '[evaluation]\nqrels = "ikat23-test-provenance"\n'
        )
        command = [sys.executable, "-m", "apcir", "run", str(config), "--no-progress"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 120
        while server.count == 0 and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.05)
        assert server.count > 0, "the first run started asking"
        second = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
        out, err = first.communicate(timeout=300)
        bodies = [json.dumps(b, sort_keys=True) for b in server.requests]
    assert second.returncode == 2, second.stderr
    assert f"held by pid {first.pid}" in second.stderr and "Traceback" not in second.stderr
    assert first.returncode == 0, err
    assert len(bodies) == len(set(bodies)) == len(chosen), "no request sent twice"


# ---- 10. degenerate evaluation ---------------------------------------------------------------------
def test_an_empty_run_or_one_without_judged_turns(run_cli, tmp_path):
    empty = tmp_path / "empty.run"
    empty.write_text("")
    code, _, err = run_cli("evaluate", str(empty), "--qrels", "ikat23-test")
    one_line_error(code, err, "the run is empty")
    unjudged = tmp_path / "unjudged.run"
    write_run({"99-9_9": {PID: 1.0}}, unjudged)
    code, _, err = run_cli("evaluate", str(unjudged), "--qrels", "ikat23-test")
    one_line_error(code, err, "no turn of the run (1 turns) is judged")
    code, out, err = run_cli("evaluate", str(unjudged), "--qrels", "ikat23-test", "--complete", "--json")
    assert code == 0 and json.loads(out)["measures"]["MRR"] == 0.0


WRONG_KIND = "are these the right qrels (passage vs PTKB)?"


@pytest.fixture
def passage_and_ptkb_runs(tmp_path):
    """A passage run and a PTKB ranking over the turns both kinds of iKAT-23 qrels judge."""
    passages, statements = datasets.qrels("ikat23-test"), datasets.qrels("ikat23-test-ptkb")
    turns = sorted(set(passages) & set(statements))[:10]
    passage_run = {t: {p: 10.0 - i for i, p in enumerate(sorted(passages[t])[:10])} for t in turns}
    ptkb_run = {t: {s: 10.0 - i for i, s in enumerate(sorted(statements[t]))} for t in turns}
    write_run(passage_run, tmp_path / "passages.run")
    write_run(ptkb_run, tmp_path / "ptkb.run")
    (tmp_path / "levels.tsv").write_text("".join(f"{t}\ta\n" for t in turns))
    return tmp_path, passage_run, ptkb_run


def test_qrels_of_the_other_kind_are_named_in_a_warning(run_cli, passage_and_ptkb_runs):
    tmp, passage_run, _ = passage_and_ptkb_runs
    n = len({p for hits in passage_run.values() for p in hits})
    code, _, err = run_cli("evaluate", str(tmp / "passages.run"), "--qrels", "ikat23-test-ptkb")
    assert code == 0, err
    assert f"none of the run's {n} documents is judged in ikat23-test-ptkb; {WRONG_KIND}" in " ".join(err.split())
    code, _, err = run_cli("evaluate", str(tmp / "ptkb.run"), "--qrels", "ikat23-test")
    assert code == 0 and "none of the run's" in err and WRONG_KIND in " ".join(err.split())
    for run, qrels in (("passages.run", "ikat23-test"), ("ptkb.run", "ikat23-test-ptkb")):
        code, _, err = run_cli("evaluate", str(tmp / run), "--qrels", qrels)
        assert code == 0 and "none of" not in err, err
    code, _, err = run_cli("tune", "--runs", str(tmp / "passages.run"), str(tmp / "passages.run"), "--levels",
                           str(tmp / "levels.tsv"), "--qrels", "ikat23-test-ptkb", "--step", "0.5", "--cv", "2",
                           "--json")
    said = " ".join(err.split())
    assert code == 0 and said.count(WRONG_KIND) == 1, err
    assert f"none of the 2 runs' {n} documents is judged in ikat23-test-ptkb" in said


def test_the_stages_check_their_qrels_too(passage_and_ptkb_runs, capsys):
    from apcir.contract.responses import ResponseRecord
    from apcir.evaluation.responses import evaluate_responses
    from apcir.evaluation.settings import EvaluationSettings
    from apcir.evaluation.stage import evaluate_ptkb, evaluate_systems

    _, passage_run, ptkb_run = passage_and_ptkb_runs
    evaluate_ptkb({"apcir": ptkb_run, "profile": ptkb_run}, datasets.qrels("ikat23-test"), "ikat23-test", ["MRR"])
    said = " ".join(capsys.readouterr().err.split())
    assert said.count(WRONG_KIND) == 1 and "none of the PTKB rankings'" in said and "judged in ikat23-test;" in said
    evaluate_systems({"apcir": passage_run, "rrf": passage_run}, datasets.qrels("ikat23-test-ptkb"), [], {},
                     EvaluationSettings(qrels="ikat23-test-ptkb", measures=["MRR"]), name="x", topics="ikat23-test",
                     protocol="")
    said = " ".join(capsys.readouterr().err.split())
    assert said.count(WRONG_KIND) == 1 and "none of the 2 systems'" in said
    records = {t: ResponseRecord(turn_id=t, responder="x", text="A [1].", passages=list(hits)[:1],
                                 citations=list(hits)[:1]) for t, hits in passage_run.items()}
    evaluate_responses(records, datasets.topics("ikat23-test"), topics="ikat23-test",
                       qrels=datasets.qrels("ikat23-test-ptkb"), qrels_name="ikat23-test-ptkb")
    said = " ".join(capsys.readouterr().err.split())
    assert f"none of the responses' {len(records)} cited passages is judged in ikat23-test-ptkb" in said
    evaluate_responses(records, datasets.topics("ikat23-test"), topics="ikat23-test",
                       qrels=datasets.qrels("ikat23-test"), qrels_name="ikat23-test")
    assert WRONG_KIND not in capsys.readouterr().err


# ---- 11. index build --------------------------------------------------------------------------------
def test_an_empty_collection_is_refused_and_empty_passages_warned(run_cli, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, _, err = run_cli("index", "build", "--collection", str(empty), "--backend", "lucene-bm25", "--out",
                           str(tmp_path / "idx"))
    one_line_error(code, err, "the collection is empty")
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n\n")
    code, _, err = run_cli("index", "build", "--collection", str(blank), "--backend", "embedded", "--encoder",
                           "splade-tiny", "--out", str(tmp_path / "idx2"))
    one_line_error(code, err, "holds no passage")
    some = tmp_path / "some.jsonl"
    some.write_text(json.dumps({"id": "a:1", "contents": "tea"}) + "\n" + json.dumps({"id": "a:2", "contents": " "})
                    + "\n")
    code, _, err = run_cli("index", "build", "--collection", str(some), "--backend", "embedded", "--encoder",
                           "splade-tiny", "--out", str(tmp_path / "idx3"))
    assert code == 0 and "1 passage(s) have an empty text (first: a:2" in err


def test_a_truncated_index_is_a_clear_error(run_cli, tmp_path):
    from apcir.retrieval.build import build_index

    collection = tmp_path / "c.jsonl"
    collection.write_text("".join(json.dumps({"id": f"a:{i}", "contents": f"passage {i} about tea"}) + "\n"
                                  for i in range(20)))
    index = tmp_path / "idx"
    build_index(collection, "embedded", index, "splade-tiny", progress=False)
    postings = index / "postings.data.npy"
    postings.write_bytes(postings.read_bytes()[: postings.stat().st_size // 2])
    queries = tmp_path / "q.tsv"
    queries.write_text("10-1_1\ttea\n")
    code, _, err = run_cli("retrieve", "--index", str(index), "--queries", str(queries), "--out",
                           str(tmp_path / "r.run"))
    one_line_error(code, err, "embedded index is corrupt: postings.data.npy cannot be read")


def test_a_vector_file_that_would_break_scores_or_run_lines_is_one_line(run_cli, tmp_path):
    import warnings

    good = {"id": "a:1", "contents": "", "vector": {"tea": 1.5}}
    cases = [({"id": "a:2", "contents": "", "vector": {"tea": 1e39}}, "weight of token 'tea' is 1e+39, too large"),
             ({"id": "a 2", "contents": "", "vector": {"tea": 1.0}}, "passage id 'a 2' contains whitespace"),
             ({"id": "a:2", "contents": "", "vector": {"tea": 0.0}},
              "passage 'a:2' has an empty vector (every weight is 0)")]
    for number, (bad, expected) in enumerate(cases):
        vectors = tmp_path / f"v{number}.jsonl"
        vectors.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # numpy's "overflow encountered in cast" would be an internal error
            code, _, err = run_cli("index", "build", "--collection", str(vectors), "--vectors", "--out",
                                   str(tmp_path / f"idx{number}"))
        one_line_error(code, err, f"v{number}.jsonl:2: {expected}")


# ---- the one error path for what is not the user's fault --------------------------------------------
def test_an_internal_error_is_one_line_and_a_log(run_cli, monkeypatch, tmp_path):
    import apcir.cli.data_commands as data_commands

    def broken():
        raise RuntimeError("something apcir did not expect")

    monkeypatch.setattr(data_commands, "dataset_summary", broken)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    code, _, err = run_cli("datasets")
    one_line_error(code, err, "internal error (RuntimeError: something apcir did not expect)", status=3)
    logs = list((tmp_path / "apcir-errors").glob("*.log"))
    assert len(logs) == 1 and "Traceback" in logs[0].read_text() and str(logs[0]) in err.replace("\n", "")


# ---- a careless user's sweep over every command ------------------------------------------------------
SWEEP = (Path(__file__).resolve().parents[1] / "data" / "careless_user.txt").read_text().splitlines()


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """The files the sweep's commands point at: binary garbage, an empty file, a folder, a run, records."""
    (tmp_path / "bin.dat").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "adir").mkdir()
    write_run({"10-1_1": {"clueweb22-en0000-00-00001:1": 1.0}}, tmp_path / "ok.run")
    (tmp_path / "refs.jsonl").write_text(json.dumps({"turn_id": "10-1_1", "model": "m", "output": {
        "reasoning": "", "level": "a", "rewrite": "q", "response": "", "third_rewrite": "q", "third_response": ""}})
        + "\n")
    (tmp_path / "levels.tsv").write_text("10-1_1\ta\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in SWEEP if c.strip() and not c.startswith("#")])
def test_every_careless_command_is_one_line_and_a_non_zero_exit(run_cli, sandbox, small, case):
    import shlex

    args = shlex.split(case.replace("{index}", str(small[2])))
    code, _, err = run_cli(*args)
    assert code in (1, 2), (code, err)
    assert "Traceback" not in err
    assert (sandbox / "bin.dat").read_bytes() == b"\xff\xfe\x00garbage", "no input file was changed"


def test_an_unrelated_file_given_as_output_is_left_alone(run_cli, tmp_path):
    precious = tmp_path / "notes.txt"
    precious.write_text("my notes, no newline at the end")
    code, _, err = run_cli("reformulate", "--topics", "ikat23-test", "--llm", "heuristic", "--out", str(precious))
    one_line_error(code, err, "not a reformulation")
    assert precious.read_text() == "my notes, no newline at the end"


def test_an_internal_error_under_run_is_logged_in_the_run_directory(run_cli, monkeypatch, tmp_path):
    import apcir.experiment.pipeline as pipeline

    def broken(*_args, **_kwargs):
        raise RuntimeError("a stage apcir did not expect to fail")

    monkeypatch.setattr(pipeline, "_run", broken)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    config = tmp_path / "exp.toml"
    config.write_text(f'name = "crash"\noutput_dir = "{tmp_path / "run"}"\n[evaluation]\nqrels = "ikat23-test"\n')
    code, _, err = run_cli("run", str(config), "--no-progress")
    one_line_error(code, err, "internal error (RuntimeError: a stage apcir did not expect to fail)", status=3)
    log = tmp_path / "run" / "error.log"
    assert "Traceback" in log.read_text() and str(log) in err.replace("\n", "")
    assert not (tmp_path / "tmp" / "apcir-errors").exists()


# ---- configs say what they mean -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("suffix", "body", "expected"),
    [
        (".toml", "[retrieval]\nk = true\n", "retrieval.k: Input should be a valid integer"),
        (".toml", "[fusion]\nbaselines = \"yes\"\n", "fusion.baselines"),
        (".toml", "turns = []\n", "turns: is empty, which would select no turn"),
        (".toml", "[fusion.weights]\nsource = \"cv\"\n", "fusion.weights.source = 'cv' needs evaluation.qrels"),
        (".toml", "[fusion.weights]\nseed = -1\n", "fusion.weights.seed: Input should be greater than or equal to 0"),
        (".toml", "[reformulator]\ntemperature = nan\n", "reformulator.temperature: Input should be a finite number"),
        (".toml", "[rerank]\nreranker = \"monot5\"\ndevice = \"banana\"\n", "rerank.device: device 'banana'"),
        (".yaml", "name: demo2\nretrieval:\n  k: 100\n  k: 7\n", "key 'k' is given twice"),
        (".yaml", "name: demo2\nretrieval:\n\tk: 100\n", "malformed config: found character '\\t'"),
        (".yaml", "name: demo2\nturns: [1\n", "malformed config:"),
    ],
)
def test_a_config_is_taken_literally(run_cli, tmp_path, suffix, body, expected):
    config = tmp_path / f"exp{suffix}"
    config.write_text(body if suffix == ".yaml" else f'name = "demo2"\n{body}')
    code, _, err = run_cli("run", str(config), "--no-progress")
    one_line_error(code, err, expected)
    assert not (Path("runs") / "demo2").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["tune", "--runs", "a.run", "--levels", "l.tsv", "--qrels", "ikat23-test", "--cv", "2", "--seed", "-1"],
        ["baseline", "random", "--runs", "a.run", "--seed", "-1", "--out", "r.run"],
    ],
)
def test_a_negative_seed_is_a_usage_error(run_cli, args):
    code, _, err = run_cli(*args)
    one_line_error(code, err, "--seed")


# ---- Ctrl-C ------------------------------------------------------------------------------------------
def _as_in_a_terminal(command: list[str]) -> list[str]:
    """``command`` with Ctrl-C's default action, as a terminal's foreground command has it: a job started in the
    background of a non-interactive shell (as CI may start this suite) ignores SIGINT, and its children inherit
    that. A small exec wrapper, not a preexec function: one makes subprocess fork instead of vfork, which runs the
    fork handlers of libraries the test worker loaded before (gRPC's, from the Milvus tests, aborted the child)."""
    wrapper = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
    return [sys.executable, "-c", wrapper, *command]


def test_ctrl_c_mid_command_is_exit_130_with_one_line(tmp_path, ten):
    import signal

    with FakeOpenAI(delay=0.5) as server:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "sk-test"}
        command = [sys.executable, "-m", "apcir", *reformulate_args(server, tmp_path, ten, "--concurrency", "1")]
        proc = subprocess.Popen(_as_in_a_terminal(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)
        deadline = time.monotonic() + 60
        while server.count < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted; finished work is on disk" in err


def test_ctrl_c_while_the_commands_load_is_quiet():
    code = (  # Ctrl-C arrives while `apcir` imports its commands
        "import builtins, os, signal, time\nimport apcir.cli\nreal = builtins.__import__\n"
        "def slow(name, *args, **kwargs):\n"
        "    if name == 'apcir.cli.main':\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(10)\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = slow\napcir.cli.main(['datasets'])\nprint('not interrupted')\n"
    )
    done = subprocess.run(_as_in_a_terminal([sys.executable, "-c", code]), capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 130 and done.stderr == "interrupted\n" and "not interrupted" not in done.stdout


def test_a_ctrl_c_swallowed_by_a_finalizer_is_delivered_again():
    """In a process of its own, as the CLI runs, with Python's own Ctrl-C handler: a test suite started as a
    background job (``make test &`` in a script) inherits SIGINT ignored, and Python then leaves it ignored, so
    nothing could be delivered (it failed so in full runs started that way, and passed in a terminal)."""
    script = textwrap.dedent("""
        import signal, sys, time
        from apcir.cli.main import _redeliver_interrupts

        signal.signal(signal.SIGINT, signal.default_int_handler)  # what a process started from a terminal has

        class Finalised:
            def __del__(self):
                raise KeyboardInterrupt  # as when Ctrl-C arrives while a finalizer runs

        sys.unraisablehook = _redeliver_interrupts
        try:
            Finalised()  # dropped at once: Python discards its KeyboardInterrupt, the hook delivers it again
            deadline = time.monotonic() + 20  # the hook's timer thread may wait for a core on a loaded machine
            while time.monotonic() < deadline:
                time.sleep(0.005)
        except KeyboardInterrupt:
            print("delivered")
            sys.exit(0)
        print("not delivered")
        sys.exit(1)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "delivered", (done.stdout, done.stderr[-2000:])


def test_a_run_stopped_by_the_users_error_leaves_internal_errors_to_the_temporary_folder(run_cli, tmp_path):
    """`apcir run` writes the traceback of a bug into its run directory while it runs; a run that stops on the
    user's error (exit 2) does not leave that set for what the same process does next (a notebook, the tests)."""
    from apcir.errors import crash_log_path

    config = tmp_path / "exp.toml"
    config.write_text('name = "x"\ntopics = "ikat23-test"\nturns = ["99-9_9"]\n'
                      '[evaluation]\nqrels = "ikat23-test-provenance"\n')
    code, _, err = run_cli("run", str(config), "--output-dir", str(tmp_path / "run"), "--no-progress")
    assert code == 2 and "99-9_9" in err, err
    assert (tmp_path / "run" / "config.json").exists()  # it stopped inside the run directory
    assert crash_log_path().parent.name == "apcir-errors"
