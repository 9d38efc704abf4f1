import json

import pytest

from apcir import datasets
from apcir.contract.reformulations import ReformulationOutput, ReformulationRecord
from apcir.export.common import SubmissionInputs
from apcir.export.stage import build_submission as build_format
from apcir.export.stage import detect_format, save_submission, validate_submission


def build_submission(run, turns, *, fmt, **kwargs):
    return build_format(SubmissionInputs(run=run, turns=turns, **kwargs), fmt)


def write_submission(data, path):
    save_submission(data, path)


@pytest.fixture(scope="module")
def case():
    turns = datasets.topics("ikat23-test")
    passages = {p.id: p.contents for p in datasets.iter_collection(datasets.collection_path("ikat23-provenance"))}
    ids = sorted(passages)
    run = {t.turn_id: {ids[(i * 7 + j) % len(ids)]: 10.0 - j for j in range(12)} for i, t in enumerate(turns)}
    records = {}
    for t in turns:
        level = "c" if t.ptkb_provenance else "a"
        records[t.turn_id] = ReformulationRecord(
            turn_id=t.turn_id,
            model="test",
            output=ReformulationOutput(
                reasoning="r", level=level, rewrite=f"rewrite {t.turn_id}", response=f"neutral {t.turn_id}",
                third_rewrite="third", third_response=f"personal {t.turn_id}", ptkb_used=list(t.ptkb_provenance) + ["99"],
            ),
        )
    return turns, passages, run, records


@pytest.mark.parametrize("fmt, suffix", [("ikat23", ".json"), ("ikat24", ".json"), ("ikat25", ".jsonl")])
def test_exported_submission_validates(tmp_path, case, fmt, suffix):
    turns, passages, run, records = case
    data = build_submission(run, turns, fmt=fmt, run_name="t", reformulations=records, passages=passages)
    path = tmp_path / f"sub{suffix}"
    write_submission(data, path)
    assert detect_format(path) == fmt
    assert validate_submission(path, turns) == []


def test_ikat24_fields(case):
    turns, passages, run, records = case
    data = build_submission(run, turns, fmt="ikat24", run_name="t", reformulations=records, passages=passages)
    by_id = {t["turn_id"]: t for t in data["turns"]}
    turn = next(t for t in turns if t.ptkb_provenance)
    response = by_id[turn.turn_id]["responses"][0]
    assert response["rank"] == 1
    assert response["ptkb_provenance"] == [int(i) for i in turn.ptkb_provenance], "unknown id 99 dropped"
    assert response["text"] == f"personal {turn.turn_id}", "level c answers with the personalised pseudo-response"
    prov = response["passage_provenance"]
    assert [p["used"] for p in prov[:6]] == [True] * 5 + [False]
    assert prov[0]["text"] == passages[prov[0]["id"]]
    assert all("text" not in p for p in prov[5:]), "only the used passages carry their text"
    neutral = next(t for t in turns if not t.ptkb_provenance)
    assert by_id[neutral.turn_id]["responses"][0]["text"] == f"neutral {neutral.turn_id}"


def test_passage_mode_uses_top_passage(case):
    turns, passages, run, records = case
    data = build_submission(run, turns[:1], fmt="ikat24", run_name="t", reformulations=records, passages=passages,
                            mode="passage")
    top = max(run[turns[0].turn_id].items(), key=lambda kv: kv[1])[0]
    assert data["turns"][0]["responses"][0]["text"] == passages[top]


def test_broken_submission_reports_every_problem(tmp_path, case):
    turns, passages, run, records = case
    data = build_submission(run, turns, fmt="ikat24", run_name="t", reformulations=records, passages=passages)
    removed = data["turns"].pop(3)["turn_id"]
    data["turns"][0]["responses"][0]["passage_provenance"][2]["id"] = "doc-42"
    second = dict(data["turns"][1]["responses"][0], rank=1)
    data["turns"][1]["responses"].append(second)  # rank 1 after rank 1: out of order
    data["turns"][2]["responses"][0]["ptkb_provenance"] = [77]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    problems = validate_submission(path, turns)
    conversation = removed.split("_")[0]
    assert f"conversation {conversation}: missing turn(s) {removed}" in problems
    assert any("provenance #3 id 'doc-42' is not of the form" in p for p in problems)
    assert any(f"turn {data['turns'][1]['turn_id']}, response 2: rank 1 does not increase" in p for p in problems)
    assert any("PTKB id '77' is not in the profile" in p for p in problems)
    assert len(problems) == 4


def test_2025_citations_must_be_references(tmp_path):
    turns = datasets.topics("ikat25-test")
    run = {turns[0].turn_id: {"clueweb22-en0000-00-00001:1": 2.0}}
    data = build_submission(run, turns[:1], fmt="ikat25", run_name="t", passages={"clueweb22-en0000-00-00001:1": "x"})
    assert data[0]["responses"][0]["text"] == "x"
    data[0]["responses"][0]["citations"]["clueweb22-en0000-00-00009:9"] = 1.0
    path = tmp_path / "sub.jsonl"
    write_submission(data, path)
    problems = validate_submission(path, turns[:1])
    assert problems == [
        f"line 1 (turn {turns[0].turn_id}), response 1: citation clueweb22-en0000-00-00009:9 is not among the references"
    ]
