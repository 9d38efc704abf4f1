"""Conformance: every entry of every registry, parametrised from the registry itself, so that a new entry is
tested by these tests (a backend builds, searches and reports its capabilities; a re-ranker keeps unranked
passages in place; a format round-trips through export and validate; a reformulator yields valid records; a
responder gives every turn a cited record; a nugget matcher scores every pair in [0, 1])."""

from __future__ import annotations

import json
import re

import pytest
from fake_openai import FakeOpenAI, Reply
from tiny_models import tiny_cross_encoder, tiny_t5

import apcir
from apcir.contract.reformulations import LEVELS, load_reformulations
from apcir.evaluation.nuggets.registry import MATCHERS
from apcir.reformulation.registry import REFORMULATORS
from apcir.reranking.registry import RERANKERS
from apcir.reranking.settings import RerankSettings
from apcir.reranking.stage import rerank_run
from apcir.responses.registry import RESPONDERS
from apcir.retrieval.registry import BACKENDS, ENCODER_KINDS
from apcir.submission.formats import FORMATS

# The model each encoder kind is tested with: packaged, offline.
MODELS = {"splade": "splade-tiny", "dense": "minilm"}


@pytest.fixture(autouse=True)
def _offline_llm_env(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "APCIR_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)


def test_every_encoder_kind_has_a_test_model():
    assert set(ENCODER_KINDS.names()) <= set(MODELS)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS.names())
def test_every_backend_builds_searches_and_reports_its_capabilities(backend, small, tmp_path):
    from apcir.retrieval.backends import VectorBackend, can_encode, open_index
    from apcir.retrieval.build import build_index
    from apcir.retrieval.location import index_folder
    from apcir.retrieval.settings import RetrievalSettings
    from apcir.retrieval.stage import passage_texts_for

    _, collection, _, chosen = small
    spec = BACKENDS.get(backend)
    model = MODELS[spec.encoder] if spec.encoder else None
    out = f"milvus:{tmp_path / 'index.db'}" if spec.remote else tmp_path / "index"  # a database's location
    options: dict[str, str] = {}
    if spec.build is None:  # apcir builds none: the backend opens an index of its own (pyterrier: its retriever's)
        options = OWN_INDEX[backend](collection, tmp_path)
        index = open_index(out, model, backend=backend, options=options)
    else:
        result = build_index(collection, backend, out, model, progress=False)
        assert result.manifest.backend == backend and result.manifest.passages > 0
        index = open_index(out, model)
    turn = chosen[0]
    passages = {p.id: p.contents for p in apcir.collection(collection)}
    query = next(iter(passages.values()))[:200]  # a passage's own words: it must come back
    run = index.search({turn: query}, 10, progress=False)
    assert 0 < len(run[turn]) <= 10 and set(run[turn]) <= set(passages)
    # capabilities: an encoder backend encodes queries (and a sparse one searches vectors); a text store is real
    assert can_encode(index) == (spec.encoder is not None)
    if spec.encoder is not None and ENCODER_KINDS.get(spec.encoder).sparse:
        assert isinstance(index, VectorBackend)
    store = spec.text_store(index_folder(out))
    if store is not None:
        some = list(passages)[:3]
        assert store.texts(some) == {p: passages[p] for p in some}
    settings = RetrievalSettings(backend=backend, index=str(out), collection=str(collection),
                                 **({"encoder": model} if model else {}), **options)
    assert passage_texts_for(settings, index_folder(out)) is not None


def _pyterrier_index(collection, folder):
    """A PyTerrier retriever's own index (pyterrier-pisa's BM25 over the passages) and the retriever's reference."""
    pisa = pytest.importorskip("pyterrier_pisa")
    docs = ({"docno": p.id, "text": p.contents} for p in apcir.collection(collection))
    pisa.PisaIndex(str(folder / "index")).indexer().index(docs)
    (folder / "retriever.py").write_text("from pyterrier_pisa import PisaIndex\n\n\ndef bm25(index):\n"
                                         "    return PisaIndex(str(index)).bm25()\n")
    return {"retriever": f"{folder / 'retriever.py'}:bm25"}


OWN_INDEX = {"pyterrier": _pyterrier_index}
"""For each backend whose index apcir does not build: make one, and return the options that open it."""


def _rankgpt_reply(body):
    window = []
    for message in body["messages"]:
        match = re.match(r"\[(\d+)\] (.*)", message["content"], re.S) if message["role"] == "user" else None
        if match:
            window.append(int(match.group(1)))
    return Reply(content=" > ".join(f"[{n}]" for n in reversed(window)))


@pytest.mark.parametrize("reranker", RERANKERS.names())
def test_every_reranker_keeps_the_passages_below_its_depth_in_place(reranker, tmp_path):
    ids = [f"clueweb22-en0000-00-{i:05d}:0" for i in range(12)]
    run = {"9-1_1": {pid: 100.0 - i for i, pid in enumerate(ids)}}
    texts = {pid: f"passage {i} about diets and recipes" for i, pid in enumerate(ids)}
    texts.pop(ids[2])  # a candidate without text keeps its place too
    queries = {"9-1_1": "which diet is natural"}
    spec = RERANKERS.get(reranker)
    server = None
    if spec.kind == "listwise":
        server = FakeOpenAI(reply=_rankgpt_reply).start()
        from apcir.llm.settings import LLMSettings

        settings = RerankSettings(reranker=reranker, model="fake-gpt", depth=6, window=4, step=2,
                                  llm=LLMSettings(base_url=server.url, cache_dir=str(tmp_path / "cache"),
                                                  retry_delay=0.0, max_retries=1))
    else:
        model = tiny_t5(tmp_path / "m") if reranker == "monot5" else tiny_cross_encoder(tmp_path / "m")
        settings = RerankSettings(reranker=reranker, model=str(model), depth=6)
    try:
        result, summary = rerank_run(run, queries, texts, settings, progress=False)
    finally:
        if server is not None:
            server.stop()
    order = [p for p, _ in apcir.Run(result).to_pandas()[["docno", "score"]].itertuples(index=False)]
    assert order[2] == ids[2], "a candidate without text keeps its place"
    assert order[6:] == ids[6:], "the passages below the depth keep their order beneath"
    assert sorted(order[:6]) == sorted(ids[:6]) and summary.turns == 1


@pytest.mark.parametrize("fmt", FORMATS.names())
def test_every_format_round_trips_through_export_and_validate(fmt, tmp_path):
    spec = FORMATS.get(fmt)
    topics = f"ikat{spec.year % 100}-test" if spec.year else "ikat23-test"
    turns = apcir.topics(topics)[:6]
    records = apcir.reformulate(turns, "heuristic")
    passages = {f"clueweb22-en0000-00-{i:05d}:0": f"text of passage {i}" for i in range(8)}
    run = {t.turn_id: {p: 10.0 - i for i, p in enumerate(passages)} for t in turns}
    responses = apcir.respond(turns, records, run, passages)
    out = apcir.export(run, turns, tmp_path / f"out{spec.suffix}", responses=responses, reformulations=records,
                       passages=passages, format=fmt, year=spec.year or 2023)
    assert apcir.validate(out, turns, fmt, year=spec.year) == []
    from apcir.submission.stage import detect_format

    assert detect_format(out) == fmt, "a written submission is recognised as its format"


@pytest.mark.parametrize("name", REFORMULATORS.names())
def test_every_reformulator_yields_valid_records(name, tmp_path):
    turns = [t for t in apcir.topics("ikat23-test") if t.conversation_id == "9-1"][:4]
    spec = REFORMULATORS.get(name)
    settings: dict = {}
    server = None
    method = spec.usage
    if method.startswith("file:"):
        source = tmp_path / "rewrites.tsv"
        source.write_text("".join(f"{t.turn_id}\trewrite of {t.turn_id}\n" for t in turns))
        method = f"file:{source}"
    elif not spec.offline:
        server = FakeOpenAI().start()
        method = "fake-gpt"
        settings = {"base_url": server.url, "cache_dir": str(tmp_path / "cache"), "retry_delay": 0.0}
    try:
        records = apcir.reformulate(turns, method, out=tmp_path / "refs.jsonl", **settings)
    finally:
        if server is not None:
            server.stop()
    assert [records[t.turn_id].status for t in turns] == ["ok"] * len(turns)
    for turn in turns:
        output = records[turn.turn_id].output
        assert output.level in LEVELS and output.rewrite.strip()
        assert set(output.ptkb_used) <= set(turn.ptkb)
    assert set(load_reformulations(tmp_path / "refs.jsonl")) == {t.turn_id for t in turns}
    json.dumps([r.model_dump(mode="json") for r in records.values()])


def _model_reply(body):
    """A valid answer to any responder request: a pathway's next action (answer, then finalize), its steps, and
    the cited response every responder asks for last."""
    text = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
    if text.startswith("Choose the next action") or "action must be one of" in text:
        answered = any("Perform answer" in m["content"] for m in body["messages"] if m["role"] == "user")
        return json.dumps({"action": "finalize" if answered else "answer"})
    if "aspects of an answer" in text:
        return json.dumps({"aspects": ["diet"]})
    if text.startswith("Perform personalize"):
        return json.dumps({"text": "a preference", "statements": []})
    if text.startswith(("Perform reason", "Perform plan")):
        return json.dumps({"text": "thinking"})
    return json.dumps({"response": "A vegetarian diet [1] is natural [2].", "ptkb_used": []})


@pytest.mark.parametrize("responder", RESPONDERS.names())
def test_every_responder_gives_every_turn_a_cited_record(responder, tmp_path):
    from apcir.responses.registry import responder_for

    spec = RESPONDERS.get(responder)
    turns = [t for t in apcir.topics("ikat23-test") if t.conversation_id == "9-1"][:2]
    records = apcir.reformulate(turns, "heuristic")
    passages = {f"clueweb22-en0000-00-{i:05d}:0": f"Passage {i}: a vegetarian diet is natural." for i in range(6)}
    run = {t.turn_id: {p: 10.0 - i for i, p in enumerate(passages)} for t in turns}
    name = spec.name if spec.offline else spec.usage.split()[0].replace("MODEL", "fake-gpt")
    assert responder_for(name) is spec, f"{spec.usage!r} names the {spec.name} responder"
    server = None if spec.offline else FakeOpenAI(content=_model_reply).start()
    settings = {} if server is None else {"base_url": server.url, "cache_dir": str(tmp_path / "cache"),
                                          "retry_delay": 0.0, "max_retries": 1}
    try:
        responses = apcir.respond(turns, records, run, passages, name, out=tmp_path / "responses.jsonl",
                                  **settings)
    finally:
        if server is not None:
            server.stop()
    assert set(responses) == {t.turn_id for t in turns}
    for record in responses.values():
        assert record.status == "ok" and record.text.strip() and record.citations, record
        assert len(record.text.split()) <= 250
        assert set(record.citations) <= set(passages), "it cites only the passages it was given"


def _covered_numbers(body):
    text = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
    numbers = [int(n) for n in re.findall(r"^\[?(\d+)[\].]", text, re.M)]
    return json.dumps({"covered": numbers[:1]} if numbers else {"covered": True})


@pytest.mark.parametrize("matcher", MATCHERS.names())
def test_every_matcher_scores_every_pair_in_0_to_1(matcher, tmp_path):
    from apcir.evaluation.nuggets.features import FEATURES
    from apcir.evaluation.nuggets.gold import Nugget
    from apcir.evaluation.nuggets.learned import LearnedModel, TrainedOn, save_model
    from apcir.evaluation.nuggets.settings import MatcherSettings
    from apcir.llm.settings import LLMSettings

    spec = MATCHERS.get(matcher)
    model_file = tmp_path / "learned.json"
    save_model(model_file, LearnedModel(
        features=list(FEATURES), encoder="minilm", mean=[0.0] * len(FEATURES), scale=[1.0] * len(FEATURES),
        weights=[1.0] * len(FEATURES), intercept=0.0, lam=1.0, tau=0.5,
        trained_on=TrainedOn(labels_file="l.jsonl", labels_sha256="0" * 64, labels=2, positives=1, turns=["9-1_1"])))
    nuggets = [Nugget(turn_id="9-1_1", nugget_id=str(i), text=text) for i, text in
               enumerate(["lentils are rich in protein", "the Eiffel tower is in Paris"])]
    response = "Lentils are rich in protein. Tofu is made from soy."
    with FakeOpenAI(content=_covered_numbers) as server:
        every = {"model": "fake-gpt", "learned_model": str(model_file),
                 "llm": LLMSettings(base_url=server.url, cache_dir=str(tmp_path / "cache"), retry_delay=0.0,
                                    max_retries=1)}
        settings = MatcherSettings.model_validate({"matcher": matcher, **{k: v for k, v in every.items()
                                                                          if k in spec.options.model_fields}})
        scores = spec.build(settings).scores([(n, response) for n in nuggets])
    assert len(scores) == len(nuggets)
    assert all(s is None or 0.0 <= s <= 1.0 for s in scores), scores
    assert any(s is not None for s in scores), "a matcher decides some pair"
    assert spec.tau(settings) >= 0
