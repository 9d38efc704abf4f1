"""Small random runs/qrels/levels for the fusion tests (importable helper, not a test module)."""

from __future__ import annotations

import random


def random_case(seed: int, *, ties: bool = False, turns: int = 12, lists: int = 3):
    """Runs over overlapping pools, qrels with grades -1..3, levels a/b/c; some turns miss lists/judgements."""
    rng = random.Random(seed)
    runs: list[dict[str, dict[str, float]]] = [{} for _ in range(lists)]
    qrels: dict[str, dict[str, int]] = {}
    levels: dict[str, str] = {}
    for t in range(turns):
        turn = f"{t % 4 + 1}-1_{t // 4 + 1}"
        pool = sorted({f"d{rng.randint(0, 99):03d}" for _ in range(80)})
        for run in runs:
            if rng.random() < 0.95:
                hits = rng.sample(pool, rng.randint(1, 30))
                run[turn] = {
                    p: (float(rng.randint(0, 3)) if ties else rng.random() * 10) for p in hits
                }
        if rng.random() < 0.9:
            qrels[turn] = {p: rng.choice([-1, 0, 0, 1, 2, 3]) for p in rng.sample(pool, 25)}
        levels[turn] = "abc"[t % 3]
    return runs, qrels, levels
