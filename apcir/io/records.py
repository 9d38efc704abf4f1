"""Resumable record logs: one JSON record per line, appended as each item finishes, read back by a resumed job."""

from __future__ import annotations

from collections.abc import Callable
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
