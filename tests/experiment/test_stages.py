from apcir.experiment.ledger import StageLedger, fingerprint


def test_stage_reruns_only_when_inputs_change(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("v1")
    out = tmp_path / "out.txt"
    calls = []

    def work():
        calls.append(1)
        out.write_text(source.read_text().upper())
        return "done"

    ledger = StageLedger(tmp_path)
    assert ledger.run("s", {"src": source, "k": 3}, [out], work).ran
    assert not StageLedger(tmp_path).run("s", {"src": source, "k": 3}, [out], work).ran
    assert len(calls) == 1
    source.write_text("v2")  # upstream content changed
    assert StageLedger(tmp_path).run("s", {"src": source, "k": 3}, [out], work).ran
    assert out.read_text() == "V2"
    assert StageLedger(tmp_path).run("s", {"src": source, "k": 4}, [out], work).ran  # parameter changed
    out.unlink()  # output lost
    assert StageLedger(tmp_path).run("s", {"src": source, "k": 4}, [out], work).ran
    assert len(calls) == 4


def test_interrupted_stage_resumes_without_deleting(tmp_path):
    out = tmp_path / "partial.jsonl"

    def interrupted():
        out.write_text("line1\n")
        raise KeyboardInterrupt

    ledger = StageLedger(tmp_path)
    try:
        ledger.run("s", {"a": 1}, [out], interrupted)
    except KeyboardInterrupt:
        pass

    def resume():
        assert out.read_text() == "line1\n", "same inputs: the partial output is kept for resuming"
        out.write_text("line1\nline2\n")
        return

    assert StageLedger(tmp_path).run("s", {"a": 1}, [out], resume).ran
    assert out.read_text() == "line1\nline2\n"


def test_fingerprint_is_order_independent():
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})
