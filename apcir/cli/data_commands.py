"""``apcir datasets``: what is bundled."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import typer
from rich.table import Table

from apcir import datasets
from apcir.cli.common import console, print_json
from apcir.datasets.registry import BundledDataset


def _rows(entries: Mapping[str, BundledDataset], counts: Callable[[str], dict[str, int]]) -> list[dict[str, Any]]:
    """One row per bundled dataset: its name, description, ``counts(name)`` and source."""
    return [{"name": name, "description": info.description, **counts(name), "source": info.source}
            for name, info in entries.items()]


def _topic_counts(name: str) -> dict[str, int]:
    turns = datasets.topics(name)
    return {"conversations": len({t.conversation_id for t in turns}), "turns": len(turns)}


def _qrels_counts(name: str) -> dict[str, int]:
    judged = datasets.qrels(name)
    return {"judged_turns": len(judged), "judgements": sum(len(v) for v in judged.values())}


def _collection_counts(name: str) -> dict[str, int]:
    return {"passages": sum(1 for _ in datasets.iter_collection(datasets.collection_path(name)))}


def dataset_summary() -> dict[str, Any]:
    """Counts for every bundled topic set, qrels file and collection."""
    topic_rows = _rows(datasets.TOPICS, _topic_counts)
    qrels_rows = _rows(datasets.QRELS, _qrels_counts)
    collection_rows = _rows(datasets.COLLECTIONS, _collection_counts)
    judgement_rows = [{"name": name, "kind": kind, "description": info.description, "source": info.source}
                      for kind, entries in (("nuggets (--nuggets)", datasets.NUGGETS),
                                            ("responses of runs", datasets.RESPONSE_RUNS),
                                            ("gold responses (ROUGE-L)", datasets.REFERENCES))
                      for name, info in entries.items()]
    return {"topics": topic_rows, "qrels": qrels_rows, "collections": collection_rows,
            "response_judgements": judgement_rows}


def datasets_command(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """List the bundled topic sets, qrels and collections with their counts."""
    summary = dataset_summary()
    if as_json:
        print_json(summary)
        return
    table = Table(title="Topics")
    for column in ("name", "conversations", "turns", "description"):
        table.add_column(column, justify="right" if column in ("conversations", "turns") else "left")
    for row in summary["topics"]:
        table.add_row(row["name"], str(row["conversations"]), str(row["turns"]), row["description"])
    console.print(table)
    table = Table(title="Qrels")
    for column in ("name", "judged turns", "judgements", "description"):
        table.add_column(column, justify="right" if column != "name" and column != "description" else "left")
    for row in summary["qrels"]:
        table.add_row(row["name"], str(row["judged_turns"]), str(row["judgements"]), row["description"])
    console.print(table)
    table = Table(title="Collections")
    for column in ("name", "passages", "description"):
        table.add_column(column)
    for row in summary["collections"]:
        table.add_row(row["name"], str(row["passages"]), row["description"])
    console.print(table)
    table = Table(title="Response judgements")
    for column in ("name", "kind", "description"):
        table.add_column(column)
    for row in summary["response_judgements"]:
        table.add_row(row["name"], row["kind"], row["description"])
    console.print(table)
    console.print("Any command that takes a dataset name also takes a path to a file.")


def register(app: typer.Typer) -> None:
    app.command("datasets")(datasets_command)
