"""RankGPT against the local OpenAI-protocol test server (issue 10).

One request per window, ceil((depth - window) / step) + 1 = 9 per turn with the defaults, 0 on a re-run (the
cache); scripted permutations, malformed ones included, never lose or duplicate a passage.
"""

from __future__ import annotations

import json
import re

import pytest
from fake_openai import FakeOpenAI, Reply

from apcir.contract.runs import ranking, read_run_file
from apcir.llm.settings import LLMSettings
from apcir.reranking.rankgpt import (
    SYSTEM,
    expected_windows,
    parse_permutation,
    passage_text,
    permutation_messages,
    window_bounds,
)
from apcir.reranking.settings import RerankSettings
from apcir.reranking.stage import rerank_run

TURNS = ["9-1_1", "9-1_2", "10-2_1"]


def passages_of(body):
    """The window as the request shows it: [(rank, text)]."""
    out = []
    for message in body["messages"]:
        match = re.match(r"\[(\d+)\] (.*)", message["content"], re.S) if message["role"] == "user" else None
        if match:
            out.append((int(match.group(1)), match.group(2)))
    return out


def by_number(body):
    """A well-formed answer: passages sorted by the number in their text, highest first."""
    window = passages_of(body)
    order = sorted(window, key=lambda item: -int(item[1].split()[-1]))
    return Reply(content=" > ".join(f"[{rank}]" for rank, _ in order))


def make_run(n=100):
    run, texts = {}, {}
    for t, turn in enumerate(TURNS):
        hits = {}
        for i in range(n):
            pid = f"clueweb22-en00{t:02d}-00-{i:05d}:0"
            hits[pid] = 1000.0 - i
            texts[pid] = f"passage text about topic {turn} number {(i * 37 + t) % 101}"
        run[turn] = hits
    return run, texts


def settings_for(server, tmp_path, **extra):
    llm = LLMSettings(base_url=server.url, cache_dir=str(tmp_path / "cache"), retry_delay=0.0, max_retries=1,
                      concurrency=8)  # a loopback server otherwise gets one request at a time
    return RerankSettings(reranker="rankgpt", model="fake-gpt", llm=llm, **extra)


def reference_rankgpt(ids, texts, window=20, step=10):
    """RankGPT's sliding_windows with permutation_pipeline, on ids, with the by_number answer."""
    items = list(ids)
    end, start = len(items), len(items) - window
    while start >= 0:
        part = items[start:end]
        items[start:end] = sorted(part, key=lambda p: -int(texts[p].split()[-1]))
        end, start = end - step, start - step
    return items


def test_window_counts_and_bounds():
    assert window_bounds(100, 20, 10)[:2] == [(80, 100), (70, 90)] and window_bounds(100, 20, 10)[-1] == (0, 20)
    assert len(window_bounds(100, 20, 10)) == expected_windows(100, 20, 10) == 9
    assert len(window_bounds(50, 20, 10)) == 4
    assert window_bounds(100, 20, 15)[-1] == (5, 25) and expected_windows(100, 20, 15) == 6
    assert window_bounds(100, 20, 15, "cover")[-1] == (0, 10) and expected_windows(100, 20, 15, "cover") == 7
    assert window_bounds(15, 20, 10) == [(0, 15)] and window_bounds(1, 20, 10) == []
    assert window_bounds(21, 20, 10) == [(1, 21)] and len(window_bounds(21, 20, 10, "cover")) == 2
    for n in range(0, 130):
        for window, step in ((20, 10), (20, 15), (10, 3), (5, 5)):
            for mode in ("rankgpt", "cover"):
                assert len(window_bounds(n, window, step, mode)) == expected_windows(n, window, step, mode)


def test_parse_permutation_repairs_like_rankgpt_and_counts():
    result = parse_permutation("Ranking: [2] > [4] > [2] > [9] > [0] > 1", 5)
    assert result.order == [1, 3, 0, 2, 4]
    assert (result.duplicates, result.unknown, result.missing) == (1, 2, 2)
    with pytest.raises(ValueError, match="no passage identifier"):
        parse_permutation("I cannot rank these.", 5)
    with pytest.raises(ValueError):
        parse_permutation("[0] > [6]", 5)


def test_the_prompt_is_rankgpts():
    messages = permutation_messages("best boots", ["Title: Content: " + "word " * 400, "b"])
    assert messages[0] == {"role": "system", "content": SYSTEM}
    assert messages[1]["content"] == ("I will provide you with 2 passages, each indicated by number identifier []. "
                                      "\nRank the passages based on their relevance to query: best boots.")
    assert messages[2] == {"role": "assistant", "content": "Okay, please provide the passages."}
    assert messages[3]["content"] == "[1] " + " ".join(["word"] * 300)
    assert messages[4] == {"role": "assistant", "content": "Received passage [1]."}
    assert messages[-1]["content"].startswith("Search Query: best boots. \nRank the 2 passages above")
    assert messages[-1]["content"].endswith("Only response the ranking results, do not say any word or explain.")
    assert passage_text("  a\n b   c ", 2) == "a b"


def test_nine_requests_per_turn_then_zero_from_the_cache(tmp_path):
    run, texts = make_run()
    queries = {t: f"query of {t}" for t in TURNS}
    with FakeOpenAI(reply=by_number) as server:
        settings = settings_for(server, tmp_path)
        reranked, summary = rerank_run(run, queries, texts, settings, progress=False)
        assert server.count == 9 * len(TURNS) == summary.requests == summary.windows
        again, second = rerank_run(run, queries, texts, settings, progress=False)
        assert server.count == 27 and second.requests == 0 and second.cache_hits == 27
    assert again == reranked
    for turn in TURNS:
        ids = [p for p, _ in ranking(run[turn])]
        assert [p for p, _ in ranking(reranked[turn])] == reference_rankgpt(ids, texts)
    assert (summary.missing_ids, summary.duplicate_ids, summary.unknown_ids, summary.failed_windows) == (0, 0, 0, 0)


def test_windows_of_one_turn_run_in_order_and_turns_together(tmp_path):
    run, texts = make_run(40)
    seen = []

    def reply(body):
        seen.append((body["messages"][1]["content"], [int(t.split()[-1]) for _, t in passages_of(body)]))
        return by_number(body)

    with FakeOpenAI(reply=reply, delay=0.05) as server:
        rerank_run(run, {t: f"query of {t}" for t in TURNS}, texts, settings_for(server, tmp_path), progress=False)
        assert server.count == 3 * expected_windows(40, 20, 10)
        assert server.max_in_flight > 1  # the turns' windows at the same position are asked together


@pytest.mark.parametrize("answer, counts", [
    ("[3] > [3] > [1] > [3]", (18, 2, 0)),           # duplicates: first place kept, the rest appended
    ("[25] > [2] > [0] > [21] > [1]", (18, 0, 3)),   # unknown ids ignored
    ("[20] > [19]", (18, 0, 0)),                     # most ids missing: appended in their order
    ("2, 1 and then 5; 4", (16, 0, 0)),              # no brackets: the numbers still count (as RankGPT)
])
def test_malformed_permutations_never_lose_or_duplicate_a_passage(tmp_path, answer, counts):
    run, texts = make_run()
    with FakeOpenAI(reply=lambda body: Reply(content=answer)) as server:
        reranked, summary = rerank_run(run, dict.fromkeys(TURNS, "q"), texts, settings_for(server, tmp_path),
                                       progress=False)
        assert server.count == 27
    for turn in TURNS:
        order = [p for p, _ in ranking(reranked[turn])]
        assert sorted(order) == sorted(run[turn]) and len(order) == len(set(order)) == 100
    missing, duplicates, unknown = counts
    assert summary.missing_ids == 27 * missing
    assert summary.duplicate_ids == 27 * duplicates and summary.unknown_ids == 27 * unknown


def test_an_unreadable_answer_gets_one_repair_then_the_window_keeps_its_order(tmp_path):
    run, texts = make_run(30)
    replies = iter([Reply(content="Sorry, I cannot help with that.")] * 2)

    def reply(body):
        return next(replies, None) or by_number(body)

    with FakeOpenAI(reply=reply) as server:
        reranked, summary = rerank_run({"9-1_1": run["9-1_1"]}, {"9-1_1": "q"}, texts,
                                       settings_for(server, tmp_path), progress=False)
        assert server.count == 2 + 1  # window 1 and its repair failed; window 2 answered
    assert summary.failed_windows == 1 and summary.failed == ["9-1_1#1"] and summary.windows == 2
    order = [p for p, _ in ranking(reranked["9-1_1"])]
    assert sorted(order) == sorted(run["9-1_1"])


def test_rerank_cli_with_rankgpt_and_failed_windows_exit_1(tmp_path, run_cli):
    run, texts = make_run(30)
    (tmp_path / "in.run").write_text("".join(f"{t} Q0 {p} {r} {s} base\n" for t in TURNS
                                             for r, (p, s) in enumerate(ranking(run[t]), start=1)))
    (tmp_path / "q.tsv").write_text("".join(f"{t}\tquery of {t}\n" for t in TURNS))
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"id": p, "contents": x}) + "\n" for p, x in texts.items()))
    common = ["--run", str(tmp_path / "in.run"), "--queries", str(tmp_path / "q.tsv"), "--collection",
              str(tmp_path / "c.jsonl"), "--reranker", "rankgpt", "--model", "fake-gpt", "--depth", "30",
              "--cache-dir", str(tmp_path / "cache"), "--retry-delay", "0", "--no-progress"]
    with FakeOpenAI(reply=by_number) as server:
        code, out, err = run_cli("rerank", *common, "--base-url", server.url, "--out", str(tmp_path / "out.run"),
                                 "--json")
        assert code == 0, err
        summary = json.loads(out)
        assert summary["requests"] == 3 * 2 and summary["windows"] == 6 and server.count == 6
    written = read_run_file(tmp_path / "out.run")
    assert written.tag == "base+rankgpt" and not written.problems
    with FakeOpenAI(reply=lambda body: Reply(content="no idea")) as server:
        code, out, err = run_cli("rerank", *common, "--base-url", server.url, "--out", str(tmp_path / "bad.run"),
                                 "--no-cache")
        assert code == 1
        assert "keeps its order" in err
    assert sorted(read_run_file(tmp_path / "bad.run").run["9-1_1"]) == sorted(run["9-1_1"])


def test_the_api_key_is_never_written(tmp_path, monkeypatch):
    monkeypatch.setenv("RERANK_TEST_KEY", "sk-rerank-secret-123456")
    run, texts = make_run(20)
    with FakeOpenAI(reply=by_number) as server:
        llm = LLMSettings(base_url=server.url, cache_dir=str(tmp_path / "cache"), api_key_env="RERANK_TEST_KEY")
        settings = RerankSettings(reranker="rankgpt", model="fake-gpt", llm=llm)
        reranked, summary = rerank_run(run, dict.fromkeys(TURNS, "q"), texts, settings, progress=False)
        assert server.headers[0]["authorization"] == "Bearer sk-rerank-secret-123456"
    for path in (tmp_path / "cache").rglob("*"):
        if path.is_file():
            assert "sk-rerank-secret" not in path.read_text()
    assert "sk-rerank-secret" not in summary.model_dump_json()
