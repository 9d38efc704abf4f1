"""``apcir tune``, ``apcir fuse`` and ``apcir baseline``: per-level fusion weights and fused runs.

Each command builds the fusion stage's inputs from its options and calls the
same functions as ``apcir run`` (:mod:`apcir.fusion.protocol`, :mod:`apcir.fusion.systems`).
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from apcir import datasets
from apcir.cli.common import console, err_console, means_table, print_json, settings
from apcir.contract.records import Run
from apcir.contract.reformulations import LIST_NAMES, load_reformulations
from apcir.contract.runs import read_run_file, write_run
from apcir.contract.weights import WeightsFile, load_weights
from apcir.errors import ApcirError
from apcir.fusion.normalise import norm_help
from apcir.fusion.settings import FusionParams, TuningSettings
from apcir.fusion.systems import PRIMARY, SYSTEMS
from apcir.io import check_writable, refuse_inputs_as_outputs
from apcir.retrieval.precision import DTYPE_HELP, check_dtype

_EXTRA = {"allow_extra_args": True}
_RUNS_HELP = "The run files to fuse, in weight order (q', q'+r', third): --runs A B C."
# `manual` is a retrieval of its own and `qr-fusion` searches the index: `apcir run` builds them
BASELINES = tuple(n for n in SYSTEMS.names() if SYSTEMS.get(n).kind in ("tuned", "fixed") and n != PRIMARY)


def _runs(ctx: typer.Context, first: list[Path], expected: int | None = None) -> tuple[list[Run], list[str]]:
    """Run files from ``--runs A B C`` (click leaves B and C as extra arguments) or repeated ``--runs``."""
    extra = list(ctx.args)
    unknown = [a for a in extra if a.startswith("-")]
    if unknown:
        raise ApcirError(f"unknown option(s): {' '.join(unknown)}")
    paths = list(first) + [Path(a) for a in extra]
    if expected is not None and len(paths) != expected:
        raise ApcirError(f"--runs: the weights file has {expected} weights per level, but {len(paths)} run(s) were given")
    if len(paths) < 2:
        raise ApcirError(f"--runs needs at least 2 run files (the paper fuses 3), got {len(paths)}")
    runs = []
    for path in paths:
        run_file = read_run_file(path)
        for problem in run_file.problems:
            err_console.print(f"[yellow]warning:[/] {path}: {problem}", highlight=False)
        runs.append(run_file.run)
    return runs, [str(p) for p in paths]


def _number(text: str, option: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ApcirError(f"{option}: expected a number or 'cv', got {text!r}") from None


def _same_output(a: Path, b: Path) -> bool:
    return a.expanduser().resolve() == b.expanduser().resolve()


def _warn_alignment(runs: list[Run], names: list[str], strict: bool) -> None:
    from apcir.fusion.linear import align_runs

    message = align_runs(runs, strict=strict, names=names).describe(names)
    if message:
        err_console.print(f"[yellow]warning:[/] {message}", highlight=False, soft_wrap=True)


def _weights_table(title: str, weights: WeightsFile, show_scores: bool = True) -> Table:
    table = Table(title=title)
    table.add_column("level")
    for i in range(weights.n_weights):
        table.add_column(f"w{i + 1}", justify="right")
    table.add_column("turns", justify="right")
    if show_scores:
        table.add_column("objective x100", justify="right")
        for name in weights.objective:
            table.add_column(name, justify="right")
    table.add_column("note")
    rows = list(weights.levels.items())
    if weights.all_turns is not None:
        rows.append(("all (no levels)", weights.all_turns))
    for level, lw in rows:
        cells = [level, *(f"{w:.2f}" for w in lw.weights), str(lw.n_turns)]
        if show_scores:
            cells.append("" if lw.score is None else f"{100 * lw.score:.2f}")
            cells.extend(f"{100 * lw.measures[n]:.2f}" if n in lw.measures else "" for n in weights.objective)
        cells.append("fallback: " + lw.note if lw.fallback else "")
        table.add_row(*cells)
    return table


def _evidence_table(weights: WeightsFile) -> Table | None:
    """The bootstrap evidence of ``weights.json``: each level's weight intervals and how often it beats pooled."""
    evidence = weights.evidence
    if evidence is None:
        return None
    table = Table(title=f"evidence: {evidence.resamples} bootstrap resamples of the tuning turns (seed "
                        f"{evidence.seed}; λ = {evidence.shrinkage:g}, ε as chosen on all turns)")
    table.add_column("level")
    for i in range(weights.n_weights):
        table.add_column(f"w{i + 1} 95% interval", justify="right")
    table.add_column("beats pooled on held-out turns", justify="right")
    table.add_column("ties", justify="right")
    table.add_column("resamples", justify="right")
    for level, item in evidence.levels.items():
        intervals = [f"{low:.2f}-{high:.2f}" for low, high in item.intervals] or [""] * weights.n_weights
        table.add_row(level, *intervals,
                      "" if item.beats_pooled is None else f"{100 * item.beats_pooled:.0f}%",
                      "" if item.ties_pooled is None else f"{100 * item.ties_pooled:.0f}%", str(item.resamples))
    return table


def _selection_line(weights: WeightsFile) -> str:
    chosen = weights.selection
    line = f"λ = {chosen.shrinkage:g} ({chosen.shrinkage_by}); select: {chosen.select}"
    if chosen.select == "plateau":
        line += f", ε: {chosen.epsilon}"
    return line


def tune_command(
    ctx: typer.Context,
    runs: list[Path] = typer.Option(..., "--runs", "-r", help=_RUNS_HELP),
    levels: Path = typer.Option(..., "--levels", help="Levels: TSV 'turn_id<TAB>level', the reformulations JSONL, or annotators:TOPICS (oracle levels from "
                                "the topics' PTKB provenance)."),
    qrels: str = typer.Option(..., "--qrels", "--tune-on", "-q", help="Qrels to tune on: bundled name or file."),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Where to write weights.json (needed unless --cv, which may write only --cv-run)."
    ),
    step: str = typer.Option("0.01", "--step", help="Grid step; must divide 1 (0.01 = 5151 points for 3 runs)."),
    objective: list[str] = typer.Option(
        ["paper"], "--objective",
        help="Measure(s) to maximise, summed: 'paper' (MRR+nDCG@3+Recall@10+Recall@100), nDCG@3, ...",
    ),
    norm: str = typer.Option("minmax", "--norm", help=f"Per-list normalisation: {norm_help()}."),
    depth: int = typer.Option(1000, "--depth", min=1, help="Fused run depth (the cut is evaluated too)."),
    rel_threshold: int = typer.Option(1, "--rel-threshold", "-l", min=1, help="Lowest grade counted relevant."),
    missing_level: str | None = typer.Option(None, "--missing-level", help="Level for judged turns the levels file lacks."),
    min_turns: int = typer.Option(
        1, "--min-turns", min=0, help="A level with fewer tuning turns uses the weights tuned on all turns."
    ),
    no_personalisation: bool = typer.Option(False, "--no-personalisation", help="Ablation: keep the last weight at 0."),
    shrinkage: str = typer.Option(
        "0", "--shrinkage",
        help="λ: level ℓ maximises mean_ℓ(w) + λ·mean_all(w); 0 = the paper's per-level argmax, 'cv' = chosen by an "
             "inner cross-validation by conversation."),
    select: str = typer.Option("argmax", "--select", help="argmax, or plateau: the grid point nearest the centroid "
                                                          "of the points within epsilon of the maximum."),
    epsilon: float | None = typer.Option(
        None, "--epsilon", min=0, help="Plateau width in objective units (default: per point, one bootstrap standard "
                                       "error of its difference from the argmax)."),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=0,
                                  help="Resamples of the tuning turns for the evidence in weights.json (0: none)."),
    strict: bool = typer.Option(False, "--strict", help="A turn missing from any run is an error."),
    cv: int = typer.Option(0, "--cv", help="k-fold cross-validation by conversation (reports out-of-fold metrics)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the fold assignment, the inner CV and the bootstrap."),
    cv_run: Path | None = typer.Option(None, "--cv-run", help="With --cv: write the out-of-fold fused run here."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Tune per-level fusion weights by exhaustive, exact grid search (optionally with k-fold CV)."""
    from apcir.fusion.protocol import FusionInputs, search_for, tune_variants
    from apcir.fusion.tuning import cross_validate, no_third

    if out is None and not cv:
        raise ApcirError("give --out (where to write weights.json), or --cv for out-of-fold metrics only")
    for target, what in ((out, "weights file"), (cv_run, "out-of-fold run")):
        if target is not None:
            check_writable(target, what)  # before the search, so that its result is not lost
    refuse_inputs_as_outputs([out, cv_run], [*runs, *ctx.args, levels, qrels])
    if out is not None and cv_run is not None and _same_output(out, cv_run):
        raise ApcirError("--out and --cv-run name the same file; give two paths")
    params = FusionParams.of(norm=norm, depth=depth, rel_threshold=rel_threshold, missing_level=missing_level)
    run_list, names = _runs(ctx, runs)
    _warn_alignment(run_list, names, strict)
    tuning = settings(TuningSettings, step=step, objective=",".join(objective), min_turns=min_turns,
                      shrinkage=shrinkage if shrinkage == "cv" else _number(shrinkage, "--shrinkage"), select=select,
                      epsilon=epsilon, bootstrap=bootstrap, seed=seed)
    inputs = FusionInputs(lists=run_list, levels=datasets.levels(levels), qrels=datasets.qrels(qrels), qrels_name=qrels,
                          run_names=names, levels_name=str(levels))
    search, _ = search_for(inputs, tuning, params, progress=not as_json)
    variant = "no-personalisation" if no_personalisation else PRIMARY
    weights = tune_variants(inputs, tuning, [variant], params, search=search)[variant]
    if out is not None:
        try:
            weights.save(out)
        except ApcirError:
            print_json(weights.model_dump())  # the search is done: keep its result on stdout
            raise
    result = None
    if cv:
        assert inputs.qrels is not None
        result = cross_validate(
            run_list, inputs.levels, inputs.qrels, cv, seed, tuning.step, tuning.objective, norm, depth,
            rel_threshold=rel_threshold, missing_level=missing_level,
            constraint=no_third if no_personalisation else None, search=search, min_turns=min_turns,
            rule=tuning.rule(),
        )
        if cv_run is not None:
            write_run(result.run, cv_run, tag="apcir-cv", depth=depth)
    if as_json:
        payload: dict[str, object] = {"weights": weights.model_dump(), "weights_file": str(out) if out else None}
        if result is not None:
            payload["cv"] = {
                "k": result.k, "seed": result.seed, "label": "out-of-fold", "measures": result.evaluation.measures,
                "folds": [
                    {"conversations": f.conversations, "test_turns": len(f.test_turns),
                     "weights": {lv: lw.weights for lv, lw in f.weights.levels.items()},
                     "fallback": [lv for lv, lw in f.weights.levels.items() if lw.fallback]}
                    for f in result.folds
                ],
            }
        print_json(payload)
        return
    console.print(_weights_table(
        f"weights tuned on {qrels} ({weights.tuned_on.turns} turns, step {step}, objective "
        f"{' + '.join(weights.objective)}); scores are TUNED ON TEST (the turns they were tuned on)", weights))
    console.print(_selection_line(weights), highlight=False)
    evidence = _evidence_table(weights)
    if evidence is not None:
        console.print(evidence)
    for level, lw in weights.levels.items():
        if lw.fallback:
            err_console.print(f"[yellow]note:[/] level {level}: {lw.note}", highlight=False)
    if out is not None:
        console.print(f"weights written to {out}", highlight=False)
    if result is not None:
        table = Table(title=f"{cv}-fold cross-validation by conversation (seed {seed}): per-fold weights")
        table.add_column("fold")
        table.add_column("held-out conversations")
        for level in weights.levels:
            table.add_column(level)
        for fold in result.folds:
            table.add_row(
                str(fold.index + 1), f"{len(fold.conversations)} ({len(fold.test_turns)} turns)",
                *("(" + ", ".join(f"{w:.2f}" for w in lw.weights) + ")" + (" fallback" if lw.fallback else "")
                  for lw in fold.weights.levels.values()),
            )
        console.print(table)
        metrics = Table(title="OUT-OF-FOLD metrics (each turn fused with weights tuned without its conversation; "
                              f"n = {result.evaluation.evaluated_turns} judged turns averaged)")
        metrics.add_column("measure")
        metrics.add_column("mean x100", justify="right")
        for name, value in result.evaluation.measures.items():
            metrics.add_row(name, f"{100 * value:.2f}")
        console.print(metrics)
        if cv_run is not None:
            console.print(f"out-of-fold run written to {cv_run}", highlight=False)


def fuse_command(
    ctx: typer.Context,
    runs: list[Path] = typer.Option(..., "--runs", "-r", help=_RUNS_HELP),
    levels: Path = typer.Option(..., "--levels", help="Levels: TSV 'turn_id<TAB>level', the reformulations JSONL, or annotators:TOPICS (oracle levels from "
                                "the topics' PTKB provenance)."),
    weights_path: Path = typer.Option(..., "--weights", "-w", help="weights.json from 'apcir tune'."),
    out: Path = typer.Option(..., "--out", "-o", help="Where to write the fused TREC run."),
    tag: str = typer.Option("apcir", "--tag", help="Run tag."),
    missing_level: str | None = typer.Option(None, "--missing-level", help="Level for turns the levels file lacks."),
    strict: bool = typer.Option(False, "--strict", help="A turn missing from any run is an error."),
    qrels: str | None = typer.Option(
        None, "--qrels", "--apply-to", "-q",
        help="Also evaluate the fused run on these qrels (labelled held-out or tuned-on-test).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Fuse runs (as many as weights.json has weights per level) with each turn's level weights."""
    from apcir.fusion.linear import align_runs
    from apcir.fusion.protocol import FusionInputs, tuned_systems
    from apcir.metrics import evaluate

    check_writable(out, "fused run")
    refuse_inputs_as_outputs([out], [*runs, *ctx.args, levels, weights_path, qrels])
    weights = load_weights(weights_path)
    run_list, names = _runs(ctx, runs, expected=weights.n_weights)
    _warn_alignment(run_list, names, strict)
    align_runs(run_list, strict=strict, names=names)
    judgements = datasets.qrels(qrels) if qrels is not None else None
    target = FusionInputs(lists=run_list, levels=datasets.levels(levels), qrels=judgements, qrels_name=qrels or "",
                          run_names=names, levels_name=str(levels))
    params = FusionParams.of(norm=weights.norm, depth=weights.depth, rel_threshold=weights.rel_threshold,
                             missing_level=missing_level)
    tuned = tuned_systems("file", target, [PRIMARY], params, settings=TuningSettings(), given={PRIMARY: weights})
    fused = tuned.runs[PRIMARY]
    write_run(fused, out, tag=tag, depth=weights.depth)
    payload: dict[str, object] = {"run": str(out), "turns": len(fused)}
    if judgements is not None:
        label = _label(tuned.overlap)
        result = evaluate(fused, judgements, "paper", rel_threshold=weights.rel_threshold, qrels_name=qrels or "")
        payload.update(measures=result.measures, label=label, tuning_turns_evaluated=tuned.overlap or 0)
        if not as_json:
            console.print(means_table(f"{out.name} vs {qrels}: {label}", result.measures,
                                      n=result.evaluated_turns))
    if as_json:
        print_json(payload)
    else:
        console.print(f"fused run ({len(fused)} turns) written to {out}", highlight=False)


def _label(overlap: int | None) -> str:
    if overlap:
        return f"TUNED ON TEST ({overlap} evaluated turns were tuning turns)"
    if overlap is None:
        return "unknown tuning data (weights file does not list its tuning turns)"
    return "held-out (no evaluated turn was a tuning turn)"


def baseline_command(
    ctx: typer.Context,
    name: str = typer.Argument(..., help=f"One of: {', '.join(BASELINES)}."),
    runs: list[Path] = typer.Option(..., "--runs", "-r", help=_RUNS_HELP),
    out: Path = typer.Option(..., "--out", "-o", help="Where to write the fused TREC run."),
    levels: Path | None = typer.Option(None, "--levels", help="Levels (no-personalisation)."),
    qrels: str | None = typer.Option(
        None, "--qrels", "--tune-on", "-q", help="Qrels to tune on (no-personalisation, no-levels)."
    ),
    weights_path: Path | None = typer.Option(None, "--weights", help="Use the all-turns weights of this file (no-levels)."),
    topics: str | None = typer.Option(None, "--topics", help="Topics with the PTKB (entropy)."),
    reformulations: Path | None = typer.Option(None, "--reformulations", help="Reformulations JSONL (deps)."),
    collection: str | None = typer.Option(None, "--collection", help="Passage collection (deps)."),
    encoder: str = typer.Option(
        "tfidf", "--encoder", help="entropy/deps encoder: tfidf, or a SPLADE model (splade-tiny, naver/splade-v3)."
    ),
    dtype: str = typer.Option("auto", "--dtype", help=f"entropy/deps with a model: its precision, {DTYPE_HELP}."),
    step: str = typer.Option("0.01", "--step"),
    objective: list[str] = typer.Option(["paper"], "--objective"),
    norm: str = typer.Option("minmax", "--norm"),
    depth: int = typer.Option(1000, "--depth", min=1),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the random baseline."),
    rrf_k: int = typer.Option(60, "--rrf-k", min=0),
    tag: str = typer.Option("", "--tag", help="Run tag (default: the baseline name)."),
) -> None:
    """Write a baseline or ablation run (paper Tables 2 and 4) through the same fusion code as `apcir run`."""
    from apcir.fusion.encoders import text_encoder
    from apcir.fusion.protocol import FusionInputs, pooled_run, tune_variants
    from apcir.fusion.systems import SystemInputs, deps_passage_ids, fixed_systems

    if name not in BASELINES:
        from apcir.registry import unknown_name

        raise ApcirError(unknown_name("baseline", name, BASELINES))
    check_dtype(dtype)
    check_writable(out, "baseline run")
    refuse_inputs_as_outputs([out], [*runs, *ctx.args, levels, qrels, weights_path, topics, reformulations,
                                     collection])
    FusionParams.of(norm=norm, depth=depth)
    spec = SYSTEMS.get(name)
    run_list, names = _runs(ctx, runs)
    _warn_alignment(run_list, names, False)
    turns = sorted(set().union(*run_list))
    tuning = settings(TuningSettings, step=step, objective=",".join(objective))
    if spec.kind == "tuned":
        fused = _tuned_baseline(name, run_list, names, turns, levels, qrels, weights_path, tuning, norm, depth,
                                FusionInputs, tune_variants, pooled_run)
    else:
        inputs = SystemInputs(lists=run_list, norm=norm, depth=depth, seed=seed, rrf_k=rrf_k)
        needs = {need for group in spec.needs for need in group}
        if "profiles" in needs:
            if topics is None:
                raise ApcirError(f"{name} needs --topics (for each conversation's PTKB)")
            by_turn = {t.turn_id: list(t.ptkb.values()) for t in datasets.topics(topics)}
            missing = [t for t in turns if t not in by_turn]
            if missing:
                raise ApcirError(f"{len(missing)} turn(s) of the runs are not in {topics}: {', '.join(missing[:10])}")
            inputs.profiles = {t: by_turn[t] for t in turns}
        if "personalised" in needs:
            if reformulations is None or collection is None:
                raise ApcirError(f"{name} needs --reformulations (personalised query) and --collection (passage texts)")
            records = load_reformulations(reformulations)
            for turn in turns:
                record = records.get(turn)
                if record is None or record.output is None:
                    raise ApcirError(f"turn {turn}: no successful reformulation in {reformulations}")
            inputs.personalised = {t: records[t].output.personalised_text for t in turns}  # type: ignore[union-attr]
            inputs.passages = datasets.passage_texts(datasets.collection_path(collection), deps_passage_ids(run_list))
        if "encode" in needs:
            inputs.encode = text_encoder(encoder, dtype=dtype)
        fused = fixed_systems(inputs, [name])[name]
    write_run(fused, out, tag=tag or name.replace("-", "_"), depth=depth)
    console.print(f"{name} run ({len(fused)} turns) written to {out}", highlight=False)


def _tuned_baseline(name, run_list, names, turns, levels, qrels, weights_path, tuning, norm, depth,  # type: ignore[no-untyped-def]
                    FusionInputs, tune_variants, pooled_run) -> Run:  # noqa: N803
    from apcir.fusion.core import LevelFusion

    variant = SYSTEMS.get(name).variant
    if variant is not None and variant.pooled:
        if weights_path is not None:
            weights = load_weights(weights_path)
            if weights.all_turns is None:
                raise ApcirError("weights file has no all-turns weights", path=weights_path)
            return pooled_run(run_list, weights.model_copy(update={"norm": norm, "depth": depth}))
        if qrels is None:
            raise ApcirError("no-levels needs --qrels to tune on (or --weights with all-turns weights)")
        inputs = FusionInputs(lists=run_list, levels=dict.fromkeys(turns, "a"), qrels=datasets.qrels(qrels),
                              qrels_name=qrels, run_names=names)
        weights = tune_variants(inputs, tuning, [PRIMARY], FusionParams.of(norm=norm, depth=depth),
                                evidence=False)[PRIMARY]
        return pooled_run(run_list, weights)
    if qrels is None or levels is None:
        raise ApcirError(f"{name} needs --qrels and --levels (its weights are tuned per level)")
    inputs = FusionInputs(lists=run_list, levels=datasets.levels(levels), qrels=datasets.qrels(qrels), qrels_name=qrels,
                          run_names=names, levels_name=str(levels))
    weights = tune_variants(inputs, tuning, [name], FusionParams.of(norm=norm, depth=depth), evidence=False)[name]
    return LevelFusion(weights, missing_level=None)(run_list, inputs.levels)


def register(app: typer.Typer) -> None:
    app.command("tune", context_settings=_EXTRA)(tune_command)
    app.command("fuse", context_settings=_EXTRA)(fuse_command)
    app.command("baseline", context_settings=_EXTRA)(baseline_command)


__all__ = ["LIST_NAMES", "register"]
