"""Reading files: every reader turns what can go wrong with a file (missing, a directory, unreadable, not UTF-8,
malformed JSON) into an :class:`~apcir.errors.ApcirError` naming the file and, where there is one, the line."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from apcir.errors import ApcirError


def os_problem(exc: OSError) -> str:
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
        raise ApcirError(f"cannot read {what}: {os_problem(exc)}", path=path) from None


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
        raise ApcirError(f"cannot read {what}: {os_problem(exc)}", path=path) from None
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
            raise ApcirError(f"cannot read {what}: {os_problem(exc)}", path=path, line=number + 1) from None


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
