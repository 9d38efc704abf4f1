"""apcir's numbers must be trec_eval's (pytrec_eval) to 1e-9, under both averaging conventions."""

import random

import pytest
import pytrec_eval

from apcir import datasets
from apcir.errors import ApcirError
from apcir.metrics import MEASURE_SETS, evaluate, parse_measures
from apcir.metrics.measures import parse_measure

# apcir name -> pytrec_eval measure spec and result key, written out independently of apcir's mapping.
TREC_EVAL = {
    "MRR": ("recip_rank", "recip_rank"),
    "nDCG@3": ("ndcg_cut.3", "ndcg_cut_3"),
    "nDCG@5": ("ndcg_cut.5", "ndcg_cut_5"),
    "nDCG@1000": ("ndcg_cut.1000", "ndcg_cut_1000"),
    "Recall@10": ("recall.10", "recall_10"),
    "Recall@100": ("recall.100", "recall_100"),
    "Recall@1000": ("recall.1000", "recall_1000"),
    "P@20": ("P.20", "P_20"),
    "MAP@1000": ("map_cut.1000", "map_cut_1000"),
}


def random_case(seed: int, ties: bool):
    rng = random.Random(seed)
    qrels, run = {}, {}
    for t in range(30):
        turn = f"{rng.randint(1, 9)}-{rng.randint(1, 3)}_{t}"
        pool = [f"clueweb22-en00{rng.randint(0, 9)}-{i}:{rng.randint(0, 5)}" for i in range(120)]
        if rng.random() < 0.85:  # judged turn
            qrels[turn] = {p: rng.choice([0, 0, 0, 1, 2, 3, 4]) for p in rng.sample(pool, 40)}
        if rng.random() < 0.8 or turn not in qrels:  # some judged turns missing from the run
            hits = rng.sample(pool, rng.randint(1, 110))
            run[turn] = {p: (float(rng.randint(0, 5)) if ties else rng.random() * 10) for p in hits}
    return run, qrels


def reference(run, qrels, names, threshold, complete):
    """trec_eval's means, computed straight from pytrec_eval with the averaging done here."""
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {TREC_EVAL[n][0] for n in names}, relevance_level=threshold)
    per_turn = evaluator.evaluate(run)
    turns = list(per_turn)
    if complete:
        turns += [t for t in qrels if t not in per_turn]
    return {
        n: sum(per_turn[t][TREC_EVAL[n][1]] if t in per_turn else 0.0 for t in turns) / len(turns) for n in names
    }


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("measure_set", ["paper", "ikat"])
@pytest.mark.parametrize("threshold", [1, 2])
@pytest.mark.parametrize("complete", [False, True])
def test_means_equal_trec_eval(seed, measure_set, threshold, complete):
    run, qrels = random_case(seed, ties=seed % 2 == 0)
    result = evaluate(run, qrels, measure_set, rel_threshold=threshold, complete=complete)
    expected = reference(run, qrels, MEASURE_SETS[measure_set], threshold, complete)
    assert list(result.measures) == MEASURE_SETS[measure_set]
    for name, value in expected.items():
        assert result.measures[name] == pytest.approx(value, abs=1e-9), name


def test_averaging_conventions_differ_as_documented():
    run, qrels = random_case(3, ties=False)
    default = evaluate(run, qrels, "paper")
    complete = evaluate(run, qrels, "paper", complete=True)
    missing = sorted(set(qrels) - set(run))
    assert missing, "the random case has judged turns missing from the run"
    assert default.missing_judged_turns == missing == complete.missing_judged_turns
    assert default.unjudged_run_turns == sorted(set(run) - set(qrels))
    assert default.evaluated_turns == len(set(run) & set(qrels))
    assert complete.evaluated_turns == len(qrels)
    for name in default.measures:
        # Every missing turn scores 0, so the complete mean is the default mean scaled down.
        scaled = default.measures[name] * default.evaluated_turns / complete.evaluated_turns
        assert complete.measures[name] == pytest.approx(scaled, abs=1e-12)
    assert all(complete.per_turn[t] == dict.fromkeys(default.measures, 0.0) for t in missing)


def test_hand_computed_values():
    qrels = {"1_1": {"a": 2, "b": 0, "c": 1}, "1_2": {"x": 0}}
    # trec_eval breaks the score tie between a and b by passage id descending: b is ranked first.
    run = {"1_1": {"a": 1.0, "b": 1.0, "c": 0.5}, "1_2": {"x": 3.0}, "9_9": {"a": 1.0}}
    result = evaluate(run, qrels, ["MRR", "P@20", "Recall@10"])
    assert result.per_turn["1_1"]["MRR"] == pytest.approx(0.5)
    assert result.per_turn["1_1"]["P@20"] == pytest.approx(2 / 20)
    assert result.per_turn["1_2"] == {"MRR": 0.0, "P@20": 0.0, "Recall@10": 0.0}
    assert result.measures["MRR"] == pytest.approx(0.25)
    assert result.unjudged_run_turns == ["9_9"]
    strict = evaluate(run, qrels, ["MRR"], rel_threshold=2)
    assert strict.per_turn["1_1"]["MRR"] == pytest.approx(0.5)
    assert evaluate(run, qrels, ["MRR"], rel_threshold=3).per_turn["1_1"]["MRR"] == 0.0


def test_measure_names():
    assert parse_measure("ndcg@3").trec_key == "ndcg_cut_3"
    assert parse_measure("R@100").name == "Recall@100"
    assert parse_measure("mrr").trec_key == "recip_rank"
    assert [m.name for m in parse_measures(["paper", "nDCG@3", "P@20"])] == MEASURE_SETS["paper"] + ["P@20"]
    assert parse_measure("MRR@10").name == "RR@10"  # RR with a cut-off: ir-measures computes it
    for bad in ["foo@3", "P", "nDCG@0", ""]:
        with pytest.raises(ApcirError):
            parse_measure(bad)


def test_bundled_qrels_with_a_perfect_run():
    qrels = datasets.qrels("ikat23-test")
    run = {turn: {p: float(g) for p, g in judged.items()} for turn, judged in qrels.items()}
    result = evaluate(run, qrels, ["Recall@1000"])
    assert result.evaluated_turns == 176
    assert result.measures["Recall@1000"] == pytest.approx(1.0)


IR_MEASURES_NAMES = ["nDCG@3", "RR@10", "P(rel=2)@10", "Judged@10", "R@100", "AP(rel=2)", "ndcg_cut_3", "MRR",
                     "Recall@10", "MAP@1000", "P@20", "nDCG", "RR(rel=2)", "Bpref", "Success@5"]


@pytest.mark.parametrize("threshold", [1, 2])
def test_every_measure_name_equals_ir_measures_own(threshold):
    """Each name, parsed by ir-measures, gives ir-measures' own value (trec_eval's where trec_eval computes it):
    per turn and on average, at the evaluation's relevance threshold and at a measure's own ``rel``."""
    import random

    import ir_measures

    qrels = datasets.qrels("ikat23-test")
    rng = random.Random(7)
    docs = sorted({p for judged in qrels.values() for p in judged})
    run = {turn: {p: rng.random() for p in rng.sample(docs, 60) + list(judged)[:3]}
           for turn, judged in list(qrels.items())[:40]}
    result = evaluate(run, qrels, IR_MEASURES_NAMES, rel_threshold=threshold)
    for name in IR_MEASURES_NAMES:
        measure = parse_measure(name)
        theirs = ir_measures.parse_measure(measure.ir_name)
        if "rel" in theirs.SUPPORTED_PARAMS and "rel" not in theirs.params:
            theirs = theirs(rel=threshold)
        per_turn = {m.query_id: m.value for m in ir_measures.iter_calc([theirs], qrels, run)}
        # ir-measures also scores judged turns the run lacks (as 0); trec_eval's default mean leaves them out
        assert set(result.per_turn) == set(run) and set(run) <= set(per_turn), name
        for turn, values in result.per_turn.items():
            assert values[measure.name] == pytest.approx(per_turn[turn], abs=1e-12), (name, turn)
    assert result.measures["Judged@10"] > 0  # not a vacuous comparison: every turn holds judged passages


def test_trec_eval_name_lists_and_the_weight_search_refuses_what_it_cannot_compute():
    from apcir.fusion.grid import GridSearch

    assert [m.name for m in parse_measures("ndcg_cut.3,5,P@10")] == ["nDCG@3", "nDCG@5", "P@10"]
    for name in ["Judged@10", "P(rel=2)@10"]:
        with pytest.raises(ApcirError, match="cannot maximise"):
            GridSearch([{}], {}, [], parse_measures(name))


def test_evaluate_command_takes_ir_measures_and_trec_eval_names(run_cli, tmp_path):
    """The issue's command: ir-measures' and trec_eval's names side by side, each value ir-measures' own."""
    import json

    import ir_measures

    from apcir.contract.runs import write_run

    qrels = datasets.qrels("ikat23-test-provenance")
    rng = random.Random(3)
    run = {turn: {p: rng.random() for p in judged} | {f"x{i}": rng.random() for i in range(8)}
           for turn, judged in qrels.items()}
    path = tmp_path / "some.run"
    write_run(run, path, tag="some")
    code, out, err = run_cli("evaluate", str(path), "--qrels", "ikat23-test-provenance", "-m", "nDCG@3",
                             "-m", "P(rel=2)@10", "-m", "Judged@10", "-m", "ndcg_cut_3", "--json")
    assert code == 0, err
    means = json.loads(out)["measures"]
    assert list(means) == ["nDCG@3", "P(rel=2)@10", "Judged@10"]  # ndcg_cut_3 is nDCG@3: said once
    theirs = ir_measures.calc_aggregate([ir_measures.parse_measure(n) for n in means], qrels, run)
    for name, value in means.items():
        assert value == pytest.approx(theirs[ir_measures.parse_measure(name)], abs=1e-12)
    assert 0 < means["Judged@10"] < 1
