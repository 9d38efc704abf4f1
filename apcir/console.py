"""Everything apcir prints while it works: warnings, notes and progress bars, on stderr.

Library code never imports the CLI; it reports through these functions, and
the CLI (or a notebook, or a test) decides where the output goes. Results a
command is asked for go to stdout (:data:`out`); everything said about the
work goes to stderr (:data:`err`), so piping a command's output stays clean.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape

out = Console()
err = Console(stderr=True)


def warn(message: str) -> None:
    """A warning on stderr: something the user should know about, the work goes on."""
    err.print(f"[yellow]warning:[/] {escape(message)}", highlight=False, soft_wrap=True)


def note(message: str) -> None:
    """A plain remark on stderr."""
    err.print(message, highlight=False, soft_wrap=True, markup=False)


@contextmanager
def progress(description: str, total: int, enabled: bool = True) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr (done/total, elapsed, remaining); yields ``advance(n)``."""
    if not enabled or total <= 0:
        yield lambda n: None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=False,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)
