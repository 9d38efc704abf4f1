import json
import subprocess
import sys
from pathlib import Path

import pytest
import pytrec_eval

from apcir import datasets
from apcir.contract.runs import write_run


def test_datasets_json_counts(run_cli):
    code, out, _ = run_cli("datasets", "--json")
    assert code == 0
    summary = json.loads(out)
    topics = {row["name"]: (row["conversations"], row["turns"]) for row in summary["topics"]}
    expected = {"ikat23-train": (11, 95), "ikat23-test": (25, 332), "ikat24-test": (17, 218), "ikat25-test": (17, 188)}
    for name, counts in expected.items():
        assert topics[name] == counts, name
    judged = {row["name"]: row["judged_turns"] for row in summary["qrels"]}
    assert judged["ikat23-test"] == 176 and judged["ikat24-test"] == 116


def test_evaluate_json_per_turn_matches_pytrec_eval(tmp_path, run_cli):
    qrels = datasets.qrels("ikat24-test")
    run = {turn: {p: float((hash(p) % 1000) / 7) for p in list(judged)[:50]} for turn, judged in qrels.items()}
    path = tmp_path / "run.txt"
    write_run(run, path)
    code, out, _ = run_cli("evaluate", str(path), "--qrels", "ikat24-test", "--per-turn", "--json", "-m", "ikat")
    assert code == 0
    payload = json.loads(out)
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.3", "recip_rank"})
    expected = evaluator.evaluate(run)
    assert set(payload["per_turn"]) == set(expected)
    for turn, values in expected.items():
        assert payload["per_turn"][turn]["nDCG@3"] == pytest.approx(values["ndcg_cut_3"], abs=1e-9)
        assert payload["per_turn"][turn]["MRR"] == pytest.approx(values["recip_rank"], abs=1e-9)
    assert set(payload["measures"]) == {"nDCG@3", "nDCG@5", "nDCG@1000", "P@20", "MAP@1000", "Recall@1000", "MRR"}


def test_evaluate_table_states_threshold_and_averaging(tmp_path, run_cli):
    path = tmp_path / "run.txt"
    write_run({"9-1_3": {"clueweb22-en0000-06-17856:4": 1.0}}, path)
    code, out, _ = run_cli("evaluate", str(path), "--qrels", "ikat23-test", "--rel-threshold", "2", "-c")
    assert code == 0
    assert "grade >= 2" in out and "trec_eval -c" in out and "176 turns averaged" in out


@pytest.mark.parametrize(
    "args, content, expected",
    [
        (["evaluate", "{run}", "--qrels", "nope"], "1_1 Q0 a 1 1.0 t\n", "unknown qrels 'nope'"),
        (["evaluate", "{run}", "--qrels", "ikat23-test"], "1_1 Q0 a 1 high t\n", "score 'high' is not a number"),
        (["evaluate", "{run}", "--qrels", "{bad_qrels}"], "1_1 Q0 a 1 1.0 t\n", "expected 4 fields"),
        (["evaluate", "{run}", "--qrels", "ikat23-test", "-m", "foo@3"], "1_1 Q0 a 1 1.0 t\n", "unknown measure"),
    ],
)
def test_user_errors_are_one_line_without_traceback(tmp_path, args, content, expected):
    run = tmp_path / "run.txt"
    run.write_text(content)
    bad_qrels = tmp_path / "bad.qrels"
    bad_qrels.write_text("1_1 0 a\n")
    argv = [a.format(run=run, bad_qrels=bad_qrels) for a in args]
    proc = subprocess.run([str(Path(sys.executable).parent / "apcir"), *argv], capture_output=True, text=True)
    assert proc.returncode == 2
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_evaluate_several_runs_compares_them_with_paired_tests(tmp_path, run_cli):
    import random

    from apcir import datasets
    from apcir.contract.runs import write_run

    qrels = datasets.qrels("ikat23-test")
    rng = random.Random(3)
    good, bad = {}, {}
    for turn, grades in qrels.items():
        relevant = [p for p, g in grades.items() if g >= 1]
        others = [p for p, g in grades.items() if g == 0][:20]
        good[turn] = {p: 10.0 - i for i, p in enumerate(relevant + others)}
        shuffled = others + relevant
        rng.shuffle(shuffled)
        bad[turn] = {p: 10.0 - i for i, p in enumerate(shuffled)}
    write_run(good, tmp_path / "good.run")
    write_run(bad, tmp_path / "bad.run")
    code, out, err = run_cli("evaluate", str(tmp_path / "bad.run"), str(tmp_path / "good.run"), "--qrels",
                             "ikat23-test", "--json")
    assert code == 0, err
    payload = json.loads(out)
    assert payload["baseline"] == "bad.run" and set(payload["runs"]) == {"bad.run", "good.run"}
    mrr = {t["measure"]: t for t in payload["tests"] if t["system"] == "good.run"}["MRR"]
    assert mrr["significant"] and mrr["mean_system"] > mrr["mean_baseline"]
    code, out, err = run_cli("evaluate", str(tmp_path / "bad.run"), str(tmp_path / "good.run"), "--qrels",
                             "ikat23-test", "--baseline", str(tmp_path / "good.run"))
    assert code == 0, err
    assert "good.run (baseline)" in out and "↓" in out
