import pytest

from apcir.contract.runs import load_run, read_run_file, validate_run, write_run
from apcir.errors import ApcirError


def test_write_then_read_round_trip_with_deterministic_ties(tmp_path):
    run = {"9-1_3": {"b": 1.0, "a": 1.0, "c": 2.5}, "0_8": {"x": 0.1}}
    path = tmp_path / "run.txt"
    write_run(run, path, tag="t1")
    lines = path.read_text().splitlines()
    assert lines == [
        "0_8 Q0 x 1 0.1 t1",
        "9-1_3 Q0 c 1 2.5 t1",
        "9-1_3 Q0 b 2 1.0 t1",
        "9-1_3 Q0 a 3 1.0 t1",
    ]
    parsed = read_run_file(path)
    assert parsed.run == run and parsed.tag == "t1" and parsed.problems == []


@pytest.mark.parametrize("first, second", [(0.30000001, 0.3000000100001), (1.0, 1.0), (2.5e-7, 2.5000001e-7)])
def test_written_ranks_are_the_ranks_trec_eval_evaluates(tmp_path, first, second):
    import pytrec_eval

    from apcir.contract.runs import ranking

    scores = {"p-a": first, "p-b": second, "p-c": 0.0}
    path = tmp_path / "run.txt"
    write_run({"1_1": scores}, path)
    top = path.read_text().splitlines()[0].split()[2]
    assert top == ranking(scores)[0][0]
    # trec_eval's rank 1 is the one relevant passage exactly when P@1 is 1
    evaluator = pytrec_eval.RelevanceEvaluator({"1_1": {top: 1}}, {"P.1"})
    assert evaluator.evaluate({"1_1": scores})["1_1"]["P_1"] == 1.0
    assert read_run_file(path).problems == []


def test_depth_cuts_each_turn(tmp_path):
    path = tmp_path / "run.txt"
    write_run({"1_1": {f"p{i}": float(i) for i in range(10)}}, path, depth=3)
    assert [line.split()[2] for line in path.read_text().splitlines()] == ["p9", "p8", "p7"]


def test_scores_round_trip_exactly(tmp_path):
    run = {"1_1": {"a": 0.1 + 0.2, "b": 1 / 3, "c": 1e-300}}
    path = tmp_path / "run.txt"
    write_run(run, path)
    assert load_run(path) == run


def test_dashed_turn_ids_are_read_as_canonical(tmp_path):
    path = tmp_path / "run.txt"
    path.write_text("9-1-3 Q0 a 1 2.0 x\n")
    assert load_run(path) == {"9-1_3": {"a": 2.0}}


def test_validation_reports_every_problem(tmp_path):
    path = tmp_path / "run.txt"
    path.write_text(
        "1_1 Q0 a 1 3.0 t\n"
        "1_1 Q0 a 2 2.0 t\n"  # duplicate pair
        "1_2 Q0 a 1 1.0 t\n"
        "1_2 Q0 b 2 5.0 t\n"  # rank disagrees with score
        "7_1 Q0 a 1 1.0 t\n"  # unknown turn
    )
    problems = validate_run(read_run_file(path), known_turns={"1_1", "1_2"})
    assert len(problems) == 3
    assert "line 2: duplicate passage a for turn 1_1" in problems[0]
    assert "turn 1_2: ranks disagree with scores" in problems[1]
    assert "1 turn(s) not in the topics: 7_1" in problems[2]


@pytest.mark.parametrize(
    "line, expected",
    [("1_1 Q0 a 1 high t", "score 'high' is not a number"), ("1_1 Q0 a 1 2.0", "expected 6 fields"),
     ("1_1 Q0 a one 2.0 t", "rank 'one' is not an integer"), ("1_1 Q0 a 1 nan t", "not a finite number")],
)
def test_malformed_lines_name_file_and_line(tmp_path, line, expected):
    path = tmp_path / "run.txt"
    path.write_text("1_1 Q0 z 1 9.0 t\n" + line + "\n")
    with pytest.raises(ApcirError) as info:
        read_run_file(path)
    assert expected in str(info.value) and f"{path}:2" in str(info.value)


def test_missing_run_file(tmp_path):
    with pytest.raises(ApcirError, match="run file not found"):
        read_run_file(tmp_path / "nope.txt")
