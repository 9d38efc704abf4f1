"""``apcir rerank``: re-rank the top of a run with monoT5, a cross-encoder, RankGPT or a plugin's re-ranker (each
re-ranker's own options are generated from its spec's options model)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from apcir.cli.common import (
    TOPICS_FOR_QUERIES,
    console,
    entry_options,
    err_console,
    llm_options,
    llm_values,
    print_json,
    reformulation_records,
    settings,
)
from apcir.contract.reformulations import LIST_NAMES
from apcir.contract.runs import read_run_file, write_run
from apcir.errors import ApcirError
from apcir.io import check_writable, refuse_inputs_as_outputs
from apcir.llm.settings import LLMSettings
from apcir.reranking.registry import RERANKERS
from apcir.reranking.settings import RerankSettings

_DEFAULTS = ", ".join(f"{spec.name} {spec.default_model}" for spec in RERANKERS)


@entry_options(RERANKERS)
@llm_options("rankgpt: ", exclude=("structured",))
def rerank_command(
    run: Path = typer.Option(..., "--run", "-r", help="The TREC run to re-rank."),
    queries: Path = typer.Option(
        ..., "--queries", "-q", help="TSV turn_id<TAB>query[<TAB>response], or a reformulations JSONL."
    ),
    field: str | None = typer.Option(
        None, "--field", "-f", help=f"For a reformulations JSONL: the query, {' | '.join(LIST_NAMES)} (default rewrite)."
    ),
    topics: str | None = typer.Option(None, "--topics", "-t", help=TOPICS_FOR_QUERIES),
    collection: str = typer.Option(
        ..., "--collection", "-c", help="Collection with the passage texts: bundled name or JSONL (either layout)."
    ),
    out: Path = typer.Option(..., "--out", "-o", help="The re-ranked TREC run to write."),
    reranker: str = typer.Option("monot5", "--reranker", help=f"One of: {RERANKERS.help()}."),
    model: str | None = typer.Option(
        None, "--model", "--reranker-model", "-m",
        help=f"Hub id or local directory (monot5, cross-encoder); the LLM's name (rankgpt). Default: {_DEFAULTS}.",
    ),
    depth: int = typer.Option(100, "--depth", "-d", help="Passages re-ranked per turn; the rest keep their order."),
    tag: str | None = typer.Option(None, "--tag", help="Run tag (default: the input run's tag + '+' + re-ranker)."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    llm: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
) -> None:
    """Re-rank the top --depth passages of every turn of a run; write a TREC run."""
    from apcir.datasets import collection_path
    from apcir.datasets.store import store_for
    from apcir.reranking.core import Reranking
    from apcir.reranking.stage import query_text
    from apcir.retrieval.queries import is_jsonl, load_queries

    given = llm or {}
    asking = settings(LLMSettings, **llm_values(given))
    own = dict(options or {})
    if asking.model_fields_set:
        own["llm"] = asking
    chosen = settings(RerankSettings, reranker=reranker, model=model, depth=depth, field=field, **own)
    if tag is not None and not tag.strip():
        raise ApcirError("--tag is empty; give a word, or leave it out for the default (the input's tag + the "
                         "re-ranker)")
    check_writable(out, "run file")
    collection_file = collection_path(collection)
    refuse_inputs_as_outputs([out], [run, queries, topics, collection_file, given.get("prices"),
                                     given.get("cache_dir")])
    if topics is not None and not is_jsonl(queries):
        raise ApcirError("--topics goes with a reformulations JSONL as --queries (a TSV's turns are its own)")
    run_file = read_run_file(run)
    if topics is not None and is_jsonl(queries):
        from apcir import datasets
        from apcir.reranking.stage import record_queries

        chosen_turns = [t for t in datasets.topics(topics) if t.turn_id in run_file.run]
        asked = record_queries(reformulation_records(queries, chosen_turns), chosen.field)
    else:
        query_set = load_queries(queries, chosen.field if is_jsonl(queries) else field)
        for turn, reason in query_set.skipped.items():
            err_console.print(f"[yellow]warning:[/] turn {turn} has no query: {reason}", highlight=False)
        asked = {t: query_text(q) for t, q in query_set.queries.items()}
    for problem in run_file.problems:
        err_console.print(f"[yellow]warning:[/] {run}: {problem}", highlight=False)
    started = time.perf_counter()
    texts = lambda ids: store_for(collection_file).texts(ids)  # noqa: E731 - read only when there is a run
    reranked, summary = Reranking(chosen, texts, not no_progress).with_summary(run_file.run, asked)
    summary.seconds = round(time.perf_counter() - started, 3)
    default_tag = f"{run_file.tag or 'run'}+{chosen.label}"
    write_run(reranked, out, tag=tag or default_tag)
    if as_json:
        print_json({**summary.model_dump(), "out": str(out),
                    "passages_per_second": round(summary.passages_per_second, 2)})
    else:
        print_summary(summary, out)
    if summary.failed_windows:
        raise typer.Exit(1)


def print_summary(summary: object, out: Path) -> None:
    from apcir.reranking.stage import RerankSummary

    assert isinstance(summary, RerankSummary)
    table = Table(title=f"rerank {summary.reranker} ({summary.model}) -> {out}")
    table.add_column("what")
    table.add_column("value", justify="right")
    rows: list[tuple[str, object]] = [
        ("turns in the run", summary.turns),
        ("turns re-ranked", summary.turns_reranked),
        ("turns without a query (kept)", len(summary.turns_without_query)),
        ("depth", summary.depth),
        ("turns shorter than depth", summary.short_turns),
        ("passages re-ranked", summary.passages_reranked),
        ("passages not in the collection (kept in place)", summary.missing_passages),
    ]
    if RERANKERS.get(summary.reranker).kind == "listwise":
        rows += [
            ("windows", summary.windows),
            ("requests sent", summary.requests),
            ("answers from cache", summary.cache_hits),
            ("windows failed (order kept)", summary.failed_windows),
            ("ids missing from answers (appended)", summary.missing_ids),
            ("duplicate ids (ignored)", summary.duplicate_ids),
            ("unknown ids (ignored)", summary.unknown_ids),
            ("input / output tokens", f"{summary.input_tokens} / {summary.output_tokens}"),
            ("cost $", "unpriced" if summary.cost_usd is None else f"{summary.cost_usd:.4f}"),
        ]
    else:
        rows.append(("pairs scored", summary.pairs_scored))
    rows += [("seconds", f"{summary.seconds:.1f}"), ("passages/s", f"{summary.passages_per_second:.1f}")]
    for name, value in rows:
        table.add_row(name, str(value))
    console.print(table)
    if summary.missing_example:
        console.print(f"example of a passage not in the collection: {summary.missing_example}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("rerank")(rerank_command)
