"""The offline reformulators: manual (HumanQR) and heuristic, no network, same schema."""

from __future__ import annotations

import json
import socket

import pytest

from apcir import datasets
from apcir.contract.records import HistoryEntry, Turn
from apcir.contract.reformulations import load_reformulations
from apcir.reformulation.offline import heuristic_output, heuristic_record, manual_output, ptkb_similarities
from apcir.reformulation.registry import is_offline
from apcir.reformulation.settings import ReformulatorOptions
from apcir.reformulation.stage import reformulate


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def _turn(utterance, ptkb, history=(), provenance=(), manual=""):
    return Turn(
        turn_id=f"1-1_{len(history) + 1}",
        conversation_id="1-1",
        turn_number=len(history) + 1,
        utterance=utterance,
        manual_rewrite=manual,
        ptkb=ptkb,
        ptkb_provenance=list(provenance),
        history=[
            HistoryEntry(turn_id=f"1-1_{i + 1}", utterance=u, response=r)
            for i, (u, r) in enumerate(history)
        ],
    )


PTKB = {
    "1": "I live in the Netherlands.",
    "2": "I am allergic to peanuts.",
    "3": "I play the violin.",
}


def test_is_offline():
    assert is_offline("manual") and is_offline("heuristic")
    assert not is_offline("gpt-4o") and not is_offline("llama3.1:8b")


def test_manual_level_from_provenance_and_previous_response():
    first = _turn(
        "Where should I study?",
        PTKB,
        provenance=["1"],
        manual="Where should I study in the Netherlands?",
    )
    out = manual_output(first)
    assert (out.level, out.rewrite, out.response, out.ptkb_used) == (
        "c",
        first.manual_rewrite,
        "",
        ["1"],
    )
    assert out.third_response == PTKB["1"]
    second = _turn(
        "And the fees?", PTKB, history=[("Where?", "Delft and Leiden.")], manual="Fees of Delft?"
    )
    out = manual_output(second)
    assert (out.level, out.response, out.ptkb_used) == ("a", "Delft and Leiden.", [])
    assert (
        manual_output(_turn("Only this", PTKB)).rewrite == "Only this"
    )  # no manual rewrite: the utterance


def test_heuristic_picks_overlapping_statement_and_level():
    personal = _turn("Which desserts without peanuts can I eat?", PTKB)
    out = heuristic_output(personal)
    assert out.level == "c" and out.ptkb_used[0] == "2"
    assert PTKB["2"] in out.third_rewrite
    neutral = _turn("Who invented the printing press?", PTKB)
    out = heuristic_output(neutral)
    assert out.level == "a" and out.ptkb_used == []
    sims = ptkb_similarities(personal, [])
    assert sims["2"] > sims["1"] == sims["3"] == 0.0


def test_heuristic_rewrite_uses_history_and_previous_response():
    turn = _turn(
        "How much would it cost me?",
        PTKB,
        history=[
            (
                "I want to learn the violin in Amsterdam",
                "The Amsterdam conservatory offers violin lessons.",
            )
        ],
    )
    out = heuristic_output(turn)
    assert out.rewrite.startswith("How much would it cost me?")
    assert "violin" in out.rewrite and "amsterdam" in out.rewrite.lower()
    assert out.response == "The Amsterdam conservatory offers violin lessons."
    assert (
        out.level == "b" and out.ptkb_used[0] == "3"
    )  # personal cue + the violin statement matches the context


@pytest.mark.parametrize("model", ["manual", "heuristic"])
def test_offline_reformulate_all_ikat23_turns_without_network(tmp_path, no_network, model):
    turns = datasets.topics("ikat23-test")
    out = tmp_path / f"{model}.jsonl"
    summary = reformulate(turns, ReformulatorOptions(llm=model), out, progress=False)
    assert summary.written == summary.ok == 332 and summary.requests == 0
    records = load_reformulations(out)
    assert len(records) == 332 and all(
        r.model == model and r.status == "ok" for r in records.values()
    )
    for record in records.values():
        inputs = record.list_inputs()
        assert inputs["rewrite"][0] and inputs["third"][0]
    if model == "manual":
        by_id = {t.turn_id: t for t in turns}
        assert all(
            (r.output.level == "c") == bool(by_id[tid].ptkb_provenance)
            for tid, r in records.items()
        )
    summary_file = json.loads((tmp_path / f"{model}.summary.json").read_text())
    assert summary_file["ok"] == 332 and summary_file["levels"] == summary.levels
    # A second run resumes: everything is already there.
    again = reformulate(turns, ReformulatorOptions(llm=model), out, progress=False)
    assert again.skipped == 332 and again.written == 0
    assert len(out.read_text().splitlines()) == 332


def test_offline_record_is_deterministic():
    turn = datasets.topics("ikat23-test")[7]
    assert heuristic_record(turn) == heuristic_record(turn)
    assert heuristic_record(turn).model == "heuristic" and heuristic_record(turn).status == "ok"
