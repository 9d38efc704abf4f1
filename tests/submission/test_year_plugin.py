"""A fourth iKAT year from outside apcir: a made-up 2026 format (tests/plugins/year/ikat26_fake.py), one module
plus one ``apcir.formats`` entry point, is exported, validated and detected with no edit to apcir.submission.

It is JSONL as iKAT 2025's run is, so detection is by content: neither the year nor the suffix is assumed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import apcir
from apcir.errors import ApcirError
from apcir.submission.formats import FORMATS, format_for_year
from apcir.submission.stage import detect_format

YEAR_PLUGIN = Path(__file__).resolve().parents[1] / "plugins" / "year"


@pytest.fixture
def ikat26(monkeypatch):
    """The made-up year's package installed (its dist-info on sys.path), the formats re-reading their entry points."""
    saved = dict(FORMATS._entries)
    monkeypatch.syspath_prepend(str(YEAR_PLUGIN))
    assert FORMATS.load_plugins(again=True) == ["ikat26"]
    yield FORMATS.get("ikat26")
    FORMATS._entries = saved


@pytest.fixture(scope="module")
def case():
    turns = apcir.topics("ikat25-test")[:6]
    records = apcir.reformulate(turns, "heuristic")
    passages = {f"clueweb22-en0000-00-{i:05d}:0": f"Passage {i} says something useful." for i in range(8)}
    run = {t.turn_id: {p: 10.0 - i for i, p in enumerate(passages)} for t in turns}
    return turns, records, passages, run, apcir.respond(turns, records, run, passages)


def export(case, out, **how):
    turns, records, passages, run, responses = case
    return apcir.export(run, turns, out, responses=responses, reformulations=records, passages=passages, **how)


def test_the_year_is_exported_validated_and_detected(ikat26, case, tmp_path):
    assert format_for_year(2026) == "ikat26", "the year's format is its topics' default"
    out = export(case, tmp_path / "run.jsonl", year=2026)  # no format named: the year's
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["turn"] for line in lines] == [t.turn_id for t in case[0]]
    assert all(line["answer"]["cites"] and line["ranking"][0][1] == 10.0 for line in lines)
    assert detect_format(out) == "ikat26"
    assert apcir.validate(out, case[0], year=2026) == []
    assert apcir.validate(out, case[0], "ikat26", year=2026) == []


def test_its_checks_find_problems(ikat26, case, tmp_path):
    out = export(case, tmp_path / "run.jsonl", format="ikat26", year=2026)
    lines = out.read_text().splitlines()
    broken = json.loads(lines[0])
    broken["answer"]["text"] = ""
    out.write_text("\n".join([json.dumps(broken), *lines[2:]]) + "\n")
    problems = apcir.validate(out, case[0], year=2026)
    assert detect_format(out) == "ikat26"
    assert "line 1: empty text [2026 fake]" in problems
    assert any(f"missing turn(s) {case[0][1].turn_id}" in p for p in problems)


def test_jsonl_of_2025_is_still_2025s(ikat26, case, tmp_path):
    """Both are JSONL: each format knows its own lines, and a file of the other year is refused by its reader."""
    out = export(case, tmp_path / "run.jsonl", year=2025)
    assert detect_format(out) == "ikat25"
    assert apcir.validate(out, case[0], year=2025) == []
    ours = export(case, tmp_path / "ours.jsonl", format="ikat26", year=2026)
    (problem,) = apcir.validate(ours, case[0], year=2025)
    assert problem.startswith("ikat26 is the iKAT 2026 format but the topics are iKAT 2025 topics: the made-up "
                              "2026 validator reads only 2026 topics; use ikat25")
    with pytest.raises(ApcirError, match="refusing to write it: ikat25 is the iKAT 2025 format but the topics are "
                                         "iKAT 2026 topics: .*; use ikat26, the format of these topics"):
        export(case, tmp_path / "x.jsonl", format="ikat25", year=2026)


def test_without_the_plugin_the_year_has_no_format(case, tmp_path):
    with pytest.raises(ValueError, match="no submission format for iKAT 2026"):
        format_for_year(2026)
    (tmp_path / "run.jsonl").write_text('{"turn": "1_1", "ranking": [], "answer": {}}\n')
    with pytest.raises(ApcirError, match="not a submission of a known format"):
        detect_format(tmp_path / "run.jsonl")
