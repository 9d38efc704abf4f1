import json

import pytest
from fusion_cases import random_case

from apcir.contract.levels import load_levels, write_levels
from apcir.contract.runs import write_run
from apcir.datasets import write_qrels


@pytest.fixture
def files(tmp_path):
    runs, qrels, levels = random_case(11, turns=16)
    paths = []
    for i, run in enumerate(runs):
        path = tmp_path / f"list{i + 1}.trec"
        write_run(run, path, tag=f"l{i + 1}")
        paths.append(str(path))
    write_qrels(qrels, tmp_path / "qrels.txt")
    write_levels(levels, tmp_path / "levels.tsv")
    return tmp_path, paths, runs, qrels, levels


def test_tune_then_fuse_labels_tuned_on_test(run_cli, files):
    tmp, paths, runs, qrels, levels = files
    code, out, err = run_cli(
        "tune",
        "--runs",
        *paths,
        "--levels",
        str(tmp / "levels.tsv"),
        "--qrels",
        str(tmp / "qrels.txt"),
        "--step",
        "0.1",
        "--out",
        str(tmp / "weights.json"),
    )
    assert code == 0, err
    assert "TUNED ON TEST" in out
    saved = json.loads((tmp / "weights.json").read_text())
    assert saved["step"] == 0.1 and set(saved["levels"]) == {"a", "b", "c"}
    assert {"weights", "score", "n_turns"} <= set(saved["levels"]["a"])
    code, out, err = run_cli(
        "fuse",
        "--runs",
        *paths,
        "--levels",
        str(tmp / "levels.tsv"),
        "--weights",
        str(tmp / "weights.json"),
        "--out",
        str(tmp / "fused.trec"),
        "--apply-to",
        str(tmp / "qrels.txt"),
        "--json",
    )
    assert code == 0, err
    payload = json.loads(out)
    assert payload["label"].startswith("TUNED ON TEST")
    assert (tmp / "fused.trec").exists()


def test_tune_with_cv_reports_out_of_fold(run_cli, files):
    tmp, paths, *_ = files
    code, out, err = run_cli(
        "tune",
        "--runs",
        *paths,
        "--levels",
        str(tmp / "levels.tsv"),
        "--qrels",
        str(tmp / "qrels.txt"),
        "--step",
        "0.1",
        "--cv",
        "2",
        "--out",
        str(tmp / "w.json"),
        "--cv-run",
        str(tmp / "oof.trec"),
        "--json",
    )
    assert code == 0, err
    payload = json.loads(out)
    assert payload["cv"]["label"] == "out-of-fold" and len(payload["cv"]["folds"]) == 2
    assert (tmp / "oof.trec").exists()


def _error(run_cli, *args):
    code, out, err = run_cli(*args)
    assert code == 2, (out, err)
    return " ".join(err.split())


def test_step_not_dividing_one(run_cli, files):
    tmp, paths, *_ = files
    err = _error(
        run_cli,
        "tune",
        "--runs",
        *paths,
        "--levels",
        str(tmp / "levels.tsv"),
        "--qrels",
        str(tmp / "qrels.txt"),
        "--step",
        "0.03",
        "--out",
        str(tmp / "w.json"),
    )
    assert "does not divide 1" in err


def test_too_few_runs_and_wrong_count_for_weights(run_cli, files):
    tmp, paths, *_ = files
    err = _error(
        run_cli,
        "tune",
        "--runs",
        paths[0],
        "--levels",
        str(tmp / "levels.tsv"),
        "--qrels",
        str(tmp / "qrels.txt"),
        "--out",
        str(tmp / "w.json"),
    )
    assert "at least 2 run files" in err
    assert (
        run_cli(
            "tune",
            "--runs",
            *paths,
            "--levels",
            str(tmp / "levels.tsv"),
            "--qrels",
            str(tmp / "qrels.txt"),
            "--step",
            "0.5",
            "--out",
            str(tmp / "w.json"),
        )[0]
        == 0
    )
    err = _error(
        run_cli,
        "fuse",
        "--runs",
        *paths[:2],
        "--levels",
        str(tmp / "levels.tsv"),
        "--weights",
        str(tmp / "w.json"),
        "--out",
        str(tmp / "f.trec"),
    )
    assert "3 weights per level, but 2 run(s)" in err


def test_levels_file_missing_turns(run_cli, files):
    tmp, paths, runs, qrels, levels = files
    partial = dict(sorted(levels.items())[2:])
    write_levels(partial, tmp / "partial.tsv")
    err = _error(
        run_cli,
        "tune",
        "--runs",
        *paths,
        "--levels",
        str(tmp / "partial.tsv"),
        "--qrels",
        str(tmp / "qrels.txt"),
        "--step",
        "0.5",
        "--out",
        str(tmp / "w.json"),
    )
    assert "have no level" in err and sorted(levels)[0] in err


def test_runs_over_different_turns_are_reported(run_cli, files):
    tmp, paths, runs, qrels, levels = files
    dropped = sorted(runs[2])[0]
    write_run({t: h for t, h in runs[2].items() if t != dropped}, tmp / "short.trec")
    args = [
        "tune",
        "--runs",
        paths[0],
        paths[1],
        str(tmp / "short.trec"),
        "--levels",
        str(tmp / "levels.tsv"),
        "--qrels",
        str(tmp / "qrels.txt"),
        "--step",
        "0.5",
        "--out",
        str(tmp / "w.json"),
    ]
    code, out, err = run_cli(*args)
    assert code == 0
    assert dropped in err and "contributes 0" in " ".join(err.split())
    err = " ".join(_error(run_cli, *args, "--strict").split())
    assert dropped in err and "--strict refuses that" in err and "and (strict)" not in err


def test_levels_from_tsv_and_bad_lines(tmp_path):
    path = tmp_path / "levels.tsv"
    path.write_text("turn_id\tlevel\n9-1-3\tb\n9-1_4\tC\n")
    assert load_levels(path) == {"9-1_3": "b", "9-1_4": "c"}
    path.write_text("9-1_3\td\n")
    from apcir.errors import ApcirError

    with pytest.raises(ApcirError, match=":1: level 'd'"):
        load_levels(path)


def test_baseline_rrf(run_cli, files):
    tmp, paths, *_ = files
    code, out, err = run_cli("baseline", "rrf", "--runs", *paths, "--out", str(tmp / "rrf.trec"))
    assert code == 0, err
    assert (tmp / "rrf.trec").read_text().split("\n")[0].endswith("rrf")


def test_levels_from_reformulations_jsonl(tmp_path):
    from apcir.errors import ApcirError

    out = {
        "reasoning": "r",
        "level": "c",
        "rewrite": "q",
        "response": "a",
        "third_rewrite": "q2",
        "third_response": "a2",
    }
    lines = [
        {"turn_id": "9-1-3", "model": "m", "output": out},
        {"turn_id": "9-1_4", "model": "m", "status": "failed", "error": "timeout"},
    ]
    path = tmp_path / "reformulations.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines[:1]) + "\n")
    assert load_levels(path) == {"9-1_3": "c"}
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert load_levels(path) == {"9-1_3": "c"}  # a failed record has no level: the fusion's --missing-level gives one
    path.write_text(json.dumps(lines[1]) + "\n")
    with pytest.raises(ApcirError, match="9-1_4"):
        load_levels(path)


def test_tune_cv_alone_writes_only_the_out_of_fold_run(run_cli, files):
    tmp, paths, runs, qrels, levels = files
    code, out, err = run_cli("tune", "--runs", *paths, "--levels", str(tmp / "levels.tsv"), "--qrels",
                             str(tmp / "qrels.txt"), "--step", "0.1", "--cv", "2", "--cv-run", str(tmp / "oof.trec"),
                             "--json")
    assert code == 0, err
    payload = json.loads(out)
    assert payload["weights_file"] is None and payload["cv"]["label"] == "out-of-fold"
    assert (tmp / "oof.trec").exists() and not (tmp / "weights.json").exists()
    code, _, err = run_cli("tune", "--runs", *paths, "--levels", str(tmp / "levels.tsv"), "--qrels",
                           str(tmp / "qrels.txt"))
    assert code == 2 and "give --out" in err


def test_min_turns_makes_small_levels_fall_back(run_cli, files):
    tmp, paths, runs, qrels, levels = files
    code, out, err = run_cli("tune", "--runs", *paths, "--levels", str(tmp / "levels.tsv"), "--qrels",
                             str(tmp / "qrels.txt"), "--step", "0.1", "--min-turns", "100",
                             "--out", str(tmp / "weights.json"))
    assert code == 0, err
    saved = json.loads((tmp / "weights.json").read_text())
    assert saved["min_turns"] == 100
    for level in saved["levels"].values():
        assert level["fallback"] and level["weights"] == saved["all_turns"]["weights"]
    assert "fewer than min_turns = 100" in err


def test_baseline_names_are_the_system_registry_names(run_cli, files):
    tmp, paths, *_ = files
    code, _, err = run_cli("baseline", "list-third", "--runs", *paths, "--out", str(tmp / "third.trec"))
    assert code == 0, err
    code, _, err = run_cli("baseline", "list3", "--runs", *paths, "--out", str(tmp / "x.trec"))
    assert code == 2 and "unknown baseline 'list3'" in err and "list-rewrite" in err


def test_tune_chooses_by_the_rule_given_and_prints_the_evidence(run_cli, files):
    tmp, paths, runs, qrels, levels = files
    from apcir.fusion.selection import SelectionRule
    from apcir.fusion.tuning import tune_weights

    code, out, err = run_cli("tune", "--runs", *paths, "--levels", str(tmp / "levels.tsv"), "--qrels",
                             str(tmp / "qrels.txt"), "--step", "0.1", "--out", str(tmp / "weights.json"),
                             "--shrinkage", "cv", "--select", "plateau", "--bootstrap", "200", "--seed", "4")
    assert code == 0, err
    assert "inner cross-validation" in out and "beats pooled" in out and "200 bootstrap resamples" in out
    saved = json.loads((tmp / "weights.json").read_text())
    expected = tune_weights(runs, levels, qrels, step="0.1",
                            rule=SelectionRule(shrinkage="cv", select="plateau", bootstrap=200, seed=4),
                            with_evidence=True)
    assert saved["selection"]["shrinkage"] == expected.selection.shrinkage
    assert {lv: saved["levels"][lv]["weights"] for lv in "abc"} == {lv: expected.levels[lv].weights for lv in "abc"}
    assert saved["evidence"]["levels"]["a"]["intervals"] == expected.evidence.levels["a"].intervals
    code, out, err = run_cli("tune", "--runs", *paths, "--levels", str(tmp / "levels.tsv"), "--qrels",
                             str(tmp / "qrels.txt"), "--step", "0.1", "--cv", "2", "--shrinkage", "much")
    assert code != 0 and "--shrinkage: expected a number or 'cv', got 'much'" in err
    assert "Traceback" not in err


def test_levels_can_be_the_annotators_of_bundled_topics():
    from apcir import datasets

    oracle = datasets.levels("annotators:ikat23-test")
    turns = datasets.topics("ikat23-test")
    assert set(oracle) == {t.turn_id for t in turns} and set(oracle.values()) == {"a", "c"}
    assert all(oracle[t.turn_id] == ("c" if t.ptkb_provenance else "a") for t in turns)


@pytest.mark.parametrize(("name", "rule"), [("apcir-shrunk", {"shrinkage": "cv"}), ("apcir-plateau", {"select": "plateau"})])
def test_baseline_builds_the_shrunk_and_plateau_systems(run_cli, files, name, rule):
    from apcir.contract.runs import load_run
    from apcir.fusion.linear import fuse_linear
    from apcir.fusion.selection import SelectionRule
    from apcir.fusion.tuning import tune_weights

    tmp, paths, runs, qrels, levels = files
    out = tmp / f"{name}.trec"
    code, _, err = run_cli("baseline", name, "--runs", *paths, "--levels", str(tmp / "levels.tsv"), "--qrels",
                           str(tmp / "qrels.txt"), "--step", "0.1", "--out", str(out))
    assert code == 0, err
    weights = tune_weights(runs, levels, qrels, step="0.1", rule=SelectionRule(**rule))
    assert load_run(out) == load_run_of(fuse_linear(runs, levels, weights), tmp)


def load_run_of(run, tmp):
    from apcir.contract.runs import load_run

    write_run(run, tmp / "expected.trec", tag="x")
    return load_run(tmp / "expected.trec")
