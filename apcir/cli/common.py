"""Shared pieces of the commands: consoles, JSON output, tables, and settings built from options."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from rich.table import Table

from apcir.console import err as err_console
from apcir.console import out as console
from apcir.errors import ApcirError
from apcir.llm.batch import BatchSummary

__all__ = ["console", "err_console", "means_table", "print_json", "settings"]

M = TypeVar("M", bound=BaseModel)


def print_json(data: Any) -> None:
    """Plain JSON on stdout (no colour codes), for piping into other tools."""
    print(json.dumps(data, indent=2, ensure_ascii=False))


def means_table(title: str, measures: dict[str, float]) -> Table:
    """A two-column table of measure means x100 (the scale of every human table of apcir), two decimals (trec_eval's
    four); JSON keeps the raw values."""
    table = Table(title=f"{title} (x100)")
    table.add_column("measure")
    table.add_column("mean x100", justify="right")
    for name, value in measures.items():
        table.add_row(name, f"{100 * value:.2f}")
    return table


def settings(model: type[M], /, **values: Any) -> M:
    """A stage's settings record from command-line values (None: the default); a bad value names its option."""
    given = {k: v for k, v in values.items() if v is not None}
    try:
        return model.model_validate(given)
    except ValidationError as exc:
        first = exc.errors()[0]
        option = "--" + str(first["loc"][-1]).replace("_", "-") if first["loc"] else ""
        given_value = first.get("input")
        if isinstance(given_value, str) and "://" in given_value:
            from apcir.llm.settings import redact_url

            given_value = redact_url(given_value)  # never print credentials given in a URL
        shown = f" {given_value!r}" if isinstance(given_value, (str, int, float)) else ""
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ApcirError(f"{option}{shown}: {message}" if option else message) from None


def print_batch_summary(summary: BatchSummary, title: str, extra: Sequence[tuple[str, str]] = ()) -> None:
    """What a record-writing stage (reformulate, respond) did: counts, ``extra`` rows, usage, failed turns."""
    table = Table(title=f"{title} -> {summary.out}")
    table.add_column("what")
    table.add_column("count", justify="right")
    for name, value in (
        ("turns asked for", summary.turns), ("already done (resumed)", summary.skipped),
        ("written now: ok", summary.ok), ("written now: failed", summary.failed),
        ("answers from cache", summary.cache_hits), ("requests sent", summary.requests),
        ("  of which retries", summary.retries), ("  of which repairs", summary.repairs),
    ):
        table.add_row(name, str(value))
    for name, text in extra:
        table.add_row(name, text)
    table.add_row("seconds", f"{summary.seconds:.1f}")
    console.print(table)
    if summary.usage and any(u.requests for u in summary.usage):
        usage = Table(title="usage")
        for column in ("model", "requests", "input tokens", "output tokens", "mean latency s", "max latency s",
                       "output tokens/s", "cost $"):
            usage.add_column(column, justify="right" if column != "model" else "left")
        for u in summary.usage:
            usage.add_row(
                u.model, str(u.requests), str(u.input_tokens), str(u.output_tokens), f"{u.mean_latency:.2f}",
                f"{u.max_latency_seconds:.2f}", "-" if u.tokens_per_second is None else f"{u.tokens_per_second:.1f}",
                "unpriced" if u.cost_usd is None else f"{u.cost_usd:.4f}",
            )
        console.print(usage)
    if summary.failed:
        console.print(
            f"[yellow]{summary.failed} turns failed[/] ({', '.join(summary.failed_turns[:10])}"
            f"{', ...' if summary.failed > 10 else ''}); their records keep the error and raw answer; "
            "re-run the same command to ask them again",
            highlight=False,
        )
    console.print(f"summary: {summary.summary_path}", highlight=False)
