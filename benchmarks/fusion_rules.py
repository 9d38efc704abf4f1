"""Benchmark of the weight-selection rules: out-of-fold nDCG@3 on the demo, over several fold assignments.

The demo's single 5-fold split (seed 0) is one draw; this reruns the cross-validation of every rule on the
demo's lists with fold seeds 0..S-1 (one grid search serves all), under the reformulator's levels and the
annotators' (the oracle), and prints each rule's mean and per-seed numbers. It runs the demo first when
the run directory does not exist.

    .venv/bin/python benchmarks/fusion_rules.py [--run-dir runs/demo] [--seeds 5]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", default="runs/demo")
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()

    from rich.console import Console
    from rich.table import Table

    from apcir import datasets
    from apcir.contract.levels import annotator_levels, load_levels
    from apcir.contract.runs import load_run
    from apcir.experiment.config import load_config, resolve_config_path
    from apcir.experiment.pipeline import run_experiment
    from apcir.fusion.grid import GridSearch
    from apcir.fusion.selection import SelectionRule
    from apcir.fusion.tuning import cross_validate, objective_measures, tuning_turns

    run_dir = Path(args.run_dir)
    config = load_config(resolve_config_path("demo"))
    if not (run_dir / "levels.tsv").exists():
        run_experiment(config.model_copy(update={"output_dir": str(run_dir)}), progress=False)
    lists = [load_run(run_dir / "lists" / f"{n}.run") for n in ("rewrite", "rewrite_response", "third")]
    qrels = datasets.qrels(str(config.evaluation.qrels))
    turns = tuning_turns(lists, qrels)
    search = GridSearch(lists, qrels, turns, objective_measures("paper"), step=0.01)
    policies = {"reformulator (heuristic)": load_levels(run_dir / "levels.tsv"),
                "annotators (oracle)": annotator_levels(datasets.topics(config.topics))}
    rules = {"apcir (λ = 0, argmax)": SelectionRule(), "apcir-shrunk (λ by inner CV)": SelectionRule(shrinkage="cv"),
             "apcir-plateau": SelectionRule(select="plateau"),
             "shrunk + plateau": SelectionRule(shrinkage="cv", select="plateau")}
    seeds = range(args.seeds)
    console = Console()
    table = Table(title=f"out-of-fold nDCG@3 x100 on the demo ({len(turns)} judged turns), 5 folds by conversation, "
                        f"fold seeds 0-{args.seeds - 1}")
    table.add_column("levels")
    table.add_column("rule")
    table.add_column("mean", justify="right")
    table.add_column("per seed", justify="right")

    def row(policy: str, label: str, levels: dict[str, str], rule: SelectionRule) -> None:
        values = [100 * cross_validate(lists, levels, qrels, 5, seed, 0.01, "paper", search=search,
                                       rule=rule).evaluation.measures["nDCG@3"] for seed in seeds]
        table.add_row(policy, label, f"{np.mean(values):.2f}", " ".join(f"{v:.1f}" for v in values))

    row("-", "no-levels (one vector)", dict.fromkeys(turns, "a"), SelectionRule())
    for policy, levels in policies.items():
        for label, rule in rules.items():
            row(policy, label, levels, rule)
    console.print(table)


if __name__ == "__main__":
    main()
