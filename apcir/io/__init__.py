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
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from apcir.errors import ApcirError
from apcir.settings import source_date_epoch, whole_number


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


def columns(lines: Iterable[tuple[int, str]], path: Path, layout: str) -> Iterator[tuple[int, list[str]]]:
    """The whitespace-separated fields of each non-blank line of ``lines`` (``(number, text)``, as
    :func:`iter_lines` yields them); a line must have as many as ``layout`` names (``turn_id Q0 passage_id rank
    score tag``), else it is an error naming the line."""
    expected = len(layout.split())
    for number, line in lines:
        fields = line.split()
        if not fields:
            continue
        if len(fields) != expected:
            raise ApcirError(f"expected {expected} fields '{layout}', found {len(fields)}", path=path, line=number)
        yield number, fields


def read_json(path: Path, what: str = "file") -> Any:
    """Parse a JSON file; a syntax error names the file, line and column, a lone surrogate its field."""
    return json_loads(read_text(path, what), path)


def json_loads(text: str | bytes, path: Path | str, line: int | None = None) -> Any:
    """``json.loads`` for input files: every way it can fail, and text that is not Unicode, is an
    :class:`ApcirError` naming the file and line (the one JSON parser of apcir's readers)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ApcirError(f"malformed JSON: {exc.msg} (column {exc.colno})", path=path,
                         line=exc.lineno if line is None else line) from None
    except RecursionError:
        raise ApcirError("malformed JSON: nested too deeply", path=path, line=line) from None
    except ValueError as exc:  # e.g. an integer literal longer than Python converts
        raise ApcirError(f"malformed JSON: {exc}", path=path, line=line) from None
    check_unicode(value, path, line, text)
    return value


# A \uD800-\uDFFF escape: JSON allows it, but alone (not as a pair) it is no character and cannot be written.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def check_unicode(value: Any, path: Path | str, line: int | None = None, text: str | bytes | None = None) -> None:
    """Refuse a parsed value holding a lone surrogate (``"\\ud83d"``: valid JSON or YAML, not valid text).

    ``text``, the source, makes the common case free: without a surrogate escape in it there is
    nothing to look for. The error names the field and the character."""
    if text is not None:
        raw = text if isinstance(text, str) else text.decode("utf-8", "replace")
        if "\\" not in raw or not _SURROGATE_ESCAPE.search(raw):
            return
    found = _lone_surrogate(value, "")
    if found is not None:
        field, char = found
        where = f"field {field}" if field else "the value"
        raise ApcirError(f"{where} holds a lone surrogate (\\u{ord(char):04x}): valid JSON, but not a Unicode "
                         "character, so it cannot be written as UTF-8; fix the escape (a pair, or the character "
                         "itself)", path=path, line=line)


def _lone_surrogate(value: Any, where: str) -> tuple[str, str] | None:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return where, value[exc.start]
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            name = f"{where}.{key}" if where else str(key)
            if (found := _lone_surrogate(key, name)) is not None:
                return (name if where else repr(key)), found[1]
            if (found := _lone_surrogate(item, name)) is not None:
                return found
        return None
    if isinstance(value, list):
        for index, item in enumerate(value):
            if (found := _lone_surrogate(item, f"{where}[{index}]")) is not None:
                return found
    return None


def parse_json_line(text: str, path: Path, number: int) -> dict[str, Any]:
    """One JSONL line as an object; anything else is an error naming the file and line."""
    record = json_loads(text, path, number)
    if not isinstance(record, dict):
        raise ApcirError(f"expected a JSON object, found {type(record).__name__}", path=path, line=number)
    return record


def iter_jsonl(path: Path, what: str = "file", *, skip_malformed: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a JSONL file.

    A line that is not a JSON object is an error naming the file and line, or, with ``skip_malformed`` (a reader
    that shows what a log holds, whose last line a killed run may have torn), passed over."""
    for number, line in iter_lines(path, what):
        if not line.strip():
            continue
        try:
            record = parse_json_line(line, path, number)
        except ApcirError:
            if skip_malformed:
                continue
            raise
        yield number, record


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
        remove_stale_temporaries(target.parent, target.name)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{_TEMP_MARK}{os.getpid()}.", suffix=".tmp",
                                   dir=target.parent)
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
            if pid is not None and (int(pid) == os.getpid() or _alive(int(pid))):
                continue
            path.unlink(missing_ok=True)
            removed.append(path)
    except OSError:
        pass  # best effort: a folder that cannot be listed or a file that cannot go is not this write's problem
    return removed


def check_writable(path: Path, what: str = "output") -> Path:
    """Fail early (before any long work) when ``path`` cannot be written: a directory, or an unwritable folder."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise ApcirError(f"{what} is a directory; expected a file path", path=target)
    folder = target.parent
    _writable_folder(folder, f"the folder of the {what}", f"cannot write the {what} here", target)
    if target.exists() and not os.access(target, os.W_OK) and not os.access(folder, os.W_OK):
        raise ApcirError(f"cannot replace the {what}: permission denied", path=target)
    return target


PathLike = Path | str | None


def _resolved(path: PathLike) -> Path | None:
    """An existing input's real path (symlinks and ``..`` resolved), else None (a dataset name, nothing there)."""
    if path is None or str(path) == "":
        return None
    candidate = Path(path).expanduser()
    try:
        return candidate.resolve() if candidate.exists() else None
    except (OSError, RuntimeError):  # a symlink loop
        return None


def _target(path: Path | str) -> Path:
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(Path(path).expanduser()))


def _same_file(a: Path, b: Path) -> bool:
    if a == b:
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)  # hard links
    except OSError:
        return False


def refuse_inputs_as_outputs(outputs: Iterable[PathLike], inputs: Iterable[PathLike] = (),
                             folders: Iterable[PathLike] = ()) -> None:
    """The one check every writing command makes before any work: no output may be one of its inputs.

    An output is refused when it resolves (symlinks, ``..`` and hard links included) to an input file, or
    lies inside (or is) a folder the command reads or that an index it reads depends on (``folders``: an
    index directory, a run directory). Inputs that do not exist (dataset names) are not files and are
    skipped."""
    files = [(p, r) for p in inputs if (r := _resolved(p)) is not None]
    dirs = [(p, r) for p in folders if (r := _resolved(p)) is not None]
    for out in outputs:
        if out is None or str(out) == "":
            continue
        target = _target(out)
        for given, real in files:
            if real.is_dir():
                dirs.append((given, real))
                continue
            if _same_file(target, real):
                raise ApcirError(f"the output is an input of this command ({given}); writing it would destroy "
                                 "that input: choose another output path", path=out)
        for given, real in dirs:
            if target == real or target.is_relative_to(real):
                raise ApcirError(f"the output lies inside {given}, a folder this command reads; writing there "
                                 "could destroy what it reads: choose a path outside it", path=out)


def refuse_inputs_inside(folder: PathLike, inputs: Iterable[PathLike], what: str = "output folder") -> None:
    """Refuse an output folder that is an input, or that holds an input file (a later overwrite or a file of
    the same name would destroy it): for commands that write a whole folder (an index, a run directory)."""
    if folder is None:
        return
    target = _target(folder)
    for given in inputs:
        real = _resolved(given)
        if real is None:
            continue
        if target == real or real.is_relative_to(target) or (real.is_file() and target.is_relative_to(real)):
            raise ApcirError(f"the {what} holds (or is) an input of this command ({given}); keep inputs outside "
                             "the folders apcir writes", path=folder)


def check_writable_dir(path: Path, what: str = "output folder") -> Path:
    """Like :func:`check_writable`, for a folder apcir will write into."""
    target = Path(path).expanduser()
    if target.exists() and not target.is_dir():
        raise ApcirError(f"{what} is a file; expected a folder", path=target)
    _writable_folder(target, f"the {what}", f"cannot write into the {what}", target)
    return target


def _writable_folder(folder: Path, called: str, refused: str, named: Path) -> None:
    """Make ``folder`` (and its parents) and check that files can be made in it; an error says ``cannot create
    {called}`` or ``{refused}: permission denied`` (naming ``named``)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ApcirError(f"cannot create {called}: {_os_problem(exc)}", path=folder) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ApcirError(f"{refused}: permission denied", path=named)


NAME_MAX = 255
"""The longest file or folder name, in bytes of UTF-8, that the common file systems take (ext4, XFS, APFS)."""


def folder_name_problem(name: str) -> str | None:
    """What keeps ``name`` from naming one folder of its own inside another (``runs/NAME``), said after the name
    (``is ...``, ``holds ...``), or None: ``.`` or ``..`` (the folder itself or its parent), a slash, a control
    character, or more than :data:`NAME_MAX` bytes."""
    if name in (".", ".."):
        return "is the folder itself or the one above it, not a folder of its own"
    if "/" in name or "\\" in name:
        return "holds a slash"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "holds a control character"
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > NAME_MAX:
        return f"is {size} bytes long; a folder's name is at most {NAME_MAX}"
    return None


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
def exclusive(lock_path: Path, what: str, guards: Path | None = None) -> Iterator[None]:
    """Hold ``lock_path`` while the body runs; a second holder fails at once, naming the first.

    The lock is an ``flock`` on the file, which the kernel releases when its
    holder dies, so a lock left by a killed process is taken over (with a
    message saying so). The file stays, saying who held it last, unless the
    output it ``guards`` does not exist at the end (a failed start).
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
        words = previous.split()  # "held by pid PID on HOST since ..." (a pid apcir cannot read is let be)
        if previous.startswith("held by pid ") and len(words) > 3 and whole_number(words[3]) and len(words[3]) < 10:
            pid = int(words[3])
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
        if guards is not None and not guards.exists():
            lock_path.unlink(missing_ok=True)  # the output it guarded was never written: leave nothing behind


# ---- resumable record logs: one JSON record per line, appended as each item finishes ---------------
R = TypeVar("R", bound=BaseModel)


def read_record_log(path: Path, model: type[R], what: str) -> dict[str, R]:
    """The records already in a log (by ``turn_id``; a later line replaces an earlier one).

    A torn last line left by a killed run is cut off, but only a torn *record*
    (one starting with ``{"turn_id"``): any other file given as the log by
    mistake is an error and is left as it is. A last line that is a complete
    record without its newline is kept, and the newline added.
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
        try:
            last = model.model_validate_json(torn)
        except ValidationError:
            last = None
        if last is not None:  # a complete record that only lacks its newline (an editor, a copy): kept
            records[getattr(last, "turn_id")] = last  # noqa: B009
            with path.open("ab") as handle:
                handle.write(b"\n")
            return records
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

    def __init__(self, handle: IO[str], advance: Callable[[int], None], start: Callable[[], None] | None = None):
        self.handle = handle
        self.advance = advance
        self.start = start
        self.records: list[R] = []

    def __call__(self, record: R) -> None:
        if not self.records and self.start is not None:
            self.start()  # once, before the first record of this call
        self.handle.write(record.model_dump_json() + "\n")
        self.handle.flush()
        self.records.append(record)
        self.advance(1)
