"""``apcir run``: a whole experiment from one config file."""

from __future__ import annotations

from typing import Any

import typer

from apcir.cli.common import console
from apcir.config import load_config
from apcir.pipeline import comparison_table, resolve_config_path, run_experiment


def run_command(
    config: str = typer.Argument(..., help="Experiment file (.toml/.yaml) or a bundled config name (demo)."),
    llm: str | None = typer.Option(None, "--llm", help="Override the reformulator (heuristic, manual, gpt-4o, ...)."),
    base_url: str | None = typer.Option(None, "--base-url", help="Override the OpenAI-compatible server URL."),
    output_dir: str | None = typer.Option(None, "--output-dir", "-o", help="Override the run directory."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bars (logs, CI)."),
) -> None:
    """Run every stage of an experiment; stages whose inputs did not change are reused."""
    experiment = load_config(resolve_config_path(config))
    updates: dict[str, Any] = {}
    if llm:
        updates["reformulator"] = experiment.reformulator.model_copy(update={"llm": llm})
    if base_url:
        updates["reformulator"] = updates.get("reformulator", experiment.reformulator).model_copy(
            update={"base_url": base_url}
        )
    if output_dir:
        updates["output_dir"] = output_dir
    experiment = experiment.model_copy(update=updates)
    report = run_experiment(experiment, console, progress=not no_progress)
    if report.metrics is not None:
        console.print(comparison_table(report.metrics))
        console.print(
            "Numbers are trec_eval's x100 on the configured qrels. APCIR, no-personalisation and no-levels are "
            f"{report.metrics.protocol}.",
            highlight=False,
        )
    reused = sum(1 for o in report.outcomes if not o.ran)
    console.print(
        f"this run: {report.llm_requests} LLM requests, {report.retrieval_calls} retrieval calls, "
        f"{reused} of {len(report.outcomes)} stages reused",
        highlight=False,
    )
    console.print(
        f"outputs in {report.run_dir}/: fused.run (TREC), submission.json (iKAT), systems/*.run, "
        "metrics.json, report/report.md",
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    app.command("run")(run_command)
