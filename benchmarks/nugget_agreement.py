"""Nugget matchers against people, on the iKAT 2024 human study as published (irlabamsterdam/CONE-RAG, which has
no licence file: apcir bundles none of it; give the path of your copy's ``resources`` folder).

1. ``--aliases``: the evidence for the alias table (apcir.evaluation.nuggets.labels.CONE_RAG_ALIASES). For each of
   the labels file's run aliases and each of the 19 runs, the log-likelihood of the alias's labels when the
   worker read that run's responses, under a logistic label-vs-signal curve fitted on the *other* aliases'
   labels (each with its best run); once with lexical overlap, once with embedding similarity, and once with
   both. Printed: the best run, its margin over the second, the share of turns that favour it and how often it
   stays first when turns are resampled (bootstrap).
2. The agreement table: κ, accuracy, precision and recall (out-of-fold, 95% intervals over turns) of lexical,
   embedding and learned (nested cross-validation), the spread of κ over ``--splits`` fold splits, and the τ
   each thresholded matcher's CV chooses (median over the splits: the defaults in nugget_registry.MATCHERS).
3. The 19 runs ranked by nugget recall (``gold_nuggets_human_deduplicated.json``) under each matcher, on the 25
   labelled turns and on all 79 turns with responses; Kendall's τ between the matchers' orderings; and, on the 6
   labelled runs, each matcher's ordering against people's (share of labelled nuggets covered).
   learned's scores of a labelled turn come from a model trained without that turn; of the other turns, from a
   model trained on all 25.

    .venv/bin/python benchmarks/nugget_agreement.py --resources PATH/CONE-RAG/resources [--aliases] [--splits 10]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resources", type=Path, required=True, help="CONE-RAG's resources folder (your copy)")
    parser.add_argument("--aliases", action="store_true", help="print the evidence for the alias table")
    parser.add_argument("--no-agreement", action="store_true", help="skip the agreement table (section 2)")
    parser.add_argument("--no-leaderboards", action="store_true", help="skip the leaderboards (section 3)")
    parser.add_argument("--splits", type=int, default=10, help="random fold splits for the spread of κ")
    parser.add_argument("--encoder", default="minilm", help="bi-encoder of the embedding signal")
    args = parser.parse_args()

    from rich.console import Console

    from apcir.evaluation.nuggets.features import FEATURES, pair_features
    from apcir.evaluation.nuggets.gold import load_nuggets, load_response_runs
    from apcir.evaluation.nuggets.labels import load_labels

    console = Console()
    human_dir, runs_dir = args.resources / "human_resources", args.resources / "participant_resources"
    labels_path = human_dir / "human-study-matching-labels.txt"
    human = load_labels(labels_path)
    gold = load_nuggets(human_dir / "gold_nuggets_human.json")
    dedup = load_nuggets(human_dir / "gold_nuggets_human_deduplicated.json")
    runs = load_response_runs([runs_dir / "automatic_responses.json"])
    names = sorted(runs)
    index = {(n.turn_id, n.nugget_id): n for items in gold.by_turn.values() for n in items}
    overlap, cosine = FEATURES.index("overlap"), FEATURES.index("cosine")

    if args.aliases:
        rows = [r for r in human.rows if (r.turn_id, r.nugget_id) in index]
        started = time.perf_counter()
        signals = pair_features([(index[(r.turn_id, r.nugget_id)], runs[run][r.turn_id]) for r in rows
                                 for run in names], args.encoder).reshape(len(rows), len(names), len(FEATURES))
        console.print(f"signals of {len(rows)} labels x {len(names)} runs: {time.perf_counter() - started:.0f} s")
        _alias_evidence(console, rows, names, human, {"lexical": [overlap], "embedding": [cosine],
                                                      "lexical + embedding": [overlap, cosine]}, signals)

    if not args.no_agreement:
        _agreement_table(console, gold, runs, human, args)
    if args.no_leaderboards:
        return
    _leaderboards(console, gold, dedup, runs, human, index, args)


def _agreement_table(console, gold, runs, human, args) -> None:  # type: ignore[no-untyped-def]
    from rich.table import Table

    from apcir.evaluation.nuggets.agreement import agreement
    from apcir.evaluation.nuggets.settings import MatcherSettings

    table = Table(title=f"matchers against {len(human.rows)} human labels (5-fold CV over turns, out-of-fold; "
                        f"κ spread over {args.splits} splits)")
    for column in ("matcher", "Cohen's κ [95%]", "κ over splits (min-median-max)", "accuracy", "precision",
                   "recall", "seconds"):
        table.add_column(column, justify="left" if column == "matcher" else "right")
    settings = MatcherSettings.model_validate({"matcher": "embedding", "encoder": args.encoder})
    reports = {}
    for matcher in ("lexical", "embedding", "learned"):
        started = time.perf_counter()
        report = agreement(gold, runs, human, matcher, settings, splits=args.splits)
        reports[matcher] = report
        s = report.spread
        table.add_row(matcher, _fig(report.kappa), f"{s.low:.3f} - {s.median:.3f} - {s.high:.3f}" if s else "-",
                      _fig(report.accuracy), _fig(report.precision), _fig(report.recall),
                      f"{time.perf_counter() - started:.0f}")
    console.print(table)
    for matcher, report in reports.items():
        for alt in report.alternatives:
            console.print(f"  {matcher}: {alt.alias} read as {alt.run}: κ {_fig(alt.kappa)}")
    console.print(f"unmapped: {reports['lexical'].unmapped}")


def _leaderboards(console, gold, dedup, runs, human, index, args) -> None:  # type: ignore[no-untyped-def]
    from rich.table import Table
    from scipy.stats import kendalltau

    from apcir.evaluation.nuggets import cv
    from apcir.evaluation.nuggets.features import FEATURES, pair_features
    from apcir.evaluation.nuggets.gold import NuggetSet
    from apcir.evaluation.nuggets.learned import choose_settings, fit_logistic, nested_cv
    from apcir.evaluation.nuggets.registry import MATCHERS
    from apcir.evaluation.nuggets.scores import run_scores

    names = sorted(runs)
    overlap, cosine = FEATURES.index("overlap"), FEATURES.index("cosine")
    # the labelled pairs' signals (primary mapping): default τ and the people-vs-matcher orderings
    resolved, _ = human.resolved()
    kept = [lab for lab in resolved if (lab[0], lab[2]) in index and lab[0] in runs.get(lab[1], {})]
    labelled = pair_features([(index[(t, n)], runs[r][t]) for t, r, n, _ in kept], args.encoder)
    truth = np.array([lab[3] == 1 for lab in kept])
    turns = [lab[0] for lab in kept]
    taus: dict[str, list[float]] = {"lexical": [], "embedding": []}
    for split in range(args.splits):
        fold = cv.row_folds(turns, 5, split)
        for matcher, column in (("lexical", overlap), ("embedding", cosine)):
            for j in range(5):
                taus[matcher].append(cv.best_tau(labelled[fold != j, column], truth[fold != j]))
    for matcher, values in taus.items():
        console.print(f"τ chosen on the training folds, {matcher}: median {np.median(values):.3f} (range "
                      f"{min(values):.3f} to {max(values):.3f}, {len(values)} folds); default in apcir: "
                      f"{MATCHERS.get(matcher).default_tau}")

    # 3. leaderboards
    labelled_turns = sorted(set(turns))
    response_turns = sorted({t for r in runs.values() for t in r})
    fold_of = dict(zip(turns, cv.row_folds(turns, 5, 0)))
    models = {}
    for j in range(5):
        train = np.array([fold_of[t] != j for t in turns])
        lam, tau, _ = choose_settings(labelled[train], truth[train], [t for t, k in zip(turns, train) if k])
        models[j] = (fit_logistic(labelled[train], truth[train], lam), tau)
    lam, tau_all, _ = choose_settings(labelled, truth, turns)
    models[-1] = (fit_logistic(labelled, truth, lam), tau_all)
    pairs, where = [], []
    for turn in response_turns:
        for nugget in dedup.by_turn.get(turn, []):
            for run in names:
                if turn in runs[run]:
                    pairs.append((nugget, runs[run][turn]))
                    where.append((run, turn))
    started = time.perf_counter()
    features = pair_features(pairs, args.encoder)
    console.print(f"signals of {len(pairs)} (nugget, response) pairs for the leaderboards: "
                  f"{time.perf_counter() - started:.0f} s")
    learned = np.zeros(len(pairs))
    for i, (_, turn) in enumerate(where):
        model, tau = models[fold_of.get(turn, -1)]
        learned[i] = float(model.predict(features[i:i + 1])[0]) - tau + 0.5  # covered at >= 0.5
    matcher_scores = {"lexical": (features[:, overlap], MATCHERS.get("lexical").default_tau),
                      "embedding": (features[:, cosine], MATCHERS.get("embedding").default_tau),
                      "learned": (learned, 0.5)}
    for title, chosen in (("the 25 labelled turns", labelled_turns), ("all 79 turns with responses",
                                                                       response_turns)):
        subset = NuggetSet(name="dedup", by_turn={t: dedup.by_turn[t] for t in chosen if t in dedup.by_turn})
        recall: dict[str, dict[str, float]] = {}
        for matcher, (scores, tau) in matcher_scores.items():
            per_run: dict[str, dict[str, list[float | None]]] = {r: {} for r in names}
            for (run, turn), value in zip(where, scores):
                if turn in subset.by_turn:
                    per_run[run].setdefault(turn, []).append(float(value))
            recall[matcher] = {r: run_scores(r, subset, per_run[r], float(tau or 0)).recall for r in names}
        board = Table(title=f"19 runs by nugget recall x100 on {title} ({sum(len(v) for v in subset.by_turn.values())}"
                            " deduplicated nuggets); rank in brackets")
        board.add_column("run")
        for matcher in recall:
            board.add_column(matcher, justify="right")
        ranks = {m: {r: i + 1 for i, r in enumerate(sorted(names, key=lambda r: (-v[r], r)))}
                 for m, v in recall.items()}
        for run in sorted(names, key=lambda r: ranks["learned"][r]):
            board.add_row(run, *(f"{100 * recall[m][run]:.1f} ({ranks[m][run]})" for m in recall))
        console.print(board)
        matchers = list(recall)
        for i, a in enumerate(matchers):
            for b in matchers[i + 1:]:
                result = kendalltau([recall[a][r] for r in names], [recall[b][r] for r in names])
                shift = max(abs(ranks[a][r] - ranks[b][r]) for r in names)
                console.print(f"  Kendall's τ {a} vs {b}: {result.statistic:.3f} (p = {result.pvalue:.2g}); largest "
                              f"rank change {shift}")

    # people's ordering of the 6 labelled runs (share of their labelled nuggets covered) vs each matcher's
    nested = nested_cv(labelled, truth, turns).decisions
    decisions = {"lexical": labelled[:, overlap] >= MATCHERS.get("lexical").default_tau,
                 "embedding": labelled[:, cosine] >= MATCHERS.get("embedding").default_tau, "learned": nested}
    labelled_runs = sorted({lab[1] for lab in kept})
    people = [float(np.mean([truth[i] for i, lab in enumerate(kept) if lab[1] == r])) for r in labelled_runs]
    console.print("people, labelled runs: " + ", ".join(f"{r} {100 * p:.0f}%" for r, p in zip(labelled_runs, people)))
    for matcher, said in decisions.items():
        shares = [float(np.mean([said[i] for i, lab in enumerate(kept) if lab[1] == r])) for r in labelled_runs]
        result = kendalltau(people, shares)
        console.print(f"  {matcher} on the same labelled pairs: Kendall's τ with people over {len(labelled_runs)} "
                      f"runs {result.statistic:.3f}")


def _fig(figure) -> str:  # type: ignore[no-untyped-def]
    return str(figure.text())


def _alias_evidence(console, rows, names, human, signals_by_name, signals) -> None:  # type: ignore[no-untyped-def]
    from rich.table import Table
    from scipy.optimize import minimize

    y = np.array([r.label for r in rows], dtype=float)
    alias = np.array([r.source for r in rows])
    turn = np.array([r.turn_id for r in rows])
    table = Table(title="which run's responses explain each alias's labels (curve fitted on the other aliases)")
    for column in ("signal", "alias", "best run", "Δ log-lik over 2nd", "2nd run", "turns favouring", "bootstrap",
                   "table's first"):
        table.add_column(column)
    rng = np.random.default_rng(0)
    for name, columns in signals_by_name.items():
        for a in sorted(set(alias)):
            mine = alias == a
            first = human.aliases.get(a, ("?",))[0]
            best = {b: human.aliases.get(b, ("?",))[0] for b in set(alias)}
            x = np.array([signals[i, names.index(best[alias[i]]), columns] if best[alias[i]] in names
                          else np.zeros(len(columns)) for i in range(len(rows))])
            train = ~mine
            design = np.column_stack([np.ones(train.sum()), x[train]])

            def loss(w, design=design, target=y[train]):  # type: ignore[no-untyped-def]
                z = design @ w
                return float((np.logaddexp(0, z) - target * z).sum())

            w = minimize(loss, np.zeros(design.shape[1])).x
            z = w[0] + signals[mine][:, :, columns] @ w[1:]
            loglik = y[mine][:, None] * z - np.logaddexp(0, z)
            totals = loglik.sum(axis=0)
            order = np.argsort(-totals)
            one, two = order[0], order[1]
            turns = sorted(set(turn[mine]))
            per_turn = np.array([loglik[turn[mine] == t][:, [one, two]].sum(axis=0) for t in turns])
            wins = np.mean([per_turn[rng.integers(0, len(turns), len(turns))].sum(axis=0).argmax() == 0
                            for _ in range(2000)])
            table.add_row(name, a, names[one], f"{totals[one] - totals[two]:.1f}", names[two],
                          f"{int((per_turn[:, 0] > per_turn[:, 1]).sum())}/{len(turns)}", f"{wins:.2f}",
                          "yes" if names[one] == first else f"no ({first})")
    console.print(table)


if __name__ == "__main__":
    main()
