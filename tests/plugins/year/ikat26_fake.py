"""A made-up fourth iKAT year as a package outside apcir would ship it: one module plus one entry point
(``ikat26_fake-0.1.dist-info/entry_points.txt``), and no edit to apcir.

Its JSONL run (invented for the test, not an organisers' format) has one line per turn: ``run`` (team, run id,
run type), ``turn``, ``ranking`` (``[passage id, score]`` pairs, best first) and ``answer``: ``text`` (inline
citations ``[n]`` are the n-th ranked passage), ``cites`` (those positions) and ``ptkb`` (statement ids). It is
JSONL as iKAT 2025's is, so detecting it tells the two apart by content, not by the file's suffix.
"""

from __future__ import annotations

import json
from pathlib import Path

from apcir.contract.records import Turn
from apcir.submission.common import SubmissionInputs, coverage_problems, inline_citation_problems, plan
from apcir.submission.formats import SURE, FormatSpec, Sample

RULE = " [2026 fake]"


def build(inputs: SubmissionInputs) -> list[dict]:
    plans = plan(inputs, ptkb="used", at_least_one=True)
    lines = []
    for turn in inputs.turns:
        p = plans[turn.turn_id]
        position = {pid: n for n, (pid, _) in enumerate(p.hits, 1)}
        lines.append({"run": {"team": inputs.team_id, "run_id": inputs.run_name, "run_type": inputs.run_type},
                      "turn": turn.turn_id, "ranking": [[pid, score] for pid, score in p.hits],
                      "answer": {"text": p.text, "cites": [position[pid] for pid in p.used], "ptkb": p.selected}})
    return lines


def check(path: Path, turns: list[Turn]) -> list[str]:
    problems, submitted = [], []
    by_id = {t.turn_id: t for t in turns}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            problems.append(f"line {number}: not JSON{RULE}")
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("ranking"), list):
            problems.append(f"line {number}: not an object with a ranking{RULE}")
            continue
        turn_id = str(entry.get("turn"))
        submitted.append(turn_id)
        answer = entry.get("answer") if isinstance(entry.get("answer"), dict) else {}
        text, cites = str(answer.get("text", "")), list(answer.get("cites") or [])
        if not text.strip():
            problems.append(f"line {number}: empty text{RULE}")
        problems += [f"{p}{RULE}" for p in inline_citation_problems(text, len(entry["ranking"]), cites,
                                                                    f"line {number}", "ranked passage")]
        topic = by_id.get(turn_id)
        problems += [f"line {number}: statement {s} is not in the profile{RULE}" for s in answer.get("ptkb") or []
                     if topic is not None and str(s) not in topic.ptkb]
    return coverage_problems(submitted, turns, RULE) + problems


def sniff(sample: Sample) -> float:
    """Sure when the first line is an object with a ``ranking`` and an ``answer``."""
    first = sample.first_record
    return SURE if isinstance(first, dict) and "ranking" in first and "answer" in first else 0.0


FORMAT = FormatSpec("ikat26", "a made-up iKAT 2026 JSONL run (a test plugin)", ".jsonl", 2026,
                    build="ikat26_fake:build", check="ikat26_fake:check", run_types=("automatic", "manual"),
                    passage_text=False, sniff="ikat26_fake:sniff",
                    reader="the made-up 2026 validator reads only 2026 topics")
