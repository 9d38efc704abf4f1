"""The demo exactly as `make demo` runs it (bundled config), then the notebook on it.

The run is the suite's one demo run (the session fixture ``demo`` in tests/conftest.py), which the documentation
examples read too (tests/docs); it is shared, so what re-runs or writes works on a copy.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from shared import checkout_files, written_into

from apcir import datasets
from apcir.experiment.pipeline import run_experiment
from apcir.submission.stage import validate_submission

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def outputs(demo):
    """The demo's config, and its metrics as its first run wrote them."""
    return demo.config(), demo.metrics()


def test_the_shared_demo_run_was_one_fresh_offline_run(demo):
    """`apcir run demo` on an empty folder: every stage ran, no LLM request (the heuristic reformulator and the
    extractive responder are offline), the submission checked."""
    assert "this run: 0 LLM requests, " in demo.log and "0 of 13 stages reused" in demo.log, demo.log[-2000:]
    assert "submission runs/demo/submission.json passes the offline iKAT checks (332 turns)" in demo.log


def test_demo_compares_every_system_and_is_valid(outputs):
    config, metrics = outputs
    for system in ("apcir", "list-rewrite", "list-rewrite_response", "list-third", "equal", "no-personalisation",
                   "rrf", "manual", "qr-fusion"):
        assert system in metrics.systems, system
    assert metrics.protocol.startswith("5-fold cross-validation by conversation")
    assert len(metrics.systems["apcir"].per_turn) == 74, "every judged turn of ikat23-test-provenance"
    assert validate_submission(config.run_dir / "submission.json", datasets.topics("ikat23-test")) == []
    assert (config.run_dir / "report" / "report.md").exists()
    assert metrics.backend == "embedded" and metrics.encoder == "splade-tiny" and metrics.rerankers == {}
    assert len(metrics.systems["qr-fusion"].per_turn) == 74  # query-representation fusion, out-of-fold weights


def test_demo_stores_each_run_once_and_gzipped(outputs):
    """A system that is a list refers to the list's run; lists and systems are .run.gz; fused.run is plain."""
    import gzip

    from apcir.api import RunDirectory
    from apcir.contract.fusion import load_fusion_record
    from apcir.contract.runs import load_run

    config, _ = outputs
    run_dir = config.run_dir
    record = load_fusion_record(run_dir / "systems" / "fusion.json")
    assert record.refers == {"list-rewrite": "lists/rewrite.run.gz", "list-rewrite_response":
                             "lists/rewrite_response.run.gz", "list-third": "lists/third.run.gz",
                             "manual": "lists/manual.run.gz"}
    stored = sorted(p.name for p in (run_dir / "systems").iterdir() if ".run" in p.name)
    assert stored and all(name.endswith(".run.gz") for name in stored)
    assert not any(name.startswith(("list-", "manual")) for name in stored)
    assert all(p.name.endswith(".run.gz") for p in (run_dir / "lists").glob("*.run*"))
    with gzip.open(run_dir / "systems" / "apcir.run.gz", "rt") as handle:
        assert handle.readline().split()[1] == "Q0"
    assert (run_dir / "fused.run").read_text().split("\n", 1)[0].split()[1] == "Q0"
    systems = RunDirectory(run_dir).systems  # the Python API resolves the references
    assert systems["list-third"] == load_run(run_dir / "lists" / "third.run.gz")
    assert set(systems) >= set(record.systems)


def test_demo_keeps_each_tuned_systems_weights_with_their_rule_and_evidence(outputs):
    from apcir.contract.weights import load_weights

    config, metrics = outputs
    for system in ("apcir-shrunk", "apcir-plateau", "no-levels", "equal"):
        assert len(metrics.systems[system].per_turn) == 74, system  # out-of-fold, like apcir
    paper = load_weights(config.run_dir / "weights.json")
    assert paper.selection.shrinkage == 0 and paper.selection.select == "argmax"
    shrunk = load_weights(config.run_dir / "systems" / "apcir-shrunk.weights.json")
    plateau = load_weights(config.run_dir / "systems" / "apcir-plateau.weights.json")
    assert shrunk.selection.shrinkage_by.startswith("inner cross-validation") and len(shrunk.selection.held_out) == 9
    assert all(lw.plateau is not None and lw.plateau.epsilon >= 0 for lw in plateau.levels.values() if not lw.fallback)
    assert any(lw.plateau is not None and lw.plateau.points > 1 for lw in plateau.levels.values())
    for weights in (paper, shrunk, plateau):
        assert weights.evidence is not None and weights.evidence.resamples == 1000
        assert all(len(e.intervals) == 3 for e in weights.evidence.levels.values())
    text = (config.run_dir / "report" / "report.md").read_text()
    assert "## Fusion weights: how they were chosen, and the bootstrap evidence" in text
    assert "APCIR, plateau optimum" in text and "beats pooled" in text


def test_demo_rerun_reuses_everything(demo, tmp_path):
    """A second run reuses every stage, also where the run directory and the index were copied (as the docs
    examples' scratch directory has them)."""
    again = run_experiment(demo.config(demo.copy_into(tmp_path)), progress=False)
    assert again.llm_requests == 0 and again.retrieval_calls == 0
    assert not any(outcome.ran for outcome in again.outcomes)
    assert again.metrics == demo.metrics()


def test_notebook_runs_on_the_demo_outputs(demo, tmp_path, monkeypatch):
    """The notebook on a copy of the demo run: its `Experiment(...).run()` writes the run's config again (with the
    output directory it was given), which the shared run, read by the reproducibility test, must not get. It runs
    where `make demo` was run (the copy), as a reader's Jupyter would: the run's relative index path then names
    the demo's index, every stage is reused, and nothing is written into the checkout."""
    notebook = nbformat.read(ROOT / "notebooks" / "apcir_from_python.ipynb", as_version=4)
    where = demo.copy_into(tmp_path)
    before = checkout_files(ROOT)  # whatever is there (a user's `make demo` builds indexes/ and runs/demo here)
    monkeypatch.setenv("APCIR_RUN_DIR", str(demo.config(where).run_dir))
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(where)}}).execute()
    cells = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    text = "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in cells)
    assert "332 turns; 9-1_4" in text and "run demo: topics ikat23-test" in text
    assert "level a:" in text and "level c:" in text and "level a: w = [" in text
    assert "APCIR on this turn (x100): MRR" in text and "grade" in text
    # one scale in every human-facing table (issue 37): the systems' table as `apcir run` shows it, not fractions
    assert "51.6" in text and "0.5161" not in text
    assert "no-personalisation" in text and "p corrected" in text and "Judged@10" in text
    # every stage reused (a stage that ran records new seconds), nothing written into the checkout
    stages = (demo.config(where).run_dir / "stages.json").read_text()
    assert stages == (demo.run_dir / "stages.json").read_text()
    assert written_into(before, checkout_files(ROOT)) == []
    # the notebook uses only the public API
    sources = "\n".join(c.source for c in notebook.cells if c.cell_type == "code")
    assert re.findall(r"^(?:from|import) (\S+)", sources, re.M) == ["os", "collections", "pathlib", "apcir"]


def test_demo_numbers_are_the_expected_scores(outputs):
    """Every system's means (and the PTKB rankings' and responses') equal apcir/configs/demo.expected.json within
    its tolerance: a change of numbers must be a deliberate edit of that file (APCIR_UPDATE_EXPECTED=1 rewrites it)."""
    import os

    from apcir.evaluation.expected import differences, read_expected, write_expected
    from apcir.experiment.config import CONFIGS

    _, metrics = outputs
    path = CONFIGS / "demo.expected.json"
    if os.environ.get("APCIR_UPDATE_EXPECTED") == "1":
        write_expected(metrics, path)
    problems = differences(metrics, read_expected(path))
    assert not problems, "the demo's numbers moved (update demo.expected.json on purpose):\n" + "\n".join(problems)
