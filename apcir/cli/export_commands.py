"""``apcir export`` and ``apcir validate``: iKAT submissions."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from apcir import datasets
from apcir.cli.common import console, err_console, settings
from apcir.contract.reformulations import load_reformulations, reformulation_statements, warn_unknown_statements
from apcir.contract.responses import load_responses
from apcir.contract.runs import read_run_file, run_stem
from apcir.errors import ApcirError
from apcir.io import check_writable, refuse_inputs_as_outputs
from apcir.responses.ptkb import load_ptkb_run
from apcir.submission.common import USED_TOP, SubmissionInputs
from apcir.submission.formats import FORMATS, format_for_year
from apcir.submission.settings import ExportSettings
from apcir.submission.stage import text_ids, validate_submission, write_submission


def export_command(
    run: Path = typer.Argument(..., help="TREC run file (e.g. the fused run)."),
    topics: str = typer.Option(..., "--topics", "-t", help="Topic set name or file."),
    out: Path = typer.Option(..., "--out", "-o", help="Submission file to write (.json, or .jsonl for ikat25)."),
    fmt: str | None = typer.Option(
        None, "--format", "-f", help=f"One of: {FORMATS.help()}. Default: the format of the topics' year."
    ),
    responses: Path | None = typer.Option(
        None, "--responses", help="Responses JSONL of `apcir respond`: the response texts and the cited passages."
    ),
    ptkb_run: Path | None = typer.Option(
        None, "--ptkb-run", help="PTKB ranking of `apcir rank-ptkb` (default: ptkb_used first, then BM25)."
    ),
    reformulations: Path | None = typer.Option(
        None, "--reformulations", "-r", help="Reformulations JSONL: statements used, and the fallback pseudo-responses."
    ),
    collection: str | None = typer.Option(
        None, "--collection", help="Collection name or JSONL: passage texts for provenance and responses."
    ),
    text: str = typer.Option(
        "pseudo", "--text", help="Text of a turn without a response: 'pseudo' (pseudo-response) or 'passage'."
    ),
    run_name: str | None = typer.Option(None, "--run-name", help="Run name (default: the run file's tag)."),
    run_type: str = typer.Option("automatic", "--run-type", help="automatic or manual."),
    team_id: str = typer.Option("apcir", "--team-id", help="Team id (2025 metadata)."),
    ptkb: str = typer.Option("auto", "--ptkb", help="PTKB provenance: auto, ranked (every statement) or used."),
    eval_response: bool = typer.Option(
        True, "--eval-response/--no-eval-response", help="ikat24: have the organisers judge the responses."
    ),
    allow_missing_text: bool = typer.Option(
        False, "--allow-missing-text", help="Write even when cited passages have no text (validate flags them)."
    ),
) -> None:
    """Export a TREC run and its responses as an iKAT submission (2023/2024 JSON or 2025 JSONL)."""
    if run_name is not None and not run_name.strip():
        raise ApcirError("--run-name is empty; give a name, or leave it out for the run file's tag")
    year = datasets.topics_year(topics)
    options = settings(ExportSettings, format=fmt or format_for_year(year), text=text, run_type=run_type,
                       team_id=team_id, ptkb=ptkb, eval_response=eval_response, allow_missing_text=allow_missing_text)
    assert options.format is not None
    check_writable(out, "submission")
    refuse_inputs_as_outputs([out], [run, topics, responses, ptkb_run, reformulations, collection])
    run_file = read_run_file(run)
    turns = datasets.topics(topics)
    used_top = USED_TOP
    answers = load_responses(responses) if responses else None
    passages = (datasets.passage_texts(datasets.collection_path(collection), text_ids(run_file.run, answers, used_top))
                if collection else {})
    records = load_reformulations(reformulations) if reformulations else {}
    warn_unknown_statements(turns, reformulation_statements(records), str(reformulations))
    if answers:
        warn_unknown_statements(turns, {t: r.ptkb_used for t, r in answers.items()}, str(responses))
    ranking = load_ptkb_run(ptkb_run, turns) if ptkb_run else None
    inputs = SubmissionInputs(run=run_file.run, turns=turns, run_name=run_name or run_file.tag or run_stem(run),
                              run_type=options.run_type, team_id=options.team_id, reformulations=records,
                              passages=passages, mode=options.text, used_top=used_top, responses=answers,
                              ptkb=ranking, ptkb_mode=options.ptkb, eval_response=options.eval_response, year=year)
    write_submission(inputs, options.format, out, allow_missing_text=options.allow_missing_text)
    console.print(f"wrote {options.format} submission for {len(turns)} turns to {out}; check it with: "
                  f"apcir validate {out} --topics {topics}")


def validate_command(
    path: Path = typer.Argument(..., help="iKAT submission (.json / .jsonl) or TREC run file."),
    topics: str = typer.Option(..., "--topics", "-t", help="Topic set name or file."),
    fmt: str | None = typer.Option(
        None, "--format", "-f", help=f"Force a format: {', '.join(FORMATS.names())}."
    ),
) -> None:
    """Check a submission offline as the organisers' validators do; print every problem."""
    if not path.exists():
        raise ApcirError("file not found", path=path)
    if fmt is not None:
        FORMATS.get(fmt)
    turns = datasets.topics(topics)
    problems = validate_submission(path, turns, fmt, datasets.topics_year(topics))
    for problem in problems:
        err_console.print(f"[red]problem:[/] {escape(problem)}", highlight=False, soft_wrap=True)
    if problems:
        err_console.print(f"{path}: {len(problems)} problem(s)")
        raise typer.Exit(1)
    console.print(f"{path}: valid ({len(turns)} turns checked)")


def register(app: typer.Typer) -> None:
    app.command("export")(export_command)
    app.command("validate")(validate_command)
