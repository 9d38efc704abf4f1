"""What every settings model shares: keys that were renamed keep working, with a warning naming the new key."""

from __future__ import annotations

import os
from typing import Any

from apcir.console import warn
from apcir.errors import ApcirError


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


# ---- environment variables --------------------------------------------------------------------------
# Each variable apcir reads is read here, and a value it cannot use is refused in one line naming the variable.
# SOURCE_DATE_EPOCH is also read by libraries apcir loads (numpy when scipy is first imported, matplotlib's PDF and
# SVG writers), which fail with a bare ValueError or OSError on a value they cannot read: the CLI checks the
# variables before anything imports them (:func:`check_environment`), and so does the public Python API.
SOURCE_DATE_ENV = "SOURCE_DATE_EPOCH"
LATEST_SOURCE_DATE = 253_402_300_799
"""9999-12-31 23:59:59 UTC: the last second Python's ``datetime`` (and so apcir's records and matplotlib) can date."""
THREADS_ENV = "APCIR_THREADS"
MAX_THREADS = 1024


def whole_number(text: str) -> bool:
    """Whether ``text`` is a whole number written in ASCII digits (``str.isdigit`` also accepts ``²`` and other
    digits that ``int`` refuses)."""
    return text.isascii() and text.isdigit()


def _at_most(text: str, limit: int) -> bool:
    """Whether the ASCII digits ``text`` stand for at most ``limit`` (without ``int`` of a huge string, which Python
    refuses past 4,300 digits)."""
    digits = text.lstrip("0") or "0"
    return len(digits) <= len(str(limit)) and int(digits) <= limit


def _shown(text: str, limit: int = 40) -> str:
    """``text`` as a message quotes it: whole when short, else its start and its length."""
    return text if len(text) <= limit else f"{text[:20]}...({len(text)} characters)"


def source_date_epoch() -> int | None:
    """``SOURCE_DATE_EPOCH`` (reproducible-builds.org): the date to write where an output must carry one, or None
    when it is unset (then no date is written wherever one can be left out). A value that is not a whole number of
    seconds in ASCII digits (an empty one included: numpy cannot read it either), or that is past
    :data:`LATEST_SOURCE_DATE`, is a one-line error."""
    raw = os.environ.get(SOURCE_DATE_ENV)
    if raw is None:
        return None
    value = raw.strip()
    if not value:
        raise ApcirError(f"{SOURCE_DATE_ENV} is set but empty: give seconds since 1970-01-01 UTC (e.g. 1700000000), "
                         "or unset it")
    if not whole_number(value):
        raise ApcirError(f"{SOURCE_DATE_ENV}={_shown(raw)!r}: expected seconds since 1970-01-01 UTC as a whole number "
                         "in ASCII digits (e.g. 1700000000), or leave it unset")
    if not _at_most(value, LATEST_SOURCE_DATE):
        raise ApcirError(f"{SOURCE_DATE_ENV}={_shown(value)}: too large; the largest value accepted is "
                         f"{LATEST_SOURCE_DATE} (9999-12-31 23:59:59 UTC)")
    return int(value)


def threads_from_env(default: int) -> int:
    """The CPU threads ``APCIR_THREADS`` asks for (torch's intra-op threads, llama.cpp's server), else ``default``.
    A value that is not a whole number (ASCII digits) from 1 to :data:`MAX_THREADS` is refused in one line."""
    value = os.environ.get(THREADS_ENV, "").strip()
    if not value:
        return default
    if not whole_number(value) or not _at_most(value, MAX_THREADS) or int(value) < 1:
        raise ApcirError(f"{THREADS_ENV}={_shown(value)!r}: give a positive whole number of CPU threads, at most "
                         f"{MAX_THREADS} (or unset it)")
    return int(value)


def secret_from_env(name: str) -> str:
    """The key or token in the variable ``name`` ('' when unset). A value that cannot be sent in an HTTP header as
    it is (a line break or another control character, a character outside ASCII, a space at either end) is refused
    in one line naming the variable and the character's position, never the value: sent, it fails as a
    "connection error" that says nothing of the key."""
    value = os.environ.get(name, "")
    for position, char in enumerate(value, 1):
        if not " " <= char <= "~":
            what = ("a line break" if char in "\r\n" else "a character outside ASCII" if not char.isascii()
                    else "a control character")
            hint = " (was it read from a file with its line end?)" if char in "\r\n" else ""
            raise ApcirError(f"{name} holds {what} at character {position} of {len(value)}: a key or token is one "
                             f"line of printable ASCII{hint}")
    if value != value.strip(" "):
        raise ApcirError(f"{name} starts or ends with a space: a key or token has none (check how it was set)")
    return value


def check_environment() -> None:
    """Refuse (one line, :class:`~apcir.errors.ApcirError`) an environment variable apcir reads whose value it
    cannot use; called before anything imports numpy, scipy or matplotlib, which read ``SOURCE_DATE_EPOCH``."""
    source_date_epoch()
    threads_from_env(1)
