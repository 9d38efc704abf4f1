"""``apcir run``: a whole experiment from one config file."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from apcir.cli.common import console, field_help, field_minimum, measure_columns
from apcir.cli.eval_commands import response_table
from apcir.evaluation.results import RunMetrics
from apcir.experiment.config import load_config, resolve_config_path, validate_config, with_overrides
from apcir.experiment.pipeline import run_experiment
from apcir.fusion.systems import SYSTEMS
from apcir.llm.settings import LLMSettings


def comparison_table(metrics: RunMetrics) -> Table:
    """The table ``apcir run`` ends with: every system, the configured measures (x100, with the report's marks) and
    the judged turns each mean is over."""
    from apcir.evaluation.display import systems_table

    shown = systems_table(metrics)
    table = measure_columns(f"{metrics.name}: {metrics.topics} vs {metrics.qrels} (weights: {metrics.protocol}); "
                            f"{shown.caption}", "system", metrics.measures)
    for row in shown.rows:
        table.add_row(escape(row.label), *(row.cell(m) for m in metrics.measures), str(row.n))
    return table


def ptkb_table(metrics: RunMetrics) -> Table:
    """The PTKB statement rankings against the PTKB qrels (x100)."""
    assert metrics.ptkb is not None
    ptkb = metrics.ptkb
    table = measure_columns(f"PTKB statement ranking vs {ptkb.qrels}", "ranking", ptkb.measures, n=False)
    for result in ptkb.systems.values():
        table.add_row(escape(result.label), *(f"{100 * result.means[m]:.1f}" for m in ptkb.measures))
    return table


def run_command(
    config: str = typer.Argument(..., help="Experiment file (.toml/.yaml) or a bundled config name (demo)."),
    llm: str | None = typer.Option(None, "--method", "--llm", help="Override the reformulator (heuristic, manual, gpt-4o, ...)."),
    responder: str | None = typer.Option(None, "--responder", help="Override the responder (extractive, gpt-4o, ...)."),
    base_url: str | None = typer.Option(
        None, "--base-url", help="Override the OpenAI-compatible server URL (reformulator and responder)."
    ),
    max_prompt_tokens: int | None = typer.Option(
        None, "--max-prompt-tokens", min=field_minimum(LLMSettings, "max_prompt_tokens"),
        help="For the stages that ask a model: " + field_help(LLMSettings, "max_prompt_tokens")),
    judged_only: bool = typer.Option(
        False, "--judged-only", help="Only the turns the evaluation qrels judge (all that the passage measures "
        "score; PTKB and response measures then cover those turns only)."),
    output_dir: str | None = typer.Option(None, "--output-dir", "-o", help="Override the run directory."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bars (logs, CI)."),
) -> None:
    """Run every stage of an experiment; stages whose inputs did not change are reused."""
    from apcir.cli.common import checked
    from apcir.reformulation.registry import check_method
    from apcir.responses.registry import check_responder

    checked("--method", check_method, llm)  # a misspelt override is named as the option, not as the config's
    checked("--responder", check_responder, responder)
    path = resolve_config_path(config)
    data = with_overrides(load_config(path).model_dump(exclude_unset=True), llm=llm, responder=responder,
                          base_url=base_url, max_prompt_tokens=max_prompt_tokens, judged_only=judged_only,
                          output_dir=output_dir)
    experiment = validate_config(data, path)
    report = run_experiment(experiment, console, progress=not no_progress)
    if report.metrics is not None:
        console.print(comparison_table(report.metrics))
        tuned = [n for n in SYSTEMS.names() if SYSTEMS.get(n).kind == "tuned" and n in report.metrics.systems]
        console.print(
            f"Numbers are trec_eval's x100 on the configured qrels. The tuned systems ({', '.join(tuned)}) are "
            f"{report.metrics.protocol}.",
            highlight=False,
        )
        if experiment.fusion.weights.source == "cv":  # why `apcir evaluate fused.run` gives another APCIR number
            console.print("fused.run, the run submitted, fuses every turn with weights tuned on all judged turns "
                          "(weights.json): scored on these qrels it is tuned on test, and `apcir evaluate` says so; "
                          "APCIR above is the held-out (out-of-fold) number.", highlight=False)
        if report.metrics.ptkb is not None:
            console.print(ptkb_table(report.metrics))
        if report.metrics.responses is not None:
            console.print(response_table(report.metrics.responses))
            for note in report.metrics.responses.notes:
                console.print(f"note: {note}", highlight=False, markup=False)
    reused = sum(1 for o in report.outcomes if not o.ran)
    console.print(
        f"this run: {report.llm_requests} LLM requests, {report.retrieval_calls} retrieval calls, "
        f"{reused} of {len(report.outcomes)} stages reused",
        highlight=False,
    )
    outputs = [("fused.run", "fused.run (TREC)"), ("responses.jsonl", "responses.jsonl"), ("ptkb.run", "ptkb.run"),
               (f"submission{experiment.export.suffix}",
                f"submission{experiment.export.suffix} (iKAT {experiment.export.format})"),
               ("systems", "systems/*.run.gz"), ("metrics.json", "metrics.json"), ("report/report.md", "report/report.md"),
               ("inspect.html", "inspect.html (open in a browser)")]
    console.print(f"outputs in {report.run_dir}/: "
                  + ", ".join(label for name, label in outputs if (report.run_dir / name).exists()), highlight=False)
    if report.failed_windows:
        console.print(
            f"[yellow]{len(report.failed_windows)} re-ranking window(s) failed[/] and kept their order "
            f"({', '.join(report.failed_windows[:5])}{', ...' if len(report.failed_windows) > 5 else ''}); "
            "the next run asks them again",
            highlight=False,
        )
    if report.unjudged_turns:
        console.print(
            f"[yellow]{len(report.unjudged_turns)} turn(s) unjudged[/] by the response judge "
            f"({', '.join(report.unjudged_turns[:5])}{', ...' if len(report.unjudged_turns) > 5 else ''}; the reasons "
            "are in metrics.json); the next run asks them again",
            highlight=False,
        )
    if report.failed_turns or report.failed_windows or report.unjudged_turns:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("run")(run_command)
