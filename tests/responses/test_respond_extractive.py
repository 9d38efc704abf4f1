"""The offline extractive responder (a baseline, not an LLM) and `apcir respond` / `apcir rank-ptkb` end to end."""

from __future__ import annotations

import json

import pytest

from apcir import datasets
from apcir.contract.reformulations import ReformulationOutput, ReformulationRecord
from apcir.contract.responses import cited_numbers, load_responses, strip_citations
from apcir.reformulation.offline import heuristic_record
from apcir.responses.extractive import extractive_record
from apcir.responses.job import build_jobs
from apcir.responses.ptkb import profile_order
from apcir.responses.settings import RespondSettings
from apcir.responses.text import count_words, cut_to_words

TURNS = datasets.topics("ikat23-test")
IDS = sorted(p.id for p in datasets.iter_collection(datasets.collection_path("ikat23-provenance")))


@pytest.fixture(scope="module")
def texts():
    return {p.id: p.contents for p in datasets.iter_collection(datasets.collection_path("ikat23-provenance"))}


def run_for(turns, per_turn=8):
    return {t.turn_id: {IDS[(i * 3 + j) % len(IDS)]: 10.0 - j for j in range(per_turn)} for i, t in enumerate(turns)}


def job(texts, turn=TURNS[2], **overrides):
    record = heuristic_record(turn)
    passages = {**texts, **overrides}
    (made,) = build_jobs([turn], {turn.turn_id: record}, run_for([turn]), passages, profile_order([turn]), 5)
    return made


def test_grounded_cited_deterministic_and_within_budget(texts):
    settings = RespondSettings(max_words=60)
    first = extractive_record(job(texts), settings)
    assert first == extractive_record(job(texts), settings), "deterministic"
    assert first.status == "ok" and first.responder == "extractive"
    assert count_words(first.text) <= 60
    numbers = cited_numbers(first.text)
    assert numbers and all(1 <= n <= 5 for n in numbers)
    assert first.citations == [first.passages[n - 1] for n in sorted(numbers)]
    for sentence in first.text.split("] ")[:-1]:
        assert "[" in sentence + "]", "every sentence carries its passage number"
    for number in numbers:  # each cited sentence really is in the passage it cites
        pid = first.passages[number - 1]
        pieces = [strip_citations(s) for s in first.text.split(f"[{number}]")[:-1]]
        assert any(piece.split(". ")[-1].strip()[:30] in texts[pid] for piece in pieces)
    assert first.ptkb_used == heuristic_record(TURNS[2]).output.ptkb_used


def test_an_empty_passage_text_is_skipped_and_said(texts):
    top = job(texts).passage_ids
    made = extractive_record(job(texts, **{top[0]: ""}), RespondSettings())
    assert made.status == "ok" and 1 not in cited_numbers(made.text)
    assert f"passage [1] {top[0]} has no text and was skipped" in made.notes


def test_no_passage_with_text_is_a_failed_record_with_the_reason(texts):
    top = job(texts).passage_ids
    made = extractive_record(job(texts, **dict.fromkeys(top, "")), RespondSettings())
    assert made.status == "failed" and "none of the top 5 passages has a text" in (made.error or "")
    (empty,) = build_jobs([TURNS[0]], {}, {}, texts, {}, 5)
    assert "the run has no passage for this turn" in (extractive_record(empty, RespondSettings()).error or "")


def test_cut_to_words_keeps_whole_sentences_and_markers():
    text = "One two three [1]. Four five six [2]. Seven eight."
    assert cut_to_words(text, 9) == "One two three [1]. Four five six [2]."
    assert cut_to_words(text, 5) == "One two three [1]."
    assert cut_to_words("a b c d e f", 3) == "a b c"


def write_inputs(tmp_path, turns, run):
    run_path = tmp_path / "run.trec"
    run_path.write_text("".join(f"{t} Q0 {p} {r + 1} {s} x\n" for t, hits in run.items()
                                for r, (p, s) in enumerate(sorted(hits.items(), key=lambda kv: -kv[1]))))
    refs = tmp_path / "refs.jsonl"
    refs.write_text("".join(heuristic_record(t).model_dump_json() + "\n" for t in turns))
    return run_path, refs


def test_rank_respond_export_validate_offline(run_cli, tmp_path):
    turns = TURNS
    run_path, refs = write_inputs(tmp_path, turns, run_for(turns))
    ptkb = tmp_path / "ptkb.run"
    code, out, err = run_cli("rank-ptkb", "-t", "ikat23-test", "-r", str(refs), "--encoder", "bm25", "-o", str(ptkb))
    assert code == 0, err
    responses = tmp_path / "responses.jsonl"
    code, out, err = run_cli("respond", str(run_path), "-t", "ikat23-test", "-r", str(refs), "--ptkb-run", str(ptkb),
                             "--collection", "ikat23-provenance", "-o", str(responses), "--no-progress", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["ok"] == len(turns) and summary["requests"] == 0 and summary["responder"] == "extractive"
    code, out, err = run_cli("respond", str(run_path), "-t", "ikat23-test", "-r", str(refs), "--ptkb-run", str(ptkb),
                             "--collection", "ikat23-provenance", "-o", str(responses), "--no-progress", "--json")
    assert json.loads(out)["skipped"] == len(turns), "a re-run resumes: nothing left to answer"
    sub = tmp_path / "sub.json"
    code, out, err = run_cli("export", str(run_path), "-t", "ikat23-test", "--responses", str(responses),
                             "--ptkb-run", str(ptkb), "-r", str(refs), "--collection", "ikat23-provenance",
                             "-o", str(sub))
    assert code == 0, err
    assert "ikat23 submission" in out, "2023 topics: the 2023 format by default"
    code, out, err = run_cli("validate", str(sub), "--topics", "ikat23-test")
    assert code == 0, err
    data = json.loads(sub.read_text())
    records = load_responses(responses)
    for entry in data["turns"]:
        response = entry["responses"][0]
        used = [p["id"] for p in response["passage_provenance"] if p["used"]]
        assert used == records[entry["turn_id"]].citations, "used = the cited passages"
        assert sorted(cited_numbers(response["text"])) == [
            n for n, p in enumerate(response["passage_provenance"], start=1) if p["used"]]
        scores = [p["score"] for p in response["ptkb_provenance"]]
        assert scores == sorted(scores, reverse=True) and len(scores) == len(next(
            t for t in turns if t.turn_id == entry["turn_id"]).ptkb), "2023: every statement, ranked"


def test_a_format_of_another_year_is_refused(run_cli, tmp_path):
    turns = TURNS[:3]
    run_path, refs = write_inputs(tmp_path, turns, run_for(turns))
    code, _, err = run_cli("export", str(run_path), "-t", "ikat23-test", "--format", "ikat24", "-r", str(refs),
                           "--collection", "ikat23-provenance", "-o", str(tmp_path / "s.json"))
    assert code == 2 and "Traceback" not in err
    assert "ikat24 is the iKAT 2024 format but the topics are iKAT 2023 topics" in err
    assert not (tmp_path / "s.json").exists()


def test_a_profile_with_no_statements_is_said_and_handled(run_cli, tmp_path):
    raw = json.loads(datasets.topics_path("ikat23-test").read_text())
    conversation = dict(raw[0], ptkb={}, turns=[dict(t, ptkb_provenance=[]) for t in raw[0]["turns"]])
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps([conversation]))
    turns = datasets.topics(topics)
    run_path, refs = write_inputs(tmp_path, turns, run_for(turns))
    ptkb = tmp_path / "ptkb.run"
    code, out, err = run_cli("rank-ptkb", "-t", str(topics), "-o", str(ptkb))
    assert code == 0 and "Traceback" not in err
    assert f"{len(turns)} turn(s) have a profile with no statements" in " ".join(err.split())
    responses = tmp_path / "r.jsonl"
    code, out, err = run_cli("respond", str(run_path), "-t", str(topics), "--collection", "ikat23-provenance",
                             "-o", str(responses), "--no-progress")
    assert code == 0, err
    assert all(r.status == "ok" and r.ptkb_used == [] for r in load_responses(responses).values())


def test_unknown_statement_ids_in_a_ptkb_run_are_an_error(run_cli, tmp_path):
    turns = TURNS[:2]
    run_path, refs = write_inputs(tmp_path, turns, run_for(turns))
    ptkb = tmp_path / "ptkb.run"
    ptkb.write_text(f"{turns[0].turn_id} Q0 99 1 1.0 x\n")
    code, _, err = run_cli("respond", str(run_path), "-t", "ikat23-test", "--turns", turns[0].turn_id,
                           "--ptkb-run", str(ptkb), "--collection", "ikat23-provenance", "-o", str(tmp_path / "r.jsonl"))
    assert code == 2 and "statement id(s) 99 are not in the profile" in " ".join(err.split())


def test_reformulation_fields_used():
    turn = TURNS[5]
    record = ReformulationRecord(turn_id=turn.turn_id, model="m", output=ReformulationOutput(
        reasoning="", level="c", rewrite="neutral rewrite", response="", third_rewrite="personal rewrite",
        third_response="", ptkb_used=["2", "99"]))
    (made,) = build_jobs([turn], {turn.turn_id: record}, {}, {}, {}, 5)
    assert made.rewrite == "personal rewrite" and made.level == "c" and made.used == ["2"]
    assert [sid for sid, _ in made.statements] == list(turn.ptkb), "no ranking given: the profile's order"


def test_a_run_of_other_turns_is_refused_and_missing_turns_are_counted(run_cli, tmp_path):
    turns = TURNS[:3]
    run_path, _ = write_inputs(tmp_path, turns[:2], run_for(turns[:2]))
    out = tmp_path / "r.jsonl"
    code, _, err = run_cli("respond", str(run_path), "-t", "ikat24-test", "--collection", "ikat23-provenance",
                           "-o", str(out), "--no-progress")
    n = len(datasets.topics("ikat24-test"))
    assert code == 2 and "Traceback" not in err
    assert f"the run has no passage for any of the {n} topic turn(s) (2 run turns, e.g. {turns[0].turn_id})" \
        in " ".join(err.split())
    assert not out.exists()
    code, _, err = run_cli("respond", str(run_path), "-t", "ikat23-test", "--turns", ",".join(t.turn_id for t in turns),
                           "--collection", "ikat23-provenance", "-o", str(out), "--no-progress")
    assert code == 1, err  # the turn without passages is a failed record
    assert f"1 of the 3 topic turn(s) have no passage in the run, so no response (recorded as failed): " \
           f"{turns[2].turn_id}" in " ".join(err.split())
