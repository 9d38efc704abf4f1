"""Runs written gzipped (``.run.gz``) and read transparently wherever runs are read."""

from __future__ import annotations

import gzip

from apcir.contract.runs import load_run, ranking, run_stem, write_run

RUN = {"9-1_3": {"a:1": 2.5, "b:1": 1.25, "c:1": 1.25}, "9-1_4": {"a:1": 0.5}}


def test_a_gz_path_is_written_gzipped_and_read_back_identically(tmp_path):
    plain, packed = tmp_path / "x.run", tmp_path / "x.run.gz"
    write_run(RUN, plain, tag="t")
    write_run(RUN, packed, tag="t")
    assert gzip.decompress(packed.read_bytes()).decode() == plain.read_text()
    assert load_run(packed) == load_run(plain) == RUN
    write_run(RUN, tmp_path / "y.run.gz", tag="t")
    assert (tmp_path / "y.run.gz").read_bytes() == packed.read_bytes()  # no time stamp: reproducible bytes
    renamed = tmp_path / "z.txt"
    renamed.write_bytes(packed.read_bytes())
    assert load_run(renamed) == RUN  # recognised by its bytes, not its name
    assert run_stem(packed) == "x" and run_stem(plain) == "x"


def test_the_cli_reads_gzipped_runs_and_a_damaged_one_is_one_line(tmp_path, run_cli):
    from apcir import datasets

    qrels = datasets.qrels("ikat23-test-provenance")
    run = {turn: {pid: 1.0 / (1 + i) for i, pid in enumerate(sorted(judged))} for turn, judged in
           list(qrels.items())[:5]}
    packed = tmp_path / "x.run.gz"
    write_run(run, packed, tag="t")
    plain = tmp_path / "x.run"
    write_run(run, plain, tag="t")
    code_a, out_a, err = run_cli("evaluate", str(packed), "--qrels", "ikat23-test-provenance", "--json")
    assert code_a == 0, err
    code_b, out_b, _ = run_cli("evaluate", str(plain), "--qrels", "ikat23-test-provenance", "--json")
    assert out_a.replace("x.run.gz", "x.run") == out_b
    broken = tmp_path / "broken.run.gz"
    broken.write_bytes(packed.read_bytes()[:20])
    code, _, err = run_cli("evaluate", str(broken), "--qrels", "ikat23-test-provenance")
    assert code == 2 and "damaged gzip" in err and len(err.strip().splitlines()) == 1, err


def test_hits_already_in_the_ranking_order_are_kept_and_others_are_sorted():
    ranked = {"c": 3.0, "b": 2.0, "z": 1.0, "a": 1.0}  # ties: id descending
    assert ranking(ranked) == list(ranked.items())
    unranked = {"a": 1.0, "z": 1.0, "b": 2.0, "c": 3.0}
    assert ranking(unranked) == list(ranked.items())
    assert ranking({"a": 1.0, "b": 1.0}, 1) == [("b", 1.0)]
    # equal as 32-bit floats: a tie, broken by id although the 64-bit scores differ
    assert ranking({"a": 1.0000000001, "b": 1.0}) == [("b", 1.0), ("a", 1.0000000001)]
