"""Benchmark: the full step-0.01 weight search vs the reference approach (ranx wsum + evaluate per point).

Synthetic data shaped like iKAT-23: 176 turns in 25 conversations, three
lists of 1000 passages per turn (correlated scores over a pool of ~2000
passages), ~190 judged passages per turn (grades 0-4), levels spread over
a/b/c. Prints a table; no assertion on times (targets: full search < 5 s on
2 cores, >= 100x faster than the ranx loop).

    .venv/bin/python benchmarks/fusion.py [--sample 8] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def synthetic_ikat(seed: int = 0, turns: int = 176, depth: int = 1000, judged: int = 190):
    """Three runs, qrels and levels shaped like iKAT-23."""
    rng = np.random.default_rng(seed)
    runs: list[dict[str, dict[str, float]]] = [{}, {}, {}]
    qrels: dict[str, dict[str, int]] = {}
    levels: dict[str, str] = {}
    conversations = 25
    for t in range(turns):
        turn = f"{t % conversations + 1}-1_{t // conversations + 1}"
        pool = 2 * depth
        ids = np.array(
            [
                f"clueweb22-en{rng.integers(0, 99):04d}-{rng.integers(0, 99):02d}-{i:05d}"
                for i in range(pool)
            ]
        )
        latent = rng.normal(size=pool)
        for r, run in enumerate(runs):
            noisy = latent + rng.normal(scale=0.8 + 0.2 * r, size=pool)
            top = np.argsort(-noisy)[:depth]
            run[turn] = {str(ids[i]): float(20 + 3 * noisy[i]) for i in top}
        judged_idx = rng.choice(np.argsort(-latent)[: pool // 2], size=judged, replace=False)
        grades = np.clip(
            np.round(latent[judged_idx] - 0.3 + rng.normal(scale=0.8, size=judged)), 0, 4
        ).astype(int)
        qrels[turn] = {str(ids[i]): int(g) for i, g in zip(judged_idx, grades)}
        levels[turn] = "abc"[int(rng.choice(3, p=[0.3, 0.4, 0.3]))]
    return runs, qrels, levels


def ranx_point(runs, qrels_ranx, weights, depth):
    from ranx import evaluate, fuse

    fused = fuse(runs=runs, norm="min-max", method="wsum", params={"weights": list(weights)})
    # the reference code evaluates the four paper measures per point
    return evaluate(qrels_ranx, fused, ["mrr@1000", "ndcg@3", "recall@10", "recall@100"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=8, help="grid points timed with ranx")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step", default="0.01")
    args = parser.parse_args()

    import numba
    from rich.console import Console
    from rich.table import Table

    from apcir.fusion.grid import GridSearch, divisions, simplex_points
    from apcir.fusion.selection import SelectionRule
    from apcir.fusion.tuning import tune_weights
    from apcir.metrics import parse_measures

    console = Console()
    t0 = time.perf_counter()
    runs, qrels, levels = synthetic_ikat(args.seed)
    t_data = time.perf_counter() - t0
    n_points = len(simplex_points(divisions(args.step), 3))
    measures = parse_measures("paper")

    # numba compiles (or loads its on-disk cache) on first use: time a tiny search first, separately.
    t0 = time.perf_counter()
    tiny = sorted(qrels)[:2]
    GridSearch(runs, {t: qrels[t] for t in tiny}, tiny, measures, step=0.5)
    t_compile = time.perf_counter() - t0

    t0 = time.perf_counter()
    weights = tune_weights(runs, levels, qrels, step=args.step)
    t_full = time.perf_counter() - t0

    # apcir tune with and without the inner CV for λ (and the bootstrap evidence), each a full tune: search + choice
    variants = {
        "paper rule (λ = 0, argmax), no evidence": SelectionRule(bootstrap=0),
        "λ by inner CV (5 folds, 9 values), no evidence": SelectionRule(shrinkage="cv", bootstrap=0),
        "plateau (paired bootstrap SE), no evidence": SelectionRule(select="plateau", bootstrap=0),
        "paper rule + evidence (B = 1000)": SelectionRule(),
        "λ by inner CV + plateau + evidence (B = 1000)": SelectionRule(shrinkage="cv", select="plateau"),
    }
    timed: dict[str, float] = {}
    for label, rule in variants.items():
        t0 = time.perf_counter()
        tune_weights(runs, levels, qrels, step=args.step, rule=rule, with_evidence=rule.bootstrap > 0)
        timed[label] = time.perf_counter() - t0

    # reference: ranx fuse(wsum) + evaluate on a sample of points, per point
    from ranx import Qrels as RQrels
    from ranx import Run as RRun

    ranx_runs = [RRun(r) for r in runs]
    ranx_qrels = RQrels(qrels)
    rng = np.random.default_rng(args.seed)
    points = simplex_points(divisions(args.step), 3)[
        rng.choice(n_points, size=args.sample, replace=False)
    ]
    points = points / divisions(args.step)
    ranx_point(ranx_runs, ranx_qrels, points[0], 1000)  # warm-up (ranx's own numba compile)
    t0 = time.perf_counter()
    for w in points:
        ranx_point(ranx_runs, ranx_qrels, w, 1000)
    per_point = (time.perf_counter() - t0) / len(points)
    # the reference searches each level separately over its own turns: one pass over all turns per point
    ranx_full = per_point * n_points

    table = Table(
        title=f"fusion weight search, step {args.step} ({n_points} points), 3 levels, 176 turns"
    )
    table.add_column("what")
    table.add_column("seconds", justify="right")
    table.add_row("synthetic data (176 turns x 3 lists x 1000, ~190 judged/turn)", f"{t_data:.2f}")
    table.add_row("numba compile / cache load (once per process)", f"{t_compile:.2f}")
    table.add_row("apcir tune_weights: full search, 3 levels + all-turns", f"{t_full:.2f}")
    table.add_row(
        f"ranx fuse(wsum)+evaluate, per point (mean of {len(points)})", f"{per_point:.3f}"
    )
    table.add_row(f"ranx, extrapolated to {n_points} points", f"{ranx_full:.0f}")
    table.add_row("speed-up (ranx extrapolated / apcir full search)", f"{ranx_full / t_full:.0f}x")
    console.print(table)
    base = next(iter(timed.values()))
    rules = Table(title="apcir tune (search + choice of the points), by selection rule, same data, same process")
    rules.add_column("rule")
    rules.add_column("seconds", justify="right")
    rules.add_column("vs the paper rule", justify="right")
    for label, seconds in timed.items():
        rules.add_row(label, f"{seconds:.2f}", f"{seconds / base:.2f}x")
    console.print(rules)
    console.print(
        f"cores: {os.cpu_count()}, numba threads: {numba.get_num_threads()}; "
        + ", ".join(f"{lv}: {w.weights} ({w.n_turns} turns)" for lv, w in weights.levels.items())
    )


if __name__ == "__main__":
    main()
