"""Reading and writing files: one place for encodings, errors that name the file, and atomic writes.

Every reader here turns what can go wrong with a file (missing, a directory,
unreadable, not UTF-8, malformed JSON) into an :class:`ApcirError` naming the
file and, where there is one, the line. Every writer goes through
:func:`atomic_write`: the data goes to a temporary file in the target's folder,
which replaces the target only once it is complete, so a crash or a full disk
never leaves a torn artifact behind, and an unwritable target is an
:class:`ApcirError` naming it.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from apcir.errors import ApcirError


# ---- reading -----------------------------------------------------------------------------------
def _os_problem(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "file not found"
    if isinstance(exc, IsADirectoryError):
        return "is a directory, not a file"
    if isinstance(exc, PermissionError):
        return "permission denied"
    return exc.strerror or type(exc).__name__


def read_bytes(path: Path, what: str = "file") -> bytes:
    """The bytes of a file; a missing or unreadable file is an :class:`ApcirError` naming it."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise ApcirError(f"{what} not found", path=path) from None
    except OSError as exc:
        raise ApcirError(f"cannot read {what}: {_os_problem(exc)}", path=path) from None


def decode(data: bytes, path: Path, what: str = "file") -> str:
    """UTF-8 text of ``data`` (a leading BOM is dropped); invalid bytes name the line they are on."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ApcirError(
            f"{what} is not UTF-8 text (byte {data[exc.start:exc.start + 1]!r} at offset {exc.start})",
            path=path,
            line=line,
        ) from None


def read_text(path: Path, what: str = "file") -> str:
    """A UTF-8 text file (see :func:`decode`)."""
    return decode(read_bytes(path, what), path, what)


def iter_lines(path: Path, what: str = "file") -> Iterator[tuple[int, str]]:
    """``(line number, line without its newline)`` for every line of a UTF-8 text file, streamed.

    Invalid UTF-8 is an error naming the line; a file too large for memory is
    fine (it is read line by line).
    """
    try:
        handle = Path(path).open("rb")
    except FileNotFoundError:
        raise ApcirError(f"{what} not found", path=path) from None
    except OSError as exc:
        raise ApcirError(f"cannot read {what}: {_os_problem(exc)}", path=path) from None
    with handle:
        number = 0
        try:
            for number, raw in enumerate(handle, start=1):  # noqa: B007 - number is used after the loop
                if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise ApcirError(
                        f"{what} is not UTF-8 text (byte {raw[exc.start:exc.start + 1]!r})", path=path, line=number
                    ) from None
                yield number, text.rstrip("\n").rstrip("\r")
        except OSError as exc:
            raise ApcirError(f"cannot read {what}: {_os_problem(exc)}", path=path, line=number + 1) from None


def read_json(path: Path, what: str = "file") -> Any:
    """Parse a JSON file; a syntax error names the file, line and column."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ApcirError(f"malformed JSON: {exc.msg} (column {exc.colno})", path=path, line=exc.lineno) from None
    except RecursionError:
        raise ApcirError("malformed JSON: nested too deeply", path=path) from None
    except ValueError as exc:  # e.g. an integer literal longer than Python converts
        raise ApcirError(f"malformed JSON: {exc}", path=path) from None


def parse_json_line(text: str, path: Path, number: int) -> dict[str, Any]:
    """One JSONL line as an object; anything else is an error naming the file and line."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ApcirError(f"malformed JSON: {exc.msg} (column {exc.colno})", path=path, line=number) from None
    except RecursionError:
        raise ApcirError("malformed JSON: nested too deeply", path=path, line=number) from None
    except ValueError as exc:  # e.g. an integer literal longer than Python converts
        raise ApcirError(f"malformed JSON: {exc}", path=path, line=number) from None
    if not isinstance(record, dict):
        raise ApcirError(f"expected a JSON object, found {type(record).__name__}", path=path, line=number)
    return record


def iter_jsonl(path: Path, what: str = "file") -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a JSONL file."""
    for number, line in iter_lines(path, what):
        if line.strip():
            yield number, parse_json_line(line, path, number)


# ---- writing -----------------------------------------------------------------------------------
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
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise ApcirError(f"cannot write here: {_os_problem(exc)}", path=target) from None
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
        raise ApcirError(f"cannot write: {_os_problem(exc)}", path=target) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def _write_through(target: Path, mode: Literal["w", "wb"]) -> Iterator[IO[Any]]:
    try:
        with (target.open("wb") if mode == "wb" else target.open("w", encoding="utf-8")) as handle:
            yield handle
    except OSError as exc:
        raise ApcirError(f"cannot write: {_os_problem(exc)}", path=target) from None


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def check_writable(path: Path, what: str = "output") -> Path:
    """Fail early (before any long work) when ``path`` cannot be written: a directory, or an unwritable folder."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise ApcirError(f"{what} is a directory; expected a file path", path=target)
    folder = target.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ApcirError(f"cannot create the folder of the {what}: {_os_problem(exc)}", path=folder) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ApcirError(f"cannot write the {what} here: permission denied", path=target)
    if target.exists() and not os.access(target, os.W_OK) and not os.access(folder, os.W_OK):
        raise ApcirError(f"cannot replace the {what}: permission denied", path=target)
    return target


def check_writable_dir(path: Path, what: str = "output folder") -> Path:
    """Like :func:`check_writable`, for a folder apcir will write into."""
    target = Path(path).expanduser()
    if target.exists() and not target.is_dir():
        raise ApcirError(f"{what} is a file; expected a folder", path=target)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ApcirError(f"cannot create the {what}: {_os_problem(exc)}", path=target) from None
    if not os.access(target, os.W_OK | os.X_OK):
        raise ApcirError(f"cannot write into the {what}: permission denied", path=target)
    return target


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


# ---- one writer at a time --------------------------------------------------------------------------
def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def exclusive(lock_path: Path, what: str) -> Iterator[None]:
    """Hold ``lock_path`` while the body runs; a second holder fails at once, naming the first.

    The lock is an ``flock`` on the file, which the kernel releases when its
    holder dies, so a lock left by a killed process is taken over (with a
    message saying so). The file stays, saying who held it last.
    """
    import fcntl
    import socket

    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        handle = lock_path.open("a+", encoding="utf-8")
    except OSError as exc:
        raise ApcirError(f"cannot create the lock file: {_os_problem(exc)}", path=lock_path) from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise ApcirError(
                f"{what} is being written by another apcir process ({holder}); wait for it to finish or use "
                "another output", path=lock_path
            ) from None
        handle.seek(0)
        previous = handle.read().strip()
        if previous.startswith("held by pid "):
            pid = int(previous.split()[3]) if previous.split()[3].isdigit() else -1
            if pid != os.getpid() and not _alive(pid):
                from apcir.console import warn

                warn(f"{what}: taking over the lock of pid {pid}, which stopped without releasing it")
        handle.seek(0)
        handle.truncate()
        handle.write(f"held by pid {os.getpid()} on {socket.gethostname()} since "
                     f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            handle.write(f"released by pid {os.getpid()} at {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
            handle.flush()
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        handle.close()


# ---- resumable record logs: one JSON record per line, appended as each item finishes ---------------
R = TypeVar("R", bound=BaseModel)


def read_record_log(path: Path, model: type[R], what: str) -> dict[str, R]:
    """The records already in a log (by ``turn_id``; a later line replaces an earlier one).

    A torn last line left by a killed run is cut off, but only a torn *record*
    (one starting with ``{"turn_id"``): any other file given as the log by
    mistake is an error and is left as it is.
    """
    if not path.exists():
        return {}
    data = read_bytes(path, what)
    complete, torn = data, b""
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        complete, torn = data[:cut], data[cut:]
    records: dict[str, R] = {}
    for number, line in enumerate(complete.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = model.model_validate_json(line)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ApcirError(f"not a {what} record ({first['msg']}); use another --out or --refresh to start over",
                             path=path, line=number) from None
        records[getattr(record, "turn_id")] = record  # noqa: B009 - every log record has a turn id
    if torn:
        if not torn.lstrip().startswith(b'{"turn_id"'):
            raise ApcirError(f"not a {what} JSONL file (its last line is not a record); use another --out",
                             path=path, line=complete.count(b"\n") + 1)
        with path.open("r+b") as handle:
            handle.truncate(len(complete))
        from apcir.console import warn

        warn(f"{path}: removed an incomplete last line (interrupted run)")
    return records


class RecordAppender(Generic[R]):
    """Appends records to an open log, one line each, flushed at once (a crash loses at most the line being written)."""

    def __init__(self, handle: IO[str], advance: Callable[[int], None]):
        self.handle = handle
        self.advance = advance
        self.records: list[R] = []

    def __call__(self, record: R) -> None:
        self.handle.write(record.model_dump_json() + "\n")
        self.handle.flush()
        self.records.append(record)
        self.advance(1)
