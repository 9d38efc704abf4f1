"""``apcir rank-ptkb`` (the PTKB statement ranking) and ``apcir respond`` (one cited response per turn)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from apcir import datasets
from apcir.cli.common import (
    checked,
    console,
    entry_options,
    finish_batch,
    llm_options,
    print_batch_summary,
    reformulation_records,
    settings,
)
from apcir.contract.runs import read_run_file
from apcir.errors import ApcirError
from apcir.io import check_writable, refuse_inputs_as_outputs
from apcir.responses.core import Responding
from apcir.responses.job import check_run_turns
from apcir.responses.ptkb import BM25, PTKB_METHODS, load_ptkb_run, rank_by, write_ptkb_run
from apcir.responses.registry import RESPONDERS, usage_help
from apcir.responses.settings import RespondSettings
from apcir.responses.stage import RespondSummary
from apcir.retrieval.precision import DTYPE_HELP, check_dtype


def index_dependencies(index: Path) -> list[Path]:
    from apcir.retrieval.manifest import index_dependencies as dependencies

    return dependencies(index)


def index_encoder(index: Path) -> tuple[str, str | None]:
    """The encoder an index was built with and its kind: its SPLADE or dense model, or ``bm25`` for a BM25 index."""
    from apcir.retrieval.manifest import is_foreign_lucene, read_manifest
    from apcir.retrieval.registry import BACKENDS

    if is_foreign_lucene(index):
        return BM25, None
    manifest = read_manifest(index)
    return manifest.model or BM25, BACKENDS.get(manifest.backend).encoder


def rank_ptkb_command(
    topics: str = typer.Option(..., "--topics", "-t", help="Bundled topics (ikat23-test, ...) or a topic file."),
    out: Path = typer.Option(..., "--out", "-o", help="TREC run over statement ids to write."),
    method: str = typer.Option(
        "apcir", "--method", help="apcir (ptkb_used first, then similarity to the personalised rewrite), heuristic "
                                  "(the heuristic reformulator's tf-idf order) or profile (the profile's order)."
    ),
    reformulations: Path | None = typer.Option(
        None, "--reformulations", "-r", help="apcir: reformulations JSONL (ptkb_used, the personalised rewrite)."
    ),
    index: Path | None = typer.Option(None, "--index", help="apcir: use this index's encoder (BM25 for a BM25 index)."),
    encoder: str | None = typer.Option(
        None, "--encoder", help="apcir: bm25, splade-tiny, minilm (a bi-encoder), or a SPLADE model (default: bm25 "
                                "without --index)."
    ),
    turns: list[str] = typer.Option(None, "--turns", help="Only these turn ids (repeat or comma-separate)."),
    tag: str = typer.Option("apcir-ptkb", "--tag", help="Run tag."),
    dtype: str = typer.Option("auto", "--dtype", help=f"apcir with a model: its precision, {DTYPE_HELP}."),
) -> None:
    """Rank every turn's PTKB statements, best first, as a TREC run over statement ids (evaluate it with
    `apcir evaluate RUN --qrels ikat23-test-ptkb -m ptkb`)."""
    from apcir.retrieval.settings import check_encoder

    PTKB_METHODS.check(method)
    checked("--encoder", lambda name: check_encoder(name, (BM25,)), encoder)
    check_dtype(dtype)
    if index is not None and encoder is not None:
        raise ApcirError("give --index (its encoder is used) or --encoder, not both")
    if not PTKB_METHODS.get(method).compares and (reformulations or index or encoder):
        raise ApcirError(f"--method {method} takes no --reformulations, --index or --encoder")
    check_writable(out, "PTKB ranking")
    refuse_inputs_as_outputs([out], [topics, reformulations], folders=[index, *(index_dependencies(index) if index
                                                                                   else [])])
    selected = datasets.select_turns(topics, turns)
    records = reformulation_records(reformulations, selected)
    chosen, kind = index_encoder(index) if index is not None else (encoder, None)
    ranked, how = rank_by(method, selected, records, chosen, kind, dtype)  # type: ignore[arg-type]
    write_ptkb_run(ranked, out, tag=tag)
    hint = (f"; evaluate with: apcir evaluate {out} --qrels ikat23-test-ptkb -m ptkb"
            if datasets.topics_year(topics) == 2023 else "")
    console.print(f"ranked the statements of {len(ranked)} turns ({how}) -> {out}{hint}", highlight=False)


_RESPOND = RespondSettings.model_fields


def _shared_help(key: str, what: str) -> str:
    return f"{what} (default {_RESPOND[key].get_default()})."


@entry_options(RESPONDERS)
@llm_options(into="options")
def respond_command(
    run: Path | None = typer.Argument(None, help="TREC run (the final, fused run): its top passages are cited. "
                                                 "None (LaMP-QA, no retrieval): answers without passages or citations."),
    topics: str = typer.Option(..., "--topics", "-t", help="Bundled topics, a topic file, or lampqa:FILE."),
    out: Path = typer.Option(..., "--out", "-o", help="Responses JSONL (appended; a re-run resumes)."),
    collection: str | None = typer.Option(None, "--collection",
                                          help="Collection name or JSONL with the passage texts (with a run)."),
    reformulations: Path | None = typer.Option(
        None, "--reformulations", "-r", help="Reformulations JSONL: level, personalised rewrite, ptkb_used."
    ),
    ptkb_run: Path | None = typer.Option(
        None, "--ptkb-run", help="PTKB ranking (apcir rank-ptkb); default: ptkb_used first, then BM25."
    ),
    responder: str = typer.Option(_RESPOND["responder"].get_default(), "--responder", "-m",
                                  help=f"Who answers: {usage_help()}."),
    top_k: int | None = typer.Option(None, "--top-k", "-k", help=_shared_help("top_k", "Top passages given, cited "
                                                                                "as [1]..[k]")),
    max_words: int | None = typer.Option(None, "--max-words", help=_shared_help("max_words", "Word budget of a "
                                                                                "response")),
    turns: list[str] = typer.Option(None, "--turns", help="Only these turn ids (repeat or comma-separate)."),
    refresh: bool = typer.Option(False, "--refresh", help="Start over: ignore the output's records and the cache."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    options: dict[str, Any] | None = None,
) -> None:
    """One grounded response per turn from the run's top passages, citing them inline by their number (1 to k)."""
    chosen = settings(RespondSettings, responder=responder, top_k=top_k, max_words=max_words, **(options or {}))
    check_writable(out, "responses file")
    refuse_inputs_as_outputs([out], [run, topics, collection, reformulations, ptkb_run, chosen.prices,
                                     chosen.cache_dir])
    selected = datasets.select_turns(topics, turns)
    if run is not None and collection is None:
        raise ApcirError("--collection: needed with a run (the texts of the passages cited)")
    run_file = read_run_file(run) if run is not None else None
    if run_file is not None:
        check_run_turns(run_file.run, selected)
    records = reformulation_records(reformulations, selected)
    ranked = load_ptkb_run(ptkb_run, selected) if ptkb_run else None  # None: ptkb_used first, then BM25
    responding = Responding(chosen, out, texts=lambda ids: datasets.passage_texts(
        datasets.collection_path(collection), ids) if collection is not None else {}, progress=not no_progress)
    summary = responding.answer(responding.jobs(selected, records, run_file.run if run_file is not None else None,
                                              ranked), refresh=refresh)
    from apcir.responses.pathways import trace_path

    if chosen.entry().traced and trace_path(out).exists():
        summary_trace = trace_path(out)
        if not as_json:
            console.print(f"pathways trace: {summary_trace}", highlight=False)
    finish_batch(summary, as_json, print_summary)


def print_summary(summary: RespondSummary) -> None:
    print_batch_summary(summary, f"respond {summary.responder}")


def register(app: typer.Typer) -> None:
    app.command("rank-ptkb")(rank_ptkb_command)
    app.command("respond")(respond_command)
