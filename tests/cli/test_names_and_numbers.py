"""Names and numbers a user gives that apcir must refuse in one line naming the problem (issue 49 and its
siblings): a turn number in digits ``int`` cannot read, a run name that is no folder of its own (``..`` was the
folder above runs/), a Milvus collection name over Milvus's length limit, a lock file naming no readable pid."""

from __future__ import annotations

import json

import pytest

from apcir.errors import ApcirError
from apcir.io import NAME_MAX, exclusive, folder_name_problem
from apcir.retrieval.location import MAX_NAME, parse_milvus


def one_line(code: int, err: str, expected: str) -> str:
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and expected in lines[0], err
    return lines[0]


# ---- turn numbers ------------------------------------------------------------------------------------
@pytest.mark.parametrize("turn_id, shown", [
    ("²", "'²'"),  # str.isdigit() takes it, int() does not: was an internal error
    ("٣", "'٣'"),  # int() takes Arabic-Indic digits; a topic file writes ASCII ones
    ("9" * 5000, "'99999999999999999999...(5000 characters)'"),  # past int()'s 4,300 digits: was an internal error
    ("1" * 19, f"'{'1' * 19}'"),
    ("", "''"),
])
def test_a_turn_number_int_cannot_read_is_refused_in_one_line(run_cli, tmp_path, turn_id, shown):
    path = tmp_path / "topics.json"
    path.write_text(json.dumps([{"number": "1-1", "ptkb": {"1": "I like tea."},
                                 "turns": [{"turn_id": turn_id, "utterance": "a"}]}]))
    code, _, err = run_cli("prompt", "--topics", str(path), "--stats")
    one_line(code, err, f"conversation 1-1: turn_id {shown} is not a turn number (1, 2, ...)")


def test_turn_numbers_in_ascii_digits_are_read(tmp_path):
    from apcir import datasets

    path = tmp_path / "topics.json"
    turns = [{"turn_id": number, "utterance": "a"} for number in (" 1 ", "02", 3, "9" * 18)]
    path.write_text(json.dumps([{"number": "1-1", "ptkb": {"1": "I like tea."}, "turns": turns}]))
    assert [t.turn_id for t in datasets.topics(path)] == ["1-1_1", "1-1_2", "1-1_3", f"1-1_{'9' * 18}"]


# ---- run names ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, expected", [
    ("..", "'..' is the folder itself or the one above it, not a folder of its own"),
    (".", "'.' is the folder itself or the one above it"),
    ("a" * (NAME_MAX + 1), f"is {NAME_MAX + 1} bytes long; a folder's name is at most {NAME_MAX}"),
    ("é" * 128, f"is 256 bytes long; a folder's name is at most {NAME_MAX}"),
    ("a\\u0007b", "holds a control character"),
])
def test_a_run_name_that_is_no_folder_of_its_own_is_refused_before_anything_is_written(run_cli, tmp_path,
                                                                                       monkeypatch, name, expected):
    """name = ".." made `apcir run` write its run directory's files (config.json, the lock ...) into runs/.."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "c.toml"
    config.write_text(f'name = "{name}"\ntopics = "ikat23-test"\n[evaluation]\nqrels = "ikat23-test"\n',
                      encoding="utf-8")
    code, _, err = run_cli("run", str(config), "--no-progress")
    one_line(code, err, expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml"]


def test_folder_names_that_are_one_folder_pass():
    for name in ("demo", "a" * NAME_MAX, "é" * 127, "run.2024-05", "..x", "+"):
        assert folder_name_problem(name) is None, name
    assert folder_name_problem("a/b") == "holds a slash"


@pytest.mark.parametrize("run_id", ["..", ".", "team/run", "../elsewhere"])
def test_a_live_run_id_that_cannot_name_its_default_folder_is_refused(run_cli, tmp_path, monkeypatch, run_id):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IKAT_API_TOKEN", "dGVhbQ==")
    code, _, err = run_cli("converse", "demo", "--api", "http://127.0.0.1:9", "--run-id", run_id)
    one_line(code, err, f"--run-id {run_id!r} ")
    assert "give --out DIR" in err and not (tmp_path / "runs").exists()


def test_a_live_run_id_with_a_folder_of_its_own_is_not_refused_for_its_name(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("IKAT_API_TOKEN", raising=False)
    code, _, err = run_cli("converse", "demo", "--api", "http://127.0.0.1:9", "--run-id", "..",
                           "--out", str(tmp_path / "live"))
    one_line(code, err, "no API token: set the environment variable IKAT_API_TOKEN")  # the next check


# ---- Milvus collection names -------------------------------------------------------------------------
def test_a_milvus_collection_name_over_the_limit_is_refused_naming_its_length(run_cli):
    location = "milvus://127.0.0.1:9/" + "a" * 300
    with pytest.raises(ApcirError, match=f"is 300 characters long; Milvus allows at most {MAX_NAME}"):
        parse_milvus(location)
    code, _, err = run_cli("index", "build", "--backend", "milvus", "-c", "ikat23-provenance", "--out", location)
    line = one_line(code, err, "collection name 'aaaaaaaaaaaaaaaaaaaa...aaaaaaaa' is 300 characters long")
    assert "letters, digits" not in line


@pytest.mark.parametrize("name", ["1abc", "ab-c", "é", "abc\n", "a b"])
def test_a_milvus_collection_name_against_milvus_s_rule_names_the_rule(name):
    with pytest.raises(ApcirError, match="must be ASCII letters, digits and _, not starting with a digit"):
        parse_milvus(f"milvus://127.0.0.1:9/{name}")


def test_milvus_collection_names_up_to_the_limit_pass(tmp_path):
    assert parse_milvus("milvus://127.0.0.1:9/" + "a" * MAX_NAME).collection == "a" * MAX_NAME
    assert parse_milvus(f"milvus:{tmp_path / 'x.db'}#_x1").collection == "_x1"


# ---- lock files --------------------------------------------------------------------------------------
@pytest.mark.parametrize("content", ["held by pid ² on host since now", "held by pid 99999999999999999999 on host",
                                     "held by pid ", "held by pid x"])
def test_a_lock_file_naming_no_readable_pid_is_taken_over(tmp_path, content):
    lock = tmp_path / ".apcir.lock"
    lock.write_text(content + "\n", encoding="utf-8")
    with exclusive(lock, "the output"):
        assert lock.read_text().startswith("held by pid ")
    assert lock.read_text().startswith("released by pid ")


def test_a_lock_left_by_a_dead_pid_is_still_taken_over_with_a_message(tmp_path, capsys):
    lock = tmp_path / ".apcir.lock"
    lock.write_text("held by pid 999999999 on host since then\n", encoding="utf-8")
    with exclusive(lock, "the output"):
        pass
    assert "taking over the lock of pid 999999999" in capsys.readouterr().err
