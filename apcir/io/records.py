"""Resumable record logs: one JSON record per line, appended as each item finishes, read back by a resumed job.

:func:`read_record_log` reads a log; :class:`RecordLog` keeps an open one indexed in memory (read at most once,
kept up to date with what is appended), so a job that appends one turn at a time (a live run) reads no earlier
record from disk again; :class:`RecordAppender` appends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from apcir.errors import ApcirError
from apcir.io.read import read_bytes

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


_FileState = tuple[int, int, int, int]


def _file_state(path: Path) -> _FileState | None:
    """What tells whether a log changed on disk without reading it (None: absent or empty, i.e. no record)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns) if stat.st_size else None


class RecordLog(Generic[R]):
    """An open record log ``path`` of ``model`` records, indexed by turn id in memory.

    The file is read (:func:`read_record_log`, which refuses a file that is no such log) once, on first use;
    then :meth:`add` puts each record appended to the file into the index (a later record replaces an earlier
    one, as in the file) and :meth:`clear` empties it when the file is started over. Held across the calls of a
    resumable batch (:func:`apcir.llm.batch.run_batch`'s ``log``), a call reads no earlier record from disk.

    The index follows only what goes through it: a log changed on disk by someone else (another command, an
    editor) is noticed from its size and modification time (:meth:`current`), and read again."""

    def __init__(self, path: Path, model: type[R], what: str):
        self.path = Path(path)
        self.model = model
        self.what = what
        self._records: dict[str, R] | None = None
        self._state: _FileState | None = None
        """The file as the index last saw it (:func:`_file_state`)."""

    @property
    def loaded(self) -> bool:
        """Whether the file was read (or started over) since the log was made."""
        return self._records is not None

    def current(self) -> dict[str, R]:
        """The index (by turn id; the log's own dict: do not change it), read from the file on first use, or again
        when the file changed on disk since the index last saw it (an empty or absent file: no record, not read)."""
        state = _file_state(self.path)
        if self._records is None or state != self._state:
            self._records = read_record_log(self.path, self.model, self.what) if state is not None else {}
            self._state = _file_state(self.path)  # reading may have cut a torn last line or added a newline
        return self._records

    def records(self, ids: Iterable[str]) -> dict[str, R]:
        """The records of the turns ``ids`` that have one, in the order of ``ids``, from memory (the file is read
        only on first use: :meth:`current`)."""
        records = self._records if self._records is not None else self.current()
        return {turn_id: records[turn_id] for turn_id in ids if turn_id in records}

    def all(self) -> dict[str, R]:
        """Every record (a copy of the index), from memory after first use."""
        return dict(self._records if self._records is not None else self.current())

    def add(self, record: R) -> None:
        """``record`` was just appended to the file (written and flushed): index it. Before the file was read, the
        index has nothing to keep up to date (the first use reads the record with the others)."""
        if self._records is not None:
            self._records[getattr(record, "turn_id")] = record  # noqa: B009 - every log record has a turn id
            self._state = _file_state(self.path)

    def clear(self) -> None:
        """The file was started over (removed or emptied): so is the index."""
        self._records = {}
        self._state = _file_state(self.path)

    def __len__(self) -> int:
        return len(self._records if self._records is not None else self.current())

    def __repr__(self) -> str:
        size = "not read" if self._records is None else f"{len(self._records)} records"
        return f"RecordLog({str(self.path)!r}, {self.model.__name__}, {size})"


class RecordAppender(Generic[R]):
    """Appends records to an open log, one line each, flushed at once (a crash loses at most the line being written);
    each record written is also put into ``log`` (:meth:`RecordLog.add`) when one is given."""

    def __init__(self, handle: IO[str], advance: Callable[[int], None], start: Callable[[], None] | None = None,
                 log: RecordLog[R] | None = None):
        self.handle = handle
        self.advance = advance
        self.start = start
        self.log = log
        self.records: list[R] = []

    def __call__(self, record: R) -> None:
        if not self.records and self.start is not None:
            self.start()  # once, before the first record of this call
        self.handle.write(record.model_dump_json() + "\n")
        self.handle.flush()
        if self.log is not None:
            self.log.add(record)
        self.records.append(record)
        self.advance(1)
