"""TREC 6-column run files: ``turn_id Q0 passage_id rank score tag``.

Reading is strict about the shape of each line and collects everything else
(duplicates, ranks that disagree with scores, unknown turns) as findings of
:func:`validate_run`, so a user sees every problem at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from apcir.errors import ApcirError
from apcir.ids import canonical_turn_id
from apcir.models import Run


@dataclass
class RunFile:
    """A run as read from disk, with the ranks the file states and the tag."""

    run: Run
    ranks: dict[str, dict[str, int]]
    tag: str
    problems: list[str] = field(default_factory=list)


def read_run_file(path: Path) -> RunFile:
    """Parse a TREC run; a malformed line (wrong field count, non-numeric score or rank) is an error.

    Duplicate (turn, passage) pairs keep their first score and are listed in
    ``problems``; so are ranks that disagree with the scores' order.
    """
    run: Run = {}
    ranks: dict[str, dict[str, int]] = {}
    problems: list[str] = []
    tag = ""
    try:
        handle = path.open(encoding="utf-8")
    except FileNotFoundError:
        raise ApcirError("run file not found", path=path) from None
    with handle:
        for number, line in enumerate(handle, start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 6:
                raise ApcirError(
                    f"expected 6 fields 'turn_id Q0 passage_id rank score tag', found {len(fields)}",
                    path=path,
                    line=number,
                )
            turn, _, passage, rank_text, score_text, tag = fields
            try:
                score = float(score_text)
            except ValueError:
                raise ApcirError(f"score {score_text!r} is not a number", path=path, line=number) from None
            if not math.isfinite(score):
                raise ApcirError(f"score {score_text!r} is not a finite number", path=path, line=number)
            try:
                rank = int(rank_text)
            except ValueError:
                raise ApcirError(f"rank {rank_text!r} is not an integer", path=path, line=number) from None
            try:
                turn_id = canonical_turn_id(turn)
            except ApcirError as exc:
                raise ApcirError(str(exc), path=path, line=number) from None
            scores = run.setdefault(turn_id, {})
            if passage in scores:
                problems.append(f"line {number}: duplicate passage {passage} for turn {turn_id}")
                continue
            scores[passage] = score
            ranks.setdefault(turn_id, {})[passage] = rank
    for turn_id in run:
        problems.extend(_rank_problems(turn_id, run[turn_id], ranks[turn_id]))
    return RunFile(run=run, ranks=ranks, tag=tag, problems=problems)


def load_run(path: Path) -> Run:
    """The scores of a run file (see :func:`read_run_file`)."""
    return read_run_file(path).run


def sorted_hits(scores: dict[str, float], depth: int | None = None) -> list[tuple[str, float]]:
    """Hits by score descending, ties by passage id ascending (the order apcir writes)."""
    hits = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return hits if depth is None else hits[:depth]


def write_run(run: Run, path: Path, tag: str = "apcir", depth: int | None = None) -> None:
    """Write a TREC run; turns sorted, hits by score desc then passage id, ranks from 1."""
    if any(c.isspace() for c in tag) or not tag:
        raise ApcirError(f"run tag {tag!r} must be one non-empty word")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        for turn_id in sorted(run):
            for rank, (passage, score) in enumerate(sorted_hits(run[turn_id], depth), start=1):
                out.write(f"{turn_id} Q0 {passage} {rank} {score!r} {tag}\n")
    tmp.replace(path)


def validate_run(run_file: RunFile, known_turns: set[str] | None = None) -> list[str]:
    """Every problem of a run: duplicates, rank/score disagreement and, given the topics, unknown turns."""
    problems = list(run_file.problems)
    if known_turns is not None:
        unknown = sorted(set(run_file.run) - known_turns)
        if unknown:
            shown = ", ".join(unknown[:10]) + (" ..." if len(unknown) > 10 else "")
            problems.append(f"{len(unknown)} turn(s) not in the topics: {shown}")
    return problems


def _rank_problems(turn_id: str, scores: dict[str, float], ranks: dict[str, int]) -> list[str]:
    by_rank = sorted(scores, key=lambda passage: ranks[passage])
    for higher, lower in zip(by_rank, by_rank[1:]):
        if scores[higher] < scores[lower]:
            return [
                f"turn {turn_id}: ranks disagree with scores (rank {ranks[higher]} {higher} "
                f"scores {scores[higher]} < rank {ranks[lower]} {lower} scores {scores[lower]})"
            ]
    seen = sorted(ranks.values())
    if len(set(seen)) != len(seen):
        return [f"turn {turn_id}: repeated ranks"]
    return []
