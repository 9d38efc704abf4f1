"""A TREC run file as a submission format (``--format trec``): the fused run alone, six columns per line.

``build`` writes the run (its depth, trec_eval's order, the run name as tag); ``check`` reads it as trec_eval
would and names what a submission of the topics lacks: unknown turns, rank problems, passage ids that are not
ClueWeb22's, topic turns without results.
"""

from __future__ import annotations

from pathlib import Path

from apcir.console import shown
from apcir.contract.records import Turn
from apcir.contract.runs import ranking, read_run_file, validate_run
from apcir.submission.common import CLUEWEB_ID, SubmissionInputs
from apcir.submission.formats import SURE, Sample


def build(inputs: SubmissionInputs) -> str:
    lines = [f"{turn} Q0 {passage} {rank} {score} {inputs.run_name}\n"
             for turn in sorted(inputs.run) for rank, (passage, score) in enumerate(ranking(inputs.run[turn]), 1)]
    return "".join(lines)


def check(path: Path, turns: list[Turn]) -> list[str]:
    run_file = read_run_file(path)
    problems = validate_run(run_file, {t.turn_id for t in turns})
    bad_ids = sorted({p for hits in run_file.run.values() for p in hits if not CLUEWEB_ID.match(p)})
    if bad_ids:
        problems.append(f"{len(bad_ids)} passage id(s) not of the form clueweb22-enXXXX-XX-XXXXX:N, e.g. {bad_ids[0]}")
    missing = sorted({t.turn_id for t in turns} - set(run_file.run))
    if missing:
        problems.append(f"{len(missing)} topic turn(s) without results, e.g. {shown(missing, 5)}")
    return problems


def sniff(sample: Sample) -> float:
    """Sure when the first line has six whitespace-separated columns and is not JSON."""
    line = sample.first_line
    return SURE if len(line.split()) == 6 and not line.startswith("{") else 0.0
