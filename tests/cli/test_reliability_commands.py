"""The newer commands (rerank, respond, rank-ptkb, evaluate-responses, export, validate, index building from
vectors, query vectors, run configs) get the guarantees of the original ones: walking tests over every command
for text that is not Unicode, outputs that are inputs, stale resumes and where the API key goes, and one test
per remaining class of fault."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import typer

from apcir import datasets
from apcir.cli.main import app
from apcir.cli.main import main as cli_main

LONE = '"\\ud83d"'  # a JSON escape of a lone surrogate: valid JSON, not a character


def _call(*args: str) -> int:
    try:
        cli_main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


@pytest.fixture(scope="module")
def work(small, tmp_path_factory):
    """Every kind of input the commands read, made by the commands themselves on the small collection."""
    root, collection, index, chosen = small
    base = tmp_path_factory.mktemp("reliability")
    turns = ",".join(chosen[:12])
    files = {"collection": collection, "index": index, "turns": turns}
    refs = base / "refs.jsonl"
    assert _call("reformulate", "-t", "ikat23-test", "--turns", turns, "--llm", "heuristic", "-o", str(refs),
                 "--no-progress") == 0
    lists = base / "lists"
    assert _call("retrieve", "-i", str(index), "-q", str(refs), "-f", "rewrite,rewrite_response,third",
                 "-o", str(lists), "-k", "50") == 0
    runs = [lists / f"{f}.run" for f in ("rewrite", "rewrite_response", "third")]
    weights = base / "weights.json"
    assert _call("tune", "--runs", *map(str, runs), "--levels", str(refs), "--qrels", "ikat23-test-provenance",
                 "--step", "0.25", "-o", str(weights), "--json") == 0
    fused = base / "fused.run"
    assert _call("fuse", "--runs", *map(str, runs), "--levels", str(refs), "-w", str(weights), "-o", str(fused)) == 0
    ptkb = base / "ptkb.run"
    assert _call("rank-ptkb", "-t", "ikat23-test", "--turns", turns, "-r", str(refs), "-o", str(ptkb)) == 0
    responses = base / "responses.jsonl"
    assert _call("respond", str(fused), "-t", "ikat23-test", "--turns", turns, "--collection", str(collection),
                 "-r", str(refs), "--ptkb-run", str(ptkb), "-o", str(responses), "--no-progress") == 0
    queries = base / "queries.tsv"
    queries.write_text("".join(f"{t}\tquery of {t}\n" for t in chosen[:12]))
    qvec = base / "qvec.jsonl"
    qvec.write_text("".join(json.dumps({"id": t, "vector": {"a": 1.0}}) + "\n" for t in chosen[:12]))
    pvec = base / "pvec.jsonl"
    pvec.write_text("".join(json.dumps({"id": f"p{i}", "contents": "", "vector": {"a": 1.0, "b": i + 1.0}}) + "\n"
                            for i in range(5)))
    topics = base / "topics.json"
    shutil.copy(datasets.topics_path("ikat23-test"), topics)
    files.update(refs=refs, runs=runs, weights=weights, fused=fused, ptkb=ptkb, responses=responses,
                 queries=queries, qvec=qvec, pvec=pvec, topics=topics, base=base)
    return files


def _unchanged(path: Path):
    before = path.read_bytes() if path.is_file() else None

    def check() -> None:
        if before is not None:
            assert path.read_bytes() == before, f"{path} was changed"

    return check


# ---- class 1: text that is valid JSON but not valid Unicode, through every JSON reader -------------------------
def _with_lone_surrogate(src: Path, dst: Path, field: str) -> Path:
    """A copy of a JSONL file whose first record's ``field`` holds a lone surrogate."""
    lines = src.read_text().splitlines()
    first = json.loads(lines[0])
    first[field] = "X"
    lines[0] = json.dumps(first).replace('"X"', LONE, 1)
    dst.write_text("\n".join(lines) + "\n")
    return dst


def test_every_json_reader_refuses_a_lone_surrogate_naming_file_line_and_field(work, tmp_path, run_cli):
    t = tmp_path
    responses = _with_lone_surrogate(work["responses"], t / "responses.jsonl", "text")
    refs = _with_lone_surrogate(work["refs"], t / "refs.jsonl", "model")
    pvec = _with_lone_surrogate(work["pvec"], t / "pvec.jsonl", "id")
    qvec = _with_lone_surrogate(work["qvec"], t / "qvec.jsonl", "id")
    collection = _with_lone_surrogate(Path(work["collection"]), t / "collection.jsonl", "contents")
    topics = t / "topics.json"
    topics.write_text(work["topics"].read_text().replace('"utterance": "', '"utterance": "\\ud83d', 1))
    weights = t / "weights.json"
    weights.write_text(work["weights"].read_text().replace('"objective": [', f'"objective": [{LONE}, ', 1))
    config = t / "run.yaml"
    config.write_text('name: "x\\ud83d"\nevaluation:\n  qrels: ikat23-test-provenance\n')
    fused, turns = str(work["fused"]), work["turns"]
    cases = {
        "export --responses": ["export", fused, "-t", "ikat23-test", "--responses", str(responses), "-o",
                               str(t / "s.json")],
        "evaluate-responses": ["evaluate-responses", str(responses), "-t", "ikat23-test"],
        "respond --reformulations": ["respond", fused, "-t", "ikat23-test", "--turns", turns, "--collection",
                                     str(work["collection"]), "-r", str(refs), "-o", str(t / "r.jsonl")],
        "rank-ptkb --topics": ["rank-ptkb", "-t", str(topics), "-o", str(t / "p.run")],
        "index build --vectors": ["index", "build", "-c", str(pvec), "--vectors", "-o", str(t / "vindex")],
        "retrieve --query-vectors": ["retrieve", "-i", str(work["base"] / "vindex-ok"), "--query-vectors",
                                     str(qvec), "-o", str(t / "q.run")],
        "index build (collection)": ["index", "build", "-c", str(collection), "--encoder", "splade-tiny", "-o",
                                     str(t / "cindex")],
        "fuse --weights": ["fuse", "--runs", *map(str, work["runs"]), "--levels", str(work["refs"]), "-w",
                           str(weights), "-o", str(t / "f.run")],
        "run (YAML config)": ["run", str(config)],
    }
    assert _call("index", "build", "-c", str(work["pvec"]), "--vectors", "-o", str(work["base"] / "vindex-ok")) == 0
    for name, args in cases.items():
        code, out, err = run_cli(*args)
        assert code == 2, (name, code, out, err)
        assert "lone surrogate" in err and "Traceback" not in err, (name, err)
        line = " ".join(err.split())
        assert "\\ud83d" in line, (name, err)


# ---- class 3: an output that is one of the inputs, for every writing command ----------------------------------
OUTPUT_PARAMS = {"out", "output_dir", "cv_run"}


def _writing_commands() -> set[str]:
    """Every registered command with an output option (sub-commands as 'index build')."""
    found: set[str] = set()

    def walk(command, prefix: str) -> None:  # type: ignore[no-untyped-def]
        for name, sub in getattr(command, "commands", {}).items():
            full = f"{prefix} {name}".strip()
            if hasattr(sub, "commands"):
                walk(sub, full)
            elif any(p.name in OUTPUT_PARAMS for p in sub.params):
                found.add(full)

    walk(typer.main.get_command(app), "")
    return found


def _overwrite_cases(work) -> dict[str, list[tuple[list[str], Path]]]:
    """Per writing command: (arguments whose output names an input, that input)."""
    w = {k: (str(v) if isinstance(v, Path) else v) for k, v in work.items() if k != "runs"}
    runs = [str(r) for r in work["runs"]]
    turns = w["turns"]
    manifest_collection = Path(json.loads((Path(w["index"]) / "manifest.json").read_text())["collection"]["path"])
    labels = work["base"] / "labels.tsv"
    labels.write_text("1-1_3\tcfda-auto-1\t1\t1\n")
    config = work["base"] / "overwrite.toml"
    config.write_text(f'name = "overwrite"\noutput_dir = "{work["base"]}"\n[reformulator]\nmethod = "file:{w["refs"]}"\n'
                      '[fusion.weights]\nsource = "file"\nfile = "' + w["weights"] + '"\n')
    return {
        "rerank": [(["rerank", "-r", w["fused"], "-q", w["refs"], "-c", w["collection"], "-o", w["fused"]],
                    work["fused"]),
                   (["rerank", "-r", w["fused"], "-q", w["queries"], "-c", w["collection"], "-o", w["queries"]],
                    work["queries"])],
        "respond": [(["respond", w["fused"], "-t", "ikat23-test", "--turns", turns, "--collection", w["collection"],
                      "--refresh", "-o", w["fused"]], work["fused"]),
                    (["respond", w["fused"], "-t", "ikat23-test", "--turns", turns, "--collection", w["collection"],
                      "-r", w["refs"], "-o", w["refs"]], work["refs"])],
        "rank-ptkb": [(["rank-ptkb", "-t", "ikat23-test", "--turns", turns, "-r", w["refs"], "-o", w["refs"]],
                       work["refs"])],
        "export": [(["export", w["fused"], "-t", "ikat23-test", "-o", w["fused"]], work["fused"]),
                   (["export", w["fused"], "-t", "ikat23-test", "--responses", w["responses"], "-o",
                     w["responses"]], work["responses"])],
        "evaluate-responses": [(["evaluate-responses", w["responses"], "-t", "ikat23-test", "-o", w["responses"]],
                                work["responses"])],
        "nuggets agreement": [(["nuggets", "agreement", "--labels", str(labels), "--nuggets", "ikat25-test",
                                "--responses", "ikat25-runs", "--matcher", "lexical", "-o", str(labels)], labels)],
        "nuggets train": [(["nuggets", "train", "--labels", str(labels), "--nuggets", "ikat25-test", "--responses",
                            "ikat25-runs", "-o", str(labels)], labels)],
        "retrieve": [(["retrieve", "-i", w["index"], "-q", w["queries"], "-o", w["queries"]], work["queries"]),
                     (["retrieve", "-i", w["index"], "--query-vectors", w["qvec"], "-o", w["qvec"]], work["qvec"]),
                     (["retrieve", "-i", w["index"], "-q", w["queries"], "-o",
                       str(Path(w["index"]) / "manifest.json")], Path(w["index"]) / "manifest.json")],
        "index export-vectors": [(["index", "export-vectors", w["index"], "-o",
                                   str(Path(w["index"]) / "manifest.json")], Path(w["index"]) / "manifest.json"),
                                 (["index", "export-vectors", w["index"], "-o", str(manifest_collection)],
                                  manifest_collection)],
        "index build": [(["index", "build", "-c", w["pvec"], "--vectors", "-o", str(work["base"])], work["pvec"])],
        "reformulate": [(["reformulate", "-t", w["topics"], "--llm", "heuristic", "-o", w["topics"]],
                         work["topics"]),
                        (["reformulate", "-t", "ikat23-test", "--turns", turns, "--llm", f"file:{w['refs']}", "-o",
                          w["refs"]], work["refs"])],
        "tune": [(["tune", "--runs", *runs, "--levels", w["refs"], "-q", "ikat23-test-provenance", "-o", runs[0]],
                  work["runs"][0]),
                 (["tune", "--runs", *runs, "--levels", w["refs"], "-q", "ikat23-test-provenance", "--cv", "2",
                   "--cv-run", w["refs"]], work["refs"])],
        "fuse": [(["fuse", "--runs", *runs, "--levels", w["refs"], "-w", w["weights"], "-o", w["weights"]],
                  work["weights"])],
        "baseline": [(["baseline", "equal", "--runs", *runs, "-o", runs[1]], work["runs"][1])],
        "report": [(["report", str(work["base"]), "-o", str(work["base"])], work["weights"])],
        "inspect": [(["inspect", str(work["base"]), "-o", w["fused"]], work["fused"])],
        "run": [(["run", str(config)], work["refs"])],
        "converse": [(["converse", str(config), "--api", "http://127.0.0.1:9/", "--run-id", "x", "-o",
                       str(work["base"])], work["refs"])],
    }


def test_every_writing_command_is_walked(work):
    assert _writing_commands() == set(_overwrite_cases(work))


def test_no_command_writes_over_one_of_its_inputs(work, run_cli):
    for command, cases in _overwrite_cases(work).items():
        for args, victim in cases:
            check = _unchanged(victim)
            code, out, err = run_cli(*args)
            assert code == 2, (command, args, code, out, err)
            assert ("is an input" in err or "inside" in err or "holds (or is) an input" in err
                    or "run directory" in err), (command, err)
            check()


def test_a_symlink_or_dotdot_to_an_input_is_the_input(work, tmp_path, run_cli):
    link = tmp_path / "link.run"
    link.symlink_to(work["fused"])
    dotted = str(work["base"] / "lists" / ".." / "fused.run")
    for target in (str(link), dotted):
        check = _unchanged(work["fused"])
        code, _, err = run_cli("rerank", "-r", str(work["fused"]), "-q", str(work["refs"]), "-c",
                               str(work["collection"]), "-o", target)
        assert code == 2 and "is an input" in err, err
        check()


# ---- class 5: a resume with other settings ----------------------------------------------------------------------
def test_respond_resume_with_other_settings_names_them_and_refresh_redoes(work, tmp_path, run_cli):
    out = tmp_path / "r.jsonl"
    base = ["respond", str(work["fused"]), "-t", "ikat23-test", "--turns", work["turns"], "--collection",
            str(work["collection"]), "-r", str(work["refs"]), "--no-progress", "-o", str(out)]
    assert run_cli(*base)[0] == 0
    first = out.read_text()
    for flag, value, name in (("--max-words", "40", "max_words"), ("--max-sentences", "2", "max_sentences"),
                              ("--top-k", "3", "top_k")):
        code, _, err = run_cli(*base, flag, value)
        assert code == 1, (flag, err)
        assert name in err and "--refresh" in err, err
        assert out.read_text() == first
    code, _, err = run_cli(*base, "--max-words", "40", "--refresh")
    assert code == 0, err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(len(r["text"].split()) <= 40 for r in records)
    assert run_cli(*base, "--max-words", "40")[0] == 0  # the same settings resume


def test_reformulate_resume_with_other_settings_names_them(work, tmp_path, run_cli):
    tsv = tmp_path / "rw.tsv"
    tsv.write_text("".join(f"{t}\trewrite of {t}\n" for t in work["turns"].split(",")))
    out = tmp_path / "refs.jsonl"
    base = ["reformulate", "-t", "ikat23-test", "--turns", work["turns"], "--llm", f"file:{tsv}", "-o", str(out),
            "--no-progress"]
    assert run_cli(*base)[0] == 0
    code, _, err = run_cli(*base, "--level-fallback", "heuristic")
    assert code == 1 and "level_fallback" in err, err
    assert run_cli(*base, "--level-fallback", "heuristic", "--refresh")[0] == 0


def test_reformulate_llm_resume_with_another_temperature_is_refused(work, tmp_path, run_cli, monkeypatch):
    from fake_openai import FakeOpenAI

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-resume")
    out = tmp_path / "refs.jsonl"
    turns = ",".join(work["turns"].split(",")[:3])
    with FakeOpenAI() as server:
        base = ["reformulate", "-t", "ikat23-test", "--turns", turns, "--llm", "gpt-test", "--base-url", server.url,
                "--cache-dir", str(tmp_path / "cache"), "-o", str(out), "--no-progress"]
        assert run_cli(*base)[0] == 0
        asked = server.count
        code, _, err = run_cli(*base, "--temperature", "0.7")
        assert code == 1 and "temperature" in err, err
        assert server.count == asked


# ---- class 13: where the key goes -------------------------------------------------------------------------------
def test_a_named_key_variable_that_is_unset_is_refused_for_every_llm_command(work, tmp_path, run_cli, monkeypatch):
    from fake_openai import FakeOpenAI

    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-travel-123456")
    monkeypatch.delenv("MY_KEY", raising=False)
    turns = ",".join(work["turns"].split(",")[:2])
    with FakeOpenAI() as server:
        common = ["--base-url", server.url, "--api-key-env", "MY_KEY", "--no-cache"]
        cases = [
            ["reformulate", "-t", "ikat23-test", "--turns", turns, "--llm", "gpt-test", "-o",
             str(tmp_path / "a.jsonl"), *common],
            ["respond", str(work["fused"]), "-t", "ikat23-test", "--turns", turns, "--collection",
             str(work["collection"]), "--responder", "gpt-test", "-o", str(tmp_path / "b.jsonl"), *common],
            ["rerank", "-r", str(work["fused"]), "-q", str(work["refs"]), "-c", str(work["collection"]),
             "--reranker", "rankgpt", "--model", "gpt-test", "--depth", "5", "--window", "3", "--step", "2",
             "-o", str(tmp_path / "c.run"), *common],
            ["evaluate-responses", str(work["responses"]), "-t", "ikat23-test", "--judge", "gpt-test", *common],
        ]
        for args in cases:
            code, _, err = run_cli(*args)
            assert code == 2 and "MY_KEY" in err, (args[0], code, err)
        assert server.count == 0
        assert not any("sk-must-not-travel" in json.dumps(h) for h in server.headers)


def test_credentials_in_a_base_url_are_never_written_or_printed(work, tmp_path, run_cli, monkeypatch):
    from fake_openai import FakeOpenAI

    monkeypatch.chdir(tmp_path)
    with FakeOpenAI() as server:
        secret_url = server.url.replace("http://", "http://user:SECRETPASS@") + "?key=SECRETQUERY"
        config = tmp_path / "c.toml"
        config.write_text('name = "creds"\ntopics = "ikat23-test"\nturns = ["9-1_1", "9-1_2"]\n'
                          f'[reformulator]\nmethod = "gpt-test"\nbase_url = "{secret_url}"\ncache_dir = "cache"\n'
                          f'[retrieval]\nindex = "{work["index"]}"\ncollection = "{work["collection"]}"\n'
                          '[fusion.weights]\nsource = "file"\nfile = "' + str(work["weights"]) + '"\n')
        monkeypatch.setenv("OPENAI_API_KEY", "sk-x-123456")
        code, out, err = run_cli("run", str(config), "--no-progress")
    written = "".join(p.read_text(errors="replace") for p in (tmp_path / "runs").rglob("*") if p.is_file())
    for secret in ("SECRETPASS", "SECRETQUERY"):
        assert secret not in written and secret not in out and secret not in err
    assert "***@" in (tmp_path / "runs" / "creds" / "config.json").read_text()


# ---- class 4: a server that reflects the key back ---------------------------------------------------------------
def test_an_echoed_key_is_redacted_before_anything_is_stored(work, tmp_path, run_cli, monkeypatch):
    from fake_openai import FakeOpenAI

    key = "sk-canary-ECHOED-998877"
    monkeypatch.setenv("OPENAI_API_KEY", key)

    def echo(body):  # a debugging proxy answering with the request's Authorization header
        return f"not an answer; you sent Authorization: Bearer {key}"

    turns = ",".join(work["turns"].split(",")[:2])
    cache = tmp_path / "cache"
    with FakeOpenAI(content=echo) as server:
        out = tmp_path / "r.jsonl"
        code, stdout, err = run_cli("respond", str(work["fused"]), "-t", "ikat23-test", "--turns", turns,
                                    "--collection", str(work["collection"]), "--responder", "gpt-test", "--base-url",
                                    server.url, "--cache-dir", str(cache), "-o", str(out), "--no-progress")
        assert code == 1  # the answers are unusable: failed turns, kept with their raw answer
        judged = tmp_path / "judge.json"
        run_cli("evaluate-responses", str(work["responses"]), "-t", "ikat23-test", "--judge", "gpt-test",
                "--base-url", server.url, "--cache-dir", str(cache), "-o", str(judged))
        run_cli("rerank", "-r", str(work["fused"]), "-q", str(work["refs"]), "-c", str(work["collection"]),
                "--reranker", "rankgpt", "--model", "gpt-test", "--depth", "5", "--window", "3", "--step", "2",
                "--base-url", server.url, "--cache-dir", str(cache), "--max-retries", "0", "-o",
                str(tmp_path / "c.run"))
    stored = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    assert key not in stored and key not in stdout and key not in err
    assert "[redacted: API key]" in out.read_text()
    assert "redacted" in err


# ---- class 11: errors inside concurrent requests -------------------------------------------------------------
def test_an_unwritable_cache_stops_before_any_request_with_one_line(work, tmp_path, run_cli, monkeypatch):
    from fake_openai import FakeOpenAI

    monkeypatch.setenv("OPENAI_API_KEY", "sk-x-123456")
    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("not a folder")
    turns = ",".join(work["turns"].split(",")[:2])
    with FakeOpenAI() as server:
        cases = [
            ["respond", str(work["fused"]), "-t", "ikat23-test", "--turns", turns, "--collection",
             str(work["collection"]), "--responder", "gpt-test", "-o", str(tmp_path / "b.jsonl")],
            ["rerank", "-r", str(work["fused"]), "-q", str(work["refs"]), "-c", str(work["collection"]),
             "--reranker", "rankgpt", "--model", "gpt-test", "--depth", "5", "--window", "3", "--step", "2",
             "-o", str(tmp_path / "c.run")],
            ["evaluate-responses", str(work["responses"]), "-t", "ikat23-test", "--judge", "gpt-test"],
        ]
        for args in cases:
            code, _, err = run_cli(*args, "--base-url", server.url, "--cache-dir", str(blocker))
            assert code == 2, (args[0], err)
            assert "cache" in err and "ExceptionGroup" not in err and "internal error" not in err, err
            assert len(err.strip().splitlines()) == 1 or err.count("error:") == 1, err
        assert server.count == 0


def test_a_cache_write_that_fails_midway_is_said_once_and_the_work_goes_on(tmp_path, monkeypatch, capsys):
    from fake_openai import FakeOpenAI

    from apcir.llm.accounting import Accounting
    from apcir.llm.jobs import Ask, ask_all
    from apcir.llm.settings import LLMSettings

    cache = tmp_path / "cache"
    got = []
    with FakeOpenAI(content=lambda body: '{"ok": 1}') as server:
        settings = LLMSettings(base_url=server.url, cache_dir=str(cache), api_key_env="OPENAI_API_KEY")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-x-123456")
        asks = [Ask(f"k{i}", [{"role": "user", "content": f"q{i}"}], parse=json.loads,
                    repair=lambda raw, problem: []) for i in range(3)]
        import apcir.llm.cache as cache_module

        original = cache_module.ResponseCache.put

        def broken(self, answer):  # type: ignore[no-untyped-def]
            from apcir.errors import ApcirError

            raise ApcirError("no space left on device", path=self.path(answer.key))

        cache_module.ResponseCache.put = broken  # type: ignore[method-assign]
        try:
            ask_all(asks, model="m", settings=settings, accounting=Accounting(),
                    on_answer=lambda ask, answer: got.append(answer))
        finally:
            cache_module.ResponseCache.put = original  # type: ignore[method-assign]
    assert len(got) == 3 and all(a.ok for a in got)
    assert capsys.readouterr().err.count("could not be written") == 1  # said once, not per answer


# ---- class 12: a timeout bounds the whole request ---------------------------------------------------------------
def test_a_trickling_server_is_cut_at_the_timeout(tmp_path):
    import socket
    import threading
    import time

    from apcir.llm.client import ChatClient, LLMRequestError, RetryPolicy

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n")
        while not stop.is_set():
            try:
                conn.sendall(b" ")
            except OSError:
                break
            time.sleep(0.2)  # each byte well within the read timeout
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    import asyncio

    client = ChatClient("m", base_url=f"http://127.0.0.1:{listener.getsockname()[1]}/v1", api_key="k" * 10,
                        timeout=1.5, retry=RetryPolicy(max_retries=0))
    started = time.monotonic()
    with pytest.raises(LLMRequestError, match="timeout|within"):
        asyncio.run(client.complete([{"role": "user", "content": "hi"}], {}, None))
    elapsed = time.monotonic() - started
    stop.set()
    listener.close()
    assert elapsed < 6, elapsed


# ---- class 14: a complete last record without its newline ---------------------------------------------------------
def test_a_complete_last_record_without_newline_is_kept(work, tmp_path, run_cli):
    out = tmp_path / "r.jsonl"
    base = ["respond", str(work["fused"]), "-t", "ikat23-test", "--turns", work["turns"], "--collection",
            str(work["collection"]), "-r", str(work["refs"]), "--no-progress", "-o", str(out), "--json"]
    assert run_cli(*base)[0] == 0
    out.write_bytes(out.read_bytes().rstrip(b"\n"))
    code, stdout, _ = run_cli(*base)
    assert code == 0
    summary = json.loads(stdout)
    assert summary["written"] == 0 and summary["skipped"] == len(work["turns"].split(","))
    assert out.read_bytes().endswith(b"\n")


# ---- class 15: litter after a kill ----------------------------------------------------------------------------
def test_stale_temporaries_of_a_killed_process_are_removed(tmp_path):
    from apcir.io import remove_stale_temporaries, write_text

    dead = 2**22 + 12345  # above the default pid_max: no such process
    stale = tmp_path / f".x.run.apcir-{dead}.abcdefgh.tmp"
    legacy = tmp_path / ".x.run.abcd1234.tmp"
    alive = tmp_path / f".x.run.apcir-{os.getppid()}.abcdefgh.tmp"
    foreign = tmp_path / ".notes.tmp"
    for path in (stale, legacy, alive, foreign):
        path.write_text("partial")
    write_text(tmp_path / "x.run", "done\n")
    assert not stale.exists() and not legacy.exists()
    assert alive.exists() and foreign.exists()
    assert remove_stale_temporaries(tmp_path, recursive=True) == []


# ---- class 16: more bad values ----------------------------------------------------------------------------------
def test_more_bad_values_get_a_word(work, tmp_path, run_cli):
    code, _, err = run_cli("rerank", "-r", str(work["fused"]), "-q", str(work["refs"]), "-c",
                           str(work["collection"]), "--tag", "", "-o", str(tmp_path / "x.run"))
    assert code == 2 and "--tag" in err
    code, _, err = run_cli("export", str(work["fused"]), "-t", "ikat23-test", "--run-name", " ", "-o",
                           str(tmp_path / "s.json"))
    assert code == 2 and "--run-name" in err
    code, _, err = run_cli("export", str(work["fused"]), "-t", "ikat23-test", "--team-id", "", "-o",
                           str(tmp_path / "s.json"))
    assert code == 2 and "team" in err
    code, _, err = run_cli("retrieve", "-i", str(work["index"]), "--query-vectors", str(work["qvec"]), "--field",
                           "rewrite", "-o", str(tmp_path / "q.run"))
    assert code == 2 and "--field" in err
    twice = tmp_path / "twice.jsonl"
    lines = Path(work["collection"]).read_text().splitlines()
    twice.write_text("\n".join(lines + lines[:1]) + "\n")
    code, _, err = run_cli("rerank", "-r", str(work["fused"]), "-q", str(work["refs"]), "-c", str(twice),
                           "--reranker", "cross-encoder", "-o", str(tmp_path / "y.run"))
    assert code == 2 and "more than once" in err, err
    partial = tmp_path / "partial.run"
    kept = [line for line in work["fused"].read_text().splitlines() if not line.startswith(work["turns"].split(",")[0] + " ")]
    partial.write_text("\n".join(kept) + "\n")
    code, _, err = run_cli("export", str(partial), "-t", "ikat23-test", "--collection", str(work["collection"]),
                           "-o", str(tmp_path / "p.json"))
    assert code == 0 and "have no passage in the run" in err, err


@pytest.mark.parametrize(("vector", "expected"), [
    ({"a": 1e-50}, "smallest 32-bit float"),
    ({"": 1.0}, "empty token"),
    ({"a b": 1.0}, "whitespace"),
])
def test_vector_files_refuse_what_a_pretokenized_index_cannot_hold(tmp_path, run_cli, vector, expected):
    path = tmp_path / "v.jsonl"
    path.write_text(json.dumps({"id": "p1", "contents": "", "vector": vector}) + "\n")
    code, _, err = run_cli("index", "build", "-c", str(path), "--vectors", "-o", str(tmp_path / "i"))
    assert code == 2 and expected in err and ":1:" in err, err


def test_numeric_vector_ids_are_counted_in_a_warning(tmp_path, run_cli):
    path = tmp_path / "v.jsonl"
    path.write_text("".join(json.dumps({"id": i, "contents": "", "vector": {"a": 1.0}}) + "\n" for i in (7, 8)))
    code, _, err = run_cli("index", "build", "-c", str(path), "--vectors", "-o", str(tmp_path / "i"))
    assert code == 0 and "2 passage id(s) are JSON numbers" in err and "line 1: 7" in err, err
    path.write_text(json.dumps({"id": 7.5, "contents": "", "vector": {"a": 1.0}}) + "\n")
    code, _, err = run_cli("index", "build", "-c", str(path), "--vectors", "-o", str(tmp_path / "j"))
    assert code == 2 and "neither a string nor an integer" in err, err


# ---- class 2: settings beyond what a model supports ---------------------------------------------------------------
@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory):
    from tiny_models import tiny_cross_encoder

    return tiny_cross_encoder(tmp_path_factory.mktemp("ce") / "model")


def test_a_length_beyond_the_model_positions_is_refused_in_one_line(work, cross_encoder, tmp_path, run_cli):
    code, _, err = run_cli("rerank", "-r", str(work["fused"]), "-q", str(work["refs"]), "-c", str(work["collection"]),
                           "--reranker", "cross-encoder", "--model", str(cross_encoder), "--max-length", "600",
                           "-o", str(tmp_path / "x.run"))
    assert code == 2 and "512" in err and "max_length" in err and "Traceback" not in err, err
    code, _, err = run_cli("index", "build", "-c", str(work["collection"]), "--encoder", "splade-tiny",
                           "--doc-max-length", "600", "-o", str(tmp_path / "i"))
    assert code == 2 and "512" in err and "doc_max_length" in err, err


def test_a_config_length_beyond_the_model_is_refused_too(work, cross_encoder, tmp_path, run_cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "c.toml"
    config.write_text('name = "long"\nturns = ["9-1_1", "9-1_2"]\n'
                      f'[retrieval]\nindex = "{work["index"]}"\ncollection = "{work["collection"]}"\n'
                      '[fusion.weights]\nsource = "file"\nfile = "' + str(work["weights"]) + '"\n'
                      f'[rerank]\nreranker = "cross-encoder"\nmodel = "{cross_encoder}"\nmax_length = 600\n')
    code, _, err = run_cli("run", str(config), "--no-progress")
    assert code == 2 and "512" in err and "Traceback" not in err, err


# ---- class 6: statement ids the profile lacks ---------------------------------------------------------------------
def test_statements_the_profile_lacks_are_named_and_never_exported(work, tmp_path, run_cli):
    records = [json.loads(line) for line in work["refs"].read_text().splitlines()]
    records[0]["output"]["ptkb_used"] = ["99"]
    refs = tmp_path / "refs.jsonl"
    refs.write_text("".join(json.dumps(r) + "\n" for r in records))
    turn = records[0]["turn_id"]
    common = ["-t", "ikat23-test", "--turns", work["turns"]]
    code, _, err = run_cli("rank-ptkb", *common, "-r", str(refs), "-o", str(tmp_path / "p.run"))
    assert code == 0 and f"turn {turn}: 99" in err, err
    code, _, err = run_cli("respond", str(work["fused"]), *common, "--collection", str(work["collection"]), "-r",
                           str(refs), "-o", str(tmp_path / "r.jsonl"), "--no-progress")
    assert code == 0 and f"turn {turn}: 99" in err, err
    responses = [json.loads(line) for line in work["responses"].read_text().splitlines()]
    responses[0]["ptkb_used"] = ["99"]
    bad = tmp_path / "responses.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in responses))
    out = tmp_path / "s.json"
    code, _, err = run_cli("export", str(work["fused"]), "-t", "ikat23-test", "--responses", str(bad), "-r",
                           str(refs), "--collection", str(work["collection"]), "--ptkb", "used", "-o", str(out))
    assert code == 0 and "99" in err, err
    submitted = json.loads(out.read_text())
    ids = [p["id"] for t in submitted["turns"] for r in t["responses"] for p in r["ptkb_provenance"]]
    assert "99" not in ids


# ---- class 7: levels for part of the turns --------------------------------------------------------------------------
def test_levels_for_part_or_none_of_the_turns(work, tmp_path, run_cli):
    turns = work["turns"].split(",")
    half = tmp_path / "half.tsv"
    half.write_text("".join(f"{t}\tb\n" for t in turns[: len(turns) // 2]))
    code, _, err = run_cli("evaluate-responses", str(work["responses"]), "-t", "ikat23-test", "--levels", str(half))
    assert code == 0 and f"cover {len(turns) // 2} of the {len(turns)}" in err, err
    other = tmp_path / "other.tsv"
    other.write_text("1_1\ta\n1_2\tc\n")
    code, _, err = run_cli("evaluate-responses", str(work["responses"]), "-t", "ikat23-test", "--levels", str(other))
    assert code == 2 and "none of the" in err, err


# ---- class 8: settings given but unused --------------------------------------------------------------------------
@pytest.mark.parametrize(("section", "key"), [
    ('[fusion.weights]\nsource = "cv"\nfile = "nowhere.json"\n', "file"),
    ('[fusion.weights]\nsource = "cv"\ntune_topics = "ikat24-test"\n', "tune_topics"),
    ('[fusion.weights]\nsource = "file"\nfile = "w.json"\nfolds = 3\n', "folds"),
    ('[evaluation.judge]\ntemperature = 0.3\n', "temperature"),
    ('[respond]\nresponder = "extractive"\nbase_url = "http://localhost:9/v1"\n', "base_url"),
    ('[respond]\nresponder = "extractive"\ntemperature = 0.5\n', "temperature"),
    ('[reformulator]\nmethod = "heuristic"\nmax_tokens = 50\n', "max_tokens"),
    ('[reformulator]\nmethod = "gpt-4o"\nlevel_fallback = "heuristic"\n', "level_fallback"),
    ('[rerank]\nreranker = "monot5"\nwindow = 10\n', "window"),
    ('[rerank]\nreranker = "rankgpt"\ntrue_token = "yes"\n', "true_token"),
])
def test_a_key_the_mode_does_not_use_is_an_error_naming_key_and_mode(tmp_path, run_cli, section, key):
    config = tmp_path / "c.toml"
    config.write_text('name = "unused"\n[evaluation]\nqrels = "ikat23-test-provenance"\n' + section)
    code, _, err = run_cli("run", str(config))
    assert code == 2 and key in err and "not used" in err, err
    assert not (tmp_path / "runs").exists()


def test_llm_options_for_the_extractive_responder_are_refused_on_the_command_line(work, tmp_path, run_cli):
    code, _, err = run_cli("respond", str(work["fused"]), "-t", "ikat23-test", "--turns", work["turns"],
                           "--collection", str(work["collection"]), "--temperature", "0.5", "-o",
                           str(tmp_path / "r.jsonl"))
    assert code == 2 and "temperature" in err and "extractive" in err, err
    code, _, err = run_cli("evaluate-responses", str(work["responses"]), "-t", "ikat23-test", "--timeout", "5")
    assert code == 2 and "timeout" in err and "judge" in err, err


# ---- class 9: what the organisers' validators reject ------------------------------------------------------------
@pytest.fixture(scope="module")
def submissions(work, tmp_path_factory):
    """A submission of each year (a few turns each), written by apcir export."""
    base = tmp_path_factory.mktemp("submissions")
    ids = [json.loads(line)["id"] for line in Path(work["collection"]).read_text().splitlines()[:5]]
    made = {}
    for year, topics in ((2023, "ikat23-test"), (2024, "ikat24-test"), (2025, "ikat25-test")):
        turns = [t.turn_id for t in datasets.topics(topics)]
        run = base / f"{year}.run"
        run.write_text("".join(f"{t} Q0 {pid} {r + 1} {5 - r} x\n" for t in turns for r, pid in enumerate(ids)))
        out = base / f"{year}{'.jsonl' if year == 2025 else '.json'}"
        assert _call("export", str(run), "-t", topics, "--collection", str(work["collection"]), "-o", str(out)) == 0
        made[year] = (topics, out)
    return made


@pytest.mark.parametrize("year", [2023, 2024, 2025])
def test_validate_rejects_a_byte_order_mark(submissions, tmp_path, run_cli, year):
    topics, path = submissions[year]
    assert run_cli("validate", str(path), "-t", topics)[0] == 0
    bom = tmp_path / path.name
    bom.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    code, _, err = run_cli("validate", str(bom), "-t", topics)
    assert code == 1 and "byte-order mark" in err and f"[{year} validator: error]" in err, err


@pytest.mark.parametrize("year", [2023, 2024])
@pytest.mark.parametrize(("field", "value", "expected"), [
    ("rank", 2**31, "int32"), ("score", 1e39, "float32"), ("rank", -(2**31) - 1, "int32")])
def test_validate_rejects_numbers_the_protobuf_cannot_hold(submissions, tmp_path, run_cli, year, field, value,
                                                          expected):
    topics, path = submissions[year]
    data = json.loads(path.read_text())
    response = data["turns"][0]["responses"][0]
    if field == "rank":
        response["rank"] = value
    else:
        response["passage_provenance"][0]["score"] = value
    bad = tmp_path / path.name
    bad.write_text(json.dumps(data))
    code, _, err = run_cli("validate", str(bad), "-t", topics)
    assert code == 1 and expected in err and f"[{year} validator: error, run.proto]" in err, err


# ---- class 10: re-ranker scores that do not depend on the machine's load --------------------------------------------
@pytest.mark.slow
def test_a_rerank_is_byte_identical_with_a_cpu_load_beside_it(work, cross_encoder, tmp_path):
    import subprocess
    import sys

    args = [sys.executable, "-c", "from apcir.cli.main import main; main()", "rerank", "-r", str(work["fused"]),
            "-q", str(work["refs"]), "-c", str(work["collection"]), "--reranker", "cross-encoder", "--model",
            str(cross_encoder), "--depth", "30", "--no-progress"]
    alone, loaded = tmp_path / "alone.run", tmp_path / "loaded.run"
    subprocess.run([*args, "-o", str(alone)], check=True, capture_output=True)
    # every core but one busy, and the rerank on the one left with whatever else runs (the suite's other worker):
    # more runnable processes than cores, so the rerank's threads are preempted
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(max(1, (os.cpu_count() or 2) - 1))]
    try:
        subprocess.run([*args, "-o", str(loaded)], check=True, capture_output=True)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert alone.read_bytes() == loaded.read_bytes()
    scores = [float(line.split()[4]) for line in alone.read_text().splitlines() if int(line.split()[3]) <= 30]
    assert all(s == round(s, 6) for s in scores)  # the stated precision of re-ranked scores: 6 decimals


# ---- class 16: what a response record should not hold ---------------------------------------------------------------
def test_evaluate_responses_names_citations_outside_the_passages_and_foreign_turns(work, tmp_path, run_cli):
    records = [json.loads(line) for line in work["responses"].read_text().splitlines()]
    records[0]["citations"] = ["clueweb22-en0000-00-00000:0"]
    records[1]["text"] = "It is so [9]."
    records.append({**records[2], "turn_id": "1_1"})
    path = tmp_path / "responses.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    code, _, err = run_cli("evaluate-responses", str(path), "-t", "ikat23-test")
    assert code == 0, err
    assert "not among their passages" in err and records[0]["turn_id"] in err
    assert "[9]" in err and "outside ikat23-test" in err and "1_1" in err
