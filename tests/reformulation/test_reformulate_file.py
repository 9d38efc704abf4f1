"""The file:PATH reformulator: rewrites made elsewhere, in the three layouts it reads."""

from __future__ import annotations

import json

import pytest

from apcir import datasets
from apcir.contract.reformulations import load_reformulations
from apcir.errors import ApcirError
from apcir.reformulation.file import file_records, parse_map
from apcir.reformulation.offline import heuristic_output
from apcir.reformulation.registry import is_offline, reformulator_for
from apcir.reformulation.settings import ReformulatorOptions
from apcir.reformulation.stage import reformulate


@pytest.fixture(scope="module")
def turns():
    return [t for t in datasets.topics("ikat23-test") if t.conversation_id == "10-1"][:4]


def test_file_names_the_file_reformulator():
    assert reformulator_for("file:x.tsv").name == "file"
    assert reformulator_for("heuristic").name == "heuristic" and reformulator_for("gpt-4o").name == "llm"
    assert is_offline("file:x.tsv") and not is_offline("gpt-4o")


def test_tsv_with_a_missing_turn(tmp_path, turns, capsys):
    path = tmp_path / "rewrites.tsv"
    # dashed ids are normalised; the third turn is missing; one line has a response
    path.write_text(f"10-1-1\tfirst rewrite\n{turns[1].turn_id}\tsecond rewrite\tits response\n10-1-4\tfourth\n")
    records, warnings = file_records(turns, f"file:{path}", {}, "a")
    by_id = {r.turn_id: r for r in records}
    assert [r.turn_id for r in records] == [t.turn_id for t in turns]
    missing = by_id[turns[2].turn_id]
    assert missing.status == "failed" and "not in the reformulations file" in (missing.error or "")
    first = by_id[turns[0].turn_id]
    assert first.status == "ok" and first.output is not None
    assert first.output.rewrite == "first rewrite" and first.output.response == ""
    assert first.output.third_rewrite == "first rewrite" and first.output.level == "a"
    assert any("no level in the file: a from the fallback (a)" in n for n in first.notes)
    assert any("no response" in n for n in first.notes)
    second = by_id[turns[1].turn_id].output
    assert second is not None and second.response == "its response" and second.third_response == "its response"
    assert warnings == []


def test_mapped_jsonl_fields_levels_and_statements(tmp_path, turns):
    path = tmp_path / "rar.jsonl"
    rows = [
        {"qid": turns[0].turn_id, "rar_rw": "rw one", "rar_rs": "rs one", "lvl": "(C)", "ptkb": ["1", "99"]},
        {"qid": turns[1].turn_id, "rar_rw": "rw two"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    mapping = parse_map(["rewrite=rar_rw,response=rar_rs", "level=lvl,ptkb_used=ptkb"])
    records, _ = file_records(turns[:2], f"file:{path}", mapping, "heuristic")
    one, two = records
    assert one.output is not None and one.output.level == "c" and one.output.ptkb_used == ["1"]
    assert any("not in the profile: dropped" in n for n in one.notes)
    assert two.output is not None and two.output.level == heuristic_output(turns[1]).level
    assert any("from the fallback (heuristic)" in n for n in two.notes)


def test_json_object_and_apcir_jsonl(tmp_path, turns):
    obj = tmp_path / "rewrites.json"
    obj.write_text(json.dumps({turns[0].turn_id: "plain rewrite", turns[1].turn_id: {"rewrite": "x", "level": "b"}}))
    records, _ = file_records(turns[:2], f"file:{obj}", {}, "a")
    assert records[0].output.rewrite == "plain rewrite" and records[1].output.level == "b"  # type: ignore[union-attr]
    # apcir's own JSONL: the heuristic's output read back gives the same outputs
    own = tmp_path / "own.jsonl"
    reformulate(turns, ReformulatorOptions(llm="heuristic"), own, progress=False)
    again, _ = file_records(turns, f"file:{own}", {}, "a")
    originals = load_reformulations(own)
    assert [r.output for r in again] == [originals[t.turn_id].output for t in turns]


@pytest.mark.parametrize("content, message", [
    ("10-1_1\n", "expected 'turn_id<TAB>rewrite"),
    ('{"rewrite": "no id"}\n', "no turn id field"),
    ("", "is empty"),
    ("ten-one\trewrite\n", "not of the form"),
])
def test_bad_files_name_the_problem(tmp_path, turns, content, message):
    path = tmp_path / "bad.tsv"
    path.write_text(content)
    with pytest.raises(ApcirError, match=message):
        file_records(turns, f"file:{path}", {}, "a")


def test_unknown_map_field_and_missing_file(tmp_path, turns):
    with pytest.raises(Exception, match="unknown field"):
        ReformulatorOptions(llm="file:x", map={"rewritten": "x"})
    with pytest.raises(ApcirError, match="not found"):
        file_records(turns, f"file:{tmp_path / 'nope.tsv'}", {}, "a")


def test_cli_reformulate_from_a_file_reports_the_missing_turn(run_cli, tmp_path, turns):
    path = tmp_path / "rewrites.tsv"
    path.write_text("".join(f"{t.turn_id}\trewrite of {t.turn_id}\n" for t in turns[:3]))
    out = tmp_path / "out.jsonl"
    code, stdout, err = run_cli("reformulate", "--topics", "ikat23-test", "--turns",
                                ",".join(t.turn_id for t in turns), "--llm", f"file:{path}", "--out", str(out),
                                "--no-progress")
    assert code == 1, err
    assert turns[3].turn_id in err and "no usable reformulation" in err
    records = load_reformulations(out)
    assert records[turns[3].turn_id].status == "failed" and records[turns[0].turn_id].status == "ok"


def test_the_summary_credits_the_file_only_with_the_levels_it_gave(run_cli, tmp_path, turns):
    """Issue 37: a TSV has no level column; its levels come from --level-fallback and the summary says so."""
    path = tmp_path / "rewrites.jsonl"
    path.write_text("".join(json.dumps({"turn_id": t.turn_id, "rewrite": f"rewrite of {t.turn_id}",
                                        **({"level": "c"} if i == 0 else {})}) + "\n" for i, t in enumerate(turns)))
    out = tmp_path / "out.jsonl"
    code, stdout, err = run_cli("reformulate", "--topics", "ikat23-test", "--turns", ",".join(t.turn_id for t in turns),
                                "--llm", f"file:{path}", "--level-fallback", "a", "--out", str(out), "--no-progress",
                                "--json")
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["levels"] == {"a": 3, "b": 0, "c": 1} and summary["fallback_levels"] == {"a": 3}
    code, stdout, err = run_cli("reformulate", "--topics", "ikat23-test", "--turns", ",".join(t.turn_id for t in turns),
                                "--llm", f"file:{path}", "--level-fallback", "a", "--out", str(tmp_path / "again.jsonl"),
                                "--no-progress")
    assert code == 0, err
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in stdout.splitlines()
            if line.count("│") >= 3}
    assert rows["levels written (a/b/c)"] == "3/0/1" and rows["of which from the file"] == "0/0/1"
    assert rows["of which from --level-fallback"] == "3/0/0"
    assert "levels in the file" not in stdout
