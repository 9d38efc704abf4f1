"""Reading and writing files: one place for encodings, errors that name the file, and atomic writes.

Every reader (:mod:`apcir.io.read`) turns what can go wrong with a file (missing, a directory, unreadable, not
UTF-8, malformed JSON) into an :class:`~apcir.errors.ApcirError` naming the file and, where there is one, the line.
Every writer (:mod:`apcir.io.write`) goes through :func:`atomic_write`: the data goes to a temporary file in the
target's folder, which replaces the target only once it is complete, so a crash or a full disk never leaves a torn
artifact behind, and an unwritable target is an :class:`~apcir.errors.ApcirError` naming it. Output paths are
checked before any work (:mod:`apcir.io.paths`), a folder is written by one command at a time
(:mod:`apcir.io.lock`), and a long job appends its records as they finish (:mod:`apcir.io.records`).

The package's modules are its rooms; ``from apcir.io import NAME`` is the one import for all of them.
"""

from __future__ import annotations

from apcir.io.lock import exclusive
from apcir.io.paths import (
    NAME_MAX,
    check_writable,
    check_writable_dir,
    folder_name_problem,
    refuse_inputs_as_outputs,
    refuse_inputs_inside,
)
from apcir.io.read import (
    check_unicode,
    columns,
    decode,
    iter_jsonl,
    iter_lines,
    json_loads,
    parse_json_line,
    read_bytes,
    read_json,
    read_text,
)
from apcir.io.records import RecordAppender, RecordLog, read_record_log
from apcir.io.write import atomic_write, remove_stale_temporaries, timestamp, write_json, write_jsonl, write_text

__all__ = [
    "NAME_MAX",
    "RecordAppender",
    "RecordLog",
    "atomic_write",
    "check_unicode",
    "check_writable",
    "check_writable_dir",
    "columns",
    "decode",
    "exclusive",
    "folder_name_problem",
    "iter_jsonl",
    "iter_lines",
    "json_loads",
    "parse_json_line",
    "read_bytes",
    "read_json",
    "read_record_log",
    "read_text",
    "refuse_inputs_as_outputs",
    "refuse_inputs_inside",
    "remove_stale_temporaries",
    "timestamp",
    "write_json",
    "write_jsonl",
    "write_text",
]
