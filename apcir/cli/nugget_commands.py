"""``apcir nuggets``: the gold nuggets, and how well a matcher agrees with people on them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from apcir.cli.common import console, llm_options, print_json
from apcir.cli.eval_commands import matcher_settings
from apcir.errors import ApcirError
from apcir.evaluation.nugget_matchers import MATCHERS
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
    from apcir.evaluation.nuggets import load_nuggets
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


@nuggets_app.command("agreement")
@llm_options("llm matcher: ", exclude=("temperature", "max_tokens"))
def agreement_command(
    labels: Path = typer.Option(..., "--labels", help="Human labels: JSONL {turn_id, run, nugget_id, label} or TSV."),
    nuggets: str = typer.Option(..., "--nuggets", help="The nuggets the labels' ids refer to (name or file)."),
    responses: list[str] = typer.Option(..., "--responses", help="The labelled runs' responses (repeatable)."),
    matcher: str = typer.Option("embedding", "--matcher", help="Matcher: " + ", ".join(MATCHERS.names())),
    tau: float | None = typer.Option(None, "--tau", min=0, help="A fixed τ (default: chosen by cross-validation)."),
    encoder: str = typer.Option("minilm", "--encoder", help="Embedding matcher's bi-encoder."),
    matcher_model: str | None = typer.Option(None, "--matcher-model", help="The llm matcher's model."),
    per_nugget: bool = typer.Option(False, "--per-nugget", help="llm matcher: one request per nugget."),
    folds: int = typer.Option(5, "--folds", min=2, help="Folds (over turns) that choose τ."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the folds and the bootstrap."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the figures as JSON here."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    llm: dict[str, Any] | None = None,
) -> None:
    """A matcher's covered/not-covered decisions against human labels: accuracy, Cohen's κ, precision and recall
    of "covered", with bootstrap 95% intervals; τ chosen out-of-fold."""
    from apcir.evaluation.nugget_agreement import agreement, load_labels
    from apcir.evaluation.nuggets import load_nuggets, load_response_runs

    MATCHERS.check(matcher)  # an unknown name: one line with the closest matchers
    if out is not None:
        check_writable(out, "agreement figures")
        refuse_inputs_as_outputs([out], [labels, nuggets, *responses])
    report = agreement(load_nuggets(nuggets), load_response_runs(responses), load_labels(labels), matcher,
                       matcher_settings(tau, encoder, matcher_model, per_nugget, llm or {}), folds=folds, seed=seed)
    if out is not None:
        write_text(out, report.model_dump_json(indent=1))
    if as_json:
        print_json(report.model_dump(mode="json"))
        return
    how = (f"τ by {report.folds}-fold cross-validation over turns (out-of-fold; τ per fold: "
           f"{', '.join(f'{t:.3f}' for t in report.taus)})" if report.folds
           else f"τ = {report.matcher.tau:g}" if MATCHERS.get(matcher).thresholded else str(report.matcher.model))
    table = Table(title=f"{matcher} against {report.used} human labels ({100 * report.positives:.0f}% covered); {how}")
    for column in ("figure", "value", "95% interval"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    for name in ("accuracy", "kappa", "precision", "recall"):
        figure = getattr(report, name)
        label = {"kappa": "Cohen's κ", "precision": "precision of covered", "recall": "recall of covered"}.get(
            name, name)
        table.add_row(label, f"{figure.value:.3f}", f"{figure.low:.3f} to {figure.high:.3f}")
    console.print(table)
    for why, count in report.unmapped.items():
        console.print(f"note: {count} label(s) not used: {why}", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(nuggets_app, name="nuggets")
