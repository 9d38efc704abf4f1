"""User-facing errors.

Every error a user can act on is an :class:`ApcirError`: the CLI prints its
message (which names the file, line or turn and what was expected) and exits
non-zero without a traceback. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from pathlib import Path


class ApcirError(Exception):
    """An error caused by input the user can fix."""

    def __init__(self, message: str, *, path: str | Path | None = None, line: int | None = None):
        self.path = str(path) if path is not None else None
        self.line = line
        where = ""
        if self.path is not None:
            where = self.path if line is None else f"{self.path}:{line}"
            where += ": "
        super().__init__(f"{where}{message}")
