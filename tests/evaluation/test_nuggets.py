"""Gold nuggets: the three file formats and their errors, recall by hand on a crafted 3-run, 4-turn case,
the leaderboard's test and Kendall's τ, agreement with human labels, and the bundled iKAT 2025 judgments."""

from __future__ import annotations

import hashlib
import json

import pytest

from apcir.errors import ApcirError
from apcir.evaluation.nuggets.agreement import agreement, best_tau, cohen_kappa, load_labels
from apcir.evaluation.nuggets.gold import load_nuggets, load_response_runs
from apcir.evaluation.nuggets.matchers import content_words
from apcir.evaluation.nuggets.scores import score_runs
from apcir.evaluation.nuggets.settings import MatcherSettings

NUGGETS = [
    ("1-1_1", "1", "apples are red", 1), ("1-1_1", "2", "bananas are yellow", 1),
    ("1-1_2", "1", "the train leaves at noon", 1),
    ("1-1_3", "1", "cats sleep a lot", 1), ("1-1_3", "2", "dogs bark loudly", 1), ("1-1_3", "3", "birds sing", 1),
    ("1-1_4", "1", "water boils at 100 degrees", 2), ("1-1_4", "2", "ice melts", 1),
]
RESPONSES = {  # the 2024 participants' form {turn: {run: text}}
    "1-1_1": {"A": "Apples are red.", "B": "Bananas are yellow and apples are red.", "C": "Nothing relevant here."},
    "1-1_2": {"A": "The train leaves at noon.", "C": "Nothing relevant here."},
    "1-1_3": {"A": "Cats sleep and dogs bark.", "B": "Birds sing.", "C": "Nothing relevant here."},
    "1-1_4": {"A": "Water boils at 100 degrees.", "B": "Ice melts.", "C": "Nothing relevant here."},
}


@pytest.fixture
def crafted(tmp_path):
    nuggets = tmp_path / "nuggets.jsonl"
    nuggets.write_text("".join(json.dumps({"turn_id": t, "nugget_id": i, "text": x, "weight": w}) + "\n"
                               for t, i, x, w in NUGGETS))
    responses = tmp_path / "responses.json"
    responses.write_text(json.dumps(RESPONSES))
    return nuggets, responses


def test_recall_of_three_runs_by_hand(crafted):
    nuggets, responses = crafted
    report = score_runs(load_nuggets(nuggets), load_response_runs([responses]), "lexical",
                        MatcherSettings.model_validate({"tau": 0.5}), baseline="C")
    a, b, c = (report.runs[r] for r in "ABC")
    # A: 1/2, 1, 2/3 (cats: cat+sleep of cat/sleep/lot; dogs: dog+bark of dog/bark/loudly), 1/2 (weighted 2/3)
    assert [a.per_turn[t].recall for t in ("1-1_1", "1-1_2", "1-1_3", "1-1_4")] == pytest.approx([0.5, 1, 2 / 3, 0.5])
    assert a.recall == pytest.approx((0.5 + 1 + 2 / 3 + 0.5) / 4)
    assert a.weighted_recall == pytest.approx((0.5 + 1 + 2 / 3 + 2 / 3) / 4)
    assert a.per_turn["1-1_3"].covered == ["1", "2"]
    # B: 1, 0 (no response: missing), 1/3, 1/2 (weighted 1/3)
    assert b.recall == pytest.approx((1 + 0 + 1 / 3 + 0.5) / 4) and b.missing == ["1-1_2"]
    assert b.weighted_recall == pytest.approx((1 + 0 + 1 / 3 + 1 / 3) / 4)
    assert c.recall == 0.0 and report.ranking() == ["A", "B", "C"]
    assert {t.system for t in report.tests} == {"A", "B"} and all(t.baseline == "C" for t in report.tests)
    assert any("no response" in note for note in report.notes)


def test_the_leaderboard_command_and_kendall_between_two_matchers(crafted, run_cli, tmp_path):
    nuggets, responses = crafted
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps([{"number": "1-1", "title": "t", "ptkb": {"1": "I like fruit."}, "turns": [
        {"turn_id": i, "utterance": f"question {i}", "resolved_utterance": "", "response": "", "ptkb_provenance": [],
         "response_provenance": []} for i in range(1, 5)]}]))
    code, out, err = run_cli("evaluate-responses", str(responses), "--topics", str(topics), "--nuggets",
                             str(nuggets), "--matcher", "lexical", "--tau", "0.5", "--baseline", "C",
                             "--compare-matcher", "lexical", "--json")
    assert code == 0, err
    payload = json.loads(out)
    assert payload["runs"]["A"]["recall"] == pytest.approx((0.5 + 1 + 2 / 3 + 0.5) / 4)
    assert payload["kendall_tau"] == pytest.approx(1.0)  # the same matcher orders the runs the same way
    code, out, err = run_cli("evaluate-responses", str(responses), "--topics", str(topics), "--nuggets",
                             str(nuggets), "--matcher", "lexical", "--tau", "0.5")
    assert code == 0, err
    assert out.index(" A ") < out.index(" B ") < out.index(" C ")


def test_the_leaderboard_names_responses_outside_the_topics_once_and_scores_without_them(crafted, run_cli,
                                                                                         tmp_path):
    nuggets, responses = crafted
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps([{"number": "1-1", "title": "t", "ptkb": {"1": "I like fruit."}, "turns": [
        {"turn_id": i, "utterance": f"question {i}", "resolved_utterance": "", "response": "", "ptkb_provenance": [],
         "response_provenance": []} for i in range(1, 5)]}]))
    args = ["--topics", str(topics), "--nuggets", str(nuggets), "--matcher", "lexical", "--tau", "0.5", "--json"]
    code, out, err = run_cli("evaluate-responses", str(responses), *args)
    assert code == 0 and "warning:" not in err, err
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps({**RESPONSES, "9-1_1": {"A": "Apples are red.", "C": "Birds sing."},
                                 "9-1_2": {"A": "Ice melts."}}))
    code, mixed_out, err = run_cli("evaluate-responses", str(mixed), *args)
    assert code == 0, err
    assert [line for line in err.splitlines() if line.startswith("warning:")] == [
        f"warning: 2 of 6 response(s) of run A; 1 of 5 response(s) of run C are for turns outside {topics} "
        "(e.g. 9-1_1, 9-1_2); they are left out of every mean"]
    assert json.loads(mixed_out)["runs"] == json.loads(out)["runs"]


def test_the_conversational_gold_and_2025_formats(tmp_path):
    gold = tmp_path / "gold_nuggets_human.json"
    gold.write_text(json.dumps({"8_5": {"[1]": {"text": "a fact", "relevance": 2}, "[5]": {"text": "another",
                                                                                         "relevance": "1"}}}))
    read = load_nuggets(gold)
    assert [(n.nugget_id, n.weight) for n in read.by_turn["8_5"]] == [("1", 2.0), ("5", 1.0)]
    ikat25 = tmp_path / "nuggets.json"
    ikat25.write_text(json.dumps({"2-1_9": [{"text": "x", "docid": "clueweb22-en0001-37-16016:10"},
                                            {"text": "y", "docid": "ptkb-2-1-3"}]}))
    read = load_nuggets(ikat25)
    assert [(n.nugget_id, n.source) for n in read.by_turn["2-1_9"]] == [
        ("1", "clueweb22-en0001-37-16016:10"), ("2", "ptkb-2-1-3")]


@pytest.mark.parametrize(("content", "suffix", "message"), [
    ({"1_1": {"[1]": {"text": " ", "relevance": 1}}}, ".json", "turn 1_1, nugget 1: empty text"),
    ({"1_1": {"[1]": {"text": "a", "relevance": "vital"}}}, ".json", "weight 'vital' is not a non-negative number"),
    ([{"turn_id": "1_1", "nugget_id": "1", "text": "a"}, {"turn_id": "1_1", "nugget_id": "1", "text": "b"}], ".jsonl",
     "turn 1_1: nugget id 1 appears twice"),
    ({"9_9": [{"text": "a", "docid": "d"}]}, ".json", "turn id(s) of the nuggets are not in the topics: 9_9"),
    (["not", "an", "object"], ".json", "expected a JSON object turn id -> nuggets"),
])
def test_bad_nugget_files_are_one_line(tmp_path, run_cli, content, suffix, message):
    path = tmp_path / f"bad{suffix}"
    path.write_text("".join(json.dumps(r) + "\n" for r in content) if suffix == ".jsonl" else json.dumps(content))
    with pytest.raises(ApcirError) as caught:
        load_nuggets(path, {"1_1"})
    assert message in str(caught.value)
    code, out, err = run_cli("evaluate-responses", str(path), "--topics", "ikat23-test", "--nuggets", str(path))
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_agreement_by_hand_with_a_fixed_tau(crafted, tmp_path):
    nuggets, responses = crafted
    labels = tmp_path / "labels.tsv"
    rows = [("1-1_1", "1", 1), ("1-1_1", "2", 0), ("1-1_2", "1", 1), ("1-1_3", "1", 1), ("1-1_3", "2", 0),
            ("1-1_3", "3", 0), ("1-1_4", "1", 1), ("1-1_4", "2", 0)]
    labels.write_text("turn_id\trun\tnugget_id\tlabel\n" + "".join(f"{t}\tA\t{n}\t{'yes' if v else 'no'}\n"
                                                                   for t, n, v in rows)
                      + "1-1_1\tZ\t1\t1\n1-1_2\tA\t[7]\t0\n")
    report = agreement(load_nuggets(nuggets), load_response_runs([responses]), load_labels(labels), "lexical",
                       MatcherSettings.model_validate({"tau": 0.5}), resamples=200)
    # lexical at 0.5 says covered for 1_1/1, 1_2/1, 1_3/1, 1_3/2, 1_4/1: tp 4, fp 1 (dogs bark), fn 0, tn 3
    assert report.used == 8 and report.unmapped == {"run not in the responses": 1, "nugget id not in the nuggets": 1}
    assert report.accuracy.value == pytest.approx(7 / 8) and report.precision.value == pytest.approx(4 / 5)
    assert report.recall.value == 1.0 and report.kappa.value == pytest.approx(0.75)
    assert report.kappa.low <= 0.75 <= report.kappa.high
    assert cohen_kappa(4, 1, 0, 3) == pytest.approx(0.75)


def test_tau_is_chosen_on_training_folds_only(crafted, tmp_path):
    assert best_tau(__import__("numpy").array([0.1, 0.4, 0.6, 0.9]),
                    __import__("numpy").array([False, False, True, True])) == pytest.approx(0.5)
    nuggets, responses = crafted
    labels = tmp_path / "labels.jsonl"
    rows = [("1-1_1", "1", 1), ("1-1_1", "2", 0), ("1-1_2", "1", 1), ("1-1_3", "1", 1), ("1-1_3", "2", 0),
            ("1-1_3", "3", 0), ("1-1_4", "1", 1), ("1-1_4", "2", 0)]
    labels.write_text("".join(json.dumps({"turn_id": t, "run": "A", "nugget_id": n, "label": v}) + "\n"
                              for t, n, v in rows))
    report = agreement(load_nuggets(nuggets), load_response_runs([responses]), load_labels(labels), "lexical",
                       folds=4, resamples=100)
    assert report.folds == 4 and len(report.taus) == 4  # one τ per fold, each from the other three turns


def test_bad_label_files_are_one_line(tmp_path):
    bad = tmp_path / "labels.tsv"
    bad.write_text("1-1_1\tA\t1\tmaybe\n")
    with pytest.raises(ApcirError, match="label 'maybe' is not 1/0"):
        load_labels(bad)
    bad.write_text("1-1_1\tA\t1\n")
    with pytest.raises(ApcirError, match="expected turn_id<TAB>run<TAB>nugget_id<TAB>label, found 3"):
        load_labels(bad)


def test_content_words_drop_stop_words_and_stem():
    assert content_words("The apples are red") == {"appl", "red"}
    assert content_words("the a an") == {"the", "a", "an"}


# ---- the bundled iKAT 2025 judgments ----------------------------------------------------------------------
def test_the_bundled_2025_qrels_are_the_organisers_file_and_score_as_trec_eval(tmp_path, run_cli):
    import pytrec_eval

    from apcir import datasets

    path = datasets.qrels_path("ikat25-test")
    # sha256 of irlabamsterdam/ikat2025 offline/qrel/qrels-nist.trec at d1d74ed: the file is unchanged
    assert hashlib.sha256(path.read_bytes()).hexdigest() == (
        "e8de4fd8fab20130e53646ff60add1bfd00e761a5b7eb68e0cb430e1214344ca")
    qrels = datasets.qrels("ikat25-test")
    assert len(qrels) == 45 and sum(len(v) for v in qrels.values()) == 5650
    run = {t: {p: float(len(p) % 7 + i % 5) for i, p in enumerate(sorted(grades))} for t, grades in qrels.items()}
    run_file = tmp_path / "run.trec"
    run_file.write_text("".join(f"{t} Q0 {p} {r} {s} x\n" for t, hits in run.items()
                                for r, (p, s) in enumerate(sorted(hits.items(), key=lambda x: -x[1]), start=1)))
    code, out, err = run_cli("evaluate", str(run_file), "--qrels", "ikat25-test", "-m", "ndcg_cut_3", "-m",
                             "recip_rank", "--json")
    assert code == 0, err
    ours = json.loads(out)["measures"]
    raw = {}
    for line in path.read_text().splitlines():
        turn, _, passage, grade = line.split()
        raw.setdefault(turn, {})[passage] = int(grade)
    scored = pytrec_eval.RelevanceEvaluator(raw, {"ndcg_cut_3", "recip_rank"}).evaluate(
        {t: dict(hits) for t, hits in run.items()})
    for name, key in (("nDCG@3", "ndcg_cut_3"), ("MRR", "recip_rank")):
        expected = sum(v[key] for v in scored.values()) / len(scored)
        assert ours[name] == pytest.approx(expected, abs=1e-12), name


def test_the_bundled_2025_ptkb_qrels_gold_responses_and_runs():
    from apcir import datasets

    turns = {t.turn_id: t for t in datasets.topics("ikat25-test")}
    ptkb = datasets.qrels("ikat25-test-ptkb")
    assert len(ptkb) == 45 and all(s in turns[t].ptkb for t, grades in ptkb.items() for s in grades)
    # NIST's ptkb-1-1-16 (0-based) is apcir's statement 17 of conversation 1-1
    assert turns["1-1_3"].ptkb["17"] == "I don't like Apple products." and "17" in ptkb["1-1_3"]
    references = datasets.reference_responses("ikat25-test")
    gold = json.loads(datasets.references_file("ikat25-test").read_text())
    assert all(references[t] == text for t, text in gold.items()) and len(gold) == 45
    assert references["1-1_1"] == turns["1-1_1"].response  # an unjudged turn keeps the topics' response
    runs = load_response_runs(["ikat25-runs"])
    assert sorted(runs) == ["UCSC-base-ensemble", "cfda-auto-1",
                            "organizers-baseline-gpt41mini-bm25-minilm-llama70b-gpt41mini"]
    assert all(len(r) == 45 for r in runs.values())
    assert load_nuggets("ikat25-test").count == 2241


def test_one_command_ranks_the_three_bundled_2025_runs(run_cli):
    code, out, err = run_cli("evaluate-responses", "ikat25-runs", "--topics", "ikat25-test", "--nuggets",
                             "ikat25-test", "--matcher", "lexical", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert set(report["runs"]) == {"UCSC-base-ensemble", "cfda-auto-1",
                                   "organizers-baseline-gpt41mini-bm25-minilm-llama70b-gpt41mini"}
    assert all(run["turns"] == 45 and 0 < run["recall"] < 1 for run in report["runs"].values())
