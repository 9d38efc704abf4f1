"""The resumable stages' record log held open across calls (apcir.io.RecordLog): a live run, one turn a call, reads
no earlier record from disk again (issue 51)."""

from __future__ import annotations

import pytest

from apcir import datasets
from apcir.contract.reformulations import ReformulationRecord, load_reformulations
from apcir.contract.responses import ResponseRecord, load_responses
from apcir.errors import ApcirError, StaleOutput
from apcir.io import RecordLog, read_record_log
from apcir.reformulation.offline import heuristic_record
from apcir.reformulation.settings import ReformulatorOptions
from apcir.reformulation.stage import reformulate
from apcir.responses.job import build_jobs
from apcir.responses.ptkb import profile_order
from apcir.responses.settings import RespondSettings
from apcir.responses.stage import respond

TURNS = [t for t in datasets.topics("ikat23-test") if t.conversation_id == "10-1"]
HEURISTIC = ReformulatorOptions(llm="heuristic")


def without_timing(records):
    return {k: r.model_dump(exclude={"seconds"}) for k, r in records.items()}


def test_the_read_counter_sees_a_read_of_the_log(tmp_path, reads):
    out = tmp_path / "refs.jsonl"
    reformulate(TURNS[:2], HEURISTIC, out, progress=False)
    before = reads(out)
    assert len(read_record_log(out, ReformulationRecord, "reformulations")) == 2
    assert reads(out) == before + 1
    assert len(load_reformulations(out)) == 2 and reads(out) == before + 2


def test_reformulate_turn_by_turn_with_a_log_reads_the_file_once_at_most(tmp_path, reads):
    assert len(TURNS) >= 6
    out = tmp_path / "refs.jsonl"
    reformulate(TURNS[:2], HEURISTIC, out, progress=False)  # an earlier session's records, resumed
    start = reads(out)
    log = RecordLog(out, ReformulationRecord, "reformulations")
    for number, turn in enumerate(TURNS, start=1):
        summary = reformulate([turn], HEURISTIC, out, progress=False, log=log)
        assert (summary.skipped, summary.written) == ((1, 0) if number <= 2 else (0, 1))
        assert list(log.records([turn.turn_id])) == [turn.turn_id]
        assert list(log.records(t.turn_id for t in TURNS[:number])) == [t.turn_id for t in TURNS[:number]]
    assert reads(out) - start == 1, "the log file is read once, at the first call"
    assert without_timing(log.all()) == without_timing(load_reformulations(out))

    # the same calls without a log: the same records; each call reads the file once (twice before RecordLog)
    plain = tmp_path / "plain.jsonl"
    for turn in TURNS:
        reformulate([turn], HEURISTIC, plain, progress=False)
    assert reads(plain) == len(TURNS) - 1  # the first call finds no file
    assert without_timing(load_reformulations(plain)) == without_timing(log.all())


def test_a_fresh_log_on_no_file_reads_nothing(tmp_path, reads):
    out = tmp_path / "refs.jsonl"
    log = RecordLog(out, ReformulationRecord, "reformulations")
    for turn in TURNS[:4]:
        reformulate([turn], HEURISTIC, out, progress=False, log=log)
    assert reads(out) == 0 and len(log) == 4


def test_refresh_empties_the_log(tmp_path, reads):
    out = tmp_path / "refs.jsonl"
    log = RecordLog(out, ReformulationRecord, "reformulations")
    reformulate(TURNS[:3], HEURISTIC, out, progress=False, log=log)
    assert len(log) == 3
    summary = reformulate([TURNS[3]], HEURISTIC, out, progress=False, refresh=True, log=log)
    assert summary.written == 1 and list(log.all()) == [TURNS[3].turn_id] == list(load_reformulations(out))
    reformulate(TURNS[:2], HEURISTIC, out, progress=False, log=log)
    assert list(log.all()) == [TURNS[3].turn_id, TURNS[0].turn_id, TURNS[1].turn_id] == list(load_reformulations(out))
    assert reads(out) == 2  # load_reformulations' (the log itself read nothing)


def test_a_stale_log_redone_empties_the_log(tmp_path, reads):
    rewrites = tmp_path / "rewrites.tsv"
    rewrites.write_text("".join(f"{t.turn_id}\tfirst {t.turn_id}\n" for t in TURNS[:4]))
    options = ReformulatorOptions(llm=f"file:{rewrites}")
    out = tmp_path / "refs.jsonl"
    log = RecordLog(out, ReformulationRecord, "reformulations")
    for turn in TURNS[:3]:
        reformulate([turn], options, out, progress=False, log=log)
    assert len(log) == 3
    rewrites.write_text("".join(f"{t.turn_id}\tsecond {t.turn_id}\n" for t in TURNS[:4]))  # the settings change
    with pytest.raises(StaleOutput):
        reformulate([TURNS[3]], options, out, progress=False, log=log)
    assert len(log) == 3, "a refused call leaves the log and its records as they are"
    reformulate([TURNS[3]], options, out, progress=False, redo_stale=True, log=log)
    assert list(log.all()) == [TURNS[3].turn_id] == list(load_reformulations(out))
    assert log.records([TURNS[3].turn_id])[TURNS[3].turn_id].output.rewrite == f"second {TURNS[3].turn_id}"
    assert reads(out) == 1  # load_reformulations'


def test_a_log_notices_the_file_changed_by_another_writer(tmp_path, reads):
    out = tmp_path / "refs.jsonl"
    log = RecordLog(out, ReformulationRecord, "reformulations")
    reformulate(TURNS[:2], HEURISTIC, out, progress=False, log=log)
    reformulate([TURNS[2]], HEURISTIC, out, progress=False)  # another writer (no log) appends a record
    assert reads(out) == 1
    reformulate([TURNS[3]], HEURISTIC, out, progress=False, log=log)
    assert reads(out) == 2, "the changed file is read again"
    assert list(log.all()) == [t.turn_id for t in TURNS[:4]] == list(load_reformulations(out))
    out.unlink()  # removed by hand: the log has no record, and nothing is read
    reformulate([TURNS[4]], HEURISTIC, out, progress=False, log=log)
    assert list(log.all()) == [TURNS[4].turn_id] and reads(out) == 3  # load_reformulations'


def test_a_file_that_is_no_log_is_refused_at_its_first_read(tmp_path):
    out = tmp_path / "refs.jsonl"
    out.write_text('{"qid": "10-1_1"}\n')
    log = RecordLog(out, ReformulationRecord, "reformulations")
    for _ in range(2):
        with pytest.raises(ApcirError, match="not a reformulations record"):
            reformulate(TURNS[:1], HEURISTIC, out, progress=False, log=log)
    assert out.read_text() == '{"qid": "10-1_1"}\n' and not log.loaded


def test_a_log_of_another_file_or_record_is_a_programming_error(tmp_path):
    with pytest.raises(ValueError, match="not one of ReformulationRecord records"):
        reformulate(TURNS[:1], HEURISTIC, tmp_path / "a.jsonl", progress=False,
                    log=RecordLog(tmp_path / "b.jsonl", ReformulationRecord, "reformulations"))
    with pytest.raises(ValueError, match="not one of ReformulationRecord records"):
        reformulate(TURNS[:1], HEURISTIC, tmp_path / "a.jsonl", progress=False,
                    log=RecordLog(tmp_path / "a.jsonl", ResponseRecord, "responses"))  # type: ignore[arg-type]


# ---- respond (the extractive responder: offline) -----------------------------------------------------------
@pytest.fixture(scope="module")
def jobs():
    texts = {p.id: p.contents for p in datasets.iter_collection(datasets.collection_path("ikat23-provenance"))}
    ids = sorted(texts)
    run = {t.turn_id: {ids[(i * 3 + j) % len(ids)]: 10.0 - j for j in range(8)} for i, t in enumerate(TURNS)}
    records = {t.turn_id: heuristic_record(t) for t in TURNS}
    return build_jobs(TURNS, records, run, texts, profile_order(TURNS), 5)


def test_respond_turn_by_turn_with_a_log_reads_the_file_once_at_most(tmp_path, reads, jobs):
    out = tmp_path / "responses.jsonl"
    settings = RespondSettings()
    respond(jobs[:2], settings, out, progress=False)  # an earlier session's records, resumed
    start = reads(out)
    log = RecordLog(out, ResponseRecord, "responses")
    for number, job in enumerate(jobs, start=1):
        summary = respond([job], settings, out, progress=False, log=log)
        assert (summary.skipped, summary.written) == ((1, 0) if number <= 2 else (0, 1))
        assert list(log.records([job.turn.turn_id])) == [job.turn.turn_id]
    assert reads(out) - start == 1, "the log file is read once, at the first call"
    assert without_timing(log.all()) == without_timing(load_responses(out))

    plain = tmp_path / "plain.jsonl"
    for job in jobs:
        respond([job], settings, plain, progress=False)
    assert reads(plain) == len(jobs) - 1  # once a call (twice before RecordLog); the first call finds no file
    assert without_timing(load_responses(plain)) == without_timing(log.all())


def test_respond_refresh_and_a_stale_log_redone_empty_the_log(tmp_path, reads, jobs):
    out = tmp_path / "responses.jsonl"
    log = RecordLog(out, ResponseRecord, "responses")
    for job in jobs[:3]:
        respond([job], RespondSettings(), out, progress=False, log=log)
    respond([jobs[3]], RespondSettings(), out, progress=False, refresh=True, log=log)
    assert list(log.all()) == [jobs[3].turn.turn_id] == list(load_responses(out))
    respond(jobs[:2], RespondSettings(), out, progress=False, log=log)
    assert len(log) == 3
    shorter = RespondSettings(max_words=40)  # other settings: the records are stale
    with pytest.raises(StaleOutput):
        respond([jobs[4]], shorter, out, progress=False, log=log)
    assert len(log) == 3
    respond([jobs[4]], shorter, out, progress=False, redo_stale=True, log=log)
    assert list(log.all()) == [jobs[4].turn.turn_id] == list(load_responses(out))
    assert without_timing(log.all()) == without_timing(load_responses(out))
    assert reads(out) == 3  # load_responses' (the log itself read nothing)
