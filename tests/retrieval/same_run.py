"""Two runs of the same search on two engines: equal up to float rounding and the order of tied scores."""

from __future__ import annotations


def assert_same_run(theirs: dict, ours: dict, rel: float = 1e-6) -> int:
    """Same turns, same passages at every depth; scores equal up to ``rel`` (relative); the order differs only
    between passages whose scores are equal up to that rounding. Returns the number of turns ordered
    differently."""
    assert theirs.keys() == ours.keys()
    reordered = 0
    for turn, hits in ours.items():
        other = theirs[turn]
        assert set(other) == set(hits), turn
        for pid, score in hits.items():
            assert abs(other[pid] - score) <= rel * abs(score), (turn, pid)
        if list(other) != list(hits):
            reordered += 1
            for a, b in zip(other, hits):
                if a != b:  # a swap: both scores equal up to rounding
                    assert abs(hits[a] - hits[b]) <= 2 * rel * abs(hits[b]), (turn, a, b)
    return reordered


def assert_same_ranking(theirs: dict, ours: dict, tolerance: float) -> tuple[int, float]:
    """Equal up to float ties, for a run cut at depth k: at every rank both score sequences agree within
    ``tolerance`` (absolute), a passage in both has the same score within it, and a passage only one run holds
    scores within it of the cut (it tied with the last passage the other run kept). Returns the number of turns
    whose passages or order differ at all, and the largest score difference seen."""
    assert theirs.keys() == ours.keys()
    differ, largest = 0, 0.0
    for turn, hits in ours.items():
        other = theirs[turn]
        assert len(other) == len(hits), turn
        mine, yours = sorted(hits.values(), reverse=True), sorted(other.values(), reverse=True)
        for rank, (a, b) in enumerate(zip(mine, yours)):
            assert abs(a - b) <= tolerance, (turn, rank, a, b)
            largest = max(largest, abs(a - b))
        for pid in set(hits) & set(other):
            assert abs(hits[pid] - other[pid]) <= tolerance, (turn, pid)
        for run, cut in ((hits, yours[-1] if yours else 0.0), (other, mine[-1] if mine else 0.0)):
            for pid in set(hits) ^ set(other):
                if pid in run:
                    assert abs(run[pid] - cut) <= tolerance, (turn, pid, run[pid], cut)
        if list(other) != list(hits):
            differ += 1
    return differ, largest
