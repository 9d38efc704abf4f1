"""Shared pieces of the commands: consoles and JSON output."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

console = Console()
err_console = Console(stderr=True)


def print_json(data: Any) -> None:
    """Plain JSON on stdout (no colour codes), for piping into other tools."""
    print(json.dumps(data, indent=2, ensure_ascii=False))


def means_table(title: str, measures: dict[str, float]) -> Table:
    """A two-column table of measure means, four decimals (trec_eval's precision)."""
    table = Table(title=title)
    table.add_column("measure")
    table.add_column("mean", justify="right")
    for name, value in measures.items():
        table.add_row(name, f"{value:.4f}")
    return table
