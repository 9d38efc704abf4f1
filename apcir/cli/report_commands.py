"""``apcir report``: paper-style tables and plots from run directories."""

from __future__ import annotations

from pathlib import Path

import typer

from apcir.cli.common import console
from apcir.errors import ApcirError
from apcir.evaluation.report import write_report
from apcir.evaluation.results import read_metrics
from apcir.io import check_writable_dir


def report_command(
    run_dirs: list[Path] = typer.Argument(..., help="One or more run directories written by `apcir run`."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Report folder (default RUN_DIR/report, or runs/report)."),
    baseline: str | None = typer.Option(
        None, "--baseline", "-b", help="System the significance tests compare against (default: the config's)."
    ),
    test: str | None = typer.Option(None, "--test", help="t-test, randomisation or bootstrap (default: the config's, "
                                                         "else the paper's t-test)."),
    correction: str | None = typer.Option(None, "--correction", help="none, bonferroni or holm (default: the "
                                                                     "config's, else bonferroni)."),
    alpha: float | None = typer.Option(None, "--alpha", help="Significance level (default: the config's, else 0.05)."),
) -> None:
    """Write report.md and PNG plots in the layout of the APCIR paper's tables."""
    runs = [read_metrics(d) for d in run_dirs]
    target_dir = out or (run_dirs[0] / "report" if len(run_dirs) == 1 else Path("runs") / "report")
    for run_dir in run_dirs:
        if target_dir.expanduser().resolve() == run_dir.expanduser().resolve():
            raise ApcirError(f"the report folder is the run directory {run_dir}; give --out a folder of its own "
                             "(default: RUN_DIR/report)", path=target_dir)
    check_writable_dir(target_dir, "report folder")
    names = [r.name for r in runs]
    if len(set(names)) < len(names):  # same experiment name twice: tell them apart by directory
        runs = [r.model_copy(update={"name": str(d)}) for r, d in zip(runs, run_dirs)]
    from apcir.cli.common import settings
    from apcir.metrics import SignificanceSettings

    given = {k: v for k, v in {"test": test, "correction": correction, "alpha": alpha}.items() if v is not None}
    significance = settings(SignificanceSettings, **(runs[0].significance.model_dump() | given))
    path = write_report(runs, target_dir, baseline, significance, run_dirs=list(run_dirs))
    console.print(f"report written to {path}")


def inspect_command(
    run_dirs: list[Path] = typer.Argument(..., help="One run directory, or several to compare (same topics): of "
                                          "apcir run, or live run directories of apcir converse."),
    out: Path | None = typer.Option(None, "--out", "-o", help="The HTML page (default RUN_DIR/inspect.html)."),
    config: str | None = typer.Option(None, "--config", help="Live run directories: the experiment config they "
                                      "were played with, for the passages' texts (default: ids only)."),
    rubrics: Path | None = typer.Option(None, "--rubrics", help="Live run directories: the year's rubrics (default: "
                                        "2025's, bundled), for the rubric of each topic's first utterance."),
) -> None:
    """A self-contained HTML page to inspect a run turn by turn (and compare systems or runs), offline; for a live
    run, with the simulated user's verdict on each answer."""
    from apcir.evaluation.inspector import INSPECT_FILE, write_inspector
    from apcir.io import check_writable, refuse_inputs_as_outputs
    from apcir.live.inspect import is_live_dir

    target = out or run_dirs[0] / INSPECT_FILE
    check_writable(target, "inspector page")
    refuse_inputs_as_outputs([target], [d / name for d in run_dirs for name in (
        "config.json", "metrics.json", "reformulations.jsonl", "responses.jsonl", "fused.run", "conversation.jsonl",
        "dump.jsonl")], folders=[d / sub for d in run_dirs for sub in ("lists", "systems")])
    live = [is_live_dir(d) for d in run_dirs]
    if any(live) and not all(live):
        raise ApcirError("give run directories of apcir run, or live run directories of apcir converse, not both")
    if not any(live) and (config is not None or rubrics is not None):
        raise ApcirError("--config and --rubrics are for live run directories (an apcir run directory has its own)")
    if any(live):
        from apcir.experiment.config import load_config, resolve_config_path
        from apcir.live.inspect import write_live_inspector
        from apcir.live.verdicts import load_rubrics

        settings = load_config(resolve_config_path(config)).model_dump(mode="json") if config else None
        path = write_live_inspector(list(run_dirs), target, load_rubrics(rubrics), config=settings)
    else:
        path = write_inspector(list(run_dirs), target)
    size = path.stat().st_size
    console.print(f"inspector written to {path} ({size / 1e6:.1f} MB); open it in a browser (no server needed)",
                  highlight=False)


def register(app: typer.Typer) -> None:
    app.command("report")(report_command)
    app.command("inspect")(inspect_command)
