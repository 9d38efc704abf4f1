"""Everything apcir prints while it works: warnings, notes and progress bars, on stderr.

Library code never imports the CLI; it reports through these functions, and
the CLI (or a notebook, or a test) decides where the output goes. Results a
command is asked for go to stdout (:data:`out`); everything said about the
work goes to stderr (:data:`err`), so piping a command's output stays clean.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape


def _console(stderr: bool) -> Console:
    """A console that wraps to the terminal's width, and never cuts a line sent to a file or a pipe (a table
    redirected to a file keeps its full rows; rich would otherwise cut it to 80 columns)."""
    stream = sys.stderr if stderr else sys.stdout
    piped = not (hasattr(stream, "isatty") and stream.isatty())
    return Console(stderr=stderr, width=PIPE_WIDTH if piped and "COLUMNS" not in os.environ else None)


def _drop_unusable_sizes() -> list[str]:
    """``COLUMNS`` and ``LINES`` (read by rich) that are set but are not a terminal size: rich takes any digits for
    a number (``²`` fails in ``int``, a width of 0 prints every table empty) and ignores anything else. Such a
    value is removed from the environment, so that the terminal's own size is used; returns what was removed."""
    dropped = []
    for name in ("COLUMNS", "LINES"):
        value = os.environ.get(name)
        if value and not (len(value) <= 6 and value.isascii() and value.isdigit() and int(value) > 0):
            del os.environ[name]
            dropped.append(f"{name}={value[:20]!r}")
    return dropped


PIPE_WIDTH = 10_000
_dropped = _drop_unusable_sizes()
out = _console(stderr=False)
err = _console(stderr=True)


def set_quiet(quiet: bool = True) -> None:
    """Silence (or restore) everything apcir says: warnings, notes, progress bars and tables."""
    out.quiet = err.quiet = quiet


@contextmanager
def silenced() -> Iterator[None]:
    """Within the block apcir says nothing (``with apcir.console.silenced(): ...``)."""
    before = (out.quiet, err.quiet)
    set_quiet(True)
    try:
        yield
    finally:
        out.quiet, err.quiet = before


def rule(title: str = "") -> None:
    """A separator line on stdout: the terminal's width, or 60 columns in a file."""
    if out.width >= PIPE_WIDTH:
        out.print(f"── {title} " + "─" * 40 if title else "─" * 60, highlight=False, markup=False)
    else:
        out.rule(title)


def warn(message: str) -> None:
    """A warning on stderr: something the user should know about, the work goes on."""
    err.print(f"[yellow]warning:[/] {escape(message)}", highlight=False, soft_wrap=True)


for _size in _dropped:
    warn(f"{_size} is not a terminal size (a whole number from 1, at most 6 digits); ignored")


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

    description = short_label(description)
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


def shown(items: Iterable[object], limit: int = 10) -> str:
    """The first ``limit`` items, comma-separated, with `` ...`` when there are more (for messages)."""
    listed = [str(i) for i in items]
    return ", ".join(listed[:limit]) + (" ..." if len(listed) > limit else "")


def short_label(description: str, limit: int = 40) -> str:
    """A progress bar's label without long paths: a path is shown by its file name (``reformulate x.jsonl``)."""
    words = [w.rsplit("/", 1)[-1] if "/" in w else w for w in description.split(" ")]
    label = " ".join(words)
    return label if len(label) <= limit else label[: limit - 3] + "..."
