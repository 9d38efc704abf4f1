"""``apcir tune``, ``apcir fuse`` and ``apcir baseline``: per-level fusion weights and fused runs."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from apcir import datasets
from apcir.cli.common import console, err_console, means_table, print_json
from apcir.errors import ApcirError
from apcir.evaluation import evaluate
from apcir.export.trec import read_run_file, write_run
from apcir.models import Qrels, Run

_EXTRA = {"allow_extra_args": True}
_RUNS_HELP = "The run files to fuse, in weight order (q', q'+r', third): --runs A B C."


def _runs(
    ctx: typer.Context, first: list[Path], expected: int | None = None
) -> tuple[list[Run], list[str]]:
    """Run files from ``--runs A B C`` (click leaves B and C as extra arguments) or repeated ``--runs``."""
    extra = list(ctx.args)
    unknown = [a for a in extra if a.startswith("-")]
    if unknown:
        raise ApcirError(f"unknown option(s): {' '.join(unknown)}")
    paths = list(first) + [Path(a) for a in extra]
    if expected is not None and len(paths) != expected:
        raise ApcirError(
            f"--runs: the weights file has {expected} weights per level, but {len(paths)} run(s) were given"
        )
    if len(paths) < 2:
        raise ApcirError(f"--runs needs at least 2 run files (the paper fuses 3), got {len(paths)}")
    runs = []
    for path in paths:
        run_file = read_run_file(path)
        for problem in run_file.problems:
            err_console.print(f"[yellow]warning:[/] {path}: {problem}", highlight=False)
        runs.append(run_file.run)
    return runs, [str(p) for p in paths]


def _warn_alignment(runs: list[Run], names: list[str], strict: bool) -> None:
    from apcir.fusion.linear import align_runs

    message = align_runs(runs, strict=strict, names=names).describe(names)
    if message:
        err_console.print(f"[yellow]warning:[/] {message}", highlight=False, soft_wrap=True)


def _weights_table(title: str, weights, show_scores: bool = True) -> Table:  # type: ignore[no-untyped-def]
    table = Table(title=title)
    table.add_column("level")
    for i in range(len(next(iter(weights.levels.values())).weights)):
        table.add_column(f"w{i + 1}", justify="right")
    table.add_column("turns", justify="right")
    if show_scores:
        table.add_column("objective", justify="right")
        for name in weights.objective:
            table.add_column(name, justify="right")
    table.add_column("note")
    rows = list(weights.levels.items())
    if weights.all_turns is not None:
        rows.append(("all (no levels)", weights.all_turns))
    for level, lw in rows:
        cells = [level, *(f"{w:.2f}" for w in lw.weights), str(lw.n_turns)]
        if show_scores:
            cells.append("" if lw.score is None else f"{lw.score:.4f}")
            cells.extend(
                f"{lw.measures[n]:.4f}" if n in lw.measures else "" for n in weights.objective
            )
        cells.append("fallback: " + lw.note if lw.fallback else "")
        table.add_row(*cells)
    return table


def tune_command(
    ctx: typer.Context,
    runs: list[Path] = typer.Option(..., "--runs", "-r", help=_RUNS_HELP),
    levels: Path = typer.Option(
        ..., "--levels", help="Levels: TSV 'turn_id<TAB>level' or the reformulations JSONL."
    ),
    qrels: str = typer.Option(
        ..., "--qrels", "--tune-on", "-q", help="Qrels to tune on: bundled name or file."
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Where to write weights.json."),
    step: str = typer.Option(
        "0.01", "--step", help="Grid step; must divide 1 (0.01 = 5151 points for 3 runs)."
    ),
    objective: list[str] = typer.Option(
        ["paper"],
        "--objective",
        help="Measure(s) to maximise, summed: 'paper' (MRR+nDCG@3+Recall@10+Recall@100), nDCG@3, ...",
    ),
    norm: str = typer.Option(
        "minmax", "--norm", help="Per-list normalisation: minmax, max, zscore, none."
    ),
    depth: int = typer.Option(1000, "--depth", help="Fused run depth (the cut is evaluated too)."),
    rel_threshold: int = typer.Option(
        1, "--rel-threshold", "-l", help="Lowest grade counted relevant."
    ),
    missing_level: str | None = typer.Option(
        None, "--missing-level", help="Level for judged turns the levels file lacks."
    ),
    no_personalisation: bool = typer.Option(
        False, "--no-personalisation", help="Ablation: keep the last weight at 0."
    ),
    strict: bool = typer.Option(False, "--strict", help="A turn missing from any run is an error."),
    cv: int = typer.Option(
        0, "--cv", help="k-fold cross-validation by conversation (reports out-of-fold metrics)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the fold assignment."),
    cv_run: Path | None = typer.Option(
        None, "--cv-run", help="With --cv: write the out-of-fold fused run here."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Tune per-level fusion weights by exhaustive, exact grid search (optionally with k-fold CV)."""
    from apcir.fusion.levels import load_levels
    from apcir.fusion.tuning import cross_validate, no_third, tune_weights

    run_list, names = _runs(ctx, runs)
    _warn_alignment(run_list, names, strict)
    judgements = datasets.qrels(qrels)
    level_map = load_levels(levels)
    constraint = no_third if no_personalisation else None
    weights = tune_weights(
        run_list,
        level_map,
        judgements,
        step,
        objective,
        norm,
        depth,
        rel_threshold=rel_threshold,
        missing_level=missing_level,
        constraint=constraint,
        progress=not as_json,
        qrels_name=qrels,
        run_names=names,
        levels_name=str(levels),
    )
    weights.save(out)
    result = None
    if cv:
        result = cross_validate(
            run_list,
            level_map,
            judgements,
            cv,
            seed,
            step,
            objective,
            norm,
            depth,
            rel_threshold=rel_threshold,
            missing_level=missing_level,
            constraint=constraint,
            progress=not as_json,
        )
        if cv_run is not None:
            write_run(result.run, cv_run, tag="apcir-cv", depth=depth)
    if as_json:
        payload: dict[str, object] = {"weights": weights.model_dump(), "weights_file": str(out)}
        if result is not None:
            payload["cv"] = {
                "k": result.k,
                "seed": result.seed,
                "label": "out-of-fold",
                "measures": result.evaluation.measures,
                "folds": [
                    {
                        "conversations": f.conversations,
                        "test_turns": len(f.test_turns),
                        "weights": {lv: lw.weights for lv, lw in f.weights.levels.items()},
                        "fallback": [lv for lv, lw in f.weights.levels.items() if lw.fallback],
                    }
                    for f in result.folds
                ],
            }
        print_json(payload)
        return
    console.print(
        _weights_table(
            f"weights tuned on {qrels} ({weights.tuned_on.turns} turns, step {step}, objective "
            f"{' + '.join(weights.objective)}); scores are TUNED ON TEST (the turns they were tuned on)",
            weights,
        )
    )
    for level, lw in weights.levels.items():
        if lw.fallback:
            err_console.print(f"[yellow]note:[/] level {level}: {lw.note}", highlight=False)
    console.print(f"weights written to {out}", highlight=False)
    if result is not None:
        table = Table(
            title=f"{cv}-fold cross-validation by conversation (seed {seed}): per-fold weights"
        )
        table.add_column("fold")
        table.add_column("held-out conversations")
        for level in weights.levels:
            table.add_column(level)
        for fold in result.folds:
            table.add_row(
                str(fold.index + 1),
                f"{len(fold.conversations)} ({len(fold.test_turns)} turns)",
                *(
                    "("
                    + ", ".join(f"{w:.2f}" for w in lw.weights)
                    + ")"
                    + (" fallback" if lw.fallback else "")
                    for lw in fold.weights.levels.values()
                ),
            )
        console.print(table)
        metrics = Table(
            title="OUT-OF-FOLD metrics (each turn fused with weights tuned without its conversation)"
        )
        metrics.add_column("measure")
        metrics.add_column("mean", justify="right")
        for name, value in result.evaluation.measures.items():
            metrics.add_row(name, f"{value:.4f}")
        console.print(metrics)
        if cv_run is not None:
            console.print(f"out-of-fold run written to {cv_run}", highlight=False)


def fuse_command(
    ctx: typer.Context,
    runs: list[Path] = typer.Option(..., "--runs", "-r", help=_RUNS_HELP),
    levels: Path = typer.Option(
        ..., "--levels", help="Levels: TSV 'turn_id<TAB>level' or the reformulations JSONL."
    ),
    weights_path: Path = typer.Option(
        ..., "--weights", "-w", help="weights.json from 'apcir tune'."
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Where to write the fused TREC run."),
    tag: str = typer.Option("apcir", "--tag", help="Run tag."),
    missing_level: str | None = typer.Option(
        None, "--missing-level", help="Level for turns the levels file lacks."
    ),
    strict: bool = typer.Option(False, "--strict", help="A turn missing from any run is an error."),
    qrels: str | None = typer.Option(
        None,
        "--qrels",
        "--apply-to",
        "-q",
        help="Also evaluate the fused run on these qrels (labelled held-out or tuned-on-test).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Fuse runs (as many as weights.json has weights per level) with each turn's level weights."""
    from apcir.fusion.levels import load_levels
    from apcir.fusion.linear import fuse_linear
    from apcir.fusion.weights import load_weights

    weights = load_weights(weights_path)
    n_weights = len(next(iter(weights.levels.values())).weights)
    run_list, names = _runs(ctx, runs, expected=n_weights)
    _warn_alignment(run_list, names, strict)
    fused = fuse_linear(
        run_list, load_levels(levels), weights, strict=strict, missing_level=missing_level
    )
    write_run(fused, out, tag=tag, depth=weights.depth)
    payload: dict[str, object] = {"run": str(out), "turns": len(fused)}
    if qrels is not None:
        judgements = datasets.qrels(qrels)
        label, overlap = _label(weights, judgements)
        result = evaluate(fused, judgements, "paper", rel_threshold=weights.rel_threshold)
        payload.update(measures=result.measures, label=label, tuning_turns_evaluated=overlap)
        if not as_json:
            console.print(means_table(f"{out.name} vs {qrels}: {label}", result.measures))
    if as_json:
        print_json(payload)
    else:
        console.print(f"fused run ({len(fused)} turns) written to {out}", highlight=False)


def _label(weights, qrels: Qrels) -> tuple[str, int]:  # type: ignore[no-untyped-def]
    from apcir.fusion.tuning import tuned_on_overlap

    overlap = tuned_on_overlap(weights, qrels)
    if overlap:
        return f"TUNED ON TEST ({overlap} evaluated turns were tuning turns)", overlap
    if overlap is None:
        return "unknown tuning data (weights file does not list its tuning turns)", 0
    return "held-out (no evaluated turn was a tuning turn)", 0


BASELINES = (
    "list1",
    "list2",
    "list3",
    "equal",
    "random",
    "rrf",
    "round-robin",
    "no-personalisation",
    "no-levels",
    "entropy",
    "deps",
)


def baseline_command(
    ctx: typer.Context,
    name: str = typer.Argument(..., help=f"One of: {', '.join(BASELINES)}."),
    runs: list[Path] = typer.Option(..., "--runs", "-r", help=_RUNS_HELP),
    out: Path = typer.Option(..., "--out", "-o", help="Where to write the fused TREC run."),
    levels: Path | None = typer.Option(None, "--levels", help="Levels (no-personalisation)."),
    qrels: str | None = typer.Option(
        None, "--qrels", "--tune-on", "-q", help="Qrels to tune on (no-personalisation, no-levels)."
    ),
    weights_path: Path | None = typer.Option(
        None, "--weights", help="Use the all-turns weights of this file (no-levels)."
    ),
    topics: str | None = typer.Option(None, "--topics", help="Topics with the PTKB (entropy)."),
    reformulations: Path | None = typer.Option(
        None, "--reformulations", help="Reformulations JSONL (deps)."
    ),
    collection: str | None = typer.Option(None, "--collection", help="Passage collection (deps)."),
    encoder: str = typer.Option(
        "tfidf",
        "--encoder",
        help="entropy/deps encoder: tfidf, or a SPLADE model (splade-tiny, naver/splade-v3).",
    ),
    step: str = typer.Option("0.01", "--step"),
    objective: list[str] = typer.Option(["paper"], "--objective"),
    norm: str = typer.Option("minmax", "--norm"),
    depth: int = typer.Option(1000, "--depth"),
    seed: int = typer.Option(0, "--seed", help="Seed of the random baseline."),
    rrf_k: int = typer.Option(60, "--rrf-k"),
    tag: str = typer.Option("", "--tag", help="Run tag (default: the baseline name)."),
) -> None:
    """Write a baseline or ablation run (paper Tables 2 and 4) through the same fusion code."""
    from apcir.fusion import baselines as b
    from apcir.fusion.levels import load_levels
    from apcir.fusion.linear import fuse_linear, fuse_per_turn
    from apcir.fusion.tuning import no_third, tune_weights
    from apcir.fusion.weights import load_weights

    if name not in BASELINES:
        raise ApcirError(f"unknown baseline {name!r}: expected one of {', '.join(BASELINES)}")
    run_list, names = _runs(ctx, runs)
    _warn_alignment(run_list, names, False)
    turns = sorted(set().union(*run_list))
    if name.startswith("list"):
        fused = b.single_list(run_list, int(name[4:]) - 1, norm=norm, depth=depth)
    elif name == "equal":
        fused = b.equal_weights(run_list, norm=norm, depth=depth)
    elif name == "random":
        fused = b.random_fusion(run_list, seed, norm=norm, depth=depth)
    elif name == "rrf":
        fused = b.rrf(run_list, rrf_k, depth)
    elif name == "round-robin":
        fused = b.round_robin(run_list, depth)
    elif name == "no-levels":
        if weights_path is not None:
            wf = load_weights(weights_path)
            if wf.all_turns is None:
                raise ApcirError("weights file has no all-turns weights", path=weights_path)
        else:
            if qrels is None:
                raise ApcirError(
                    "no-levels needs --qrels to tune on (or --weights with all-turns weights)"
                )
            wf = tune_weights(
                run_list,
                dict.fromkeys(turns, "a"),
                datasets.qrels(qrels),
                step,
                objective,
                norm,
                depth,
            )
        assert wf.all_turns is not None
        fused = fuse_per_turn(
            run_list, dict.fromkeys(turns, wf.all_turns.weights), norm=wf.norm, depth=wf.depth
        )
    elif name == "no-personalisation":
        if qrels is None or levels is None:
            raise ApcirError(
                "no-personalisation needs --qrels and --levels (its w1, w2 are tuned per level)"
            )
        level_map = load_levels(levels)
        wf = tune_weights(
            run_list,
            level_map,
            datasets.qrels(qrels),
            step,
            objective,
            norm,
            depth,
            constraint=no_third,
        )
        fused = fuse_linear(run_list, level_map, wf)
    elif name == "entropy":
        if topics is None:
            raise ApcirError("entropy needs --topics (for each conversation's PTKB)")
        by_turn = {t.turn_id: list(t.ptkb.values()) for t in datasets.topics(topics)}
        missing = [t for t in turns if t not in by_turn]
        if missing:
            raise ApcirError(
                f"{len(missing)} turn(s) of the runs are not in {topics}: {', '.join(missing[:10])}"
            )
        weights = b.entropy_weights(
            {t: by_turn[t] for t in turns}, _encoder(encoder), len(run_list)
        )
        fused = fuse_per_turn(run_list, weights, norm=norm, depth=depth)
    else:  # deps
        if reformulations is None or collection is None:
            raise ApcirError(
                "deps needs --reformulations (personalised query) and --collection (passage texts)"
            )
        from apcir.llm.schema import load_reformulations

        records = load_reformulations(reformulations)
        texts = {}
        for turn in turns:
            record = records.get(turn)
            if record is None or record.output is None:
                raise ApcirError(f"turn {turn}: no successful reformulation in {reformulations}")
            texts[turn] = f"{record.output.third_rewrite} {record.output.third_response}".strip()
        passages = {
            p.id: p.contents for p in datasets.iter_collection(datasets.collection_path(collection))
        }
        weights = b.deps_weights(texts, run_list, passages, _encoder(encoder))
        fused = fuse_per_turn(run_list, weights, norm=norm, depth=depth)
    write_run(fused, out, tag=tag or name.replace("-", "_"), depth=depth)
    console.print(f"{name} run ({len(fused)} turns) written to {out}", highlight=False)


def _encoder(name: str):  # type: ignore[no-untyped-def]
    from apcir.fusion.baselines import tfidf_encoder

    if name == "tfidf":
        return tfidf_encoder()
    try:
        from apcir.retrieval.encoder import SpladeEncoder
    except ImportError as exc:  # pragma: no cover - depends on the retrieval extra
        raise ApcirError(
            f"--encoder {name}: the SPLADE encoder is unavailable ({exc}); use --encoder tfidf"
        ) from None
    model = SpladeEncoder(name)
    return lambda texts: model.encode_documents(texts, progress=False).toarray()


def register(app: typer.Typer) -> None:
    app.command("tune", context_settings=_EXTRA)(tune_command)
    app.command("fuse", context_settings=_EXTRA)(fuse_command)
    app.command("baseline", context_settings=_EXTRA)(baseline_command)
