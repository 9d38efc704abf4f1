"""`apcir run` with `[rerank]` sections, query-representation fusion, and the retriever x re-ranker grid (issue 10).

Over the small real collection of the `small` fixture (4 judged conversations), with the offline heuristic
reformulator, a tiny random monoT5 and RankGPT against the local OpenAI-protocol server.
"""

from __future__ import annotations

import json

import pytest
from fake_openai import FakeOpenAI, Reply
from tiny_models import tiny_t5

from apcir.contract.runs import load_run, ranking
from apcir.reranking.rankgpt import expected_windows

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "APCIR_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    return tiny_t5(tmp_path_factory.mktemp("t5pipe") / "model")


def reverse(body):
    numbers = [m["content"].split("]")[0][1:] for m in body["messages"] if m["role"] == "user"
               and m["content"].startswith("[")]
    return Reply(content=" > ".join(f"[{n}]" for n in reversed(numbers)))


def write_config(path, small, t5, server_url, name, backend="embedded", index=None, extra=""):
    root, collection, built, chosen = small
    turns = ", ".join(f'"{t}"' for t in chosen)
    path.write_text(f"""
name = "{name}"
topics = "ikat23-test"
turns = [{turns}]
output_dir = "{root / name}"

[reformulator]
llm = "heuristic"

[retrieval]
backend = "{backend}"
index = "{index or built}"
collection = "{collection}"
encoder = "splade-tiny"

[fusion]
baselines = ["list-rewrite", "manual", "no-personalisation", "entropy", "deps", "rrf", "qr-fusion"]

[fusion.weights]
source = "cv"
folds = 2
step = 0.1

[[rerank]]
reranker = "monot5"
model = "{t5}"
device = "cpu"
depth = 30
max_length = 128
systems = ["apcir", "list-rewrite", "manual"]

[[rerank]]
reranker = "rankgpt"
model = "fake-gpt"
submit = true
[rerank.llm]
base_url = "{server_url}"
cache_dir = "{root / 'rankgpt-cache'}"
retry_delay = 0.0

[evaluation]
qrels = "ikat23-test-provenance"
{extra}
""")
    return root / name


def test_run_with_rerank_sections_prints_reranked_rows_and_writes_both_tables(small, t5, tmp_path, run_cli):
    with FakeOpenAI(reply=reverse) as server:
        run_dir = write_config(tmp_path / "exp.toml", small, t5, server.url, "rr")
        code, out, err = run_cli("run", str(tmp_path / "exp.toml"), "--no-progress")
        assert code == 0, err
        first_requests = server.count
        for row in ("APCIR +monoT5", "q' alone +monoT5", "Manual rewrite (HumanQR) +monoT5", "APCIR +RankGPT",
                    "Query representation fusion"):
            assert row in out, row
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert metrics["backend"] == "embedded" and metrics["encoder"] == "splade-tiny"
        assert set(metrics["rerankers"]) == {"monot5", "rankgpt"}
        systems = metrics["systems"]
        assert systems["apcir+monot5"]["base"] == "apcir" and systems["apcir+monot5"]["reranker"] == "monot5"
        assert "rerank" in systems["apcir"]["groups"]
        names = list(systems)
        assert names.index("apcir+monot5") == names.index("apcir") + 1  # re-ranked rows follow their system
        # re-ranking the top 100 of a 1000-deep run leaves the top-100 set, so Recall@100, unchanged
        for reranked in ("apcir+monot5", "apcir+rankgpt", "list-rewrite+monot5"):
            base = systems[reranked]["base"]
            assert systems[reranked]["means"]["Recall@100"] == pytest.approx(systems[base]["means"]["Recall@100"])
        apcir = load_run(run_dir / "systems" / "apcir.run.gz")
        expected = sum(expected_windows(min(100, len(hits)), 20, 10) for hits in apcir.values())
        fused = load_run(run_dir / "fused.run")
        expected += sum(expected_windows(min(100, len(hits)), 20, 10) for hits in fused.values())
        stages = json.loads((run_dir / "stages.json").read_text())
        detail = stages["rerank:rankgpt"]["detail"]
        # one request per window: apcir's turns and, for submit, fused.run's (identical windows: from the cache)
        assert f"{expected} windows: {first_requests} LLM requests, {expected - first_requests} answers" in detail
        assert (run_dir / "fused+rankgpt.run").exists()
        submitted = json.loads((run_dir / "submission.json").read_text())
        turn = submitted["turns"][0]
        top = [p for p, _ in ranking(load_run(run_dir / "fused+rankgpt.run")[turn["turn_id"]], 5)]
        assert [p["id"] for p in turn["responses"][0]["passage_provenance"][:5]] == top
        report = (run_dir / "report" / "report.md").read_text()
        assert "+Reranking" in report and "Retriever x re-ranker" in report
        assert "| SPLADE (splade-tiny) |" in report and "+monoT5" in report and "+RankGPT" in report
        assert (run_dir / "report" / "retriever-x-reranker.png").exists()

        code, out, err = run_cli("run", str(tmp_path / "exp.toml"), "--no-progress")
        assert code == 0, err
        assert server.count == first_requests, "a re-run asks nothing: every stage is reused"
        assert "0 LLM requests" in out


def test_the_grid_from_two_retrievers(small, t5, tmp_path, run_cli):
    from apcir.retrieval import build_index

    root, collection, _, _ = small
    dense_index = root / "dense-index"
    build_index(collection, "dense", dense_index, "splade-tiny", progress=False)
    with FakeOpenAI(reply=reverse) as server:
        splade = write_config(tmp_path / "a.toml", small, t5, server.url, "grid-splade")
        dense = write_config(tmp_path / "b.toml", small, t5, server.url, "grid-dense", backend="dense",
                             index=dense_index)
        for path in ("a.toml", "b.toml"):
            code, _, err = run_cli("run", str(tmp_path / path), "--no-progress")
            assert code == 0, err
    metrics = json.loads((dense / "metrics.json").read_text())
    assert metrics["backend"] == "dense" and "qr-fusion" in metrics["systems"]
    assert {"entropy", "deps"} <= set(metrics["systems"])  # with the dense index's bi-encoder
    code, out, err = run_cli("report", str(splade), str(dense), "--out", str(tmp_path / "report"))
    assert code == 0, err
    report = (tmp_path / "report" / "report.md").read_text()
    grid = report.split("## Retriever x re-ranker")[1]
    assert "| retriever | no re-ranker | +monoT5 | +RankGPT |" in grid
    assert "| SPLADE (splade-tiny) |" in grid and "| dense (splade-tiny) |" in grid
    row = next(line for line in grid.splitlines() if line.startswith("| dense (splade-tiny) |"))
    value = 100 * metrics["systems"]["apcir+monot5"]["means"][metrics["measures"][0]]
    assert row.split("|")[3].strip() == f"{value:.1f}"
    # the same system from the command line, with the weights a run wrote
    code, out, err = run_cli("retrieve", "--index", str(dense_index), "--queries", str(dense / "reformulations.jsonl"),
                             "--qr-fusion", str(dense / "weights.json"), "--k", "50", "--out", str(tmp_path / "qr.run"))
    assert code == 0, err
    qr = load_run(tmp_path / "qr.run")
    assert len(qr) == len(small[3]) and all(len(hits) == 50 for hits in qr.values())
