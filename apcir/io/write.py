"""Writing files: every writer goes through :func:`atomic_write`: the data goes to a temporary file in the
target's folder, which replaces the target only once it is complete, so a crash or a full disk never leaves a torn
artifact behind, and an unwritable target is an :class:`~apcir.errors.ApcirError` naming it."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Literal

from apcir.errors import ApcirError
from apcir.io.lock import process_alive
from apcir.io.read import os_problem
from apcir.settings import source_date_epoch


@contextmanager
def atomic_write(path: Path, mode: Literal["w", "wb"] = "w") -> Iterator[IO[Any]]:
    """Write ``path`` all at once: yields a handle on a temporary file that replaces ``path`` on success.

    Folders are created as needed. If the body raises, the temporary file is
    removed and ``path`` is left as it was. An unwritable target (read-only
    folder, a directory where a file is expected, a full disk) is an
    :class:`ApcirError` naming it.
    """
    target = Path(path)
    if target.is_dir():
        raise ApcirError("is a directory; expected a file path to write", path=target)
    if target.is_symlink():
        target = target.resolve()  # write through the link, as a shell redirection would
    if target.exists() and not target.is_file():
        # A device or a named pipe (/dev/null, /dev/stdout, a FIFO): written into, never replaced.
        with _write_through(target, mode) as handle:
            yield handle
        return
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(target.parent, target.name)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{_TEMP_MARK}{os.getpid()}.", suffix=".tmp",
                                   dir=target.parent)
    except OSError as exc:
        raise ApcirError(f"cannot write here: {os_problem(exc)}", path=target) from None
    try:
        # mkstemp makes the file private (0600); give it the mode a plain open() would have.
        os.chmod(tmp, target.stat().st_mode & 0o7777 if target.exists() else 0o666 & ~_UMASK)
        with (os.fdopen(fd, "wb") if mode == "wb" else os.fdopen(fd, "w", encoding="utf-8")) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise ApcirError(f"cannot write: {os_problem(exc)}", path=target) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def _write_through(target: Path, mode: Literal["w", "wb"]) -> Iterator[IO[Any]]:
    try:
        with (target.open("wb") if mode == "wb" else target.open("w", encoding="utf-8")) as handle:
            yield handle
    except OSError as exc:
        raise ApcirError(f"cannot write: {os_problem(exc)}", path=target) from None


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


_TEMP_MARK = "apcir-"
_TEMP_NAME = re.compile(r"^\.(?P<name>.+?)\.(?:apcir-(?P<pid>\d+)\.)?[A-Za-z0-9_]{8}\.tmp$")


def remove_stale_temporaries(folder: Path, name: str | None = None, recursive: bool = False) -> list[Path]:
    """Remove the temporary files that a killed apcir left (``.NAME.apcir-PID.XXXXXXXX.tmp``, whose process is
    gone; the form before the pid was recorded, ``.NAME.XXXXXXXX.tmp``, too). ``name``: only those of that
    target. Files of a live process, and files apcir does not own, are left alone. Returns what was removed."""
    removed: list[Path] = []
    try:
        candidates = Path(folder).rglob(".*.tmp") if recursive else Path(folder).glob(".*.tmp")
        for path in candidates:
            match = _TEMP_NAME.match(path.name)
            if match is None or (name is not None and match["name"] != name) or not path.is_file():
                continue
            pid = match["pid"]
            if pid is not None and (int(pid) == os.getpid() or process_alive(int(pid))):
                continue
            path.unlink(missing_ok=True)
            removed.append(path)
    except OSError:
        pass  # best effort: a folder that cannot be listed or a file that cannot go is not this write's problem
    return removed


def write_text(path: Path, text: str) -> None:
    """Write a text file atomically (UTF-8)."""
    with atomic_write(path) as handle:
        handle.write(text)


def write_json(path: Path, data: Any, indent: int | None = 1) -> None:
    """Write JSON atomically (UTF-8, non-ASCII kept), with a final newline."""
    write_text(path, json.dumps(data, indent=indent, ensure_ascii=False) + "\n")


def write_jsonl(path: Path, records: list[Any]) -> None:
    """Write JSONL atomically: one JSON value per line."""
    with atomic_write(path) as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


# ---- reproducible bytes ----------------------------------------------------------------------------
def timestamp() -> str:
    """When a record says it was made (ISO 8601, UTC, to the second): now, or ``SOURCE_DATE_EPOCH`` when it is
    set. Only the files that exist to record times carry one (summaries, an index's manifest)."""
    from datetime import UTC, datetime

    epoch = source_date_epoch()
    moment = datetime.now(UTC) if epoch is None else datetime.fromtimestamp(epoch, UTC)
    return moment.isoformat(timespec="seconds")
