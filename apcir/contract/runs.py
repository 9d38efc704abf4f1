"""Runs: the one ranking order, and TREC 6-column run files (``turn_id Q0 passage_id rank score tag``).

**The ranking order** is trec_eval's, everywhere in apcir: trec_eval reads a
run's scores into 32-bit floats, sorts by that value descending and breaks
ties by passage id descending, whatever ranks the file states. apcir ranks the
same way when it cuts a run at a depth, picks the passages a response cites,
writes a run file or checks one, so the order a user sees is the order that is
evaluated. Scores are written with full (64-bit) precision.

Reading is strict about the shape of each line and collects everything else
(duplicates, ranks that disagree with scores, unknown turns) as findings of
:func:`validate_run`, so a user sees every problem at once.
"""

from __future__ import annotations

import gzip
import math
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from apcir.console import shown
from apcir.contract.records import Run
from apcir.errors import ApcirError
from apcir.ids import canonical_turn_id
from apcir.io import atomic_write, columns, decode, read_bytes

GZIP_LEVEL = 1
"""zlib level of ``.run.gz`` files: about 3.6x smaller than the text, written 3.5x faster than at level 6 (whose
files are 10% smaller: a demo list of 282,005 lines, 20.9 MB as text, is 5.7 MB at level 1 and 5.2 MB at 6)."""
ORDER = "score as a 32-bit float descending, ties by passage id descending (trec_eval's order)"


def trec_order(scores: np.ndarray) -> np.ndarray:
    """Indices of ``scores`` in the ranking order, for candidates whose ids are sorted ascending."""
    rounded = np.asarray(scores, dtype=np.float64).astype(np.float32).astype(np.float64)
    return np.lexsort((-np.arange(rounded.shape[0]), -rounded))


def ranking(scores: Mapping[str, float], depth: int | None = None) -> list[tuple[str, float]]:
    """``(passage, score)`` pairs of one turn in the ranking order, cut at ``depth``.

    Hits already in that order (a search engine's output) are taken as they are, after a linear check."""
    pairs = list(scores.items())
    if _in_ranking_order(pairs):
        return pairs if depth is None else pairs[:depth]
    ids = sorted(scores)
    values = np.fromiter((scores[p] for p in ids), dtype=np.float64, count=len(ids))
    order = trec_order(values)
    if depth is not None:
        order = order[:depth]
    return [(ids[i], scores[ids[i]]) for i in order]


def _in_ranking_order(pairs: list[tuple[str, float]]) -> bool:
    """Whether the pairs are in the ranking order already: 32-bit scores not increasing, and passages of equal
    32-bit scores in descending id order."""
    if len(pairs) < 2:
        return bool(not pairs or math.isfinite(pairs[0][1]))
    values = np.array([score for _, score in pairs], dtype=np.float64).astype(np.float32)
    if not np.isfinite(values).all():
        return False
    steps = values[1:] - values[:-1]
    if (steps > 0).any():
        return False
    return all(pairs[i][0] > pairs[i + 1][0] for i in np.flatnonzero(steps == 0).tolist())


def cut(run: Run, depth: int) -> Run:
    """Every turn's first ``depth`` passages in the ranking order."""
    return {turn: dict(ranking(hits, depth)) for turn, hits in run.items()}


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
    duplicates = 0
    turn_ids: dict[str, str] = {}  # as written -> canonical (a run has few distinct turns)
    for number, fields in columns(_lines(path), path, "turn_id Q0 passage_id rank score tag"):
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
        turn_id = turn_ids.get(turn)
        if turn_id is None:
            try:
                turn_id = turn_ids[turn] = canonical_turn_id(turn)
            except ApcirError as exc:
                raise ApcirError(str(exc), path=path, line=number) from None
        scores = run.get(turn_id)
        if scores is None:
            scores = run[turn_id] = {}
            ranks[turn_id] = {}
        if passage in scores:
            duplicates += 1
            if duplicates <= 10:
                problems.append(f"line {number}: duplicate passage {passage} for turn {turn_id} (first score kept)")
            continue
        scores[passage] = score
        ranks[turn_id][passage] = rank
    if duplicates > 10:
        problems.append(f"{duplicates} duplicate (turn, passage) lines in all; the first 10 are listed")
    for turn_id in run:
        problems.extend(_rank_problems(turn_id, run[turn_id], ranks[turn_id]))
    return RunFile(run=run, ranks=ranks, tag=tag, problems=problems)


GZIP_MAGIC = b"\x1f\x8b"


def run_stem(path: Path) -> str:
    """A run file's name without ``.run``, ``.run.gz`` or ``.gz`` (``systems/apcir.run.gz`` -> ``apcir``)."""
    name = Path(path).name
    for suffix in (".run.gz", ".run", ".gz"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return Path(path).stem


def is_run_file(path: Path) -> bool:
    return Path(path).name.endswith((".run", ".run.gz"))


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """The lines of a run file (gzipped ones are read as they are, whatever their name): decoded at once when
    valid UTF-8 (fast), else line by line (to name the line)."""
    data = read_bytes(path, "run file")
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise ApcirError(f"run file is a damaged gzip file ({exc})", path=path) from None
    yield from enumerate(decode(data, path, "run file").splitlines(), start=1)


def load_run(path: Path) -> Run:
    """The scores of a run file (see :func:`read_run_file`)."""
    return read_run_file(path).run


def write_run(run: Run, path: Path, tag: str = "apcir", depth: int | None = None) -> Run:
    """Write a TREC run atomically: turns sorted, hits in the ranking order (cut at ``depth``), ranks from 1.

    A path ending in ``.gz`` is written gzipped (reproducibly: no time stamp in the header). Returns the run as
    written (each turn cut at ``depth``, in the ranking order).
    """
    if any(c.isspace() for c in tag) or not tag:
        raise ApcirError(f"run tag {tag!r} must be one non-empty word")
    written: Run = {}
    compressed = Path(path).name.endswith(".gz")
    with atomic_write(path, "wb" if compressed else "w") as handle:
        out: Any = (gzip.GzipFile(fileobj=handle, mode="wb", compresslevel=GZIP_LEVEL, mtime=0, filename="")
                    if compressed else handle)
        for turn_id in sorted(run):
            hits = ranking(run[turn_id], depth)
            written[turn_id] = dict(hits)
            text = "".join([f"{turn_id} Q0 {passage} {rank} {score!r} {tag}\n"
                            for rank, (passage, score) in enumerate(hits, start=1)])
            out.write(text.encode("utf-8") if compressed else text)
        if compressed:
            out.close()
    return written


def validate_run(run_file: RunFile, known_turns: set[str] | None = None) -> list[str]:
    """Every problem of a run: duplicates, rank/score disagreement and, given the topics, unknown turns."""
    problems = list(run_file.problems)
    if known_turns is not None:
        unknown = sorted(set(run_file.run) - known_turns)
        if unknown:
            listed = shown(unknown)
            problems.append(f"{len(unknown)} turn(s) not in the topics: {listed}")
    return problems


def _rank_problems(turn_id: str, scores: dict[str, float], ranks: dict[str, int]) -> list[str]:
    """The first place where the stated ranks contradict the scores (compared as trec_eval compares them)."""
    passages = list(scores)
    stated = np.fromiter((ranks[p] for p in passages), dtype=np.int64, count=len(passages))
    values = np.fromiter((scores[p] for p in passages), dtype=np.float64, count=len(passages)).astype(np.float32)
    order = np.argsort(stated, kind="stable")
    by_rank = values[order]
    broken = np.flatnonzero(by_rank[:-1] < by_rank[1:])
    if broken.size:
        higher, lower = passages[order[broken[0]]], passages[order[broken[0] + 1]]
        return [
            f"turn {turn_id}: ranks disagree with scores (rank {ranks[higher]} {higher} "
            f"scores {scores[higher]} < rank {ranks[lower]} {lower} scores {scores[lower]})"
        ]
    if np.unique(stated).size != stated.size:
        return [f"turn {turn_id}: repeated ranks"]
    return []
