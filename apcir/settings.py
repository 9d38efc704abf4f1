"""What every settings model shares: keys that were renamed keep working, with a warning naming the new key."""

from __future__ import annotations

from typing import Any

from apcir.console import warn


def renamed_key(data: Any, old: str, new: str, where: str) -> Any:
    """``data`` (a settings model's raw input) with ``old`` moved to ``new``, warning once per use; both given is an
    error (pydantic reports it on the field)."""
    if not isinstance(data, dict) or old not in data:
        return data
    if new in data:
        raise ValueError(f"{where}: give {new!r} only ({old!r} is its old name)")
    warn(f"{where}: the key {old!r} is deprecated; it is now {new!r} (the old key still works for now)")
    data = dict(data)
    data[new] = data.pop(old)
    return data
