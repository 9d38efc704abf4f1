"""Reading JSON and JSONL files with errors that name the file and line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from apcir.errors import ApcirError


def read_json(path: Path) -> Any:
    """Parse a JSON file; a syntax error names the file, line and column."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ApcirError("file not found", path=path) from None
    except UnicodeDecodeError as exc:
        raise ApcirError(f"not UTF-8 text ({exc.reason})", path=path) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ApcirError(f"malformed JSON: {exc.msg} (column {exc.colno})", path=path, line=exc.lineno) from None


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a JSONL file."""
    try:
        handle = path.open(encoding="utf-8")
    except FileNotFoundError:
        raise ApcirError("file not found", path=path) from None
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ApcirError(f"malformed JSON: {exc.msg} (column {exc.colno})", path=path, line=number) from None
            if not isinstance(record, dict):
                raise ApcirError(f"expected a JSON object, found {type(record).__name__}", path=path, line=number)
            yield number, record
