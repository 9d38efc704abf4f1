"""The ``apcir`` command line; :func:`main` is the installed ``apcir`` command."""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType


def _interrupted_while_starting(signum: int, frame: FrameType | None) -> None:
    sys.stderr.write("interrupted\n")
    sys.stderr.flush()
    os._exit(130)


def main(argv: list[str] | None = None) -> None:
    """The ``apcir`` command (see :func:`apcir.cli.main.main` for its exit codes).

    Loading a command takes up to a second (typer, pydantic, numpy, ...; only the
    command's own module is imported, see :mod:`apcir.cli.lazy`). A Ctrl-C in that
    second would print a traceback from whichever import it interrupted, so until
    it is loaded Ctrl-C ends the process quietly with exit 130: nothing has been
    done yet that could be lost.
    """
    quiet = threading.current_thread() is threading.main_thread() and (
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )
    if quiet:
        signal.signal(signal.SIGINT, _interrupted_while_starting)
    from apcir.cli.main import main as run

    if quiet:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    run(argv)
