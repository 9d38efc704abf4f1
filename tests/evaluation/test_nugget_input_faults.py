"""What a bad-input campaign found in the nugget commands (issue 49), each now refused in one line naming the
problem, or warned about: duplicate and contradicting label rows, an --alias no row has, κ on labels of one class,
the learned matcher's real limit on few turns, a learned model with NaN weights, a turn answered twice in a
responses file, and empty responses."""

from __future__ import annotations

import json

import pytest
from fake_openai import FakeOpenAI

FUSION = "RALI_gpt4o_fusion_rerank"
GOLD = {"1_6": {"[1]": {"text": "apples are red", "relevance": "2"}, "[2]": {"text": "bananas are yellow",
                                                                              "relevance": "1"}},
        "2_3": {"[1]": {"text": "the train leaves at noon", "relevance": "3"},
                "[2]": {"text": "water boils at 100 degrees", "relevance": "1"}}}
RESPONSES = {"1_6": {"uot-yahoo_run": "Apples are red.", FUSION: "Bananas are yellow."},
             "2_3": {"uot-yahoo_run": "The train leaves at noon.", FUSION: "Nothing here."}}
# the published layout; lexical at τ 0.5: iires-1 (uot-yahoo_run) and rali-3 (the fusion run)
LABELS = ["1_1_6_1_iires-1\t1", "1_1_6_2_iires-1\t0", "1_2_3_1_iires-1\t1", "1_2_3_2_iires-1\t1",
          "2_1_6_1_rali-3\t0", "2_1_6_2_rali-3\t1", "2_2_3_1_rali-3\t0", "2_2_3_2_rali-3\t0"]


@pytest.fixture
def files(tmp_path):
    gold, responses = tmp_path / "gold_nuggets_human.json", tmp_path / "automatic_responses.json"
    gold.write_text(json.dumps(GOLD))
    responses.write_text(json.dumps(RESPONSES))

    def agreement(run_cli, lines, *more):
        labels = tmp_path / "labels.txt"
        labels.write_text("".join(f"{line}\n" for line in lines))
        return run_cli("nuggets", "agreement", "--labels", str(labels), "--nuggets", str(gold), "--responses",
                       str(responses), "--matcher", "lexical", "--tau", "0.5", *more)

    return agreement


def one_line(err):
    return len(err.strip().splitlines()) == 1 and "Traceback" not in err


# ---- apcir nuggets agreement ---------------------------------------------------------------------------------
def test_a_repeated_label_row_is_counted_once_with_a_warning(files, run_cli):
    code, out, err = files(run_cli, LABELS, "--json")
    assert code == 0, err
    [alone] = json.loads(out)
    code, out, err = files(run_cli, [*LABELS, "9_1_6_1_iires-1\t1", LABELS[4]], "--json")  # two repeats
    assert code == 0, err
    [twice] = json.loads(out)
    assert twice["labels"] == alone["labels"] == 8 and twice["used"] == 8
    assert twice["kappa"] == alone["kappa"]
    assert "2 label row(s) repeat an earlier row" in err and "line 9 repeats line 1" in " ".join(err.split())


def test_one_key_labelled_both_ways_is_refused_naming_the_lines(files, run_cli):
    code, _, err = files(run_cli, [*LABELS, "7_2_3_2_rali-3\t1"])
    flat = " ".join(err.split())
    assert code == 2 and one_line(err), err
    assert "turn 2_3, alias rali-3, nugget 2: labelled 0 on line 8 and 1 on line 9" in flat


def test_an_alias_no_row_has_is_refused_naming_the_ones_there(files, run_cli):
    code, _, err = files(run_cli, LABELS, "--alias", "uva-9=ksu")
    flat = " ".join(err.split())
    assert code == 2 and one_line(err), err
    assert "--alias uva-9=...: no label row has the alias uva-9; the labels' aliases are iires-1, rali-3" in flat
    code, _, err = files(run_cli, LABELS, "--alias", f"rali-3={FUSION}")
    assert code == 0, err


def test_kappa_on_labels_of_one_class_is_undefined_not_zero(files, run_cli):
    none_covered = [line[:-1] + "0" for line in LABELS]
    code, out, err = files(run_cli, none_covered, "--json")
    assert code == 0, err
    [report] = json.loads(out)
    assert report["kappa"]["value"] is None and report["kappa"]["low"] is None
    assert "every one of the 8 labels used says not covered" in report["kappa"]["why"]
    assert report["recall"]["value"] is None and report["recall"]["why"] == "no label says covered"
    assert report["accuracy"]["value"] == pytest.approx(5 / 8)  # the matcher says covered for 3 of the 8
    code, out, err = files(run_cli, none_covered)
    assert code == 0, err
    flat = " ".join(out.split())
    assert "│ lexical │ undefined │" in flat  # κ; precision is defined: 0 of the 3 said covered are
    assert "note: lexical: κ undefined: every one of the 8 labels used says not covered, so κ is 0 whatever" in flat
    # with both classes, κ is a number
    code, out, err = files(run_cli, LABELS, "--json")
    assert code == 0 and json.loads(out)[0]["kappa"]["value"] is not None


def test_the_learned_matcher_on_two_turns_names_its_real_limit(files, run_cli):
    """Nested cross-validation holds a turn out and chooses λ and τ by an inner cross-validation on the rest,
    which needs 2 turns: 3 in all. The message said 2."""
    code, _, err = files(run_cli, LABELS, "--matcher", "learned", "--encoder", "tfidf")
    flat = " ".join(err.split())
    assert code == 2 and one_line(err), err
    assert "needs labels on at least 3 turns (these are on 2: 1_6, 2_3)" in flat and "--learned-model" in flat
    assert "at least 2 turns" not in flat
    # three turns but two folds: one outer fold trains on a single turn
    from apcir.evaluation.nuggets.learned import nested_problem

    assert "trains outer fold" in nested_problem(["1_1", "1_2", "1_3"], 2, 0)
    assert nested_problem(["1_1", "1_2", "1_3"], 3, 0) is None


# ---- apcir nuggets train -------------------------------------------------------------------------------------
def test_train_on_two_turns_leaves_nested_kappa_unmeasured_and_refuses_one_class(files, run_cli, tmp_path):
    files(run_cli, LABELS)  # writes labels.txt
    labels, gold = tmp_path / "labels.txt", tmp_path / "gold_nuggets_human.json"
    responses, model = tmp_path / "automatic_responses.json", tmp_path / "model.json"
    code, out, err = run_cli("nuggets", "train", "--labels", str(labels), "--nuggets", str(gold), "--responses",
                             str(responses), "--encoder", "tfidf", "-o", str(model))
    assert code == 0, err
    assert json.loads(model.read_text())["nested_kappa"] is None
    assert "nested cross-validation κ not measured (measuring the learned matcher by nested cross-validation " \
           "needs labels on at least 3 turns" in " ".join(out.split())
    labels.write_text("".join(f"{line[:-1]}0\n" for line in LABELS))
    code, _, err = run_cli("nuggets", "train", "--labels", str(labels), "--nuggets", str(gold), "--responses",
                           str(responses), "--encoder", "tfidf", "-o", str(tmp_path / "other.json"))
    assert code == 2 and one_line(err) and "needs labels of both kinds: all 8 labels used say not covered" in err


# ---- evaluate-responses --nuggets ----------------------------------------------------------------------------
NUGGETS = [("1-1_1", "1", "apples are red"), ("1-1_1", "2", "bananas are yellow"),
           ("1-1_2", "1", "the train leaves at noon"), ("1-1_3", "1", "cats sleep a lot")]


@pytest.fixture
def topics_and_nuggets(tmp_path):
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps([{"number": "1-1", "title": "t", "ptkb": {"1": "I like fruit."}, "turns": [
        {"turn_id": i, "utterance": f"question {i}", "resolved_utterance": "", "response": "",
         "ptkb_provenance": [], "response_provenance": []} for i in (1, 2, 3)]}]))
    nuggets = tmp_path / "nuggets.jsonl"
    nuggets.write_text("".join(json.dumps({"turn_id": t, "nugget_id": i, "text": x}) + "\n" for t, i, x in NUGGETS))
    return str(topics), str(nuggets)


def test_a_learned_model_with_nan_weights_is_refused_naming_the_file_and_field(topics_and_nuggets, run_cli,
                                                                               tmp_path):
    from apcir.evaluation.nuggets.features import FEATURES

    topics, nuggets = topics_and_nuggets
    responses = tmp_path / "run.json"
    responses.write_text(json.dumps([{"q_id": "1-1_1", "response": "Apples are red."}]))
    n = len(FEATURES)
    good = {"features": list(FEATURES), "encoder": "tfidf", "mean": [0.0] * n, "scale": [1.0] * n,
            "weights": [1.0] * n, "intercept": 0.0, "lam": 1.0, "tau": 0.5,
            "trained_on": {"labels_file": "l", "labels_sha256": "x", "labels": 2, "positives": 1, "turns": ["9_9"]}}
    model = tmp_path / "model.json"
    model.write_text(json.dumps(good))
    code, out, err = run_cli("evaluate-responses", str(responses), "--topics", topics, "--nuggets", nuggets,
                             "--matcher", "learned", "--learned-model", str(model), "--json")
    assert code == 0, err
    for field, value, shown in (("weights", [1.0, float("nan")] + [1.0] * (n - 2), "weights.1: Input should be a "
                                 "finite number (got nan)"), ("intercept", float("inf"), "intercept: Input should be "
                                 "a finite number (got inf)"), ("scale", [0.0] * n, "scale: scale 0.0 at position 0 "
                                 "is not positive")):
        model.write_text(json.dumps({**good, field: value}))  # Python's json writes NaN and Infinity
        code, _, err = run_cli("evaluate-responses", str(responses), "--topics", topics, "--nuggets", nuggets,
                               "--matcher", "learned", "--learned-model", str(model))
        flat = " ".join(err.split())
        assert code == 2 and one_line(err), err
        assert f"{model}: not a learned matcher model" in flat and shown in flat


@pytest.mark.parametrize("form", ["jsonl", "bergen", "by-turn"])
def test_a_turn_answered_twice_in_one_file_is_refused_naming_both(topics_and_nuggets, run_cli, tmp_path, form):
    """`1-1_2` and `1-1-2` are the same turn (apcir.ids); one of the two texts silently won."""
    from apcir.contract.responses import ResponseRecord

    topics, nuggets = topics_and_nuggets
    if form == "jsonl":
        path = tmp_path / "responses.jsonl"
        path.write_text("".join(ResponseRecord(turn_id=t, responder="r", text=x).model_dump_json() + "\n"
                                for t, x in (("1-1_1", "Apples."), ("1-1_2", "The train."), ("1-1-2", "Other."))))
        expected = "two responses for turn 1-1_2: line 2 ('1-1_2') and line 3 ('1-1-2') (both are turn 1-1_2)"
    elif form == "bergen":
        path = tmp_path / "run.json"
        path.write_text(json.dumps([{"q_id": "1-1_1", "response": "Apples."}, {"q_id": "1-1_2", "response": "Train."},
                                    {"q_id": "1-1-2", "response": "Other."}]))
        expected = "turn 1-1_2 is answered twice: record #2 ('1-1_2') and record #3 ('1-1-2')"
    else:
        path = tmp_path / "automatic_responses.json"
        path.write_text(json.dumps({"1-1_2": {"A": "The train."}, "1-1_1": {"A": "Apples."}, "1-1-2": {"A": "x"}}))
        expected = "turn 1-1_2 is answered twice: key #1 ('1-1_2') and key #3 ('1-1-2')"
    code, _, err = run_cli("evaluate-responses", str(path), "--topics", topics, "--nuggets", nuggets,
                           "--matcher", "lexical")
    flat = " ".join(err.split())
    assert code == 2 and one_line(err), err
    assert f"{path}: {expected}" in flat


def test_empty_responses_score_zero_as_missing_turns_with_a_warning_and_ask_no_one(topics_and_nuggets, run_cli,
                                                                                  tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("APCIR_CACHE_DIR", raising=False)
    topics, nuggets = topics_and_nuggets
    path = tmp_path / "run.json"
    path.write_text(json.dumps([{"q_id": "1-1_1", "response": "Apples are red."}, {"q_id": "1-1_2", "response": ""},
                                {"q_id": "1-1_3", "response": "  \n "}]))
    code, out, err = run_cli("evaluate-responses", str(path), "--topics", topics, "--nuggets", nuggets,
                             "--matcher", "lexical", "--json")
    assert code == 0, err
    run = json.loads(out)["runs"]["run"]
    assert run["empty"] == ["1-1_2", "1-1_3"] and run["missing"] == ["1-1_2", "1-1_3"] and run["turns"] == 3
    assert run["per_turn"]["1-1_2"]["recall"] == 0.0 and run["recall"] == pytest.approx(0.5 / 3)
    assert "run run: 2 empty response(s) (turns 1-1_2, 1-1_3): each scores 0, as a turn without a response does" \
        in " ".join(err.split())
    # the llm matcher is asked about the one response with text only (batched: one request per turn and response)
    with FakeOpenAI(content=lambda body: json.dumps({"covered": [1]})) as server:
        code, out, err = run_cli("evaluate-responses", str(path), "--topics", topics, "--nuggets", nuggets,
                                 "--matcher", "llm", "--matcher-model", "m", "--base-url", server.url,
                                 "--cache-dir", str(tmp_path / "cache"), "--retry-delay", "0.001", "--json")
        assert code == 0, err
        assert server.count == 1
