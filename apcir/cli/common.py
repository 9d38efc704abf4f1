"""Shared pieces of the commands: consoles, JSON output, tables, and settings built from options."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from rich.table import Table

from apcir.console import err as err_console
from apcir.console import out as console
from apcir.errors import ApcirError

__all__ = ["console", "err_console", "means_table", "print_json", "settings"]

M = TypeVar("M", bound=BaseModel)


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


def settings(model: type[M], /, **values: Any) -> M:
    """A stage's settings record from command-line values (None: the default); a bad value names its option."""
    given = {k: v for k, v in values.items() if v is not None}
    try:
        return model.model_validate(given)
    except ValidationError as exc:
        first = exc.errors()[0]
        option = "--" + str(first["loc"][-1]).replace("_", "-") if first["loc"] else "an option"
        given_value = first.get("input")
        shown = f" {given_value!r}" if isinstance(given_value, (str, int, float)) else ""
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ApcirError(f"{option}{shown}: {message}") from None
