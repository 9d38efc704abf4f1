"""User-facing errors, and where the traceback of an internal error goes.

Every error a user can act on is an :class:`ApcirError`: the CLI prints its
message (which names the file, line or turn and what was expected) and exits
with status 2, without a traceback. Anything else is a bug in apcir: the CLI
prints one line saying where the full traceback was written
(:func:`crash_log_path`), and exits with status 3.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

# Where an internal error's traceback is written: the run directory of `apcir run`
# while one is running (set by the experiment), else a folder in the temp directory.
_crash_dir: Path | None = None


class ApcirError(Exception):
    """An error caused by input the user can fix (exit status ``exit_code``: 2, a user error)."""

    exit_code = 2

    def __init__(self, message: str, *, path: str | Path | None = None, line: int | None = None):
        self.path = str(path) if path is not None else None
        self.line = line
        self.message = message
        """The message without the path and line."""
        where = ""
        if self.path is not None:
            where = self.path if line is None else f"{self.path}:{line}"
            where += ": "
        super().__init__(f"{where}{message}")


def set_crash_log_dir(folder: Path | None) -> None:
    """Write the traceback of an internal error into ``folder`` (``error.log``) from now on."""
    global _crash_dir
    _crash_dir = folder


def crash_log_path() -> Path:
    """Where the traceback of an internal error is written."""
    if _crash_dir is not None:
        return _crash_dir / "error.log"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(tempfile.gettempdir()) / "apcir-errors" / f"{stamp}-{os.getpid()}.log"


class StaleOutput(ApcirError):
    """A resumable output whose records were made with other settings: the command stops (exit 1) rather than
    mix them; ``--refresh`` redoes them."""

    exit_code = 1
