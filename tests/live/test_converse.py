"""apcir converse against local simulated users (apcir simulate-user's replay users), end to end."""

from __future__ import annotations

import json

import pytest

import apcir
from apcir import datasets
from apcir.errors import ApcirError
from apcir.experiment.config import validate_config
from apcir.live.client import LiveError, SimulationClient
from apcir.live.converse import JOURNAL, RUN_FILE, Converse
from apcir.live.protocol import PROTOCOLS, count_tokens
from apcir.live.server import Simulation, SimulationServer
from apcir.live.users import CLOSING, replay_sessions

CANARY = "canary-7f3a9c1e55d04b2e"


@pytest.fixture(scope="module")
def live_setup(small, tmp_path_factory):
    """Three judged conversations of the small collection, and weights tuned on their lists (source = file)."""
    root, collection, index, chosen = small
    qrels = apcir.qrels("ikat23-test-provenance")
    turns = [t for t in apcir.topics("ikat23-test") if t.turn_id in set(chosen)]
    conversations = list(dict.fromkeys(t.conversation_id for t in turns))[:3]
    turns = [t for t in turns if t.conversation_id in conversations]
    records = apcir.reformulate(turns, "heuristic")
    lists = [apcir.retrieve(records, index, field=f) for f in ("rewrite", "rewrite_response", "third")]
    weights = apcir.tune(lists, {t: r.output.level for t, r in records.items()}, qrels, step="0.5")
    folder = tmp_path_factory.mktemp("live")
    weights.save(folder / "weights.json")
    data = {"name": "live", "topics": "ikat23-test", "turns": [t.turn_id for t in turns],
            "output_dir": str(folder / "offline"),
            "retrieval": {"index": str(index), "collection": str(collection), "encoder": "splade-tiny"},
            "fusion": {"weights": {"source": "file", "file": str(folder / "weights.json")}, "baselines": False},
            "evaluation": {"qrels": "ikat23-test-provenance"}}
    return folder, turns, data


def _serve(turns, tmp_path, send_ptkb=True):
    """Replay users (with their PTKB in each reply, as the 2026 guidelines describe; the organisers' server
    sends none: ``send_ptkb=False``)."""
    log = tmp_path / "user-log.jsonl"
    simulation = Simulation(lambda: replay_sessions(turns), CANARY, log=log, send_ptkb=send_ptkb)
    return SimulationServer(simulation).start(), log


def test_a_whole_run_against_replay_users_answers_every_utterance_once(live_setup, tmp_path, capsys):
    folder, turns, data = live_setup
    server, log = _serve(turns, tmp_path)
    try:
        client = SimulationClient(server.url, CANARY, PROTOCOLS[2026])
        summary = Converse(validate_config(data), client, tmp_path / "run", run_id="live-1").play()
        assert client.status("live-1").status == "complete"
    finally:
        server.stop()
    exchanges = [json.loads(line) for line in log.read_text().splitlines()]
    asked = [(e["topic_id"], e["turn"]) for e in exchanges]
    expected = [(t.conversation_id, t.turn_number) for t in turns]
    assert asked == expected, "every utterance answered exactly once, in order, none skipped"
    assert summary.answered == len(turns) and summary.resent == 0
    assert all(count_tokens(e["response"]) <= 250 and e["response"].strip() for e in exchanges)
    assert all(0 < len(e["citations"]) <= 10 for e in exchanges)  # 2026: the top 10
    run = apcir.load_run(tmp_path / "run" / RUN_FILE)
    assert set(run) == {t.turn_id for t in turns}  # {topic_id}_{n}: the qrels' ids
    table = apcir.evaluate(run, "ikat23-test-provenance", ["nDCG@3", "RR"])
    assert table.value(run.name, "turns") > 0
    # the token appears in no file of the run directory and in no output
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file():
            assert CANARY not in path.read_text(errors="replace"), path
    captured = capsys.readouterr()
    assert CANARY not in captured.out + captured.err


def test_a_first_live_turn_gets_the_same_fused_ranking_as_apcir_run(live_setup, tmp_path):
    from apcir.experiment.pipeline import run_experiment

    folder, turns, data = live_setup
    config = validate_config(data)
    run_experiment(config, progress=False)
    offline = apcir.load_run(config.run_dir / "fused.run")
    first = [t for t in turns if t.turn_number == 1 and not t.history]
    server, _ = _serve(first, tmp_path)
    try:
        client = SimulationClient(server.url, CANARY, PROTOCOLS[2026])
        Converse(config, client, tmp_path / "run", run_id="first").play()
    finally:
        server.stop()
    live = apcir.load_run(tmp_path / "run" / RUN_FILE)
    for turn in first:
        assert live[turn.turn_id] == pytest.approx(offline[turn.turn_id], abs=1e-6), turn.turn_id
        assert list(live[turn.turn_id]) and len(live[turn.turn_id]) == len(offline[turn.turn_id])


class Crash(Exception):
    pass


def test_killed_after_the_server_recorded_an_answer_the_same_command_finishes(live_setup, tmp_path):
    """The process dies after the server recorded an answer but before its reply arrived: a second run with the
    same run id asks run/session, answers the next utterance, and nothing is answered twice or skipped."""
    folder, turns, data = live_setup
    server, log = _serve(turns, tmp_path)
    try:
        client = SimulationClient(server.url, CANARY, PROTOCOLS[2026])
        sends = {"n": 0}
        real_send = client.send

        def dying_send(*args, **kwargs):
            reply = real_send(*args, **kwargs)
            sends["n"] += 1
            if sends["n"] == 3:
                raise Crash("killed before the reply was read")
            return reply

        client.send = dying_send  # type: ignore[method-assign]
        with pytest.raises(Crash):
            Converse(validate_config(data), client, tmp_path / "run", run_id="crash").play()
        again = SimulationClient(server.url, CANARY, PROTOCOLS[2026])
        summary = Converse(validate_config(data), again, tmp_path / "run", run_id="crash").play()
    finally:
        server.stop()
    asked = [(e["topic_id"], e["turn"]) for e in map(json.loads, log.read_text().splitlines())]
    assert asked == [(t.conversation_id, t.turn_number) for t in turns]
    assert summary.answered == len(turns) - 3 and summary.resent == 0
    starts = [e for e in map(json.loads, (tmp_path / "run" / JOURNAL).read_text().splitlines())
              if e["event"] == "start"]
    assert len(starts) == 1, "run/start is never called twice"


def test_killed_before_the_server_recorded_an_answer_it_is_sent_again(live_setup, tmp_path):
    folder, turns, data = live_setup
    server, log = _serve(turns, tmp_path)
    try:
        client = SimulationClient(server.url, CANARY, PROTOCOLS[2026])
        sends = {"n": 0}
        real_send = client.send

        def dies_before_sending(*args, **kwargs):
            sends["n"] += 1
            if sends["n"] == 2:
                raise Crash("killed after computing the answer, before sending it")
            return real_send(*args, **kwargs)

        client.send = dies_before_sending  # type: ignore[method-assign]
        with pytest.raises(Crash):
            Converse(validate_config(data), client, tmp_path / "run", run_id="crash2").play()
        summary = Converse(validate_config(data), SimulationClient(server.url, CANARY, PROTOCOLS[2026]),
                           tmp_path / "run", run_id="crash2").play()
    finally:
        server.stop()
    asked = [(e["topic_id"], e["turn"]) for e in map(json.loads, log.read_text().splitlines())]
    assert asked == [(t.conversation_id, t.turn_number) for t in turns]
    assert summary.resent == 1 and summary.answered == len(turns) - 2


def test_the_server_refuses_what_the_organisers_server_refuses_and_the_token_never_shows(tmp_path):
    import base64

    turns = [t for t in apcir.topics("ikat23-test") if t.conversation_id == "9-1"][:2]
    server, _ = _serve(turns, tmp_path, send_ptkb=False)
    try:
        wrong = base64.b64encode(b"not-the-token-" + CANARY[::-1].encode()).decode()
        with pytest.raises(LiveError) as refused:
            SimulationClient(server.url, wrong, PROTOCOLS[2025]).verify()
        assert refused.value.status == 401 and wrong not in str(refused.value)
        with pytest.raises(LiveError) as malformed:
            SimulationClient(server.url, "not base64!", PROTOCOLS[2025]).verify()
        assert malformed.value.status == 400 and "base64" in str(malformed.value)
        client = SimulationClient(server.url, CANARY, PROTOCOLS[2025])
        first = client.start("r", "test")
        assert first.utterance == turns[0].utterance and first.user_meta is None  # no user_meta, as the server
        assert [m.content for m in first.history] == [turns[0].utterance]  # the current utterance, last
        with pytest.raises(LiveError) as taken:
            client.start("r", "again")
        assert taken.value.status == 412
        with pytest.raises(LiveError) as too_long:
            client.send("r", "word " * 300, {}, [])
        assert too_long.value.status == 422 and "too long (300 tokens)" in too_long.value.detail
        assert "word word" not in str(too_long.value)  # FastAPI's error list, without its input
        second = client.send("r", "an answer [1].", {"p": 1.0}, ["I like tea."])
        assert [m.role for m in second.history] == ["user", "assistant", "user"]
        assert second.history[-1].content == second.utterance == turns[1].utterance
        closing = client.send("r", "another answer.", {}, [])
        assert closing.utterance == CLOSING and closing.last_response_of_session and closing.last_response_of_run
        with pytest.raises(LiveError) as over:
            client.session("r")
        assert over.value.status == 500  # no session open after the run
        with pytest.raises(LiveError) as finished:
            client.send("r", "", {}, [])
        assert finished.value.status == 400 and "No more open topics" in finished.value.detail
        with pytest.raises(LiveError) as unknown:
            client.send("nope", "x", {}, [])
        assert unknown.value.status == 428
        with pytest.raises(LiveError) as no_status:
            client.status("nope")
        assert no_status.value.status == 404
        status = client.status("r")
        assert (status.status, status.open_topics, status.done_topics) == ("complete", [], ["9-1"])
        dump = client.dump("r")
        assert [d["metadata"]["topic_id"] for d in dump] == ["9-1_1", "9-1_2", "9-1_3"]
        assert [d["responses"][0]["assistant_text"] for d in dump] == ["an answer [1].", "another answer.", None]
        assert dump[0]["responses"][0]["assistant_citations"] == {"p": 1.0}
        assert dump[0]["responses"][0]["assistant_meta"] is None  # 2025's top-level provenance: not stored
    finally:
        server.stop()


def test_right_after_a_session_ended_run_session_fails_and_the_journal_carries_on(tmp_path):
    """As the organisers' server does: run/session answers 500 right after a session's closing words; the
    next continue (its response ignored) opens the next topic."""
    turns = [t for t in apcir.topics("ikat23-test") if t.conversation_id in ("9-1", "9-2") and t.turn_number == 1]
    server, _ = _serve(turns, tmp_path)
    try:
        client = SimulationClient(server.url, CANARY, PROTOCOLS[2026])
        first = client.start("s", "test")
        assert first.ptkb() and first.user_id == "9"
        closing = client.send("s", "an answer.", {}, [])
        assert closing.last_response_of_session and not closing.last_response_of_run
        with pytest.raises(LiveError) as ended:
            client.session("s")
        assert ended.value.status == 500
        assert client.status("s").status == "active"
        second = client.send("s", "", {}, [])
        assert second.topic_id == "9-2" and [m.role for m in second.history] == ["user"] and second.user_id == "9"
        assert client.session("s").utterance == second.utterance
        assert client.status("s").status == "complete"  # the last topic opened: none is left to open
    finally:
        server.stop()


def test_the_converse_command_plays_a_run_and_says_nothing_of_the_token(live_setup, tmp_path, run_cli,
                                                                          monkeypatch):
    import base64

    from apcir.live.errors import TOKEN_REFUSED

    folder, turns, data = live_setup
    one = [t for t in turns if t.conversation_id == turns[0].conversation_id][:2]
    config = tmp_path / "live.toml"
    config.write_text(
        f'name = "live"\n[retrieval]\nindex = "{data["retrieval"]["index"]}"\n'
        f'collection = "{data["retrieval"]["collection"]}"\nencoder = "splade-tiny"\n'
        f'[fusion]\nbaselines = false\n[fusion.weights]\nsource = "file"\nfile = "{folder / "weights.json"}"\n')
    server, log = _serve(one, tmp_path)
    try:
        monkeypatch.delenv("IKAT_API_TOKEN", raising=False)
        code, _, err = run_cli("converse", str(config), "--api", server.url, "--run-id", "cli", "-o",
                               str(tmp_path / "run"))
        assert code == 2 and "IKAT_API_TOKEN" in err
        wrong = base64.b64encode(CANARY[::-1].encode()).decode()
        monkeypatch.setenv("IKAT_API_TOKEN", wrong)  # a wrong token: 401, said in one line, not echoed
        code, out, err = run_cli("converse", str(config), "--api", server.url, "--run-id", "cli", "-o",
                                 str(tmp_path / "run"))
        assert code == TOKEN_REFUSED and "401" in err and wrong not in out + err
        monkeypatch.setenv("IKAT_API_TOKEN", CANARY)
        code, out, err = run_cli("converse", str(config), "--api", server.url, "--run-id", "cli2", "-o",
                                 str(tmp_path / "run2"), "--json")
        assert code == 0, err
        summary = json.loads(out)
        assert summary["answered"] == 2 and set(summary["latency"]) >= {"reformulate", "retrieve", "respond", "turn"}
        assert CANARY not in out + err
        assert not summary["already_complete"]
        # the finished run, run again: said to be complete (not "0 utterances answered over 0 topics")
        code, out, err = run_cli("converse", str(config), "--api", server.url, "--run-id", "cli2", "-o",
                                 str(tmp_path / "run2"))
        assert code == 0, err
        assert "already complete (2 utterances answered over 1 topics by earlier commands)" in " ".join(out.split())
        assert "0 utterances answered" not in out
    finally:
        server.stop()
    cfg = validate_config(data)
    with pytest.raises(Exception, match="cannot cross-validate"):
        Converse(cfg.model_copy(update={"fusion": cfg.fusion.model_copy(update={
            "weights": cfg.fusion.weights.model_copy(update={"source": "cv", "file": None})})}),
            SimulationClient("http://127.0.0.1:9/", CANARY, PROTOCOLS[2026]), tmp_path / "x", run_id="x")


def test_a_submitted_reranker_runs_live_and_the_turn_budget_decides_from_earlier_turns(live_setup, tmp_path):
    import time

    from tiny_models import tiny_cross_encoder

    folder, turns, data = live_setup
    one = [t for t in turns if t.conversation_id == turns[0].conversation_id][:3]
    model = tiny_cross_encoder(tmp_path / "ce")
    config = validate_config({**data, "rerank": {"reranker": "cross-encoder", "model": str(model), "depth": 5,
                                                  "submit": True}})
    server, _ = _serve(one, tmp_path)
    try:
        client = SimulationClient(server.url, CANARY, PROTOCOLS[2026])
        converse = Converse(config, client, tmp_path / "run", run_id="budget", turn_budget=1e6)
        summary = converse.play()
    finally:
        server.stop()
    answers = [e for e in map(json.loads, (tmp_path / "run" / JOURNAL).read_text().splitlines())
               if e["event"] == "answer"]
    assert len(answers) == 3 and all("rerank" in a["seconds"] and a["skipped"] == [] for a in answers)
    assert summary.skipped == []
    live = apcir.load_run(tmp_path / "run" / RUN_FILE)
    assert all(len(live[a["turn_id"]]) > 5 for a in answers)  # re-ranked top 5, the rest below
    # the rule: a stage is skipped when the time spent plus its time on earlier turns would overrun the budget
    converse.turn_budget = 1.0
    converse.summary.seconds["rerank"] = [0.8, 0.9]
    assert converse._over_budget(time.perf_counter() - 0.5, "rerank")
    converse.summary.seconds["rerank"] = [0.1]
    assert not converse._over_budget(time.perf_counter() - 0.5, "rerank")
    assert converse._over_budget(time.perf_counter() - 1.5, "respond")  # already over: nothing optional runs


def test_track_persona_keeps_a_memory_per_user_that_carries_over_to_their_next_topic(live_setup, tmp_path):
    """2025 replies carry no PTKB: with --track-persona the user's first-person statements (an offline
    reformulator) or the LLM answer's `persona` field (a model) become the user's PTKB for later turns and
    topics, kept in the run directory."""
    import json as _json

    from fake_openai import FakeOpenAI

    from apcir.live.protocol import Utterance

    folder, _, data = live_setup
    turns = [t for t in apcir.topics("ikat23-test") if t.conversation_id in ("9-1", "9-2") and t.turn_number <= 4]
    server, _ = _serve(turns, tmp_path, send_ptkb=False)
    try:
        client = SimulationClient(server.url, CANARY, PROTOCOLS[2025])
        converse = Converse(validate_config(data), client, tmp_path / "run", run_id="p", track_persona=True)
        converse.play()
    finally:
        server.stop()
    memory = converse.memory("9")
    assert "I prefer a natural diet, not a pill-based diet." in memory
    later = converse.turn_of(Utterance(run_id="p", topic_id="9-2", user_id="9", utterance="and now?"))
    assert list(later.ptkb.values()) == memory  # the memory is the user's PTKB in their next topic
    assert _json.loads((tmp_path / "run" / "persona" / "9.json").read_text()) == memory

    def answer_with_persona(body):
        return _json.dumps({"reasoning": "r", "level": "b", "rewrite": "a rewrite", "response": "an answer",
                            "third_rewrite": "a personal rewrite", "third_response": "x", "ptkb_used": [],
                            "persona": ["I am vegan."]})

    one = turns[:2]
    with FakeOpenAI(content=answer_with_persona) as llm:
        server, _ = _serve(one, tmp_path, send_ptkb=False)
        try:
            model = {**data, "reformulator": {"method": "gpt-test", "base_url": llm.url,
                                              "cache_dir": str(tmp_path / "cache"), "concurrency": 1}}
            converse = Converse(validate_config(model), SimulationClient(server.url, CANARY, PROTOCOLS[2025]),
                                tmp_path / "run-llm", run_id="q", track_persona=True)
            converse.play()
        finally:
            server.stop()
        system = llm.requests[0]["messages"][0]["content"]
    assert '"persona"' in system, "the same LLM call asks for the persona's statements"
    from apcir.reformulation.prompt import build_prompt

    assert '"persona"' not in build_prompt(turns[0]).messages[0]["content"]  # without tracking: the paper's prompt
    assert converse.memory("9") == ["I am vegan."]


def test_server_faults_retried_and_a_server_that_cannot_say_stops_the_run(live_setup, tmp_path, run_cli, monkeypatch):
    from apcir.live.converse import SessionUnknown
    from apcir.live.errors import WHERE_UNKNOWN
    from apcir.live.server import Faults

    folder, turns, data = live_setup
    one = [t for t in turns if t.conversation_id == turns[0].conversation_id][:3]
    log = tmp_path / "users.jsonl"
    simulation = Simulation(lambda: replay_sessions(one), CANARY, log=log, faults=Faults(status={2: 503, 3: 502}))
    with SimulationServer(simulation) as server:
        client = SimulationClient(server.url, CANARY, PROTOCOLS[2026], retry_delay=0.01)
        summary = Converse(validate_config(data), client, tmp_path / "run", run_id="f").play()
    answered = [(e["topic_id"], e["turn"]) for e in map(json.loads, log.read_text().splitlines())]
    assert answered == [(t.conversation_id, t.turn_number) for t in one] and summary.answered == len(one)
    assert simulation.continues == len(one) + 2  # two 5xx, each answer sent again and recorded once

    class NoSession(SimulationClient):
        def session(self, run_id, *, debug=False):
            raise LiveError(404, "Not Found")

    server, _ = _serve(one, tmp_path)
    try:
        first = Converse(validate_config(data), SimulationClient(server.url, CANARY, PROTOCOLS[2026]),
                         tmp_path / "run2", run_id="g")
        first.prepare()
        first._opening()  # started: the journal says so
        again = Converse(validate_config(data), NoSession(server.url, CANARY, PROTOCOLS[2026]),
                         tmp_path / "run2", run_id="g")
        with pytest.raises(SessionUnknown) as stopped:
            again.play()
        assert stopped.value.exit_code == WHERE_UNKNOWN
    finally:
        server.stop()
    # the command keeps the exit status that says which case it was: a server that lost the run (restarted)
    config = tmp_path / "live.toml"
    config.write_text(
        f'name = "live"\n[retrieval]\nindex = "{data["retrieval"]["index"]}"\n'
        f'collection = "{data["retrieval"]["collection"]}"\nencoder = "splade-tiny"\n'
        f'[fusion]\nbaselines = false\n[fusion.weights]\nsource = "file"\nfile = "{folder / "weights.json"}"\n')
    fresh, _ = _serve(one, tmp_path)
    try:
        monkeypatch.setenv("IKAT_API_TOKEN", CANARY)
        code, _, err = run_cli("converse", str(config), "--api", fresh.url, "--run-id", "g", "-o", str(tmp_path / "run2"))
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == WHERE_UNKNOWN and len(errors) == 1 and "does not know run g" in errors[0], err
    finally:
        fresh.stop()


def test_a_server_that_echoes_the_token_in_an_error_never_gets_it_into_an_output_or_a_file(live_setup, tmp_path,
                                                                                              run_cli, monkeypatch):
    from apcir.live.errors import ANSWER_REFUSED
    from apcir.live.server import Faults

    folder, turns, data = live_setup
    one = [t for t in turns if t.conversation_id == turns[0].conversation_id][:2]
    config = tmp_path / "live.toml"
    config.write_text(
        f'name = "live"\n[retrieval]\nindex = "{data["retrieval"]["index"]}"\n'
        f'collection = "{data["retrieval"]["collection"]}"\nencoder = "splade-tiny"\n'
        f'[fusion]\nbaselines = false\n[fusion.weights]\nsource = "file"\nfile = "{folder / "weights.json"}"\n')
    simulation = Simulation(lambda: replay_sessions(one), CANARY, faults=Faults(status={1: 422}, echo_token=True))
    with SimulationServer(simulation) as server:
        monkeypatch.setenv("IKAT_API_TOKEN", CANARY)
        code, out, err = run_cli("converse", str(config), "--api", server.url, "--run-id", "echo", "-o",
                                 str(tmp_path / "run"))
    assert code == ANSWER_REFUSED and "422" in err and "<token>" in err, err  # the server's words, token replaced
    assert CANARY not in out + err
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file():
            assert CANARY not in path.read_text(errors="replace"), path


def test_unusable_outputs_and_inputs_are_one_line_before_any_request(live_setup, tmp_path, run_cli, monkeypatch):
    folder, _, data = live_setup
    config = tmp_path / "live.toml"
    config.write_text(f'name = "live"\n[retrieval]\nindex = "{data["retrieval"]["index"]}"\n'
                      f'[fusion.weights]\nsource = "file"\nfile = "{folder / "weights.json"}"\n')
    monkeypatch.setenv("IKAT_API_TOKEN", CANARY)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    code, _, err = run_cli("converse", str(config), "--api", "http://127.0.0.1:9/", "--run-id", "u",
                           "-o", str(blocker / "run"))
    assert code == 2 and err.count("\n") == 1 and "run directory" in err, err
    bad = tmp_path / "ptkb.json"
    bad.write_text("{not json")
    code, _, err = run_cli("converse", str(config), "--api", "http://127.0.0.1:9/", "--run-id", "u",
                           "--ptkb", str(bad), "-o", str(tmp_path / "run"))
    assert code == 2 and err.count("\n") == 1 and "ptkb.json" in err, err
    topics = tmp_path / "topics.json"
    topics.write_text(datasets.topics_path("ikat23-test").read_text())
    code, _, err = run_cli("simulate-user", "--topics", str(topics), "--log", str(topics), "--port", "0")
    assert code == 2 and "input" in err, err
    code, _, err = run_cli("simulate-user", "--log", str(blocker / "log.jsonl"), "--port", "0")
    assert code == 2 and err.count("\n") == 1, err


def test_an_api_address_that_is_not_http_is_refused_at_once_before_anything_is_written(live_setup, tmp_path,
                                                                                        run_cli, monkeypatch):
    """``--api ftp://...`` (or no scheme, or no host) is one line at once, exit 2: not retried for half a minute
    as a refused connection; the run directory is not made."""
    import time

    folder, _, data = live_setup
    config = tmp_path / "live.toml"
    config.write_text(f'name = "live"\n[retrieval]\nindex = "{data["retrieval"]["index"]}"\n'
                      f'[fusion.weights]\nsource = "file"\nfile = "{folder / "weights.json"}"\n')
    monkeypatch.setenv("IKAT_API_TOKEN", CANARY)
    for api in ("ftp://127.0.0.1:9/simulation/", "127.0.0.1:9/simulation/", "http:///simulation/",
                "http://127.0.0.1:port/"):
        started = time.monotonic()
        code, _, err = run_cli("converse", str(config), "--api", api, "--run-id", "u", "-o", str(tmp_path / "run"))
        assert code == 2 and err.count("\n") == 1 and "--api" in err and "http(s)://" in err, (api, err)
        code, _, err = run_cli("converse", "--api", api, "--check")
        assert code == 2 and err.count("\n") == 1 and "http(s)://" in err, (api, err)
        assert time.monotonic() - started < 5, api
    assert not (tmp_path / "run").exists()
    with pytest.raises(ApcirError, match="not an http"):  # the Python API too
        SimulationClient("ftp://127.0.0.1:9/", CANARY, PROTOCOLS[2026])


def test_converse_without_config_or_run_id_says_what_is_missing(run_cli, monkeypatch):
    monkeypatch.setenv("IKAT_API_TOKEN", CANARY)
    code, _, err = run_cli("converse", "--api", "http://127.0.0.1:9/", "--run-id", "r")
    assert code == 2 and err.count("\n") == 1 and "missing CONFIG" in err and "--check" in err, err
    code, _, err = run_cli("converse", "live.toml", "--api", "http://127.0.0.1:9/")
    assert code == 2 and err.count("\n") == 1 and "missing --run-id" in err, err


def test_a_2025_run_whose_provenance_the_server_did_not_store_is_reported(live_setup, tmp_path):
    """The organisers' server keeps ``meta`` and ignores 2025's top-level ``ptkb_provenance`` (as the local
    server does: tests/live/test_sim_api_conformance.py): the record check names each answer whose provenance
    was not stored, and the same run in the 2026 form matches."""
    import json as _json

    from fake_openai import FakeOpenAI

    folder, turns, data = live_setup
    one = [t for t in turns if t.conversation_id == turns[0].conversation_id][:2]

    def personal(body):
        return _json.dumps({"reasoning": "r", "level": "c", "rewrite": "a rewrite", "response": "an answer",
                            "third_rewrite": "a personal rewrite", "third_response": "x", "ptkb_used": ["1"]})

    checks = {}
    with FakeOpenAI(content=personal) as llm:
        model = {**data, "reformulator": {"method": "gpt-test", "base_url": llm.url,
                                          "cache_dir": str(tmp_path / "cache"), "concurrency": 1}}
        for year in (2025, 2026):
            server, _ = _serve(one, tmp_path)  # with user_meta.ptkb, so that answers use statements
            try:
                converse = Converse(validate_config(model), SimulationClient(server.url, CANARY, PROTOCOLS[year]),
                                    tmp_path / f"run-{year}", run_id=f"p{year}")
                checks[year] = converse.play().record
            finally:
                server.stop()
    assert checks[2026] is not None and checks[2026].ok and checks[2026].matched == 2
    assert checks[2025] is not None and checks[2025].matched == 0 and len(checks[2025].differences) == 2
    assert all("PTKB provenance (1 statement) was not stored" in d and "--protocol 2025" in d
               for d in checks[2025].differences), checks[2025].differences
    assert "recorded: 0 of 2 answers match" == checks[2025].line()
