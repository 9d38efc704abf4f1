"""Tables that say what they average (issue 37): n, runs over different judged turns, "tuned on test" wherever a
run fused with weights tuned on the turns it is scored on is scored, and one scale and one set of marks in every
front door (the `apcir run` table, the report, the Python `table()`)."""

from __future__ import annotations

import json
import re

import pytest

import apcir
from apcir.contract.runs import load_run, write_run
from apcir.experiment.config import ExperimentConfig
from apcir.experiment.pipeline import run_experiment


@pytest.fixture(scope="module")
def run_dir(small):
    root, collection, index, chosen = small
    config = ExperimentConfig.model_validate({
        "name": "tables", "topics": "ikat23-test", "turns": chosen, "output_dir": str(root / "tables"),
        "retrieval": {"index": str(index), "collection": str(collection), "encoder": "splade-tiny"},
        "fusion": {"weights": {"source": "cv", "folds": 2, "step": 0.1},
                   "baselines": ["no-personalisation", "list-third", "equal"]},
        "evaluation": {"qrels": "ikat23-test-provenance"},
    })
    report = run_experiment(config, progress=False)
    assert report.metrics is not None
    return config.run_dir


def test_evaluate_says_a_fused_run_is_tuned_on_test_and_an_out_of_fold_one_is_not(run_dir, run_cli):
    code, out, err = run_cli("evaluate", str(run_dir / "fused.run"), "-q", "ikat23-test-provenance")
    assert code == 0, err
    assert "[tuned on test]" in out and "tuned on test: fused with weights tuned on" in err
    assert re.search(r"│ n\s+│\s+\d+ │", out), out
    code, out, err = run_cli("evaluate", str(run_dir / "systems" / "apcir.run.gz"), "-q", "ikat23-test-provenance",
                             "--json")
    assert code == 0 and json.loads(out)["tuned_on_test_turns"] == 0 and "tuned on test" not in err
    code, out, _ = run_cli("evaluate", str(run_dir / "fused.run"), "-q", "ikat23-test-provenance", "--json")
    assert json.loads(out)["tuned_on_test_turns"] == json.loads(out)["evaluated_turns"] > 0


def test_runs_over_different_judged_turns_are_said_so_with_n_per_run(run_dir, run_cli, tmp_path):
    fused = load_run(run_dir / "fused.run")
    judged = [t for t in fused if t in apcir.qrels("ikat23-test-provenance")]
    partial = tmp_path / "theirs" / "fused.run"
    partial.parent.mkdir()
    write_run({t: fused[t] for t in judged[:3]}, partial)
    code, out, err = run_cli("evaluate", str(run_dir / "fused.run"), str(partial), "-q", "ikat23-test-provenance",
                             "-m", "MRR")
    assert code == 0, err
    header = next(line for line in out.splitlines() if "MRR" in line and "run" in line)
    assert header.rstrip("┃│ ").endswith("n"), header
    assert re.search(rf"{re.escape(str(partial))}\s*│\s*[\d.]+\s*│\s*3\s*│", out), out
    assert "averaged over different judged turns" in err and "--complete" in err
    code, _, err = run_cli("evaluate", str(run_dir / "fused.run"), str(partial), "-q", "ikat23-test-provenance",
                           "-m", "MRR", "--complete")
    assert code == 0 and "different judged turns" not in err


def test_the_python_api_labels_tuned_on_test_and_shows_the_cli_scale(run_dir, capsys):
    table = apcir.evaluate({"fused": apcir.load_run(run_dir / "fused.run"),
                            "oof": apcir.load_run(run_dir / "systems" / "apcir.run.gz")},
                           "ikat23-test-provenance", ["MRR"])
    assert "tuned on test: fused with weights tuned on" in capsys.readouterr().err
    assert table.value("fused", "tuned on test") > 0 and table.value("oof", "tuned on test") == 0
    mrr = table.value("oof", "MRR")
    assert 0 <= mrr <= 1, "the rows keep fractions"
    assert f"{100 * mrr:.1f}" in str(table) and f"{mrr:.4f}" not in str(table), "the display is x100"
    fused = apcir.fuse(list(apcir.RunDirectory(run_dir).lists.values())[:3], run_dir / "levels.tsv",
                       run_dir / "weights.json")
    apcir.evaluate(fused, "ikat23-test-provenance", ["MRR"])
    assert "tuned on test" in capsys.readouterr().err


def test_every_front_door_shows_one_scale_and_the_reports_marks(run_dir):
    from apcir.cli.run_commands import comparison_table
    from apcir.evaluation.display import systems_table
    from apcir.evaluation.results import read_metrics
    from apcir.evaluation.tables import family_tests, metric_rows

    metrics = read_metrics(run_dir)
    shown = systems_table(metrics)
    report_rows = {row[0].removesuffix(" (baseline)").removesuffix(" (tuned on test)"): row[1:-1] for group in
                   ("overall", "weights", "fusion") for row in metric_rows([metrics], group, metrics.baseline,
                                                                           family_tests([metrics], metrics.baseline,
                                                                                        metrics.significance))[1]}
    for row in shown.rows:
        label = row.label.removesuffix(" (baseline)").removesuffix(" [tuned on test]")
        if label in report_rows:  # the report's cell, mark included, is the terminal's and Python's
            assert [row.cell(m) for m in metrics.measures] == report_rows[label], label
    table = comparison_table(metrics)
    assert [c.header for c in table.columns][-1] == "n" and "x100" in str(table.title)
    python = apcir.RunDirectory(run_dir).table()
    assert python.columns[-1] == "n" and python.value("apcir", "n") == len(metrics.systems["apcir"].per_turn)
    assert all(python.shown(i, m) == row.cell(m) for i, row in enumerate(shown.rows) for m in metrics.measures)


def test_a_turn_and_a_turn_view_print_in_a_few_lines(run_dir):
    directory = apcir.RunDirectory(run_dir)
    turn = directory.turns[3]
    assert len(repr(turn)) < 250 and turn.turn_id in repr(turn) and "\n" not in repr(turn)
    judged = next(iter(directory.metrics.systems["apcir"].per_turn))
    view = directory.turn(judged, top=3)
    text = repr(view)
    assert judged in text and len(text.splitlines()) <= 4 + len(view.lists) + len(view.systems)
    assert max(len(line) for line in text.splitlines()) < 400
