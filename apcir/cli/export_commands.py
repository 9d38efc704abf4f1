"""``apcir export`` and ``apcir validate``: iKAT submissions."""

from __future__ import annotations

from pathlib import Path

import typer

from apcir import datasets
from apcir.cli.common import console, err_console
from apcir.errors import ApcirError
from apcir.export.ikat import FORMATS, build_submission, write_submission
from apcir.export.trec import read_run_file, validate_run
from apcir.export.validate import CLUEWEB_ID, validate_submission
from apcir.llm.schema import load_reformulations


def export_command(
    run: Path = typer.Argument(..., help="TREC run file (e.g. the fused run)."),
    topics: str = typer.Option(..., "--topics", "-t", help="Topic set name or file."),
    out: Path = typer.Option(..., "--out", "-o", help="Submission file to write (.json, or .jsonl for ikat25)."),
    fmt: str = typer.Option("ikat24", "--format", "-f", help=f"One of {', '.join(FORMATS)}."),
    reformulations: Path | None = typer.Option(
        None, "--reformulations", "-r", help="Reformulations JSONL: PTKB provenance and pseudo-responses."
    ),
    collection: str | None = typer.Option(
        None, "--collection", help="Collection name or JSONL: passage texts for provenance and responses."
    ),
    text: str = typer.Option("pseudo", "--text", help="Response text: 'pseudo' (LLM pseudo-response) or 'passage'."),
    run_name: str | None = typer.Option(None, "--run-name", help="Run name (default: the run file's tag)."),
    run_type: str = typer.Option("automatic", "--run-type", help="automatic or manual."),
    team_id: str = typer.Option("apcir", "--team-id", help="Team id (2025 metadata)."),
) -> None:
    """Export a TREC run as an iKAT submission (2023/2024 JSON or 2025 JSONL)."""
    if text not in ("pseudo", "passage"):
        raise ApcirError(f"--text must be 'pseudo' or 'passage', not {text!r}")
    run_file = read_run_file(run)
    turns = datasets.topics(topics)
    passages = (
        {p.id: p.contents for p in datasets.iter_collection(datasets.collection_path(collection))} if collection else {}
    )
    records = load_reformulations(reformulations) if reformulations else {}
    data = build_submission(
        run_file.run,
        turns,
        fmt=fmt,  # type: ignore[arg-type]
        run_name=run_name or run_file.tag or run.stem,
        run_type=run_type,
        team_id=team_id,
        reformulations=records,
        passages=passages,
        mode=text,  # type: ignore[arg-type]
    )
    write_submission(data, out)
    console.print(f"wrote {fmt} submission for {len(turns)} turns to {out}; check it with: apcir validate {out} --topics {topics}")


def validate_command(
    path: Path = typer.Argument(..., help="iKAT submission (.json / .jsonl) or TREC run file."),
    topics: str = typer.Option(..., "--topics", "-t", help="Topic set name or file."),
    fmt: str | None = typer.Option(None, "--format", "-f", help="Force a format: ikat23, ikat24, ikat25 or trec."),
) -> None:
    """Check a submission offline as the organisers' validators do; print every problem."""
    if not path.exists():
        raise ApcirError("file not found", path=path)
    turns = datasets.topics(topics)
    if fmt == "trec" or (fmt is None and _looks_like_trec(path)):
        run_file = read_run_file(path)
        problems = validate_run(run_file, {t.turn_id for t in turns})
        bad_ids = sorted({p for hits in run_file.run.values() for p in hits if not CLUEWEB_ID.match(p)})
        if bad_ids:
            problems.append(f"{len(bad_ids)} passage id(s) not of the form clueweb22-enXXXX-XX-XXXXX:N, e.g. {bad_ids[0]}")
        missing = sorted({t.turn_id for t in turns} - set(run_file.run))
        if missing:
            problems.append(f"{len(missing)} topic turn(s) without results, e.g. {', '.join(missing[:5])}")
    else:
        problems = validate_submission(path, turns, fmt)
    for problem in problems:
        err_console.print(f"[red]problem:[/] {problem}", highlight=False, soft_wrap=True)
    if problems:
        err_console.print(f"{path}: {len(problems)} problem(s)")
        raise typer.Exit(1)
    console.print(f"{path}: valid ({len(turns)} turns checked)")


def _looks_like_trec(path: Path) -> bool:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                return len(line.split()) == 6 and not line.lstrip().startswith("{")
    return False


def register(app: typer.Typer) -> None:
    app.command("export")(export_command)
    app.command("validate")(validate_command)
