"""``apcir nuggets``: the gold nuggets, and how well a matcher agrees with people on them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from apcir.cli.common import console, llm_options, print_json
from apcir.cli.matcher_options import matcher_options, matcher_settings
from apcir.errors import ApcirError
from apcir.evaluation.nuggets.registry import MATCHERS
from apcir.io import check_writable, refuse_inputs_as_outputs, write_text

nuggets_app = typer.Typer(help="Gold nuggets: list them, and check a matcher against human labels.",
                          no_args_is_help=True)


@nuggets_app.command("show")
def show_command(
    nuggets: str = typer.Argument(..., help="Nugget set: ikat25-test (bundled) or a file."),
    turn: str | None = typer.Option(None, "--turn", help="Only this turn's nuggets."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Count a nugget set's nuggets per turn, or list one turn's."""
    from apcir.evaluation.nuggets.gold import load_nuggets
    from apcir.ids import canonical_turn_id

    gold = load_nuggets(nuggets)
    if turn is not None:
        wanted = canonical_turn_id(turn)
        if wanted not in gold.by_turn:
            raise ApcirError(f"turn {wanted} has no nuggets in {nuggets}")
        items = gold.by_turn[wanted]
        if as_json:
            print_json([n.model_dump() for n in items])
            return
        table = Table(title=f"{nuggets}: turn {wanted}, {len(items)} nuggets")
        for column in ("id", "weight", "text", "source"):
            table.add_column(column)
        for n in items:
            table.add_row(n.nugget_id, f"{n.weight:g}", n.text, n.source)
        console.print(table)
        return
    counts = {t: len(v) for t, v in gold.by_turn.items()}
    if as_json:
        print_json({"nuggets": gold.count, "turns": counts})
        return
    console.print(f"{nuggets}: {gold.count} nuggets over {len(counts)} turns (min {min(counts.values())}, max "
                  f"{max(counts.values())} per turn)", highlight=False)


LABELS_HELP = ("Human labels: apcir's JSONL {turn_id, run, nugget_id, label} or TSV, or the iKAT 2024 human study's "
               "human-study-matching-labels.txt as published (detected).")
FORMAT_HELP = "The labels' layout: auto (detected), apcir, or cone-rag (HIT_TOPIC_TURN_NUGGET_ALIAS<TAB>LABEL)."
ALIAS_HELP = ("cone-rag layout: map a run alias to a run of the responses, ALIAS=RUN (repeatable; overrides the "
              "built-in table; the same alias twice: two candidates, both measured).")


@nuggets_app.command("agreement")
@matcher_options
@llm_options("llm matcher: ", exclude=("temperature", "max_tokens"))
def agreement_command(
    labels: Path = typer.Option(..., "--labels", help=LABELS_HELP),
    nuggets: str = typer.Option(..., "--nuggets", help="The nuggets the labels' ids refer to (name or file; for the "
                                                       "human study, gold_nuggets_human.json)."),
    responses: list[str] = typer.Option(..., "--responses", help="The labelled runs' responses (repeatable)."),
    matchers: list[str] | None = typer.Option(
        None, "--matcher", help="Matcher(s) to measure, repeatable: " + ", ".join(MATCHERS.names())
                                + " (default: lexical, embedding and learned, and llm when --matcher-model is given)."),
    labels_format: str = typer.Option("auto", "--labels-format", help=FORMAT_HELP),
    alias: list[str] | None = typer.Option(None, "--alias", help=ALIAS_HELP),
    folds: int = typer.Option(5, "--folds", min=2, help="Folds (over turns) that choose τ (and learned's model)."),
    splits: int = typer.Option(10, "--splits", min=0, help="Random fold splits the spread of κ is measured over "
                                                          "(0: none)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the folds and the bootstrap."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the figures as JSON here."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    llm: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
) -> None:
    """Matchers' covered/not-covered decisions against human labels, in one table: Cohen's κ, accuracy, precision
    and recall of "covered", with bootstrap 95% intervals over turns and the spread of κ over random fold splits;
    every figure out-of-fold."""
    from apcir.evaluation.nuggets.agreement import agreement
    from apcir.evaluation.nuggets.gold import load_nuggets, load_response_runs
    from apcir.evaluation.nuggets.labels import load_labels, parse_aliases

    own = options or {}
    chosen = list(matchers or [m.name for m in MATCHERS if not m.asks_llm or own.get("model")])
    settings = matcher_settings(chosen, own, llm)  # an unknown name: one line with the closest matchers
    if out is not None:
        check_writable(out, "agreement figures")
        refuse_inputs_as_outputs([out], [labels, nuggets, *responses, own.get("learned_model")])
    human = load_labels(labels, labels_format, parse_aliases(alias or []))
    gold, runs = load_nuggets(nuggets), load_response_runs(responses)
    reports = [agreement(gold, runs, human, name, settings[name], folds=folds, seed=seed, splits=splits)
               for name in dict.fromkeys(chosen)]
    if out is not None:
        write_text(out, json.dumps([r.model_dump(mode="json") for r in reports], indent=1, ensure_ascii=False))
    if as_json:
        print_json([r.model_dump(mode="json") for r in reports])
        return
    first = reports[0]
    table = Table(title=f"matchers against {first.used} human labels on {first.turns} turns "
                        f"({100 * first.positives:.0f}% covered); out-of-fold, 95% bootstrap intervals over turns")
    for column in ("matcher", "Cohen's κ", f"κ over {splits} splits", "accuracy", "precision", "recall", "τ"):
        table.add_column(column, justify="left" if column == "matcher" else "right")
    for report in reports:
        table.add_row(_matcher_label(report), _figure(report.kappa),
                      f"{report.spread.low:.3f} to {report.spread.high:.3f}" if report.spread else "-",
                      _figure(report.accuracy), _figure(report.precision), _figure(report.recall), _tau(report))
    console.print(table)
    if first.mapping:
        console.print("run aliases (" + str(labels.name) + "): " + "; ".join(
            f"{a} = {' or '.join(r)}" for a, r in first.mapping.items()), highlight=False)
    for report in reports:
        for alt in report.alternatives:
            console.print(f"{report.matcher.name}: {alt.alias} read as {alt.run}: κ {_figure(alt.kappa)} "
                          f"({alt.used} labels)", highlight=False)
    for report in reports:
        if report.used != first.used:
            console.print(f"note: {report.matcher.name} used {report.used} labels", highlight=False)
        for name, figure in (("κ", report.kappa), ("precision", report.precision), ("recall", report.recall)):
            if figure.why is not None:
                console.print(f"note: {report.matcher.name}: {name} undefined: {figure.why}", highlight=False,
                              markup=False)
    for why, count in first.unmapped.items():
        console.print(f"note: {count} label(s) not used: {why}", highlight=False, markup=False)


def _figure(figure: Any) -> str:
    return str(figure.text())


def _matcher_label(report: Any) -> str:
    info = report.matcher
    spec = MATCHERS.get(info.name)
    if spec.asks_llm:
        return f"{info.name} ({info.model}, {'batched' if info.batched else 'per nugget'})"
    if spec.trained and report.lambdas:
        return f"{info.name} (nested CV)"
    return str(info.name)


def _tau(report: Any) -> str:
    if not MATCHERS.get(report.matcher.name).thresholded:
        return "-"
    if report.taus:
        return f"{min(report.taus):.3f} to {max(report.taus):.3f}" if len(set(report.taus)) > 1 else \
            f"{report.taus[0]:.3f}"
    return f"{report.matcher.tau:g}"


@nuggets_app.command("train")
def train_command(
    labels: Path = typer.Option(..., "--labels", help=LABELS_HELP),
    nuggets: str = typer.Option(..., "--nuggets", help="The nuggets the labels' ids refer to (name or file)."),
    responses: list[str] = typer.Option(..., "--responses", help="The labelled runs' responses (repeatable)."),
    out: Path = typer.Option(..., "--out", "-o", help="Where to write the model (JSON)."),
    labels_format: str = typer.Option("auto", "--labels-format", help=FORMAT_HELP),
    alias: list[str] | None = typer.Option(None, "--alias", help=ALIAS_HELP),
    encoder: str = typer.Option("minilm", "--encoder", help="The bi-encoder of the cosine signal."),
    folds: int = typer.Option(5, "--folds", min=2, help="Folds (over turns) that choose λ and τ."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the folds."),
    as_json: bool = typer.Option(False, "--json", help="Print the model as JSON."),
) -> None:
    """Fit the learned matcher on your copy of human labels and save it (apcir ships no weights): λ and τ by
    cross-validation over turns, then one fit on every label; its nested cross-validation κ is printed and kept
    in the file. Use it with --matcher learned --learned-model FILE."""
    import numpy as np

    from apcir.evaluation.nuggets.features import pair_features
    from apcir.evaluation.nuggets.gold import load_nuggets, load_response_runs
    from apcir.evaluation.nuggets.labels import load_labels, parse_aliases
    from apcir.evaluation.nuggets.learned import save_model, train_model

    check_writable(out, "learned model")
    refuse_inputs_as_outputs([out], [labels, nuggets, *responses])
    human = load_labels(labels, labels_format, parse_aliases(alias or []))
    gold, runs = load_nuggets(nuggets), load_response_runs(responses)
    index = {(n.turn_id, n.nugget_id): n for items in gold.by_turn.values() for n in items}
    resolved, unmapped = human.resolved()
    kept = []
    for turn, run, nugget_id, label in resolved:
        reason = ("nugget not in the nuggets" if (turn, nugget_id) not in index
                  else "no response of the run for the turn" if turn not in runs.get(run, {}) else None)
        if reason:
            unmapped[reason] = unmapped.get(reason, 0) + 1
        else:
            kept.append((turn, run, nugget_id, label))
    if not kept:
        raise ApcirError("none of the labels matches a nugget and a response", path=labels)
    features = pair_features([(index[(t, n)], runs[r][t]) for t, r, n, _ in kept], encoder)
    truth = np.array([label == 1 for *_, label in kept])
    model = train_model(features, truth, [t for t, *_ in kept], encoder=encoder, labels_path=labels, folds=folds,
                        seed=seed)
    save_model(out, model)
    if as_json:
        print_json(model.model_dump(mode="json"))
        return
    from apcir.evaluation.nuggets.learned import nested_problem

    nested = (f"nested cross-validation κ = {model.nested_kappa:.3f}" if model.nested_kappa is not None else
              f"nested cross-validation κ not measured ({nested_problem([t for t, *_ in kept], folds, seed)})")
    console.print(f"learned matcher trained on {len(kept)} labels over {len(model.trained_on.turns)} turns "
                  f"({model.trained_on.positives} covered): λ = {model.lam:g}, τ = {model.tau:.3f}; {nested}; "
                  f"written to {out}", highlight=False, markup=False)
    for why, count in unmapped.items():
        console.print(f"note: {count} label(s) not used: {why}", highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    app.add_typer(nuggets_app, name="nuggets")
