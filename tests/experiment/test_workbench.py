"""The researcher's workbench: significance options, report tables and figures, and the tuning traps."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from apcir import datasets
from apcir.metrics.significance import SignificanceSettings, compare_with, correct, paired_p


def test_holm_and_bonferroni_by_hand():
    p = [0.01, 0.04, 0.03, 0.20]
    assert correct(p, "none") == p
    assert correct(p, "bonferroni") == pytest.approx([0.04, 0.16, 0.12, 0.80])
    # Holm: sorted 0.01 (x4), 0.03 (x3), 0.04 (x2), 0.20 (x1), each at least the one before
    assert correct(p, "holm") == pytest.approx([0.04, 0.09, 0.09, 0.20])


@pytest.mark.parametrize("test", ["t-test", "randomisation", "bootstrap"])
def test_each_test_separates_a_real_difference_from_none(test):
    rng = np.random.default_rng(1)
    base = rng.uniform(0, 1, 60)
    better = base + 0.2 + rng.normal(0, 0.05, 60)
    settings = SignificanceSettings(test=test, trials=2000)
    assert paired_p(better, base, settings) < 0.01
    assert paired_p(base, base, settings) == 1.0
    noise = base + rng.normal(0, 0.05, 60)
    assert paired_p(noise, base, settings) > 0.05


def test_randomisation_is_seeded_and_reproducible():
    rng = np.random.default_rng(2)
    a, b = rng.uniform(0, 1, 30), rng.uniform(0, 1, 30)
    one = paired_p(a, b, SignificanceSettings(test="randomisation", seed=3))
    assert one == paired_p(a, b, SignificanceSettings(test="randomisation", seed=3))


def test_effect_size_and_family():
    per_turn = {"base": {str(i): {"m": 0.1 * (i % 3)} for i in range(9)},
                "up": {str(i): {"m": 0.1 * (i % 3) + 0.05 + 0.01 * (i % 2)} for i in range(9)},
                "same": {str(i): {"m": 0.1 * (i % 3)} for i in range(9)}}
    tests = compare_with(per_turn, "base", ["m"], SignificanceSettings(correction="holm"))
    up = next(t for t in tests if t.system == "up")
    assert up.effect_size > 5 and up.marker == "†" and up.correction == "holm"
    assert next(t for t in tests if t.system == "same").p_value == 1.0


@pytest.fixture(scope="module")
def demo_run(small, tmp_path_factory):
    from apcir.experiment.config import ExperimentConfig
    from apcir.experiment.pipeline import run_experiment

    root, collection, index, chosen = small
    out = tmp_path_factory.mktemp("workbench") / "run"
    config = ExperimentConfig.model_validate({
        "name": "bench", "topics": "ikat23-test", "turns": chosen, "output_dir": str(out),
        "retrieval": {"index": str(index), "collection": str(collection), "encoder": "splade-tiny"},
        "fusion": {"weights": {"source": "cv", "folds": 2, "step": 0.1}},
        "evaluation": {"qrels": "ikat23-test-provenance"},
    })
    run_experiment(config, progress=False)
    return out


def test_report_with_randomisation_and_holm_writes_figures_and_tables(demo_run, tmp_path, run_cli):
    out = tmp_path / "report"
    code, _, err = run_cli("report", str(demo_run), "--out", str(out), "--test", "randomisation", "--correction",
                           "holm", "--alpha", "0.1")
    assert code == 0, err
    text = (out / "report.md").read_text()
    assert "paired randomisation test" in text and "Holm over" in text and "p < 0.1" in text
    assert "## Significance against the baseline" in text and "Cohen's d" in text
    for stem in ("turn-differences", "levels-ci", "weight-landscape", "tuned-vs-equal"):
        assert (out / f"bench-{stem}.png").stat().st_size > 5_000 and (out / f"bench-{stem}.pdf").exists(), stem
    tex = (out / "tables" / "table-overall.tex").read_text()
    assert "\\toprule" in tex and "\\bottomrule" in tex
    rows = (out / "tables" / "table-weights.csv").read_text().splitlines()
    assert rows[0].startswith("system,MRR") and "mark MRR" in rows[0]
    assert all(0 <= float(v) <= 1 for v in rows[1].split(",")[1:5])  # raw in CSV, x100 in the tables
    # the same pair gets the same mark in every table: APCIR is in Tables 1 and 2
    tables = [section for section in text.split("## ") if section.startswith(("Table 1", "Table 2"))]
    apcir_rows = [line for section in tables for line in section.splitlines() if line.startswith("| APCIR |")]
    assert len(apcir_rows) == 2 and apcir_rows[0] == apcir_rows[1]


def test_a_table_sent_to_a_file_keeps_its_full_rows(demo_run, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "table.txt"
    run = demo_run / "systems" / "apcir.run.gz"
    with out.open("w") as handle:
        subprocess.run([sys.executable, "-c", "from apcir.cli.main import main; main()", "evaluate", str(run),
                        str(demo_run / "systems" / "no-personalisation.run.gz"), "--qrels", "ikat23-test-provenance",
                        "-m", "MRR", "-m", "nDCG@3", "-m", "Recall@10", "-m", "Recall@100", "-m", "P@20"],
                       stdout=handle, check=True, env={k: v for k, v in os.environ.items() if k != "COLUMNS"})
    text = out.read_text()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) > 80
    assert "no-personalisation.run" in text


def test_per_turn_output_is_in_natural_turn_order(demo_run, run_cli):
    code, out, _ = run_cli("evaluate", str(demo_run / "systems" / "apcir.run.gz"), "--qrels", "ikat23-test-provenance",
                           "--per-turn")
    assert code == 0
    turns = [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│") and "_" in line]
    from apcir.ids import natural_key

    assert turns == sorted(turns, key=natural_key) and len(turns) > 3


def test_tuning_on_rewrites_that_lack_the_tuning_topics_is_refused_at_load(tmp_path, run_cli):
    tsv = tmp_path / "rewrites-2023.tsv"
    tsv.write_text("".join(f"{t.turn_id}\t{t.utterance}\n" for t in datasets.topics("ikat23-test")[:40]))
    config = tmp_path / "trap.toml"
    config.write_text(f'name = "trap"\n[reformulator]\nmethod = "file:{tsv}"\n'
                      '[fusion.weights]\nsource = "tune"\ntune_topics = "ikat24-test"\ntune_qrels = "ikat24-test"\n'
                      '[evaluation]\nqrels = "ikat23-test-provenance"\n')
    code, _, err = run_cli("run", str(config))
    assert code == 2 and "holds no turn of" in err and "ikat24-test" in err and "tune_method" in err, err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_tuning_where_no_passage_is_judged_is_refused_before_the_search(small, tmp_path, run_cli, monkeypatch):
    """tune_method gives the tuning leg the 2024 rewrites, but the collection holds no 2024 passage: refused before
    any search, naming that cause (not a weights file of zeros chosen by the tie rule)."""
    root, collection, index, chosen = small
    monkeypatch.chdir(tmp_path)
    tsv = tmp_path / "rewrites-2024.tsv"
    tsv.write_text("".join(f"{t.turn_id}\t{t.utterance}\n" for t in datasets.topics("ikat24-test")))
    config = tmp_path / "tune.toml"
    config.write_text(f'name = "tune24"\nturns = {json.dumps(chosen[:6])}\n[reformulator]\nmethod = "heuristic"\n'
                      f'[retrieval]\nindex = "{index}"\ncollection = "{collection}"\n'
                      f'[fusion.weights]\nsource = "tune"\ntune_topics = "ikat24-test"\ntune_qrels = "ikat24-test"\n'
                      f'tune_method = "file:{tsv}"\nstep = 0.1\n[evaluation]\nqrels = "ikat23-test-provenance"\n')
    code, _, err = run_cli("run", str(config), "--no-progress")
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert "the collection holds 0 of the" in line and "ikat24-test" in line
    assert not (tmp_path / "runs" / "tune24" / "tune" / "weights.json").exists()
    refs = [json.loads(x) for x in (tmp_path / "runs" / "tune24" / "tune" / "reformulations.jsonl").read_text()
            .splitlines()]
    assert refs and all(r["model"].startswith("file:") and r["status"] == "ok" for r in refs[:5])


@pytest.mark.parametrize(("content", "mapping", "expected"), [
    ("tsv", "rewrite=third_rewrite", "does not apply to a TSV"),
    ("apcir", "rewrite=foo", "do not have"),
    ("json", "rewrite=nope", "no row of the file has"),
])
def test_map_is_honoured_or_refused(tmp_path, run_cli, content, mapping, expected):
    turns = datasets.topics("ikat23-test")[:3]
    path = tmp_path / f"x.{'tsv' if content == 'tsv' else 'jsonl'}"
    if content == "tsv":
        path.write_text("".join(f"{t.turn_id}\tr {t.turn_id}\n" for t in turns))
    elif content == "json":
        path.write_text("".join(json.dumps({"turn_id": t.turn_id, "rw": "r"}) + "\n" for t in turns))
    else:
        out = tmp_path / "apcir.jsonl"
        assert run_cli("reformulate", "-t", "ikat23-test", "--turns", ",".join(t.turn_id for t in turns), "--llm",
                       "heuristic", "-o", str(out))[0] == 0
        path = out
    target = tmp_path / "out.jsonl"
    code, _, err = run_cli("reformulate", "-t", "ikat23-test", "--turns", ",".join(t.turn_id for t in turns),
                           "--llm", f"file:{path}", "--map", mapping, "-o", str(target))
    assert code == 2 and expected in err, err
    assert not target.exists() and not (tmp_path / "out.summary.json").exists()


def test_map_on_apcir_records_is_honoured(tmp_path, run_cli):
    turns = ",".join(t.turn_id for t in datasets.topics("ikat23-test")[:3])
    source = tmp_path / "apcir.jsonl"
    assert run_cli("reformulate", "-t", "ikat23-test", "--turns", turns, "--llm", "heuristic", "-o",
                   str(source))[0] == 0
    out = tmp_path / "out.jsonl"
    code, _, err = run_cli("reformulate", "-t", "ikat23-test", "--turns", turns, "--llm", f"file:{source}", "--map",
                           "rewrite=third_rewrite", "-o", str(out))
    assert code == 0, err
    original = {json.loads(x)["turn_id"]: json.loads(x)["output"] for x in source.read_text().splitlines()}
    mapped = {json.loads(x)["turn_id"]: json.loads(x)["output"] for x in out.read_text().splitlines()}
    assert all(mapped[t]["rewrite"] == original[t]["third_rewrite"] for t in original)


def test_a_missing_file_path_leaves_nothing_behind(tmp_path, run_cli):
    out = tmp_path / "x.jsonl"
    code, _, err = run_cli("reformulate", "-t", "ikat23-test", "--llm", f"file:{tmp_path / 'none.tsv'}", "-o",
                           str(out))
    assert code == 2 and "not found" in err
    assert list(tmp_path.iterdir()) == []


def test_the_index_stage_is_timed_and_counted(demo_run):
    timings = json.loads((demo_run / "timings.json").read_text())
    assert "index" in timings
