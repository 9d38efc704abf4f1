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


THREADS_ENV = "APCIR_THREADS"


def threads_from_env(default: int) -> int:
    """The CPU threads ``APCIR_THREADS`` asks for (torch's intra-op threads, llama.cpp's server), else ``default``.
    A value that is not a positive whole number is refused in one line."""
    import os

    from apcir.errors import ApcirError

    value = os.environ.get(THREADS_ENV, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise ApcirError(f"{THREADS_ENV}={value!r}: give a positive whole number of CPU threads (or unset it)")
    return int(value)
