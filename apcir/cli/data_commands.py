"""``apcir datasets``: what is bundled."""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from apcir import datasets
from apcir.cli.common import console, print_json


def dataset_summary() -> dict[str, Any]:
    """Counts for every bundled topic set, qrels file and collection."""
    topic_rows = []
    for name, info in datasets.TOPICS.items():
        turns = datasets.topics(name)
        topic_rows.append(
            {
                "name": name,
                "description": info.description,
                "conversations": len({t.conversation_id for t in turns}),
                "turns": len(turns),
                "source": info.source,
            }
        )
    qrels_rows = []
    for name, info in datasets.QRELS.items():
        judged = datasets.qrels(name)
        qrels_rows.append(
            {
                "name": name,
                "description": info.description,
                "judged_turns": len(judged),
                "judgements": sum(len(v) for v in judged.values()),
                "source": info.source,
            }
        )
    collection_rows = []
    for name, info in datasets.COLLECTIONS.items():
        count = sum(1 for _ in datasets.iter_collection(datasets.collection_path(name)))
        collection_rows.append(
            {"name": name, "description": info.description, "passages": count, "source": info.source}
        )
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
