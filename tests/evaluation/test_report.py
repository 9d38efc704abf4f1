import random

from apcir.evaluation.report import write_report
from apcir.evaluation.results import RunMetrics, SystemResult, TurnInfo, read_metrics, write_metrics
from apcir.evaluation.tables import agreement_rows, family_tests, level_rows, markdown, metric_rows


def make_run(name="r1"):
    rng = random.Random(0)
    turns = {f"1_{i}": TurnInfo(level="abc"[i % 3], human_personalised=i % 3 != 0 or i == 3) for i in range(40)}
    def system(label, groups, shift):
        per_turn = {t: {"MRR": min(1.0, rng.random() * 0.3 + shift), "nDCG@3": rng.random() * 0.3 + shift} for t in turns}
        means = {m: sum(v[m] for v in per_turn.values()) / len(per_turn) for m in ("MRR", "nDCG@3")}
        return SystemResult(label=label, groups=groups, means=means, per_turn=per_turn)
    return RunMetrics(
        name=name, topics="ikat23-test", qrels="q", measures=["MRR", "nDCG@3"], rel_threshold=1, complete=False,
        protocol="5-fold CV", turns=turns,
        systems={
            "apcir": system("APCIR", ["overall", "weights", "fusion"], 0.6),
            "no-personalisation": system("No personalisation", ["weights"], 0.1),
            "rrf": system("RRF", ["fusion"], 0.1),
        },
    )


def test_tables_carry_markers_and_levels(tmp_path):
    run = make_run()
    markers = family_tests([run], "no-personalisation", run.significance)
    table = markdown(*metric_rows([run], "weights", "no-personalisation", markers))
    rows = table.splitlines()
    assert rows[0] == "| system | MRR | nDCG@3 | n |"
    assert rows[2].endswith("| 40 |"), "every passage-measure table says how many judged turns each mean is over"
    apcir_row = next(r for r in rows if r.startswith("| APCIR"))
    assert apcir_row.count("†") == 2, "a large paired improvement is marked on both measures"
    assert "(baseline)" in next(r for r in rows if r.startswith("| No personalisation"))
    agreement = markdown(*agreement_rows(run)).splitlines()
    # level a: turns 0,3,6,...,39 (14 turns), only turn 3 personalised
    assert agreement[2] == "| a (none) | 14 | 1 | 13 | 92.9% |"
    levels = markdown(*level_rows([run]))
    assert "(n=14)" in levels and "(n=13)" in levels


def test_write_report_round_trip(tmp_path):
    run = make_run()
    write_metrics(run, tmp_path)
    assert read_metrics(tmp_path) == run
    report = write_report([read_metrics(tmp_path)], tmp_path / "report")
    text = report.read_text()
    for title in ("Table 1", "Table 2", "Table 4", "Table 5", "Table 6"):
        assert title in text
    assert "## Table 3: fusion strategies (the paper's Table 4)" in text
    png = tmp_path / "report" / "r1-levels.png"
    assert png.exists() and png.read_bytes()[:4] == b"\x89PNG"


def test_two_runs_of_the_same_name_stay_apart(tmp_path, run_cli):
    for folder in ("one", "two"):
        write_metrics(make_run("same"), tmp_path / folder)
    code, _, err = run_cli("report", str(tmp_path / "one"), str(tmp_path / "two"), "--out", str(tmp_path / "r"))
    assert code == 0, err
    text = (tmp_path / "r" / "report.md").read_text()
    assert f"{tmp_path / 'one'}: APCIR" in text and f"{tmp_path / 'two'}: APCIR" in text
    assert len(list((tmp_path / "r").glob("*-levels.png"))) == 2


def test_the_report_files_are_as_it_describes_them(tmp_path):
    """Issue 37: every table it says is in tables/ is there, CSVs on the scale it states (raw 0-1), tables numbered
    without a gap, and each system label explained."""
    import csv
    import re

    from apcir.evaluation.responses import ResponseMetrics
    from apcir.evaluation.results import PtkbMetrics, SystemResult

    run = make_run()
    run.systems["list-third"] = SystemResult(label="third alone", groups=["weights"],
                                             description="q^u+r^u (levels b/c) or q''+r'' (level a) alone",
                                             means=run.systems["rrf"].means, per_turn=run.systems["rrf"].per_turn)
    run.responses = ResponseMetrics(responder="extractive", topics="ikat23-test", qrels=None, rel_threshold=1,
                                    measures={"ROUGE-L": 0.25}, turns={"ROUGE-L": 40},
                                    per_level={"a": {"ROUGE-L": 0.2}}, level_turns={"a": {"ROUGE-L": 14}})
    run.ptkb = PtkbMetrics(qrels="ikat23-test-ptkb", measures=["nDCG@3"], systems={"apcir": SystemResult(
        label="APCIR statement ranking", groups=["ptkb"], means={"nDCG@3": 0.5}, per_turn={"1_1": {"nDCG@3": 0.5}})})
    text = write_report([run], tmp_path / "report").read_text()
    numbers = [int(n) for n in re.findall(r"^## Table (\d+):", text, re.M)]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) == 5, numbers
    tables = tmp_path / "report" / "tables"
    for name in ("table-overall", "table-weights", "table-fusion", "table-levels", "table-per-level",
                 "significance", "responses", "ptkb"):
        assert (tables / f"{name}.csv").is_file() and (tables / f"{name}.tex").is_file(), name
    assert "CSV (the raw 0-1 values" in text and "x100, as shown) and" not in text
    for name in ("table-overall", "table-per-level", "responses", "ptkb"):  # measure columns: fractions, not x100
        with (tables / f"{name}.csv").open() as handle:
            rows = list(csv.DictReader(handle))
        values = [float(v) for row in rows for k, v in row.items() if v and k not in ("system", "turns", "ranking")
                  and k != "n" and not k.startswith(("n ", "mark"))]
        assert values and all(0 <= v <= 1 for v in values), (name, values)
    assert "- **third alone**: q^u+r^u (levels b/c) or q''+r'' (level a) alone" in text


def test_the_figures_confidence_interval_is_the_t_interval_of_the_mean(tmp_path):
    from apcir.evaluation import plots

    assert plots.mean_ci([]) == (0.0, 0.0) and plots.mean_ci([0.4]) == (0.4, 0.0)
    mean, half = plots.mean_ci([0.2, 0.4, 0.6])  # sd 0.2, n 3: t(0.975, 2) = 4.3027 -> 4.3027 * 0.2 / sqrt(3)
    assert abs(mean - 0.4) < 1e-12 and abs(half - 4.302653 * 0.2 / 3 ** 0.5) < 1e-5
    written = plots.levels_with_ci(make_run(), tmp_path, ["apcir", "rrf"], "MRR")
    assert written and all(p.exists() and p.stat().st_size > 0 for p in written)
