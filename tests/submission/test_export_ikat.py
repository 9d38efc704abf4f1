import json

import pytest

from apcir import datasets
from apcir.contract.reformulations import ReformulationOutput, ReformulationRecord
from apcir.contract.responses import ResponseRecord, cited_numbers
from apcir.errors import ApcirError
from apcir.responses.text import count_words, cut_to_words
from apcir.submission.common import SubmissionInputs
from apcir.submission.stage import build_submission as build_format
from apcir.submission.stage import detect_format, save_submission, validate_submission, write_submission

TOPICS = {"ikat23": "ikat23-test", "ikat24": "ikat24-test", "ikat25": "ikat25-test"}


def build_submission(run, turns, *, fmt, **kwargs):
    return build_format(SubmissionInputs(run=run, turns=turns, **kwargs), fmt)


@pytest.fixture(scope="module")
def passages():
    return {p.id: p.contents for p in datasets.iter_collection(datasets.collection_path("ikat23-provenance"))}


def case_for(fmt, passages):
    turns = datasets.topics(TOPICS[fmt])
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
                third_rewrite="third", third_response=f"personal {t.turn_id}",
                ptkb_used=list(t.ptkb_provenance) + ["99"]),
        )
    return turns, run, records


@pytest.mark.parametrize("fmt, suffix", [("ikat23", ".json"), ("ikat24", ".json"), ("ikat25", ".jsonl")])
def test_exported_submission_validates(tmp_path, passages, fmt, suffix):
    turns, run, records = case_for(fmt, passages)
    data = build_submission(run, turns, fmt=fmt, run_name="t", reformulations=records, passages=passages)
    path = tmp_path / f"sub{suffix}"
    save_submission(data, path)
    assert detect_format(path) == fmt
    assert validate_submission(path, turns, None, int("20" + fmt[-2:])) == []


def test_ikat24_fields_without_responses(passages):
    turns, run, records = case_for("ikat24", passages)
    data = build_submission(run, turns, fmt="ikat24", run_name="t", reformulations=records, passages=passages)
    assert data["eval_response"] is True
    by_id = {t["turn_id"]: t for t in data["turns"]}
    turn = next(t for t in turns if t.ptkb_provenance)
    response = by_id[turn.turn_id]["responses"][0]
    assert response["rank"] == 1
    assert sorted(response["ptkb_provenance"]) == sorted(int(i) for i in turn.ptkb_provenance), "unknown id 99 dropped"
    assert response["text"] == f"personal {turn.turn_id}", "no responses: level c falls back to the pseudo-response"
    prov = response["passage_provenance"]
    assert [p["used"] for p in prov[:6]] == [True] * 5 + [False], "nothing cited: the top 5, the organisers' default"
    assert prov[0]["text"] == passages[prov[0]["id"]]
    assert all("text" not in p for p in prov[5:]), "only the used passages carry their text"
    neutral = next(t for t in turns if not t.ptkb_provenance)
    entry = by_id[neutral.turn_id]["responses"][0]
    assert entry["text"] == f"neutral {neutral.turn_id}"
    assert len(entry["ptkb_provenance"]) == 1, "2024: the top-ranked statement when none was used (no warning)"


def test_passage_mode_uses_top_passage_cut_to_250_words(passages):
    turns, run, records = case_for("ikat23", passages)
    data = build_submission(run, turns[:1], fmt="ikat23", run_name="t", reformulations=records, passages=passages,
                            mode="passage")
    top = max(run[turns[0].turn_id].items(), key=lambda kv: kv[1])[0]
    text = data["turns"][0]["responses"][0]["text"]
    assert text == cut_to_words(passages[top], 250) and count_words(text) <= 250


def test_responses_are_exported_with_their_citations(passages, tmp_path):
    turns, run, records = case_for("ikat25", passages)
    turn = turns[0]
    ranked = [p for p, _ in sorted(run[turn.turn_id].items(), key=lambda kv: -kv[1])]
    given = [ranked[2], ranked[0], ranked[4], "clueweb22-en0000-00-00000:9"]  # another order, one not in the run
    response = ResponseRecord(turn_id=turn.turn_id, responder="x", text="Alpha [2]. Beta [1][4]. Gamma [3].",
                              passages=given, citations=given, ptkb_used=["2"])
    inputs = SubmissionInputs(run=run, turns=turns, run_name="t", reformulations=records, passages=passages,
                              responses={turn.turn_id: response}, year=2025)
    data = build_format(inputs, "ikat25")
    entry = data[0]["responses"][0]
    assert entry["text"] == "Alpha [1]. Beta [3]. Gamma [5].", "[n] renumbered to the reference's position"
    assert list(entry["citations"]) == [ranked[0], ranked[2], ranked[4]]
    assert entry["citations"][ranked[0]] == data[0]["references"][ranked[0]]
    assert entry["ptkb_provenance"] == [turn.ptkb["2"]], "2025: statement texts"
    path = tmp_path / "s.jsonl"
    write_submission(inputs, "ikat25", path)  # warns about the dropped citation and the turns without responses
    assert validate_submission(path, turns, "ikat25", 2025) == []


def test_a_long_response_is_cut_and_its_used_passages_follow(passages):
    turns, run, records = case_for("ikat23", passages)
    turn = turns[0]
    ranked = [p for p, _ in sorted(run[turn.turn_id].items(), key=lambda kv: -kv[1])]
    text = " ".join(["Short first sentence [1]."] + [" ".join(["word"] * 60) + " [2]."] * 5)
    response = ResponseRecord(turn_id=turn.turn_id, responder="x", text=text, passages=ranked[:5],
                              citations=ranked[:2])
    data = build_submission(run, turns[:1], fmt="ikat23", run_name="t", reformulations=records, passages=passages,
                            responses={turn.turn_id: response})
    out = data["turns"][0]["responses"][0]
    assert count_words(out["text"]) <= 250 and out["text"].endswith("[2].")
    assert [p["id"] for p in out["passage_provenance"] if p["used"]] == ranked[:2]
    assert sorted(cited_numbers(out["text"])) == [1, 2]


def test_a_format_of_another_year_is_refused(passages, tmp_path):
    turns, run, records = case_for("ikat23", passages)
    inputs = SubmissionInputs(run=run, turns=turns, run_name="t", reformulations=records, passages=passages,
                              year=2023)
    with pytest.raises(ApcirError, match="ikat24 is the iKAT 2024 format but the topics are iKAT 2023 topics"):
        write_submission(inputs, "ikat24", tmp_path / "s.json")
    assert not (tmp_path / "s.json").exists()


def test_broken_submission_reports_every_problem(tmp_path, passages):
    turns, run, records = case_for("ikat24", passages)
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
    assert f"conversation {conversation}: missing turn(s) {removed} [2024 validator: error]" in problems
    assert any("provenance #3 id 'doc-42' is not of the form" in p for p in problems)
    assert any(f"turn {data['turns'][1]['turn_id']}, response 2: rank 1 does not increase" in p for p in problems)
    assert any("statement 77 is not in the profile" in p for p in problems)
    assert len(problems) == 4


def test_2025_citations_must_be_references(tmp_path):
    turns = datasets.topics("ikat25-test")
    run = {turns[0].turn_id: {"clueweb22-en0000-00-00001:1": 2.0}}
    data = build_submission(run, turns[:1], fmt="ikat25", run_name="t", passages={"clueweb22-en0000-00-00001:1": "x"})
    assert data[0]["responses"][0]["text"] == "x"
    data[0]["responses"][0]["citations"]["clueweb22-en0000-00-00009:9"] = 1.0
    path = tmp_path / "sub.jsonl"
    save_submission(data, path)
    problems = validate_submission(path, turns[:1])
    assert problems == [
        f"line 1 (turn {turns[0].turn_id}), response 1: citation clueweb22-en0000-00-00009:9 is not among the "
        "references [2025 validator: error]"
    ]


def test_2025_scores_that_are_not_finite_are_flagged(tmp_path):
    turns = datasets.topics("ikat25-test")[:1]
    ids = ["clueweb22-en0000-00-00001:1", "clueweb22-en0000-00-00002:1", "clueweb22-en0000-00-00003:1"]
    run = {turns[0].turn_id: {p: 3.0 - i for i, p in enumerate(ids)}}
    response = ResponseRecord(turn_id=turns[0].turn_id, responder="x", text="A [1]. B [2].", passages=ids,
                              citations=ids[:2])
    data = build_submission(run, turns, fmt="ikat25", run_name="t", passages=dict.fromkeys(ids, "x"),
                            responses={turns[0].turn_id: response}, year=2025)
    data[0]["references"][ids[2]] = float("nan")
    data[0]["responses"][0]["citations"][ids[1]] = float("nan")
    path = tmp_path / "sub.jsonl"
    save_submission(data, path)
    assert "NaN" in path.read_text()
    problems = validate_submission(path, turns)
    at = f"line 1 (turn {turns[0].turn_id})"
    assert f"{at}: reference #3 score nan is not a finite number" in problems
    assert f"{at}, response 1: citation {ids[1]} score nan is not a finite number" in problems


def test_export_refuses_responses_for_no_turn_of_the_topics(tmp_path, passages, run_cli):
    from apcir.contract.runs import write_run

    turns = datasets.topics("ikat23-test")
    ids = sorted(passages)[:5]
    run = tmp_path / "r.run"
    write_run({t.turn_id: {p: 5.0 - i for i, p in enumerate(ids)} for t in turns[:3]}, run)

    def responses(turn_ids, name):
        path = tmp_path / name
        path.write_text("".join(ResponseRecord(turn_id=t, responder="x", text="A [1].", passages=ids,
                                               citations=ids[:1]).model_dump_json() + "\n" for t in turn_ids))
        return path

    other = responses(["99-9_1", "99-9_2"], "other.jsonl")
    out = tmp_path / "s.json"
    code, _, err = run_cli("export", str(run), "-t", "ikat23-test", "--responses", str(other), "--collection",
                           "ikat23-provenance", "-o", str(out))
    assert code == 2 and "Traceback" not in err and not out.exists()
    assert (f"none of the 2 response record(s) is for a turn of the topics ({len(turns)} turns, e.g. 99-9_1)"
            in " ".join(err.split()))
    some = responses([turns[0].turn_id, "99-9_1"], "some.jsonl")
    code, _, err = run_cli("export", str(run), "-t", "ikat23-test", "--responses", str(some), "--collection",
                           "ikat23-provenance", "-o", str(out))
    assert code == 0, err
    said = " ".join(err.split())
    assert "1 of the 2 response record(s) are for turns not in the topics and are not exported: 99-9_1" in said
    assert f"{len(turns) - 1} turn(s) have no ok response record" in said
