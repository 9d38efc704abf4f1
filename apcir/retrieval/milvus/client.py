"""Talking to Milvus: one client per location, failures as one line, pymilvus's own log kept off the terminal.

pymilvus logs every failed call (with a traceback) through its ``pymilvus`` loggers, which it points at the
terminal when it is imported. apcir points them at a log file instead (:func:`log_file`,
``~/.cache/apcir/milvus/pymilvus.log``, rotated at 1 MB; the token is masked), and a failure is one line
that names the file when pymilvus wrote something there.

gRPC's own transport messages (e.g. a server's ``GOAWAY ... too_many_pings`` to a connection left idle while
passages are encoded) are printed by its C core straight to the terminal; apcir turns them off
(``GRPC_VERBOSITY=NONE``, unless the variable is set) and gives each client a connection of its own, closed with
it, rather than pymilvus's shared one, which outlives the client.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from apcir.errors import ApcirError
from apcir.retrieval.location import TOKEN_ENV, MilvusLocation, milvus_cache_dir

LOG = "pymilvus.log"
_PYMILVUS_LOGGERS = ("pymilvus", "pymilvus.milvus_client", "pymilvus.bulk_writer")
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def log_file() -> Path:
    """Where pymilvus's own log goes (apcir's cache, beside the Milvus companion folders)."""
    return milvus_cache_dir() / LOG


class _LogFile(logging.handlers.RotatingFileHandler):
    """pymilvus's records, appended to :func:`log_file` (created on the first record, rotated at 1 MB, the token
    masked); never raises and never prints: an unwritable cache loses the log, the terminal stays clean."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, maxBytes=1_000_000, backupCount=1, encoding="utf-8", delay=True)
        self.path = path
        self.records = 0
        self.written = False
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.records += 1
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return
        super().emit(record)
        self.written = self.written or self.path.exists()

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        token = os.environ.get(TOKEN_ENV, "")  # as it is: redacted whether or not it could be sent
        return text.replace(token, "***") if token else text

    def handleError(self, record: logging.LogRecord) -> None:
        pass


_handler: _LogFile | None = None


def capture_logs() -> _LogFile:
    """Route pymilvus's loggers to :func:`log_file` instead of the terminal (idempotent)."""
    global _handler
    path = log_file()
    if _handler is None or _handler.path != path:
        if _handler is not None:
            _handler.close()
        _handler = _LogFile(path)
    for name in _PYMILVUS_LOGGERS:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            terminal = isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)
            if terminal or (isinstance(handler, _LogFile) and handler is not _handler):
                logger.removeHandler(handler)
        if _handler not in logger.handlers:
            logger.addHandler(_handler)
        logger.propagate = False
    return _handler


def connect(location: MilvusLocation) -> Any:
    """A ``pymilvus.MilvusClient`` for the location; failures are one line."""
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # read when gRPC's core starts (set GRPC_VERBOSITY to see it)
    try:
        from pymilvus import MilvusClient
    except ImportError:
        raise ApcirError("the milvus backends need pymilvus (and milvus-lite for milvus:PATH.db): "
                         "pip install pymilvus milvus-lite, or pip install 'apcir[milvus]'") from None
    if location.lite:
        parent = Path(location.uri).parent
        if not parent.is_dir():
            raise ApcirError(f"cannot open Milvus Lite database {location.uri}: folder {parent} does not exist")
    token = location.token()  # a token that cannot be sent is refused as such, not as an unreachable server
    logs = capture_logs()
    before = logs.records
    try:
        return MilvusClient(uri=location.uri, token=token, timeout=30, dedicated=True)
    except Exception as exc:  # pymilvus raises MilvusException, grpc and OS errors alike
        raise ApcirError(f"cannot reach Milvus at {location}: {reason(exc)}{_see_log(before)}") from None


def reason(exc: BaseException) -> str:
    """The first line of a pymilvus exception's message (its code and traceback left out)."""
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return str(message).strip().splitlines()[0]


def _see_log(before: int) -> str:
    if _handler is not None and _handler.records > before and _handler.written:
        return f" (pymilvus's log: {_handler.path})"
    return ""


@contextlib.contextmanager
def naming_the_log() -> Iterator[None]:
    """An :class:`ApcirError` raised inside names pymilvus's log file when pymilvus logged something meanwhile."""
    before = capture_logs().records
    try:
        yield
    except ApcirError as exc:
        note = _see_log(before)
        if note and note not in str(exc):
            raise ApcirError(f"{exc}{note}") from None
        raise


def call(location: MilvusLocation, what: str, function: Any, *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)``; a failure is one line: ``Milvus at LOCATION: WHAT failed: REASON``."""
    before = capture_logs().records
    try:
        return function(*args, **kwargs)
    except ApcirError:
        raise
    except Exception as exc:
        raise ApcirError(f"Milvus at {location}: {what} failed: {reason(exc)}{_see_log(before)}") from None


def server_version(client: Any, location: MilvusLocation) -> str:
    """What the server says it is (``v2.3.5-lite`` for the packaged standalone, ``milvus_lite-3.2.2`` for Lite)."""
    return str(call(location, "asking the server's version", client.get_server_version)).strip()


def version_number(version: str) -> tuple[int, int, int] | None:
    """The Milvus release a server's version string names (``v2.3.5-lite`` -> (2, 3, 5)); None for Milvus Lite,
    whose string is the Lite package's own version, or a string without a number."""
    if version.startswith("milvus_lite"):
        return None
    match = _VERSION.search(version)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
