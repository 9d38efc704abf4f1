"""A plugin retrieval backend with an option of its own (tests/plugins/backend: ``tally`` and its ``min_overlap``),
installed through an entry point of the ``apcir.backends`` group: reached from a config's ``[retrieval]`` in
``apcir run`` and from ``apcir index build`` / ``apcir retrieve --min-overlap``, its key checked like a built-in
backend's, and listed in the generated reference, with no edit to apcir (issue 51)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from shared import cli_section, reference_pages

from apcir.contract.runs import read_run_file
from apcir.errors import ApcirError
from apcir.retrieval.registry import BACKENDS

PLUGIN = Path(__file__).resolve().parents[1] / "plugins" / "backend"


@pytest.fixture
def plugin(monkeypatch):
    """The plugin installed (its dist-info on sys.path); the registry as it was afterwards."""
    BACKENDS.load_plugins()  # what is installed without it, read now
    saved = dict(BACKENDS._entries)
    monkeypatch.syspath_prepend(str(PLUGIN))
    yield BACKENDS.load_plugins(again=True)
    BACKENDS._entries = saved


def scores(run: dict[str, dict[str, float]]) -> list[float]:
    return [score for hits in run.values() for score in hits.values()]


def config(**retrieval):
    from apcir.experiment.config import validate_config

    return validate_config({"name": "p", "fusion": {"weights": {"source": "file", "file": "w.json"}},
                            "retrieval": retrieval})


def test_the_plugin_key_is_checked_like_a_builtin_backends(plugin):
    assert plugin == ["tally"]
    assert config(backend="tally", min_overlap=3).retrieval.options.min_overlap == 3
    with pytest.raises(ApcirError, match=r"'retrieval\.min_overlp': did you mean 'retrieval\.min_overlap'\?"):
        config(backend="tally", min_overlp=3)
    with pytest.raises(ApcirError, match="retrieval.min_overlap: Input should be greater than or equal to 1"):
        config(backend="tally", min_overlap=0)
    with pytest.raises(ApcirError, match="min_overlap: not used by the embedded retrieval backend"):
        config(backend="embedded", min_overlap=3)
    with pytest.raises(ApcirError, match="bm25_k1: not used by the tally retrieval backend"):
        config(backend="tally", bm25_k1=1.2)


@pytest.mark.slow
def test_the_plugin_option_is_reached_from_a_config_in_apcir_run(plugin, small, run_cli, tmp_path):
    from apcir.api import RunDirectory

    _, collection, _, chosen = small
    turns = ", ".join(f'"{t}"' for t in chosen[::2])
    (tmp_path / "tally.toml").write_text(f"""name = "tallied"
topics = "ikat23-test"
turns = [{turns}]
output_dir = "{tmp_path / 'run'}"
[reformulator]
method = "heuristic"
[retrieval]
backend = "tally"
min_overlap = 3
index = "{tmp_path / 'index'}"
collection = "{collection}"
[fusion.weights]
source = "cv"
folds = 2
step = 0.5
[evaluation]
qrels = "ikat23-test-provenance"
""")
    code, _, err = run_cli("run", str(tmp_path / "tally.toml"), "--no-progress")
    assert code == 0, err
    assert json.loads((tmp_path / "index" / "manifest.json").read_text())["backend"] == "tally"
    lists = RunDirectory(tmp_path / "run").lists
    assert set(lists) >= {"rewrite", "rewrite_response", "third"}
    hits = [s for run in lists.values() for s in scores(run)]
    assert hits and min(hits) >= 3, "every passage kept shares at least min_overlap = 3 query words"
    from tally_apcir_plugin import TallyIndex, TallyOptions  # the plugin's own search, on the run's rewrites

    rewrites = {turn: record.output.rewrite for turn, record in RunDirectory(tmp_path / "run").reformulations.items()}
    expected = TallyIndex(tmp_path / "index", None, TallyOptions(min_overlap=3)).search(rewrites)
    assert lists["rewrite"] == {turn: hits for turn, hits in expected.items() if hits}  # a run file has no empty turn
    assert min(scores(TallyIndex(tmp_path / "index", None, TallyOptions()).search(rewrites))) < 3, \
        "without the option the list would hold passages sharing fewer words"


def test_the_plugin_option_is_reached_from_the_commands(plugin, small, run_cli, tmp_path):
    _, collection, _, chosen = small
    for command in (("index", "build"), ("retrieve",)):
        code, out, err = run_cli(*command, "--help")
        assert code == 0 and "--min-overlap" in out, (command, err)
    code, _, err = run_cli("index", "build", "--collection", str(collection), "--backend", "tally",
                           "--out", str(tmp_path / "index"))
    assert code == 0, err
    (tmp_path / "q.tsv").write_text("".join(f"{t}\thistory city people museum\n" for t in chosen[:4]))
    runs = {}
    for minimum in (None, "1", "2"):
        out = tmp_path / f"min-{minimum}.run"
        code, _, err = run_cli("retrieve", "--index", str(tmp_path / "index"), "--queries", str(tmp_path / "q.tsv"),
                               "--k", "1000", "--out", str(out),
                               *(["--min-overlap", minimum] if minimum else []))
        assert code == 0, err
        runs[minimum] = read_run_file(out).run
    assert runs[None] == runs["1"], "the default is the model's"
    assert min(scores(runs["1"])) == 1 and min(scores(runs["2"])) == 2
    assert 0 < len(scores(runs["2"])) < len(scores(runs["1"]))
    code, _, err = run_cli("retrieve", "--index", str(tmp_path / "index"), "--queries", str(tmp_path / "q.tsv"),
                           "--min-overlap", "0", "--out", str(tmp_path / "bad.run"))
    assert code == 2 and "--min-overlap 0: Input should be greater than or equal to 1" in err
    code, _, err = run_cli("index", "build", "--collection", str(collection), "--min-overlap", "2",
                           "--out", str(tmp_path / "other"))
    assert code == 2 and "min_overlap: not used by the embedded retrieval backend" in err


def test_the_plugin_option_is_in_the_generated_reference(plugin):
    config_page, cli_page = reference_pages()
    assert "| `retrieval.min_overlap` | int | `1` | tally: passages sharing fewer query words are left out |" \
        in config_page
    for command in ("apcir index build", "apcir retrieve"):
        section = cli_section(cli_page, command)
        assert "| `--min-overlap` |" in section and "tally: passages sharing fewer query words are left out" \
            in section, command
