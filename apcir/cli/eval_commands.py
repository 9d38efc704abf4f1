"""``apcir evaluate``: trec_eval numbers for a run."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from apcir import datasets
from apcir.cli.common import console, err_console, means_table, print_json
from apcir.evaluation import evaluate, parse_measures
from apcir.export.trec import read_run_file


def evaluate_command(
    run: Path = typer.Argument(..., help="TREC run file."),
    qrels: str = typer.Option(..., "--qrels", "-q", help="Bundled qrels name (ikat23-test) or a qrels file."),
    measures: list[str] = typer.Option(
        ["paper"], "--measures", "-m", help="Set names (paper, ikat) or measures (nDCG@3, MRR, P@20, ...)."
    ),
    rel_threshold: int = typer.Option(
        1, "--rel-threshold", "-l", help="Lowest grade counted relevant by binary measures (trec_eval -l)."
    ),
    complete: bool = typer.Option(
        False, "--complete", "-c", help="Judged turns missing from the run count as 0 (trec_eval -c)."
    ),
    per_turn: bool = typer.Option(False, "--per-turn", help="Also report every turn's values."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Evaluate a run with trec_eval's measures (through pytrec_eval)."""
    run_file = read_run_file(run)
    for problem in run_file.problems:
        err_console.print(f"[yellow]warning:[/] {run}: {problem}", highlight=False)
    result = evaluate(
        run_file.run,
        datasets.qrels(qrels),
        parse_measures(measures),
        rel_threshold=rel_threshold,
        complete=complete,
    )
    if as_json:
        payload: dict[str, object] = {"measures": result.measures}
        if per_turn:
            payload["per_turn"] = result.per_turn
        payload.update(
            rel_threshold=result.rel_threshold,
            complete=result.complete,
            evaluated_turns=result.evaluated_turns,
            unjudged_run_turns=len(result.unjudged_run_turns),
            missing_judged_turns=len(result.missing_judged_turns),
        )
        print_json(payload)
        return
    if per_turn:
        table = Table(title=f"{run.name} per turn")
        table.add_column("turn")
        for name in result.measures:
            table.add_column(name, justify="right")
        for turn, values in result.per_turn.items():
            table.add_row(turn, *(f"{v:.4f}" for v in values.values()))
        console.print(table)
    console.print(means_table(f"{run.name} vs {qrels}", result.measures))
    averaging = (
        "judged turns missing from the run count as 0 (trec_eval -c)"
        if complete
        else "mean over turns both in the run and judged (trec_eval default)"
    )
    console.print(
        f"relevance threshold for binary measures: grade >= {rel_threshold}; {averaging}; "
        f"{result.evaluated_turns} turns averaged, {len(result.missing_judged_turns)} judged turns "
        f"not in the run, {len(result.unjudged_run_turns)} run turns unjudged",
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    app.command("evaluate")(evaluate_command)
