"""Plugins: a backend, a re-ranker, a format and a reformulator from a package outside apcir (tests/plugins,
registered through entry points), reached from a config and from the CLI with no edit to apcir."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apcir.reformulation.registry import REFORMULATORS
from apcir.reranking.registry import RERANKERS
from apcir.retrieval.registry import BACKENDS
from apcir.submission.formats import FORMATS

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
REGISTRIES = [BACKENDS, RERANKERS, FORMATS, REFORMULATORS]


@pytest.fixture
def plugin(monkeypatch):
    """The toy plugin installed (its dist-info on sys.path), the registries re-reading their entry points."""
    saved = [dict(r._entries) for r in REGISTRIES]
    monkeypatch.syspath_prepend(str(PLUGINS))
    added = [r.load_plugins(again=True) for r in REGISTRIES]
    yield added
    for registry, entries in zip(REGISTRIES, saved):
        registry._entries = entries


def test_the_plugin_entries_join_the_registries(plugin):
    assert plugin == [["toy-overlap"], ["shortest"], ["tops"], ["shout"]]
    assert "toy-overlap" in BACKENDS.names() and "shortest" in RERANKERS and "tops" in FORMATS.help()


def test_a_broken_plugin_is_named_and_skipped(monkeypatch, tmp_path, capsys):
    info = tmp_path / "broken_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[apcir.backends]\nbroken = no_such_module:BACKEND\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = dict(BACKENDS._entries)
    try:
        assert BACKENDS.load_plugins(again=True) == []
        assert "embedded" in BACKENDS
    finally:
        BACKENDS._entries = saved
    assert "the retrieval backend plugin 'broken' (no_such_module:BACKEND) could not be loaded" in capsys.readouterr().err


def test_every_plugin_entry_reached_from_a_config(plugin, small, tmp_path):
    from apcir.experiment.config import validate_config
    from apcir.experiment.pipeline import run_experiment

    _, collection, _, chosen = small
    config = validate_config({
        "name": "plugged", "topics": "ikat23-test", "turns": chosen[::2], "output_dir": str(tmp_path / "run"),
        "reformulator": {"method": "shout"},
        "retrieval": {"backend": "toy-overlap", "index": str(tmp_path / "index"), "collection": str(collection)},
        "fusion": {"weights": {"source": "cv", "folds": 2, "step": 0.5}, "baselines": ["equal"]},
        "rerank": {"reranker": "shortest", "depth": 5, "systems": ["apcir"], "submit": True},
        "export": {"format": "tops"},
        "evaluation": {"qrels": "ikat23-test-provenance"},
    })
    report = run_experiment(config, progress=False)
    run_dir = tmp_path / "run"
    assert json.loads((tmp_path / "index" / "manifest.json").read_text())["backend"] == "toy-overlap"
    records = [json.loads(line) for line in (run_dir / "reformulations.jsonl").read_text().splitlines()]
    assert records and all(r["model"] == "shout" and r["output"]["rewrite"].isupper() for r in records)
    assert "apcir+shortest" in report.metrics.systems
    lines = (run_dir / "submission.tsv").read_text().splitlines()
    assert len(lines) == len(chosen[::2]) and report.submission_problems == []


def test_every_plugin_entry_reached_from_the_cli(plugin, small, run_cli, tmp_path):
    _, collection, _, chosen = small
    turns = ",".join(chosen[:4])
    code, _, err = run_cli("index", "build", "--collection", str(collection), "--backend", "toy-overlap",
                           "--out", str(tmp_path / "index"))
    assert code == 0, err
    code, _, err = run_cli("reformulate", "--topics", "ikat23-test", "--method", "shout", "--turns", turns,
                           "--out", str(tmp_path / "refs.jsonl"))
    assert code == 0, err
    code, _, err = run_cli("retrieve", "--index", str(tmp_path / "index"), "--queries", str(tmp_path / "refs.jsonl"),
                           "--field", "rewrite", "--k", "20", "--out", str(tmp_path / "rewrite.run"))
    assert code == 0, err
    code, _, err = run_cli("rerank", "--run", str(tmp_path / "rewrite.run"), "--queries", str(tmp_path / "refs.jsonl"),
                           "--collection", str(collection), "--reranker", "shortest", "--depth", "5",
                           "--out", str(tmp_path / "reranked.run"))
    assert code == 0, err
    code, _, err = run_cli("export", str(tmp_path / "reranked.run"), "--topics", "ikat23-test",
                           "--format", "tops", "--out", str(tmp_path / "tops.tsv"))
    assert code == 0, err
    assert len((tmp_path / "tops.tsv").read_text().splitlines()) == 4
    code, out, err = run_cli("validate", str(tmp_path / "tops.tsv"), "--topics", "ikat23-test", "--format", "tops")
    assert code == 0 and "valid" in out, err
    (tmp_path / "bad.tsv").write_text("99-9_9\tx\n")
    code, _, err = run_cli("validate", str(tmp_path / "bad.tsv"), "--topics", "ikat23-test", "--format", "tops")
    assert code == 1 and "unknown turn 99-9_9" in err


def test_a_plugins_names_are_accepted_and_their_misspellings_refused_like_the_builtins(plugin):
    """Issue 37: names are checked against the registries as loaded, plugins included."""
    from apcir.errors import ApcirError
    from apcir.experiment.config import validate_config

    def config(**sections):
        return validate_config({"name": "p", "fusion": {"weights": {"source": "file", "file": "w.json"}}, **sections})

    assert config(reformulator={"method": "shout"}).reformulator.method == "shout"
    assert config(retrieval={"backend": "toy-overlap"}).retrieval.backend == "toy-overlap"
    assert config(rerank={"reranker": "shortest"}).rerank[0].reranker == "shortest"
    for sections, guess in (({"reformulator": {"method": "shuot"}}, "did you mean 'shout'?"),
                            ({"retrieval": {"backend": "toy-overlp"}}, "did you mean 'toy-overlap'?"),
                            ({"rerank": {"reranker": "shortst"}}, "did you mean 'shortest'?")):
        with pytest.raises(ApcirError, match=guess):
            config(**sections)
