"""Agreement with people on files crafted in the published layouts of the iKAT 2024 human study (CONE-RAG's
human-study-matching-labels.txt, gold_nuggets_human.json, automatic_responses.json), with κ computed by hand;
the learned matcher: nested cross-validation that a leaked turn cannot get past, train, save, use."""

from __future__ import annotations

import json

import numpy as np
import pytest

from apcir.errors import ApcirError
from apcir.evaluation.nuggets import cv
from apcir.evaluation.nuggets.agreement import agreement
from apcir.evaluation.nuggets.cv import best_tau, cohen_kappa, kappa_of
from apcir.evaluation.nuggets.gold import load_nuggets, load_response_runs
from apcir.evaluation.nuggets.labels import CONE_RAG_ALIASES, load_labels, parse_aliases
from apcir.evaluation.nuggets.learned import fit_logistic, load_model, nested_cv
from apcir.evaluation.nuggets.registry import DEFAULT_MATCHER, MATCHERS, TRAINED

FUSION, NONP = "RALI_gpt4o_fusion_rerank", "RALI_gpt4o_nonp_fusion_rerank"
GOLD = {"1_6": {"[1]": {"text": "apples are red", "relevance": "2"}, "[2]": {"text": "bananas are yellow",
                                                                              "relevance": "1"},
                "[3]": {"text": "cats sleep a lot", "relevance": "1"}},
        "2_3": {"[1]": {"text": "the train leaves at noon", "relevance": "3"},
                "[2]": {"text": "water boils at 100 degrees", "relevance": "1"}}}
RESPONSES = {"1_6": {"uot-yahoo_run": "Apples are red. Cats sleep a lot.", FUSION: "Bananas are yellow.",
                     NONP: "Apples are red and bananas are yellow."},
             "2_3": {"uot-yahoo_run": "The train leaves at noon.", FUSION: "Water boils at 100 degrees.",
                     NONP: "Nothing here."}}
# HIT_TOPIC_TURN_NUGGET_ALIAS<TAB>LABEL, as published; lexical at τ = 0.5 decides (uot-yahoo_run for iires-1):
LABELS = [
    ("1_1_6_1_iires-1", 1),  # apples, covered: TP
    ("1_1_6_2_iires-1", 0),  # bananas, not: TN
    ("1_1_6_3_iires-1", 0),  # cats, covered though people said no: FP
    ("2_2_3_1_iires-1", 1),  # train: TP
    ("2_2_3_2_iires-1", 1),  # water, not covered: FN
    # rali-3, first candidate (fusion) / second (nonp):
    ("3_1_6_1_rali-3", 1),  # apples: FN / TP
    ("3_1_6_2_rali-3", 1),  # bananas: TP / TP
    ("3_2_3_2_rali-3", 0),  # water: FP / TN
    ("3_2_3_1_rali-3", 0),  # train: TN / TN
    ("4_1_6_9_iires-1", 1),  # nugget 9 does not exist
    ("4_1_6_1_zzz-9", 1),  # an alias the table lacks
]
# fusion: tp 3, fp 2, fn 2, tn 2 -> κ = (45/81 - 41/81) / (1 - 41/81) = 0.1
# nonp:   tp 4, fp 1, fn 1, tn 3 -> κ = (63/81 - 41/81) / (1 - 41/81) = 0.55


@pytest.fixture
def published(tmp_path):
    labels = tmp_path / "human-study-matching-labels.txt"
    labels.write_text("".join(f"{key}\t{value}\n" for key, value in LABELS))
    gold = tmp_path / "gold_nuggets_human.json"
    gold.write_text(json.dumps(GOLD))
    responses = tmp_path / "automatic_responses.json"
    responses.write_text(json.dumps(RESPONSES))
    return labels, gold, responses


def test_hand_computed_kappa():
    assert cohen_kappa(3, 2, 2, 2) == pytest.approx(0.1)
    assert cohen_kappa(4, 1, 1, 3) == pytest.approx(0.55)


def test_the_published_layout_is_read_and_its_aliases_mapped(published):
    labels, _, _ = published
    human = load_labels(labels)
    assert human.layout == "cone-rag" and len(human.rows) == len(LABELS)
    assert human.rows[0].turn_id == "1_6" and human.rows[0].nugget_id == "1" and human.rows[0].source == "iires-1"
    assert human.ambiguous == {"rali-3": (FUSION, NONP)}  # uva-3 is ambiguous too, but not in this file
    resolved, unmapped = human.resolved()
    assert ("1_6", "uot-yahoo_run", "1", 1) in resolved and ("1_6", FUSION, "1", 1) in resolved
    assert unmapped == {"alias zzz-9 not in the alias table (give --alias zzz-9=RUN)": 1}
    assert load_labels(labels, "cone-rag").rows == human.rows
    with pytest.raises(ApcirError, match="found 2 field"):
        load_labels(labels, "apcir")


def test_agreement_on_the_published_layout_by_hand(published, run_cli):
    labels, gold, responses = published
    code, out, err = run_cli("nuggets", "agreement", "--labels", str(labels), "--nuggets", str(gold), "--responses",
                             str(responses), "--matcher", "lexical", "--tau", "0.5", "--json")
    assert code == 0, err
    [report] = json.loads(out)
    assert report["layout"] == "cone-rag" and report["used"] == 9 and report["labels"] == 11
    assert report["kappa"]["value"] == pytest.approx(0.1)
    assert report["accuracy"]["value"] == pytest.approx(5 / 9) and report["precision"]["value"] == pytest.approx(3 / 5)
    assert report["kappa"]["low"] <= 0.1 <= report["kappa"]["high"]
    assert report["mapping"] == {"iires-1": ["uot-yahoo_run"], "rali-3": [FUSION, NONP]}
    assert report["unmapped"] == {"alias zzz-9 not in the alias table (give --alias zzz-9=RUN)": 1,
                                  "nugget id not in the nuggets": 1}
    both = {(a["alias"], a["run"]): a["kappa"]["value"] for a in report["alternatives"]}
    assert both == {("rali-3", FUSION): pytest.approx(0.1), ("rali-3", NONP): pytest.approx(0.55)}
    # the table says the mapping, both candidates' figures and the unused rows
    code, out, err = run_cli("nuggets", "agreement", "--labels", str(labels), "--nuggets", str(gold), "--responses",
                             str(responses), "--matcher", "lexical", "--tau", "0.5")
    assert code == 0, err
    flat = " ".join(out.split())
    assert "0.100 [" in flat and f"rali-3 = {FUSION} or {NONP}" in flat and "iires-1 = uot-yahoo_run" in flat
    assert f"rali-3 read as {NONP}: κ 0.550" in flat
    assert "1 label(s) not used: alias zzz-9 not in the alias table" in flat
    assert "1 label(s) not used: nugget id not in the nuggets" in flat


def test_an_alias_override_resolves_the_ambiguity(published, run_cli):
    labels, gold, responses = published
    code, out, err = run_cli("nuggets", "agreement", "--labels", str(labels), "--nuggets", str(gold), "--responses",
                             str(responses), "--matcher", "lexical", "--tau", "0.5", "--alias", f"rali-3={NONP}",
                             "--alias", "zzz-9=uot-yahoo_run", "--json")
    assert code == 0, err
    [report] = json.loads(out)
    assert report["kappa"]["value"] == pytest.approx(
        cohen_kappa(5, 1, 1, 3))  # zzz-9's apples label now counts: a TP
    assert report["alternatives"] == [] and report["unmapped"] == {"nugget id not in the nuggets": 1}
    with pytest.raises(ApcirError, match="expected ALIAS=RUN"):
        parse_aliases(["rali-3"])
    assert parse_aliases(["a=x", "a=y"]) == {"a": ("x", "y")}


def test_cross_validated_tau_and_the_spread_over_splits(published):
    labels, gold, responses = published
    report = agreement(load_nuggets(gold), load_response_runs([responses]), load_labels(labels), "lexical",
                       folds=2, splits=3, resamples=50)
    assert report.folds == 2 and len(report.taus) == 2 and report.spread is not None
    assert report.spread.splits == 3 and report.spread.low <= report.spread.median <= report.spread.high


def test_vectorised_best_tau_matches_a_plain_search():
    rng = np.random.default_rng(3)
    scores, truth = rng.random(200).round(2), rng.random(200) < 0.3
    tau = best_tau(scores, truth)
    values = np.unique(scores)
    candidates = np.concatenate([[values[0] - 1e-9], (values[:-1] + values[1:]) / 2, [values[-1] + 1e-9]])
    kappas = [kappa_of(scores >= c, truth) for c in candidates]
    assert kappa_of(scores >= tau, truth) == pytest.approx(max(kappas))
    assert best_tau(np.array([0.1, 0.4, 0.6, 0.9]), np.array([False, False, True, True])) == pytest.approx(0.5)


# ---- the learned matcher -------------------------------------------------------------------------------------
def _synthetic(turns=6, per_turn=30, seed=0):
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(turns * per_turn, 3))
    truth = features[:, 0] + 0.2 * rng.normal(size=len(features)) > 0.8
    return features, truth, [f"{t}_1" for t in range(turns) for _ in range(per_turn)]


def test_nested_cross_validation_learns_and_keeps_turns_apart():
    features, truth, turns = _synthetic()
    result = nested_cv(features, truth, turns, folds=3, seed=0)
    assert kappa_of(result.decisions, truth) > 0.7 and len(result.taus) == 3
    assert fit_logistic(features, truth, 1.0).weights[0] > 0


def test_a_turn_leaked_between_training_and_evaluation_is_caught(monkeypatch):
    features, truth, turns = _synthetic()
    honest = cv.row_folds

    def leaky(row_turns, k, seed):
        folds = honest(row_turns, k, seed)
        first = row_turns[0]
        rows = [i for i, t in enumerate(row_turns) if t == first]
        folds[rows[0]] = (folds[rows[0]] + 1) % k  # one row of the turn in another fold: the turn is on both sides
        return folds

    monkeypatch.setattr(cv, "row_folds", leaky)
    with pytest.raises(ApcirError, match="both trained on and evaluated"):
        nested_cv(features, truth, turns, folds=3, seed=0)


@pytest.mark.slow
def test_train_save_and_use_the_learned_matcher(tmp_path, run_cli):
    nuggets = tmp_path / "nuggets.jsonl"
    responses = tmp_path / "responses.json"
    labels = tmp_path / "labels.tsv"
    texts = ["apples are red", "bananas are yellow", "the train leaves at noon", "cats sleep a lot",
             "dogs bark loudly", "water boils at 100 degrees"]
    turns = [f"1-{c}_{t}" for c in (1, 2) for t in (1, 2, 3)]
    nuggets.write_text("".join(json.dumps({"turn_id": t, "nugget_id": str(i), "text": x}) + "\n"
                               for t in turns for i, x in enumerate(texts, start=1)))
    said = {"A": {0, 2, 4}, "B": {1, 3}, "C": {5, 0}}
    responses.write_text(json.dumps({t: {run: " ".join(texts[i].capitalize() + "." for i in sorted(covered))
                                         for run, covered in said.items()} for t in turns}))
    labels.write_text("".join(f"{t}\t{run}\t{i + 1}\t{int(i in covered)}\n" for t in turns
                              for run, covered in said.items() for i in range(len(texts))))
    model_file = tmp_path / "model.json"
    code, out, err = run_cli("nuggets", "train", "--labels", str(labels), "--nuggets", str(nuggets), "--responses",
                             str(responses), "--encoder", "tfidf", "--folds", "3", "-o", str(model_file))
    assert code == 0, err
    model = load_model(model_file)
    assert model.trained_on.turns == sorted(turns) and model.trained_on.labels == 108 and model.encoder == "tfidf"
    assert model.nested_kappa is not None and model.nested_kappa > 0.8  # word overlap explains these labels
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps([{"number": f"1-{c}", "title": "t", "ptkb": {"1": "I like fruit."}, "turns": [
        {"turn_id": i, "utterance": f"question {i}", "resolved_utterance": "", "response": "",
         "ptkb_provenance": [], "response_provenance": []} for i in (1, 2, 3)]} for c in (1, 2)]))
    code, out, err = run_cli("evaluate-responses", str(responses), "--topics", str(topics), "--nuggets", str(nuggets),
                             "--matcher", "learned", "--learned-model", str(model_file), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["matcher"]["tau"] == pytest.approx(model.tau)
    assert report["runs"]["A"]["recall"] == pytest.approx(0.5) and report["runs"]["B"]["recall"] == pytest.approx(1 / 3)
    # measuring the model on the turns it was trained on is refused; nested CV without a model is not
    code, out, err = run_cli("nuggets", "agreement", "--labels", str(labels), "--nuggets", str(nuggets),
                             "--responses", str(responses), "--matcher", "learned", "--learned-model",
                             str(model_file))
    assert code == 2 and "trained on 6 of these labels' turns" in err and "Traceback" not in err
    code, out, err = run_cli("nuggets", "agreement", "--labels", str(labels), "--nuggets", str(nuggets),
                             "--responses", str(responses), "--matcher", "learned", "--encoder", "tfidf",
                             "--folds", "3", "--splits", "2", "--json")
    assert code == 0, err
    [report] = json.loads(out)
    assert report["kappa"]["value"] > 0.8 and len(report["lambdas"]) == 3 and report["spread"]["splits"] == 2
    # without a model, the learned matcher is one line
    code, out, err = run_cli("evaluate-responses", str(responses), "--topics", str(topics), "--nuggets", str(nuggets),
                             "--matcher", "learned")
    assert code == 2 and "apcir nuggets train" in err and len(err.strip().splitlines()) == 1


def test_a_bad_model_file_is_one_line(tmp_path):
    bad = tmp_path / "model.json"
    bad.write_text(json.dumps({"format": "apcir-learned-matcher/1", "features": ["x"]}))
    with pytest.raises(ApcirError, match="not a learned matcher model"):
        load_model(bad)


def test_the_default_matcher_needs_no_training_and_is_the_default_everywhere():
    from apcir.evaluation.settings import EvaluationSettings

    assert DEFAULT_MATCHER in MATCHERS and DEFAULT_MATCHER not in TRAINED
    assert EvaluationSettings.model_fields["nugget_matcher"].default == DEFAULT_MATCHER
    assert set(CONE_RAG_ALIASES) == {"iires-1", "infos-2", "ksu-1", "nii-1", "rali-3", "uva-3"}


def test_train_refuses_to_write_over_its_labels(published, run_cli):
    labels, gold, responses = published
    before = labels.read_text()
    code, out, err = run_cli("nuggets", "train", "--labels", str(labels), "--nuggets", str(gold), "--responses",
                             str(responses), "-o", str(labels))
    assert code == 2 and len(err.strip().splitlines()) == 1 and labels.read_text() == before
